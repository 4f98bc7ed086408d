"""Red team, Module 1 Part 5 (data parallel training): wrong answers and correct alternatives written from
the release notebooks only."""

from __future__ import annotations

import math
import numbers

import numpy as np

from trainsys.memtrain.data_parallel import flatten_params, unflatten_params  # given in lesson 29's setup
from trainsys.memtrain.mlp import mlp_backward, mlp_forward, mse_loss_and_grad, sgd_step  # given (Part 1)


# ======================================================================================================
# Lesson 25 · shard_dataset_across_workers
# ======================================================================================================

def _shard_core(X, Y, num_workers, *, accept_bool=False, reject_np_int=False, check_float=True,
                check_rank_x=True, check_rank_y=True, asarray=False, y_msg="Y", show_counts=True,
                sizes_rule="array_split", as_lists=False, copy_when=None):
    if asarray:
        X, Y = np.asarray(X), np.asarray(Y)
    for name, a, check_rank in (("X", X, check_rank_x), ("Y", Y, check_rank_y)):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array, got {type(a).__name__}")
        if check_float and not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{name} must be floating point, got {a.dtype}")
        if check_rank and a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if Y.shape[0] != X.shape[0]:
        if show_counts:
            raise ValueError(f"{y_msg} has {Y.shape[0]} rows but X has {X.shape[0]}")
        raise ValueError(f"{y_msg} has the wrong number of rows")
    if reject_np_int:
        ok = type(num_workers) is int
    elif accept_bool:
        ok = isinstance(num_workers, (int, np.integer))
    else:
        ok = isinstance(num_workers, (int, np.integer)) and not isinstance(num_workers, (bool, np.bool_))
    if not ok:
        raise TypeError(f"num_workers must be an integer, got {num_workers!r}")
    n, N = X.shape[0], int(num_workers)
    if N < 1 or N > n:
        raise ValueError(f"num_workers must be in [1, {n}], got {N}")
    q, r = divmod(n, N)
    if sizes_rule == "array_split":
        sizes = [q + (1 if k < r else 0) for k in range(N)]
    elif sizes_rule == "last_r":
        sizes = [q + (1 if k >= N - r else 0) for k in range(N)]
    else:
        raise AssertionError(sizes_rule)
    out, start = [], 0
    for k, size in enumerate(sizes):
        x_k, y_k = X[start:start + size], Y[start:start + size]
        if copy_when is not None and copy_when(N, r):
            x_k, y_k = x_k.copy(), y_k.copy()
        out.append([x_k, y_k] if as_lists else (x_k, y_k))
        start += size
    return out


def _shard_accepts_bool(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, accept_bool=True)


def _shard_rejects_numpy_int(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, reject_np_int=True)


def _shard_no_dtype_check(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, check_float=False)


def _shard_no_rank_check_y(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, check_rank_y=False)


def _shard_accepts_lists(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, asarray=True)


def _shard_mismatch_names_x(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, y_msg="X")


def _shard_mismatch_no_counts(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, show_counts=False)


def _shard_remainder_to_last_workers(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, sizes_rule="last_r")


def _shard_pairs_as_lists(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, as_lists=True)


def _shard_copies_when_uneven(X, Y, num_workers):
    return _shard_core(X, Y, num_workers, copy_when=lambda N, r: r > 0 and N > 4)


def _shard_drops_remainder(X, Y, num_workers):
    if not isinstance(X, np.ndarray) or not isinstance(Y, np.ndarray):
        raise TypeError("X and Y must be arrays")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"Y has {Y.shape[0]} rows, X has {X.shape[0]}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)):
        raise TypeError("num_workers must be an int")
    n = X.shape[0]
    if not 1 <= num_workers <= n:
        raise ValueError("num_workers out of range")
    size = n // num_workers
    return [(X[k * size:(k + 1) * size], Y[k * size:(k + 1) * size]) for k in range(num_workers)]


def _shard_n_greater_gives_empty(X, Y, num_workers):
    """N > n is allowed and produces empty shards instead of a ValueError."""
    if not isinstance(X, np.ndarray) or not isinstance(Y, np.ndarray):
        raise TypeError("X and Y must be arrays")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"Y has {Y.shape[0]} rows, X has {X.shape[0]}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)):
        raise TypeError("num_workers must be an int")
    if num_workers < 1 or num_workers > X.shape[0] + 1:  # off by one on the upper bound
        raise ValueError("num_workers out of range")
    n, N = X.shape[0], int(num_workers)
    q, r = divmod(n, N)
    out, start = [], 0
    for k in range(N):
        size = q + (k < r)
        out.append((X[start:start + size], Y[start:start + size]))
        start += size
    return out


def _shard_alt_running_bounds(X, Y, num_workers):
    for name, a in (("X", X), ("Y", Y)):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            raise TypeError(f"{name} must be a floating NumPy array")
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got {a.ndim}-D")
    if len(Y) != len(X):
        raise ValueError(f"Y has {len(Y)} rows while X has {len(X)}")
    if isinstance(num_workers, (bool, np.bool_)) or not isinstance(num_workers, numbers.Integral):
        raise TypeError(f"num_workers must be an integer, got {type(num_workers).__name__}")
    n = len(X)
    if not 1 <= num_workers <= n:
        raise ValueError(f"num_workers={num_workers} must lie in [1, {n}]")
    N = int(num_workers)
    bounds = np.cumsum([0] + [n // N + (1 if k < n % N else 0) for k in range(N)]).tolist()
    return [(X[a:b], Y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _shard_alt_formula(X, Y, num_workers):
    if not (isinstance(X, np.ndarray) and np.issubdtype(X.dtype, np.floating)):
        raise TypeError("X must be a floating NumPy array")
    if not (isinstance(Y, np.ndarray) and np.issubdtype(Y.dtype, np.floating)):
        raise TypeError("Y must be a floating NumPy array")
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"X and Y must be 2-D (X: {X.ndim}-D, Y: {Y.ndim}-D)")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"Y must have as many rows as X: {Y.shape[0]} != {X.shape[0]}")
    if type(num_workers) is bool or not isinstance(num_workers, (int, np.integer)):
        raise TypeError("num_workers must be an int")
    n, N = X.shape[0], int(num_workers)
    if N < 1 or N > n:
        raise ValueError(f"num_workers must satisfy 1 <= num_workers <= {n}")
    q, r = n // N, n % N
    shards = []
    for k in range(N):
        start = k * q + min(k, r)
        stop = start + q + (1 if k < r else 0)
        shards.append((X[start:stop], Y[start:stop]))
    return shards


# ======================================================================================================
# Lesson 26 · compute_local_gradients
# ======================================================================================================

def _clg_core(params, shard, *, scale="n", loss_mode="sum", loss_type=float, n_type=int,
              check_widths=True, check_y_width=True, check_float=True, tuple_only=False, allow_more=False,
              scale_after=False):
    if tuple_only:
        if not isinstance(shard, tuple):
            raise TypeError("shard must be a tuple (X_k, Y_k)")
    elif not isinstance(shard, (tuple, list)):
        raise TypeError("shard must be a pair (X_k, Y_k)")
    if len(shard) != 2 and not (allow_more and len(shard) > 2):
        raise ValueError(f"shard must have 2 items, got {len(shard)}")
    X_k, Y_k = shard[0], shard[1]
    for a in (X_k, Y_k):
        if not isinstance(a, np.ndarray):
            raise TypeError("shard must hold NumPy arrays")
        if check_float and not np.issubdtype(a.dtype, np.floating):
            raise TypeError("shard arrays must be floating point")
        if a.ndim != 2:
            raise ValueError("shard arrays must be 2-D")
    if X_k.shape[0] != Y_k.shape[0]:
        raise ValueError(f"shard: X_k has {X_k.shape[0]} rows, Y_k {Y_k.shape[0]}")
    if X_k.shape[0] < 1:
        raise ValueError("shard has no rows")
    if not isinstance(params, dict) or "W1" not in params or "W2" not in params:
        raise TypeError("params must be a dict with W1 and W2")
    if check_widths and X_k.shape[1] != params["W1"].shape[0]:
        raise ValueError("shard: X_k width does not match W1")
    if check_y_width and Y_k.shape[1] != params["W2"].shape[1]:
        raise ValueError("shard: Y_k width does not match W2")
    n_k = X_k.shape[0]
    Y_hat, cache = mlp_forward(params, X_k)
    loss, dY = mse_loss_and_grad(Y_hat, Y_k)
    if scale == "n":
        factor = n_k
    elif scale == "size":
        factor = Y_k.size
    elif scale == "one":
        factor = 1
    elif scale == "f64":
        factor = None
    else:
        raise AssertionError(scale)
    if scale == "f64":
        grads = mlp_backward(params, cache, dY * np.float64(n_k))
    elif scale_after:
        grads = {k: g * g.dtype.type(factor) for k, g in mlp_backward(params, cache, dY).items()}
    else:
        grads = mlp_backward(params, cache, dY * dY.dtype.type(factor))
    loss_sum = loss * n_k if loss_mode == "sum" else loss
    return grads, loss_type(loss_sum), n_type(n_k)


def _clg_mean_gradient(params, shard):
    return _clg_core(params, shard, scale="one")


def _clg_scales_by_size(params, shard):
    return _clg_core(params, shard, scale="size")


def _clg_mean_loss(params, shard):
    return _clg_core(params, shard, loss_mode="mean")


def _clg_numpy_float_loss(params, shard):
    return _clg_core(params, shard, loss_type=np.float64)


def _clg_numpy_int_count(params, shard):
    return _clg_core(params, shard, n_type=np.int64)


def _clg_float64_scale(params, shard):
    return _clg_core(params, shard, scale="f64")


def _clg_no_width_check(params, shard):
    return _clg_core(params, shard, check_widths=False, check_y_width=False)


def _clg_no_y_width_check(params, shard):
    return _clg_core(params, shard, check_y_width=False)


def _clg_no_float_check(params, shard):
    return _clg_core(params, shard, check_float=False)


def _clg_rejects_list_pair(params, shard):
    return _clg_core(params, shard, tuple_only=True)


def _clg_accepts_triples(params, shard):
    return _clg_core(params, shard, allow_more=True)


def _clg_alt_scale_after_backward(params, shard):
    return _clg_core(params, shard, scale_after=True)


def _clg_alt_direct_sum(params, shard):
    """Forms the summed-loss output gradient 2 (Y_hat - Y) / d_out directly, and the loss sum by hand."""
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise TypeError("shard must be a pair (X_k, Y_k)")
    X_k, Y_k = shard
    if not all(isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in (X_k, Y_k)):
        raise TypeError("shard must hold two floating NumPy arrays")
    if X_k.ndim != 2 or Y_k.ndim != 2:
        raise ValueError("shard arrays must be 2-D")
    if len(X_k) != len(Y_k) or len(X_k) == 0:
        raise ValueError(f"shard rows: X_k {len(X_k)}, Y_k {len(Y_k)} (need equal and >= 1)")
    if not isinstance(params, dict) or not {"W1", "W2"} <= set(params):
        raise TypeError("params must be a dict with W1 and W2")
    if X_k.shape[1] != params["W1"].shape[0] or Y_k.shape[1] != params["W2"].shape[1]:
        raise ValueError("shard widths do not match params")
    Y_hat, cache = mlp_forward(params, X_k)
    diff = Y_hat - Y_k
    d_out = Y_k.shape[1]
    dY = diff * diff.dtype.type(2.0 / d_out)
    grads = mlp_backward(params, cache, dY)
    loss_sum = float(np.sum(diff.astype(np.float64) ** 2) / d_out)
    return grads, loss_sum, int(X_k.shape[0])


# ======================================================================================================
# Lesson 27 · all_reduce_mean
# ======================================================================================================

def _arm_validate(worker_arrays, *, allow_tuple=True, check_float=True, asarray=False, index_in_msg=True):
    if asarray and isinstance(worker_arrays, (list, tuple)):
        worker_arrays = [np.asarray(a) for a in worker_arrays]
    kinds = (list, tuple) if allow_tuple else (list,)
    if not isinstance(worker_arrays, kinds):
        raise TypeError("worker_arrays must be a list")
    if len(worker_arrays) == 0:
        raise ValueError("worker_arrays is empty")
    first = worker_arrays[0]
    for k, a in enumerate(worker_arrays):
        where = f"worker_arrays[{k}]" if index_in_msg else "worker_arrays"
        if not isinstance(a, np.ndarray) or (check_float and not np.issubdtype(a.dtype, np.floating)):
            raise TypeError(f"{where} must be a floating NumPy array")
        if a.shape != first.shape or a.dtype != first.dtype:
            raise ValueError(f"{where} has shape {a.shape} / dtype {a.dtype}, expected {first.shape} / {first.dtype}")
    return worker_arrays


def _arm_core(worker_arrays, *, order="forward", mode="sum_then_divide", allow_tuple=True,
              index_in_msg=True, asarray=False):
    arrays = _arm_validate(worker_arrays, allow_tuple=allow_tuple, index_in_msg=index_in_msg, asarray=asarray)
    N = len(arrays)
    if mode == "sum_then_divide":
        seq = arrays if order == "forward" else arrays[::-1]
        total = seq[0].copy()
        for a in seq[1:]:
            total += a
        mean = total / total.dtype.type(N)
    elif mode == "divide_first":
        mean = arrays[0] / arrays[0].dtype.type(N)
        for a in arrays[1:]:
            mean = mean + a / a.dtype.type(N)
    elif mode == "reciprocal":
        total = arrays[0].copy()
        for a in arrays[1:]:
            total += a
        mean = total * total.dtype.type(1.0 / N)
    elif mode == "np_mean":
        mean = np.mean(np.stack(arrays), axis=0).astype(arrays[0].dtype)
    else:
        raise AssertionError(mode)
    return [mean] + [mean.copy() for _ in range(N - 1)]


def _arm_returns_sum(worker_arrays):
    arrays = _arm_validate(worker_arrays)
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    return [total] + [total.copy() for _ in arrays[1:]]


def _arm_one_object(worker_arrays):
    arrays = _arm_validate(worker_arrays)
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    mean = total / total.dtype.type(len(arrays))
    return [mean] * len(arrays)


def _arm_accumulates_into_input(worker_arrays):
    arrays = _arm_validate(worker_arrays)
    total = arrays[0]
    for a in arrays[1:]:
        total += a
    mean = total / total.dtype.type(len(arrays))
    return [mean] + [mean.copy() for _ in arrays[1:]]


def _arm_single_worker_alias(worker_arrays):
    arrays = _arm_validate(worker_arrays)
    if len(arrays) == 1:
        return list(arrays)
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    mean = total / total.dtype.type(len(arrays))
    return [mean] + [mean.copy() for _ in arrays[1:]]


def _arm_divide_first(worker_arrays):
    return _arm_core(worker_arrays, mode="divide_first")


def _arm_reverse_order(worker_arrays):
    return _arm_core(worker_arrays, order="reverse")


def _arm_reciprocal(worker_arrays):
    return _arm_core(worker_arrays, mode="reciprocal")


def _arm_np_mean(worker_arrays):
    return _arm_core(worker_arrays, mode="np_mean")


def _arm_float64_divisor(worker_arrays):
    arrays = _arm_validate(worker_arrays)
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    mean = total / np.float64(len(arrays))  # promotes float16/float32 to float64
    return [mean] + [mean.copy() for _ in arrays[1:]]


def _arm_rejects_tuple(worker_arrays):
    return _arm_core(worker_arrays, allow_tuple=False)


def _arm_no_index_in_message(worker_arrays):
    return _arm_core(worker_arrays, index_in_msg=False)


def _arm_accepts_lists(worker_arrays):
    return _arm_core(worker_arrays, asarray=True)


def _arm_alt_functools(worker_arrays):
    import functools

    if not isinstance(worker_arrays, (list, tuple)):
        raise TypeError(f"worker_arrays must be a list or tuple, got {type(worker_arrays).__name__}")
    if not worker_arrays:
        raise ValueError("worker_arrays must not be empty")
    ref = worker_arrays[0]
    for k, a in enumerate(worker_arrays):
        if not (isinstance(a, np.ndarray) and a.dtype.kind == "f"):
            raise TypeError(f"worker_arrays[{k}] must be a floating-point NumPy array")
        if a.shape != ref.shape:
            raise ValueError(f"worker_arrays[{k}] has shape {a.shape}, worker_arrays[0] has {ref.shape}")
        if a.dtype != ref.dtype:
            raise ValueError(f"worker_arrays[{k}] has dtype {a.dtype}, worker_arrays[0] has {ref.dtype}")
    total = functools.reduce(np.add, worker_arrays[1:], np.array(ref, copy=True))
    N = len(worker_arrays)
    return [np.divide(total, ref.dtype.type(N)) for _ in range(N)]


# ======================================================================================================
# Lesson 28 · ring_all_reduce_mean
# ======================================================================================================

def _ring_validate(worker_arrays, *, allow_tuple=True, check_dtype_match=True):
    kinds = (list, tuple) if allow_tuple else (list,)
    if not isinstance(worker_arrays, kinds):
        raise TypeError("worker_arrays must be a list")
    if len(worker_arrays) == 0:
        raise ValueError("worker_arrays is empty")
    first = worker_arrays[0]
    for k, a in enumerate(worker_arrays):
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"worker_arrays[{k}] must be a floating NumPy array")
        if a.shape != first.shape:
            raise ValueError(f"worker_arrays[{k}] has shape {a.shape}, expected {first.shape}")
        if check_dtype_match and a.dtype != first.dtype:
            raise ValueError(f"worker_arrays[{k}] has dtype {a.dtype}, expected {first.dtype}")


def _ring_core(worker_arrays, *, allow_tuple=True, check_dtype_match=True, divide="owner", ag_index="right",
               ag_add=False, bytes_rule="exact", log_order="step", skip_empty=False, share_results=False,
               no_copy_input=False, direction=+1, step_numbering="global", copy_payload=True,
               sequential=False):
    _ring_validate(worker_arrays, allow_tuple=allow_tuple, check_dtype_match=check_dtype_match)
    N = len(worker_arrays)
    shape, dtype = worker_arrays[0].shape, worker_arrays[0].dtype
    if no_copy_input:
        bufs = [a.reshape(-1) for a in worker_arrays]
        if N == 1:
            return [bufs[0].reshape(shape)], []
    else:
        bufs = [a.reshape(-1).copy() for a in worker_arrays]
    n = bufs[0].size
    q, r = divmod(n, N)
    sizes = [q + (1 if j < r else 0) for j in range(N)]
    starts = [sum(sizes[:j]) for j in range(N)]
    bounds = [(starts[j], starts[j] + sizes[j]) for j in range(N)]
    itemsize = dtype.itemsize
    log = []
    for step in range(2 * (N - 1)):
        rs = step < N - 1
        s = step if rs else step - (N - 1)
        msgs = []
        for k in range(N):
            if rs:
                j = (k - s) % N if direction > 0 else (k + s) % N
            else:
                if ag_index == "right":
                    j = (k + 1 - s) % N if direction > 0 else (k - 1 + s) % N
                else:
                    j = (k - s) % N
            recv = (k + direction) % N
            a, b = bounds[j]
            payload = bufs[k][a:b].copy() if copy_payload else bufs[k][a:b]
            nbytes = (b - a) * itemsize if bytes_rule == "exact" else (n // N) * itemsize
            msg = {"step": step if step_numbering == "global" else s,
                   "phase": "reduce-scatter" if rs else "all-gather",
                   "sender": k, "receiver": recv, "chunk": j, "bytes": nbytes}
            msgs.append((msg, payload, (a, b)))
            if sequential:
                if rs or ag_add:
                    bufs[recv][a:b] += payload
                else:
                    bufs[recv][a:b] = payload
        if not sequential:
            for msg, payload, (a, b) in msgs:
                recv = msg["receiver"]
                if rs or ag_add:
                    bufs[recv][a:b] += payload
                else:
                    bufs[recv][a:b] = payload
        for msg, _, _ in msgs:
            if skip_empty and msg["bytes"] == 0:
                continue
            log.append(msg)
        if step == N - 2 and divide == "owner":
            for k in range(N):
                j = (k + 1) % N if direction > 0 else (k - 1) % N
                a, b = bounds[j]
                bufs[k][a:b] = bufs[k][a:b] / dtype.type(N)
    if divide == "end" and N > 1:
        bufs = [buf / dtype.type(N) for buf in bufs]
    if log_order == "sender":
        log = sorted(log, key=lambda m: (m["sender"], m["step"]))
    elif log_order == "receiver":
        log = sorted(log, key=lambda m: (m["step"], m["receiver"]))
    results = [buf.reshape(shape) for buf in bufs]
    if share_results:
        results = [results[0]] * N
    return results, log


def _ring_allgather_wrong_chunk(worker_arrays):
    return _ring_core(worker_arrays, ag_index="left")


def _ring_adds_in_allgather(worker_arrays):
    return _ring_core(worker_arrays, ag_add=True)


def _ring_floor_bytes(worker_arrays):
    return _ring_core(worker_arrays, bytes_rule="floor")


def _ring_log_grouped_by_sender(worker_arrays):
    return _ring_core(worker_arrays, log_order="sender")


def _ring_log_in_receiver_order(worker_arrays):
    return _ring_core(worker_arrays, log_order="receiver")


def _ring_skips_empty_messages(worker_arrays):
    return _ring_core(worker_arrays, skip_empty=True)


def _ring_shared_results(worker_arrays):
    return _ring_core(worker_arrays, share_results=True)


def _ring_works_on_inputs(worker_arrays):
    return _ring_core(worker_arrays, no_copy_input=True)


def _ring_turned_left(worker_arrays):
    return _ring_core(worker_arrays, direction=-1)


def _ring_step_restarts_per_phase(worker_arrays):
    return _ring_core(worker_arrays, step_numbering="phase")


def _ring_no_dtype_check(worker_arrays):
    return _ring_core(worker_arrays, check_dtype_match=False)


def _ring_rejects_tuple(worker_arrays):
    return _ring_core(worker_arrays, allow_tuple=False)


def _ring_divides_each_hop(worker_arrays):
    """Divides every reduce-scatter payload by N ("keep the numbers small") and once more at the end."""
    _ring_validate(worker_arrays)
    N = len(worker_arrays)
    shape, dtype = worker_arrays[0].shape, worker_arrays[0].dtype
    bufs = [a.reshape(-1).copy() for a in worker_arrays]
    n = bufs[0].size
    sizes = [len(c) for c in np.array_split(np.arange(n), N)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    log = []
    for step in range(2 * (N - 1)):
        rs = step < N - 1
        s = step if rs else step - (N - 1)
        msgs = []
        for k in range(N):
            j = (k - s) % N if rs else (k + 1 - s) % N
            a, b = starts[j], starts[j + 1]
            payload = bufs[k][a:b].copy()
            if rs:
                payload = payload / dtype.type(N)
            msgs.append(({"step": step, "phase": "reduce-scatter" if rs else "all-gather", "sender": k,
                          "receiver": (k + 1) % N, "chunk": j, "bytes": int((b - a) * dtype.itemsize)}, payload))
        for msg, payload in msgs:
            a, b = starts[msg["chunk"]], starts[msg["chunk"] + 1]
            if rs:
                bufs[msg["receiver"]][a:b] += payload
            else:
                bufs[msg["receiver"]][a:b] = payload
            log.append(msg)
    return [(buf / dtype.type(N)).reshape(shape) if N > 1 else buf.reshape(shape) for buf in bufs], log


def _ring_alt_divide_after_allgather(worker_arrays):
    return _ring_core(worker_arrays, divide="end")


def _ring_alt_sequential_views(worker_arrays):
    return _ring_core(worker_arrays, copy_payload=False, sequential=True)


def _ring_alt_array_split_views(worker_arrays):
    if not isinstance(worker_arrays, (list, tuple)):
        raise TypeError("worker_arrays must be a list or tuple")
    if len(worker_arrays) == 0:
        raise ValueError("worker_arrays must hold at least one array")
    a0 = worker_arrays[0]
    for k, a in enumerate(worker_arrays):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            raise TypeError(f"worker_arrays[{k}] is not a floating NumPy array")
        if a.shape != a0.shape or a.dtype != a0.dtype:
            raise ValueError(f"worker_arrays[{k}] does not match worker_arrays[0] in shape or dtype")
    N = len(worker_arrays)
    bufs = [np.array(a, copy=True).ravel() for a in worker_arrays]
    chunks = [np.array_split(buf, N) for buf in bufs]  # views into each worker's buffer
    log = []
    for step in range(2 * N - 2):
        phase = "reduce-scatter" if step <= N - 2 else "all-gather"
        s = step if phase == "reduce-scatter" else step - N + 1
        outgoing = []
        for k in range(N):
            j = (k - s) % N if phase == "reduce-scatter" else (k + 1 - s) % N
            outgoing.append((k, (k + 1) % N, j, chunks[k][j].copy()))
        for k, dst, j, data in outgoing:
            if phase == "reduce-scatter":
                np.add(chunks[dst][j], data, out=chunks[dst][j])
            else:
                chunks[dst][j][...] = data
            log.append({"step": step, "phase": phase, "sender": k, "receiver": dst, "chunk": j,
                        "bytes": int(data.nbytes)})
        if step == N - 2:
            for k in range(N):
                own = chunks[k][(k + 1) % N]
                own[...] = own / a0.dtype.type(N)
    return [buf.reshape(a0.shape) for buf in bufs], log


# ======================================================================================================
# Lesson 29 · data_parallel_train_step
# ======================================================================================================

def _local_sum(params, shard):
    """Lesson 26's contribution, re-derived here (the student's own helper): summed-loss gradient."""
    X_k, Y_k = shard
    n_k = X_k.shape[0]
    Y_hat, cache = mlp_forward(params, X_k)
    loss, dY = mse_loss_and_grad(Y_hat, Y_k)
    return mlp_backward(params, cache, dY * dY.dtype.type(n_k)), loss * n_k, n_k


def _ring_for_step(vectors):
    """Ring all-reduce of flat vectors (the student's own ring from Lesson 28)."""
    return _ring_alt_array_split_views(vectors)


def _dpts_validate(params, shards, lr, *, check_lr_finite=True, allow_tuple=True, index_in_msg=True,
                   check_params=True, allow_empty_shard=False):
    if check_params:
        if not isinstance(params, dict) or set(params) != {"W1", "b1", "W2", "b2"}:
            raise ValueError("params must be a dict with keys W1, b1, W2, b2")
    kinds = (list, tuple) if allow_tuple else (list,)
    if not isinstance(shards, kinds):
        raise TypeError("shards must be a list of (X_k, Y_k) pairs")
    if len(shards) == 0:
        raise ValueError("shards must not be empty")
    for k, shard in enumerate(shards):
        where = f"shards[{k}]" if index_in_msg else "shards"
        if not isinstance(shard, (tuple, list)) or len(shard) != 2:
            raise TypeError(f"{where} must be a pair (X_k, Y_k)")
        X_k, Y_k = shard
        if not all(isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating) and a.ndim == 2
                   for a in (X_k, Y_k)):
            raise TypeError(f"{where} must hold two 2-D floating arrays")
        if X_k.shape[0] != Y_k.shape[0]:
            raise ValueError(f"{where}: {X_k.shape[0]} input rows, {Y_k.shape[0]} target rows")
        if X_k.shape[0] < 1 and not allow_empty_shard:
            raise ValueError(f"{where} has no rows")
        if check_params and (X_k.shape[1] != params["W1"].shape[0] or Y_k.shape[1] != params["W2"].shape[1]):
            raise ValueError(f"{where} widths do not match params")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if check_lr_finite:
        if not math.isfinite(lr) or lr <= 0:
            raise ValueError(f"lr must be finite and > 0, got {lr}")
    elif lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")


def _dpts_core(params, shards, lr, *, weighting="sums", exchange=True, scale_nN=True, loss_mode="union",
               bytes_mode="log", bytes_type="list", loss_type=float, skip_empty=False, **validate):
    _dpts_validate(params, shards, lr, allow_empty_shard=skip_empty, **validate)
    if skip_empty:
        shards = [s for s in shards if s[0].shape[0] > 0]
    N = len(shards)
    local = [_local_sum(params, s) for s in shards]
    n = sum(n_k for _, _, n_k in local)
    if weighting == "sums":
        vectors = [flatten_params(S) for S, _, _ in local]
    elif weighting == "means":
        vectors = [flatten_params({k: g / g.dtype.type(n_k) for k, g in S.items()}) for S, _, n_k in local]
    else:
        raise AssertionError(weighting)
    if exchange:
        results, log = _ring_for_step(vectors)
        mean = results[0]
    else:
        mean, log = vectors[0], []
    if weighting == "sums" and scale_nN:
        mean = mean * mean.dtype.type(N / n) if exchange else mean * mean.dtype.type(1 / local[0][2])
    grads = unflatten_params(mean, params)
    new_params = sgd_step(params, grads, lr)
    if loss_mode == "union":
        loss = sum(l for _, l, _ in local) / n
    else:
        loss = sum(l / n_k for _, l, n_k in local) / N
    if bytes_mode == "log":
        sent = [sum(m["bytes"] for m in log if m["sender"] == k) for k in range(N)]
    elif bytes_mode == "even":
        P = vectors[0].size
        sent = [int(2 * (N - 1) / N * P * vectors[0].itemsize) for _ in range(N)]
    elif bytes_mode == "received":
        sent = [sum(m["bytes"] for m in log if m["receiver"] == k) for k in range(N)]
    else:
        raise AssertionError(bytes_mode)
    if bytes_type == "array":
        sent = np.array(sent)
    return new_params, loss_type(loss), sent


def _dpts_average_of_means(params, shards, lr):
    return _dpts_core(params, shards, lr, weighting="means")


def _dpts_no_exchange(params, shards, lr):
    return _dpts_core(params, shards, lr, exchange=False)


def _dpts_forgets_n_over_N(params, shards, lr):
    return _dpts_core(params, shards, lr, scale_nN=False)


def _dpts_loss_mean_of_means(params, shards, lr):
    return _dpts_core(params, shards, lr, loss_mode="means")


def _dpts_even_split_bytes(params, shards, lr):
    return _dpts_core(params, shards, lr, bytes_mode="even")


def _dpts_counts_received_bytes(params, shards, lr):
    return _dpts_core(params, shards, lr, bytes_mode="received")


def _dpts_bytes_as_array(params, shards, lr):
    return _dpts_core(params, shards, lr, bytes_type="array")


def _dpts_numpy_loss(params, shards, lr):
    return _dpts_core(params, shards, lr, loss_type=np.float64)


def _dpts_accepts_nan_lr(params, shards, lr):
    return _dpts_core(params, shards, lr, check_lr_finite=False)


def _dpts_rejects_tuple(params, shards, lr):
    return _dpts_core(params, shards, lr, allow_tuple=False)


def _dpts_no_index_in_message(params, shards, lr):
    return _dpts_core(params, shards, lr, index_in_msg=False)


def _dpts_no_params_check(params, shards, lr):
    return _dpts_core(params, shards, lr, check_params=False)


def _dpts_skips_empty_shard(params, shards, lr):
    return _dpts_core(params, shards, lr, skip_empty=True)


def _dpts_alt_manual_update(params, shards, lr):
    """Flattens by hand in W1, b1, W2, b2 order, divides by n after multiplying by N, applies θ - lr g."""
    if not isinstance(params, dict) or set(params) != {"W1", "b1", "W2", "b2"}:
        raise ValueError("params must be a dict with W1, b1, W2, b2")
    if not isinstance(shards, (list, tuple)):
        raise TypeError("shards must be a list")
    if not shards:
        raise ValueError("shards is empty")
    for k, sh in enumerate(shards):
        if not isinstance(sh, (list, tuple)) or len(sh) != 2:
            raise TypeError(f"shards[{k}] is not a pair")
        Xk, Yk = sh
        if not (isinstance(Xk, np.ndarray) and isinstance(Yk, np.ndarray)):
            raise TypeError(f"shards[{k}] must hold arrays")
        if Xk.dtype.kind != "f" or Yk.dtype.kind != "f" or Xk.ndim != 2 or Yk.ndim != 2:
            raise TypeError(f"shards[{k}] must hold 2-D floating arrays")
        if len(Xk) != len(Yk) or len(Xk) == 0:
            raise ValueError(f"shards[{k}] has mismatched or no rows")
        if Xk.shape[1] != params["W1"].shape[0] or Yk.shape[1] != params["W2"].shape[1]:
            raise ValueError(f"shards[{k}] has the wrong widths")
    if isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating, np.integer)):
        raise TypeError("lr must be a real number")
    if not (np.isfinite(lr) and lr > 0):
        raise ValueError("lr must be finite and positive")
    order = ["W1", "b1", "W2", "b2"]
    vecs, loss_sum, n = [], 0.0, 0
    for Xk, Yk in shards:
        S, l, n_k = _local_sum(params, (Xk, Yk))
        vecs.append(np.concatenate([S[key].ravel() for key in order]))
        loss_sum += l
        n += n_k
    N = len(shards)
    results, log = _ring_for_step(vecs)
    g = results[0] * results[0].dtype.type(N) / results[0].dtype.type(n)
    new, offset = {}, 0
    for key in order:
        size = params[key].size
        new[key] = params[key] - params[key].dtype.type(lr) * g[offset:offset + size].reshape(params[key].shape)
        offset += size
    new = {key: new[key] for key in params}
    sent = [0] * N
    for m in log:
        sent[m["sender"]] += m["bytes"]
    return new, float(loss_sum / n), sent


# ======================================================================================================
# Lesson 30 · bucket_gradients
# ======================================================================================================

def _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes=None, *, reverse=True, use_first=True,
                 close_before=False, close_only_past=False, accept_bool=False, accept_integral_float=False, check_dtype=True,
                 view_single=False, bytes_type=int, keys_type=list, first_cap_all_open=False,
                 validate_first=True):
    if not isinstance(grads, dict) or len(grads) == 0:
        raise ValueError("grads must be a non-empty dict")
    if check_dtype:
        dtypes = {v.dtype for v in grads.values() if isinstance(v, np.ndarray)}
        if any(not isinstance(v, np.ndarray) for v in grads.values()):
            raise TypeError("grads must hold NumPy arrays")
        if len(dtypes) != 1 or not np.issubdtype(next(iter(dtypes)), np.floating):
            raise ValueError("grads must share one floating dtype")

    def check_cap(value, name):
        if accept_integral_float and isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) and not accept_bool:
            raise TypeError(f"{name} must be an int, not a bool")
        if not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
        return int(value)

    C = check_cap(bucket_cap_bytes, "bucket_cap_bytes")
    if first_bucket_cap_bytes is None:
        C0 = C
    elif validate_first:
        C0 = check_cap(first_bucket_cap_bytes, "first_bucket_cap_bytes")
    else:
        C0 = int(first_bucket_cap_bytes) if first_bucket_cap_bytes else C
    if not use_first:
        C0 = C
    keys = list(grads)[::-1] if reverse else list(grads)
    groups, current, filled = [], [], 0
    for key in keys:
        size = grads[key].nbytes
        cap = C0 if (not groups or first_cap_all_open) else C
        if close_before and current and filled + size > cap:  # the rule that keeps buckets under the cap
            groups.append(current)
            current, filled = [], 0
        current.append(key)
        filled += size
        if not close_before and (filled > cap if close_only_past else filled >= cap):
            groups.append(current)
            current, filled = [], 0
    if current:
        groups.append(current)
    buckets = []
    for keys_b in groups:
        if view_single and len(keys_b) == 1 and grads[keys_b[0]].flags.c_contiguous:
            flat = grads[keys_b[0]].reshape(-1)
        else:
            flat = np.concatenate([grads[k].reshape(-1) for k in keys_b])
        buckets.append({"keys": keys_type(keys_b), "flat": flat, "bytes": bytes_type(flat.nbytes)})
    return buckets


def _bucket_forward_order(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, reverse=False)


def _bucket_ignores_first_cap(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, use_first=False)


def _bucket_closes_before_exceeding(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, close_before=True)


def _bucket_closes_only_past_cap(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, close_only_past=True)


def _bucket_accepts_bool_cap(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, accept_bool=True)


def _bucket_accepts_integral_float(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, accept_integral_float=True)


def _bucket_mixed_dtypes(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, check_dtype=False)


def _bucket_single_key_view(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, view_single=True)


def _bucket_numpy_bytes(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, bytes_type=np.int64)


def _bucket_first_cap_for_every_bucket(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, first_cap_all_open=True)


def _bucket_first_cap_unvalidated(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    return _bucket_core(grads, bucket_cap_bytes, first_bucket_cap_bytes, validate_first=False)


def _bucket_alt_two_pass(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    """First decides the groups on sizes only, then fills one preallocated buffer per bucket."""
    if not isinstance(grads, dict):
        raise TypeError("grads must be a dict")
    if not grads:
        raise ValueError("grads must not be empty")
    arrays = list(grads.values())
    if not all(isinstance(a, np.ndarray) for a in arrays):
        raise TypeError("grads must map keys to NumPy arrays")
    dtype = arrays[0].dtype
    if dtype.kind != "f" or any(a.dtype != dtype for a in arrays):
        raise ValueError("grads must all share one floating dtype")
    for name, value in (("bucket_cap_bytes", bucket_cap_bytes), ("first_bucket_cap_bytes", first_bucket_cap_bytes)):
        if value is None and name == "first_bucket_cap_bytes":
            continue
        if type(value) is bool or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer")
        if value <= 0:
            raise ValueError(f"{name} must be positive")
    order = list(reversed(list(grads)))
    sizes = [grads[k].nbytes for k in order]
    caps = [bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes]
    starts, total = [0], 0
    for i, size in enumerate(sizes):
        cap = caps[0] if len(starts) == 1 else bucket_cap_bytes
        total += size
        if total >= cap and i + 1 < len(order):  # reached the limit: the next tensor starts a bucket
            starts.append(i + 1)
            total = 0
    starts.append(len(order))
    buckets = []
    for a, b in zip(starts[:-1], starts[1:]):
        keys = order[a:b]
        flat = np.empty(sum(grads[k].size for k in keys), dtype=dtype)
        pos = 0
        for k in keys:
            flat[pos:pos + grads[k].size] = grads[k].ravel()
            pos += grads[k].size
        buckets.append({"keys": keys, "flat": flat, "bytes": int(flat.nbytes)})
    return buckets


# ======================================================================================================

MUTANTS = {
    "shard_dataset_across_workers": [
        ("drops the remainder (contract: 'nothing is padded, nothing is dropped')", _shard_drops_remainder),
        ("gives the extra rows to the LAST r workers (contract: 'workers 0..r-1 get q+1')",
         _shard_remainder_to_last_workers),
        ("accepts num_workers=True (contract: 'bool ... is a TypeError')", _shard_accepts_bool),
        ("rejects a NumPy integer num_workers (contract: 'a NumPy integer is fine')", _shard_rejects_numpy_int),
        ("accepts integer X/Y (contract: 'X and Y are 2-D floating-point NumPy arrays')", _shard_no_dtype_check),
        ("accepts a 1-D Y (contract: 'ValueError for the wrong rank, naming Y')", _shard_no_rank_check_y),
        ("accepts Python lists via np.asarray (contract: 'TypeError for anything else')", _shard_accepts_lists),
        ("row-count mismatch message names X, not Y (contract: 'a ValueError that names Y')",
         _shard_mismatch_names_x),
        ("row-count mismatch message omits the counts (contract: 'shows both counts')", _shard_mismatch_no_counts),
        ("copies the shards when N > 4 and N does not divide n (contract: every shard is a view)",
         _shard_copies_when_uneven),
        ("accepts N = n + 1 and hands out an empty shard (contract: 'N > n is a ValueError')",
         _shard_n_greater_gives_empty),
    ],
    "compute_local_gradients": [
        ("returns the shard's mean gradient (contract: 'gradient of the shard's SUMMED loss')", _clg_mean_gradient),
        ("scales by Y_k.size = n_k d_out (contract: per-example loss is a mean over outputs)", _clg_scales_by_size),
        ("returns the shard's mean loss (contract: 'loss_sum = n_k L_Bk')", _clg_mean_loss),
        ("loss_sum is np.float64 (contract: 'Python float')", _clg_numpy_float_loss),
        ("n_k is np.int64 (contract: 'n_k ... int')", _clg_numpy_int_count),
        ("scales dY by np.float64(n_k): float32 promoted (contract: 'in its own dtype')", _clg_float64_scale),
        ("no width checks: mlp_forward's error does not name shard (contract: widths ... naming shard)",
         _clg_no_width_check),
        ("no Y_k width check (contract: 'Y_k against W2's columns ... naming shard')", _clg_no_y_width_check),
        ("accepts integer shards (contract: 'a pair of 2-D floating arrays')", _clg_no_float_check),
        ("refuses a [X_k, Y_k] list (contract: 'a tuple or list of two items')", _clg_rejects_list_pair),
        ("accepts a shard of three items (contract: 'a tuple or list of two items')", _clg_accepts_triples),
    ],
    "all_reduce_mean": [
        ("returns the sum (contract: 'the mean of all of them')", _arm_returns_sum),
        ("[mean] * N, one object for everyone (contract: 'No result may share memory with another')",
         _arm_one_object),
        ("accumulates into worker_arrays[0] (contract: 'Mutation: none')", _arm_accumulates_into_input),
        ("returns the input itself for one worker (contract: 'new arrays, one per worker')",
         _arm_single_worker_alias),
        ("divides by np.float64(N): float16/float32 promoted (contract: dtype 'as the inputs')",
         _arm_float64_divisor),
        ("refuses a tuple (contract: 'worker_arrays is a list or tuple')", _arm_rejects_tuple),
        ("error messages omit the culprit's index (contract: 'with the index of the culprit')",
         _arm_no_index_in_message),
        ("accepts Python lists as entries (contract: 'an entry that is not a floating-point NumPy array: TypeError')",
         _arm_accepts_lists),
    ],
    "ring_all_reduce_mean": [
        ("all-gather reuses the reduce-scatter index (k - s) (contract: all-gather sends chunk (k+1-s))",
         _ring_allgather_wrong_chunk),
        ("adds during the all-gather (contract: 'the receiver replaces its copy')", _ring_adds_in_allgather),
        ("divides every hop and again at the end (contract: 'divides ... by N — once')", _ring_divides_each_hop),
        ("logs floor(n/N) elements per message (contract: bytes = the chunk's element count × itemsize)",
         _ring_floor_bytes),
        ("log grouped by sender (contract: 'ordered by step, then sender')", _ring_log_grouped_by_sender),
        ("log ordered by receiver within a step (contract: 'ordered by step, then sender')",
         _ring_log_in_receiver_order),
        ("omits 0-byte messages (contract: 'logs 0-byte messages')", _ring_skips_empty_messages),
        ("returns N references to one buffer (contract: results are 'new memory', one per worker)",
         _ring_shared_results),
        ("works on reshape views of the inputs (contract: 'Mutation: none ... its own flat copy')",
         _ring_works_on_inputs),
        ("ring turned the other way (contract: 'receiver (k+1) mod N')", _ring_turned_left),
        ("step restarts at 0 in the all-gather (contract: 'step 0 … 2N-3, counted across both phases')",
         _ring_step_restarts_per_phase),
        ("accepts mixed dtypes (contract: 'arrays of different ... dtypes: ValueError or TypeError')",
         _ring_no_dtype_check),
        ("refuses a tuple (contract: 'a non-empty list or tuple')", _ring_rejects_tuple),
    ],
    "data_parallel_train_step": [
        ("averages the shards' mean gradients (contract: 'sum of the shards' sums divided by the total count')",
         _dpts_average_of_means),
        ("no exchange: steps with worker 0's gradient (contract: 'exchange gradients once through the ring')",
         _dpts_no_exchange),
        ("forgets the factor N/n (contract: 'multiply by N/n')", _dpts_forgets_n_over_N),
        ("loss = mean of the shards' mean losses (contract: 'the union batch's mean loss')",
         _dpts_loss_mean_of_means),
        ("bytes from the even-split formula 2(N-1)/N·S (contract: bytes of worker k's messages in the log)",
         _dpts_even_split_bytes),
        ("counts the bytes each worker RECEIVED (contract: 'bytes worker k put on the ring')",
         _dpts_counts_received_bytes),
        ("bytes_sent is a NumPy array (contract: 'list of N ints')", _dpts_bytes_as_array),
        ("loss is np.float64 (contract: 'Python float')", _dpts_numpy_loss),
        ("refuses a tuple of shards (contract: 'shards a non-empty list or tuple')", _dpts_rejects_tuple),
        ("shard errors name 'shards' without the index (contract: 'every message naming shards[k]')",
         _dpts_no_index_in_message),
        ("no params validation (contract: 'malformed params (naming params)')", _dpts_no_params_check),
        ("silently drops an empty shard (contract: a shard with no rows is refused, naming shards[k])",
         _dpts_skips_empty_shard),
    ],
    "bucket_gradients": [
        ("fills in forward order (contract: 'Walk the keys in reverse order')", _bucket_forward_order),
        ("ignores first_bucket_cap_bytes (contract: 'The open bucket uses C0 until it is closed')",
         _bucket_ignores_first_cap),
        ("closes before a gradient would exceed the cap (contract: add the gradient, then close at >= cap)",
         _bucket_closes_before_exceeding),
        ("closes only when a bucket PASSES the cap (contract: a bucket that reaches its cap closes)",
         _bucket_closes_only_past_cap),
        ("accepts bucket_cap_bytes=True (contract: 'an int (not a bool)')", _bucket_accepts_bool_cap),
        ("accepts an integral float cap such as 16.0 (contract: 'caps that are not integers (TypeError)')",
         _bucket_accepts_integral_float),
        ("accepts mixed dtypes and promotes (contract: 'of mixed dtypes — errors naming grads')",
         _bucket_mixed_dtypes),
        ("a one-key bucket's flat is a view of the gradient (contract: 'flat is a new 1-D array')",
         _bucket_single_key_view),
        ("bytes is np.int64 (contract: '\"bytes\": int')", _bucket_numpy_bytes),
        ("keeps using the first cap after the first bucket closed (contract: 'every later one C')",
         _bucket_first_cap_for_every_bucket),
        ("first_bucket_cap_bytes not validated: 0 treated as None (contract: 'int >= 1 or None')",
         _bucket_first_cap_unvalidated),
    ],
}

ALTERNATIVES = {
    "shard_dataset_across_workers": [
        ("cumulative sum of the sizes as bounds", _shard_alt_running_bounds),
        ("start_k = k q + min(k, r) from the derivation", _shard_alt_formula),
        ("[X_k, Y_k] two-item lists instead of tuples (the contract says pairs)", _shard_pairs_as_lists),
    ],
    "compute_local_gradients": [
        ("backward on the mean's gradient, then scale each gradient by n_k in its dtype",
         _clg_alt_scale_after_backward),
        ("summed-loss output gradient 2 (Y_hat - Y)/d_out formed directly", _clg_alt_direct_sum),
    ],
    "all_reduce_mean": [("functools.reduce(np.add) from a copy, np.divide per worker", _arm_alt_functools),
                        ("divides each array by N before summing (DDP's order)", _arm_divide_first),
                        ("sums in reverse worker order", _arm_reverse_order),
                        ("multiplies the sum by the reciprocal 1/N", _arm_reciprocal),
                        ("np.mean of the stack (float16 accumulated in float32), cast back", _arm_np_mean)],
    "ring_all_reduce_mean": [
        ("divides the whole buffer after the all-gather (same bits: each element divided once)",
         _ring_alt_divide_after_allgather),
        ("applies messages one by one, payloads as views (chunks never collide within a step)",
         _ring_alt_sequential_views),
        ("np.array_split views of each worker's buffer", _ring_alt_array_split_views),
    ],
    "data_parallel_train_step": [
        ("hand-flattened vector, own ring, manual θ - lr g", _dpts_alt_manual_update),
        # was a mutant: its own check lets nan / inf through, but sgd_step (given) refuses them naming lr,
        # before anything is returned — the contract's behaviour
        ("checks only lr > 0; sgd_step refuses lr = nan / inf naming lr", _dpts_accepts_nan_lr),
    ],
    "bucket_gradients": [("sizes-only grouping pass, then one preallocated buffer per bucket", _bucket_alt_two_pass)],
}


# --------------------------------------------------------------------------------------------------------------
# Second correct alternatives (issue 27), written blind from the release notebooks.
# --------------------------------------------------------------------------------------------------------------
def _bucket_alt_close_as_you_go(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    if not isinstance(grads, dict) or not grads:
        raise ValueError(f"grads must be a non-empty dict, got {grads!r}")
    if not all(isinstance(g, np.ndarray) and np.issubdtype(g.dtype, np.floating) for g in grads.values()):
        raise TypeError("grads must hold floating-point NumPy arrays")
    if len({g.dtype for g in grads.values()}) != 1:
        raise ValueError("grads must share one dtype")
    caps = []
    for name, cap in (("bucket_cap_bytes", bucket_cap_bytes), ("first_bucket_cap_bytes", first_bucket_cap_bytes)):
        if cap is None and name == "first_bucket_cap_bytes":
            caps.append(caps[0])
            continue
        if isinstance(cap, (bool, np.bool_)) or not isinstance(cap, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {cap!r}")
        if cap <= 0:
            raise ValueError(f"{name} must be >= 1, got {cap}")
        caps.append(int(cap))
    later, limit = caps
    buckets, keys, parts = [], [], []
    for key in reversed(list(grads)):
        keys.append(key)
        parts.append(grads[key].ravel())
        if sum(p.nbytes for p in parts) >= limit:
            flat = np.concatenate(parts)
            buckets.append({"keys": keys, "flat": flat, "bytes": int(flat.nbytes)})
            keys, parts, limit = [], [], later
    if keys:
        flat = np.concatenate(parts)
        buckets.append({"keys": keys, "flat": flat, "bytes": int(flat.nbytes)})
    return buckets


ALTERNATIVES.setdefault("bucket_gradients", []).append(
    ("one pass that concatenates each bucket as it closes; caps validated in a loop", _bucket_alt_close_as_you_go))
