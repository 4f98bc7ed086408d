"""The two-layer MLP of Module 1 trained for real with DDP (SGD) or ZeRO-1 (``ZeroRedundancyOptimizer``).

Run: ``torchrun --standalone --nproc_per_node=N -m trainsys.distributed.ddp_train --out r.json
--optimizer sgd|zero-adam --steps T --lr LR --examples n --d-in d --d-hidden h --d-out o --seed S
[--fingerprint-every K] [--fault KIND:RANK:STEP]``.

Every rank builds the same initial weights from ``init_mlp_params`` (NumPy, seed ``S``) and the same
batch from ``make_synthetic_regression_batch`` (seed ``S + 1``), keeps its contiguous shard (the rule of
:func:`trainsys.memtrain.accumulation.micro_batch_bounds`) and takes ``T`` full-batch steps. DDP
averages the ranks' gradients (an all-reduce per bucket); ``ZeroRedundancyOptimizer`` additionally
keeps 1/N of Adam's state per rank. Rank 0 writes the global loss before every step and the final
weights, for comparison with the one-process simulation.

**Replica checks** (:mod:`trainsys.distributed.fingerprint`, the protocol of
:func:`trainsys.memtrain.divergence.simulate_replicated_training` for real). DDP never compares the
replicas: it all-reduces the gradients and trusts every rank to apply the same update. With
``--fingerprint-every K`` (``K >= 1``; ``0``, the default, checks nothing) every rank, after every step
``t`` (0-based) with ``(t + 1) % K == 0`` and after the last step, hashes its own parameters
(:func:`numpy_params`, float32) and all-gathers the 8-byte digests (:func:`check_replicas`); rank 0
records each failed check as ``{"detected_at": t, "workers": minority_workers(...)}`` — a fault of step
``t`` is reported at the first check at or after ``t``. Two ranks that differ tie, so both are named;
with three or more the odd one out is. The job also checks once just before and once just after the
DDP constructor (``init_check``).

**Injected faults**, ``--fault KIND:RANK:STEP`` (:func:`~trainsys.distributed.fingerprint.parse_fault`):

- ``skip`` — rank ``RANK`` does not call ``optimizer.step()`` at step ``STEP``; it still runs the backward
  pass, whose all-reduce needs every rank, so nothing hangs — it just keeps its old weights;
- ``flip`` — after step ``STEP``'s update, rank ``RANK`` flips the lowest mantissa bit of the first element
  of the first layer's weight (:func:`~trainsys.distributed.fingerprint.flip_lowest_bit_`);
- ``seed`` (``STEP = 0``) — rank ``RANK`` draws its initial weights with seed ``S + 1``, before the model is
  wrapped in DDP. **DDP repairs it silently**: the constructor broadcasts rank 0's parameters to every
  rank (``DistributedDataParallel.__init__``: "Sync params and buffers. Ensures all DDP models start off
  at the same value.", ``if init_sync: _sync_module_states(module, process_group, ..., src=0)``, which
  calls ``dist._broadcast_coalesced(..., src)`` — ``torch/nn/parallel/distributed.py`` and
  ``torch/distributed/utils.py`` of torch 2.13; documented as the ``init_sync`` argument, "broadcast
  parameters and buffers", default ``True``). Observed: ``init_check`` names the faulty rank before the
  constructor and nobody after it, no check ever fails, and the run equals the fault-free one. A wrong
  seed on rank 0 is *not* repaired but propagated: every rank starts from rank 0's weights, so the
  replicas agree (nothing to detect) on a start the simulation does not have.

``skip`` and ``flip`` need ``--optimizer sgd``: ``ZeroRedundancyOptimizer.step()`` is itself a
collective (each rank updates its shard of the parameters and broadcasts it), so a rank that skips it
would hang the job and a flipped parameter owned by another rank would be overwritten at the next step.
The result adds ``fingerprint_every``, ``fault`` (``None`` or ``{"kind", "rank", "step"}``),
``detections`` and ``init_check`` (``{"before_ddp": workers, "after_ddp": workers}``, ``None`` when
``K = 0``).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from trainsys.distributed.fingerprint import check_replicas, flip_lowest_bit_, parse_fault
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


def numpy_params(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """The MLP's parameters as ``init_mlp_params`` lays them out (``W = weightᵀ``): C-order float32 copies."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    tensors = {"W1": layers[0].weight.T, "b1": layers[0].bias, "W2": layers[1].weight.T, "b2": layers[1].bias}
    return {key: np.array(t.detach().numpy(), dtype=np.float32, order="C") for key, t in tensors.items()}


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
    parser.add_argument("--fingerprint-every", type=int, default=0,
                        help="K: check the replicas after every K-th step and the last (0: never)")
    parser.add_argument("--fault", default=None, help="KIND:RANK:STEP with KIND in skip, flip, seed")
    args = parser.parse_args()
    if args.fingerprint_every < 0:
        parser.error(f"--fingerprint-every must be an integer >= 0 (0 = no check), got {args.fingerprint_every}")
    rank, world = init_process_group()
    fault = None
    if args.fault is not None:
        try:
            fault = parse_fault(args.fault, world, args.steps)
        except ValueError as error:
            parser.error(str(error))
        if fault.kind in ("skip", "flip") and args.optimizer != "sgd":
            parser.error(f"--fault {fault.kind} needs --optimizer sgd (ZeroRedundancyOptimizer.step() is a "
                         f"collective that re-broadcasts every parameter), got --optimizer {args.optimizer}")
    torch.manual_seed(args.seed)

    def faulty(kind: str, step: int) -> bool:
        return fault is not None and (fault.kind, fault.rank, fault.step) == (kind, rank, step)

    init_seed = args.seed + 1 if faulty("seed", 0) else args.seed  # the fault: another seed, before DDP
    params = init_mlp_params(args.d_in, args.d_hidden, args.d_out, np.random.default_rng(init_seed))
    X, Y = make_synthetic_regression_batch(args.examples, args.d_in, args.d_out, np.random.default_rng(args.seed + 1))
    start, stop = micro_batch_bounds(args.examples, world)[rank]
    x, y = torch.from_numpy(X[start:stop]), torch.from_numpy(Y[start:stop])  # this rank's shard
    if args.examples % world:
        raise SystemExit("--examples must be divisible by the number of ranks: DDP averages the ranks' gradients equally")

    module = torch_mlp(params)
    every, init_check = args.fingerprint_every, None
    before = check_replicas(numpy_params(module), -1) if every else None
    model = DistributedDataParallel(module)  # broadcasts rank 0's parameters (init_sync): see the docstring
    if every:
        after = check_replicas(numpy_params(module), -1)
        init_check = {"before_ddp": before["workers"] if before else [],
                      "after_ddp": after["workers"] if after else []}
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    else:
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=args.lr)

    losses, detections = [], []
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)  # mean over this shard
        loss.backward()  # DDP all-reduces (averages) the gradients here — every rank, faulty or not
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        losses.append(float(global_loss) / world)
        if not faulty("skip", step):
            optimizer.step()
        if faulty("flip", step):
            flip_lowest_bit_(module[0].weight)
        if every and ((step + 1) % every == 0 or step == args.steps - 1):
            found = check_replicas(numpy_params(module), step)  # a collective: every rank calls it
            if found:
                detections.append(found)
    state_numel = 0
    if args.optimizer == "zero-adam":
        local = optimizer.optim.state  # this rank's shard of Adam's state only
        state_numel = sum(t.numel() for s in local.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq"))
    numels = [torch.tensor([state_numel], dtype=torch.int64)]
    gathered = [torch.zeros_like(numels[0]) for _ in range(world)]
    dist.all_gather(gathered, numels[0])
    final = {key: value.tolist() for key, value in numpy_params(model.module).items()}
    write_result(args.out, {"losses": losses, "params": final, "world_size": world,
                            "optimizer_state_numel_per_rank": [int(g) for g in gathered],
                            "fingerprint_every": every, "fault": asdict(fault) if fault else None,
                            "detections": detections, "init_check": init_check})
    del optimizer, model  # DDP's reducer must go while its process group is alive (else exit can hang)
    finish()


if __name__ == "__main__":
    main()
