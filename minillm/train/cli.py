"""``python -m minillm.train``: tokenizer training + pretraining on any UTF-8 text file.

    python -m minillm.train --config configs/course.json              # the course's base checkpoint
    python -m minillm.train --train-file my.txt --val-file my_val.txt --max-steps 300 --out-dir runs/mine
    python -m minillm.train --config configs/course.json --resume --max-steps 1400   # continue, train longer
    torchrun --nproc_per_node=2 -m minillm.train --config configs/course.json   # data parallel

Every :class:`~minillm.train.config.TrainConfig` field is a flag (``--max-steps``, ``--lr`` ...); flags
override the config file, and ``none`` gives a setting that allows it the value None (``--val-file none``: no
validation; ``--grad-clip none``: no clipping). This module only turns flags into a config; the run itself
(what it writes to ``out_dir`` and ``work_dir``, and how ``--resume`` continues) is :func:`minillm.train.run.run`.

A run never silently replaces another. An ``--out-dir`` that already holds a run is refused unless you pass
``--resume`` (continue it from its checkpoint) or ``--overwrite`` (delete its files and start again). On
``--resume`` every setting and the content of the train and validation files must match the run's
``run.json``; only the settings in :data:`minillm.train.run.RESUMABLE_FIELDS` may change (``--max-steps``
to train longer, and how often it evaluates, checkpoints and prints). While a run writes, ``run.lock`` in
``--out-dir`` keeps a second run out; a lock left by a killed run is taken over by the next one.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from minillm.checkpoint import CheckpointError
from minillm.device import DeviceError
from minillm.run_folder import DiskFullError, RunFolderError
from minillm.train.config import ConfigError, TrainConfig
from minillm.train.loop import DataError
from minillm.train.run import RESUMABLE_FIELDS, run


def _parse_value(kind: str) -> Callable[[str], int | float | str | None]:
    """The parser of a flag for a field annotated ``kind``: ``none``/``null`` is None where the field allows it.

    Why it raises ``ArgumentTypeError``: argparse then names the flag and the value (exit status 2).
    """
    optional = "None" in kind
    words = {"int": "a whole number", "float": "a number"}.get(kind.split("|")[0].strip())

    def parse(text: str) -> int | float | str | None:
        if optional and text.lower() in ("none", "null"):
            return None
        if words is None:
            return text
        try:
            return int(text) if kind.startswith("int") else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {words}{' or none' if optional else ''}, got {text!r}"
            ) from None

    return parse


def build_parser() -> argparse.ArgumentParser:
    """One flag per :class:`TrainConfig` field (``--no-<flag>`` for booleans), plus ``--config``, ``--resume``
    and ``--overwrite``."""
    parser = argparse.ArgumentParser(
        prog="python -m minillm.train",
        description="Train a BPE tokenizer and pretrain a GPT on a text file (documents = paragraphs). "
        "An --out-dir that holds a run is only continued (--resume) or replaced (--overwrite) when asked.",
    )
    parser.add_argument("--config", help="JSON file with TrainConfig fields (flags override it)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out-dir from <work_dir>/checkpoint.pt; its other settings and input files "
        f"must match the run's run.json, only these may change: {', '.join(RESUMABLE_FIELDS)}",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --out-dir (its model, history, checkpoint and token files are deleted; "
        "only in a folder whose run.json shows a minillm run, and nothing that run did not write)",
    )
    # A flag not given leaves no attribute (SUPPRESS), so a flag given as `none` is told apart from one not given.
    for field in dataclasses.fields(TrainConfig):
        flag = "--" + field.name.replace("_", "-")
        if field.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS)
        else:
            parser.add_argument(
                flag, type=_parse_value(str(field.type)), default=argparse.SUPPRESS, metavar=field.name.upper()
            )
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Defaults, overridden by the ``--config`` file, overridden by the flags given (``none`` too); checked once."""
    values = TrainConfig.json_settings(args.config) if args.config else {}
    given = vars(args)
    for field in dataclasses.fields(TrainConfig):
        if field.name in given:
            values[field.name] = given[field.name]
    try:
        return TrainConfig.from_dict(values)
    except ConfigError as err:
        raise ConfigError(f"{args.config} with the flags given: {err}" if args.config else str(err)) from err


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m minillm.train`` and the ``minillm-train`` console script."""
    args = build_parser().parse_args(argv)
    try:
        run(config_from_args(args), resume=args.resume, overwrite=args.overwrite)
    except (
        RunFolderError,
        ConfigError,
        DeviceError,
        FileNotFoundError,
        DataError,
        CheckpointError,
        DiskFullError,
    ) as error:
        raise SystemExit(f"error: {error}") from error
