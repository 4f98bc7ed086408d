"""The two-layer MLP of Module 1 trained for real with DDP (SGD) or ZeRO-1 (``ZeroRedundancyOptimizer``).

Run: ``torchrun --standalone --nproc_per_node=N -m trainsys.distributed.ddp_train --out r.json
--optimizer sgd|zero-adam --steps T --lr LR --examples n --d-in d --d-hidden h --d-out o --seed S``.

Every rank builds the same initial weights from ``init_mlp_params`` (NumPy, seed ``S``) and the same
batch from ``make_synthetic_regression_batch`` (seed ``S + 1``), keeps its contiguous shard (the rule of
:func:`trainsys.memtrain.accumulation.micro_batch_bounds`) and takes ``T`` full-batch steps. DDP
averages the ranks' gradients (an all-reduce per bucket); ``ZeroRedundancyOptimizer`` additionally
keeps 1/N of Adam's state per rank. Rank 0 writes the global loss before every step and the final
weights, for comparison with the one-process simulation.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from trainsys.distributed.launch import finish, init_process_group, write_result
from trainsys.memtrain.accumulation import micro_batch_bounds
from trainsys.memtrain.mlp import init_mlp_params, make_synthetic_regression_batch


def torch_mlp(params: dict[str, np.ndarray]) -> torch.nn.Sequential:
    """``nn.Sequential(Linear, ReLU, Linear)`` holding the NumPy parameters (``nn.Linear`` stores ``Wᵀ``)."""
    d_in, d_hidden = params["W1"].shape
    model = torch.nn.Sequential(torch.nn.Linear(d_in, d_hidden), torch.nn.ReLU(),
                                torch.nn.Linear(d_hidden, params["W2"].shape[1]))
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(params["W1"].T.copy()))
        model[0].bias.copy_(torch.from_numpy(params["b1"]))
        model[2].weight.copy_(torch.from_numpy(params["W2"].T.copy()))
        model[2].bias.copy_(torch.from_numpy(params["b2"]))
    return model


def numpy_params(model: torch.nn.Module) -> dict[str, list]:
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return {"W1": layers[0].weight.detach().T.tolist(), "b1": layers[0].bias.detach().tolist(),
            "W2": layers[1].weight.detach().T.tolist(), "b2": layers[1].bias.detach().tolist()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--optimizer", choices=["sgd", "zero-adam"], default="sgd")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--d-in", type=int, default=8)
    parser.add_argument("--d-hidden", type=int, default=16)
    parser.add_argument("--d-out", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rank, world = init_process_group()
    torch.manual_seed(args.seed)

    params = init_mlp_params(args.d_in, args.d_hidden, args.d_out, np.random.default_rng(args.seed))
    X, Y = make_synthetic_regression_batch(args.examples, args.d_in, args.d_out, np.random.default_rng(args.seed + 1))
    start, stop = micro_batch_bounds(args.examples, world)[rank]
    x, y = torch.from_numpy(X[start:stop]), torch.from_numpy(Y[start:stop])  # this rank's shard
    if args.examples % world:
        raise SystemExit("--examples must be divisible by the number of ranks: DDP averages the ranks' gradients equally")

    model = DistributedDataParallel(torch_mlp(params))
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    else:
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=args.lr)

    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)  # mean over this shard
        loss.backward()  # DDP all-reduces (averages) the gradients here
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        losses.append(float(global_loss) / world)
        optimizer.step()
    state_numel = 0
    if args.optimizer == "zero-adam":
        local = optimizer.optim.state  # this rank's shard of Adam's state only
        state_numel = sum(t.numel() for s in local.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq"))
    numels = [torch.tensor([state_numel], dtype=torch.int64)]
    gathered = [torch.zeros_like(numels[0]) for _ in range(world)]
    dist.all_gather(gathered, numels[0])
    write_result(args.out, {"losses": losses, "params": numpy_params(model.module), "world_size": world,
                            "optimizer_state_numel_per_rank": [int(g) for g in gathered]})
    del optimizer, model  # DDP's reducer must go while its process group is alive (else exit can hang)
    finish()


if __name__ == "__main__":
    main()
