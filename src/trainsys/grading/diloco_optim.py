"""Checks behind the hidden tests of Module 2, Parts 2, 3 and 5 (lessons 7–15 and 21–24): AdamW,
parameter-tree arithmetic, and the Nesterov outer optimizer.

Trees mix rectangular, square and vector entries; states are fresh (step 0) and mid-run (random
moments and buffers); float32 and float64. Large learning rates and decays make the order of the
decoupled decay visible; momentum 0 and lr 1 reduce the outer step to FedAvg. Every function must
return new arrays (sharing memory with an input, or mutating it — a state's step counter included — fails
the case). Precision is held to each contract's words: a clone bit for bit (signed zeros, NaN payloads),
``scale_params`` within its Rounding clause (2u, exact for powers of two), the mean of copies bit for bit.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from trainsys.diloco import adamw as ref_adamw
from trainsys.diloco import outer as ref_outer
from trainsys.diloco import params as ref_params
from trainsys.grading._harness import (
    fixed as _args,
    BAD,
    Args,
    CheckFailure,
    assert_array,
    assert_array_dict,
    assert_tuple,
    run_cases,
)

__all__ = [
    "check_init_adamw_state",
    "check_update_moments",
    "check_bias_correct_moments",
    "check_adamw_param_step",
    "check_decoupled_weight_decay",
    "check_clone_params",
    "check_scale_params",
    "check_subtract_params",
    "check_average_params",
    "check_init_outer_optimizer",
    "check_update_outer_momentum",
    "check_nesterov_outer_step",
    "check_compute_outer_gradient",
]

CLAUSES = {
    "init_adamw_state": {
        "mutation": ("parameters holding inf, -inf and NaN",),
        "aliasing": ("float32 tree", "an all-zero parameter array"),
        "failure modes": ("params is a list", "an integer array", "params['W0'] is"),
        "metric that proves it correct": ("float32 tree", "mixed float16/float64 tree",
                                          "parameters holding inf, -inf and NaN"),
    },
    "update_moments": {
        "mutation": ("fresh state, betas (0.9, 0.95)", "betas (0, 0)"),
        "failure modes": ("beta1 = 1", "beta2 = -0.1", "beta1 = nan", "grads['W0'] of shape (3, 4)",
                          "grads['W0'] of shape (3,) for the (4, 3) moment", "grads with an extra key 'extra'",
                          "state['step'] = -1"),
        "metric that proves it correct": ("fresh state, betas (0.9, 0.95)", "float32 moments, float64 gradients",
                                          "float16 moments, float32 gradients"),
    },
    "bias_correct_moments": {
        "mutation": ("step 1, betas (0.9, 0.95)", "step 1000, betas (0.9, 0.95)", "betas (0, 0)"),
        "failure modes": ("step = 0", "step = 2.0", "step = True", "v without 'b1'", "v with an extra key",
                          "v['W0'] transposed", "beta2 = nan"),
        "metric that proves it correct": ("step 1, betas (0.9, 0.95)",),
    },
    "adamw_param_step": {
        "mutation": ("lr 1e-3, eps 1e-8",),
        "failure modes": ("lr = 0", "lr = inf", "lr = nan", "eps = -1e-8", "eps = 0", "m_hat missing 'W1'",
                          "v_hat with an extra key"),
        "metric that proves it correct": ("lr 1e-3, eps 1e-8", "lr 0.1, eps 1e-3", "float32 params, float64 moments"),
    },
    "decoupled_weight_decay": {
        "mutation": ("lr 1e-3, weight_decay 0.1", "weight_decay 0"),
        "which arrays": ("lr 1e-3, weight_decay 0.1",),
        "failure modes": ("weight_decay = -0.1", "weight_decay = inf", "weight_decay = nan", "lr = 0",
                          "an integer array", "params is a list"),
        "metric that proves it correct": ("lr 1e-3, weight_decay 0.1", "lr 0.5, weight_decay 0.5",
                                          "lr 2, weight_decay 0.75"),
    },
    "clone_params": {
        "values": ("special values",),
        "memory": ("float32 tree", "an empty dict"),
        "mutation": ("float32 tree",),
        "failure modes": ("params is a list", "an integer array", "params['W0'] is", "an empty dict"),
        "metric that proves it correct": ("mixed float16/float32/float64",),
    },
    "scale_params": {
        "mutation": ("c = 0.5", "c = 1: a copy"),
        "failure modes": ("c = nan", "c = True", "c = -inf", "c = np.array(2.0)", "an integer array",
                          "c a NumPy float32 scalar"),
        "rounding": ("c = 0.1 on float64 arrays", "c = 0.5"),
        "metric that proves it correct": ("c = 0.5",),
    },
    "subtract_params": {
        "mutation": ("float32 trees",),
        "failure modes": ("b['b0'] of shape (1, 3)", "b['b0'] of shape (1,)", "b has an extra key 'extra'",
                          "b misses 'W1'", "b['W0'] an integer array", "a['b0'] a list"),
        "rounding": ("float32 a minus a float64 b close to it",),
        "metric that proves it correct": ("float32 trees", "float32 a minus a float64 b close to it"),
    },
    "average_params": {
        "normalisation": ("weights [1, 2, 3]", "a zero weight"),
        "precision": ("trees of about ±1e4 whose mean is about 1",),
        "mutation": ("one tree",),
        "failure modes": ("an empty list", "list_of_params a single dict", "2 weights for 3 trees", "a negative weight",
                          "weights summing to 0", "an infinite weight", "a NaN weight", "a 2-D weights array",
                          "the second tree misses 'W0'", "the second tree has an extra key 'extra'",
                          "the second tree's 'b0' of shape (1,)"),
        "metric that proves it correct": ("weights [1, 2, 3]", "three trees, uniform",
                                          "float32 first tree, float64 second", "seven copies of one float32 tree"),
    },
    "init_outer_optimizer": {
        "mutation": ("parameters holding inf, -inf and NaN",),
        "aliasing": ("an all-zero parameter array",),
        "failure modes": ("params is a list", "an integer array", "params['W0'] is"),
        "metric that proves it correct": ("float32 tree", "float16 tree",
                                          "parameters holding inf, -inf and NaN"),
    },
    "update_outer_momentum": {
        "dampening 0": ("zero buffer, momentum 0.9",),
        "mutation": ("zero buffer, momentum 0.9", "momentum 0"),
        "dtype": ("float32 buffer, float64 outer_grad",),
        "failure modes": ("momentum = 1", "momentum = -0.5", "momentum = nan", "outer_grad misses 'b1'",
                          "outer_grad with an extra key", "outer_grad['W0'] of shape (3,)", "state['step'] = -1",
                          "state['step'] = True", "state with an extra key 'nesterov'"),
        "metric that proves it correct": ("zero buffer, momentum 0.9",),
    },
    "nesterov_outer_step": {
        "mutation": ("fresh state, lr 0.7, momentum 0.9", "lr 1, momentum 0 (FedAvg)"),
        "failure modes": ("lr = 0", "lr = inf", "lr = nan", "momentum = 1.5", "outer_grad['W0'] transposed",
                          "params['b0'] of shape (3,)"),
        "metric that proves it correct": ("fresh state, lr 0.7, momentum 0.9", "float32 params, float64 buffer"),
    },
    "compute_outer_gradient": {
        "precision": ("workers at about ±1e4 from the global model",),
        "mutation": ("one worker",),
        "failure modes": ("no workers", "worker_params is a single dict", "a worker missing 'b0'",
                          "a worker with an extra key 'extra'", "a worker's 'b0' of shape (1,)",
                          "global_params['W0'] an integer array", "global_params a list"),
        "metric that proves it correct": ("one worker", "three workers", "float32 global, float64 workers"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

SHAPES = {"W0": (4, 3), "b0": (3,), "W1": (3, 3), "b1": (1,)}




def _tree(seed: int, dtype: type = np.float32, std: float = 1.0, shapes: Mapping = SHAPES) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * std).astype(dtype) for k, s in shapes.items()}


def _state(seed: int, step: int, dtype: type = np.float32) -> dict[str, Any]:
    """A mid-run AdamW state: random first moments, positive second moments."""
    v = {k: np.square(a) for k, a in _tree(seed + 1, dtype, 0.1).items()}
    return {"step": step, "m": _tree(seed, dtype, 0.1), "v": v}


def _outer(seed: int, step: int, dtype: type = np.float32) -> dict[str, Any]:
    return {"step": step, "momentum_buffer": _tree(seed, dtype, 0.1)}


def _step_count(label: str, what: str, got: Any, expected: int, python_int: bool = False) -> None:
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)) or got != expected:
        raise CheckFailure(f"[{label}] {what} is {got!r}, expected {expected}")
    if python_int and type(got) is not int:
        raise CheckFailure(f"[{label}] {what} must be a Python int (the contract's type), got {type(got).__name__}; "
                           "use 0, not a NumPy integer")


def _nonfinite_tree(dtype: type = np.float32) -> dict[str, np.ndarray]:
    """Parameters holding inf, -inf and NaN (a diverged run): zero-initialised state must still be exact zeros."""
    return {"W0": np.array([[np.inf, -np.inf, 1.5], [np.nan, -0.0, 2.0]], dtype),
            "b0": np.array([np.nan, np.inf, -3.0], dtype)}


def _not_float_values() -> list[tuple[str, Any]]:
    """Values of a tree that are not floating-point NumPy arrays (each must be refused naming the tree)."""
    return [("a bool array", np.ones((2, 2), bool)), ("a complex array", np.ones((2, 2), np.complex128)),
            ("a list of floats", [[1.0, 2.0], [3.0, 4.0]])]


def _fresh(label: str, what: str, got: Mapping, *others: Mapping, against: str = "an input array") -> None:
    """Fail when a result array is, or views, an array of ``others`` (described by ``against``)."""
    for key, value in got.items():
        for tree in others:
            for other in tree.values():
                if isinstance(value, np.ndarray) and np.shares_memory(value, other):
                    raise CheckFailure(f"[{label}] {what}[{key!r}] shares memory with {against}; "
                                       "return new arrays, so that updating one never changes the other")


def _state_compare(label: str, got: Any, expected: Mapping, keys: tuple[str, ...], python_int: bool = False,
                   **tol: Any) -> None:
    if not isinstance(got, Mapping) or set(got) != set(keys):
        raise CheckFailure(f"[{label}] the state must be a dict with keys {sorted(keys)}, got "
                           f"{sorted(map(str, got)) if isinstance(got, Mapping) else type(got).__name__}")
    _step_count(label, "state['step']", got["step"], expected["step"], python_int)
    for key in keys:
        if key != "step":
            assert_array_dict(label, f"state[{key!r}]", got[key], expected[key], **tol)


def _caller_step_kept(label: str, state: Any, expected_new_step: int) -> None:
    """The caller's state keeps its step: the snapshot compares arrays only, so an ``int`` counted up in the
    caller's dict (``state["step"] += 1``) is caught here — the new state must carry ``t + 1``, the old ``t``."""
    if isinstance(state, Mapping) and state.get("step") != expected_new_step - 1:
        raise CheckFailure(f"[{label}] the caller's state['step'] was changed from {expected_new_step - 1} to "
                           f"{state.get('step')!r}; the state passed in is only read — put step + 1 in the new state")


CANCEL = "trees of about ±1e4 whose mean is about 1 (float64 accumulation)"
_CANCEL_TOL = {"rtol": 2.0**-22, "atol": 1e-10}
"""The mean of :func:`_cancelling_trees` accumulated in float64 is exact to ~k·2^-53·2e4 ≈ 1e-11 before its one
rounding to float32; two correct orders of operations (normalised weights, or np.average's division by the
sum) can then round to neighbouring float32 values: one ulp, at most 2^-23 relative — allowed twice over
(rtol 2^-22). atol 1e-10 is ten times the float64 accumulation error itself, for entries near 0 whose ulp is
smaller than it. Accumulating in float32 (or rounding w_i θ_i to float32 first) errs by ulp(1e4) ≈ 1e-3:
hundreds of ulps."""


def _cancelling_trees(seed: int, k: int) -> list[dict[str, np.ndarray]]:
    """``k`` float32 trees ``θ + o_i`` with offsets ``o_i`` of about ±1e4 summing to 0, so the mean is about ``θ``."""
    rng = np.random.default_rng(seed)
    base = _tree(seed, np.float64)
    scale = {key: 1e4 * rng.uniform(1.0, 2.0, v.shape) for key, v in base.items()}
    signs = [1.0] * (k - 1) + [-(k - 1.0)]
    return [{key: (v + s * scale[key] + 0.1 * rng.standard_normal(v.shape)).astype(np.float32)
             for key, v in base.items()} for s in signs]


# --- Lesson 7 --------------------------------------------------------------------------------------
def check_init_adamw_state(fn: Callable[..., Any]) -> str:
    """Step 0, zero m and v of each parameter's shape and dtype, m and v separate new arrays."""
    cases = [("float32 tree", _args(_tree(1))), ("float64 tree", _args(_tree(2, np.float64))),
             ("mixed float16/float64 tree", _args({"h": _tree(3, np.float16)["W0"], "d": _tree(4, np.float64)["b0"]})),
             ("one (1, 1) array", _args({"W0": np.ones((1, 1), np.float32)})),
             ("an all-zero parameter array (its moments are still new arrays)",
              _args({"W0": np.zeros((4, 3), np.float32), "b0": _tree(5)["b0"]})),
             ("parameters holding inf, -inf and NaN (the moments are exact zeros all the same)",
              _args(_nonfinite_tree()))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        # exact: m0 = v0 = 0 are exact zeros whatever the parameters hold (params * 0 gives NaN for inf/NaN)
        _state_compare(label, got, expected, ref_adamw.STATE_KEYS, python_int=True, exact=True)
        _fresh(label, "state['m']", got["m"], inputs[0][0])
        _fresh(label, "state['v']", got["v"], inputs[0][0])
        _fresh(label, "state['m']", got["m"], got["v"], against="state['v'] (m and v must be separate arrays)")

    invalid = [("params is a list", BAD, "params", _args([np.ones(3, np.float32)])),
               ("an integer array", BAD, "params", _args({"W0": np.ones((2, 2), np.int64)}))]
    invalid += [(f"params['W0'] is {what} (not a floating-point array)", BAD, "params", _args({"W0": value}))
                for what, value in _not_float_values()]
    return run_cases("init_adamw_state", fn, ref_adamw.init_adamw_state, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 8 --------------------------------------------------------------------------------------
def check_update_moments(fn: Callable[..., Any]) -> str:
    """m ← β1 m + (1−β1) g, v ← β2 v + (1−β2) g², step + 1, from fresh and mid-run states."""
    cases = [("fresh state, betas (0.9, 0.95)", _args(ref_adamw.init_adamw_state(_tree(5)), _tree(6), 0.9, 0.95)),
             ("mid-run state at step 5", _args(_state(7, 5), _tree(9), 0.9, 0.95)),
             ("betas (0.8, 0.999)", _args(_state(10, 2), _tree(12, std=3.0), 0.8, 0.999)),
             ("betas (0, 0): the moments are g and g²", _args(_state(13, 1), _tree(15), 0.0, 0.0)),
             ("float64", _args(_state(16, 3, np.float64), _tree(18, np.float64), 0.9, 0.95)),
             ("float32 moments, float64 gradients (the moments stay float32)",
              _args(_state(19, 2), _tree(20, np.float64), 0.9, 0.95)),
             # |g| up to ~800: g² (6e5) overflows float16 (max 65504) unless computed in the gradients' float32
             # and cast back after the (1 - beta2) factor, as the contract's recursion then .astype(dtype) does
             ("float16 moments, float32 gradients of a few hundred (g² overflows float16)",
              _args(_state(21, 1, np.float16), _tree(22, std=200.0), 0.9, 0.95))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        _state_compare(label, got, expected, ref_adamw.STATE_KEYS)
        _caller_step_kept(label, inputs[0][0], expected["step"])
        _fresh(label, "state['m']", got["m"], inputs[0][0]["m"], inputs[0][1])
        _fresh(label, "state['v']", got["v"], inputs[0][0]["v"], inputs[0][1])

    s, g = _state(1, 1), _tree(2)
    invalid = [("beta1 = 1", BAD, "beta1", _args(s, g, 1.0, 0.95)), ("beta2 = -0.1", BAD, "beta2", _args(s, g, 0.9, -0.1)),
               ("beta1 = nan", BAD, "beta1", _args(s, g, float("nan"), 0.95)),
               ("grads['W0'] of shape (3, 4)", BAD, "W0", _args(s, {**g, "W0": np.ones((3, 4), np.float32)}, 0.9, 0.95)),
               ("grads['W0'] of shape (3,) for the (4, 3) moment (it would broadcast)", BAD, "W0",
                _args(s, {**g, "W0": np.ones(3, np.float32)}, 0.9, 0.95)),
               # the contract: "raises ValueError naming the offending key"
               ("grads with an extra key 'extra'", BAD, "extra",
                _args(s, {**g, "extra": np.ones(2, np.float32)}, 0.9, 0.95))]
    invalid += [(f"state['step'] = {step!r}", BAD, "step", _args({**s, "step": step}, g, 0.9, 0.95))
                for step in (-1, 2.0, True)]
    return run_cases("update_moments", fn, ref_adamw.update_moments, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 9 --------------------------------------------------------------------------------------
def check_bias_correct_moments(fn: Callable[..., Any]) -> str:
    """m / (1 − β1^t), v / (1 − β2^t) at t = 1, 2, 10, 1000; step 0 is an error."""
    cases = [(f"step {t}, betas {b}", _args(_state(20 + t, t)["m"], _state(20 + t, t)["v"], t, *b))
             for t, b in ((1, (0.9, 0.95)), (2, (0.9, 0.95)), (10, (0.9, 0.999)), (1000, (0.9, 0.95)), (3, (0.5, 0.6)))]
    cases.append(("betas (0, 0): the correction is a division by 1, the results still new arrays",
                  _args(_state(40, 3)["m"], _state(40, 3)["v"], 3, 0.0, 0.0)))

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        m_hat, v_hat = assert_tuple(label, "the result (m_hat, v_hat)", got, 2)
        assert_array_dict(label, "m_hat", m_hat, expected[0])
        assert_array_dict(label, "v_hat", v_hat, expected[1])
        _fresh(label, "m_hat", m_hat, inputs[0][0], inputs[0][1])
        _fresh(label, "v_hat", v_hat, inputs[0][0], inputs[0][1])

    s = _state(1, 1)
    invalid = [("step = 0", BAD, "step", _args(s["m"], s["v"], 0, 0.9, 0.95)),
               ("step = 2.0", BAD, "step", _args(s["m"], s["v"], 2.0, 0.9, 0.95)),
               ("step = True (a bool is not a step count)", BAD, "step", _args(s["m"], s["v"], True, 0.9, 0.95)),
               ("v without 'b1'", BAD, "v", _args(s["m"], {k: v for k, v in s["v"].items() if k != "b1"}, 1, 0.9, 0.95)),
               ("v with an extra key", BAD, "v", _args(s["m"], {**s["v"], "extra": np.ones(2, np.float32)}, 1, 0.9, 0.95)),
               ("v['W0'] transposed (shape (3, 4) for m's (4, 3))", BAD, "v",
                _args(s["m"], {**s["v"], "W0": s["v"]["W0"].T.copy()}, 1, 0.9, 0.95)),
               ("beta2 = nan", BAD, "beta2", _args(s["m"], s["v"], 1, 0.9, float("nan")))]
    return run_cases("bias_correct_moments", fn, ref_adamw.bias_correct_moments, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 10 -------------------------------------------------------------------------------------
def check_adamw_param_step(fn: Callable[..., Any]) -> str:
    """θ − lr · m̂ / (√v̂ + ε), ε outside the root, tiny and large v̂, float64."""
    def case(seed: int, lr: float, eps: float, v_scale: float = 1.0, dtype: type = np.float32) -> Callable[[], Args]:
        s = _state(seed, 1, dtype)
        return _args(_tree(seed + 5, dtype), s["m"], {k: v * dtype(v_scale) for k, v in s["v"].items()}, lr, eps)

    cases = [("lr 1e-3, eps 1e-8", case(30, 1e-3, 1e-8)), ("lr 0.1, eps 1e-3", case(31, 0.1, 1e-3)),
             ("tiny v_hat (1e-12 scale): eps matters", case(32, 1e-2, 1e-4, 1e-10)),
             ("float64", case(33, 3e-3, 1e-8, dtype=np.float64)),
             ("float32 params, float64 moments (the result keeps the params' float32)",
              lambda: (lambda s: ((_tree(35), s["m"], s["v"], 1e-2, 1e-8), {}))(_state(34, 1, np.float64)))]

    def compare(label: str, got: Any, expected: dict) -> None:
        assert_array_dict(label, "new params", got, expected)

    p, s = _tree(1), _state(2, 1)
    invalid = [("lr = 0", BAD, "lr", _args(p, s["m"], s["v"], 0.0, 1e-8)),
               ("lr = inf", BAD, "lr", _args(p, s["m"], s["v"], float("inf"), 1e-8)),
               ("lr = nan", BAD, "lr", _args(p, s["m"], s["v"], float("nan"), 1e-8)),
               ("eps = -1e-8", BAD, "eps", _args(p, s["m"], s["v"], 1e-3, -1e-8)),
               ("eps = 0", BAD, "eps", _args(p, s["m"], s["v"], 1e-3, 0.0)),
               ("m_hat missing 'W1'", BAD, "m_hat",
                _args(p, {k: v for k, v in s["m"].items() if k != "W1"}, s["v"], 1e-3, 1e-8)),
               ("v_hat with an extra key", BAD, "v_hat", _args(p, s["m"], {**s["v"], "extra": np.ones(2, np.float32)},
                                                                1e-3, 1e-8))]
    return run_cases("adamw_param_step", fn, ref_adamw.adamw_param_step, cases, compare, invalid)


# --- Lesson 11 -------------------------------------------------------------------------------------
def check_decoupled_weight_decay(fn: Callable[..., Any]) -> str:
    """θ (1 − lr λ) on every array, biases included; λ = 0 leaves the values unchanged."""
    cases = [("lr 1e-3, weight_decay 0.1", _args(_tree(40), 1e-3, 0.1)),
             ("lr 0.5, weight_decay 0.5", _args(_tree(41), 0.5, 0.5)),
             ("weight_decay 0", _args(_tree(42), 0.1, 0.0)), ("float64", _args(_tree(43, np.float64), 0.2, 0.3)),
             ("lr 2, weight_decay 0.75: the factor -0.5 is legal (lr > 0, weight_decay >= 0 are the only limits)",
              _args(_tree(44), 2.0, 0.75))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        assert_array_dict(label, "decayed params", got, expected)
        _fresh(label, "decayed params", got, inputs[0][0])

    invalid = [("weight_decay = -0.1", BAD, "weight_decay", _args(_tree(1), 1e-3, -0.1)),
               ("weight_decay = inf", BAD, "weight_decay", _args(_tree(1), 1e-3, float("inf"))),
               ("weight_decay = nan", BAD, "weight_decay", _args(_tree(1), 1e-3, float("nan"))),
               ("lr = 0", BAD, "lr", _args(_tree(1), 0.0, 0.1)),
               ("an integer array", BAD, "params", _args({"W0": np.arange(6).reshape(2, 3)}, 1e-3, 0.1)),
               ("params is a list", BAD, "params", _args(list(_tree(1).values()), 1e-3, 0.1))]
    return run_cases("decoupled_weight_decay", fn, ref_adamw.decoupled_weight_decay, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 12 -------------------------------------------------------------------------------------
SPECIAL = "special values: signed zeros, ±inf, NaNs with payloads (signalling included), subnormals"


def _special_values() -> dict[str, np.ndarray]:
    """float32 and float16 arrays whose bits a conversion would change: -0.0, a signalling NaN (quieted by any
    float64 round trip), a negative NaN with a payload, ±inf, subnormals."""
    f32 = np.array([0x80000000, 0x7F800001, 0xFFC00123, 0x7F800000, 0xFF800000, 0x00000001, 0x3F800000],
                   np.uint32).view(np.float32).reshape(7, 1)
    f16 = np.array([0x8000, 0x7C01, 0xFE03, 0x7C00, 0xFC00, 0x0001, 0x3C00], np.uint16).view(np.float16)
    return {"W0": f32, "b0": f16}


def check_clone_params(fn: Callable[..., Any]) -> str:
    """Equal values, keys and dtypes; a new dict whose arrays share no memory with the input."""
    cases = [("float32 tree", _args(_tree(60))), ("mixed float16/float32/float64", _args(
        {"h": _tree(61, np.float16)["W0"], "f": _tree(62)["b0"], "d": _tree(63, np.float64)["W1"]})),
        (SPECIAL, _args(_special_values())),
        ("an empty dict", _args({})), ("a 0-d array", _args({"s": np.array(2.5, np.float32)}))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        # exact: a clone is a copy, not a computation; then bit for bit (below), which exact=True alone is
        # not: -0.0 == +0.0, and NaNs of any payload compare alike
        assert_array_dict(label, "the clone", got, expected, exact=True)
        for key, value in expected.items():
            if got[key].tobytes() != value.tobytes():
                raise CheckFailure(f"[{label}] the clone[{key!r}] equals the input in value but not bit for bit "
                                   "(a sign of zero or a NaN's bits changed); copy the bytes, convert nothing")
        if got is inputs[0][0]:
            raise CheckFailure(f"[{label}] returned the same dict, not a copy")
        _fresh(label, "the clone", got, inputs[0][0])
        for key, value in got.items():
            if not value.flags.writeable:
                raise CheckFailure(f"[{label}] the clone[{key!r}] is read-only; a worker updates its copy in place, "
                                   "so the clone's arrays must be ordinary writeable arrays")

    invalid = [("params is a list", BAD, "params", _args([np.ones(2, np.float32)])),
               ("an integer array", BAD, "params", _args({"n": np.arange(3)}))]
    invalid += [(f"params['W0'] is {what} (not a floating-point array)", BAD, "params", _args({"W0": value}))
                for what, value in _not_float_values()]
    return run_cases("clone_params", fn, ref_params.clone_params, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 13 -------------------------------------------------------------------------------------
def _scale_tolerance(c: float, dtype: np.dtype) -> dict[str, Any]:
    """The Rounding clause, as a comparison with the reference.

    c = 0 or a power of two: exact — c·x is then representable (every product of these cases stays in the
    normal range) and any correct order of operations returns it. Otherwise the answer is within 2u of the
    exact c·x (u = 2^-11, 2^-24, 2^-53 in float16, float32, float64), and so is the reference (it rounds c
    to the array's dtype, then the product: (1+u)² − 1 ≈ 2u); the two differ by at most 4u relative, plus
    second-order terms (8u²) — rtol 5u. Below the normal range each rounding errs by up to one subnormal
    spacing: atol 2 smallest subnormals.
    """
    if c == 0.0 or math.frexp(abs(c))[0] == 0.5:
        return {"exact": True}
    info = np.finfo(dtype)
    return {"rtol": 5 * float(info.eps) / 2, "atol": 2 * float(info.smallest_subnormal)}


def check_scale_params(fn: Callable[..., Any]) -> str:
    """c · θ for every array in its own dtype, c negative and zero included; the input untouched."""
    cases = [("c = 0.5", _args(_tree(70), 0.5)), ("c = -2", _args(_tree(71), -2.0)), ("c = 0", _args(_tree(72), 0.0)),
             ("integer c = 3", _args(_tree(73), 3)), ("float16 and float64 arrays", _args(
                 {"h": _tree(74, np.float16)["W0"], "d": _tree(75, np.float64)["b0"]}, 0.25)),
             ("c = 1: a copy, not the same arrays", _args(_tree(76), 1.0)),
             ("c a NumPy float32 scalar 0.5", _args(_tree(77), np.float32(0.5))),
             ("c a NumPy int64 scalar -3", _args(_tree(78), np.int64(-3))),
             # 0.1 is not a float32 number: rounding c to float32 first errs by ~1.5e-9, 10^7 float64 ulps
             ("c = 0.1 on float64 arrays (c used in full, not rounded to float32)",
              _args(_tree(79, np.float64), 0.1)),
             ("c = 0.1 on float16 and float32 arrays", _args(
                 {"h": _tree(68, np.float16)["W0"], "f": _tree(69)["W1"]}, 0.1))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        c = float(inputs[0][1])
        if not isinstance(got, Mapping) or set(got) != set(expected):
            assert_array_dict(label, "scaled params", got, expected)  # fails, naming the type or the keys
        for key, value in expected.items():
            try:
                assert_array(label, f"scaled params[{key!r}]", got[key], value, **_scale_tolerance(c, value.dtype))
            except CheckFailure as failure:
                near = "differs from the reference" in str(failure) and np.allclose(
                    np.asarray(got[key], np.float64), value.astype(np.float64), rtol=1e-2, atol=0.0)
                if not near:  # a wrong value, not a rounding: the message as it is
                    raise
                raise CheckFailure(f"{failure}; the Rounding clause: within 2u of the exact c·x (u of the array's "
                                   "dtype), exact when c is a power of two") from None
        _fresh(label, "scaled params", got, inputs[0][0])

    invalid = [("c = nan", BAD, "c", _args(_tree(1), float("nan"))), ("c = '2'", BAD, "c", _args(_tree(1), "2")),
               ("c = True (a bool is not a factor)", BAD, "c", _args(_tree(1), True)),
               ("c = -inf", BAD, "c", _args(_tree(1), float("-inf"))),
               ("c = np.array(2.0), a 0-d array", BAD, "c", _args(_tree(1), np.array(2.0))),
               ("c = np.array([2.0]), a one-element array", BAD, "c", _args(_tree(1), np.array([2.0]))),
               ("an integer array", BAD, "params", _args({"n": np.arange(3)}, 2.0))]
    return run_cases("scale_params", fn, ref_params.scale_params, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 14 -------------------------------------------------------------------------------------
def check_subtract_params(fn: Callable[..., Any]) -> str:
    """a − b key by key; different keys or shapes raise instead of broadcasting."""
    cases = [("float32 trees", _args(_tree(80), _tree(81))),
             ("float64 trees", _args(_tree(82, np.float64), _tree(83, np.float64))),
             ("a tree minus itself", _args(_tree(84), _tree(84))),
             # b = a + tiny float64 offsets: rounding b to float32 first (double rounding) loses the difference
             ("float32 a minus a float64 b close to it: the difference rounded once, in a's float32",
              _args(_tree(85), {k: v.astype(np.float64) + 1e-6 * np.abs(v) * np.cos(np.arange(v.size)).reshape(v.shape)
                                for k, v in _tree(85).items()})),
             ("float64 a minus float32 b: the result in a's float64", _args(_tree(86, np.float64), _tree(87)))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        # exact: the contract's metric is a - b computed in float64 and rounded once to a's dtype, bit for bit
        assert_array_dict(label, "a - b", got, expected, exact=True)
        _fresh(label, "a - b", got, inputs[0][0], inputs[0][1])

    a = _tree(1)
    invalid = [("b['b0'] of shape (1, 3) for a['b0'] (3,)", BAD, "b0", _args(a, {**a, "b0": np.ones((1, 3), np.float32)})),
               ("b['b0'] of shape (1,) for a['b0'] (3,) (it would broadcast)", BAD, "b0",
                _args(a, {**a, "b0": np.ones(1, np.float32)})),
               # the contract: "ValueError naming a and b and the keys that differ" (one-letter names are in
               # any message; the key is what the student can act on)
               ("b has an extra key 'extra'", BAD, "extra", _args(a, {**a, "extra": np.ones(2, np.float32)})),
               ("b misses 'W1'", BAD, "W1", _args(a, {k: v for k, v in a.items() if k != "W1"})),
               ("b['W0'] an integer array", BAD, "b", _args(a, {**a, "W0": np.ones((4, 3), np.int64)})),
               ("a['b0'] a list", BAD, "a", _args({**a, "b0": [1.0, 2.0, 3.0]}, a))]
    return run_cases("subtract_params", fn, ref_params.subtract_params, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 15 -------------------------------------------------------------------------------------
COPIES = "seven copies of one float32 tree (the mean is that tree bit for bit)"


def check_average_params(fn: Callable[..., Any]) -> str:
    """Uniform and weighted means; weights normalised (shard sizes work), zero weights allowed."""
    trees = [_tree(90 + i) for i in range(4)]
    cases = [("one tree", _args(trees[:1])), ("three trees, uniform", _args(trees[:3])),
             ("weights [1, 2, 3]", _args(trees[:3], [1.0, 2.0, 3.0])),
             ("shard sizes [10, 30] as weights", _args(trees[:2], [10, 30])),
             ("a zero weight", _args(trees[:3], [0.0, 1.0, 1.0])),
             ("weights as an array", _args(trees, np.array([0.1, 0.2, 0.3, 0.4]))),
             ("float64 trees", _args([_tree(95, np.float64), _tree(96, np.float64)])),
             ("a tuple of trees, weights [1, 3]", _args(tuple(trees[:2]), [1.0, 3.0])),
             ("float32 first tree, float64 second: the first tree's float32", _args([trees[0], _tree(97, np.float64)])),
             (CANCEL, _args(_cancelling_trees(98, 3))), (CANCEL + ", weights [1, 1, 2]",
                                                        _args(_cancelling_trees(99, 3), [1.0, 1.0, 2.0])),
             (COPIES, _args([_tree(100)] * 7))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        # exact for COPIES: the float64 sum of 7 terms (1/7)·x is x to ~7·2^-53 relative, far inside half a
        # float32 ulp (2^-25), so the one rounding returns x itself (the metric: "that tree bit for bit")
        tol = _CANCEL_TOL if label.startswith(CANCEL) else {"exact": True} if label == COPIES else {}
        assert_array_dict(label, "the average", got, expected, **tol)
        for tree in inputs[0][0]:
            _fresh(label, "the average", got, tree)

    invalid = [("an empty list", BAD, "list_of_params", _args([])),
               ("list_of_params a single dict, not a list of dicts", BAD, "list_of_params", _args(trees[0])),
               ("2 weights for 3 trees", BAD, "weights", _args(trees[:3], [1.0, 1.0])),
               ("a negative weight", BAD, "weights", _args(trees[:2], [1.0, -1.0])),
               ("weights summing to 0", BAD, "weights", _args(trees[:2], [0.0, 0.0])),
               ("an infinite weight", BAD, "weights", _args(trees[:2], [1.0, float("inf")])),
               ("a NaN weight", BAD, "weights", _args(trees[:2], [1.0, float("nan")])),
               ("a 2-D weights array of shape (2, 1)", BAD, "weights", _args(trees[:2], np.array([[1.0], [3.0]]))),
               ("the second tree misses 'W0'", BAD, "W0",
                _args([trees[0], {k: v for k, v in trees[1].items() if k != "W0"}])),
               ("the second tree has an extra key 'extra'", BAD, "extra",
                _args([trees[0], {**trees[1], "extra": np.ones(2, np.float32)}])),
               ("the second tree's 'b0' of shape (1,) for the first's (3,) (it would broadcast)", BAD, "b0",
                _args([trees[0], {**trees[1], "b0": np.ones(1, np.float32)}]))]
    return run_cases("average_params", fn, ref_params.average_params, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 21 -------------------------------------------------------------------------------------
def check_init_outer_optimizer(fn: Callable[..., Any]) -> str:
    """Step 0 and a zero momentum buffer of each parameter's shape and dtype (new arrays)."""
    cases = [("float32 tree", _args(_tree(100))), ("float64 tree", _args(_tree(101, np.float64))),
             ("one (1, 1) array", _args({"W0": np.full((1, 1), 3.0, np.float32)})),
             ("float16 tree (the buffer stays float16)", _args(_tree(102, np.float16))),
             ("an all-zero parameter array (its buffer is still a new array)",
              _args({"W0": np.zeros((4, 3), np.float32), "b0": _tree(103)["b0"]})),
             ("parameters holding inf, -inf and NaN (the buffer is exact zeros all the same)",
              _args(_nonfinite_tree()))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        # exact: b0 = 0 holds exact zeros whatever the parameters hold (params * 0 gives NaN for inf/NaN)
        _state_compare(label, got, expected, ref_outer.OUTER_STATE_KEYS, python_int=True, exact=True)
        _fresh(label, "state['momentum_buffer']", got["momentum_buffer"], inputs[0][0])

    invalid = [("params is a list", BAD, "params", _args([np.ones(3, np.float32)])),
               ("an integer array", BAD, "params", _args({"W0": np.ones((2, 2), np.int64)}))]
    invalid += [(f"params['W0'] is {what} (not a floating-point array)", BAD, "params", _args({"W0": value}))
                for what, value in _not_float_values()]
    return run_cases("init_outer_optimizer", fn, ref_outer.init_outer_optimizer, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 22 -------------------------------------------------------------------------------------
def check_update_outer_momentum(fn: Callable[..., Any]) -> str:
    """b ← μ b + Δ (no dampening), step + 1, from zero and random buffers."""
    cases = [("zero buffer, momentum 0.9", _args(ref_outer.init_outer_optimizer(_tree(110)), _tree(111), 0.9)),
             ("random buffer at step 4, momentum 0.9", _args(_outer(112, 4), _tree(113), 0.9)),
             ("momentum 0", _args(_outer(114, 2), _tree(115), 0.0)),
             ("momentum 0.5, float64", _args(_outer(116, 1, np.float64), _tree(117, np.float64), 0.5)),
             ("float32 buffer, float64 outer_grad (the buffer keeps float32)",
              _args(_outer(118, 3), _tree(119, np.float64), 0.9))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        _state_compare(label, got, expected, ref_outer.OUTER_STATE_KEYS)
        _caller_step_kept(label, inputs[0][0], expected["step"])
        _fresh(label, "state['momentum_buffer']", got["momentum_buffer"], inputs[0][0]["momentum_buffer"],
               inputs[0][1], against="the old buffer or outer_grad (even with momentum 0, b' = Δ is a new array)")

    s, g = _outer(1, 1), _tree(2)
    invalid = [("momentum = 1", BAD, "momentum", _args(s, g, 1.0)), ("momentum = -0.5", BAD, "momentum", _args(s, g, -0.5)),
               ("momentum = nan", BAD, "momentum", _args(s, g, float("nan"))),
               ("outer_grad misses 'b1'", BAD, "outer_grad", _args(s, {k: v for k, v in g.items() if k != "b1"}, 0.9)),
               ("outer_grad with an extra key", BAD, "outer_grad", _args(s, {**g, "extra": np.ones(2, np.float32)}, 0.9)),
               ("outer_grad['W0'] of shape (3,) for the (4, 3) buffer (it would broadcast)", BAD, "outer_grad",
                _args(s, {**g, "W0": np.ones(3, np.float32)}, 0.9)),
               ("state['step'] = -1", BAD, "state", _args({**s, "step": -1}, g, 0.9)),
               ("state['step'] = True", BAD, "state", _args({**s, "step": True}, g, 0.9)),
               ("state with an extra key 'nesterov'", BAD, "state", _args({**s, "nesterov": True}, g, 0.9))]
    return run_cases("update_outer_momentum", fn, ref_outer.update_outer_momentum, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 23 -------------------------------------------------------------------------------------
def check_nesterov_outer_step(fn: Callable[..., Any]) -> str:
    """torch.optim.SGD(nesterov=True): θ − lr (Δ + μ b') with the updated buffer; μ = 0, lr = 1 is FedAvg."""
    fresh = ref_outer.init_outer_optimizer(_tree(120))
    cases = [("fresh state, lr 0.7, momentum 0.9", _args(_tree(120), fresh, _tree(121), 0.7, 0.9)),
             ("random buffer at step 5", _args(_tree(122), _outer(123, 5), _tree(124), 0.7, 0.9)),
             ("lr 1, momentum 0 (FedAvg)", _args(_tree(125), _outer(126, 3), _tree(127), 1.0, 0.0)),
             ("lr 0.1, momentum 0.5, float64", _args(_tree(128, np.float64), _outer(129, 2, np.float64),
                                                   _tree(130, np.float64), 0.1, 0.5)),
             ("float32 params, float64 buffer and outer_grad (each keeps its dtype)",
              _args(_tree(131), _outer(132, 2, np.float64), _tree(133, np.float64), 0.7, 0.9))]

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        new_params, new_state = assert_tuple(label, "the result (new_params, new_state)", got, 2)
        assert_array_dict(label, "new_params", new_params, expected[0])
        _state_compare(label, new_state, expected[1], ref_outer.OUTER_STATE_KEYS)
        params, state, outer_grad = inputs[0][:3]
        _caller_step_kept(label, state, expected[1]["step"])
        for what, tree in (("new_params", new_params), ("new_state['momentum_buffer']", new_state["momentum_buffer"])):
            _fresh(label, what, tree, params, state["momentum_buffer"], outer_grad,
                   against="an input (params, the old buffer or outer_grad); everything returned is new")

    p, s, g = _tree(1), _outer(2, 1), _tree(3)
    invalid = [("lr = 0", BAD, "lr", _args(p, s, g, 0.0, 0.9)),
               ("lr = inf", BAD, "lr", _args(p, s, g, float("inf"), 0.9)),
               ("lr = nan", BAD, "lr", _args(p, s, g, float("nan"), 0.9)),
               ("momentum = 1.5", BAD, "momentum", _args(p, s, g, 0.7, 1.5)),
               ("outer_grad['W0'] transposed", BAD, "W0", _args(p, s, {**g, "W0": g["W0"].T.copy()}, 0.7, 0.9)),
               ("params['b0'] of shape (3,), outer_grad['b0'] and the buffer's of shape (1,)", BAD, "b0",
                _args(p, {**s, "momentum_buffer": {**s["momentum_buffer"], "b0": np.ones(1, np.float32)}},
                      {**g, "b0": np.ones(1, np.float32)}, 0.7, 0.9))]
    return run_cases("nesterov_outer_step", fn, ref_outer.nesterov_outer_step, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 24 -------------------------------------------------------------------------------------
def check_compute_outer_gradient(fn: Callable[..., Any]) -> str:
    """θ_global − mean(θ_k) (original minus local) for 1, 3 and 8 workers."""
    g = _tree(140)
    cases = [("one worker", _args(g, [_tree(141)])), ("three workers", _args(g, [_tree(142 + i) for i in range(3)])),
             ("eight workers, float64", _args(_tree(150, np.float64), [_tree(151 + i, np.float64) for i in range(8)])),
             ("workers that did not move (zero)", _args(g, [copy.deepcopy(g), copy.deepcopy(g)])),
             ("a tuple of workers", _args(g, (_tree(143), _tree(144)))),
             ("float32 global, float64 workers (Δ in the global float32)",
              _args(g, [_tree(145, np.float64), _tree(146, np.float64)])),
             (CANCEL_OUTER, _args(*_cancelling_round(147, 3)))]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        tol = {}
        if label == CANCEL_OUTER:  # see _cancelling_round
            # absolute, not relative: Δ ≈ 0.1 inherits one float32 ulp of the mean (≤ 2^-23·|mean|), twice
            scale = max(float(np.max(np.abs(v))) for v in inputs[0][0].values())
            tol = {"rtol": 0.0, "atol": 2.0**-22 * scale}
        assert_array_dict(label, "the outer gradient", got, expected, **tol)
        for tree in (inputs[0][0], *inputs[0][1]):
            _fresh(label, "the outer gradient", got, tree)

    invalid = [("no workers", BAD, "worker_params", _args(g, [])),
               ("worker_params is a single dict, not a list of one", BAD, "worker_params", _args(g, _tree(1))),
               ("a worker missing 'b0'", BAD, "b0", _args(g, [_tree(1), {k: v for k, v in _tree(2).items() if k != "b0"}])),
               ("a worker with an extra key 'extra'", BAD, "extra",
                _args(g, [_tree(1), {**_tree(2), "extra": np.ones(2, np.float32)}])),
               ("a worker's 'b0' of shape (1,) for the global (3,) (it would broadcast)", BAD, "b0",
                _args(g, [_tree(1), {**_tree(2), "b0": np.ones(1, np.float32)}])),
               ("global_params['W0'] an integer array", BAD, "global_params",
                _args({**g, "W0": np.ones((4, 3), np.int64)}, [_tree(1), _tree(2)])),
               ("global_params a list of arrays", BAD, "global_params", _args(list(g.values()), [_tree(1)]))]
    return run_cases("compute_outer_gradient", fn, ref_outer.compute_outer_gradient, cases, compare, invalid,
                     compare_with_inputs=True)


CANCEL_OUTER = "workers at about ±1e4 from the global model whose mean is close to it (float64 mean)"


def _cancelling_round(seed: int, k: int) -> tuple[dict, list[dict]]:
    """``(global, workers)``: the workers' mean (float64, rounded once to float32) is within ~0.1 of ``global``.

    With workers at ±1e4 a float32 running sum errs by ulp(2e4) ≈ 2e-3, visible in Δ ≈ 0.1. The mean
    rounded once to float32 can differ between two correct float64 orders by one float32 ulp of the mean
    (≤ 2^-23·|mean|), which Δ = global − mean inherits: the check allows 2^-22·max|global|.
    """
    workers = _cancelling_trees(seed, k)
    mean = ref_params.average_params(workers)
    rng = np.random.default_rng(seed + 1)
    return {key: (v + 0.1 * rng.standard_normal(v.shape)).astype(np.float32) for key, v in mean.items()}, workers
