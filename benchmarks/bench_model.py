"""Training throughput of minillm's GPT against a minimal plain-PyTorch GPT of the same shape.

Both models are the "gpt2-style" architecture (LayerNorm, GELU MLP, learned positions, biases, tied head)
at a small size, trained with AdamW on random tokens in float32. Configurations are timed in
interleaved rounds within one process, so a busy machine slows them alike; the printed numbers that
matter are the ratios to the baseline, measured in the same run:

* minillm (SDPA fast path) / baseline — must be ≥ 1.0 (within timing noise);
* minillm (written-out attention) / baseline — the price of the readable path.

Run:  python benchmarks/bench_model.py            (≈ 1 minute on 2 cores)
      python benchmarks/bench_model.py --rounds 3 --steps 5   (a quick look)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from minillm.model import GPT, GPTConfig


class PlainBlock(nn.Module):
    def __init__(self, d: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class PlainGPT(nn.Module):
    """The baseline: the same architecture in the fewest lines of stock PyTorch modules."""

    def __init__(self, vocab: int, context: int, n_layer: int, n_head: int, d: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(PlainBlock(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def make_step(model: nn.Module, vocab: int):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8, help="training steps per timed round")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds per configuration")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    config = GPTConfig.preset(
        "gpt2-style", vocab_size=args.vocab, context_length=args.context, n_layer=args.layers,
        n_head=args.heads, d_model=args.width,
    )  # fmt: skip
    models = {
        "baseline (plain PyTorch)": PlainGPT(args.vocab, args.context, args.layers, args.heads, args.width),
        "minillm sdpa": GPT(config),
        "minillm manual": GPT(GPTConfig.from_dict({**config.to_dict(), "attn_impl": "manual"})),
    }
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"parameter counts differ: {counts}")
    print(
        f"gpt2-style, {args.layers} layers, width {args.width}, {args.heads} heads, context {args.context}, "
        f"batch {args.batch}, vocab {args.vocab}, float32, AdamW; {counts['minillm sdpa']:,} parameters each; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )

    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, args.vocab, (args.batch, args.context + 1), generator=g)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    steps = {name: make_step(m, args.vocab) for name, m in models.items()}
    for step in steps.values():  # warm-up: allocator, kernels, optimizer state
        for _ in range(2):
            step(x, y)

    rates: dict[str, list[float]] = {name: [] for name in models}
    tokens = args.steps * args.batch * args.context
    for r in range(args.rounds):
        order = list(models) if r % 2 == 0 else list(reversed(models))  # alternate the order of the runs
        for name in order:
            start = time.perf_counter()
            for _ in range(args.steps):
                loss = steps[name](x, y)
            rates[name].append(tokens / (time.perf_counter() - start))
            if not math.isfinite(loss):
                raise SystemExit(f"{name}: loss became {loss}")

    base = statistics.median(rates["baseline (plain PyTorch)"])
    print(f"{'model':<26}{'median tokens/s':>16}{'ratio to baseline':>20}")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:<26}{median:>16,.0f}{median / base:>20.3f}")
    ratio = statistics.median(rates["minillm sdpa"]) / base
    verdict = "PASS" if ratio >= 1.0 else ("WITHIN NOISE (≥ 0.97)" if ratio >= 0.97 else "FAIL")
    print(f"fast path ratio {ratio:.3f}: {verdict} (target ≥ 1.0)")
    manual = statistics.median(rates["minillm manual"]) / base
    print(f"written-out attention costs {1 / manual:.2f}× the baseline's time per token")


if __name__ == "__main__":
    main()
