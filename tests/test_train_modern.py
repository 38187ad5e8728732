"""The 2026 switches in ``python -m minillm.train``: they reach the model, the loss and the optimizer; runs with
them train in bf16, resume bit-identically and shard under FSDP; impossible settings stop at the command line;
run records written before the switches existed still resume."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from run_helpers import interrupt_training, train_args, write_corpus

from minillm.attention import CausalSelfAttention
from minillm.batches import RandomWindows
from minillm.checkpoint import load_checkpoint, load_pretrained, save_checkpoint
from minillm.experiments import modern_llm
from minillm.experiments.provenance import stale_results
from minillm.model import GPT, GPTConfig
from minillm.moe import MoE
from minillm.optim import Muon, MuonAdamW, muon_param_groups, param_groups
from minillm.train import TrainConfig, Trainer
from minillm.train.cli import build_parser, config_from_args, main
from minillm.train.config import MODEL_SWITCHES

EXACT = 1e-6  # float32 steps computed by different code paths (same operations, possibly another order)

SWITCH_FLAGS = [
    "--preset", "llama-style", "--qk-norm", "--logit-softcap", "30", "--attn-window", "4",
    "--window-pattern", "LG", "--n-experts", "4", "--experts-top-k", "2", "--moe-every", "2",
    "--capacity-factor", "1.5", "--moe-aux-coef", "0.02", "--z-loss-coef", "1e-4", "--optimizer", "muon",
    "--muon-lr", "0.03", "--muon-momentum", "0.9", "--muon-weight-decay", "0.01",
]  # fmt: skip


def _tokens(n: int = 4000, seed: int = 0) -> np.ndarray:
    """A learnable stream: a noisy repeating pattern over 64 ids (as in test_train)."""
    rng = np.random.default_rng(seed)
    base = np.tile(np.arange(0, 64, 3), n // 22 + 1)[:n]
    return np.where(rng.random(n) < 0.1, rng.integers(0, 64, n), base)


def _config(**overrides) -> TrainConfig:
    base = dict(
        preset="llama-style", vocab_size=300, n_layer=2, n_head=2, d_model=32, context_length=16, batch_size=4,
        max_steps=8, warmup_steps=2, eval_interval=0, progress=False, seed=3,
    )  # fmt: skip
    return TrainConfig(**{**base, **overrides})


MODERN = dict(n_experts=4, experts_top_k=2, optimizer="muon", z_loss_coef=1e-3, qk_norm=True, attn_window=4)


def _trainer(config: TrainConfig, seed: int = 0) -> Trainer:
    torch.manual_seed(seed)
    return Trainer(GPT(config.model_config(64)), config, _tokens())


# ------------------------------------------------------------------------------------ the switches arrive


def test_every_switch_given_as_a_flag_reaches_the_model_and_the_optimizer():
    sizes = ["--n-layer", "2", "--d-model", "32", "--n-head", "2", "--context-length", "16", "--batch-size", "2"]
    config = config_from_args(build_parser().parse_args([*SWITCH_FLAGS, *sizes]))
    model_config = config.model_config(300)
    expected = dict(qk_norm=True, logit_softcap=30.0, attn_window=4, window_pattern="LG", n_experts=4,
                    experts_top_k=2, moe_every=2, capacity_factor=1.5)  # fmt: skip
    assert set(expected) == set(MODEL_SWITCHES)
    assert {name: getattr(model_config, name) for name in MODEL_SWITCHES} == expected
    assert (config.moe_aux_coef, config.z_loss_coef, config.optimizer) == (0.02, 1e-4, "muon")
    torch.manual_seed(0)
    model = GPT(model_config)
    attention = [block.attn for block in model.blocks]
    assert all(isinstance(a, CausalSelfAttention) and hasattr(a, "q_norm") for a in attention)
    assert [a.window for a in attention] == [4, None]  # "LG": local, then global
    assert [isinstance(block.mlp, MoE) for block in model.blocks] == [False, True]  # moe_every=2
    assert model.blocks[1].mlp.capacity_factor == 1.5 and model.blocks[1].mlp.top_k == 2
    assert model.config.logit_softcap == 30.0

    trainer = Trainer(model, config, _tokens())
    optimizer = trainer.optimizer
    assert isinstance(optimizer, MuonAdamW)
    (muon_group,) = [g for g in optimizer.param_groups if g.get("muon")]
    matrices, rest = muon_param_groups(model)
    assert [id(p) for p in muon_group["params"]] == [id(p) for p in matrices]
    adamw_ids = {id(p) for g in optimizer.param_groups if not g.get("muon") for p in g["params"]}
    assert adamw_ids == {id(p) for p in rest}  # every parameter in exactly one group
    assert (muon_group["momentum"], muon_group["weight_decay"]) == (0.9, 0.01)
    trainer.train_step()
    rate = config.lr_schedule()(0)
    assert muon_group["lr"] == pytest.approx(rate * 0.03 / config.lr, rel=1e-12)
    assert all(g["lr"] == rate for g in optimizer.param_groups if not g.get("muon"))


def test_defaults_leave_every_switch_off():
    """A default config builds the GPTConfig it built before the switches existed, and trains with plain AdamW."""
    config = TrainConfig()
    sizes = dict(context_length=256, n_layer=4, n_head=4, n_kv_head=None, d_model=128, dropout=0.0)
    assert config.model_config(300) == GPTConfig.preset("gpt2-style", vocab_size=300, **sizes)
    off = config.model_config(300)
    assert (off.qk_norm, off.logit_softcap, off.attn_window, off.n_experts) == (False, None, None, None)
    assert (config.optimizer, config.z_loss_coef) == ("adamw", 0.0)
    trainer = Trainer(GPT(_config(preset="gpt2-style").model_config(64)), _config(preset="gpt2-style"), _tokens())
    assert type(trainer.optimizer) is torch.optim.AdamW and not trainer.has_experts
    assert set(trainer.train_step()) == {"step", "loss", "lr", "grad_norm", "seconds", "tokens_per_s"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--n-experts", "2", "--experts-top-k", "3"], "experts_top_k=3 exceeds n_experts=2"),
        (["--attn-window", "0"], "attn_window must be an int ≥ 1"),
        (["--window-pattern", "LX", "--attn-window", "4"], "window_pattern must be a string of 'L'"),
        (["--window-pattern", "LG"], "has local layers: set attn_window too"),
        (["--optimizer", "sgd"], r"optimizer must be one of \['adamw', 'muon'\], got 'sgd'"),
        (["--optimizer", "muon", "--lr", "0", "--min-lr", "0"], "optimizer='muon' needs lr > 0"),
        (["--muon-momentum", "1"], r"muon_momentum must be in \[0, 1\)"),
        (["--z-loss-coef=-1e-4"], "z_loss_coef must be >= 0"),
        (["--moe-aux-coef=-0.01"], "moe_aux_coef must be >= 0"),
        (["--capacity-factor", "0", "--n-experts", "2"], "capacity_factor must be a positive number"),
        (["--logit-softcap=-5"], "logit_softcap must be a positive number"),
    ],
)
def test_impossible_settings_stop_at_the_command_line_before_any_work(tmp_path, flags, message):
    write_corpus(tmp_path)
    with pytest.raises(SystemExit, match=message):
        main([*train_args(tmp_path, steps=2), *flags])
    assert not (tmp_path / "out").exists()  # no tokenizer trained, no folder written


def test_z_loss_without_the_pretraining_loss_is_refused():
    def custom(model, batch):
        return model(batch[0]).square().mean()

    with pytest.raises(ValueError, match="z_loss_coef=0.001 adds the z-loss to the pretraining loss"):
        Trainer(GPT(_config().model_config(64)), _config(z_loss_coef=1e-3), _tokens(), loss_fn=custom)


# ------------------------------------------------------------------------------------ the loss and the step


def test_the_step_minimises_cross_entropy_plus_z_loss_plus_the_balancing_loss():
    """The gradient a step leaves equals that of an independent objective: cross-entropy + z·mean(logsumexp²) +
    a·Σ_layers E·Σ_i f_i·P_i, computed here from the router's own logits; the logged loss is the cross-entropy."""
    config = _config(n_experts=3, experts_top_k=1, z_loss_coef=1e-2, moe_aux_coef=0.05, grad_clip=None)
    torch.manual_seed(0)
    model = GPT(config.model_config(64))
    reference = copy.deepcopy(model)
    trainer = Trainer(model, config, _tokens())
    record = trainer.train_step()

    inputs, targets = RandomWindows(_tokens(), config.batch_size, config.context_length, config.seed).next_batch()
    router_logits = []
    hooks = [b.mlp.router.register_forward_hook(lambda m, i, o: router_logits.append(o)) for b in reference.blocks]
    logits = reference(inputs)
    for hook in hooks:
        hook.remove()
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    z = torch.logsumexp(logits.double(), dim=-1).pow(2).mean()
    balance = 0.0
    for router in router_logits:
        probs = router.softmax(-1)
        chosen = F.one_hot(probs.argmax(-1), 3).float().mean(0)  # top-1: the fraction of tokens per expert
        balance = balance + 3 * (chosen * probs.mean(0)).sum()
    (ce + 1e-2 * z + 0.05 * balance).backward()

    assert record["loss"] == pytest.approx(ce.item(), abs=EXACT)
    assert record["z_loss"] == pytest.approx(z.item(), rel=1e-6)
    assert record["moe_aux_loss"] == pytest.approx(balance.item(), abs=EXACT)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=EXACT, rtol=1e-5, msg=name)
    assert reference.blocks[0].mlp.router.weight.grad.abs().sum() > 0  # the balancing loss reaches the router


def test_muon_adamw_is_muon_on_the_matrices_and_adamw_on_the_rest():
    """The one-object optimizer takes exactly the steps of minillm's Muon and torch's AdamW run side by side."""
    torch.manual_seed(0)
    ours = GPT(_config().model_config(64))
    theirs = copy.deepcopy(ours)
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))

    def groups(model):
        matrices, _ = muon_param_groups(model)
        skip = {id(p) for p in matrices}
        adamw = [{**g, "params": [p for p in g["params"] if id(p) not in skip]} for g in param_groups(model, 0.1)]
        return matrices, adamw

    matrices, adamw = groups(ours)
    combined = MuonAdamW(
        [*adamw, dict(params=matrices, muon=True, lr=0.02, momentum=0.95, weight_decay=0.01)],
        lr=3e-3, betas=(0.9, 0.95), foreach=True,
    )  # fmt: skip
    matrices, adamw = groups(theirs)
    muon = Muon(matrices, lr=0.02, momentum=0.95, weight_decay=0.01)
    reference = torch.optim.AdamW(adamw, lr=3e-3, betas=(0.9, 0.95), foreach=True)
    for _ in range(3):
        for model, optimizers in ((ours, [combined]), (theirs, [muon, reference])):
            for optimizer in optimizers:
                optimizer.zero_grad()
            F.cross_entropy(model(ids).flatten(0, 1), ids.roll(-1, 1).flatten()).backward()
            for optimizer in optimizers:
                optimizer.step()
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="2-D weight matrices only"):
        MuonAdamW([dict(params=[ours.norm_f.weight], muon=True)], lr=1e-3)


def test_a_modern_run_trains_in_bf16_autocast():
    config = _config(**MODERN, dtype="bf16", max_steps=40, lr=1e-2, muon_lr=0.02)
    trainer = _trainer(config)
    seen: list[torch.dtype] = []
    trainer.raw_model.lm_head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    history = trainer.run()
    losses = [r["loss"] for r in history]
    assert seen[0] == torch.bfloat16 and all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])  # from about ln 64 = 4.16 to about 2
    assert all(p.dtype == torch.float32 for p in trainer.raw_model.parameters())
    assert all({"z_loss", "moe_aux_loss"} <= set(r) for r in history)
    assert history[0]["moe_aux_loss"] == pytest.approx(2.0, abs=0.05)  # two MoE layers, uniform at init: 1 each


# ------------------------------------------------------------------------------------ exact resume


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_modern_run_resumes_bit_identically(tmp_path, dtype):
    config = _config(**MODERN, dtype=dtype, dropout=0.1, capacity_factor=1.25)
    full = _trainer(config)
    history = full.run()
    first = _trainer(config)
    first.run(until_step=4, checkpoint_path=tmp_path / "ckpt.pt")
    resumed = _trainer(config, seed=99)  # another init and RNG state: all must come from the checkpoint
    resumed.load(tmp_path / "ckpt.pt")
    assert resumed.step == 4
    keep = ("lr", "lr_scale", "muon", "momentum", "weight_decay")
    groups = [[{k: g.get(k) for k in keep} for g in t.optimizer.param_groups] for t in (resumed, first)]
    assert groups[0] == groups[1] and groups[0][-1]["muon"]
    again = resumed.run()
    keys = ("loss", "grad_norm", "lr", "z_loss", "moe_aux_loss")
    assert [[r[k] for k in keys] for r in history] == [[r[k] for k in keys] for r in again]
    for p, q in zip(full.raw_model.parameters(), resumed.raw_model.parameters(), strict=True):
        assert torch.equal(p, q)
    momentum = [s["momentum_buffer"] for s in resumed.optimizer.state.values() if "momentum_buffer" in s]
    assert len(momentum) == len(muon_param_groups(resumed.raw_model)[0])


def test_cli_resume_of_a_modern_run_finishes_the_same_run(tmp_path, monkeypatch):
    write_corpus(tmp_path)
    flags = [*SWITCH_FLAGS, "--n-layer", "2", "--dtype", "bf16"]
    main([*train_args(tmp_path, steps=6, out="full"), *flags])
    args = [*train_args(tmp_path, steps=6, out="part"), *flags, "--checkpoint-interval", "3"]
    interrupt_training(monkeypatch, lambda: main(args), at_step=4)  # killed after the step-3 checkpoint
    main([*args, "--resume"])
    full = json.loads((tmp_path / "full" / "history.json").read_text())
    part = json.loads((tmp_path / "part" / "history.json").read_text())
    assert [(r["loss"], r["z_loss"], r["moe_aux_loss"]) for r in full] == [
        (r["loss"], r["z_loss"], r["moe_aux_loss"]) for r in part
    ]
    one, _, _ = load_pretrained(tmp_path / "full")
    two, _, _ = load_pretrained(tmp_path / "part")
    assert all(torch.equal(p, q) for p, q in zip(one.parameters(), two.parameters(), strict=True))
    assert one.config.n_experts == 4 and one.config.window_pattern == "LG"
    # a switch is part of the run: --resume with another value is refused, naming it
    with pytest.raises(SystemExit, match="z_loss_coef"):
        main([*args, "--resume", "--z-loss-coef", "0"])


def test_a_run_recorded_before_the_switches_existed_still_resumes(tmp_path, monkeypatch):
    """run.json and the checkpoint of an older minillm lack the new settings: their defaults are what that run did,
    so it resumes (and ends as the uninterrupted run); a non-default value is still refused."""
    write_corpus(tmp_path)
    main(train_args(tmp_path, steps=6, out="full"))
    args = [*train_args(tmp_path, steps=6, out="old"), "--checkpoint-interval", "3"]
    interrupt_training(monkeypatch, lambda: main(args), at_step=4)
    new_keys = {"optimizer", "muon_lr", "muon_momentum", "muon_weight_decay", "moe_aux_coef", "z_loss_coef",
                *MODEL_SWITCHES}  # fmt: skip
    record_path = tmp_path / "old" / "run.json"
    record = json.loads(record_path.read_text())
    assert new_keys <= set(record)
    record_path.write_text(json.dumps({k: v for k, v in record.items() if k not in new_keys}, indent=2))
    checkpoint_path = tmp_path / "old" / "work" / "checkpoint.pt"
    state = load_checkpoint(checkpoint_path)
    state["config"] = {k: v for k, v in state["config"].items() if k not in new_keys}
    save_checkpoint(state, checkpoint_path)
    with pytest.raises(SystemExit, match="qk_norm"):
        main([*args, "--resume", "--qk-norm"])
    main([*args, "--resume"])
    full = json.loads((tmp_path / "full" / "history.json").read_text())
    old = json.loads((tmp_path / "old" / "history.json").read_text())
    assert [r["loss"] for r in full] == [r["loss"] for r in old]
    assert new_keys <= set(json.loads(record_path.read_text()))  # recorded from now on


# ------------------------------------------------------------------------------------ FSDP


@pytest.mark.slow
def test_fsdp_two_processes_train_a_moe_model_with_muon_like_one_process(tmp_path):
    """2 gloo ranks, every block sharded (the MoE block's experts too), Muon orthogonalising each whole matrix
    (gathered from its shards), take the steps of one process. The balancing loss is off here: it is computed
    over each rank's own tokens (as in real data parallelism), so it would differ from the one-process value."""
    write_corpus(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    flags = ["--preset", "llama-style", "--n-layer", "2", "--n-experts", "4", "--moe-every", "2",
             "--moe-aux-coef", "0", "--optimizer", "muon", "--qk-norm", "--z-loss-coef", "1e-3",
             "--parallel", "fsdp", "--batch-size", "4", "--schedule", "constant"]  # fmt: skip

    def train_run(out: str, fsdp: bool) -> list[float]:
        command = [*(torchrun if fsdp else [sys.executable]), "-m", "minillm.train"]
        done = subprocess.run(
            [*command, *train_args(tmp_path, steps=5, out=out), *flags],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return [r["loss"] for r in json.loads((tmp_path / out / "history.json").read_text())]

    one, two = train_run("single", fsdp=False), train_run("fsdp", fsdp=True)
    assert len(two) == 5 and max(abs(a - b) for a, b in zip(one, two, strict=True)) <= 1e-5
    assert one[-1] < one[0]
    model_one, _, _ = load_pretrained(tmp_path / "single")
    model_two, _, meta = load_pretrained(tmp_path / "fsdp")
    assert meta["metrics"]["world_size"] == 2 and isinstance(model_two.blocks[1].mlp, MoE)
    pairs = zip(model_one.parameters(), model_two.parameters(), strict=True)
    assert max((p - q).abs().max().item() for p, q in pairs) <= 1e-5


# ------------------------------------------------------------------------------------ notebook 16's experiment

COMMITTED = Path(__file__).resolve().parents[1] / "data" / "modern" / modern_llm.RESULT


def test_modern_llm_quick_run_writes_a_fresh_record(tmp_path):
    modern_llm.main(["--out", str(tmp_path), "--quick"])
    payload = json.loads((tmp_path / modern_llm.RESULT).read_text(encoding="utf-8"))
    assert stale_results(payload, modern_llm) == [] and "--quick" in payload["provenance"]["command"]
    runs = payload["runs"]
    assert {"dense_seed0", "moe_seed0", "moe_no_aux_seed0", "qkoff_lr0.03_seed0", "qkon_lr0.03_seed0"} <= set(runs)
    assert {"fp16_qkoff_lr0.03_seed0", "fp16_qkon_lr0.03_seed0"} <= set(runs)
    steps = modern_llm.QUICK.steps
    assert all(len(r["train_loss"]) == steps and all(map(math.isfinite, r["train_loss"])) for r in runs.values())
    dense, moe = runs["dense_seed0"], runs["moe_seed0"]
    assert moe["active_parameters"] == dense["active_parameters"] + 4 * modern_llm.QUICK.d_model  # + the router
    assert moe["parameters"] > dense["parameters"]
    assert all(abs(sum(layer) - 1) < 1e-3 for layer in moe["expert_usage"])
    assert len(runs["qkon_lr0.03_seed0"]["attention_logits"]) == steps // modern_llm.QUICK.probe_every
    assert set(payload["best_lr"]) == {"adamw", "muon"}
    adamw = runs[f"adamw_lr{payload['best_lr']['adamw']:g}_seed0"]  # the course model's shape, not the small one
    course = GPT(modern_llm.train_config(modern_llm.QUICK.course(), 0, 1e-3).model_config(2048))
    assert adamw["parameters"] == course.num_parameters() and course.config.norm == "layernorm"  # gpt2-style
    fp16 = runs["fp16_qkoff_lr0.03_seed0"]["attention_logits"]
    assert [p["step"] for p in fp16] == [3, 6] and all(p["largest_output"]["value"] > 0 for p in fp16)
    with pytest.raises(SystemExit):  # an existing result is not replaced without --overwrite
        modern_llm.main(["--out", str(tmp_path), "--quick"])


def test_max_attention_logit_equals_the_written_out_scores():
    """The probe's largest logit equals the maximum of the scores computed from the layer's own weights here."""
    torch.manual_seed(0)
    model = GPT(_config(qk_norm=True).model_config(64)).eval()
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    attn = model.blocks[0].attn
    x = model.blocks[0].norm1(model.tok_emb(ids))
    q, k, _ = attn.split_heads(x)
    q, k = attn.rope(attn.q_norm(q), 0), attn.rope(attn.k_norm(k), 0)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)).masked_fill(~torch.ones(16, 16).tril().bool(), -1e9)
    with torch.no_grad():
        first = scores.max().item()
        assert modern_llm.max_attention_logit(model, ids) >= first - 1e-5
        model.blocks[1].attn.qkv.weight.zero_()  # layer 2's logits all 0: the maximum is layer 1's (if above 0)
        assert modern_llm.max_attention_logit(model, ids) == pytest.approx(max(first, 0.0), abs=1e-5)


def test_largest_output_finds_the_largest_value_and_the_first_layer_to_overflow():
    torch.manual_seed(0)
    model = GPT(_config().model_config(64)).eval()
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids)
        found = modern_llm.largest_output(model, ids, None)
        assert found["value"] >= round(logits.abs().max().item(), 3) and found["first_nonfinite"] is None
        model.blocks[0].mlp.down.weight[0, 0] = 1e6  # past float16's 65,504 once cast: that layer overflows first
        in_fp16 = modern_llm.largest_output(model, ids, torch.float16)
        assert in_fp16["first_nonfinite"] == "blocks.0.mlp.down" and in_fp16["value"] == "inf"
        assert modern_llm.largest_output(model, ids, None)["first_nonfinite"] is None  # float32 holds 1e6


@pytest.mark.skipif(not COMMITTED.exists(), reason="the modern_llm experiment has not been run into data/modern yet")
def test_committed_modern_llm_results_match_the_code():
    payload = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert stale_results(payload, modern_llm) == [], f"{COMMITTED} is stale: rerun the experiment"
    assert "--quick" not in payload["provenance"]["command"]
    settings = modern_llm.Settings(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in payload["settings"].items()}
    )
    assert settings == modern_llm.Settings()
