"""The real engine on 2 spawned gloo processes (one spawn for every check: starting gloo costs seconds).

Our DataParallel (broadcast, bucketed all-reduce from hooks) and ZeRO-1 optimizer must train a tiny
float64 GPT to the same weights as one process on the whole global batch, and as torch's DDP.
"""

import pytest
import torch
from torch import nn

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
