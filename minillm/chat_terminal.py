"""``python -m minillm chat``: talk to a trained model in the terminal, each reply printed as it is sampled.

The course ends with a model you trained and aligned; this is where you talk to it. A conversation is kept as
chat messages and encoded in the course's chat format (:mod:`minillm.chat`) — what you type is content, never
control: ``<|end|>`` typed in a message is seven ordinary characters. When the conversation no longer fits the
model's context, the oldest turns are dropped, and the chat says so. ``/compare base sft`` answers each prompt
with several models one after another, with the gold score when the prompt is one of the course's tasks.

Models: ``base``, ``sft`` and ``aligned`` are the checkpoints the course ships in ``data/``; a path may be a
:func:`minillm.checkpoint.save_pretrained` folder (what ``python -m minillm.train`` writes), a phase folder of a
pipeline run (``runs/pipeline/sft``, holding ``model/``), or a folder exported to Hugging Face's format by
:func:`minillm.interop.export_pretrained`.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import select
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TextIO

import torch

from minillm.chat import CHAT_SPECIAL_TOKENS, END, encode_prompt, special_token_id
from minillm.checkpoint import CheckpointError, load_pretrained
from minillm.model import GPT
from minillm.tokenizer import BPETokenizer

#: The checkpoints the course ships, by the name ``--model`` and ``/compare`` take (folders under ``data/``).
SHIPPED = {"base": "base_long", "sft": "posttrain/sft", "aligned": "posttrain/aligned"}
#: ``--quantize`` values: the weight formats of :mod:`minillm.inference.quantize` (bits), "none" keeps float
QUANTIZE = {"none": None, "int8": 8, "int4": 4}
MIN_REPLY_TOKENS = 16  # a prompt that leaves less room than this for the reply is refused

HELP = """commands:
  /help                      this list
  /reset                     forget the conversation (the model remembers nothing else)
  /settings                  show the sampling settings; /settings NAME VALUE changes one
                             (temperature, top_k, top_p, max_new_tokens, seed; 'none' turns top_k/top_p off)
  /compare MODEL MODEL ...   answer each prompt with every listed model (base, sft, aligned or a path),
                             one after another, each from a fresh conversation; /compare off goes back
  /example                   a prompt from the course's tasks (the gold scorer can judge the replies)
  /quit                      leave (so does Ctrl-D); Ctrl-C stops a reply"""


class ModelError(Exception):
    """A model that cannot be chatted with; the message is one line that says why and what to do."""


@dataclass
class ChatModel:
    """A model with its tokenizer, ready to chat."""

    name: str
    model: GPT
    tokenizer: BPETokenizer
    source: Path
    quantized: str = "none"

    @property
    def context_length(self) -> int:
        return self.model.config.context_length

    def describe(self) -> str:
        from minillm.inference.quantize import weight_bytes

        millions = sum(p.numel() for p in self.model.parameters()) / 1e6
        weights = (
            "" if self.quantized == "none" else f", {self.quantized} weights: {weight_bytes(self.model) / 1e6:.2f} MB"
        )
        return (
            f"{self.name} ({self.source}, {millions:.2f} M parameters{weights}, context {self.context_length} tokens)"
        )


def model_folder(spec: str) -> tuple[str, Path]:
    """(display name, folder) for a shipped model's name or a path."""
    if spec in SHIPPED:
        from minillm.paths import data_dir

        folder = data_dir() / SHIPPED[spec]
        if not folder.is_dir():
            raise ModelError(f"the course's {spec!r} model is not in {folder.parent} (expected {folder})")
        return spec, folder
    folder = Path(spec).expanduser().resolve()
    if not folder.exists():
        names = ", ".join(SHIPPED)
        raise ModelError(f"{spec}: no such folder (a model is one of {names} or a path to a saved model folder)")
    if not folder.is_dir():
        raise ModelError(f"{spec}: is a file; pass the folder that holds config.json and model.safetensors")
    if (folder / "model" / "config.json").is_file():  # a pipeline run's phase folder
        folder = folder / "model"
    return folder.name if folder.name != "model" else folder.parent.name, folder


def check_quantize(quantize: str) -> None:
    """``quantize`` is one of :data:`QUANTIZE`'s names; ValueError (one line, the choices) otherwise."""
    if quantize not in QUANTIZE:
        raise ValueError(f"--quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}")


def load_chat_model(spec: str, device: str | torch.device = "cpu", quantize: str = "none") -> ChatModel:
    """Load a shipped model or a folder (see the module doc), checking it can chat; ModelError otherwise.

    ``quantize`` "int8" or "int4" stores the blocks' linear weights in that format
    (:func:`minillm.inference.quantize.quantize_model`: int8 per output channel, int4 in groups of 32)."""
    check_quantize(quantize)
    name, folder = model_folder(spec)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelError(f"{folder}: no config.json, so not a saved model folder")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelError(f"{config_path}: unreadable ({error})") from None
    try:
        if isinstance(config, dict) and "model_type" in config:
            model, tokenizer = _load_exported(folder)
        else:
            model, tokenizer, _ = load_pretrained(folder, device=device)
    except (CheckpointError, FileNotFoundError, ValueError) as error:
        raise ModelError(f"{name}: {' '.join(str(error).split())}") from None
    if tokenizer is None:
        raise ModelError(f"{folder}: no tokenizer.json beside the model, so its ids cannot be turned into text")
    try:
        for token in CHAT_SPECIAL_TOKENS:
            special_token_id(tokenizer, token)
    except ValueError:
        raise ModelError(
            f"{folder}: its tokenizer lacks the chat markers {CHAT_SPECIAL_TOKENS}, so it cannot hold a conversation"
        ) from None
    model = model.to(device).eval()
    if QUANTIZE[quantize] is not None:
        from minillm.inference.quantize import quantize_model

        try:
            quantize_model(model, bits=QUANTIZE[quantize])
        except (TypeError, ValueError) as error:
            raise ModelError(f"{name}: cannot be quantised to {quantize}: {' '.join(str(error).split())}") from None
    return ChatModel(name, model, tokenizer, folder, quantize)


def _load_exported(folder: Path) -> tuple[GPT, BPETokenizer]:
    """A folder written by :func:`minillm.interop.export_pretrained`: the model through ``transformers``, the
    tokenizer rebuilt from the byte-level BPE in its ``tokenizer.json``."""
    from minillm.interop import _transformers, import_pretrained

    try:
        hf_model = _transformers().AutoModelForCausalLM.from_pretrained(str(folder))
        model = import_pretrained(hf_model)
    except Exception as error:  # transformers raises many kinds; say which, in one line
        raise ValueError(f"cannot load the Hugging Face model ({type(error).__name__}: {error})") from None
    path = folder / "tokenizer.json"
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
        vocab, merges = hf["model"]["vocab"], hf["model"]["merges"]
        specials = [t["content"] for t in hf.get("added_tokens", []) if t.get("special")]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a byte-level BPE tokenizer.json ({type(error).__name__}: {error})") from None
    with tempfile.TemporaryDirectory() as tmp:
        vocab_json, merges_txt = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        vocab_json.write_text(json.dumps(vocab), encoding="utf-8")
        lines = [m if isinstance(m, str) else " ".join(m) for m in merges]
        merges_txt.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tokenizer = BPETokenizer.from_gpt2_files(vocab_json, merges_txt, special_tokens=specials)
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(f"{path} has {tokenizer.vocab_size} ids but the model has {model.config.vocab_size}")
    return model.eval(), tokenizer


@dataclass
class Settings:
    """How replies are sampled; ``seed`` seeds the generator once, so a session replays exactly."""

    temperature: float = 0.8
    top_k: int | None = 40
    top_p: float | None = None
    max_new_tokens: int = 200
    seed: int = 0

    def set(self, name: str, text: str) -> None:
        """Change one setting from its text (ValueError, with the rule, when the value does not fit)."""
        if name not in {f.name for f in fields(self)}:
            raise ValueError(f"no setting {name!r}; the settings are {', '.join(f.name for f in fields(self))}")
        value: float | int | None
        try:
            if name in ("top_k", "top_p") and text.lower() == "none":
                value = None
            elif name in ("top_k", "max_new_tokens", "seed"):
                value = int(text)
            else:
                value = float(text)
        except ValueError:
            raise ValueError(f"{name} takes a number, got {text!r}") from None
        trial = Settings(**{**self.__dict__, name: value})
        trial.check()
        setattr(self, name, value)

    def check(self) -> None:
        if not (self.temperature >= 0 and self.temperature < float("inf")):
            raise ValueError(f"temperature must be a number ≥ 0 (0 = greedy), got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be ≥ 1 or none, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] or none, got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be ≥ 1, got {self.max_new_tokens}")

    def describe(self) -> str:
        return ", ".join(f"{f.name} {getattr(self, f.name)}" for f in fields(self))


class PromptTooLong(ValueError):
    """The newest message alone leaves no room for a reply in the model's context."""


def fit_history(
    messages: Sequence[dict], tokenizer: BPETokenizer, context_length: int, max_new_tokens: int
) -> tuple[list[int], int, int]:
    """(prompt ids, number of oldest messages dropped, reply budget) for a conversation that ends with the user.

    Whole turns go, oldest first, until the prompt leaves ``max_new_tokens`` of room; if even the newest message
    alone does not, the reply gets what room is left, at least :data:`MIN_REPLY_TOKENS`.
    """
    dropped = 0
    while True:
        ids = encode_prompt(list(messages[dropped:]), tokenizer)
        if len(ids) + max_new_tokens <= context_length or dropped == len(messages) - 1:
            break
        dropped += 2 if messages[dropped]["role"] == "user" and dropped + 2 < len(messages) else 1
    budget = min(max_new_tokens, context_length - len(ids))
    if budget < MIN_REPLY_TOKENS:
        raise PromptTooLong(
            f"your message is {len(ids)} tokens in the chat format; the model's context is {context_length}, "
            f"which leaves no room for a reply (at least {MIN_REPLY_TOKENS} tokens): shorten it"
        )
    return ids, dropped, budget


@dataclass
class ChatSession:
    """One conversation with a main model, plus the commands; ``write`` receives every piece of output."""

    main: ChatModel
    settings: Settings = field(default_factory=Settings)
    write: Callable[[str], None] = field(default=lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    load: Callable[[str], ChatModel] = load_chat_model
    history: list[dict] = field(default_factory=list)
    compare: list[str] = field(default_factory=list)
    _models: dict[str, ChatModel] = field(default_factory=dict)
    _generator: torch.Generator | None = None
    _examples: int = 0

    def __post_init__(self) -> None:
        self._models[self.main.name] = self.main
        self._generator = torch.Generator().manual_seed(self.settings.seed)

    def say(self, text: str) -> None:
        self.write(text + "\n")

    def handle(self, line: str) -> bool:
        """Act on one line the user typed; False when the user asked to leave."""
        text = line.strip()
        if not text:
            self.say("(an empty message: type something, or /help)")
            return True
        if text.startswith("/"):
            return self._command(text)
        if self.compare:
            self._compare(text)
            return True
        self.history.append({"role": "user", "content": line.rstrip("\n")})
        reply = self.answer(self.main, self.history)
        if reply is None:
            self.history.pop()
        else:
            self.history.append({"role": "assistant", "content": reply})
        return True

    def answer(self, chat_model: ChatModel, messages: list[dict], prefix: str = "") -> str | None:
        """Stream ``chat_model``'s reply to ``messages`` (oldest turns dropped to fit); None if refused."""
        s = self.settings
        try:
            ids, dropped, budget = fit_history(
                messages, chat_model.tokenizer, chat_model.context_length, s.max_new_tokens
            )
        except PromptTooLong as error:
            self.say(f"error: {error}")
            return None
        if dropped:
            del messages[:dropped]
            self.say(
                f"(the conversation outgrew the {chat_model.context_length}-token context: forgot the oldest "
                f"{dropped} message{'s' * (dropped != 1)})"
            )
        tokenizer = chat_model.tokenizer
        stops = {special_token_id(tokenizer, t) for t in CHAT_SPECIAL_TOKENS}
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pieces: list[str] = []
        self.write(prefix)
        tokens = chat_model.model.stream(
            torch.tensor([ids]),
            budget,
            temperature=s.temperature,
            top_k=s.top_k,
            top_p=s.top_p,
            generator=self._generator,
            eos_id=special_token_id(tokenizer, END),
        )
        stopped, count = "", 0
        try:
            for token in tokens:
                if token in stops:
                    break
                count += 1
                piece = decoder.decode(tokenizer.id_to_token(token))
                pieces.append(piece)
                self.write(piece)
            if count == budget:
                stopped = f" [cut after {budget} tokens: /settings max_new_tokens N allows more]"
        except KeyboardInterrupt:
            stopped = " [stopped]"
        finally:
            tokens.close()
        pieces.append(decoder.decode(b"", final=True))
        self.write(pieces[-1] + stopped + "\n")
        return "".join(pieces).strip()

    def _compare(self, prompt: str) -> None:
        from minillm.tasks import gold_score

        for spec in self.compare:
            chat_model = self._model(spec)
            if chat_model is None:
                continue
            reply = self.answer(chat_model, [{"role": "user", "content": prompt}], prefix=f"[{chat_model.name}] ")
            if reply is None:
                continue
            try:
                self.say(f"  gold score {gold_score(prompt, reply):.3f}")
            except ValueError:
                pass  # not one of the course's tasks: nothing knows the right answer

    def _model(self, spec: str) -> ChatModel | None:
        if spec not in self._models:
            try:
                self._models[spec] = self.load(spec)
            except ModelError as error:
                self.say(f"error: {error}")
                return None
        return self._models[spec]

    def _command(self, text: str) -> bool:
        name, *args = text.split()
        if name in ("/quit", "/exit"):
            return False
        if name == "/help":
            self.say(HELP)
        elif name == "/reset":
            self.history.clear()
            self.say("(conversation forgotten)")
        elif name == "/settings":
            if len(args) == 2:
                try:
                    self.settings.set(*args)
                    if args[0] == "seed":
                        self._generator = torch.Generator().manual_seed(self.settings.seed)
                except ValueError as error:
                    self.say(f"error: {error}")
                    return True
            elif args:
                self.say("usage: /settings, or /settings NAME VALUE")
                return True
            self.say(f"({self.settings.describe()}; model {self.main.describe()})")
        elif name == "/compare":
            self._set_compare(args)
        elif name == "/example":
            from minillm.tasks import eval_prompts

            self._examples += 1
            self.say(eval_prompts(self._examples, seed=self.settings.seed)[-1])
        else:
            self.say(f"unknown command {name}; /help lists them (a message that starts with / is read as one)")
        return True

    def _set_compare(self, args: list[str]) -> None:
        if args == ["off"]:
            self.compare = []
            self.say(f"(back to the conversation with {self.main.name})")
            return
        if len(args) < 2:
            self.say("usage: /compare MODEL MODEL ... (e.g. /compare base sft aligned), or /compare off")
            return
        loaded = [spec for spec in args if self._model(spec) is not None]
        if len(loaded) == len(args):
            self.compare = loaded
            self.say(f"(each prompt now goes to {', '.join(args)}, each from a fresh conversation; /compare off)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minillm chat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="base, sft, aligned (default: aligned, else sft) or a folder")
    defaults = Settings()
    parser.add_argument("--temperature", type=float, default=defaults.temperature, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=defaults.top_k)
    parser.add_argument("--top-p", type=float, default=defaults.top_p)
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    parser.add_argument(
        "--quantize", default="none", help="none, int8 or int4: store the blocks' weights in 8 or 4 bits (notebook 15)"
    )
    return parser


def main(argv: list[str] | None = None, stdin: TextIO | None = None) -> int:
    """Run the chat until the user leaves; exit status 1 with ``error: ...`` when the model cannot be used."""
    args = build_parser().parse_args(argv)
    settings = Settings(args.temperature, args.top_k, args.top_p, args.max_new_tokens, args.seed)
    try:
        settings.check()
        check_quantize(args.quantize)
        spec = args.model or ("aligned" if _shipped("aligned") else "sft")
        main_model = load_chat_model(spec, device=args.device, quantize=args.quantize)
    except (ModelError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    session = ChatSession(
        main_model, settings, load=lambda s: load_chat_model(s, device=args.device, quantize=args.quantize)
    )
    stdin = stdin or sys.stdin
    interactive = stdin.isatty()
    session.say(f"minillm chat with {main_model.describe()}; /help for commands, Ctrl-D to leave")
    while True:
        try:
            if interactive:
                line = _read_line("you> ")
            else:
                line = stdin.readline()
                if not line:
                    raise EOFError
                session.write(f"you> {line}")
        except EOFError:
            session.say("")
            return 0
        except KeyboardInterrupt:
            session.say("\n(Ctrl-D or /quit leaves)")
            continue
        try:
            if not session.handle(line):
                return 0
        except KeyboardInterrupt:  # Ctrl-C before the reply began (loading a model, encoding the prompt)
            session.say(" [stopped]")


def _read_line(prompt: str) -> str:
    """``input(prompt)``, but a Ctrl-C is noticed at once: the terminal's SIGINT may land on one of torch's worker
    threads, which does not interrupt the main thread's blocking read, so on POSIX the read waits in short
    ``select`` slices and Python checks for the signal between them."""
    if os.name != "posix":
        return input(prompt)
    sys.stdout.write(prompt)
    sys.stdout.flush()
    while not select.select([sys.stdin], [], [], 0.1)[0]:
        pass
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n")


def _shipped(name: str) -> bool:
    try:
        model_folder(name)
        return True
    except (ModelError, FileNotFoundError):
        return False
