"""Simulated expert parallelism (GShard, Switch): a mixture-of-experts layer's experts spread over ranks.

Rank r holds experts r·E/n .. (r+1)·E/n − 1 and its own shard of the tokens (as in data parallelism). One layer:

1. every rank routes its own tokens (the small router is replicated);
2. **dispatch**: an all-to-all sends each (token, choice) row to the rank holding its expert;
3. each rank runs its local experts on the rows it received, from all ranks at once;
4. **combine**: a second all-to-all returns every result to the rank the token came from, which adds them up
   with the gate weights.

The arithmetic is the unsplit layer's, so the outputs (and the gradients, which flow back through the same two
exchanges) equal :class:`minillm.moe.MoE` on the concatenated tokens. What expert parallelism adds is traffic: each
row whose expert lives elsewhere crosses the network twice, d_model values each way, counted in ``ledger``
(payload only; the routing metadata — one expert id per row — is small and not counted). Here rank r's "holding"
is by index only: every rank uses the same expert modules, which is what makes the gradients land in one place.
"""

from __future__ import annotations

import torch

from minillm.moe import MoE, route
from minillm.parallel.collectives import CommLedger, all_to_all


class ExpertParallelMoE:
    """``moe``'s experts split over ``world_size`` simulated ranks; ``forward`` takes one token shard per rank.

    The capacity limit is refused: real systems apply it per rank to the tokens each rank sees, which is a
    different (and rank-count dependent) rule from the unsplit layer's, so the two would no longer be equal.
    """

    def __init__(self, moe: MoE, world_size: int) -> None:
        if not isinstance(moe, MoE):
            raise TypeError(f"moe must be a minillm.moe.MoE, got {type(moe).__name__}")
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive int, got {world_size!r}")
        if moe.n_experts % world_size:
            raise ValueError(
                f"n_experts={moe.n_experts} is not divisible by world_size={world_size}: each rank holds E/world"
            )
        if moe.capacity_factor is not None:
            raise ValueError(
                "the expert-parallel simulation needs capacity_factor=None: with a capacity, each rank would drop "
                "tokens by its own count and the result would differ from the unsplit layer"
            )
        self.moe, self.world_size = moe, world_size
        self.experts_per_rank = moe.n_experts // world_size
        self.ledger = CommLedger(world_size)
        self.bytes_sent = [0] * world_size  # per rank, over every forward so far

    def owner(self, expert: torch.Tensor) -> torch.Tensor:
        """The rank holding each expert id."""
        return expert // self.experts_per_rank

    def forward(self, x_shards: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per-rank outputs [N_r, d_model] for per-rank token shards [N_r, d_model]."""
        n = self.world_size
        if not isinstance(x_shards, (list, tuple)) or len(x_shards) != n:
            raise ValueError(f"expected one token shard per rank ({n}), got {len(x_shards)}")
        moe = self.moe
        routings = [route(moe.router(x), moe.top_k, moe.renormalize) for x in x_shards]
        # Dispatch: rank r sends to rank q the rows whose expert q holds, with each row's local expert id.
        rows, local_ids, sources = [], [], []  # [r][q]
        for x, routing in zip(x_shards, routings, strict=True):
            owners = self.owner(routing.experts)
            picked = [torch.nonzero(owners == q, as_tuple=True) for q in range(n)]
            rows.append([x[token] for token, _ in picked])
            local_ids.append([routing.experts[token, choice] - q * self.experts_per_rank
                              for q, (token, choice) in enumerate(picked)])  # fmt: skip
            sources.append(picked)
        received = all_to_all(rows, self.ledger)
        received_ids = [[local_ids[r][q] for r in range(n)] for q in range(n)]  # metadata, not counted
        # Each rank runs its experts once on everything it received, then splits the results by source.
        results = []
        for q in range(n):
            inputs, ids = torch.cat(received[q]), torch.cat(received_ids[q])
            out = torch.zeros_like(inputs)
            for e in range(self.experts_per_rank):
                where = torch.nonzero(ids == e, as_tuple=True)[0]
                if where.numel() or torch.is_grad_enabled():  # an idle expert gets a zero gradient, as in MoE
                    out = out.index_copy(0, where, moe.experts[q * self.experts_per_rank + e](inputs[where]))
            results.append(list(out.split([t.shape[0] for t in received[q]])))
        returned = all_to_all(results, self.ledger)  # combine: returned[r][q] = results[q][r]
        outputs = []
        for r, (x, routing) in enumerate(zip(x_shards, routings, strict=True)):
            y = torch.zeros_like(x)
            for q, (token, choice) in enumerate(sources[r]):
                y = y.index_add(0, token, returned[r][q] * routing.weights[token, choice, None])
            outputs.append(y)
        element = x_shards[0].element_size()
        sent = self.ledger.records[-2][1], self.ledger.records[-1][1]
        self.bytes_sent = [b + (d + c) * element for b, d, c in zip(self.bytes_sent, *sent, strict=True)]
        return outputs
