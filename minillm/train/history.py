"""A run's metrics history on disk: ``history.json`` for programs, ``history.csv`` for spreadsheets and plots.

:class:`~minillm.train.loop.Trainer` keeps one record per step (loss, learning rate, gradient norm,
tokens/s, and the validation loss on evaluation steps); the CLI and the pipeline save it with
:func:`write_history`, so every run folder has the same two files.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from minillm.run_folder import write_all_atomically

#: The CSV's columns, in order; a record without one of them leaves its cell blank.
HISTORY_COLUMNS: tuple[str, ...] = ("step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "seconds", "skipped")


def write_history(history: list[dict], out_dir: Path) -> None:
    """``history.json`` (a list of records) and ``history.csv`` (one row per step, blanks where absent).

    Both appear together and whole, or not at all (a full disk leaves the previous pair).
    """
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(HISTORY_COLUMNS), extrasaction="ignore")
    writer.writeheader()
    for record in history:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in record.items()})
    write_all_atomically(
        {
            out_dir / "history.json": (json.dumps(history, indent=1) + "\n").encode("utf-8"),
            out_dir / "history.csv": table.getvalue().encode("utf-8"),
        }
    )
