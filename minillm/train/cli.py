"""``python -m minillm.train``: tokenizer training + pretraining on any UTF-8 text file.

    python -m minillm.train --config configs/course.json              # the course's base checkpoint
    python -m minillm.train --train-file my.txt --val-file my_val.txt --max-steps 300 --out-dir runs/mine
    torchrun --nproc_per_node=2 -m minillm.train --config configs/course.json   # data parallel

Every :class:`~minillm.train.config.TrainConfig` field is a flag (``--max-steps``, ``--lr`` ...); flags
override the config file. This module only turns flags into a config; the run itself (what it writes to
``out_dir`` and ``work_dir``, and how ``--resume`` continues) is :func:`minillm.train.run.run`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from minillm.train.config import TrainConfig
from minillm.train.run import run


def _parse_value(kind: str) -> Callable[[str], int | float | str | None]:
    def parse(text: str) -> int | float | str | None:
        if "None" in kind and text.lower() in ("none", "null"):
            return None
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("float"):
            return float(text)
        return text

    return parse


def build_parser() -> argparse.ArgumentParser:
    """One flag per :class:`TrainConfig` field (``--no-<flag>`` for booleans), plus ``--config`` and ``--resume``."""
    parser = argparse.ArgumentParser(
        prog="python -m minillm.train",
        description="Train a BPE tokenizer and pretrain a GPT on a text file (documents = paragraphs).",
    )
    parser.add_argument("--config", help="JSON file with TrainConfig fields (flags override it)")
    parser.add_argument("--resume", action="store_true", help="continue from <work_dir>/checkpoint.pt")
    for field in dataclasses.fields(TrainConfig):
        flag = "--" + field.name.replace("_", "-")
        if field.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            parser.add_argument(flag, type=_parse_value(str(field.type)), default=None, metavar=field.name.upper())
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Defaults, overridden by the ``--config`` file, overridden by the flags given on the command line."""
    values = TrainConfig.from_json(args.config).to_dict() if args.config else {}
    for field in dataclasses.fields(TrainConfig):
        given = getattr(args, field.name)
        if given is not None:
            values[field.name] = given
    return TrainConfig.from_dict(values)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m minillm.train`` and the ``minillm-train`` console script."""
    args = build_parser().parse_args(argv)
    run(config_from_args(args), resume=args.resume)
