"""minillm.train: the loop against a plain-PyTorch reference, exact resume, NaN guard, CLI and DDP."""

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from run_helpers import interrupt_training
from torch import nn

from minillm.batches import RandomWindows
from minillm.checkpoint import CheckpointError, load_checkpoint, load_pretrained
from minillm.model import GPT, GPTConfig
from minillm.train import TrainConfig, Trainer
from minillm.train.cli import build_parser, config_from_args, main
from minillm.train.config import ConfigError
from minillm.train.sharded import read_full_state, shard_files_of

TINY = dict(vocab_size=64, context_length=16, n_layer=2, n_head=2, d_model=32)


def _tokens(n: int = 4000, seed: int = 0) -> np.ndarray:
    """A learnable stream: a noisy repeating pattern over 64 ids."""
    rng = np.random.default_rng(seed)
    base = np.tile(np.arange(0, 64, 3), n // 22 + 1)[:n]
    noise = rng.random(n) < 0.1
    return np.where(noise, rng.integers(0, 64, n), base)


def _model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig.preset("gpt2-style", **TINY))


def _config(**overrides) -> TrainConfig:
    base = dict(
        context_length=16, batch_size=4, grad_accum=1, max_steps=12, lr=3e-3, min_lr=3e-4, warmup_steps=3,
        eval_interval=4, eval_batches=2, progress=False, seed=5,
    )  # fmt: skip
    return TrainConfig(**{**base, **overrides})


def test_loop_equals_plain_pytorch_reference_with_accumulation():
    """Trainer (2 micro-batches of 4) == full-batch torch.optim.AdamW loop with clip_grad_norm_ (float64)."""
    config = _config(grad_accum=2, batch_size=4, grad_clip=0.5, max_steps=10)
    tokens = _tokens()
    trainer = Trainer(_model().double(), config, tokens)
    history = trainer.run()

    ref = _model().double()
    decay = [p for n, p in ref.named_parameters() if p.dim() == 2 and "emb" not in n]
    no_decay = [p for n, p in ref.named_parameters() if not (p.dim() == 2 and "emb" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], betas=(0.9, 0.95)
    )
    windows = RandomWindows(tokens, 4, 16, seed=5)
    for step in range(10):
        if step < 3:  # warmup then cosine to min_lr, written out independently
            lr = 3e-3 * (step + 1) / 3
        else:
            lr = 3e-4 + 0.5 * (3e-3 - 3e-4) * (1 + math.cos(math.pi * (step - 3) / 7))
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        (x1, y1), (x2, y2) = windows.next_batch(), windows.next_batch()
        x, y = torch.cat([x1, x2]), torch.cat([y1, y2])
        loss = F.cross_entropy(ref(x).flatten(0, 1), y.flatten())
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        opt.step()
        assert abs(history[step]["loss"] - loss.item()) <= 1e-10
        assert abs(history[step]["grad_norm"] - norm.item()) <= 1e-10 * norm.item()
        assert history[step]["lr"] == pytest.approx(lr, rel=1e-12)
    params = zip(trainer.raw_model.parameters(), ref.parameters(), strict=True)
    assert max((p - q).abs().max().item() for p, q in params) <= 1e-10


def test_training_lowers_validation_loss():
    config = _config(max_steps=60, eval_interval=20, lr=1e-2)
    trainer = Trainer(_model(), config, _tokens(), _tokens(2000, seed=1))
    initial = trainer.evaluate()
    history = trainer.run()
    val = [r["val_loss"] for r in history if "val_loss" in r]
    assert len(val) == 3 and abs(initial - math.log(64)) < 0.1
    assert val[-1] < initial - 1.0
    assert all(set(r) >= {"step", "loss", "lr", "grad_norm", "tokens_per_s"} for r in history)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_resume_continues_the_exact_run(tmp_path, dtype):
    tokens, val = _tokens(), _tokens(2000, seed=1)
    config = _config(max_steps=12, dropout=0.1, dtype=dtype)  # dropout: the global RNG state matters too
    model_config = GPTConfig.preset("gpt2-style", **TINY, dropout=0.1)
    torch.manual_seed(0)
    uninterrupted = Trainer(GPT(model_config), config, tokens, val)
    full = uninterrupted.run()

    torch.manual_seed(0)
    first = Trainer(GPT(model_config), config, tokens, val)
    first.run(until_step=6, checkpoint_path=tmp_path / "ckpt.pt")
    torch.manual_seed(123)  # a different init and RNG state: everything must come from the checkpoint
    resumed = Trainer(GPT(model_config), config, tokens, val)
    resumed.load(tmp_path / "ckpt.pt")
    assert resumed.step == 6
    history = resumed.run()
    assert len(history) == 12
    for a, b in zip(full, history, strict=True):
        assert abs(a["loss"] - b["loss"]) <= 1e-6 and a.get("loss_scale") == b.get("loss_scale")
        assert ("val_loss" in a) == ("val_loss" in b)
    for p, q in zip(uninterrupted.raw_model.parameters(), resumed.raw_model.parameters(), strict=True):
        assert (p - q).abs().max().item() <= 1e-6


def test_bf16_autocasts_the_forward_and_keeps_fp32_master_weights():
    tokens = _tokens()
    runs = {}
    for dtype in ("fp32", "bf16"):
        trainer = Trainer(_model(), _config(dtype=dtype, max_steps=30, eval_interval=0), tokens)
        seen: list[torch.dtype] = []
        trainer.raw_model.lm_head.register_forward_hook(lambda m, i, out, seen=seen: seen.append(out.dtype))
        runs[dtype] = [r["loss"] for r in trainer.run()]
        assert seen[0] == {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        assert all(p.dtype == torch.float32 for p in trainer.raw_model.parameters())
        assert all(v.dtype == torch.float32 for s in trainer.optimizer.state.values() for v in s.values() if v.dim())
    assert runs["bf16"] != runs["fp32"]  # the forward really ran in bf16 ...
    assert abs(runs["bf16"][-1] - runs["fp32"][-1]) < 0.1 * runs["fp32"][-1]  # ... and trains the same way
    assert runs["bf16"][-1] < 0.7 * runs["bf16"][0]


def test_fp16_loss_scaling_equals_the_written_out_scaler():
    """Trainer(dtype="fp16") uses torch.amp.GradScaler; notebook 08's DynamicLossScaler takes the same steps,
    including the skipped ones: a huge initial scale makes the first steps overflow."""
    from minillm.optim import param_groups, set_lr
    from minillm.precision import DynamicLossScaler

    config = _config(dtype="fp16", max_steps=14, eval_interval=0, grad_clip=1.0)
    tokens = _tokens()
    trainer = Trainer(_model(), config, tokens)
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)
    history = trainer.run()

    model = _model()
    groups = param_groups(model, config.weight_decay)
    opt = torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), foreach=True)
    scaler, schedule = DynamicLossScaler(init_scale=2.0**24), config.lr_schedule()
    windows = RandomWindows(tokens, config.batch_size, config.context_length, seed=config.seed)
    skipped = []
    for step in range(config.max_steps):
        set_lr(opt, schedule(step))
        opt.zero_grad(set_to_none=True)
        x, y = windows.next_batch()
        with torch.autocast("cpu", dtype=torch.float16):
            logits = model(x)
        scaler.scale(F.cross_entropy(logits.float().flatten(0, 1), y.flatten())).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        skipped.append(not scaler.step(opt))
        scaler.update()
    assert skipped[0] and not skipped[-1], "the test must exercise both an overflow and clean steps"
    assert [bool(r.get("skipped")) for r in history] == skipped
    assert history[-1]["loss_scale"] == scaler.scale_value
    gap = max(
        (p - q).abs().max().item() for p, q in zip(trainer.raw_model.parameters(), model.parameters(), strict=True)
    )
    assert gap <= 1e-6


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
def test_flops_per_token_against_the_planner_and_a_flop_counter(preset):
    """6N + 12·L·d·T: equal to notebook 07's planner for GPT-2's layout, and within the non-matmul parameters
    (biases, norms: about 1 % here) of the matmul FLOPs torch's FlopCounterMode counts in a forward and backward."""
    from torch.utils.flop_counter import FlopCounterMode

    from minillm.parallel.planner import training_flops_per_token

    config = GPTConfig.preset(preset, vocab_size=512, context_length=64, n_layer=2, n_head=4, d_model=64)
    model = GPT(dataclasses.replace(config, attn_impl="manual"))  # explicit matmuls, which the counter sees
    if preset == "gpt2-style":
        assert model.flops_per_token() == training_flops_per_token(2, 64, 512, 64)
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 512, (2, 64))).sum().backward()
    counted = counter.get_total_flops() / (2 * 64)
    assert 0.97 < counted / model.flops_per_token() <= 1.0


def test_mfu_is_reported_when_the_device_peak_is_given():
    trainer = Trainer(_model(), _config(peak_tflops=2.0, max_steps=3, eval_interval=0), _tokens())
    for record in trainer.run():
        assert record["mfu"] == pytest.approx(record["tokens_per_s"] * trainer.raw_model.flops_per_token() / 2e12)
    assert "mfu" not in Trainer(_model(), _config(max_steps=3, eval_interval=0), _tokens()).run()[0]
    with pytest.raises(ConfigError, match="peak_tflops must be positive"):
        _config(peak_tflops=0.0)


def test_activation_checkpointing_keeps_only_each_blocks_input_and_trains_the_same():
    """Notebook 07's memory model predicts it: with full recomputation a layer keeps s·b·h values (its input)."""
    from minillm.parallel.memory import activation_bytes_per_layer, measure_saved_activation_bytes

    x = torch.randint(0, 64, (4, 16))

    def saved(n_layer: int, recompute: bool) -> int:
        torch.manual_seed(0)
        model = GPT(GPTConfig.preset("gpt2-style", **{**TINY, "n_layer": n_layer})).train()
        model.activation_checkpointing = recompute
        return measure_saved_activation_bytes(model, x, exclude=list(model.parameters()))

    per_layer = activation_bytes_per_layer(16, 4, 32, 2, recompute="full", bytes_per_value=4)
    assert saved(3, True) - saved(1, True) == 2 * per_layer  # exactly the two extra blocks' inputs
    assert saved(3, False) > 4 * saved(3, True)
    runs = [
        Trainer(_model(), _config(activation_checkpointing=bool(on), max_steps=6), _tokens()).run() for on in (0, 1)
    ]
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(*runs, strict=True)) <= 1e-6


@pytest.mark.slow
def test_compiled_model_trains_like_eager():
    eager = Trainer(_model(), _config(max_steps=4, eval_interval=0), _tokens()).run()
    compiled = Trainer(_model(), _config(compile=True, max_steps=4, eval_interval=0), _tokens()).run()
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(eager, compiled, strict=True)) <= 1e-4


def test_dtype_is_checked():
    with pytest.raises(ConfigError, match="dtype must be one of"):
        _config(dtype="float16")


class _NaNAtStep(nn.Module):
    """Wraps a model and makes its output NaN during one training step."""

    def __init__(self, model: nn.Module, bad_call: int):
        super().__init__()
        self.model, self.bad_call, self.calls = model, bad_call, 0

    def forward(self, idx):
        logits = self.model(idx)
        self.calls += self.training
        return logits * float("nan") if self.training and self.calls == self.bad_call + 1 else logits


def test_nan_loss_stops_with_the_step_named():
    trainer = Trainer(_NaNAtStep(_model(), bad_call=3), _config(), _tokens())
    with pytest.raises(FloatingPointError, match="at step 3"):
        trainer.run()
    assert trainer.step == 3


def test_nan_loss_can_skip_the_step():
    wrapped = _NaNAtStep(_model(), bad_call=3)
    trainer = Trainer(wrapped, _config(on_nonfinite="skip", max_steps=6), _tokens())
    trainer.run(until_step=3)
    before = [p.detach().clone() for p in wrapped.parameters()]
    trainer.train_step()  # the poisoned step
    assert all(torch.equal(p, q) for p, q in zip(before, wrapped.parameters(), strict=True))
    history = trainer.run()
    assert len(history) == 5 and all(math.isfinite(r["loss"]) for r in history)


def test_nan_skip_is_recorded_in_history():
    trainer = Trainer(_NaNAtStep(_model(), bad_call=2), _config(on_nonfinite="skip", max_steps=4), _tokens())
    history = trainer.run()
    assert [r.get("skipped", False) for r in history] == [False, False, True, False]


@pytest.mark.parametrize("bad", [64, -1])
def test_ids_outside_the_vocabulary_stop_at_the_first_batch_naming_the_data(bad):
    """A token file of another tokenizer used to fail inside the embedding with a bare IndexError."""
    from minillm.train.loop import DataError

    tokens = _tokens()
    tokens[::50] = bad  # the first window holds one whichever offset RandomWindows draws
    trainer = Trainer(_model(), _config(), tokens, data_name="work/train.bin")
    with pytest.raises(DataError, match=rf"work/train\.bin: the first training batch holds token id {bad}, .*"
                       r"vocab_size=64 \(ids 0 to 63\)"):  # fmt: skip
        trainer.run()
    assert trainer.step == 0 and trainer.history == []


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="on_nonfinite"):
        TrainConfig(on_nonfinite="ignore")
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        TrainConfig.from_dict({"batchsize": 3})


# ------------------------------------------------------------------------------------------ the CLI

STORY = "Once upon a time, {n} had a {t}. {n} played with the {t} every day. {n} was {f}. The end."


def _write_corpus(folder: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    names, things, feelings = ["Tom", "Lily", "Ben", "Mia"], ["ball", "cat", "boat"], ["happy", "sad", "brave"]

    def stories(n):
        return "\n\n".join(
            STORY.format(n=rng.choice(names), t=rng.choice(things), f=rng.choice(feelings)) for _ in range(n)
        )

    train, val = folder / "train.txt", folder / "val.txt"
    train.write_text(stories(150) + "\n", encoding="utf-8")
    val.write_text(stories(20) + "\n", encoding="utf-8")
    return train, val


def _cli_args(folder: Path, out: str, train: Path, val: Path, steps: int = 6) -> list[str]:
    return [
        "--train-file", str(train), "--val-file", str(val), "--out-dir", str(folder / out),
        "--vocab-size", "300", "--n-layer", "1", "--n-head", "2", "--d-model", "32", "--context-length", "32",
        "--batch-size", "4", "--grad-accum", "2", "--max-steps", str(steps), "--warmup-steps", "2",
        "--eval-interval", "3", "--eval-batches", "2", "--sample-tokens", "20", "--no-progress",
        "--threads", "1", "--device", "cpu",
    ]  # fmt: skip


def test_every_flag_given_as_none_is_honoured_or_refused(tmp_path, capsys):
    """A value flag given as ``none`` used to be dropped (``--grad-clip none`` kept 1.0) when its setting allows None.

    Generated from the parser, so a new flag is covered: either the setting is None (it allows None) or the
    literal text "none" (a text setting, e.g. a folder called none), or the flag is refused with its name. A
    config file sets every setting that allows None to a valid other value, so a dropped flag shows.
    """
    from minillm.train.cli import build_parser, config_from_args

    parser = build_parser()
    flags = [a for a in parser._actions if a.option_strings and a.nargs is None and a.dest != "config"]
    assert len(flags) > 30  # every TrainConfig setting that takes a value
    not_none = {"str": "somewhere", "int": 2, "float": 0.5}
    settings = {
        f.name: not_none[str(f.type).split("|")[0].strip()]
        for f in dataclasses.fields(TrainConfig)
        if "None" in str(f.type)
    }
    assert {"val_file", "grad_clip", "tokenizer_train_chars"} <= set(settings)
    settings["window_pattern"] = "LG"  # a text setting with a syntax of its own: local and global layers
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(settings))
    TrainConfig.from_json(config_file)  # the file alone is valid
    for action in flags:
        flag = action.option_strings[0]
        try:
            config = config_from_args(parser.parse_args(["--config", str(config_file), flag, "none"]))
        except SystemExit as error:  # argparse: usage, the flag and the value on stderr
            assert error.code == 2 and f"argument {flag}: " in capsys.readouterr().err, flag
            continue
        except ConfigError as error:
            assert action.dest in str(error), flag
            continue
        assert getattr(config, action.dest) in (None, "none"), f"{flag} none gave {getattr(config, action.dest)!r}"


def test_val_file_and_grad_clip_none_are_recorded_and_used(tmp_path):
    train, val = _write_corpus(tmp_path)
    args = _cli_args(tmp_path, "out", train, val, steps=2)
    args[args.index("--val-file") + 1] = "none"
    main([*args, "--grad-clip", "none"])
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["val_file"] is None and record["grad_clip"] is None
    assert json.loads((tmp_path / "out" / "config.json").read_text())["metrics"]["val_loss"] is None
    assert not (tmp_path / "out" / "work" / "val.bin").exists()


def test_cli_trains_tokenizer_and_model_and_saves_everything(tmp_path, capsys):
    train, val = _write_corpus(tmp_path)
    config_file = tmp_path / "run.json"
    config_file.write_text(json.dumps({"_comment": "flags win", "max_steps": 99, "lr": 5e-3}))
    main(["--config", str(config_file), *_cli_args(tmp_path, "out", train, val)])
    out = tmp_path / "out"
    assert {"model.safetensors", "config.json", "tokenizer.json", "history.json", "history.csv"} <= {
        p.name for p in out.iterdir()
    }
    meta = json.loads((out / "config.json").read_text())
    assert meta["train"]["max_steps"] == 6 and meta["train"]["lr"] == 5e-3  # flag over file over default
    assert meta["metrics"]["steps"] == 6 and len(meta["samples"]) == 3
    assert len((out / "history.csv").read_text().strip().splitlines()) == 1 + 6
    model, tokenizer, _ = load_pretrained(out)
    assert tokenizer.vocab_size == model.config.vocab_size == 300
    assert "<|endoftext|>" in tokenizer.special_tokens and "<|assistant|>" in tokenizer.special_tokens
    # the recorded validation loss is reproducible from the saved files
    from minillm.batches import encode_documents, sequential_windows

    ids = encode_documents(tokenizer, val.read_text())
    total = count = 0
    with torch.no_grad():
        for x, y in sequential_windows(ids, 4, 32, max_batches=2):
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    assert abs(total / count - meta["metrics"]["val_loss"]) <= 1e-5
    assert "sample 0" in capsys.readouterr().out


def test_cli_resume_after_an_interrupt_finishes_the_same_run(tmp_path, monkeypatch):
    train, val = _write_corpus(tmp_path)
    main(_cli_args(tmp_path, "full", train, val, steps=6))
    args = [*_cli_args(tmp_path, "part", train, val, steps=6), "--checkpoint-interval", "3"]
    # Ctrl-C during step 4, after the step-3 checkpoint was written
    interrupt_training(monkeypatch, lambda: main(args), at_step=4)
    assert not (tmp_path / "part" / "model.safetensors").exists()
    main([*args, "--resume"])
    full = json.loads((tmp_path / "full" / "history.json").read_text())
    resumed = json.loads((tmp_path / "part" / "history.json").read_text())
    assert [r["step"] for r in resumed] == list(range(6))
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(full, resumed, strict=True)) <= 1e-6


@pytest.mark.slow
def test_torchrun_two_processes_equal_one_process(tmp_path):
    """2 gloo ranks (batch 4 each, 2 micro-batches) take the same steps as 1 process with batch 8."""
    train, val = _write_corpus(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = [sys.executable, "-m", "minillm.train", *_cli_args(tmp_path, "single", train, val)]
    subprocess.run(single, check=True, env=env, capture_output=True, timeout=600)
    ddp = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "minillm.train", *_cli_args(tmp_path, "ddp", train, val),
    ]  # fmt: skip
    result = subprocess.run(ddp, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    one, _, meta_one = load_pretrained(tmp_path / "single")
    two, _, meta_two = load_pretrained(tmp_path / "ddp")
    assert meta_two["metrics"]["world_size"] == 2 and meta_one["metrics"]["world_size"] == 1
    diff = max((p - q).abs().max().item() for p, q in zip(one.parameters(), two.parameters(), strict=True))
    assert diff <= 1e-5
    loss_one = [r["loss"] for r in json.loads((tmp_path / "single" / "history.json").read_text())]
    loss_two = [r["loss"] for r in json.loads((tmp_path / "ddp" / "history.json").read_text())]
    assert len(loss_one) == 6 and max(abs(a - b) for a, b in zip(loss_one, loss_two, strict=True)) <= 1e-5
    assert meta_one["metrics"]["val_loss"] == pytest.approx(meta_two["metrics"]["val_loss"], abs=1e-5)


def test_every_shipped_config_loads_and_gpt2_small_has_gpt2_smalls_size():
    """configs/gpt2_small.json builds GPT-2 small: 124,439,808 parameters and the 855,166,464 training FLOPs per
    token of PaLM's formula (REFERENCE.md A3) — counted on the meta device, nothing allocated."""
    for path in sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.json")):
        TrainConfig.from_json(path)
    config = TrainConfig.from_json(Path(__file__).resolve().parents[1] / "configs" / "gpt2_small.json")
    with torch.device("meta"):
        model = GPT(config.model_config(config.vocab_size))
    assert model.num_parameters() == 124_439_808 and model.flops_per_token() == 855_166_464
    assert config.tokens_per_step == 524_288 and (config.dtype, config.compile) == ("bf16", True)


@pytest.mark.slow
def test_fsdp_two_processes_equal_one_process_and_its_checkpoint_resumes_anywhere(tmp_path):
    """python -m minillm.train --parallel fsdp under torchrun (2 gloo ranks, every block sharded) takes the same
    steps as one process; a 3-step FSDP run resumed to 6 steps, under FSDP or in one process, finishes the same
    run (each rank writes its own shards, joined for one process). A constant rate: 3 steps start the 6."""
    train, val = _write_corpus(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]

    def train_run(out: str, steps: int, fsdp: bool, *extra: str) -> list[float]:
        args = [*_cli_args(tmp_path, out, train, val, steps), "--schedule", "constant", "--parallel", "fsdp", *extra]
        command = [*(torchrun if fsdp else [sys.executable]), "-m", "minillm.train", *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return [r["loss"] for r in json.loads((tmp_path / out / "history.json").read_text())]

    one, two = train_run("single", 6, fsdp=False), train_run("fsdp", 6, fsdp=True)
    assert len(two) == 6 and max(abs(a - b) for a, b in zip(one, two, strict=True)) <= 1e-5
    model_one, _, meta_one = load_pretrained(tmp_path / "single")
    model_two, _, meta_two = load_pretrained(tmp_path / "fsdp")
    assert meta_two["metrics"]["world_size"] == 2 and meta_two["train"]["parallel"] == "fsdp"
    pairs = zip(model_one.parameters(), model_two.parameters(), strict=True)
    assert max((p - q).abs().max().item() for p, q in pairs) <= 1e-5
    assert meta_one["metrics"]["val_loss"] == pytest.approx(meta_two["metrics"]["val_loss"], abs=1e-5)

    train_run("part", 3, fsdp=True)
    # Each rank wrote its own shards; rank 0's file holds the rest and names them. Joined, they are the model.
    work = tmp_path / "part" / "work"
    manifest = load_checkpoint(work / "checkpoint.pt")["shards"]
    assert manifest["world_size"] == 2 and sorted(p.name for p in shard_files_of(work / "checkpoint.pt")) == sorted(
        manifest["files"]
    )
    weights, optimizer = read_full_state(work / "checkpoint.pt", manifest)
    model_part, _, _ = load_pretrained(tmp_path / "part")
    assert all(torch.equal(weights[name], p) for name, p in model_part.state_dict().items())
    parameters = dict(model_part.named_parameters())  # the tied output matrix is one parameter
    assert set(optimizer["state"]) == set(parameters)
    assert all(optimizer["state"][name]["exp_avg"].shape == p.shape for name, p in parameters.items())
    shutil.copytree(tmp_path / "part", tmp_path / "solo")
    resumed_fsdp = train_run("part", 6, True, "--resume")
    assert max(abs(a - b) for a, b in zip(two, resumed_fsdp, strict=True)) <= 1e-6
    manifest = load_checkpoint(work / "checkpoint.pt")["shards"]  # the step-3 shards were removed after the save
    assert [p.name for p in shard_files_of(work / "checkpoint.pt")] == manifest["files"] and "step00000006" in str(
        manifest["files"]
    )
    first, second = (work / name for name in manifest["files"])
    first_bytes = first.read_bytes()
    first.write_bytes(second.read_bytes())  # a shard that is not the one the manifest recorded
    with pytest.raises(CheckpointError, match="not the shard"):
        read_full_state(work / "checkpoint.pt", manifest)
    first.write_bytes(first_bytes)
    resumed_alone = train_run("solo", 6, False, "--resume", "--work-dir", str(tmp_path / "solo" / "work"))
    assert max(abs(a - b) for a, b in zip(two, resumed_alone, strict=True)) <= 1e-5


# ------------------------------------------------ settings, files and flags: checked before any work
TEXT = "hello, world! the cat sat on the mat. the dog sat on the log. " * 10


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(threads=0), "threads must be at least 1 .* got 0"),
        (dict(device="tpu"), "device 'tpu' is not a device name; use 'auto', 'cpu'"),
        (dict(lr="0.01"), "lr must be a number, got '0.01' .*without quotes"),
        (dict(n_layer="4"), "n_layer must be an integer, got '4'"),
        (dict(progress="yes"), "progress must be true or false"),
        (dict(n_head=3), "n_head=3 does not divide d_model=128"),
        (dict(preset="bogus"), r"unknown preset 'bogus'; choose from \['gpt2-small', 'gpt2-style', 'llama-style'\]"),
        (dict(schedule="cosin"), "unknown schedule 'cosin'"),
        (dict(max_steps=10, warmup_steps=50), r"warmup_steps=50 is longer than the run \(max_steps=10\)"),
        (dict(vocab_size=200), "vocab_size=200 leaves no room for merges"),
        (dict(lr=float("nan")), "lr must be a finite number"),
    ],
)
def test_train_config_refuses_bad_settings(settings, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**settings)
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(settings)


def test_config_files_with_bad_json_or_types_name_the_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"lr": 0.01,}\n')  # used to be a raw JSONDecodeError
    with pytest.raises(
        ConfigError, match=r"run\.json: not valid JSON: .* line 1, column 13; check for a trailing comma"
    ):
        TrainConfig.from_json(path)
    path.write_text('{"lr": "0.01"}\n')  # used to be accepted, then a TypeError in the optimizer
    with pytest.raises(ConfigError, match=r"run\.json: lr must be a number, got '0.01'"):
        TrainConfig.from_json(path)
    path.write_text('{"batchsize": 8}\n')
    with pytest.raises(ConfigError, match="did you mean 'batch_size'"):
        TrainConfig.from_json(path)
    with pytest.raises(FileNotFoundError, match=r"nope\.json: config file not found"):
        TrainConfig.from_json(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--n-head", "3"], "n_head=3 does not divide d_model=32"),
        (["--preset", "bogus"], "unknown preset 'bogus'"),
        (["--threads", "0"], "threads must be at least 1"),
        (["--device", "tpu"], "device 'tpu' is not a device name"),
        (["--device", "cuda"], "'cuda' was requested but torch sees no CUDA GPU here"),
    ],
)
def test_train_command_line_stops_before_any_work(tmp_path, flags, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on the course's CPU machines
    train = tmp_path / "train.txt"
    train.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["--train-file", str(train), "--val-file", "none", "--out-dir", str(out), "--vocab-size", "300",
            "--n-layer", "1", "--d-model", "32", "--context-length", "16", "--max-steps", "2",
            "--warmup-steps", "1", "--no-progress", *flags]  # fmt: skip
    # used to fail only after training the tokenizer (--n-head, --preset) or inside torch (--threads, --device)
    with pytest.raises((ConfigError, SystemExit), match=message):
        main(argv)
    assert not out.exists()  # no tokenizer trained, no token files written


def test_a_config_file_valid_only_with_its_flags_is_accepted(tmp_path):
    """Flags are laid over the file before the whole is checked (max_steps 10 needs warmup below 10)."""
    path = tmp_path / "short.json"
    path.write_text('{"max_steps": 10}', encoding="utf-8")
    config = config_from_args(build_parser().parse_args(["--config", str(path), "--warmup-steps", "2"]))
    assert (config.max_steps, config.warmup_steps) == (10, 2)
    with pytest.raises(ConfigError, match="short.json with the flags given"):
        config_from_args(build_parser().parse_args(["--config", str(path)]))
