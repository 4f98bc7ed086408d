"""``dist.all_reduce`` of seeded per-worker arrays, to compare with the simulated ring (Lesson 28).

Run: ``torchrun --standalone --nproc_per_node=N -m trainsys.distributed.allreduce --out r.json --size S --seed K``.
Rank ``k`` holds ``np.random.default_rng([seed, k]).standard_normal(size)`` (float32); rank 0 writes the
mean every rank ends with, and the per-rank check that all ranks agree.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.distributed as dist

from trainsys.distributed.launch import finish, init_process_group, write_result


def worker_array(seed: int, rank: int, size: int) -> np.ndarray:
    """The array worker ``rank`` contributes (the same in the simulation and in the real job)."""
    return np.random.default_rng([seed, rank]).standard_normal(size).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rank, world = init_process_group()
    tensor = torch.from_numpy(worker_array(args.seed, rank, args.size))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # every rank now holds the sum
    tensor /= world
    gathered = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(gathered, tensor)
    agree = all(torch.equal(gathered[0], g) for g in gathered)
    write_result(args.out, {"world_size": world, "mean": tensor.tolist(), "all_ranks_agree": agree,
                            "backend": dist.get_backend()})
    finish()


if __name__ == "__main__":
    main()
