"""ZeRO: the paper's per-device numbers, and a stage-1 sharded step bit-identical to the unsharded one."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from minillm.parallel.data_parallel import SimulatedDataParallel
from minillm.parallel.zero import SimulatedZeRO1, zero_model_state_bytes


def test_paper_example_7_5b_on_64_devices():
    # Rajbhandari et al. 2019, Fig. 1: Ψ = 7.5B, N_d = 64, K = 12 → 120, 31.4, 16.6, 1.9 GB.
    psi, nd = 7_500_000_000, 64
    expected = {0: 16 * psi, 1: 4 * psi + 12 * psi / nd, 2: 2 * psi + 14 * psi / nd, 3: 16 * psi / nd}
    for stage, value in expected.items():
        assert zero_model_state_bytes(psi, nd, stage).total == pytest.approx(value, rel=1e-9)
    assert [round(zero_model_state_bytes(psi, nd, s).total / 1e9, 1) for s in range(4)] == [120.0, 31.4, 16.6, 1.9]


def test_gpt2_small_fp32_and_mixed():
    n = 124_439_808
    assert zero_model_state_bytes(n, 1, 0, precision="fp32").total == 16 * n
    assert zero_model_state_bytes(n, 1, 0, precision="mixed").total == 16 * n
    assert zero_model_state_bytes(n, 1, 0, precision="mixed_fp32_grads").total == 20 * n


def loss_fn(model, x, y):
    return F.cross_entropy(model(x), y)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_zero1_step_equals_unsharded_step_exactly(world_size):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(7, 9), nn.GELU(), nn.Linear(9, 4))
    x, y = torch.randn(24, 7), torch.randint(0, 4, (24,))
    make_opt = lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=False)
    dp = SimulatedDataParallel(model, world_size, make_opt)
    zero = SimulatedZeRO1(model, world_size, make_opt)
    for _ in range(4):
        dp.step(x, y, loss_fn)
        zero.step(x, y, loss_fn)
    for replica in zero.replicas:
        for p, p_ref in zip(replica.parameters(), dp.replicas[0].parameters(), strict=True):
            assert torch.equal(p, p_ref)  # element-wise optimizer, same sums: bit-identical
    # Memory: each rank holds 1/N of AdamW's m and v; together exactly the unsharded state.
    per_rank = zero.optimizer_state_bytes()
    numel = sum(p.numel() for p in model.parameters())
    assert sum(per_rank) == 2 * 4 * numel
    assert max(per_rank) - min(per_rank) <= 2 * 4


def test_bad_stage():
    with pytest.raises(ValueError, match="stage"):
        zero_model_state_bytes(10, 2, 4)
