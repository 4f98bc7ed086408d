"""Checks behind the hidden tests of Module 1, Part 6 (lessons 31–35: ZeRO-style optimizer sharding).

Flat lengths that ``N`` does not divide (so the last worker owns padding), a first Adam step (where a
missing bias correction is a factor of 10 and a wrong one divides by zero), small gradients (where
``eps`` inside the square root shows), a last real parameter equal to 0 (where stripping zeros instead of
the padding shows), and state shards whose length must be ``ceil(Ψ/N)``, not ``Ψ``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    fixed as _fixed,
    BAD,
    Args,
    CheckFailure,
    assert_array,
    assert_array_dict,
    assert_tuple,
    run_cases,
)
from trainsys.grading.data_parallel import with_snapshots
from trainsys.memtrain import mlp
from trainsys.memtrain import zero as ref

__all__ = [
    "check_init_adam_state",
    "check_partition_optimizer_state",
    "check_local_shard_adam_update",
    "check_all_gather_param_shards",
    "check_zero_optimizer_step",
]

HP = {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}




def _params(seed: int, d_in: int = 3, d_h: int = 5, d_out: int = 2, dtype: type = np.float32):
    rng = np.random.default_rng(seed)
    params = mlp.init_mlp_params(d_in, d_h, d_out, rng)
    params["b1"] = rng.standard_normal(d_h).astype(np.float32) * 0.1
    return {k: v.astype(dtype) for k, v in params.items()}


def _assert_step(label: str, what: str, got: Any, expected: int) -> None:
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)) or got != expected:
        raise CheckFailure(f"[{label}] {what} is {got!r}, expected {expected} (the number of steps taken)")


def _assert_state(label: str, what: str, got: Any, expected: dict, tree: bool) -> None:
    if not isinstance(got, dict) or set(got) != set(ref.STATE_KEYS):
        raise CheckFailure(f"[{label}] {what} must be a dict with exactly the keys {list(ref.STATE_KEYS)}")
    for key in ("m", "v"):
        if tree:
            assert_array_dict(label, f"{what}[{key!r}]", got[key], expected[key])
        else:
            assert_array(label, f"{what}[{key!r}]", got[key], expected[key])
    _assert_step(label, f"{what}['step']", got["step"], expected["step"])


# --- Lesson 31 -------------------------------------------------------------------------------------
def check_init_adam_state(fn: Callable[..., Any]) -> str:
    """Zeros of each parameter's shape in float32 (float64 for float64), m and v separate, step 0."""
    rng = np.random.default_rng(0)
    cases = [
        ("MLP parameters, float32", _fixed(_params(1))),
        ("MLP parameters, float64", _fixed(_params(2, dtype=np.float64))),
        ("float16 parameters (state stays float32)", _fixed(_params(3, dtype=np.float16))),
        ("a 3-D array and a 0-d scale", _fixed({"w": rng.standard_normal((2, 3, 4)).astype(np.float32),
                                                "scale": np.array(1.5, np.float32)})),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        _assert_state(label, "the state", got, expected, tree=True)
        params = inputs[0][0]
        for key in params:
            if np.shares_memory(got["m"][key], got["v"][key]):
                raise CheckFailure(f"[{label}] m[{key!r}] and v[{key!r}] are the same memory: updating one "
                                   "would overwrite the other")
            if np.shares_memory(got["m"][key], params[key]) or np.shares_memory(got["v"][key], params[key]):
                raise CheckFailure(f"[{label}] the state of {key!r} shares memory with the parameter")

    invalid = [
        ("params is a list", BAD, "params", _fixed([np.ones(3, np.float32)])),
        ("an integer parameter", BAD, "params", _fixed({"W": np.ones((2, 2), dtype=np.int32)})),
    ]
    return run_cases("init_adam_state", fn, ref.init_adam_state, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 32 -------------------------------------------------------------------------------------
def check_partition_optimizer_state(fn: Callable[..., Any]) -> str:
    """``[(k s, (k+1) s)]`` with ``s = ceil(Ψ/N)``: equal shards, the padding at the end."""
    sizes = [(12, 4), (10, 4), (10, 3), (7, 1), (5, 8), (1, 1), (100, 7), (3, 3), (13, 5)]
    cases = [(f"flat_numel={n}, num_workers={N}", _fixed(n, N)) for n, N in sizes]

    def compare(label: str, got: Any, expected: list) -> None:
        ok = isinstance(got, (list, tuple)) and all(isinstance(r, (list, tuple)) and len(r) == 2 for r in got)
        normalised = [tuple(int(x) for x in r) for r in got] if ok else got
        if normalised != expected:
            raise CheckFailure(f"[{label}] shard ranges are {got!r}, expected {expected} (s = ceil(flat_numel / N) "
                               "elements each; the last worker owns the padding, and every element is owned)")

    invalid = [
        ("num_workers = 0", BAD, "num_workers", _fixed(10, 0)),
        ("num_workers = -2", BAD, "num_workers", _fixed(10, -2)),
        ("num_workers = 2.0", BAD, "num_workers", _fixed(10, 2.0)),
        ("flat_numel = 0", BAD, "flat_numel", _fixed(0, 2)),
    ]
    return run_cases("partition_optimizer_state", fn, ref.partition_optimizer_state, cases, compare, invalid)


# --- Lesson 33 -------------------------------------------------------------------------------------
def _adam_case(shape: tuple, step: int, hp: dict, dtype: type, seed: int,
               grad_scale: float = 1.0) -> Callable[[], Args]:
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(shape).astype(dtype)
    g = (rng.standard_normal(shape) * grad_scale).astype(dtype)
    sdt = ref.state_dtype(np.dtype(dtype))
    if step == 0:
        m, v = np.zeros(shape, sdt), np.zeros(shape, sdt)
    else:
        m = (rng.standard_normal(shape) * 0.1 * grad_scale).astype(sdt)
        v = (rng.random(shape) * 0.1 * grad_scale**2).astype(sdt)
    return _fixed(p, g, {"m": m, "v": v, "step": step}, hp)


def check_local_shard_adam_update(fn: Callable[..., Any]) -> str:
    """torch's Adam on one shard: first step, later steps, tiny gradients, float32 and float64."""
    cases = [
        ("first step, 7 elements, torch defaults", _adam_case((7,), 0, ref.TORCH_ADAM_DEFAULTS, np.float32, 1)),
        ("first step, 1 element", _adam_case((1,), 0, HP, np.float64, 2)),
        ("step 4, float64", _adam_case((5,), 3, HP, np.float64, 3)),
        ("step 100, a (2, 3) shard", _adam_case((2, 3), 99, ref.TORCH_ADAM_DEFAULTS, np.float32, 4)),
        ("step 2, gradients of size 1e-4 (eps matters)",
         _adam_case((6,), 1, ref.TORCH_ADAM_DEFAULTS, np.float64, 5, 1e-4)),
    ]

    def compare(label: str, got: Any, expected: tuple) -> None:
        p, state = assert_tuple(label, "the result (new_param_shard, new_state_shard)", got, 2)
        assert_array(label, "new_param_shard", p, expected[0])
        _assert_state(label, "new_state_shard", state, expected[1], tree=False)

    p, g, state, _ = _adam_case((4,), 2, HP, np.float32, 6)()[0]
    invalid = [
        ("hp['lr'] = 0", BAD, "lr", _fixed(p, g, state, {**HP, "lr": 0.0})),
        ("hp['beta1'] = 1.0", BAD, "beta1", _fixed(p, g, state, {**HP, "beta1": 1.0})),
        ("hp['eps'] = -1e-8", BAD, "eps", _fixed(p, g, state, {**HP, "eps": -1e-8})),
        ("hp without 'eps'", BAD, "hp", _fixed(p, g, state, {k: v for k, v in HP.items() if k != "eps"})),
        ("grad_shard of 3 elements for 4", BAD, "grad_shard", _fixed(p, g[:3], state, HP)),
        ("state_shard['m'] of 5 elements for 4", BAD, "state_shard",
         _fixed(p, g, {**state, "m": np.zeros(5, np.float32)}, HP)),
        ("state_shard['step'] = -1", BAD, "step", _fixed(p, g, {**state, "step": -1}, HP)),
    ]
    return run_cases("local_shard_adam_update", fn, ref.local_shard_adam_update, cases, compare, invalid)


# --- Lesson 34 -------------------------------------------------------------------------------------
def _gather_case(numel: int, N: int, seed: int, dtype: type = np.float32, last_zero: bool = False):
    rng = np.random.default_rng(seed)
    s = -(-numel // N)
    flat = np.concatenate([rng.standard_normal(numel), np.zeros(N * s - numel)]).astype(dtype)
    if last_zero:
        flat[numel - 2:numel] = 0  # real parameters can be exactly 0
    return _fixed([flat[k * s:(k + 1) * s].copy() for k in range(N)], numel)


def check_all_gather_param_shards(fn: Callable[..., Any]) -> str:
    """Shards concatenated in worker order, exactly the padding removed (not trailing zeros)."""
    cases = [
        ("10 elements on 4 workers (2 padding)", _gather_case(10, 4, 1)),
        ("12 elements on 4 workers (no padding)", _gather_case(12, 4, 2)),
        ("7 elements on 1 worker", _gather_case(7, 1, 3, np.float64)),
        ("5 elements on 8 workers (3 workers own only padding)", _gather_case(5, 8, 4)),
        ("13 elements on 5 workers, the last two real values are 0", _gather_case(13, 5, 5, np.float64, True)),
    ]
    unchanged = with_snapshots(cases)

    def compare(label: str, got: Any, expected: np.ndarray, inputs: Args) -> None:
        unchanged(label, inputs)
        assert_array(label, "the gathered flat parameters", got, expected, exact=True)

    shards = _gather_case(10, 4, 6)()[0][0]
    invalid = [
        ("no shards", BAD, "shards", _fixed([], 4)),
        ("shards of 3 and 2 elements", BAD, "shards", _fixed([shards[0], shards[1][:2]], 5)),
        ("flat_numel = 20 for 4 shards of 3", BAD, "flat_numel", _fixed(shards, 20)),
        ("flat_numel = 0", BAD, "flat_numel", _fixed(shards, 0)),
    ]
    return run_cases("all_gather_param_shards", fn, ref.all_gather_param_shards, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 35 -------------------------------------------------------------------------------------
def _zero_case(N: int, steps_before: int, seed: int, dtype: type = np.float64) -> Callable[[], Args]:
    params = _params(seed, dtype=dtype)  # Ψ = 32 parameters
    rng = np.random.default_rng(seed + 100)
    states = ref.init_sharded_adam_states(params, N)
    for _ in range(steps_before):  # a state that has seen some gradients
        grads = [{k: rng.standard_normal(v.shape).astype(dtype) for k, v in params.items()} for _ in range(N)]
        params, states = ref.zero_optimizer_step(params, grads, states, HP)
    grads = [{k: rng.standard_normal(v.shape).astype(dtype) for k, v in params.items()} for _ in range(N)]
    return _fixed(params, grads, states, HP)


def check_zero_optimizer_step(fn: Callable[..., Any]) -> str:
    """Equal to the reference (= unsharded Adam on the mean gradient); state shards of ceil(Ψ/N) elements."""
    cases = [(f"{N} workers, Ψ = 32, after {t} steps", _zero_case(N, t, 10 + i))
             for i, (N, t) in enumerate([(1, 0), (2, 0), (3, 0), (4, 3), (5, 2), (3, 4)])]
    cases.append(("2 workers, float32", _zero_case(2, 1, 30, np.float32)))
    unchanged = with_snapshots(cases)

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        unchanged(label, inputs)
        new_params, states = assert_tuple(label, "the result (new_params, new_worker_states)", got, 2)
        assert_array_dict(label, "new_params", new_params, expected[0])
        if not isinstance(states, (list, tuple)) or len(states) != len(expected[1]):
            raise CheckFailure(f"[{label}] new_worker_states must be a list of {len(expected[1])} state shards")
        for k, (g, e) in enumerate(zip(states, expected[1])):
            if isinstance(g, dict) and isinstance(g.get("m"), np.ndarray) and g["m"].shape != e["m"].shape:
                raise CheckFailure(f"[{label}] worker {k}'s m has shape {g['m'].shape}, expected {e['m'].shape}: "
                                   "each worker keeps only its shard (1/N) of the optimizer state")
            _assert_state(label, f"new_worker_states[{k}]", g, e, tree=False)

    params, grads, states, _ = _zero_case(2, 0, 40)()[0]
    invalid = [
        ("no worker gradients", BAD, "worker_grads", _fixed(params, [], states, HP)),
        ("3 gradients for 2 states", BAD, "worker_states", _fixed(params, grads + grads[:1], states, HP)),
        ("a gradient without 'b2'", BAD, "worker_grads", _fixed(params, [grads[0], {k: v for k, v in grads[1].items()
                                                                                    if k != "b2"}], states, HP)),
        ("hp['lr'] = -0.1", BAD, "lr", _fixed(params, grads, states, {**HP, "lr": -0.1})),
        ("a state shard of the whole length", BAD, "worker_states",
         _fixed(params, grads, [ref.init_sharded_adam_states(params, 1)[0]] * 2, HP)),
    ]
    return run_cases("zero_optimizer_step", fn, ref.zero_optimizer_step, cases, compare, invalid,
                     compare_with_inputs=True)
