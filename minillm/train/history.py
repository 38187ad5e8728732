"""A run's metrics history on disk: ``history.json`` for programs, ``history.csv`` for spreadsheets and plots.

:class:`~minillm.train.loop.Trainer` keeps one record per step (loss, learning rate, gradient norm,
tokens/s, and the validation loss on evaluation steps); the CLI and the pipeline save it with
:func:`write_history`, so every run folder has the same two files.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

#: The CSV's columns, in order; a record without one of them leaves its cell blank.
HISTORY_COLUMNS: tuple[str, ...] = ("step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "seconds", "skipped")


def write_history(history: list[dict], out_dir: Path) -> None:
    """``history.json`` (a list of records) and ``history.csv`` (one row per step, blanks where absent)."""
    (out_dir / "history.json").write_text(json.dumps(history, indent=1) + "\n", encoding="utf-8")
    with open(out_dir / "history.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(HISTORY_COLUMNS), extrasaction="ignore")
        writer.writeheader()
        for record in history:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in record.items()})
