"""Checks behind the hidden tests of Module 1, Part 7, lessons 36–39 (memory accounting).

The inputs are compared after every call with a fresh build of the case, strictly (types, list lengths,
dict keys, array dtypes, shapes and values): the contracts say nothing is written. Lessons 37 and 38
promise that nothing of the model's size is allocated; their checks measure the call's peak with
``tracemalloc`` (or the sandbox's resident-set peak) against the reference's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    BAD,
    Args,
    CheckFailure,
    against_fresh_inputs,
    assert_peak_within,
    assert_unchanged,
    fixed as _fixed,
    passed,
    run_cases,
)
from trainsys.memtrain import memory as ref

__all__ = [
    "check_compute_param_memory_bytes",
    "check_compute_optimizer_memory_bytes",
    "check_compute_peak_activation_memory_bytes",
    "check_compare_memory",
]

CLAUSES = {
    "compute_param_memory_bytes": {
        "counting rule": ("MLP arrays (mixed dtypes) in float32", "shape tuples in float64",
                          "a single scalar parameter"),
        "mutation": ("MLP arrays (mixed dtypes) in float32", "shape tuples in float64"),
        "failure modes": ("integer dtype", "boolean dtype", "an empty list", "an empty dict inside the tree",
                          "a None leaf", "a float leaf", "a negative axis"),
        "metric that proves it correct": ("real float16 arrays asked about in float16",),
    },
    "compute_optimizer_memory_bytes": {
        "mutation": ("nothing is allocated",),
        "failure modes": ("num_params = 0", "num_workers = 0", "zero_stage = 4", "num_params = True",
                          "num_params = 7.5e9", "precision = 'FP32'"),
        "metric that proves it correct": ("Psi=7.5e9, mixed, N=64, stage 0", "Psi=7.5e9, mixed, N=64, stage 2",
                                          "Psi=7.5e9, mixed, N=64, stage 3"),
    },
    "compute_peak_activation_memory_bytes": {
        "mutation": ("nothing of the network's size is allocated", "plain, float32"),
        "failure modes": ("num_micro_batches = 17", "segment_size = 3 > L = 2", "segment_size = 0", "batch = True",
                          "dtype = np.int32"),
        "metric that proves it correct": ("plain, float32", "3 micro-batches of 1000 rows"),
    },
    "compare_memory": {
        "mutation": ("every technique on",),
        "failure modes": ("config without 'zero_stage'", "num_workers = 0", "num_workers = 513", "num_workers = True"),
        "metric that proves it correct": ("every technique on", "every technique on, row 'all together'"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

def _allocates_nothing(fn: Callable[..., Any], reference: Callable[..., Any], label: str, args: tuple,
                       size: int) -> None:
    """The call's peak memory against the reference's: a formula holds a few Python numbers, not arrays.

    The reference's peak is well under 4 KiB (a dict or a list of a few dozen tuples). Twice that plus
    1 MiB of slack (allocator pages; the sandbox measures the process's resident set) is still far below
    ``size``, the bytes of the one array of the model's size that the case is built to expose.
    """
    assert_peak_within(fn, label, reference, args, 2, 2**20,
                       f"an array of the model's size ({size / 2**20:.0f} MiB) was allocated — the contract says "
                       "nothing is; compute the bytes from the sizes and np.dtype(...).itemsize")


def _number(label: str, what: str, got: Any, expected: float) -> None:
    # The byte counts are products and quotients of integers below 2**53 (7.5e9 * 16 ~ 1.2e11): exact in
    # float64 up to one rounding of each quotient, ~1e-16 relative. 1e-9 accepts another order of the
    # same operations and still rejects being off by one byte in 1e9 (abs 1e-9 for a count of 0 bytes).
    ok = isinstance(got, (int, float, np.integer, np.floating)) and not isinstance(got, bool) and \
        math.isclose(float(got), float(expected), rel_tol=1e-9, abs_tol=1e-9)
    if not ok:
        raise CheckFailure(f"[{label}] {what} is {got!r}, expected {expected!r}")


def _int(label: str, what: str, got: Any, expected: int) -> None:
    """A byte count the contract returns as a Python ``int``."""
    _number(label, what, got, expected)
    if type(got) is not int:
        raise CheckFailure(f"[{label}] {what} must be a Python int (int(...)), got {type(got).__name__} {got!r}")


def _dict(label: str, got: Any, expected: dict) -> None:
    if not isinstance(got, dict) or set(got) != set(expected):
        raise CheckFailure(f"[{label}] must return a dict with keys {sorted(expected)}")
    for key, value in expected.items():
        _number(label, key, got[key], value)


# --- Lesson 36 -------------------------------------------------------------------------------------
def check_compute_param_memory_bytes(fn: Callable[..., Any]) -> str:
    """Arrays counted by shape in the requested dtype; shape tuples; nested lists of layer dicts."""
    rng = np.random.default_rng(0)
    mlp = {"W1": rng.standard_normal((4, 6)).astype(np.float32), "b1": np.zeros(6, np.float32),
           "W2": rng.standard_normal((6, 3)), "b2": np.zeros(3)}
    deep = [{"W": (5, 7), "b": (7,)}, {"W": (7, 7), "b": (7,)}, {"W": (7, 1), "b": (1,)}]
    half = [{"W": rng.standard_normal(s["W"]).astype(np.float16), "b": np.zeros(s["b"], np.float16)} for s in deep]
    cases = [
        # the lesson's metric: for arrays stored in dtype, the result is the sum of their nbytes (here 212 bytes)
        ("real float16 arrays asked about in float16 (the sum of their nbytes)", _fixed(half, np.float16)),
        ("MLP arrays (mixed dtypes) in float32", _fixed(mlp, np.float32)),
        ("MLP arrays in float16", _fixed(mlp, np.float16)),
        ("shape tuples in float64", _fixed({"W": (1000, 1000), "b": (1000,)}, np.float64)),
        ("a deep MLP as a list of layers, float32", _fixed(deep, np.float32)),
        ("a single scalar parameter", _fixed({"s": ()}, np.float32)),
        ("a zero-length axis counts 0 (shapes of non-negative ints)", _fixed({"W": (3, 0), "b": (5,)}, np.float32)),
        ("a tuple of layer dicts, float16", _fixed(tuple(deep), np.float16)),
        ("dtype given as the string 'float64'", _fixed(deep, "float64")),
    ]
    invalid = [
        ("integer dtype", (TypeError,), "dtype", _fixed({"W": (2, 2)}, np.int64)),
        ("boolean dtype", (TypeError,), "dtype", _fixed({"W": (2, 2)}, np.bool_)),
        ("complex dtype", (TypeError,), "dtype", _fixed({"W": (2, 2)}, np.complex64)),
        ("an unknown dtype string 'float33'", (TypeError,), "dtype", _fixed({"W": (2, 2)}, "float33")),
        ("an empty dict", (ValueError,), "params_or_shapes", _fixed({}, np.float32)),
        ("an empty list", (ValueError,), "params_or_shapes", _fixed([], np.float32)),
        ("an empty dict inside the tree", (ValueError,), "params_or_shapes",
         _fixed({"layer0": {"W": (2, 2)}, "layer1": {}}, np.float32)),
        ("an empty list inside the tree", (ValueError,), "params_or_shapes",
         _fixed([{"W": (2, 2)}, []], np.float32)),
        ("a None leaf", (TypeError,), "params_or_shapes", _fixed({"W": (2, 2), "b": None}, np.float32)),
        ("a string leaf", (TypeError,), "params_or_shapes", _fixed({"W": "2x2"}, np.float32)),
        ("a float leaf 3.0 (not a shape)", (TypeError,), "params_or_shapes",
         _fixed({"W": (2, 2), "s": 3.0}, np.float32)),
        # the contract asks for a ValueError here and names no argument ("" is in every message)
        ("a negative axis", (ValueError,), "", _fixed({"W": (2, -1)}, np.float32)),
    ]
    return run_cases("compute_param_memory_bytes", fn, ref.compute_param_memory_bytes, cases,
                     lambda label, got, exp: _int(label, "bytes", got, exp), invalid,
                     unchanged=assert_unchanged)


# --- Lesson 37 -------------------------------------------------------------------------------------
def check_compute_optimizer_memory_bytes(fn: Callable[..., Any]) -> str:
    """Every precision × stage, N = 1 and N not dividing Ψ; the ZeRO paper's worked example."""
    cases = [(f"Psi=7.5e9, mixed, N=64, stage {s}", _fixed(7_500_000_000, "mixed", 64, s)) for s in range(4)]
    cases += [(f"Psi=1000, fp32, N=3, stage {s}", _fixed(1000, "fp32", 3, s)) for s in range(4)]
    cases += [("Psi=12345, mixed, N=1, stage 3", _fixed(12345, "mixed", 1, 3)),
              ("Psi=10, fp32, N=20 > Psi, stage 3 (N has no upper bound)", _fixed(10, "fp32", 20, 3))]
    invalid = [
        ("num_params = 0 (a model with no parameters)", (ValueError,), "num_params", _fixed(0, "mixed", 2, 1)),
        ("zero_stage = 4", (ValueError,), "zero_stage", _fixed(100, "mixed", 2, 4)),
        ("num_workers = 0", (ValueError,), "num_workers", _fixed(100, "mixed", 0, 1)),
        ("precision = 'bf8'", (ValueError,), "precision", _fixed(100, "bf8", 2, 1)),
        ("precision = 'FP32' (the names are exact)", (ValueError,), "precision", _fixed(100, "FP32", 2, 1)),
        ("num_params = True", (TypeError,), "num_params", _fixed(True, "mixed", 2, 1)),
        ("num_params = 7.5e9 (a float)", (TypeError,), "num_params", _fixed(7.5e9, "mixed", 64, 1)),
        ("num_workers = True", (TypeError,), "num_workers", _fixed(100, "mixed", True, 1)),
        ("zero_stage = 2.0", (TypeError,), "zero_stage", _fixed(100, "mixed", 2, 2.0)),
        # the contract's order: num_params, precision, num_workers, zero_stage — the first invalid one is named
        ("all four invalid: num_params is validated first", BAD, "num_params", _fixed(0, "bf8", 0, 9)),
        ("precision, num_workers, zero_stage invalid: precision comes next", BAD, "precision",
         _fixed(100, "bf8", 0, 9)),
        ("num_workers and zero_stage invalid: num_workers before zero_stage", BAD, "num_workers",
         _fixed(100, "fp32", 0, 9)),
    ]
    # Before the 7.5e9 cases: an answer that allocates Psi entries fails here, not by exhausting the machine there.
    psi = 2**22
    _allocates_nothing(fn, ref.compute_optimizer_memory_bytes,
                       f"nothing is allocated: Psi = {psi:,}, mixed, N = 4, stage 2 (float32 Psi entries are 16 MiB)",
                       (psi, "mixed", 4, 2), 4 * psi)
    count = run_cases("compute_optimizer_memory_bytes", fn, ref.compute_optimizer_memory_bytes, cases, _dict, invalid,
                      count_only=True)
    return passed("compute_optimizer_memory_bytes", count + 1)


# --- Lesson 38 -------------------------------------------------------------------------------------
def check_compute_peak_activation_memory_bytes(fn: Callable[..., Any]) -> str:
    """Micro-batches × segments × dtype on uniform and uneven widths (uneven batch splits included)."""
    widths = [32] + [128] * 15 + [4]
    cases = [
        ("plain, float32", _fixed(widths, 1024, np.float32, 1, None)),
        ("4 micro-batches", _fixed(widths, 1024, np.float32, 4, None)),
        ("segments of 4", _fixed(widths, 1024, np.float32, 1, 4)),
        ("3 micro-batches of 1000 rows (uneven), segments of 3, float16", _fixed(widths, 1000, np.float16, 3, 3)),
        ("uneven widths", _fixed([10, 200, 50, 300, 20, 5], 64, np.float32, 2, 2)),
        ("uneven widths given as a tuple, float64", _fixed((10, 200, 50, 300, 20, 5), 48, np.float64, 5, 3)),
    ]
    w = [4, 8, 2]
    invalid = [
        ("num_micro_batches = 17 > batch = 16", BAD, "num_micro_batches", _fixed(w, 16, np.float32, 17, None)),
        ("segment_size = 3 > L = 2", BAD, "segment_size", _fixed(w, 16, np.float32, 1, 3)),
        ("segment_size = 0", BAD, "segment_size", _fixed(w, 16, np.float32, 1, 0)),
        ("segment_size = True", BAD, "segment_size", _fixed(w, 16, np.float32, 1, True)),
        ("batch = True", BAD, "batch", _fixed(w, True, np.float32, 1, None)),
        ("num_micro_batches = True", BAD, "num_micro_batches", _fixed(w, 16, np.float32, True, None)),
        ("a width of 0", BAD, "layer_widths", _fixed([4, 0, 2], 16, np.float32, 1, None)),
        ("a width True", BAD, "layer_widths", _fixed([4, True, 2], 16, np.float32, 1, None)),
        ("dtype = np.int32 (not floating)", BAD, "dtype", _fixed(w, 16, np.int32, 1, None)),
    ]
    wide, rows = [4096] * 4, 4096  # one activation of 4096 rows and width 4096 is 64 MiB in float32
    _allocates_nothing(fn, ref.compute_peak_activation_memory_bytes,
                       f"nothing of the network's size is allocated: widths {wide}, batch {rows} (one activation "
                       "is 64 MiB)", (wide, rows, np.float32, 1, None), 4 * rows * wide[1])
    count = run_cases("compute_peak_activation_memory_bytes", fn, ref.compute_peak_activation_memory_bytes, cases,
                      lambda label, got, exp: _int(label, "peak bytes", got, exp), invalid,
                      unchanged=assert_unchanged,
                      count_only=True)
    return passed("compute_peak_activation_memory_bytes", count + 1)


# --- Lesson 39 -------------------------------------------------------------------------------------
def check_compare_memory(fn: Callable[..., Any]) -> str:
    """The rows (names, order) and every number, for configurations that switch techniques on and off."""
    base = dict(layer_widths=[64] + [256] * 8 + [10], batch=512, num_micro_batches=4, segment_size=3,
                precision="mixed", num_workers=4, zero_stage=2)
    cases = [
        ("every technique on", _fixed(base)),
        ("fp32, ZeRO off, one worker", _fixed({**base, "precision": "fp32", "num_workers": 1, "zero_stage": 0})),
        ("only checkpointing", _fixed({**base, "num_micro_batches": 1, "precision": "fp32", "num_workers": 1,
                                       "zero_stage": 0})),
        ("ZeRO-3 on 8 workers, uneven batch", _fixed({**base, "batch": 500, "num_workers": 8, "zero_stage": 3})),
        ("one worker with ZeRO-1 (the workers row still appears)",
         _fixed({**base, "num_workers": 1, "zero_stage": 1, "precision": "fp32"})),
        ("4 workers without ZeRO (the row is named '4 workers, ZeRO-0')",
         _fixed({**base, "zero_stage": 0, "segment_size": None, "num_micro_batches": 1})),
    ]
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: list, inputs: Args) -> None:
        unchanged(label, inputs)
        if not isinstance(got, list) or [r.get("setup") if isinstance(r, dict) else None for r in got] != \
                [r["setup"] for r in expected]:
            raise CheckFailure(f"[{label}] the rows must be {[r['setup'] for r in expected]}")
        for row, want in zip(got, expected):
            _dict(f"{label}, row {want['setup']!r}", {k: v for k, v in row.items() if k != "setup"},
                  {k: v for k, v in want.items() if k != "setup"})

    key = ("config[", "num_workers")  # named as config['num_workers'] (either quote)
    invalid = [
        ("config without 'zero_stage' (listed as missing)", BAD, ("config", "zero_stage"),
         _fixed({k: v for k, v in base.items() if k != "zero_stage"})),
        ("config with an unexpected key 'optimizer'", BAD, ("config", "optimizer"),
         _fixed({**base, "optimizer": "adam"})),
        ("config a list", BAD, "config", _fixed(list(base.items()))),
        ("num_workers = 0", BAD, key, _fixed({**base, "num_workers": 0})),
        ("num_workers = 513 > batch = 512", BAD, key, _fixed({**base, "num_workers": 513})),
        ("num_workers = True", BAD, key, _fixed({**base, "num_workers": True})),
        ("zero_stage = True", BAD, ("config[", "zero_stage"), _fixed({**base, "zero_stage": True})),
        ("zero_stage = 4", BAD, ("config[", "zero_stage"), _fixed({**base, "zero_stage": 4})),
        ("batch = 0", BAD, ("config[", "batch"), _fixed({**base, "batch": 0})),
        ("num_micro_batches = 129 > ceil(512/4)", BAD, ("config[", "num_micro_batches"),
         _fixed({**base, "num_micro_batches": 129})),
        ("segment_size = 0", BAD, ("config[", "segment_size"), _fixed({**base, "segment_size": 0})),
        ("precision = 'fp16'", BAD, "precision", _fixed({**base, "precision": "fp16"})),
    ]
    return run_cases("compare_memory", fn, ref.compare_memory, cases, compare, invalid, compare_with_inputs=True)
