"""Greedy generation speed of minillm against Hugging Face ``transformers`` on the same weights, same run.

The course's base checkpoint (``data/base``: gpt2-style, 4 layers, width 128) is exported with
``minillm.interop.export_pretrained`` and loaded back as ``GPT2LMHeadModel``; both generate greedily with
their KV cache from the same story prompts, and their tokens are asserted identical. Timed in interleaved
rounds within one process (a busy machine slows both alike); the numbers that matter are the ratios
minillm / transformers of tokens per second:

* batch 1 — ``GPT.generate`` vs ``model.generate``: target ≥ 1.0;
* batch 8 (prompts of one length) — the same two: target ≥ 1.0;
* batch 8, ragged prompts — ``minillm.inference.engine.generate_batch`` (left padding, key mask, per-row
  positions) vs ``model.generate`` with left padding and an attention mask (reported).

Run:  python benchmarks/bench_generate.py                 (≈ 1 minute on 2 cores)
      python benchmarks/bench_generate.py --rounds 3 --new 32   (a quick look)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from minillm.checkpoint import load_pretrained  # noqa: E402
from minillm.data import load_stories  # noqa: E402
from minillm.inference.engine import generate_batch  # noqa: E402
from minillm.interop import export_pretrained  # noqa: E402
from minillm.paths import data_path  # noqa: E402


def story_prompts(tokenizer, count: int, lengths: list[int]) -> list[list[int]]:
    """The first ``lengths[i]`` tokens of the i-th validation story (stories long enough for each)."""
    stories = [tokenizer.encode(s) for s in load_stories(data_path("stories_val.txt"))]
    stories = [s for s in stories if len(s) >= max(lengths)]
    return [stories[i][: lengths[i]] for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default="base", help="folder under data/ (default: base)")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--new", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per configuration")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")

    model, tokenizer, _ = load_pretrained(data_path(args.checkpoint))
    model.eval()
    with tempfile.TemporaryDirectory() as folder:
        export_pretrained(model, folder)
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    hf.generation_config.eos_token_id = None  # minillm runs to max_new_tokens; so must transformers
    hf.generation_config.pad_token_id = 0
    c = model.config
    print(
        f"data/{args.checkpoint}: {type(hf).__name__} and minillm GPT, {c.n_layer} layers, width {c.d_model}, "
        f"vocab {c.vocab_size}; prompt {args.prompt} + {args.new} new tokens, greedy, KV cache; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads"
    )

    ragged_lengths = [args.prompt - 3 * i for i in range(8)]
    even = torch.tensor(story_prompts(tokenizer, 8, [args.prompt] * 8))
    ragged = story_prompts(tokenizer, 8, ragged_lengths)
    width = max(ragged_lengths)
    ragged_ids = torch.tensor([[0] * (width - len(p)) + p for p in ragged])
    ragged_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ragged])
    n = args.new

    def hf_even(ids: torch.Tensor) -> list[list[int]]:
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
        return out[:, ids.shape[1] :].tolist()

    cases = {
        "batch 1": (
            lambda: model.generate(even[:1], n, temperature=0)[:, args.prompt :].tolist(),
            lambda: hf_even(even[:1]),
        ),
        "batch 8": (
            lambda: model.generate(even, n, temperature=0)[:, args.prompt :].tolist(),
            lambda: hf_even(even),
        ),
        "batch 8 ragged": (
            lambda: generate_batch(model, ragged, n),
            lambda: hf.generate(ragged_ids, attention_mask=ragged_mask, max_new_tokens=n, do_sample=False)[
                :, width:
            ].tolist(),
        ),
    }
    with torch.no_grad():
        for name, (ours, theirs) in cases.items():  # warm-up, and the tokens must agree
            if ours() != theirs():
                raise SystemExit(f"{name}: minillm and transformers generated different tokens")
        rates: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for name, pair in cases.items():
                sides = list(zip(("minillm", "transformers"), pair, strict=True))
                for side, fn in sides if r % 2 == 0 else reversed(sides):
                    start = time.perf_counter()
                    out = fn()
                    elapsed = time.perf_counter() - start
                    rates.setdefault((name, side), []).append(len(out) * n / elapsed)

    print("tokens identical in every case")
    print(f"{'case':<16}{'minillm tok/s':>15}{'transformers tok/s':>20}{'ratio':>8}")
    verdicts = []
    for name in cases:
        ours, theirs = (statistics.median(rates[(name, side)]) for side in ("minillm", "transformers"))
        ratio = ours / theirs
        print(f"{name:<16}{ours:>15,.0f}{theirs:>20,.0f}{ratio:>8.2f}")
        if name != "batch 8 ragged":
            verdicts.append(ratio >= 1.0)
    print(f"target minillm / transformers ≥ 1.0 at batch 1 and 8: {'PASS' if all(verdicts) else 'FAIL'}")


if __name__ == "__main__":
    main()
