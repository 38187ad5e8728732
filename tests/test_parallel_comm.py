"""Communication model vs the simulated ring's counted traffic and the published volumes."""

import pytest
import torch

from minillm.parallel.collectives import CommLedger, ring_all_reduce
from minillm.parallel.comm import collective_bytes, collective_time, data_parallel_bytes, tensor_parallel_bytes
from minillm.parallel.planner import plan, transformer_params


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_reduce_bytes_equal_the_simulated_ring(n):
    elements = 8 * n * 10
    ledger = CommLedger(n)
    ring_all_reduce([torch.zeros(elements) for _ in range(n)], ledger=ledger)
    assert ledger.sent_per_rank()[0] * 4 == collective_bytes("all_reduce", elements * 4, n)


def test_zero_volumes_relative_to_ddp():
    psi = 124_439_808
    ddp = data_parallel_bytes(psi, 4)
    assert ddp == pytest.approx(2 * 3 / 4 * psi * 4)
    assert data_parallel_bytes(psi, 2) / 1e6 == pytest.approx(497.76, abs=0.01)  # GPT-2 small fp32, n=2
    assert data_parallel_bytes(psi, 4, zero_stage=2) == pytest.approx(ddp)
    assert data_parallel_bytes(psi, 4, zero_stage=3) == pytest.approx(1.5 * ddp)


def test_alpha_beta_time():
    # 1 GB all-reduce over 8 ranks at 100 GB/s with 5 µs latency: 14 steps·5 µs + 1.75 GB / 100 GB/s.
    t = collective_time("all_reduce", 1e9, 8, 100e9, 5e-6)
    assert t == pytest.approx(14 * 5e-6 + 1.75e9 / 100e9)


def test_tensor_parallel_four_all_reduces_per_layer():
    one = collective_bytes("all_reduce", 2 * 4 * 8 * 2, 2)
    assert tensor_parallel_bytes(3, 2, 4, 8, 2) == pytest.approx(4 * 3 * one)


def test_planner_lists_only_fitting_layouts():
    assert transformer_params(12, 768, 50257, 1024) == 124_439_808
    layouts = plan(32, 4096, 32, 50257, 2048, devices=8, device_memory_bytes=80e9, micro_batch=1, global_batch=8)
    assert layouts and all(l.total_bytes <= 80e9 for l in layouts)
    assert all(l.dp * l.tp * l.pp == 8 for l in layouts)
    # ~6.5B parameters need 104 GB of model states without sharding: pure DP without ZeRO cannot fit.
    assert not any(l.dp == 8 and l.zero_stage == 0 for l in layouts)
    assert any(l.dp == 8 and l.zero_stage == 3 for l in layouts)
    everything = plan(32, 4096, 32, 50257, 2048, 8, 80e9, only_fitting=False)
    assert len(everything) > len(layouts)
