"""Checks behind the hidden tests of Module 1, Part 5 (lessons 25–30: data parallelism).

Uneven shards are in every check (10 examples on 3 or 4 workers), because that is where averaging the
shards' means goes wrong; ring sizes are chosen so that ``N`` does not divide the element count (uneven
chunks, and empty ones when there are fewer elements than workers), for ``N = 1 … 6``; bucket caps hit a
bucket's size exactly, so that ``<`` instead of ``≤`` shows.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
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
    run_cases,
)
from trainsys.memtrain import buckets as ref_buckets
from trainsys.memtrain import data_parallel as ref
from trainsys.memtrain import mlp
from trainsys.memtrain import ring_allreduce as ref_ring

__all__ = [
    "check_shard_dataset_across_workers",
    "check_compute_local_gradients",
    "check_all_reduce_mean",
    "check_ring_all_reduce_mean",
    "check_data_parallel_train_step",
    "check_bucket_gradients",
]





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


def assert_inputs_unchanged(label: str, what: str, before: Any, after: Any) -> None:
    """Like the harness's ``assert_unchanged``, but descending into lists and tuples (lists of worker arrays),
    and also catching a dict that gained or lost keys and a number or string replaced inside an input
    (``state["step"] = t`` written into the caller's state)."""
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after)):
            assert_inputs_unchanged(label, f"{what}[{i}]", b, a)
    elif isinstance(before, Mapping) and isinstance(after, Mapping):
        if set(before) != set(after):
            raise CheckFailure(f"[{label}] the function changed the keys of its input {what} (from "
                               f"{sorted(map(str, before))} to {sorted(map(str, after))}); it must leave it unchanged")
        for key in before:
            assert_inputs_unchanged(label, f"{what}[{key!r}]", before[key], after.get(key))
    elif isinstance(before, (int, float, str, np.generic)) and not isinstance(before, np.ndarray):
        same = type(before) is type(after) and (before == after or (before != before and after != after))
        if not same:
            raise CheckFailure(f"[{label}] the function replaced {what} of its input, {before!r}, by {after!r}; "
                               "it must leave its inputs unchanged")
    elif isinstance(before, np.ndarray) and not (isinstance(after, np.ndarray) and np.array_equal(before, after,
                                                                                                    equal_nan=True)):
        raise CheckFailure(f"[{label}] the function modified its input {what} in place; it must leave it unchanged")


def with_snapshots(cases: list[tuple[str, Callable[[], Args]]]) -> Callable[[str, Args], None]:
    """``unchanged(label, inputs)``: compare the arguments after the call with a fresh build of the case's inputs."""
    factories = dict(cases)

    def unchanged(label: str, inputs: Args) -> None:
        original = factories[label]()
        for i, (b, a) in enumerate(zip(original[0], inputs[0])):
            assert_inputs_unchanged(label, f"argument {i + 1}", b, a)

    return unchanged


def _no_shared_memory(label: str, got: list, inputs: list) -> None:
    for k, a in enumerate(got):
        for j, b in enumerate(list(got[:k]) + list(inputs)):
            if np.shares_memory(a, b):
                other = f"result {j}" if j < k else f"worker_arrays[{j - k}]"
                raise CheckFailure(f"[{label}] result {k} shares memory with {other}: every worker must "
                                   "end with its own new array")


# --- Lesson 25 -------------------------------------------------------------------------------------
def check_shard_dataset_across_workers(fn: Callable[..., Any]) -> str:
    """Contiguous shards, the first ``n mod N`` one example larger, every example once, views not copies."""
    sizes = [(8, 2), (10, 3), (10, 4), (7, 7), (5, 1), (1, 1), (13, 5)]
    cases = [(f"n={n}, num_workers={N}", _fixed(*_data(n, seed=i), N)) for i, (n, N) in enumerate(sizes)]
    cases.append(("n=11, num_workers=np.int64(3) (a NumPy integer is fine)", _fixed(*_data(11, seed=9), np.int64(3))))

    def compare(label: str, got: Any, expected: list, inputs: Args) -> None:
        assert_contiguous_views(label, got, expected, inputs[0][0], inputs[0][1], "shard",
                                "the first n mod N workers take one extra example; none is dropped")
        for k, pair in enumerate(got):
            if not isinstance(pair, tuple):
                raise CheckFailure(f"[{label}] shard {k} is a {type(pair).__name__}; the contract returns a list "
                                   "of (X_k, Y_k) tuples")

    X, Y = _data(6)
    invalid = [
        ("num_workers = 0", BAD, "num_workers", _fixed(X, Y, 0)),
        ("num_workers = 7 > n = 6", BAD, "num_workers", _fixed(X, Y, 7)),
        ("num_workers = 2.0", BAD, "num_workers", _fixed(X, Y, 2.0)),
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
def check_compute_local_gradients(fn: Callable[..., Any]) -> str:
    """``(grad of the shard's summed loss, summed loss, n_k)`` for shards of 1 to 7 examples."""
    configs = [(4, np.float32), (3, np.float32), (1, np.float32), (7, np.float64), (5, np.float64)]
    cases = [(f"shard of {n} examples, {np.dtype(dt).name}",
              _fixed(_params(10 + i, dtype=dt), _data(n, seed=i, dtype=dt)))
             for i, (n, dt) in enumerate(configs)]
    # the contract's 'a tuple or list of two items': a [X_k, Y_k] list is a valid shard
    cases.append(("shard given as a list [X_k, Y_k]", _fixed(_params(15), list(_data(3, seed=5)))))
    unchanged = with_snapshots(cases)

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        unchanged(label, inputs)
        grads, loss_sum, n_k = assert_tuple(label, "the result (grad_sum, loss_sum, n_k)", got, 3)
        assert_array_dict(label, "grad_sum", grads, expected[0], rtol=1e-5, atol=1e-6)
        assert_scalar(label, "loss_sum", loss_sum, expected[1], rtol=1e-5, atol=1e-7)
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
    ]
    return run_cases("compute_local_gradients", fn, ref.compute_local_gradients, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 27 -------------------------------------------------------------------------------------
def check_all_reduce_mean(fn: Callable[..., Any]) -> str:
    """``N`` new arrays, each the mean, for ``N = 1 … 5``, several shapes and dtypes (float16 too)."""
    configs = [(1, (4,), np.float64), (2, (7,), np.float32), (3, (3, 4), np.float64), (4, (2, 3, 2), np.float32),
               (5, (1,), np.float64), (3, (5,), np.float16)]
    cases = [(f"N={N} workers, shape {shape}, {np.dtype(dt).name}", _fixed(_arrays(N, shape, i, dt)))
             for i, (N, shape, dt) in enumerate(configs)]
    # Many elements, so that another summation order, dividing before adding, multiplying by 1/N or a
    # float32 accumulation of float16 changes the last bit of some entries (the arithmetic is exact here).
    cases += [("N=3 workers, shape (64,), float16, values near 1", _fixed([1 + a / 8 for a in _arrays(3, (64,), 7,
                                                                                                     np.float16)])),
              ("N=5 workers, shape (8, 8), float32", _fixed(_arrays(5, (8, 8), 8, np.float32))),
              ("N=3 workers given as a tuple, shape (6,), float64", _fixed(tuple(_arrays(3, (6,), 9))))]
    unchanged = with_snapshots(cases)

    def compare(label: str, got: Any, expected: list, inputs: Args) -> None:
        unchanged(label, inputs)
        if not isinstance(got, list) or len(got) != len(expected):
            raise CheckFailure(f"[{label}] must return a list of {len(expected)} arrays (one per worker)")
        for k, (g, e) in enumerate(zip(got, expected)):
            assert_array(label, f"result {k}", g, e)
            if not np.array_equal(g, e, equal_nan=True):
                raise CheckFailure(
                    f"[{label}] result {k} equals the mean only to rounding ({int(np.sum(g != e))} of {e.size} "
                    "entries differ in the last bits); the arithmetic is ((a_0 + a_1) + … + a_{N-1}) / N in the "
                    "arrays' own dtype — sum in worker order, then one division by N — bit for bit")
        _no_shared_memory(label, got, inputs[0][0])

    a = _arrays(3, (4,), 0)
    invalid = [
        ("an empty list", BAD, "worker_arrays", _fixed([])),
        ("worker 2 has shape (5,) for (4,)", BAD, "worker_arrays[2]", _fixed([a[0], a[1], np.ones(5)])),
        ("worker 1 is float32, worker 0 float64", BAD, "worker_arrays[1]",
         _fixed([a[0], a[1].astype(np.float32)])),
        ("an integer array", BAD, "worker_arrays[0]", _fixed([np.ones(4, dtype=np.int64)] * 2)),
        ("worker 1 is a Python list", (TypeError,), "worker_arrays[1]", _fixed([a[0], a[1].tolist()])),
        ("worker_arrays a dict", (TypeError,), "worker_arrays", _fixed({0: a[0], 1: a[1]})),
    ]
    return run_cases("all_reduce_mean", fn, ref.all_reduce_mean, cases, compare, invalid, compare_with_inputs=True)


# --- Lesson 28 -------------------------------------------------------------------------------------
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
    unchanged = with_snapshots(cases)

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        unchanged(label, inputs)
        results, log = assert_tuple(label, "the result (results, log)", got, 2)
        N = len(expected[0])
        if not isinstance(results, list) or len(results) != N:
            raise CheckFailure(f"[{label}] results must be a list of {N} arrays (one per worker)")
        for k, (g, e) in enumerate(zip(results, expected[0])):
            assert_array(label, f"results[{k}]", g, e)
        _no_shared_memory(label, results, inputs[0][0])
        _ring_log(label, log, expected[1], N)

    a = _arrays(3, (4,), 0)
    invalid = [
        ("an empty list", BAD, "worker_arrays", _fixed([])),
        ("worker 2 has shape (5,) for (4,)", BAD, "worker_arrays", _fixed([a[0], a[1], np.ones(5)])),
        ("worker 1 is float32, worker 0 float64", BAD, "worker_arrays", _fixed([a[0], a[1].astype(np.float32)])),
        ("an integer array", BAD, "worker_arrays", _fixed([np.ones(4, dtype=np.int64)] * 2)),
    ]
    return run_cases("ring_all_reduce_mean", fn, ref_ring.ring_all_reduce_mean, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 29 -------------------------------------------------------------------------------------
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
    unchanged = with_snapshots(cases)

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        unchanged(label, inputs)
        new_params, loss, sent = assert_tuple(label, "the result (new_params, loss, bytes_sent)", got, 3)
        assert_array_dict(label, "new_params", new_params, expected[0], rtol=1e-5, atol=1e-6)
        assert_scalar(label, "loss", loss, expected[1], rtol=1e-5, atol=1e-7)
        if type(loss) is not float:
            raise CheckFailure(f"[{label}] loss must be a Python float (float(...)), got {type(loss).__name__}")
        if not isinstance(sent, (list, tuple)) or [int(b) for b in sent] != expected[2]:
            raise CheckFailure(f"[{label}] bytes_sent is {sent!r}, expected {expected[2]} "
                               "(the ring's bytes per worker)")

    p, (X, Y) = _params(0), _data(6)
    shards = ref.shard_dataset_across_workers(X, Y, 2)
    invalid = [
        ("no shards", BAD, "shards", _fixed(p, [], 0.1)),
        ("lr = 0", BAD, "lr", _fixed(p, shards, 0.0)),
        ("lr = nan", BAD, "lr", _fixed(p, shards, float("nan"))),
        ("lr = inf", BAD, "lr", _fixed(p, shards, float("inf"))),
        ("shards[1] with 4 input features", BAD, "shards[1]",
         _fixed(p, [shards[0], (np.ones((3, 4), np.float32), Y[:3])], 0.1)),
        ("shards[1] with no rows", BAD, "shards[1]", _fixed(p, [shards[0], (X[:0], Y[:0]), shards[1]], 0.1)),
        ("shards[0] with 3 rows of X and 2 of Y", BAD, "shards[0]", _fixed(p, [(X[:3], Y[:2]), shards[1]], 0.1)),
    ]
    return run_cases("data_parallel_train_step", fn, ref.data_parallel_train_step, cases, compare, invalid,
                     compare_with_inputs=True)


# --- Lesson 30 -------------------------------------------------------------------------------------
def _tree(sizes: dict[str, tuple], seed: int, dtype: type = np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(dtype) for k, s in sizes.items()}


def check_bucket_gradients(fn: Callable[..., Any]) -> str:
    """Reverse order, caps hit exactly, oversized parameters alone, a smaller first bucket."""
    four = {"a": (4,), "b": (2,), "c": (2,), "d": (2, 2)}  # float32 bytes 16, 8, 8, 16
    deep = {"W1": (3, 8), "b1": (8,), "W2": (8, 8), "b2": (8,), "W3": (8, 2), "b3": (2,)}
    mlp_grads = _params(7)
    cases = [
        ("4 arrays, cap 24 bytes (buckets fill exactly)", _fixed(_tree(four, 1), 24)),
        ("4 arrays, cap 1000 (one bucket)", _fixed(_tree(four, 2), 1000)),
        ("4 arrays, cap 4 (every array larger than the cap)", _fixed(_tree(four, 3), 4)),
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
                               "order; a bucket closes before the next array would exceed its cap)")
        for i, (g, e) in enumerate(zip(got, expected)):
            if set(g) != set(ref_buckets.BUCKET_KEYS):
                raise CheckFailure(f"[{label}] bucket {i} must have exactly the keys {list(ref_buckets.BUCKET_KEYS)}")
            assert_array(label, f"bucket {i}['flat']", g["flat"], e["flat"], exact=True)
            if type(g["bytes"]) is not int or g["bytes"] != e["bytes"]:
                raise CheckFailure(f"[{label}] bucket {i}['bytes'] is {g['bytes']!r} ({type(g['bytes']).__name__}), "
                                   f"expected the Python int {e['bytes']} (flat.nbytes)")
            for key, grad in inputs[0][0].items():
                if np.shares_memory(g["flat"], grad):
                    raise CheckFailure(f"[{label}] bucket {i}['flat'] shares memory with grads[{key!r}]; every flat "
                                       "is a new array, even for a bucket of one key")

    g = _tree(four, 9)
    invalid = [
        ("bucket_cap_bytes = 0", BAD, "bucket_cap_bytes", _fixed(g, 0)),
        ("bucket_cap_bytes = -8", BAD, "bucket_cap_bytes", _fixed(g, -8)),
        ("bucket_cap_bytes = 2.5", BAD, "bucket_cap_bytes", _fixed(g, 2.5)),
        ("first_bucket_cap_bytes = 0", BAD, "first_bucket_cap_bytes", _fixed(g, 16, 0)),
        ("grads = {}", BAD, "grads", _fixed({}, 16)),
        ("bucket_cap_bytes = True (a bool)", (TypeError,), "bucket_cap_bytes", _fixed(g, True)),
        ("bucket_cap_bytes = 16.0 (not an int)", (TypeError,), "bucket_cap_bytes", _fixed(g, 16.0)),
        ("first_bucket_cap_bytes = 8.0 (not an int)", (TypeError,), "first_bucket_cap_bytes", _fixed(g, 16, 8.0)),
        ("grads of mixed dtypes (float32 and float64)", BAD, "grads",
         _fixed({**g, "d": g["d"].astype(np.float64)}, 16)),
        ("grads holding an integer array", BAD, "grads", _fixed({**g, "d": np.ones(4, dtype=np.int64)}, 16)),
    ]
    return run_cases("bucket_gradients", fn, ref_buckets.bucket_gradients, cases, compare, invalid,
                     compare_with_inputs=True)
