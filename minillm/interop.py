"""Interop with the Hugging Face stack: a trained ``minillm`` model and tokenizer as a ``transformers`` folder.

``export_pretrained(model, folder, tokenizer)`` writes ``config.json`` + ``model.safetensors`` (and the
tokenizer as ``tokenizer.json`` + ``tokenizer_config.json``) so that ``AutoModelForCausalLM.from_pretrained``
and ``AutoTokenizer.from_pretrained`` load it offline. ``import_pretrained(hf_model)`` goes the other way, so the
course's code can inspect a real architecture's weights. Two architectures map one to one:

- the "gpt2-style" preset ↔ ``GPT2LMHeadModel`` (LayerNorm, GELU MLP, learned positions, biases). GPT-2's
  ``Conv1D`` layers store weights as [in, out], the transpose of ``nn.Linear``; the activation is written as
  ``"gelu"`` (exact), which is what ``minillm`` computes (the original GPT-2 used the tanh approximation,
  ``"gelu_new"``, which this import refuses rather than silently changing the model);
- the "llama-style" preset ↔ ``LlamaForCausalLM`` (RMSNorm, SwiGLU, RoPE in the half-split layout that Hugging
  Face also uses, no biases). ``minillm`` fuses q, k, v into one ``qkv`` matrix; Llama keeps three. A model
  with ``rope_style="interleaved"`` is converted on export: the rows of each head's q and k projections are
  reordered (even coordinates, then odd ones: ``embeddings.rope_permutation``), which turns its rotation into
  the half-split one and leaves every attention score, hence the logits, unchanged. Import gives the
  half-split style;
- llama-style + ``qk_norm`` ↔ ``Qwen3ForCausalLM``: Qwen3's ``q_norm``/``k_norm`` are RMSNorms over head_dim with
  one gain shared by the heads, applied before RoPE with the model's ``rms_norm_eps``, exactly minillm's QK-norm
  (an interleaved model's gains are reordered like its q and k rows). Qwen3 also holds sliding windows per layer
  (``layer_types``), so ``attn_window`` with any ``window_pattern`` exports too;
- llama-style + ``attn_window`` on every layer ↔ ``MistralForCausalLM`` (``sliding_window``): transformers lets
  query i see keys j with i − W < j ≤ i (``masking_utils.sliding_window_overlay``), itself and W − 1 before it,
  which is minillm's window W, so ``sliding_window = attn_window``.

Switches with no equivalent in these architectures are refused by name: ``logit_softcap`` (Gemma 2 has it, with
other differences: norms around each sub-layer, scaled embeddings, attention soft-capping), experts
(``n_experts``), a ``window_pattern`` mixing local and global layers without ``qk_norm`` (Mistral's window holds for
every layer), and any of them on a gpt2-style model.

``transformers`` is needed only here (it is in the test extra, not a runtime dependency).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from minillm.chat import ASSISTANT, CHAT_SPECIAL_TOKENS, END, ENDOFTEXT, ROLE_MARKERS
from minillm.checkpoint import _check_vocab_sizes
from minillm.embeddings import rope_permutation
from minillm.model import GPT, GPTConfig

__all__ = [
    "chat_template",
    "export_pretrained",
    "import_pretrained",
    "to_hf_config",
    "to_hf_state_dict",
    "architecture_of",
]

_GPT2 = dict(norm="layernorm", mlp="gelu", pos="learned", bias=True)
_LLAMA = dict(norm="rmsnorm", mlp="swiglu", pos="rope", bias=False)
#: The 2026 switches no exported architecture holds (their "off" values): a model using one is refused by name
#: rather than exported as a different model. (The expert settings act only with ``n_experts``.)
_NO_HF_EQUIVALENT = dict(logit_softcap=None, n_experts=None)
#: The transformers classes of the llama-style family, by :func:`architecture_of`'s name.
_LLAMA_FAMILY = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}


def _transformers():
    try:
        import transformers
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("Hugging Face interop needs `transformers`: pip install -e '.[test]'") from error
    return transformers


def architecture_of(config: GPTConfig) -> str:
    """ "gpt2", "llama", "qwen3" or "mistral": which ``transformers`` architecture holds this config exactly; else
    ValueError naming the setting that none of them holds."""
    for name, off in _NO_HF_EQUIVALENT.items():
        if getattr(config, name) != off:
            raise ValueError(
                f"{name}={getattr(config, name)!r} has no equivalent in GPT-2, Llama, Qwen3 or Mistral, the "
                f"transformers architectures this export writes; only a model with {name}={off!r} exports"
            )
    fields = {key: getattr(config, key) for key in _GPT2}
    if fields == _GPT2:
        for name, value in (("qk_norm", config.qk_norm), ("attn_window", config.attn_window)):
            if value not in (False, None):
                raise ValueError(
                    f"{name}={value!r} has no equivalent in GPT-2; a llama-style model with it exports (Qwen3, Mistral)"
                )
        if config.n_kv_head != config.n_head:
            raise ValueError("GPT-2 has no grouped-query attention: n_kv_head must equal n_head for a gpt2 export")
        return "gpt2"
    if fields == _LLAMA:
        if config.qk_norm:
            return "qwen3"
        if config.attn_window is None:
            return "llama"
        if None in [config.layer_window(i) for i in range(config.n_layer)]:
            raise ValueError(
                f"window_pattern={config.window_pattern!r} mixes local and global layers: Mistral's sliding_window "
                "holds for every layer, and Qwen3 (whose layer_types hold a mix) also has qk_norm; export with "
                "every layer local (window_pattern None or all 'L'), or with qk_norm=True"
            )
        return "mistral"
    raise ValueError(
        f"only the gpt2-style ({_GPT2}) and llama-style ({_LLAMA}) layouts map onto transformers; got {fields}"
    )


def to_hf_config(config: GPTConfig, bos_token_id: int | None = None, eos_token_id: int | None = None) -> Any:
    """The ``transformers`` config (``GPT2Config``, ``LlamaConfig``, ``Qwen3Config`` or ``MistralConfig``) of the
    same shape."""
    tf = _transformers()
    common = dict(vocab_size=config.vocab_size, tie_word_embeddings=config.tie_embeddings)
    common.update(bos_token_id=bos_token_id, eos_token_id=eos_token_id)
    architecture = architecture_of(config)
    llama_like = dict(
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layer,
        num_attention_heads=config.n_head,
        num_key_value_heads=config.n_kv_head,
        max_position_embeddings=config.context_length,
        rms_norm_eps=config.norm_eps,
        rope_theta=config.rope_base,
        hidden_act="silu",
    )
    if architecture == "qwen3":
        windows = [config.layer_window(i) for i in range(config.n_layer)]
        return tf.Qwen3Config(
            head_dim=config.head_dim,  # Qwen3's default is 128, not hidden_size / heads
            attention_bias=False,
            use_sliding_window=config.attn_window is not None,
            sliding_window=config.attn_window,
            layer_types=["full_attention" if w is None else "sliding_attention" for w in windows],
            **llama_like,
            **common,
        )
    if architecture == "mistral":
        return tf.MistralConfig(head_dim=config.head_dim, sliding_window=config.attn_window, **llama_like, **common)
    if architecture == "gpt2":
        return tf.GPT2Config(
            n_positions=config.context_length,
            n_embd=config.d_model,
            n_layer=config.n_layer,
            n_head=config.n_head,
            n_inner=config.d_ff,
            activation_function="gelu",
            layer_norm_epsilon=config.norm_eps,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **common,
        )
    return tf.LlamaConfig(attention_bias=False, mlp_bias=False, **llama_like, **common)


def _gpt2_names(n_layer: int) -> list[tuple[str, str, bool]]:
    """(minillm name, HF name, transpose?) for every GPT-2 tensor."""
    names = [("tok_emb.weight", "transformer.wte.weight", False), ("pos_emb.weight", "transformer.wpe.weight", False)]
    for i in range(n_layer):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        for a, b, t in [
            ("norm1.weight", "ln_1.weight", False),
            ("norm1.bias", "ln_1.bias", False),
            ("attn.qkv.weight", "attn.c_attn.weight", True),
            ("attn.qkv.bias", "attn.c_attn.bias", False),
            ("attn.proj.weight", "attn.c_proj.weight", True),
            ("attn.proj.bias", "attn.c_proj.bias", False),
            ("norm2.weight", "ln_2.weight", False),
            ("norm2.bias", "ln_2.bias", False),
            ("mlp.fc.weight", "mlp.c_fc.weight", True),
            ("mlp.fc.bias", "mlp.c_fc.bias", False),
            ("mlp.proj.weight", "mlp.c_proj.weight", True),
            ("mlp.proj.bias", "mlp.c_proj.bias", False),
        ]:
            names.append((ours + a, theirs + b, t))
    names += [("norm_f.weight", "transformer.ln_f.weight", False), ("norm_f.bias", "transformer.ln_f.bias", False)]
    return names


def _llama_names(n_layer: int) -> list[tuple[str, str]]:
    """(minillm name, HF name) for every Llama tensor except the fused qkv."""
    names = [("tok_emb.weight", "model.embed_tokens.weight")]
    for i in range(n_layer):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        names += [
            (ours + "norm1.weight", theirs + "input_layernorm.weight"),
            (ours + "attn.proj.weight", theirs + "self_attn.o_proj.weight"),
            (ours + "norm2.weight", theirs + "post_attention_layernorm.weight"),
            (ours + "mlp.gate.weight", theirs + "mlp.gate_proj.weight"),
            (ours + "mlp.up.weight", theirs + "mlp.up_proj.weight"),
            (ours + "mlp.down.weight", theirs + "mlp.down_proj.weight"),
        ]
    return names + [("norm_f.weight", "model.norm.weight")]


def to_hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """``model``'s weights under the ``transformers`` names and layouts (fresh contiguous tensors)."""
    config, ours = model.config, model.state_dict()
    out: dict[str, torch.Tensor] = {}
    architecture = architecture_of(config)
    if architecture == "gpt2":
        for a, b, transpose in _gpt2_names(config.n_layer):
            out[b] = ours[a].t() if transpose else ours[a]
    else:
        for a, b in _llama_names(config.n_layer):
            out[b] = ours[a]
        for i in range(config.n_layer):
            kv = config.n_kv_head * config.head_dim
            q, k, v = ours[f"blocks.{i}.attn.qkv.weight"].split([config.d_model, kv, kv], dim=0)
            if config.rope_style == "interleaved":
                q, k = _interleaved_to_half(q, config.head_dim), _interleaved_to_half(k, config.head_dim)
            for name, tensor in zip(("q_proj", "k_proj", "v_proj"), (q, k, v), strict=True):
                out[f"model.layers.{i}.self_attn.{name}.weight"] = tensor
            if architecture == "qwen3":  # one gain per head coordinate: reordered like the q and k rows
                order = rope_permutation(config.head_dim) if config.rope_style == "interleaved" else slice(None)
                for name in ("q_norm", "k_norm"):
                    out[f"model.layers.{i}.self_attn.{name}.weight"] = ours[f"blocks.{i}.attn.{name}.weight"][order]
    if not config.tie_embeddings:
        out["lm_head.weight"] = ours["lm_head.weight"]
    return {name: tensor.detach().clone().contiguous() for name, tensor in out.items()}


def _interleaved_to_half(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Reorder each head's output rows of a q or k projection so half-split RoPE rotates them as interleaved did."""
    order = rope_permutation(head_dim)
    return weight.view(-1, head_dim, weight.shape[-1])[:, order].reshape(weight.shape)


def export_pretrained(model: GPT, folder: str | Path, tokenizer: Any | None = None) -> Path:
    """Write ``model`` (and optionally its ``minillm`` tokenizer) as a ``transformers`` folder.

    Weights go to ``model.safetensors`` (no pickle). ``AutoModelForCausalLM.from_pretrained(folder)`` then gives
    logits equal to ``model``'s; with a tokenizer, ``AutoTokenizer.from_pretrained(folder)`` gives the same ids.
    A tokenizer whose ids the model does not have is refused before anything is written.
    """
    architecture_of(model.config)  # a model no architecture holds is refused before anything is written
    if tokenizer is not None:
        _check_vocab_sizes(tokenizer, model, "the tokenizer passed to export_pretrained", "the model", ValueError)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    eos = tokenizer.special_tokens.get(ENDOFTEXT) if tokenizer is not None else None
    hf_config = to_hf_config(model.config, bos_token_id=eos, eos_token_id=eos)
    tf = _transformers()
    name = architecture_of(model.config)
    architecture = tf.GPT2LMHeadModel if name == "gpt2" else getattr(tf, _LLAMA_FAMILY[name])
    hf_model = architecture(hf_config)
    missing, unexpected = hf_model.load_state_dict(to_hf_state_dict(model), strict=False)
    allowed_missing = {"lm_head.weight"} if model.config.tie_embeddings else set()
    if set(missing) - allowed_missing or unexpected:
        raise RuntimeError(f"weight mapping incomplete: missing {missing}, unexpected {unexpected}")
    if model.config.tie_embeddings:
        hf_model.tie_weights()
    hf_model.eval()
    hf_model.save_pretrained(folder, safe_serialization=True)
    if tokenizer is not None:
        export_tokenizer(tokenizer, folder)
    return folder


def chat_template() -> str:
    """The Jinja chat template of :mod:`minillm.chat`'s format, for ``apply_chat_template``.

    ``<|endoftext|>``, then each message as its role marker, content and ``<|end|>``; with
    ``add_generation_prompt`` the ``<|assistant|>`` that asks for a reply. Built from the chat module's markers,
    so the two cannot drift apart; unknown roles and a prompt that ends with the assistant are refused, as
    :func:`minillm.chat.encode_prompt` refuses them.
    """
    roles = "".join(
        f"{{% {'if' if i == 0 else 'elif'} message['role'] == {role!r} %}}{{{{ {marker!r} }}}}"
        for i, (role, marker) in enumerate(ROLE_MARKERS.items())
    )
    unknown = f"message roles must be one of {sorted(ROLE_MARKERS)}"
    return (
        f"{{{{ {ENDOFTEXT!r} }}}}"
        "{% for message in messages %}"
        f"{roles}{{% else %}}{{{{ raise_exception({unknown!r}) }}}}{{% endif %}}"
        f"{{{{ message['content'] }}}}{{{{ {END!r} }}}}"
        "{% endfor %}"
        "{% if add_generation_prompt %}"
        "{% if messages and messages[-1]['role'] == 'assistant' %}"
        "{{ raise_exception(\"the prompt's last message is the assistant's; nothing is left to generate\") }}"
        "{% endif %}"
        f"{{{{ {ASSISTANT!r} }}}}"
        "{% endif %}"
    )


def export_tokenizer(tokenizer: Any, folder: str | Path) -> Path:
    """Save a ``minillm`` tokenizer as a ``PreTrainedTokenizerFast`` folder (``tokenizer.json`` and config).

    A tokenizer with all of the chat markers also gets :func:`chat_template`, so ``apply_chat_template``
    renders a conversation exactly as :mod:`minillm.chat` encodes it.
    """
    from minillm.tokenizer.hf_export import to_tokenizers

    tf = _transformers()
    folder = Path(folder)
    specials = dict(tokenizer.special_tokens)
    extra = dict(bos_token=ENDOFTEXT, eos_token=ENDOFTEXT) if ENDOFTEXT in specials else {}
    fast = tf.PreTrainedTokenizerFast(tokenizer_object=to_tokenizers(tokenizer), **extra)
    fast.add_special_tokens({"additional_special_tokens": [t for t in specials if t != ENDOFTEXT]})
    if set(CHAT_SPECIAL_TOKENS) <= set(specials):
        fast.chat_template = chat_template()
    fast.save_pretrained(str(folder))
    (folder / "minillm_tokenizer.json").write_text(json.dumps({"special_tokens": specials}, indent=2) + "\n")
    return folder


def _windows_of(hf_config: Any) -> dict[str, Any]:
    """The GPTConfig switches of a llama-family config: ``qk_norm`` for Qwen3, and its sliding windows — Mistral's
    on every layer, Qwen3's on the layers ``layer_types`` names (as a ``window_pattern`` of one letter a layer)."""
    window = getattr(hf_config, "sliding_window", None)
    if hf_config.model_type == "mistral":
        return dict(attn_window=window)
    if hf_config.model_type != "qwen3":
        return {}
    types = list(getattr(hf_config, "layer_types", None) or ["full_attention"] * hf_config.num_hidden_layers)
    unknown = set(types) - {"full_attention", "sliding_attention"}
    if unknown:
        raise ValueError(f"Qwen3 layer types {sorted(unknown)} have no minillm form")
    if window is None or "sliding_attention" not in types:
        return dict(qk_norm=True)
    pattern = "".join("L" if kind == "sliding_attention" else "G" for kind in types)
    return dict(qk_norm=True, attn_window=window, window_pattern=None if set(pattern) == {"L"} else pattern)


def import_pretrained(hf_model: Any) -> GPT:
    """A ``minillm`` GPT holding the weights of a ``GPT2LMHeadModel``, ``LlamaForCausalLM``, ``Qwen3ForCausalLM``
    (QK-norm, and its sliding-window layers) or ``MistralForCausalLM`` (sliding window)."""
    hf_config = hf_model.config
    state = hf_model.state_dict()
    if hf_config.model_type == "gpt2":
        if hf_config.activation_function != "gelu":
            raise ValueError(
                f"GPT-2 activation {hf_config.activation_function!r} is not minillm's exact GELU; "
                "only activation_function='gelu' imports exactly"
            )
        config = GPTConfig(
            vocab_size=hf_config.vocab_size,
            context_length=hf_config.n_positions,
            n_layer=hf_config.n_layer,
            n_head=hf_config.n_head,
            d_model=hf_config.n_embd,
            d_ff=hf_config.n_inner or 4 * hf_config.n_embd,
            norm_eps=hf_config.layer_norm_epsilon,
            tie_embeddings=bool(hf_config.tie_word_embeddings),
            **_GPT2,
        )
        ours = {a: state[b].t() if transpose else state[b] for a, b, transpose in _gpt2_names(config.n_layer)}
    elif hf_config.model_type in _LLAMA_FAMILY:
        if getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False):
            raise ValueError(f"{hf_config.model_type} models with biases have no minillm llama-style form")
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        if head_dim * hf_config.num_attention_heads != hf_config.hidden_size:
            raise ValueError(
                f"head_dim={head_dim} × {hf_config.num_attention_heads} heads is not hidden_size="
                f"{hf_config.hidden_size}; minillm's heads split d_model"
            )
        rope = getattr(hf_config, "rope_parameters", None) or {}
        base = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"RoPE scaling {rope.get('rope_type')!r} has no minillm form")
        config = GPTConfig(
            vocab_size=hf_config.vocab_size,
            context_length=hf_config.max_position_embeddings,
            n_layer=hf_config.num_hidden_layers,
            n_head=hf_config.num_attention_heads,
            n_kv_head=hf_config.num_key_value_heads,
            d_model=hf_config.hidden_size,
            d_ff=hf_config.intermediate_size,
            norm_eps=hf_config.rms_norm_eps,
            rope_base=float(base),
            tie_embeddings=bool(hf_config.tie_word_embeddings),
            **_LLAMA,
            **_windows_of(hf_config),
        )
        ours = {a: state[b] for a, b in _llama_names(config.n_layer)}
        for i in range(config.n_layer):
            parts = [state[f"model.layers.{i}.self_attn.{n}_proj.weight"] for n in "qkv"]
            ours[f"blocks.{i}.attn.qkv.weight"] = torch.cat(parts, dim=0)
            if config.qk_norm:
                for name in ("q_norm", "k_norm"):
                    ours[f"blocks.{i}.attn.{name}.weight"] = state[f"model.layers.{i}.self_attn.{name}.weight"]
    else:
        raise ValueError(f"model type {hf_config.model_type!r} is not supported; use gpt2, {', '.join(_LLAMA_FAMILY)}")
    ours["lm_head.weight"] = ours["tok_emb.weight"] if config.tie_embeddings else state["lm_head.weight"]
    model = GPT(config)
    model.load_state_dict({k: v.detach().clone() for k, v in ours.items()})
    return model.eval()
