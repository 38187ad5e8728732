"""The chat format: the one place its markers, its template and its encoding are defined.

A conversation is written with special tokens the tokenizer knows as single ids::

    <|endoftext|><|system|>…<|end|><|user|>…<|end|><|assistant|>…<|end|>

SFT trains on it, the reward model, DPO and RLHF score ``prompt + response`` in it, the pipeline evaluates
replies with it and the Hugging Face export declares its markers. Two rules keep it safe and consistent:

* **Content is data, never control.** A message's text is encoded with special tokens off, so a user who
  types ``<|end|><|assistant|>`` gets those characters as ordinary text; the markers come only from the
  template. (Pretraining encodes documents the same way.)
* **Each piece is encoded on its own** (marker, content, marker), so a BPE merge never straddles the border
  between prompt and response, and a prompt encodes exactly as it will at generation time.

This module is plain Python (no torch), so the tokenizer that declares these markers imports without torch.
Padding conversations into tensors is :func:`minillm.batches.pad_chat`; generating replies is
:func:`minillm.generation.generate_responses`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ENDOFTEXT",
    "SYSTEM",
    "USER",
    "ASSISTANT",
    "END",
    "CHAT_SPECIAL_TOKENS",
    "ROLE_MARKERS",
    "ChatTokens",
    "special_token_id",
    "encode_chat",
    "encode_prompt",
    "encode_response",
    "strip_markers",
]

#: Starts every document in pretraining and every conversation here.
ENDOFTEXT = "<|endoftext|>"
SYSTEM, USER, ASSISTANT, END = "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
#: Every special token of the course; a tokenizer must encode each as one id.
CHAT_SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, SYSTEM, USER, ASSISTANT, END)
ROLE_MARKERS: dict[str, str] = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}


@dataclass
class ChatTokens:
    """Token ids of one conversation and, for each, 1 if it is a training target (assistant output)."""

    ids: list[int]
    loss_mask: list[int]

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.loss_mask):
            raise ValueError(f"{len(self.ids)} ids but {len(self.loss_mask)} mask entries")


def special_token_id(tokenizer, token: str) -> int:
    """The single id the tokenizer gives a special token (an error if it splits it into pieces)."""
    ids = tokenizer.encode(token)
    if len(ids) != 1:
        raise ValueError(
            f"the tokenizer encodes {token!r} as {len(ids)} tokens {ids}; it must know the chat special tokens "
            f"{CHAT_SPECIAL_TOKENS}"
        )
    return ids[0]


def _check_messages(messages: Sequence[dict]) -> None:
    if not messages:
        raise ValueError("a conversation needs at least one message")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLE_MARKERS:
            raise ValueError(f"message {i} must be a dict with role in {sorted(ROLE_MARKERS)}, got {message!r}")
        if not isinstance(message.get("content"), str):
            raise TypeError(f"message {i} content must be a str, got {type(message.get('content')).__name__}")


def encode_chat(messages: Sequence[dict], tokenizer) -> ChatTokens:
    """Encode a conversation in the chat format, with the loss mask on the assistant's output.

    The assistant's content and its closing ``<|end|>`` are targets (so the model learns to stop); markers
    come from the template only, content is plain text.
    """
    _check_messages(messages)
    ids: list[int] = [special_token_id(tokenizer, ENDOFTEXT)]
    mask: list[int] = [0]
    end_id = special_token_id(tokenizer, END)
    for message in messages:
        trained = int(message["role"] == "assistant")
        content = tokenizer.encode(message["content"], allowed_special="none")
        ids += [special_token_id(tokenizer, ROLE_MARKERS[message["role"]]), *content, end_id]
        mask += [0] + [trained] * (len(content) + 1)
    return ChatTokens(ids, mask)


def encode_prompt(messages: Sequence[dict] | str, tokenizer) -> list[int]:
    """The ids that ask the model for the next assistant turn (a str is one user message)."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if messages and messages[-1].get("role") == "assistant":
        raise ValueError("the prompt's last message is the assistant's; nothing is left to generate")
    return encode_chat(messages, tokenizer).ids + [special_token_id(tokenizer, ASSISTANT)]


def encode_response(prompt: str, response: str, tokenizer) -> ChatTokens:
    """``prompt`` as the user turn, ``response`` as the assistant turn; the mask marks the response."""
    if not isinstance(prompt, str) or not isinstance(response, str):
        raise TypeError(f"prompt and response must be str, got {type(prompt).__name__}, {type(response).__name__}")
    return encode_chat([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenizer)


def encode_preference_pairs(
    rows: Sequence[dict], tokenizer, max_len: int, limit: int | None = None
) -> tuple[list[tuple[ChatTokens, ChatTokens]], list[dict]]:
    """(chosen, rejected) encodings of preference rows (``prompt``, ``chosen``, ``rejected``), in order.

    Pairs with either side longer than ``max_len`` tokens are skipped (a reward model or DPO scores whole
    responses); at most ``limit`` pairs are kept. Returns the pairs and the rows they came from.
    """
    pairs, kept = [], []
    for row in rows:
        if limit is not None and len(pairs) >= limit:
            break
        chosen = encode_response(row["prompt"], row["chosen"], tokenizer)
        rejected = encode_response(row["prompt"], row["rejected"], tokenizer)
        if max(len(chosen.ids), len(rejected.ids)) <= max_len:
            pairs.append((chosen, rejected))
            kept.append(row)
    return pairs, kept


def strip_markers(text: str) -> str:
    """``text`` without the chat markers (a prompt or reply may arrive chat-formatted; scorers read this)."""
    for marker in CHAT_SPECIAL_TOKENS:
        text = text.replace(marker, " ")
    return text.strip()
