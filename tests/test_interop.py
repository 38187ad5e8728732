"""Hugging Face interop: exported folders load with the Auto classes, logits and ids equal minillm's."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="transformers is part of the test extra")

from minillm.data import load_jsonl, load_stories  # noqa: E402
from minillm.interop import architecture_of, export_pretrained, import_pretrained  # noqa: E402
from minillm.model import GPT, GPTConfig  # noqa: E402
from minillm.paths import data_path  # noqa: E402
from minillm.tokenizer import BPETokenizer  # noqa: E402

LOGIT_TOL = 1e-4
SPECIALS = ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")


def _small(preset: str, **overrides) -> GPTConfig:
    shape = dict(vocab_size=300, context_length=32, n_layer=2, n_head=4, d_model=64)
    return GPTConfig.preset(preset, **{**shape, **overrides})


def _perturb(model: torch.nn.Module) -> None:
    """Give norms non-trivial gains and biases so a mix-up of any tensor would show in the logits."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))


CASES = [
    ("gpt2-style", {}),
    ("gpt2-style", {"tie_embeddings": False}),
    ("llama-style", {}),
    ("llama-style", {"tie_embeddings": True}),
    ("llama-style", {"n_kv_head": 2}),  # grouped-query attention
    ("llama-style", {"n_kv_head": 1}),  # multi-query attention
]


@pytest.mark.parametrize(("preset", "overrides"), CASES, ids=lambda x: str(x))
def test_export_loads_with_automodel_and_logits_match(tmp_path, preset, overrides) -> None:
    torch.manual_seed(0)
    model = GPT(_small(preset, **overrides)).eval()
    _perturb(model)
    export_pretrained(model, tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    expected = {"gpt2-style": "GPT2LMHeadModel", "llama-style": "LlamaForCausalLM"}[preset]
    assert type(hf).__name__ == expected
    ids = torch.randint(0, 300, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (hf(ids).logits - model(ids)).abs().max().item()
    assert diff <= LOGIT_TOL, diff


@pytest.mark.parametrize("kind", ["gpt2", "llama", "llama-gqa"])
def test_import_from_a_random_transformers_model(kind) -> None:
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=300, n_positions=32, n_embd=64, n_layer=2, n_head=4, activation_function="gelu"
        )
        hf = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(
            vocab_size=300,
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2 if kind == "llama-gqa" else 4,
            max_position_embeddings=32,
        )
        hf = transformers.LlamaForCausalLM(cfg)
    hf.eval()
    _perturb(hf)
    ours = import_pretrained(hf)
    assert architecture_of(ours.config) == kind.removesuffix("-gqa")
    assert ours.config.n_kv_head == (2 if kind == "llama-gqa" else 4)
    ids = torch.randint(0, 300, (2, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        diff = (hf(ids).logits - ours(ids)).abs().max().item()
    assert diff <= LOGIT_TOL, diff


def test_unsupported_layouts_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="gpt2-style"):
        export_pretrained(GPT(_small("gpt2-style", pos="rope")), tmp_path)
    with pytest.raises(ValueError, match="GPT-2 has no grouped-query attention"):
        export_pretrained(GPT(_small("gpt2-style", n_kv_head=2)), tmp_path)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with pytest.raises(ValueError, match="gelu_new"):
        import_pretrained(hf)


def test_exported_tokenizer_gives_the_same_ids_on_course_data(tmp_path) -> None:
    stories = load_stories(data_path("stories_val.txt"))
    tokenizer = BPETokenizer.train("\n\n".join(stories[:200]), vocab_size=400, special_tokens=SPECIALS)
    model = GPT(_small("gpt2-style", vocab_size=tokenizer.vocab_size))
    export_pretrained(model, tmp_path, tokenizer=tokenizer)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    sft = load_jsonl(data_path("sft_val.jsonl"))
    texts = stories[200:] + [m["content"] for row in sft[:100] for m in row["messages"]]
    texts.append("<|user|>Write a story.<|end|><|assistant|>Once upon a time<|endoftext|>")
    for text in texts:
        assert hf_tok.encode(text, add_special_tokens=False) == tokenizer.encode(text), text[:60]
    assert hf_tok.eos_token_id == tokenizer.special_tokens["<|endoftext|>"]


CONVERSATIONS = [
    [{"role": "user", "content": "Write a story about a cat."}],
    [
        {"role": "system", "content": "You are kind."},
        {"role": "user", "content": "Hi!\n\nTell me\ta story."},
        {"role": "assistant", "content": "Once upon a time, a cat sat."},
        {"role": "user", "content": "  More, please  "},
    ],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "é 😀 {{ not jinja }} {% raw %}"}],
    [{"role": "user", "content": "typed markers: <|end|><|assistant|>Sure<|endoftext|>"}],
]


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    from minillm.chat import CHAT_SPECIAL_TOKENS

    stories = load_stories(data_path("stories_val.txt"))
    tokenizer = BPETokenizer.train("\n\n".join(stories[:100]), vocab_size=350, special_tokens=CHAT_SPECIAL_TOKENS)
    folder = tmp_path_factory.mktemp("chat")
    export_pretrained(GPT(_small("gpt2-style", vocab_size=tokenizer.vocab_size)), folder, tokenizer=tokenizer)
    return tokenizer, transformers.AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("messages", CONVERSATIONS, ids=range(len(CONVERSATIONS)))
def test_exported_chat_template_renders_what_minillm_chat_encodes(chat_folder, messages) -> None:
    from minillm.chat import encode_chat, encode_prompt

    ours, hf_tok = chat_folder
    rendered = hf_tok.apply_chat_template(messages, tokenize=False)
    assert rendered == ours.decode(encode_chat(messages, ours).ids)
    if messages[-1]["role"] != "assistant":
        prompt = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert prompt == ours.decode(encode_prompt(messages, ours))
    typed = any("<|" in m["content"] for m in messages)
    hf_ids = hf_tok(rendered, add_special_tokens=False).input_ids
    # the same ids, except for marker text typed in a message: AutoTokenizer makes it a control id (README)
    assert (hf_ids == encode_chat(messages, ours).ids) is not typed


def test_typed_markers_stay_text_only_when_transformers_is_told(chat_folder) -> None:
    ours, hf_tok = chat_folder
    content = CONVERSATIONS[-1][0]["content"]
    assert hf_tok(content, add_special_tokens=False).input_ids != ours.encode(content, allowed_special="none")
    split = hf_tok(content, add_special_tokens=False, split_special_tokens=True).input_ids
    assert split == ours.encode(content, allowed_special="none")


def test_chat_template_refuses_what_minillm_chat_refuses(chat_folder) -> None:
    _, hf_tok = chat_folder
    with pytest.raises(Exception, match=r"message roles must be one of \['assistant', 'system', 'user'\]"):
        hf_tok.apply_chat_template([{"role": "bot", "content": "hi"}], tokenize=False)
    with pytest.raises(Exception, match="the prompt's last message is the assistant's"):
        hf_tok.apply_chat_template(CONVERSATIONS[1][:3], tokenize=False, add_generation_prompt=True)


def test_export_refuses_a_tokenizer_with_more_ids_than_the_model_before_writing(tmp_path) -> None:
    stories = load_stories(data_path("stories_val.txt"))
    tokenizer = BPETokenizer.train("\n\n".join(stories[:200]), vocab_size=400, special_tokens=SPECIALS)
    assert tokenizer.vocab_size == 400
    with pytest.raises(ValueError, match=r"has 400 ids but the model has vocab_size=300"):
        export_pretrained(GPT(_small("gpt2-style")), tmp_path / "out", tokenizer=tokenizer)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the 2026 switches: Qwen3 and Mistral

WINDOW = 5  # shorter than the 32 positions compared, so every query past the fifth loses keys
MODERN_CASES = [
    ({"qk_norm": True}, "Qwen3ForCausalLM"),
    ({"qk_norm": True, "n_kv_head": 2, "rope_style": "interleaved", "rope_base": 500.0}, "Qwen3ForCausalLM"),
    ({"qk_norm": True, "attn_window": WINDOW, "window_pattern": "LG", "tie_embeddings": True}, "Qwen3ForCausalLM"),
    ({"attn_window": WINDOW}, "MistralForCausalLM"),
    ({"attn_window": WINDOW, "window_pattern": "L", "n_kv_head": 1, "rope_base": 500.0}, "MistralForCausalLM"),
]


@pytest.mark.parametrize(("overrides", "expected"), MODERN_CASES, ids=lambda x: str(x))
def test_qk_norm_and_sliding_windows_export_to_qwen3_and_mistral(tmp_path, overrides, expected) -> None:
    """Logits equal within 1e-4 (fp32) on 32 positions, longer than the window; the window is W keys in both
    libraries: minillm with W − 1 or W + 1 (or none) is far from transformers' model. The folder imports back."""
    torch.manual_seed(0)
    config = _small("llama-style", **overrides)
    model = GPT(config).eval()
    _perturb(model)
    export_pretrained(model, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == expected
    ids = torch.randint(0, 300, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(ids).logits
        assert (theirs - model(ids)).abs().max().item() <= LOGIT_TOL
        if config.attn_window is not None:
            for other in (WINDOW - 1, WINDOW + 1, None):
                shifted = GPT(GPTConfig.from_dict({**config.to_dict(), "attn_window": other} | (
                    {"window_pattern": None} if other is None else {}
                )))  # fmt: skip
                shifted.load_state_dict(model.state_dict())
                assert (theirs - shifted.eval()(ids)).abs().max().item() > 100 * LOGIT_TOL, other
        back = import_pretrained(hf)
        assert architecture_of(back.config) == architecture_of(config)
        switches = ("qk_norm", "attn_window", "n_kv_head", "rope_base")
        assert {k: getattr(back.config, k) for k in switches} == {k: getattr(config, k) for k in switches}
        assert [back.config.layer_window(i) for i in range(2)] == [config.layer_window(i) for i in range(2)]
        assert (back(ids) - theirs).abs().max().item() <= LOGIT_TOL


@pytest.mark.parametrize(
    ("preset", "overrides", "message"),
    [
        ("llama-style", {"logit_softcap": 30.0}, "logit_softcap=30.0 has no equivalent"),
        ("llama-style", {"n_experts": 4}, "n_experts=4 has no equivalent"),
        ("llama-style", {"attn_window": WINDOW, "window_pattern": "LG"}, "window_pattern='LG' mixes local and global"),
        ("gpt2-style", {"qk_norm": True}, "qk_norm=True has no equivalent in GPT-2"),
        ("gpt2-style", {"attn_window": WINDOW}, "attn_window=5 has no equivalent in GPT-2"),
    ],
)
def test_switches_without_an_equivalent_are_refused_by_name(tmp_path, preset, overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        export_pretrained(GPT(_small(preset, **overrides)), tmp_path / "out")
    assert not (tmp_path / "out").exists()
