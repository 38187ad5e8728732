"""Time minillm's DataParallel and ZeRO-1 against torch's DistributedDataParallel on 2 gloo processes.

    python benchmarks/bench_parallel.py [--steps 20] [--d-model 128] [--layers 4]

All runs happen inside one spawn on the same machine, so the printed ratios (ours / DDP) are comparable
even when other jobs slow the machine down; absolute seconds are not. The single-process run uses the
whole global batch on the parent's threads, so its ratio is a reference point, not a speed-up claim.
"""

from __future__ import annotations

import argparse

from minillm.parallel.ddp_by_hand import run_data_parallel_check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--bucket-kib", type=int, default=1024)
    args = parser.parse_args()
    result = run_data_parallel_check(
        world_size=2,
        steps=args.steps,
        dtype="float32",
        n_layer=args.layers,
        d_model=args.d_model,
        bucket_cap_bytes=args.bucket_kib * 1024,
    )
    t = result["timings"]
    print(f"GPT {args.layers}×{args.d_model}, {args.steps} AdamW steps, 2 gloo processes, {result['buckets']} buckets")
    for name in ("ddp", "dp", "zero", "single"):
        print(f"  {name:7s} {t[name]:7.2f} s   ratio to DDP {t[name] / t['ddp']:5.2f}")
    print(f"  spawn + all three runs: {result['wall_seconds']:.1f} s")
    print(
        f"  max |diff| of final weights (float32): ours vs DDP {result['dp_vs_ddp']:.1e}, "
        f"ours vs single {result['dp_vs_single']:.1e}, ZeRO-1 vs single {result['zero_vs_single']:.1e}"
    )


if __name__ == "__main__":
    main()
