"""Module 1's real engine: torch.distributed jobs (2 processes, gloo) against the one-process simulation.

Lesson 28: ``dist.all_reduce`` ends with the simulated ring's result. Lessons 29 and 35: DDP with SGD,
and ``ZeroRedundancyOptimizer`` with Adam, follow the simulated data-parallel and ZeRO runs from the
same initial weights and data order.
"""

from __future__ import annotations

import numpy as np
import pytest

from trainsys.tolerance import assert_within_rounding
from trainsys.distributed.allreduce import worker_array
from trainsys.distributed.launch import run
from trainsys.memtrain import mlp, zero
from trainsys.memtrain.data_parallel import compute_local_gradients, data_parallel_train_step, \
    shard_dataset_across_workers
from trainsys.memtrain.ring_allreduce import ring_all_reduce_mean

pytestmark = pytest.mark.slow
SIZES = dict(n=64, d_in=8, d_hidden=16, d_out=2, seed=0)


def _problem():
    params = mlp.init_mlp_params(SIZES["d_in"], SIZES["d_hidden"], SIZES["d_out"], np.random.default_rng(SIZES["seed"]))
    X, Y = mlp.make_synthetic_regression_batch(SIZES["n"], SIZES["d_in"], SIZES["d_out"],
                                               np.random.default_rng(SIZES["seed"] + 1))
    return params, X, Y


def _job(optimizer: str, steps: int, lr: float) -> dict:
    return run("trainsys.distributed.ddp_train", 2, "--optimizer", optimizer, "--steps", str(steps), "--lr", str(lr),
               "--examples", str(SIZES["n"]), "--d-in", str(SIZES["d_in"]), "--d-hidden", str(SIZES["d_hidden"]),
               "--d-out", str(SIZES["d_out"]), "--seed", str(SIZES["seed"]), timeout=240)


def test_m1_28_dist_all_reduce_equals_the_simulated_ring() -> None:
    size, seed = 1001, 7  # not divisible by the 2 workers: chunks of 501 and 500
    job = run("trainsys.distributed.allreduce", 2, "--size", str(size), "--seed", str(seed), timeout=240)
    simulated, _ = ring_all_reduce_mean([worker_array(seed, k, size) for k in range(2)])
    assert job["all_ranks_agree"] and job["backend"] == "gloo"
    # two workers: a + b in either order is the same float32 number, and the division by 2 (or the
    # multiplication by 0.5) is exact; dividing first is exact too (away from subnormals): 2 roundings at most,
    # relative to (|a| + |b|) / 2 (trainsys.tolerance)
    arrays = [worker_array(seed, k, size) for k in range(2)]
    assert_within_rounding(np.array(job["mean"], np.float32), simulated[0],
                           (np.abs(arrays[0]).astype(np.float64) + np.abs(arrays[1])) / 2, 2, np.float32, "mean")


def test_m1_29_ddp_follows_the_simulated_data_parallel_run() -> None:
    steps, lr = 20, 0.05
    job = _job("sgd", steps, lr)
    params, X, Y = _problem()
    shards = shard_dataset_across_workers(X, Y, 2)
    losses = []
    for _ in range(steps):
        params, loss, _ = data_parallel_train_step(params, shards, lr)
        losses.append(loss)
    # a trajectory with feedback (each step's gradient depends on the parameters), so no a-priori bound:
    # per step the two differ by the gradient's rounding bound (~2 gamma_60 ~ 7e-6 relative to its magnitude
    # in float32, DDP's bucketed reduction order vs the simulation's); 20 steps at lr 0.05 on this small,
    # well-conditioned problem keep that amplification below the margins here (not proven: an estimate)
    np.testing.assert_allclose(job["losses"], losses, rtol=1e-5)
    for key in mlp.PARAM_KEYS:
        np.testing.assert_allclose(np.array(job["params"][key], np.float32), params[key], rtol=1e-4, atol=1e-6)


def test_m1_35_zero_redundancy_optimizer_follows_the_simulated_zero_run() -> None:
    steps, lr = 20, 0.01
    job = _job("zero-adam", steps, lr)
    params, X, Y = _problem()
    shards = shard_dataset_across_workers(X, Y, 2)
    states = zero.init_sharded_adam_states(params, 2)
    hp = {**zero.TORCH_ADAM_DEFAULTS, "lr": lr}
    losses = []
    for _ in range(steps):
        local = [compute_local_gradients(params, shard) for shard in shards]
        losses.append(sum(loss for _, loss, _ in local) / len(X))
        worker_grads = [{k: g / n_k for k, g in grads.items()} for grads, _, n_k in local]  # equal shards: means
        params, states = zero.zero_optimizer_step(params, worker_grads, states, hp)
    # as above, a trajectory: no a-priori bound; Adam's normalised steps keep the drift at rounding level
    np.testing.assert_allclose(job["losses"], losses, rtol=2e-5)
    psi = sum(p.size for p in params.values())
    per_rank = job["optimizer_state_numel_per_rank"]  # torch shards whole tensors: near, not exactly, 2*psi/N
    assert sum(per_rank) == 2 * psi and max(per_rank) < 2 * psi
