"""The real engine on 2 spawned gloo processes (one spawn for every check: starting gloo costs seconds).

Our DataParallel (broadcast, bucketed all-reduce from hooks) and ZeRO-1 optimizer must train a tiny
float64 GPT to the same weights as one process on the whole global batch, and as torch's DDP. The α–β
measurement of minillm.parallel.allreduce_cost (its own spawn) must find small all-reduces latency-bound.
"""

import pytest
import torch
from torch import nn

from minillm.parallel.allreduce_cost import fit_alpha_beta, measure_all_reduce
from minillm.parallel.ddp_by_hand import DataParallel, ZeroRedundancyOptimizer, find_free_port, run_data_parallel_check

TOL = 1e-12  # float64; AdamW's m/√v amplifies the 1e-16 reordering of the batch mean over 3 steps


@pytest.fixture(scope="module")
def result():
    return run_data_parallel_check(world_size=2, steps=3, dtype="float64", bucket_cap_bytes=8192)


@pytest.mark.slow
def test_data_parallel_equals_single_process_and_ddp(result):
    assert result["dp_vs_single"] <= TOL
    assert result["ddp_vs_single"] <= TOL
    assert result["dp_vs_ddp"] <= TOL
    assert result["ranks_agree"] == 0.0  # the broadcast repaired rank 1's different start, grads agree
    for a, b in zip(result["losses_dp"], result["losses_single"], strict=True):
        assert abs(a - b) <= TOL


@pytest.mark.slow
def test_buckets_overlap_backward(result):
    assert result["buckets"] > 1
    # The first bucket was launched while most gradients were still being computed.
    first_bucket, still_pending = result["launch_log"][0]
    assert first_bucket == 0 and still_pending > 0
    assert result["launch_log"][-1][1] == 0


@pytest.mark.slow
def test_zero1_equals_single_process_and_halves_optimizer_state(result):
    assert result["zero_vs_single"] <= TOL
    assert result["zero_ranks_agree"] == 0.0
    per_rank = result["zero_state_bytes"]
    assert sum(per_rank) >= result["single_state_bytes"]  # padding may add a few elements
    assert sum(per_rank) - result["single_state_bytes"] <= 2 * 8 * len(per_rank)
    assert per_rank[0] == per_rank[1]


def test_wrappers_need_a_process_group():
    with pytest.raises(RuntimeError, match="torch.distributed"):
        DataParallel(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="torch.distributed"):
        ZeroRedundancyOptimizer(list(nn.Linear(2, 2).parameters()), torch.optim.AdamW)
    with pytest.raises(ValueError, match="world_size"):
        run_data_parallel_check(world_size=1)
    assert 0 < find_free_port() < 65536


# ----------------------------------------------------------------------------------------------------
# minillm.parallel.allreduce_cost: what a real all-reduce costs (one more spawn, a second or two of timing).


def test_alpha_beta_fit_recovers_an_exact_line():
    sizes = [256 * 4**k for k in range(8)]
    alpha, bandwidth = 50e-6, 2e9
    fitted_alpha, fitted_bandwidth = fit_alpha_beta(sizes, [alpha + s / bandwidth for s in sizes])
    assert fitted_alpha == pytest.approx(alpha, rel=1e-9)
    assert fitted_bandwidth == pytest.approx(bandwidth, rel=1e-9)
    # Relative weighting: a 10 % error on the largest message barely moves α (plain least squares would).
    noisy = [alpha + s / bandwidth for s in sizes]
    noisy[-1] *= 1.1
    assert fit_alpha_beta(sizes, noisy)[0] == pytest.approx(alpha, rel=0.05)
    with pytest.raises(ValueError, match="two"):
        fit_alpha_beta([1024], [1e-4])
    with pytest.raises(ValueError, match="positive"):
        fit_alpha_beta([1024, 2048], [1e-4, 0.0])
    with pytest.raises(ValueError, match="equal"):
        fit_alpha_beta([1024, 1024], [1e-4, 2e-4])


def test_measure_all_reduce_refuses_bad_arguments():
    with pytest.raises(ValueError, match="world_size"):
        measure_all_reduce(world_size=1)
    with pytest.raises(ValueError, match="multiple of 4"):
        measure_all_reduce(sizes_bytes=(1024, 1026))
    with pytest.raises(ValueError, match="rounds"):
        measure_all_reduce(rounds=0)
    with pytest.raises(ValueError, match="tensor_numels"):
        measure_all_reduce(tensor_numels=[4, 0])


@pytest.mark.slow
def test_small_all_reduces_are_latency_bound_and_buckets_pay():
    # Real gloo processes on a possibly busy machine: the bounds are loose (measured: 60-200x and 20-50x here).
    numels = [64 * 32, 16 * 32] + [32, 32, 96 * 32, 96, 32 * 32, 32, 32, 32, 128 * 32, 128, 32 * 128, 32] * 2
    cost = measure_all_reduce(world_size=2, sizes_bytes=(1024, 2**20, 4 * 2**20), rounds=5, tensor_numels=numels)
    assert cost["sizes"] == [1024, 2**20, 4 * 2**20] and all(t > 0 for t in cost["seconds"])
    per_byte = [t / s for s, t in zip(cost["sizes"], cost["seconds"], strict=True)]
    assert per_byte[0] > 10 * per_byte[-1]
    assert cost["alpha"] > 0 and cost["bandwidth"] > 0
    assert cost["tensors"] == len(numels)
    assert cost["per_tensor_seconds"] > 3 * cost["bucket_seconds"]
