"""Checks behind the hidden tests of Module 1, Part 6 (lessons 31–35: ZeRO-style optimizer sharding).

Flat lengths that ``N`` does not divide (so the last worker owns padding), a first Adam step (where a
missing bias correction is a factor of 10 and a wrong one divides by zero), small gradients (where
``eps`` inside the square root shows), a last real parameter equal to 0 (where stripping zeros instead of
the padding shows), and state shards whose length must be ``ceil(Ψ/N)``, not ``Ψ``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    against_fresh_inputs,
    fixed as _fixed,
    BAD,
    Args,
    CheckFailure,
    assert_array,
    assert_array_dict,
    assert_tuple,
    call,
    passed,
    quiet,
    run_cases,
)
from trainsys.memtrain import mlp
from trainsys.memtrain import zero as ref

__all__ = [
    "check_init_adam_state",
    "check_partition_optimizer_state",
    "check_local_shard_adam_update",
    "check_all_gather_param_shards",
    "check_zero_optimizer_step",
]

CLAUSES = {
    "init_adam_state": {
        "dtype rule": ("MLP parameters, float64", "float16 parameters"),
        "mutation": ("MLP parameters, float32", "float16 parameters"),
        "aliasing": ("MLP parameters, float32",),
        "failure modes": ("params is a list", "an integer parameter 'layer7'", "a parameter given as a Python list",
                          "a boolean parameter array"),
        "metric that proves it correct": ("MLP parameters, float32",),
    },
    "partition_optimizer_state": {
        "padding rule": ("flat_numel=10, num_workers=4", "flat_numel=1152921504606846977"),
        "mutation": ("called twice with (11, 3)",),
        "failure modes": ("num_workers = 0", "num_workers = True", "num_workers = '4'", "flat_numel = 0",
                          "flat_numel = 10.0"),
        "metric that proves it correct": ("flat_numel=10, num_workers=4",),
    },
    "local_shard_adam_update": {
        "mutation": ("first step, 7 elements, torch defaults", "first step, a zero gradient"),
        "failure modes": ("step 2, beta1 = 0", "hp['lr'] = nan", "hp with an extra key 'weight_decay'",
                          "state_shard['m'] of 5 elements", "state_shard['step'] = True",
                          "state_shard['step'] = 2.0", "param_shard an integer array"),
        "metric that proves it correct": ("first step, 7 elements, torch defaults", "first step, 1 element"),
    },
    "all_gather_param_shards": {
        "mutation": ("7 elements on 1 worker", "10 elements on 4 workers, the padding slots hold 7.0"),
        "failure modes": ("no shards", "shards[1] of 2 elements, shards[0] of 3", "shards[2] float64",
                          "shards[0] an integer array", "2-D shards", "flat_numel = 8", "flat_numel = True"),
        "metric that proves it correct": ("10 elements on 4 workers (2 padding)", "13 elements on 5 workers"),
    },
    "zero_optimizer_step": {
        "flat order": ("1 workers, Ψ = 32, after 0 steps",),
        "mutation": ("1 workers, Ψ = 32, after 0 steps",),
        "failure modes": ("no worker gradients", "3 gradients for 2 states", "worker_grads[1] with an extra key 'b3'",
                          "worker_grads[1]['W1'] of shape (5, 3)", "worker_states[1]['v'] of the whole length"),
        "metrics that prove it correct": ("1 workers, Ψ = 32, after 0 steps", "2 workers, Ψ = 32, after 0 steps",
                                          "6 workers, Ψ = 4"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

TE = (TypeError,)
"""The contract says TypeError (a wrong type: ``True``, ``2.0`` or a string for a count, an integer array)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value or shape)."""

HP = {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}




def _params(seed: int, d_in: int = 3, d_h: int = 5, d_out: int = 2, dtype: type = np.float32):
    rng = np.random.default_rng(seed)
    params = mlp.init_mlp_params(d_in, d_h, d_out, rng)
    params["b1"] = rng.standard_normal(d_h).astype(np.float32) * 0.1
    return {k: v.astype(dtype) for k, v in params.items()}


def _assert_step(label: str, what: str, got: Any, expected: int) -> None:
    if type(got) is not int or got != expected:
        raise CheckFailure(f"[{label}] {what} is {got!r} ({type(got).__name__}), expected the Python int {expected} "
                           "(the number of steps taken)")


def _assert_new(label: str, what: str, got: Any, inputs: Any, where: str = "argument") -> None:
    """``got`` must share memory with no array among ``inputs`` (nested dicts, lists and tuples)."""
    def arrays(obj: Any, path: str):
        if isinstance(obj, np.ndarray):
            yield path, obj
        elif isinstance(obj, dict):
            for key, value in obj.items():
                yield from arrays(value, f"{path}[{key!r}]")
        elif isinstance(obj, (list, tuple)):
            for i, value in enumerate(obj):
                yield from arrays(value, f"{path}[{i}]")

    for path, array in arrays(inputs, where):
        if np.shares_memory(got, array):
            raise CheckFailure(f"[{label}] {what} shares memory with the input {path}; every result must be a "
                               "new array")


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

    originals = dict(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        _assert_state(label, "the state", got, expected, tree=True)
        params = inputs[0][0]
        original = originals[label]()[0][0]
        for key, before in original.items():
            after = params.get(key) if isinstance(params, dict) else None
            if not isinstance(after, np.ndarray) or after.dtype != before.dtype or after.shape != before.shape:
                now = f"{after.dtype} {after.shape}" if isinstance(after, np.ndarray) else type(after).__name__
                raise CheckFailure(f"[{label}] params[{key!r}] was {before.dtype} {before.shape} and is now {now}: "
                                   "params is not touched — read its shapes and dtypes, write only into the new "
                                   "state")
        for key in params:
            if np.shares_memory(got["m"][key], got["v"][key]):
                raise CheckFailure(f"[{label}] m[{key!r}] and v[{key!r}] are the same memory: updating one "
                                   "would overwrite the other")
            if np.shares_memory(got["m"][key], params[key]) or np.shares_memory(got["v"][key], params[key]):
                raise CheckFailure(f"[{label}] the state of {key!r} shares memory with the parameter")
            for moment in ("m", "v"):
                if not got[moment][key].flags.writeable:
                    raise CheckFailure(f"[{label}] {moment}[{key!r}] is read-only (a broadcast view?); the state is "
                                       "updated in place, so every array must be a new, writable buffer")

    w = np.ones((2, 2), np.float32)
    invalid = [
        ("params is a list", (TypeError,), "params", _fixed([np.ones(3, np.float32)])),
        ("an integer parameter 'layer7'", (TypeError,), ("params", "layer7"),
         _fixed({"W": w, "layer7": np.ones((2, 2), dtype=np.int32)})),
        ("a parameter given as a Python list", (TypeError,), ("params", "bias"), _fixed({"W": w, "bias": [0.5, 1.0]})),
        ("a parameter given as a Python float", (TypeError,), ("params", "scale"), _fixed({"W": w, "scale": 1.5})),
        ("a boolean parameter array", (TypeError,), ("params", "mask"), _fixed({"W": w, "mask": np.ones(2, bool)})),
        ("a complex parameter array", (TypeError,), ("params", "z"), _fixed({"W": w, "z": np.ones(2, np.complex64)})),
    ]
    return run_cases("init_adam_state", fn, ref.init_adam_state, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 32 -------------------------------------------------------------------------------------
def check_partition_optimizer_state(fn: Callable[..., Any]) -> str:
    """``[(k s, (k+1) s)]`` with ``s = ceil(Ψ/N)``: equal shards, the padding at the end."""
    sizes = [(12, 4), (10, 4), (10, 3), (7, 1), (5, 8), (1, 1), (100, 7), (3, 3), (13, 5),
             # s = ceil(Ψ/N) in integer arithmetic: Ψ/N through float64 rounds to 2^59 and its ceil is one short
             (2**60 + 1, 2), (2**53 + 1, 1)]
    cases = [(f"flat_numel={n}, num_workers={N}", _fixed(n, N)) for n, N in sizes]
    cases += [("flat_numel=np.int64(10), num_workers=np.int32(4) (NumPy integers)", _fixed(np.int64(10), np.int32(4))),
              ("flat_numel=np.int64(9), num_workers=np.uint8(3)", _fixed(np.int64(9), np.uint8(3)))]

    def compare(label: str, got: Any, expected: list) -> None:
        ok = isinstance(got, (list, tuple)) and all(isinstance(r, (list, tuple)) and len(r) == 2 for r in got)
        normalised = [tuple(int(x) for x in r) for r in got] if ok else got
        if normalised != expected:
            raise CheckFailure(f"[{label}] shard ranges are {got!r}, expected {expected} (s = ceil(flat_numel / N) "
                               "in integer arithmetic, elements each; the last worker owns the padding, and every "
                               "element is owned)")
        if not isinstance(got, list) or not all(type(r) is tuple and all(type(x) is int for x in r) for r in got):
            raise CheckFailure(f"[{label}] ranges must be a list of (start, stop) tuples of Python ints, got "
                               f"{type(got).__name__} of {sorted({type(r).__name__ for r in got})} holding "
                               f"{sorted({type(x).__name__ for r in got for x in r})}")

    invalid = [  # the contract: a non-integer is a TypeError, a value below 1 a ValueError
        ("num_workers = 0", VE, "num_workers", _fixed(10, 0)),
        ("num_workers = -2", VE, "num_workers", _fixed(10, -2)),
        ("num_workers = 2.0", (TypeError,), "num_workers", _fixed(10, 2.0)),
        ("num_workers = True", (TypeError,), "num_workers", _fixed(10, True)),
        ("num_workers = '4'", (TypeError,), "num_workers", _fixed(10, "4")),
        ("flat_numel = 0", VE, "flat_numel", _fixed(0, 2)),
        ("flat_numel = 10.0", (TypeError,), "flat_numel", _fixed(10.0, 2)),
        ("flat_numel = True", (TypeError,), "flat_numel", _fixed(True, 1)),
        ("flat_numel = '12'", (TypeError,), "flat_numel", _fixed("12", 3)),
    ]
    count = run_cases("partition_optimizer_state", fn, ref.partition_optimizer_state, cases, compare, invalid,
                      count_only=True)
    with quiet():
        # The ranges are computed from the two integers on every call: no state survives a call, so a caller
        # that edits the list it was given (appends, pops) cannot change what the next call returns.
        label = "called twice with (11, 3): the caller empties the first list, the second must be whole"
        first = call(fn, label, 11, 3)
        if isinstance(first, list):
            first.clear()
        second = call(fn, label, 11, 3)
        expected = ref.partition_optimizer_state(11, 3)
        if second is first or not isinstance(second, (list, tuple)) or [tuple(r) for r in second] != expected:
            raise CheckFailure(f"[{label}] the second call returned {second!r}, expected {expected}: the function "
                               "kept the list it returned the first time (a cache?) — compute the ranges from the "
                               "two integers on every call and return a new list")
    return passed("partition_optimizer_state", count + 1)


# --- Lesson 33 -------------------------------------------------------------------------------------
def _adam_case(shape: tuple, step: int, hp: dict, dtype: type, seed: int,
               grad_scale: float = 1.0, grad_dtype: type | None = None) -> Callable[[], Args]:
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(shape).astype(dtype)
    g = (rng.standard_normal(shape) * grad_scale).astype(grad_dtype or dtype)
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
        # float32 gradient: where the float16 parameter is rounded is the only float16 operation
        ("step 3, float16 parameters with float32 gradient and moments (each keeps its dtype)",
         _adam_case((6,), 2, HP, np.float16, 7, grad_dtype=np.float32)),
        ("step 2, beta1 = 0 (no momentum; 0 <= beta1 is allowed)", _adam_case((5,), 1, {**HP, "beta1": 0.0},
                                                                                np.float64, 8)),
    ]
    zero_p = np.random.default_rng(9).standard_normal(4).astype(np.float32)
    cases.append(("first step, a zero gradient (nothing moves, the results are still new arrays)",
                  _fixed(zero_p, np.zeros(4, np.float32), {"m": np.zeros(4, np.float32), "v": np.zeros(4, np.float32),
                                                           "step": 0}, HP)))
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        unchanged(label, inputs)
        p, state = assert_tuple(label, "the result (new_param_shard, new_state_shard)", got, 2)
        assert_array(label, "new_param_shard", p, expected[0])
        _assert_state(label, "new_state_shard", state, expected[1], tree=False)
        names = ("param_shard", "grad_shard", "state_shard")
        for what, array in (("new_param_shard", p), ("new_state_shard['m']", state["m"]),
                            ("new_state_shard['v']", state["v"])):
            for name, arg in zip(names, inputs[0]):
                _assert_new(label, what, array, arg, name)

    p, g, state, _ = _adam_case((4,), 2, HP, np.float32, 6)()[0]
    invalid = [
        ("hp['lr'] = 0", BAD, "lr", _fixed(p, g, state, {**HP, "lr": 0.0})),
        ("hp['lr'] = nan", BAD, "lr", _fixed(p, g, state, {**HP, "lr": float("nan")})),
        ("hp['lr'] = inf", BAD, "lr", _fixed(p, g, state, {**HP, "lr": float("inf")})),
        ("hp['beta1'] = 1.0", BAD, "beta1", _fixed(p, g, state, {**HP, "beta1": 1.0})),
        ("hp['beta2'] = -0.1", BAD, "beta2", _fixed(p, g, state, {**HP, "beta2": -0.1})),
        ("hp['eps'] = -1e-8", BAD, "eps", _fixed(p, g, state, {**HP, "eps": -1e-8})),
        ("hp['eps'] = inf", BAD, "eps", _fixed(p, g, state, {**HP, "eps": float("inf")})),
        ("hp without 'eps'", BAD, "hp", _fixed(p, g, state, {k: v for k, v in HP.items() if k != "eps"})),
        ("hp with an extra key 'weight_decay'", BAD, "hp", _fixed(p, g, state, {**HP, "weight_decay": 0.0})),
        # the contract: a grad_shard or a moment of another shape is a ValueError, a non-array or an integer
        # array a TypeError naming it
        ("grad_shard of 3 elements for 4", VE, "grad_shard", _fixed(p, g[:3], state, HP)),
        ("state_shard['m'] of 5 elements for 4", VE, "state_shard",
         _fixed(p, g, {**state, "m": np.zeros(5, np.float32)}, HP)),
        ("param_shard an integer array", TE, "param_shard", _fixed(np.arange(4), g, state, HP)),
        ("grad_shard a Python list", TE, "grad_shard", _fixed(p, g.tolist(), state, HP)),
        ("state_shard['step'] = -1", BAD, "step", _fixed(p, g, {**state, "step": -1}, HP)),
        ("state_shard['step'] = True", BAD, "step", _fixed(p, g, {**state, "step": True}, HP)),
        ("state_shard['step'] = 2.0", BAD, "step", _fixed(p, g, {**state, "step": 2.0}, HP)),
    ]
    return run_cases("local_shard_adam_update", fn, ref.local_shard_adam_update, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 34 -------------------------------------------------------------------------------------
def _gather_case(numel: int, N: int, seed: int, dtype: type = np.float32, last_zero: bool = False,
                 padding: float = 0.0, container: type = list):
    rng = np.random.default_rng(seed)
    s = -(-numel // N)
    flat = np.concatenate([rng.standard_normal(numel), np.full(N * s - numel, padding)]).astype(dtype)
    if last_zero:
        flat[numel - 2:numel] = 0  # real parameters can be exactly 0
    return _fixed(container(flat[k * s:(k + 1) * s].copy() for k in range(N)), numel)


def check_all_gather_param_shards(fn: Callable[..., Any]) -> str:
    """Shards concatenated in worker order, exactly the padding removed (not trailing zeros)."""
    cases = [
        ("10 elements on 4 workers (2 padding)", _gather_case(10, 4, 1)),
        ("12 elements on 4 workers (no padding)", _gather_case(12, 4, 2)),
        ("7 elements on 1 worker", _gather_case(7, 1, 3, np.float64)),
        ("5 elements on 8 workers (3 workers own only padding)", _gather_case(5, 8, 4)),
        ("13 elements on 5 workers, the last two real values are 0", _gather_case(13, 5, 5, np.float64, True)),
        # padding is dropped by position, whatever it holds (and the shards are read only)
        ("10 elements on 4 workers, the padding slots hold 7.0", _gather_case(10, 4, 7, padding=7.0)),
        ("5 elements on 1 worker of 5 (no padding)", _gather_case(5, 1, 8, np.float64)),
        ("9 elements on 3 workers given as a tuple", _gather_case(9, 3, 9, container=tuple)),
    ]
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: np.ndarray, inputs: Args) -> None:
        unchanged(label, inputs)
        # exact: gathering copies values (no arithmetic); the contract's metric is "bit for bit"
        assert_array(label, "the gathered flat parameters", got, expected, exact=True)
        _assert_new(label, "the gathered flat parameters", got, inputs[0][0], "shards")

    shards = _gather_case(10, 4, 6)()[0][0]
    invalid = [
        ("no shards", VE, "shards", _fixed([], 4)),  # the contract: an empty or non-list shards is a ValueError
        ("shards a dict, not a list", VE, "shards", _fixed(dict(enumerate(shards)), 10)),
        ("shards[1] of 2 elements, shards[0] of 3", BAD, "shards[1]", _fixed([shards[0], shards[1][:2]], 5)),
        ("shards[2] float64, shards[0] float32", BAD, "shards[2]",
         _fixed([shards[0], shards[1], shards[2].astype(np.float64), shards[3]], 10)),
        ("shards[0] an integer array", BAD, "shards[0]", _fixed([np.arange(3), np.arange(3)], 5)),
        ("2-D shards of shape (3, 1)", BAD, "shards[0]", _fixed([a.reshape(3, 1) for a in shards], 10)),
        ("flat_numel = 20 for 4 shards of 3", BAD, "flat_numel", _fixed(shards, 20)),
        ("flat_numel = 8 for 4 shards of 3 (ceil(8/4) = 2, not 3)", BAD, "flat_numel", _fixed(shards, 8)),
        ("flat_numel = 0", BAD, "flat_numel", _fixed(shards, 0)),
        ("flat_numel = True for one shard of 1", (TypeError,), "flat_numel", _fixed([np.ones(1, np.float32)], True)),
        ("flat_numel = 10.0", (TypeError,), "flat_numel", _fixed(shards, 10.0)),
    ]
    return run_cases("all_gather_param_shards", fn, ref.all_gather_param_shards, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 35 -------------------------------------------------------------------------------------
def _zero_case(N: int, steps_before: int, seed: int, dtype: type = np.float64,
               widths: tuple = (3, 5, 2)) -> Callable[[], Args]:
    params = _params(seed, *widths, dtype=dtype)  # Ψ = 32 parameters for the default widths
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
    cases.append(("6 workers, Ψ = 4 (workers 4 and 5 own only padding; their state advances too)",
                  _zero_case(6, 1, 31, widths=(1, 1, 1))))
    unchanged = against_fresh_inputs(cases)

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
            try:
                _assert_state(label, f"new_worker_states[{k}]", g, e, tree=False)
            except CheckFailure as failure:
                raise CheckFailure(f"{failure} — worker k's state holds positions k·s … (k+1)·s − 1 of the "
                                   "flat vector, in flatten_params' order (the dict's key order, each array raveled "
                                   "in C order), padded at the end") from None

    params, grads, states, _ = _zero_case(2, 0, 40)()[0]
    invalid = [
        ("no worker gradients", BAD, "worker_grads", _fixed(params, [], states, HP)),
        ("worker_grads a dict, not a list", BAD, "worker_grads", _fixed(params, dict(enumerate(grads)), states, HP)),
        ("3 gradients for 2 states", BAD, "worker_states", _fixed(params, grads + grads[:1], states, HP)),
        ("worker_grads[1] without 'b2'", BAD, "worker_grads[1]",
         _fixed(params, [grads[0], {k: v for k, v in grads[1].items() if k != "b2"}], states, HP)),
        ("worker_grads[1] with an extra key 'b3'", BAD, "worker_grads[1]",
         _fixed(params, [grads[0], {**grads[1], "b3": np.zeros(2)}], states, HP)),
        ("worker_grads[1]['W1'] of shape (5, 3) for (3, 5) (same size)", BAD, "worker_grads[1]",
         _fixed(params, [grads[0], {**grads[1], "W1": grads[1]["W1"].T.copy()}], states, HP)),
        ("worker_states[1]['v'] of the whole length", BAD, "worker_states[1]",
         _fixed(params, grads, [states[0], {**states[1], "v": np.zeros(32)}], HP)),
        ("hp['lr'] = -0.1", BAD, "lr", _fixed(params, grads, states, {**HP, "lr": -0.1})),
        ("a state shard of the whole length", BAD, "worker_states",
         _fixed(params, grads, [ref.init_sharded_adam_states(params, 1)[0]] * 2, HP)),
    ]
    return run_cases("zero_optimizer_step", fn, ref.zero_optimizer_step, cases, compare, invalid,
                     compare_with_inputs=True)
