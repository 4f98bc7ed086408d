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
    assert_peak_within,
    assert_contiguous_views,
    fixed as _fixed,
    BAD,
    Args,
    CheckFailure,
    assert_array_dict,
    assert_scalar,
    assert_mlp_gradients_within_bound,
    assert_tuple,
    assert_within_rounding,
    expect_raises,
    expect_raises_naming_any,
    passed,
    quiet,
    run_cases,
)
from trainsys.memtrain import accumulation as ref
from trainsys.memtrain import mlp

TE = (TypeError,)
"""The contract says TypeError (a wrong type: ``True``, ``2.0`` or a string for a number, an integer array)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value or shape)."""

__all__ = [
    "check_split_into_micro_batches",
    "check_accumulate_gradients",
    "check_scale_accumulated_gradients",
    "check_grad_accumulation_step",
]



CLAUSES = {
    "split_into_micro_batches": {
        "sizes": ("n=10, num_micro_batches=3",),
        "mutation": ("n=8, num_micro_batches=2",),
        "failure modes": ("num_micro_batches = True", "num_micro_batches = 0",
                          "Y has 5 rows for 6 and num_micro_batches = 7: the rows are validated first", "integer X"),
        "metric that proves it correct": ("n=10, num_micro_batches=3",),
    },
    "accumulate_gradients": {
        "mutation": ("acc=None starts the sum", "adding into an existing sum"),
        "dtype": ("acc=None with float16 grads", "float16 grads into a float32 buffer"),
        "failure modes": ("grads with an extra key 'W3'", "integer grads['W2']", "grads['b1'] of shape (1,)",
                          "grads['W2'] of shape (2, 4) for (4, 2): refused before any key is added",
                          "integer acc['W1']"),
        "metric that proves it correct": ("adding into an existing sum",),
    },
    "scale_accumulated_gradients": {
        "mutation": ("scale 1/10",),
        "dtype": ("scale 1/10",),
        "failure modes": ("scale = 0", "scale = True", "integer acc['b2']"),
        "metric that proves it correct": ("scale 1/10",),
    },
    "grad_accumulation_step": {
        "mutation": ("n=12, num_micro_batches=1",),
        "memory": ("memory, parameters dominate", "memory, activations dominate"),
        "failure modes": ("lr = -0.1", "lr = True"),
        "metric that proves it correct": ("n=10, num_micro_batches=3", "n=12, num_micro_batches=3"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""


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
    cases.append(("n=10, num_micro_batches=np.int64(3) (a NumPy integer is fine)", _fixed(*_data(10, seed=9), np.int64(3))))

    def compare(label: str, got: Any, expected: list, inputs: Args) -> None:
        # a pair may be a tuple or a two-item list (the contract says pairs; every caller unpacks them)
        assert_contiguous_views(label, got, expected, inputs[0][0], inputs[0][1], "micro-batch",
                                "the first n mod M micro-batches take one extra example")

    X, Y = _data(6)
    invalid = [
        ("num_micro_batches = 0", VE, "num_micro_batches", _fixed(X, Y, 0)),
        ("num_micro_batches = 7 > n = 6", VE, "num_micro_batches", _fixed(X, Y, 7)),
        ("num_micro_batches = 2.0", TE, "num_micro_batches", _fixed(X, Y, 2.0)),
        ("num_micro_batches = True", TE, "num_micro_batches", _fixed(X, Y, True)),
        ("X has 6 rows, Y has 5 (the message names Y and shows both counts)", VE, ("Y", "6", "5"), _fixed(X, Y[:5], 2)),
        ("Y has 5 rows for 6 and num_micro_batches = 7: the rows are validated first", VE, "Y", _fixed(X, Y[:5], 7)),
        ("integer X", TE, "X", _fixed(np.arange(12).reshape(6, 2), Y, 2)),
        ("1-D X and Y", VE, "X", _fixed(X[:, 0].copy(), Y[:, 0].copy(), 2)),
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
        ("acc=None with float16 grads (the buffer keeps float16)", _fixed(None, _grads(16, dtype=np.float16))),
        ("float16 grads into a float32 buffer (it stays float32)", _fixed(_grads(17), _grads(18, dtype=np.float16))),
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
    int_grads = {**_grads(9), "W2": np.ones((4, 2), dtype=np.int64)}
    invalid = [
        ("grads without 'b2'", VE, "grads", _fixed(acc, {k: v for k, v in _grads(9).items() if k != "b2"})),
        ("grads with an extra key 'W3'", VE, "grads", _fixed(acc, {**_grads(9), "W3": np.ones((2, 2), np.float32)})),
        ("grads['W1'] of shape (4, 3) for acc['W1'] (3, 4)", VE, "W1",
         _fixed(acc, {**_grads(9), "W1": np.ones((4, 3), np.float32)})),
        ("grads['b1'] of shape (1,) for acc['b1'] (4,) (it would broadcast)", VE, "b1",
         _fixed(acc, {**_grads(9), "b1": np.ones(1, np.float32)})),
        ("grads is a list", TE, "grads", _fixed(None, [np.ones(3, np.float32)])),
        ("integer grads['W2'], acc=None", TE, "grads", _fixed(None, int_grads)),
        ("integer grads['W2'] into a float32 acc", TE, "grads", _fixed(acc, int_grads)),
    ]
    count = run_cases("accumulate_gradients", fn, ref.accumulate_gradients, cases, compare, invalid,
                      mutable=(0,), compare_with_inputs=True, count_only=True)
    with quiet():
        # The grading sandbox carries back what a failing call did to its arguments, so a half-updated
        # acc is seen there too.
        label = "grads['W2'] of shape (2, 4) for (4, 2): refused before any key is added"
        acc, late = _grads(21), {**_grads(22), "W2": np.ones((2, 4), np.float32)}
        before = copy.deepcopy(acc)
        expect_raises(fn, label, VE, "W2", acc, late)
        for key in before:
            if not np.array_equal(acc[key], before[key]):
                raise CheckFailure(f"[{label}] acc[{key!r}] was changed by a call that then raised: check every key's "
                                   "shape before the first addition, so a refused call leaves acc as it was")
        int_acc = {**_grads(19), "W1": np.ones((3, 4), dtype=np.int64)}
        expect_raises_naming_any(fn, "integer acc['W1'] (acc must hold floating-point arrays)", BAD, ("acc", "grads"),
                                 int_acc, _grads(20))
    return passed("accumulate_gradients", count + 2)


# --- Lesson 13 -------------------------------------------------------------------------------------
def check_scale_accumulated_gradients(fn: Callable[..., Any]) -> str:
    """Every array multiplied by ``scale`` in place (biases too), ``acc`` returned, bad scales refused."""
    cases = [
        ("scale 1/10", _fixed(_grads(11), 0.1)),
        ("scale 1/3 (an uneven batch)", _fixed(_grads(12), 1.0 / 3.0)),
        ("scale 1", _fixed(_grads(13), 1.0)),
        ("scale 4 on float64", _fixed(_grads(14, dtype=np.float64), 4.0)),
        ("scale 1/7 on (64, 64) float32 weights", _fixed(_grads(23, 64, 64, 8), 1.0 / 7.0)),
        ("scale 3 (an int)", _fixed(_grads(24), 3)),
    ]

    unscaled = {label: make()[0][0] for label, make in cases}

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        acc = inputs[0][0]
        # To rounding: the scale rounded to the array's dtype and the product are two roundings (gamma_2 of
        # |x·scale|); a float64 product cast back is one. They differ in about one entry in ten for 1/7, and
        # both are correct (trainsys.tolerance, k = 2, magnitude |x·scale| from a float64 snapshot).
        try:
            if not isinstance(got, dict) or set(got) != set(expected):
                assert_array_dict(label, "the scaled gradients", got, expected)  # the type/keys message
            for key, want in expected.items():
                exact = np.abs(np.asarray(unscaled[label][key], np.float64) * float(inputs[0][1]))
                assert_within_rounding(label, f"the scaled gradients[{key!r}]", got[key], want, exact, 2)
        except CheckFailure as failure:
            raise CheckFailure(f"{failure} — multiply by acc[key].dtype.type(scale), in the array's own dtype") from None
        if got is not acc or any(not np.shares_memory(got[k], acc[k]) for k in acc):
            raise CheckFailure(f"[{label}] must scale acc in place and return acc itself")

    int_acc = {**_grads(15), "b2": np.array([3, 5], dtype=np.int64)}
    invalid = [
        ("scale = 0", VE, "scale", _fixed(_grads(15), 0.0)),
        ("scale = -0.5", VE, "scale", _fixed(_grads(15), -0.5)),
        ("scale = nan", VE, "scale", _fixed(_grads(15), float("nan"))),
        ("scale = inf", VE, "scale", _fixed(_grads(15), float("inf"))),
        ("scale = True (a bool is not a real number here)", TE, "scale", _fixed(_grads(15), True)),
        ("scale = '0.5' (a string)", TE, "scale", _fixed(_grads(15), "0.5")),
        ("acc = None", TE, "acc", _fixed(None, 0.5)),
        ("integer acc['b2']", TE, "acc", _fixed(int_acc, 0.5)),
    ]
    return run_cases("scale_accumulated_gradients", fn, ref.scale_accumulated_gradients, cases, compare, invalid,
                     mutable=(0,), compare_with_inputs=True)


# --- Lesson 14 -------------------------------------------------------------------------------------
def check_grad_accumulation_step(fn: Callable[..., Any]) -> str:
    """Equal to the reference (and so to the full-batch step) on even and uneven splits; memory ~ 1/M."""
    configs = [(12, 1, 0.05), (12, 3, 0.05), (10, 3, 0.05), (10, 4, 0.05), (7, 7, 0.05), (9, 2, 0.05), (8, 3, 1)]

    def case(i: int, n: int, m: int, lr: float) -> Callable[[], Args]:
        X, Y = _data(n, 3, 2, seed=30 + i)
        params = mlp.init_mlp_params(3, 5, 2, np.random.default_rng(40 + i))
        params["b1"] = np.random.default_rng(50 + i).standard_normal(5).astype(np.float32) * 0.1
        return _fixed(params, X, Y, m, lr)

    cases = [(f"n={n}, num_micro_batches={m}" + (", lr = 1 (an int)" if type(lr) is int else ""), case(i, n, m, lr))
             for i, (n, m, lr) in enumerate(configs)]

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        new_params, loss = assert_tuple(label, "the result (new_params, loss)", got, 2)
        # θ − lr·g with g the full batch's gradient: the derived bound, with M micro-batch sums and the 1/n
        # scaling as extra roundings (trainsys.tolerance)
        params, X, Y, m, lr = inputs[0]
        assert_mlp_gradients_within_bound(label, "new_params", new_params, expected[0], params, X, Y, extra=m + 2,
                                          lr=lr)
        if type(loss) is not float:
            raise CheckFailure(f"[{label}] loss must be a Python float, got {type(loss).__module__}.{type(loss).__name__}"
                               " (convert with float(...))")
        # the mean loss of the step's parameters: the derived bound of two correct computations (the forward in
        # float32, then a float64 mean; M partial sums as extra roundings; trainsys.tolerance.mse_loss_bound)
        from trainsys.tolerance import mse_loss_bound

        bound = mse_loss_bound([params["W1"], params["W2"]], [params["b1"], params["b2"]], X, Y, np.float32,
                               extra_roundings=m + 1)
        assert_scalar(label, "loss", loss, expected[1], rtol=0.0, atol=bound)

    X, Y = _data(6)
    p = mlp.init_mlp_params(3, 4, 2, np.random.default_rng(0))
    invalid = [
        ("num_micro_batches = 0", VE, "num_micro_batches", _fixed(p, X, Y, 0, 0.1)),
        ("num_micro_batches = 7 > 6 examples", VE, "num_micro_batches", _fixed(p, X, Y, 7, 0.1)),
        ("lr = -0.1", VE, "lr", _fixed(p, X, Y, 2, -0.1)),
        ("lr = nan", VE, "lr", _fixed(p, X, Y, 2, float("nan"))),
        ("lr = inf", VE, "lr", _fixed(p, X, Y, 2, float("inf"))),
        ("lr = True (a bool is not a learning rate)", TE, "lr", _fixed(p, X, Y, 2, True)),
    ]
    count = run_cases("grad_accumulation_step", fn, ref.grad_accumulation_step, cases, compare, invalid, count_only=True,
                      compare_with_inputs=True)
    _check_memory(fn)
    return passed("grad_accumulation_step", count + 2)


def _check_memory(fn: Callable[..., Any]) -> None:
    """The peak of 8 micro-batches, against the reference's with the same 8, in two regimes.

    Parameters dominate (n=64, d_in=d_hidden=768, 2.25 MiB per parameter tree): the reference peaks with
    three trees alive — the accumulator, the gradient being formed and the update's output. Any answer
    that follows the contract (nothing of a micro-batch alive once the next one starts, one accumulator)
    measures the same; keeping the previous micro-batch's gradient tree alive adds a fourth (+33%),
    keeping all 8 trees to sum them at the end adds eight. Limit: 1.15 times the reference plus 256 KiB.

    Activations dominate (n=4096, d_hidden=d_out=256): the reference peaks at about 3.3 MiB during the
    loss and the backward pass of one micro-batch. Correct answers that delete the prediction at the end
    of the micro-batch, or form ``dY_hat * n_i`` as a temporary, measure up to 25% more; keeping every
    micro-batch's activations costs about 8 times. Limit: 1.5 times the reference plus 256 KiB.
    """
    regimes = [
        ("parameters dominate", (64, 768, 768, 1), 62, 1.15,
         "more than one micro-batch's gradient tree is alive: add each into the one accumulator "
         "(accumulate_gradients) and drop it — with the cache and the output gradient — before the next "
         "micro-batch starts"),
        ("activations dominate", (4096, 16, 256, 256), 60, 1.5,
         "the activations of several micro-batches are alive together: run forward and backward on one "
         "micro-batch at a time and del its cache before the next one"),
    ]
    for name, (n, d_in, d_hidden, d_out), seed, factor, advice in regimes:
        X, Y = _data(n, d_in, d_out, seed=seed)
        params = mlp.init_mlp_params(d_in, d_hidden, d_out, np.random.default_rng(seed + 1))
        label = f"memory, {name}: n={n}, d_in={d_in}, d_hidden={d_hidden}, d_out={d_out}, 8 micro-batches"
        assert_peak_within(fn, label, ref.grad_accumulation_step, (params, X, Y, 8, 0.01), factor, 2**18, advice)
