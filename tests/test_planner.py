"""The planner's step-time model against hand-computed closed forms, and the rankings it must produce."""

import pytest

from minillm.parallel.planner import Hardware, group_in_one_node, plan, step_time, training_flops_per_token

SEVEN_B = (32, 4096, 32, 32000, 4096)  # layers, width, heads, vocabulary, sequence: notebook 07's "7B-class"


def test_flops_per_token_match_the_published_count():
    # GPT-2 small: 6N + 12·L·h·s with N = 123,653,376 (no position table) = 855,166,464 (nanoGPT's estimate_mfu).
    assert training_flops_per_token(12, 768, 50257, 1024) == 855_166_464
    # Full recomputation adds one forward, a third of the training FLOPs (Narayanan et al. 2021 Eq. 3: 96 vs 72).
    assert training_flops_per_token(12, 768, 50257, 1024, "full") * 3 == 855_166_464 * 4
    # Selective recomputation adds only the attention core's forward: 4·L·h·s.
    assert training_flops_per_token(12, 768, 50257, 1024, "selective") == 855_166_464 + 4 * 12 * 768 * 1024


def test_step_time_of_a_hand_computed_layout():
    # 8 devices, 4 per node; dp = tp = pp = 2; rank = (stage·dp + data rank)·tp + tensor rank.
    # Tensor group {0, 1} and data group {0, 2} lie in node 0; pipeline group {0, 4} spans nodes 0 and 1.
    hw = Hardware(peak_flops=1e12, utilisation=0.5, gpus_per_node=4, intra_node_bandwidth=1e9, inter_node_bandwidth=1e8)
    L, h, V, s, m = 2, 8, 16, 4, 4
    got = step_time(L, h, V, s, dp=2, tp=2, pp=2, micro_batches=m, zero_stage=0, recompute="full", hardware=hw)
    n = 16 * 8 + 2 * (12 * 64 + 13 * 8) + 2 * 8  # 1888 parameters without the position table
    tokens = 2 * 4 * 1 * 4  # dp · m · b · s
    base = tokens * (6 * n + 12 * L * h * s) / (8 * 0.5e12)
    compute = tokens * (8 * n + 16 * L * h * s) / (8 * 0.5e12)  # + one more forward: 2N + 4Lhs
    value = 1 * 4 * 8 * 2  # b·s·h fp16 bytes = 64
    tensor = 6 * 1 * m * (2 * 1 / 2 * value) / 1e9  # 6 all-reduces (full recompute) × 1 layer per stage × m
    pipe = 2 * m * value / 1e8  # one activation and one gradient per micro-batch, across nodes
    bubble = (2 - 1) * (compute + tensor + pipe) / m
    data = 2 * 1 / 2 * (1920 // 4) * 2 / 1e9  # ring all-reduce of the stage's fp16 gradients (1920 params / tp·pp)
    hidden_behind = (2 / 3 * base + (compute - base)) / m  # the last micro-batch's backward
    assert got.compute == pytest.approx(compute, rel=1e-12)
    assert got.recompute == pytest.approx(compute - base, rel=1e-12)
    assert got.tensor_comm == pytest.approx(tensor, rel=1e-12)
    assert got.pipeline_comm == pytest.approx(pipe, rel=1e-12)
    assert got.bubble == pytest.approx(bubble, rel=1e-12)
    assert got.data_comm == pytest.approx(data, rel=1e-12)
    assert got.data_comm_exposed == pytest.approx(data - hidden_behind, rel=1e-12)
    assert got.total == pytest.approx(compute + tensor + pipe + bubble + data - hidden_behind, rel=1e-12)


@pytest.mark.parametrize(("p", "m"), [(2, 8), (4, 4), (8, 8)])
def test_bubble_and_recomputation_on_an_ideal_network(p, m):
    fast = Hardware(intra_node_bandwidth=1e30, inter_node_bandwidth=1e30)
    L, h, _, V, s = SEVEN_B
    plain = step_time(L, h, V, s, dp=1, tp=1, pp=p, micro_batches=m, hardware=fast)
    full = step_time(L, h, V, s, dp=1, tp=1, pp=p, micro_batches=m, recompute="full", hardware=fast)
    # Wall time = ideal compute · (m + p − 1)/m: the bubble is (p−1)/(m+p−1) of it.
    assert plain.total == pytest.approx(plain.compute * (m + p - 1) / m, rel=1e-9)
    assert plain.bubble / plain.total == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)
    assert full.compute == pytest.approx(4 / 3 * plain.compute, rel=1e-12)


def test_groups_and_nodes():
    assert group_in_one_node(dp=2, tp=8, pp=1, kind="tp", gpus_per_node=8)
    assert not group_in_one_node(dp=2, tp=8, pp=1, kind="dp", gpus_per_node=8)  # ranks 0 and 8
    assert not group_in_one_node(dp=1, tp=16, pp=1, kind="tp", gpus_per_node=8)
    assert group_in_one_node(dp=2, tp=4, pp=2, kind="dp", gpus_per_node=8)  # ranks 0 and 4
    assert not group_in_one_node(dp=2, tp=4, pp=2, kind="pp", gpus_per_node=8)  # ranks 0 and 8
    assert not group_in_one_node(dp=1, tp=3, pp=2, kind="tp", gpus_per_node=4)  # ranks 3, 4, 5 straddle


def test_tensor_parallelism_across_nodes_ranks_below_tensor_parallelism_inside_one():
    hw = Hardware()
    layouts = plan(*SEVEN_B, devices=16, device_memory_bytes=80e9, global_batch=16, hardware=hw)
    pick = lambda tp: next(l for l in layouts if l.tp == tp and l.pp == 1 and l.recompute == "none")
    inside, across = pick(8), pick(16)
    assert layouts.index(inside) < layouts.index(across)
    assert across.step_time > 2 * inside.step_time
    # The tensor all-reduces run at NVLink speed inside a node, at InfiniBand speed across two.
    L, h, _, V, s = SEVEN_B
    per_rank = lambda tp, m: 4 * L * m * 2 * (tp - 1) / tp * (s * h * 2)
    assert inside.time.tensor_comm == pytest.approx(per_rank(8, 8) / hw.intra_node_bandwidth, rel=1e-12)
    assert across.time.tensor_comm == pytest.approx(per_rank(16, 16) / hw.inter_node_bandwidth, rel=1e-12)


def test_notebook_model_top_layout_is_not_the_deep_recomputing_pipeline():
    layouts = plan(*SEVEN_B, devices=8, device_memory_bytes=80e9, global_batch=8)
    deep = next(l for l in layouts if l.pp == 8 and l.recompute == "full")
    # Ranked by traffic (then memory), the 8-stage full-recomputation pipeline would win: fewest bytes ...
    assert min(layouts, key=lambda l: (l.comm_bytes, l.total_bytes)) == deep
    # ... but it idles 7/15 of the time and computes every forward twice.
    assert deep.bubble_fraction == pytest.approx(7 / 15)
    top = layouts[0]
    assert not (top.pp == 8 and top.recompute == "full")
    assert top.step_time < 0.6 * deep.step_time
    assert [l.step_time for l in layouts] == sorted(l.step_time for l in layouts)


def test_global_batch_is_the_same_for_every_layout():
    for layout in plan(*SEVEN_B, devices=8, device_memory_bytes=80e9, global_batch=16, only_fitting=False):
        assert layout.dp * layout.micro_batches == 16
    with pytest.raises(ValueError):
        plan(*SEVEN_B, devices=8, device_memory_bytes=80e9, global_batch=0)
