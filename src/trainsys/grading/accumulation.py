"""Checks behind the hidden tests of Module 1, Part 2 (lessons 11–14: gradient accumulation).

Uneven splits are in every check (10 examples in 3 or 4 micro-batches), because that is where the
"mean of per-micro-batch means" mistake shows; in-place contracts are checked by identity and
``np.shares_memory``; the step's memory is measured with ``tracemalloc``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    assert_contiguous_views,
    fixed as _fixed,
    BAD,
    Args,
    CheckFailure,
    assert_array,
    assert_array_dict,
    assert_scalar,
    assert_tuple,
    call,
    peak_of_call,
    quiet,
    run_cases,
)
from trainsys.memtrain import accumulation as ref
from trainsys.memtrain import mlp
from trainsys.memtrain.measure import peak_memory_bytes

__all__ = [
    "check_split_into_micro_batches",
    "check_accumulate_gradients",
    "check_scale_accumulated_gradients",
    "check_grad_accumulation_step",
]



def _data(n: int, d_in: int = 3, d_out: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return mlp.make_synthetic_regression_batch(n, d_in, d_out, np.random.default_rng(seed))


def _grads(seed: int, d_in: int = 3, d_h: int = 4, d_out: int = 2, dtype: type = np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"W1": (d_in, d_h), "b1": (d_h,), "W2": (d_h, d_out), "b2": (d_out,)}
    return {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}




# --- Lesson 11 -------------------------------------------------------------------------------------
def check_split_into_micro_batches(fn: Callable[..., Any]) -> str:
    """Sizes ``ceil``-first like ``np.array_split``, order kept, every example once, views not copies."""
    sizes = [(8, 2), (10, 3), (10, 4), (7, 7), (5, 1), (1, 1), (13, 5)]
    cases = [(f"n={n}, num_micro_batches={m}", _fixed(*_data(n, seed=i), m)) for i, (n, m) in enumerate(sizes)]

    def compare(label: str, got: Any, expected: list, inputs: Args) -> None:
        assert_contiguous_views(label, got, expected, inputs[0][0], inputs[0][1], "micro-batch",
                                "the first n mod M micro-batches take one extra example")

    X, Y = _data(6)
    invalid = [
        ("num_micro_batches = 0", BAD, "num_micro_batches", _fixed(X, Y, 0)),
        ("num_micro_batches = 7 > n = 6", BAD, "num_micro_batches", _fixed(X, Y, 7)),
        ("num_micro_batches = 2.0", BAD, "num_micro_batches", _fixed(X, Y, 2.0)),
        ("X has 6 rows, Y has 5", BAD, "Y", _fixed(X, Y[:5], 2)),
    ]
    return run_cases("split_into_micro_batches", fn, ref.split_into_micro_batches, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 12 -------------------------------------------------------------------------------------
def check_accumulate_gradients(fn: Callable[..., Any]) -> str:
    """``None`` starts with copies; later calls add in place into ``acc`` and return it; ``grads`` untouched."""
    cases = [
        ("acc=None starts the sum", _fixed(None, _grads(1))),
        ("adding into an existing sum", _fixed(_grads(2), _grads(3))),
        ("float64 trees", _fixed(_grads(4, dtype=np.float64), _grads(5, dtype=np.float64))),
        ("width-1 layers", _fixed(_grads(6, 1, 1, 1), _grads(7, 1, 1, 1))),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        acc, grads = inputs[0]
        assert_array_dict(label, "the accumulated gradients", got, expected, exact=True)
        for key in expected:
            if np.shares_memory(got[key], grads[key]):
                raise CheckFailure(f"[{label}] result[{key!r}] is the same memory as grads[{key!r}]: a later "
                                   "in-place add would corrupt the caller's gradients; start with a copy")
        if acc is not None:
            if got is not acc or any(not np.shares_memory(got[k], acc[k]) for k in acc):
                raise CheckFailure(f"[{label}] must add into acc in place and return acc itself "
                                   "(one gradient buffer per step, no new allocation)")

    acc = _grads(8)
    invalid = [
        ("grads without 'b2'", BAD, "grads", _fixed(acc, {k: v for k, v in _grads(9).items() if k != "b2"})),
        ("grads['W1'] of shape (4, 3) for acc['W1'] (3, 4)", BAD, "W1",
         _fixed(acc, {**_grads(9), "W1": np.ones((4, 3), np.float32)})),
        ("grads is a list", BAD, "grads", _fixed(None, [np.ones(3, np.float32)])),
    ]
    return run_cases("accumulate_gradients", fn, ref.accumulate_gradients, cases, compare, invalid,
                     mutable=(0,), compare_with_inputs=True)


# --- Lesson 13 -------------------------------------------------------------------------------------
def check_scale_accumulated_gradients(fn: Callable[..., Any]) -> str:
    """Every array multiplied by ``scale`` in place (biases too), ``acc`` returned, bad scales refused."""
    cases = [
        ("scale 1/10", _fixed(_grads(11), 0.1)),
        ("scale 1/3 (an uneven batch)", _fixed(_grads(12), 1.0 / 3.0)),
        ("scale 1", _fixed(_grads(13), 1.0)),
        ("scale 4 on float64", _fixed(_grads(14, dtype=np.float64), 4.0)),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        acc = inputs[0][0]
        assert_array_dict(label, "the scaled gradients", got, expected)
        if got is not acc or any(not np.shares_memory(got[k], acc[k]) for k in acc):
            raise CheckFailure(f"[{label}] must scale acc in place and return acc itself")

    invalid = [
        ("scale = 0", BAD, "scale", _fixed(_grads(15), 0.0)),
        ("scale = -0.5", BAD, "scale", _fixed(_grads(15), -0.5)),
        ("scale = nan", BAD, "scale", _fixed(_grads(15), float("nan"))),
        ("acc = None", BAD, "acc", _fixed(None, 0.5)),
    ]
    return run_cases("scale_accumulated_gradients", fn, ref.scale_accumulated_gradients, cases, compare, invalid,
                     mutable=(0,), compare_with_inputs=True)


# --- Lesson 14 -------------------------------------------------------------------------------------
def check_grad_accumulation_step(fn: Callable[..., Any]) -> str:
    """Equal to the reference (and so to the full-batch step) on even and uneven splits; memory ~ 1/M."""
    configs = [(12, 1), (12, 3), (10, 3), (10, 4), (7, 7), (9, 2)]

    def case(i: int, n: int, m: int) -> Callable[[], Args]:
        X, Y = _data(n, 3, 2, seed=30 + i)
        params = mlp.init_mlp_params(3, 5, 2, np.random.default_rng(40 + i))
        params["b1"] = np.random.default_rng(50 + i).standard_normal(5).astype(np.float32) * 0.1
        return _fixed(params, X, Y, m, 0.05)

    cases = [(f"n={n}, num_micro_batches={m}", case(i, n, m)) for i, (n, m) in enumerate(configs)]

    def compare(label: str, got: Any, expected: tuple) -> None:
        new_params, loss = assert_tuple(label, "the result (new_params, loss)", got, 2)
        assert_array_dict(label, "new_params", new_params, expected[0], rtol=1e-5, atol=1e-6)
        assert_scalar(label, "loss", loss, expected[1], rtol=1e-5, atol=1e-7)

    X, Y = _data(6)
    p = mlp.init_mlp_params(3, 4, 2, np.random.default_rng(0))
    invalid = [
        ("num_micro_batches = 0", BAD, "num_micro_batches", _fixed(p, X, Y, 0, 0.1)),
        ("num_micro_batches = 7 > 6 examples", BAD, "num_micro_batches", _fixed(p, X, Y, 7, 0.1)),
        ("lr = -0.1", BAD, "lr", _fixed(p, X, Y, 2, -0.1)),
    ]
    message = run_cases("grad_accumulation_step", fn, ref.grad_accumulation_step, cases, compare, invalid)
    _check_memory(fn)
    return message


def _check_memory(fn: Callable[..., Any]) -> None:
    """Eight micro-batches must need well under a third of the memory of one (the reference: about 0.15)."""
    X, Y = _data(2048, 16, 1, seed=60)
    params = mlp.init_mlp_params(16, 256, 1, np.random.default_rng(61))
    label = "memory: n=2048, d_hidden=256, 8 micro-batches vs the reference with 1"
    with quiet():
        _, full = peak_memory_bytes(ref.grad_accumulation_step, params, X, Y, 1, 0.01)
        _, student = peak_of_call(fn, label, params, X, Y, 8, 0.01)
    if student > full / 3:
        raise CheckFailure(f"[{label}] peak memory {student / 2**20:.2f} MiB with 8 micro-batches vs "
                           f"{full / 2**20:.2f} MiB for the whole batch at once: activations of all micro-batches "
                           "are alive together; run forward and backward on one micro-batch at a time")
