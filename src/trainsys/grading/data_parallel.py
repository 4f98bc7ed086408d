"""Checks behind the hidden tests of Module 1, Part 5 (lessons 25–30: data parallelism).

Uneven shards are in every check (10 examples on 3 or 4 workers), because that is where averaging the
shards' means goes wrong; ring sizes are chosen so that ``N`` does not divide the element count (uneven
chunks, and empty ones when there are fewer elements than workers), for ``N = 1 … 6``; bucket caps are hit
exactly (so that closing at ``>`` instead of ``≥`` shows), overshot by one gradient (so that closing before
the cap would be exceeded shows), and reached by one large gradient after a small one (DDP puts both in one
bucket). A worker's peak memory (Lesson 26) is measured
against the reference's, with ``tracemalloc`` or, in the grading sandbox, by the operating system.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    assert_peak_within,
    against_fresh_inputs,
    assert_contiguous_views,
    fixed as _fixed,
    BAD,
    Args,
    CheckFailure,
    assert_array,
    assert_array_dict,
    assert_scalar,
    assert_tuple,
    assert_mlp_gradients_within_bound,
    assert_within_rounding,
    passed,
    run_cases,
)
from trainsys.memtrain import buckets as ref_buckets
from trainsys.memtrain import data_parallel as ref
from trainsys.memtrain import mlp
from trainsys.memtrain import ring_allreduce as ref_ring

TE = (TypeError,)
"""The contract says TypeError (a wrong type: ``True`` or ``2.0`` for a count, a list for an array)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value or shape)."""

__all__ = [
    "check_shard_dataset_across_workers",
    "check_compute_local_gradients",
    "check_all_reduce_mean",
    "check_ring_all_reduce_mean",
    "check_data_parallel_train_step",
    "check_bucket_gradients",
]

CLAUSES = {
    "shard_dataset_across_workers": {
        "remainder policy": ("n=10, num_workers=3",),
        "mutation": ("n=8, num_workers=2", "n=13, num_workers=5"),
        "shuffling is not this function's job": ("n=8, num_workers=2",),
        "failure modes": ("num_workers = 0", "num_workers = 7 > n = 6", "num_workers = 2.0", "num_workers = True",
                          "X has 6 rows, Y has 5"),
        "metric that proves it correct": ("n=10, num_workers=3",),
    },
    "compute_local_gradients": {
        "mutation": ("shard of 4 examples, float32",),
        "memory": ("memory: a shard of 512 examples",),
        "failure modes": ("shard is X alone", "shard of three items", "shard with 4 rows of X and 3 of Y",
                          "shard with 4 input features for 3", "shard with 3 target columns for W2's 2",
                          "shard of integer arrays", "an empty shard", "params without 'b2'"),
        "metric that proves it correct": ("shard of 4 examples, float32",),
    },
    "all_reduce_mean": {
        "new arrays, one per worker": ("N=1 workers, shape (4,), float64", "N=2 workers, shape (7,), float32"),
        "mutation": ("N=2 workers, shape (7,), float32",),
        "arithmetic": ("N=2 workers, shape (7,), float32", "N=3 workers, shape (3, 4), float64"),
        "failure modes": ("an empty list", "worker 2 has shape (5,) for (4,)", "worker 1 is float32, worker 0 float64",
                          "an integer array", "worker 1 is a Python list", "worker_arrays a dict"),
        "metric that proves it correct": ("N=2 workers, shape (7,), float32",),
    },
    "ring_all_reduce_mean": {
        "chunks": ("N=2 workers, shape (7,)", "N=5 workers, shape (3,)"),
        "which chunk": ("N=2 workers, shape (7,)", "N=3 workers, shape (10,)"),
        "the division": ("N=2 workers, shape (7,)",),
        "mutation": ("N=1 workers, shape (5,)",),
        "failure modes": ("an empty list", "worker 2 has shape (5,) for (4,)", "worker 1 is float32, worker 0 float64",
                          "an integer array", "worker_arrays a dict"),
        "metric that proves it correct": ("N=2 workers, shape (7,)", "N=3 workers, shape (10,)"),
    },
    "data_parallel_train_step": {
        "the pipeline per worker": ("n=12 on 1 workers", "n=12 on 3 workers"),
        "why $n/n$ is local": ("n=10 on 3 workers", "n=12 on 3 workers"),
        "mutation": ("n=12 on 1 workers",),
        "failure modes": ("no shards", "shards a dict", "shards[1] a single array", "lr = 0", "lr = nan",
                          "shards[1] with 4 input features", "shards[1] with no rows", "params without 'b2'"),
        "metric that proves it correct": ("n=10 on 3 workers", "n=12 on 3 workers", "n=10 on 4 workers, float64"),
    },
    "bucket_gradients": {
        "the filling rule": ("4 arrays, cap 24 bytes", "4 arrays, first bucket 16 bytes, cap 32",
                             "4 arrays, cap 20 bytes", "a large gradient after a small one"),
        "a bucket": ("4 arrays, cap 24 bytes", "4 arrays, cap 4"),
        "mutation": ("4 arrays, cap 24 bytes", "4 arrays, cap 4"),
        "failure modes": ("bucket_cap_bytes = 2.5", "first_bucket_cap_bytes = 0", "grads = {}",
                          "grads a list of arrays", "bucket_cap_bytes = True", "bucket_cap_bytes = 16.0",
                          "grads of mixed dtypes"),
        "metric that proves it correct": ("4 arrays, cap 24 bytes", "4 arrays, cap 20 bytes"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""



def _data(n: int, d_in: int = 3, d_out: int = 2, seed: int = 0, dtype: type = np.float32):
    X, Y = mlp.make_synthetic_regression_batch(n, d_in, d_out, np.random.default_rng(seed))
    return X.astype(dtype), Y.astype(dtype)


def _params(seed: int, d_in: int = 3, d_h: int = 5, d_out: int = 2, dtype: type = np.float32):
    rng = np.random.default_rng(seed)
    params = mlp.init_mlp_params(d_in, d_h, d_out, rng)
    params["b1"] = rng.standard_normal(d_h).astype(np.float32) * 0.1  # a forgotten bias shows
    return {k: v.astype(dtype) for k, v in params.items()}


def _arrays(N: int, shape: tuple, seed: int, dtype: type = np.float64) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(N)]


def _no_shared_memory(label: str, got: list, inputs: list) -> None:
    for k, a in enumerate(got):
        for j, b in enumerate(list(got[:k]) + list(inputs)):
            if np.shares_memory(a, b):
                other = f"result {j}" if j < k else f"worker_arrays[{j - k}]"
                raise CheckFailure(f"[{label}] result {k} shares memory with {other}: every worker must "
                                   "end with its own new array")


# --- Lesson 25 -------------------------------------------------------------------------------------
def _not_reordered(label: str, got: Any, X: np.ndarray) -> None:
    """Every row of ``X`` is there, once, but not as contiguous blocks in order: the rows were shuffled or
    dealt out round-robin (``X[k::N]``, the interleaving of ``DistributedSampler``)."""
    if not isinstance(got, list) or not all(isinstance(p, (tuple, list)) and len(p) == 2
                                            and isinstance(p[0], np.ndarray) for p in got):
        return
    rows = [p[0] for p in got]
    if sum(len(r) for r in rows) != len(X) or not all(r.ndim == 2 and r.shape[1:] == X.shape[1:] for r in rows):
        return
    together = np.concatenate(rows)
    if np.array_equal(together, X):
        return
    by_rows = lambda a: a[np.lexsort(a.T[::-1])]  # noqa: E731 - rows in a canonical order
    if np.array_equal(by_rows(together), by_rows(X)):
        raise CheckFailure(f"[{label}] the shards hold every row of X, but not as contiguous blocks in order: worker "
                           "k must get rows start_k … stop_k − 1 of X exactly as given (no shuffling, no "
                           "round-robin dealing); shuffling is not this function's job")


def check_shard_dataset_across_workers(fn: Callable[..., Any]) -> str:
    """Contiguous shards, the first ``n mod N`` one example larger, every example once, views not copies."""
    sizes = [(8, 2), (10, 3), (10, 4), (7, 7), (5, 1), (1, 1), (13, 5)]
    cases = [(f"n={n}, num_workers={N}", _fixed(*_data(n, seed=i), N)) for i, (n, N) in enumerate(sizes)]
    cases.append(("n=11, num_workers=np.int64(3) (a NumPy integer is fine)", _fixed(*_data(11, seed=9), np.int64(3))))

    def compare(label: str, got: Any, expected: list, inputs: Args) -> None:
        _not_reordered(label, got, inputs[0][0])
        assert_contiguous_views(label, got, expected, inputs[0][0], inputs[0][1], "shard",
                                "the first n mod N workers take one extra example; none is dropped")
        # a pair may be a tuple or a two-item list (the contract says pairs; every caller unpacks them)

    X, Y = _data(6)
    invalid = [  # the contract: a non-integer is a TypeError, N < 1 or N > n a ValueError
        ("num_workers = 0", VE, "num_workers", _fixed(X, Y, 0)),
        ("num_workers = 7 > n = 6", VE, "num_workers", _fixed(X, Y, 7)),
        ("num_workers = 2.0", TE, "num_workers", _fixed(X, Y, 2.0)),
        ("num_workers = True (bool is a TypeError)", (TypeError,), "num_workers", _fixed(X, Y, True)),
        ("X has 6 rows, Y has 5 (the message shows both counts)", (ValueError,), ("Y", "6", "5"),
         _fixed(X, Y[:5], 2)),
        ("X an integer array", (TypeError,), "X", _fixed(np.arange(12).reshape(6, 2), Y, 2)),
        ("Y an integer array", (TypeError,), "Y", _fixed(X, np.ones((6, 2), dtype=np.int64), 2)),
        ("X a nested Python list", (TypeError,), "X", _fixed(X.tolist(), Y, 2)),
        ("Y 1-D of 6 entries", (ValueError,), "Y", _fixed(X, Y[:, 0].copy(), 2)),
        ("X 3-D", (ValueError,), "X", _fixed(X.reshape(6, 3, 1), Y, 2)),
    ]
    return run_cases("shard_dataset_across_workers", fn, ref.shard_dataset_across_workers, cases, compare,
                     invalid, compare_with_inputs=True)


# --- Lesson 26 -------------------------------------------------------------------------------------
# The summed loss is a float64 sum of squared float32 or float64 residuals: the residuals carry the
# forward pass's rounding (float32: a few eps = a few 1e-7 relative, so rtol 1e-5; float64: rtol 1e-12);
# the loss is of order 1, atol is for a loss of exactly 0 only.
_LOSS_TOL = {np.dtype(np.float32): {"rtol": 1e-5, "atol": 1e-7}, np.dtype(np.float64): {"rtol": 1e-12, "atol": 1e-14}}


def check_compute_local_gradients(fn: Callable[..., Any]) -> str:
    """``(grad of the shard's summed loss, summed loss, n_k)`` for shards of 1 to 7 examples."""
    configs = [(4, np.float32), (3, np.float32), (1, np.float32), (7, np.float64), (5, np.float64)]
    cases = [(f"shard of {n} examples, {np.dtype(dt).name}",
              _fixed(_params(10 + i, dtype=dt), _data(n, seed=i, dtype=dt)))
             for i, (n, dt) in enumerate(configs)]
    # the contract's 'a tuple or list of two items': a [X_k, Y_k] list is a valid shard
    cases.append(("shard given as a list [X_k, Y_k]", _fixed(_params(15), list(_data(3, seed=5)))))
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        unchanged(label, inputs)
        grads, loss_sum, n_k = assert_tuple(label, "the result (grad_sum, loss_sum, n_k)", got, 3)
        dtype = expected[0]["W1"].dtype
        # the shard's summed loss: G = 2 (y_hat - y) / d_out; scaling by n_k before or after: 2 more roundings
        params, (X_k, Y_k) = inputs[0][0], inputs[0][1]
        assert_mlp_gradients_within_bound(label, "grad_sum", grads, expected[0], params, X_k, Y_k,
                                          scale=2 / Y_k.shape[1], extra=2)
        assert_scalar(label, "loss_sum", loss_sum, expected[1], **_LOSS_TOL[dtype])
        if type(loss_sum) is not float:
            raise CheckFailure(f"[{label}] loss_sum must be a Python float (float(...)), got {type(loss_sum).__name__}")
        if type(n_k) is not int or n_k != expected[2]:
            raise CheckFailure(f"[{label}] n_k is {n_k!r} ({type(n_k).__name__}), expected the Python int "
                               f"{expected[2]}")

    p, (X, Y) = _params(0), _data(4)
    invalid = [
        ("shard is X alone, not a pair", BAD, "shard", _fixed(p, X)),
        ("shard of three items (X_k, Y_k, Y_k)", BAD, "shard", _fixed(p, (X, Y, Y))),
        ("shard with 4 rows of X and 3 of Y", BAD, "shard", _fixed(p, (X, Y[:3]))),
        ("shard with 4 input features for 3", BAD, "shard", _fixed(p, (np.ones((4, 4), np.float32), Y))),
        ("shard with 3 target columns for W2's 2", BAD, "shard", _fixed(p, (X, np.ones((4, 3), np.float32)))),
        ("shard of integer arrays", BAD, "shard",
         _fixed(p, (np.ones((4, 3), dtype=np.int64), np.ones((4, 2), dtype=np.int64)))),
        ("an empty shard", BAD, "shard", _fixed(p, (X[:0], Y[:0]))),
        ("params without 'b2' (refused by mlp_forward, naming params)", BAD, "params",
         _fixed({k: v for k, v in p.items() if k != "b2"}, (X, Y))),
    ]
    count = run_cases("compute_local_gradients", fn, ref.compute_local_gradients, cases, compare, invalid,
                      compare_with_inputs=True, count_only=True)
    _check_local_memory(fn)
    return passed("compute_local_gradients", count + 1)


def _check_local_memory(fn: Callable[..., Any]) -> None:
    """The peak of one worker on 512 rows against the reference's, measured the same way.

    With d_in=32, d_hidden=256, d_out=8 in float32 the reference holds the cache Z1, A1 (512 KiB each),
    the output gradient and dA1, dZ1 (512 KiB each) and one parameter-sized tree (42 KiB): about 2 MiB at
    its peak. A correct answer that scales after the backward or forms its own residual stays within a
    few hundred KiB of that. Forming every example's gradient before summing (per-example outer products,
    or a list of 512 gradient trees) needs 512 parameter trees, about 20 MiB. Limit: 1.5 times the
    reference plus 1 MiB (allocator and the sandbox's operating-system measurement).
    """
    n, d_in, d_hidden, d_out = 512, 32, 256, 8
    params = _params(60, d_in, d_hidden, d_out)
    shard = _data(n, d_in, d_out, seed=61)
    label = (f"memory: a shard of {n} examples, d_in={d_in}, d_hidden={d_hidden}, d_out={d_out} "
             "(the peak of Part 1 for n_k rows)")
    assert_peak_within(fn, label, ref.compute_local_gradients, (params, shard), 1.5, 2**20,
                       "the worker's peak is the "
                           "forward cache and one gradient tree — sum over the shard's examples inside the matrix "
                           "products (A1.T @ dY), never by forming one gradient per example")


# --- Lesson 27 -------------------------------------------------------------------------------------
def check_all_reduce_mean(fn: Callable[..., Any]) -> str:
    """``N`` new arrays, each the mean, for ``N = 1 … 5``, several shapes and dtypes (float16 too)."""
    configs = [(1, (4,), np.float64), (2, (7,), np.float32), (3, (3, 4), np.float64), (4, (2, 3, 2), np.float32),
               (5, (1,), np.float64), (3, (5,), np.float16)]
    cases = [(f"N={N} workers, shape {shape}, {np.dtype(dt).name}", _fixed(_arrays(N, shape, i, dt)))
             for i, (N, shape, dt) in enumerate(configs)]
    # Many elements, so that another summation order, dividing before adding, multiplying by 1/N or a
    # float32 accumulation of float16 changes the last bit of some entries: all accepted to rounding, as
    # long as every worker gets the same bits.
    cases += [("N=3 workers, shape (64,), float16, values near 1", _fixed([1 + a / 8 for a in _arrays(3, (64,), 7,
                                                                                                     np.float16)])),
              ("N=5 workers, shape (8, 8), float32", _fixed(_arrays(5, (8, 8), 8, np.float32))),
              ("N=3 workers given as a tuple, shape (6,), float64", _fixed(tuple(_arrays(3, (6,), 9))))]
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: list, inputs: Args) -> None:
        unchanged(label, inputs)
        if not isinstance(got, list) or len(got) != len(expected):
            raise CheckFailure(f"[{label}] must return a list of {len(expected)} arrays (one per worker)")
        arrays = inputs[0][0]
        # Any order of the N - 1 additions and the division (or a multiplication by a rounded 1/N: one more
        # rounding) is within gamma_{N+1} of the exact mean, relative to the mean of |a_j| (trainsys.tolerance);
        # two such answers are within twice that.
        magnitude = np.mean(np.abs(np.stack([np.asarray(a, np.float64) for a in arrays])), axis=0)
        for k, (g, e) in enumerate(zip(got, expected)):
            assert_within_rounding(label, f"result {k}", g, e, magnitude, len(arrays) + 1)
            if not np.array_equal(g, got[0], equal_nan=True):
                raise CheckFailure(
                    f"[{label}] result {k} differs from result 0 in {int(np.sum(g != got[0]))} of {e.size} entries: "
                    "every worker must get bit-identical values (compute the mean once, then copy it N times)")
        _no_shared_memory(label, got, arrays)

    a = _arrays(3, (4,), 0)
    invalid = [  # the contract: not a list or tuple, or a non-float entry, TypeError; empty or unequal, ValueError
        ("an empty list", VE, "worker_arrays", _fixed([])),
        ("worker 2 has shape (5,) for (4,)", VE, "worker_arrays[2]", _fixed([a[0], a[1], np.ones(5)])),
        ("worker 1 is float32, worker 0 float64", VE, "worker_arrays[1]",
         _fixed([a[0], a[1].astype(np.float32)])),
        ("an integer array", TE, "worker_arrays[0]", _fixed([np.ones(4, dtype=np.int64)] * 2)),
        ("worker 1 is a Python list", TE, "worker_arrays[1]", _fixed([a[0], a[1].tolist()])),
        ("worker_arrays a dict", TE, "worker_arrays", _fixed({0: a[0], 1: a[1]})),
    ]
    return run_cases("all_reduce_mean", fn, ref.all_reduce_mean, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 28 -------------------------------------------------------------------------------------
# The ring sums each chunk in ring order (starting at its owner), Lesson 27 in worker order: the same N ≤ 6
# values added in another order, then divided by N — within 2·γ_{N+1} of the mean of |a_j| (the division and
# a possible reciprocal included; trainsys.tolerance), elementwise, whatever the cancellation.
RING_CASES = [(1, (5,)), (2, (7,)), (3, (10,)), (4, (2, 5)), (5, (3,)), (6, (4, 5)), (4, (16,)), (3, (11,))]


def _ring_log(label: str, log: Any, expected: list, N: int) -> None:
    if not isinstance(log, list) or not all(isinstance(m, dict) for m in log):
        raise CheckFailure(f"[{label}] the log must be a list of dicts, one per message")
    for i, m in enumerate(log):
        if set(m) != set(ref_ring.LOG_KEYS):
            raise CheckFailure(f"[{label}] log[{i}] must have exactly the keys {list(ref_ring.LOG_KEYS)}, "
                               f"got {sorted(m)}")
    steps = sorted({m["step"] for m in log})
    if steps != list(range(2 * (N - 1))) or len(log) != N * 2 * (N - 1):
        raise CheckFailure(f"[{label}] the log has {len(log)} messages in steps {steps}; expected "
                           f"2(N−1) = {2 * (N - 1)} steps numbered 0 … {2 * N - 3}, "
                           "each with one message per worker")
    got = {(m["step"], m["sender"]): m for m in log}
    if len(got) != len(log):
        raise CheckFailure(f"[{label}] a worker sends more than one message in one step")
    order = [(m["step"], m["sender"]) for m in log]
    if order != sorted(order):
        i = next(i for i in range(len(order) - 1) if order[i] > order[i + 1])
        raise CheckFailure(f"[{label}] the log must be ordered by step, then sender: log[{i}] is (step, sender) "
                           f"{order[i]} and log[{i + 1}] is {order[i + 1]}")
    for want in expected:
        key = (want["step"], want["sender"])
        m = got.get(key)
        if m is None:
            raise CheckFailure(f"[{label}] worker {key[1]} sends nothing at step {key[0]}")
        for field in ("receiver", "phase", "chunk", "bytes"):
            if m[field] != want[field]:
                hint = {"receiver": "worker k sends to (k + 1) mod N",
                        "chunk": "reduce-scatter: chunk (k − s) mod N; all-gather: chunk (k + 1 − s) mod N",
                        "bytes": "bytes = the chunk's element count × itemsize (chunks as np.array_split)",
                        "phase": "steps 0 … N−2 are 'reduce-scatter', the rest 'all-gather'"}[field]
                raise CheckFailure(f"[{label}] at step {key[0]} worker {key[1]}'s message has {field} "
                                   f"{m[field]!r}, expected {want[field]!r} ({hint})")
    got_bytes = ref_ring.bytes_sent_per_worker(log, N)
    want_bytes = ref_ring.bytes_sent_per_worker(expected, N)
    if got_bytes != want_bytes:
        raise CheckFailure(f"[{label}] bytes sent per worker are {got_bytes}, expected {want_bytes}")


def check_ring_all_reduce_mean(fn: Callable[..., Any]) -> str:
    """Results equal to the mean; the log: 2(N−1) steps, k → k+1, the right chunk and bytes per message."""
    cases = [(f"N={N} workers, shape {shape} ({int(np.prod(shape))} elements)",
              _fixed(_arrays(N, shape, 20 + i, np.float32 if i % 2 else np.float64)))
             for i, (N, shape) in enumerate(RING_CASES)]
    cases.append(("N=3 workers given as a tuple, shape (7,)", _fixed(tuple(_arrays(3, (7,), 29)))))
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        unchanged(label, inputs)
        results, log = assert_tuple(label, "the result (results, log)", got, 2)
        N = len(expected[0])
        if not isinstance(results, list) or len(results) != N:
            raise CheckFailure(f"[{label}] results must be a list of {N} arrays (one per worker)")
        # N - 1 additions in ring order and one division, vs the reference's: 2 gamma_N of mean |a_j|
        magnitude = np.mean(np.abs(np.stack([np.asarray(a, np.float64) for a in inputs[0][0]])), axis=0)
        for k, (g, e) in enumerate(zip(results, expected[0])):
            assert_within_rounding(label, f"results[{k}]", g, e, magnitude, N + 1)
        for k, g in enumerate(results[1:], start=1):
            if not np.array_equal(g, results[0], equal_nan=True):
                raise CheckFailure(f"[{label}] results[{k}] and results[0] differ in {int(np.sum(g != results[0]))} "
                                   "entries (in the last bits): every worker's copy must be bit-identical — each "
                                   "chunk is summed once, by its owner, and the all-gather copies it unchanged")
        _no_shared_memory(label, results, inputs[0][0])
        _ring_log(label, log, expected[1], N)

    a = _arrays(3, (4,), 0)
    invalid = [
        ("an empty list", BAD, "worker_arrays", _fixed([])),
        ("worker 2 has shape (5,) for (4,)", BAD, "worker_arrays", _fixed([a[0], a[1], np.ones(5)])),
        ("worker 1 is float32, worker 0 float64", BAD, "worker_arrays", _fixed([a[0], a[1].astype(np.float32)])),
        ("an integer array", BAD, "worker_arrays", _fixed([np.ones(4, dtype=np.int64)] * 2)),
        ("worker_arrays a dict, not a list", BAD, "worker_arrays", _fixed({0: a[0], 1: a[1]})),
    ]
    return run_cases("ring_all_reduce_mean", fn, ref_ring.ring_all_reduce_mean, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 29 -------------------------------------------------------------------------------------
# New parameters θ − lr ∇L against the reference's: derived elementwise in the compare below.


def check_data_parallel_train_step(fn: Callable[..., Any]) -> str:
    """Equal to the reference (so to the one-worker step) on even and uneven shards; ring bytes per worker."""
    configs = [(12, 1, np.float32), (12, 3, np.float32), (10, 3, np.float32), (10, 4, np.float64),
               (7, 7, np.float32), (9, 2, np.float64)]

    def case(i: int, n: int, N: int, dt: type) -> Callable[[], Args]:
        X, Y = _data(n, seed=30 + i, dtype=dt)
        return _fixed(_params(40 + i, dtype=dt), ref.shard_dataset_across_workers(X, Y, N), 0.05)

    cases = [(f"n={n} on {N} workers, {np.dtype(dt).name}", case(i, n, N, dt)) for i, (n, N, dt) in enumerate(configs)]
    X7, Y7 = _data(7, seed=37)
    cases.append(("n=7 on 2 workers, shards given as a tuple",
                  _fixed(_params(47), tuple(ref.shard_dataset_across_workers(X7, Y7, 2)), 0.05)))
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        unchanged(label, inputs)
        new_params, loss, sent = assert_tuple(label, "the result (new_params, loss, bytes_sent)", got, 3)
        dtype = expected[0]["W1"].dtype
        # theta - lr g: the union's gradient within the derived bound (the N shard sums, the all-reduce's
        # division and the N/n scaling as extra roundings), then the update's two (trainsys.tolerance)
        params, shards, lr = inputs[0]
        X = np.concatenate([np.asarray(sh[0]) for sh in shards])
        Y = np.concatenate([np.asarray(sh[1]) for sh in shards])
        assert_mlp_gradients_within_bound(label, "new_params", new_params, expected[0], params, X, Y,
                                          extra=len(shards) + 2, lr=lr)
        assert_scalar(label, "loss", loss, expected[1], **_LOSS_TOL[dtype])
        if type(loss) is not float:
            raise CheckFailure(f"[{label}] loss must be a Python float (float(...)), got {type(loss).__name__}")
        if not isinstance(sent, (list, tuple)) or [int(b) for b in sent] != expected[2]:
            raise CheckFailure(f"[{label}] bytes_sent is {sent!r}, expected {expected[2]} "
                               "(the ring's bytes per worker)")

    p, (X, Y) = _params(0), _data(6)
    shards = ref.shard_dataset_across_workers(X, Y, 2)
    invalid = [
        ("no shards", BAD, "shards", _fixed(p, [], 0.1)),
        ("shards a dict, not a list", BAD, "shards", _fixed(p, dict(enumerate(shards)), 0.1)),
        ("shards[1] a single array, not a pair", BAD, "shards[1]", _fixed(p, [shards[0], X[3:]], 0.1)),
        ("lr = 0", BAD, "lr", _fixed(p, shards, 0.0)),
        ("lr = nan", BAD, "lr", _fixed(p, shards, float("nan"))),
        ("lr = inf", BAD, "lr", _fixed(p, shards, float("inf"))),
        ("shards[1] with 4 input features", BAD, "shards[1]",
         _fixed(p, [shards[0], (np.ones((3, 4), np.float32), Y[:3])], 0.1)),
        ("shards[1] with no rows", BAD, "shards[1]", _fixed(p, [shards[0], (X[:0], Y[:0]), shards[1]], 0.1)),
        ("shards[0] with 3 rows of X and 2 of Y", BAD, "shards[0]", _fixed(p, [(X[:3], Y[:2]), shards[1]], 0.1)),
        ("params without 'b2'", BAD, "params", _fixed({k: v for k, v in p.items() if k != "b2"}, shards, 0.1)),
    ]
    return run_cases("data_parallel_train_step", fn, ref.data_parallel_train_step, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 30 -------------------------------------------------------------------------------------
def _tree(sizes: dict[str, tuple], seed: int, dtype: type = np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(dtype) for k, s in sizes.items()}


def check_bucket_gradients(fn: Callable[..., Any]) -> str:
    """Reverse order; caps reached exactly and overshot by the last gradient; a large gradient joining the open
    bucket and closing it; a smaller first bucket."""
    four = {"a": (4,), "b": (2,), "c": (2,), "d": (2, 2)}  # float32 bytes 16, 8, 8, 16
    deep = {"W1": (3, 8), "b1": (8,), "W2": (8, 8), "b2": (8,), "W3": (8, 2), "b3": (2,)}
    mlp_grads = _params(7)
    cases = [
        ("4 arrays, cap 24 bytes (buckets fill exactly)", _fixed(_tree(four, 1), 24)),
        ("4 arrays, cap 1000 (one bucket)", _fixed(_tree(four, 2), 1000)),
        ("4 arrays, cap 4 (every array larger than the cap)", _fixed(_tree(four, 3), 4)),
        ("4 arrays, cap 20 bytes (16 + 8 = 24 bytes: the bucket overshoots, then closes)", _fixed(_tree(four, 8), 20)),
        ("a large gradient after a small one (8 + 64 bytes share a bucket of cap 32)",
         _fixed(_tree({"s0": (2,), "big": (16,), "s1": (2,)}, 10), 32)),
        ("4 arrays, first bucket 16 bytes, cap 32", _fixed(_tree(four, 4), 32, 16)),
        ("MLP gradients, cap 64 bytes", _fixed(mlp_grads, 64)),
        ("6 float64 arrays, cap 512, first bucket 150",
         _fixed(_tree(deep, 5, np.float64), 512, first_bucket_cap_bytes=150)),
        ("6 float64 arrays, cap 200", _fixed(_tree(deep, 6, np.float64), 200)),
    ]

    def compare(label: str, got: Any, expected: list, inputs: Args) -> None:
        if not isinstance(got, list) or not all(isinstance(b, dict) for b in got):
            raise CheckFailure(f"[{label}] must return a list of bucket dicts")
        got_keys = [list(b.get("keys", [])) for b in got]
        want_keys = [b["keys"] for b in expected]
        if got_keys != want_keys:
            raise CheckFailure(f"[{label}] buckets hold the keys {got_keys}, expected {want_keys} (reverse parameter "
                               "order; add each gradient, then close the bucket once its bytes reach its cap)")
        for i, (g, e) in enumerate(zip(got, expected)):
            if set(g) != set(ref_buckets.BUCKET_KEYS):
                raise CheckFailure(f"[{label}] bucket {i} must have exactly the keys {list(ref_buckets.BUCKET_KEYS)}")
            # exact: a flat is a copy of the gradients' values (no arithmetic), in their own dtype
            assert_array(label, f"bucket {i}['flat']", g["flat"], e["flat"], exact=True)
            if type(g["bytes"]) is not int or g["bytes"] != e["bytes"]:
                raise CheckFailure(f"[{label}] bucket {i}['bytes'] is {g['bytes']!r} ({type(g['bytes']).__name__}), "
                                   f"expected the Python int {e['bytes']} (flat.nbytes)")
            for key, grad in inputs[0][0].items():
                if np.shares_memory(g["flat"], grad):
                    raise CheckFailure(f"[{label}] bucket {i}['flat'] shares memory with grads[{key!r}]; every flat "
                                       "is a new array, even for a bucket of one key")

    g = _tree(four, 9)
    invalid = [  # the contract: caps that are not integers are a TypeError, caps <= 0 a ValueError
        ("bucket_cap_bytes = 0", VE, "bucket_cap_bytes", _fixed(g, 0)),
        ("bucket_cap_bytes = -8", VE, "bucket_cap_bytes", _fixed(g, -8)),
        ("bucket_cap_bytes = 2.5", TE, "bucket_cap_bytes", _fixed(g, 2.5)),
        ("first_bucket_cap_bytes = 0", VE, "first_bucket_cap_bytes", _fixed(g, 16, 0)),
        ("grads = {}", BAD, "grads", _fixed({}, 16)),
        ("grads a list of arrays, not a dict", BAD, "grads", _fixed(list(g.values()), 16)),
        ("bucket_cap_bytes = True (a bool)", (TypeError,), "bucket_cap_bytes", _fixed(g, True)),
        ("bucket_cap_bytes = 16.0 (not an int)", (TypeError,), "bucket_cap_bytes", _fixed(g, 16.0)),
        ("first_bucket_cap_bytes = 8.0 (not an int)", (TypeError,), "first_bucket_cap_bytes", _fixed(g, 16, 8.0)),
        ("grads of mixed dtypes (float32 and float64)", BAD, "grads",
         _fixed({**g, "d": g["d"].astype(np.float64)}, 16)),
        ("grads holding an integer array", BAD, "grads", _fixed({**g, "d": np.ones(4, dtype=np.int64)}, 16)),
    ]
    return run_cases("bucket_gradients", fn, ref_buckets.bucket_gradients, cases, compare, invalid,
                     compare_with_inputs=True)
