"""The run report: ``report.md`` with a table per phase and samples, and PNG plots beside it.

Plotting lives here, at the top of the library, never in a concept module; matplotlib is imported lazily
and uses the headless Agg backend.
"""

from __future__ import annotations

import json
from pathlib import Path


def _history(folder: Path):
    path = folder / "history.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _plots(folder: Path, metrics: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    pre = _history(folder / "pretrain") or []
    axes[0].plot([r["step"] for r in pre], [r["loss"] for r in pre], label="train", lw=1)
    val = [r for r in pre if r.get("val_loss") is not None]
    axes[0].plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="validation")
    axes[0].set(title="pretraining", xlabel="step", ylabel="cross-entropy (nats/token)")
    if pre:
        axes[0].legend()
    elif "from" in metrics["pretrain"]:  # the run started from a shipped checkpoint (the demo run size)
        shipped = metrics["pretrain"]
        note = f"not trained in this run:\n{Path(shipped['from']).name}, validation loss {shipped['val_loss']}"
        axes[0].text(0.5, 0.5, note, ha="center", va="center", transform=axes[0].transAxes)
    sft = _history(folder / "sft") or {"loss": []}
    axes[1].plot(sft["loss"], lw=1)
    axes[1].set(title="supervised fine-tuning", xlabel="step", ylabel="response-token loss")
    align = _history(folder / "align") or {}
    key = "loss" if "loss" in align else "reward"
    axes[2].plot(align.get(key, []), lw=1)
    axes[2].set(title=f"preference optimisation ({metrics['align']['algorithm']})", xlabel="step", ylabel=key)
    fig.tight_layout()
    fig.savefig(folder / "loss_curves.png", dpi=90)

    evaluation = metrics["eval"]
    phases = ["pretrain", "sft", "align"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.bar(
        phases,
        [evaluation[p]["gold"] for p in phases],
        yerr=[evaluation[p].get("gold_se", 0.0) for p in phases],  # runs written before the errors were recorded
        capsize=4,
        color=["#999", "#4c72b0", "#dd8452"],
    )
    ax1.set(title="gold score after each phase (± standard error)", ylabel="mean gold score (0-1)", ylim=(0, 1))
    for p in phases:
        ax2.scatter(evaluation[p]["kl_to_sft"], evaluation[p]["gold"], s=60, label=p)
    if "kl" in align:
        ax2.plot(align["kl"], align["gold"], ".-", alpha=0.5, label="PPO steps")
    ax2.set(
        title="gold score vs KL to the SFT model", xlabel="KL(model ‖ SFT) per response (nats)", ylabel="gold score"
    )
    ax2.legend()
    fig.tight_layout()
    fig.savefig(folder / "gold_and_kl.png", dpi=90)
    plt.close("all")
    return ["loss_curves.png", "gold_and_kl.png"]


def _table(rows: dict) -> str:
    lines = ["| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows.items() if not isinstance(v, list | dict)]
    return "\n".join(lines)


def _summary(metrics: dict) -> list[str]:
    """The evaluation of each phase's model (notebook 14's measures) as table rows and the paired gains."""
    evaluation = metrics["eval"]
    setting = evaluation.get("pass_at_k_setting")
    if setting is None:  # a run evaluated before these measures existed
        rows = ["| phase | gold score | KL to SFT | seconds |", "|---|---|---|---|"]
        for phase, label in (("pretrain", "base model"), ("sft", "after SFT"), ("align", "after alignment")):
            e = evaluation[phase]
            rows.append(f"| {label} | {e['gold']:.3f} | {e['kl_to_sft']:.2f} | {metrics[phase]['seconds']} |")
        return rows
    ks = list(evaluation["sft"]["pass_at_k"])
    rows = [
        "| phase | gold score ± SE | 95 % bootstrap interval | " + " | ".join(f"pass@{k}" for k in ks)
        + " | bits per byte | KL to SFT | seconds |",
        "|---" * (6 + len(ks)) + "|",
    ]  # fmt: skip
    for phase, label in (("pretrain", "base model"), ("sft", "after SFT"), ("align", "after alignment")):
        e = evaluation[phase]
        low, high = e["gold_interval_95"]
        rows.append(
            f"| {label} | {e['gold']:.3f} ± {e['gold_se']:.3f} | [{low:.3f}, {high:.3f}] | "
            + " | ".join(f"{e['pass_at_k'][k]:.3f}" for k in ks)
            + f" | {e['bits_per_byte']:.3f} | {e['kl_to_sft']:.2f} | {metrics[phase]['seconds']} |"
        )
    sft, align = evaluation["sft_vs_pretrain"], evaluation["align_vs_sft"]
    rows += [
        "",
        f"Gold score of greedy replies to {evaluation['n_prompts']} prompts;"
        f" pass@k: {setting['samples']} sampled replies (temperature 1) to each of {setting['questions']} questions,"
        f" correct when the gold score is ≥ {setting['correct_at']}; bits per byte of held-out stories (comparable"
        " across tokenizers). Paired by prompt: SFT − base"
        f" {sft['gold_gain']:+.3f} ± {sft['se']:.3f}, aligned − SFT {align['gold_gain']:+.3f} ± {align['se']:.3f}"
        " (a gain within about two standard errors of zero is noise).",
    ]
    return rows


def write_report(folder: Path, metrics: dict, settings: dict) -> Path:
    """Write ``report.md`` and the plots; returns the report's path."""
    plots = _plots(folder, metrics)
    evaluation = metrics["eval"]
    parts = [
        "# minillm pipeline report",
        "",
        f"Run size `{settings['run_size']}`, preference optimisation `{settings['algorithm']}`, "
        f"pretraining text `{settings['text']['path']}`, seed {settings['seed']}, device `{settings['device']}`.",
        "",
        "## Summary",
        "",
        *_summary(metrics),
    ]
    for phase in ("tokenizer", "pretrain", "sft", "align"):
        parts += ["", f"## {phase}", "", _table(metrics[phase])]
    parts += ["", "## Samples", "", "Pretrained model, from `<|endoftext|>`:", ""]
    parts += [f"> {s}" for s in metrics["pretrain"].get("samples", [])]
    for i, prompt in enumerate(evaluation["prompts"]):
        parts += ["", f"**Prompt:** {prompt!r}", ""]
        for phase in ("pretrain", "sft", "align"):
            parts.append(f"- *{phase}:* {evaluation[phase]['replies'][i]!r}")
    parts += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    parts += ["", "## Talk to it", "", f"`python -m minillm chat --model {folder / 'align'}` (or `{folder / 'sft'}`);"
              f" `/compare base {folder / 'sft'} {folder / 'align'}` there asks them side by side."]  # fmt: skip
    report = folder / "report.md"
    report.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return report
