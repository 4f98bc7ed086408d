"""DiLoCo for real: one process per worker, torch's AdamW inside, one all-reduce every H steps.

Run: ``torchrun --standalone --nproc_per_node=k -m trainsys.distributed.diloco --out r.json
--rounds T --inner-steps H [--sharding iid|noniid] [--seed S]``.

Every rank builds the run of :func:`trainsys.diloco.loop.setup_run` for the same config (data, held-out
split, shards, initial weights, per-worker batch generators) and keeps its own shard and generator.
Each round, rank ``k`` copies the global model, takes ``H`` steps of ``torch.optim.AdamW`` (state kept
across rounds, never synchronised) on batches drawn exactly as the simulation draws them, then
``dist.all_reduce`` averages the workers' parameters; the pseudo-gradient ``θ_global − mean(θ_k)``
is applied with ``torch.optim.SGD(momentum, nesterov=True)`` on every rank. Rank 0 writes the held-out
loss and accuracy per round, for comparison with :func:`trainsys.diloco.loop.train_diloco`.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.distributed as dist

from trainsys.distributed.launch import finish, init_process_group, write_result
from trainsys.diloco.evaluation import classification_accuracy, evaluate_heldout_loss
from trainsys.diloco.loop import setup_run
from trainsys.diloco.sharding import sample_worker_batch


def _model(params: dict[str, np.ndarray]) -> torch.nn.Sequential:
    """An ``nn.Sequential`` of ``Linear``/``ReLU`` holding the NumPy parameters (``Linear`` stores ``Wᵀ``)."""
    L = len(params) // 2
    layers: list[torch.nn.Module] = []
    for l in range(L):
        W, b = params[f"W{l}"], params[f"b{l}"]
        linear = torch.nn.Linear(*W.shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(W.T.copy()))
            linear.bias.copy_(torch.from_numpy(b))
        layers += [linear, torch.nn.ReLU()] if l < L - 1 else [linear]
    return torch.nn.Sequential(*layers)


def _numpy_params(model: torch.nn.Module) -> dict[str, np.ndarray]:
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    out = {}
    for l, linear in enumerate(linears):
        out[f"W{l}"] = linear.weight.detach().numpy().T.copy()
        out[f"b{l}"] = linear.bias.detach().numpy().copy()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inner-steps", type=int, default=10)
    parser.add_argument("--sharding", choices=["iid", "noniid"], default="iid")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rank, world = init_process_group()
    run = setup_run({"num_workers": world, "rounds": args.rounds, "inner_steps": args.inner_steps,
                     "sharding": args.sharding, "seed": args.seed, "progress": False})
    cfg = run["config"]
    shard, rng = run["shards"][rank], run["worker_rngs"][rank]  # this worker's data and batch order

    global_model = _model(run["params"])
    worker_model = _model(run["params"])
    inner = torch.optim.AdamW(worker_model.parameters(), lr=cfg.inner_lr, betas=(cfg.beta1, cfg.beta2),
                              eps=cfg.eps, weight_decay=cfg.weight_decay)
    outer = torch.optim.SGD(global_model.parameters(), lr=cfg.outer_lr, momentum=cfg.outer_momentum, nesterov=True)
    history = []
    for _ in range(cfg.rounds):
        with torch.no_grad():  # start the round from the global model; AdamW's state stays this worker's
            for w, g in zip(worker_model.parameters(), global_model.parameters()):
                w.copy_(g)
        for _ in range(cfg.inner_steps):
            X, y = sample_worker_batch(shard, cfg.batch_size, rng)
            inner.zero_grad()
            torch.nn.functional.cross_entropy(worker_model(torch.from_numpy(X)), torch.from_numpy(y)).backward()
            inner.step()
        outer.zero_grad()
        for w, g in zip(worker_model.parameters(), global_model.parameters()):
            mean = w.detach().clone()
            dist.all_reduce(mean)  # the round's only communication: Σ_k θ_k
            g.grad = g.detach() - mean / world  # pseudo-gradient θ_global − mean θ_k
        outer.step()  # Nesterov momentum on the pseudo-gradient
        params = _numpy_params(global_model)
        history.append({"heldout_loss": evaluate_heldout_loss(params, run["X_heldout"], run["y_heldout"]),
                        "heldout_accuracy": classification_accuracy(params, run["X_heldout"], run["y_heldout"])})
    write_result(args.out, {"history": history, "world_size": world})
    del inner, outer, worker_model, global_model
    finish()


if __name__ == "__main__":
    main()
