"""Witnesses for Module 1, Part 5 (data parallelism): one wrong answer per broken clause and case."""

from __future__ import annotations

import numpy as np

from tests.answers.clauses import existing
from trainsys.memtrain import buckets as ref_buckets
from trainsys.memtrain import data_parallel as ref
from trainsys.memtrain import ring_allreduce as ref_ring
from trainsys.memtrain.mlp import mlp_backward, mlp_forward, mse_loss_and_grad, sgd_step


# --- Lesson 25 -------------------------------------------------------------------------------------
def _shard_round_robin(X, Y, num_workers):
    """Deals the rows out like DistributedSampler (worker k gets rows k, k + N, ...): views of the right
    sizes, but not contiguous blocks."""
    ref.shard_dataset_across_workers(X, Y, num_workers)  # validation
    N = int(num_workers)
    return [(X[k::N], Y[k::N]) for k in range(N)]


def _shard_shuffled(X, Y, num_workers):
    """Shuffles the rows (a fresh permutation) before cutting the blocks."""
    shards = ref.shard_dataset_across_workers(X, Y, num_workers)  # validation and sizes
    order = np.random.default_rng().permutation(len(X))
    X_s, Y_s = X[order], Y[order]
    out, start = [], 0
    for x_k, _ in shards:
        out.append((X_s[start:start + len(x_k)], Y_s[start:start + len(x_k)]))
        start += len(x_k)
    return out


def _shard_zero_workers_empty(X, Y, num_workers):
    """Lets num_workers = 0 through: no worker, no shard."""
    if num_workers == 0 and not isinstance(num_workers, bool):
        return []
    return ref.shard_dataset_across_workers(X, Y, num_workers)


def _shard_float_count_value_error(X, Y, num_workers):
    """Refuses 2.0 with a ValueError (a wrong value) instead of the contract's TypeError."""
    if isinstance(num_workers, float):
        raise ValueError(f"num_workers must be a whole number, got {num_workers}")
    return ref.shard_dataset_across_workers(X, Y, num_workers)


# --- Lesson 26 -------------------------------------------------------------------------------------
def _local_core(params, shard, *, pair=True, rows=True, empty=True, validate_params=True):
    """The reference's computation with some of the shard checks left out."""
    if pair and (not isinstance(shard, (tuple, list)) or len(shard) != 2):
        raise TypeError(f"shard must be a pair (X_k, Y_k), got {type(shard).__name__}")
    X_k, Y_k = shard
    for a in (X_k, Y_k):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.ndim != 2:
            raise TypeError("shard must hold two 2-D floating arrays")
    if rows and len(X_k) != len(Y_k):
        raise ValueError(f"shard: X_k has {len(X_k)} rows, Y_k {len(Y_k)}")
    if empty and len(X_k) == 0:
        raise ValueError("shard has no rows")
    if X_k.shape[1] != params["W1"].shape[0] or Y_k.shape[1] != params["W2"].shape[1]:
        raise ValueError("shard widths do not match params")
    if validate_params:
        Y_hat, cache = mlp_forward(params, X_k)
    else:  # the forward pass by hand: a missing key is a KeyError
        Z1 = X_k @ params["W1"] + params["b1"]
        A1 = np.maximum(Z1, Z1.dtype.type(0))
        Y_hat, cache = A1 @ params["W2"] + params["b2"], {"X": X_k, "Z1": Z1, "A1": A1}
    loss, dY = mse_loss_and_grad(Y_hat, Y_k)
    n_k = X_k.shape[0]
    dY *= dY.dtype.type(n_k)
    return mlp_backward(params, cache, dY), loss * n_k, n_k


def _local_unpacks_without_checking(params, shard):
    """``X_k, Y_k = shard`` without checking that shard is a pair: Python's unpacking error names nothing."""
    return _local_core(params, shard, pair=False)


def _local_no_row_check(params, shard):
    """No row-count check: the loss's shape error names Y_hat and Y, not shard."""
    return _local_core(params, shard, rows=False)


def _local_no_empty_check(params, shard):
    """No check for an empty shard: the mean over no examples divides by zero."""
    return _local_core(params, shard, empty=False)


def _local_forward_by_hand(params, shard):
    """The forward pass written out by hand, so a malformed params is never refused naming params."""
    return _local_core(params, shard, validate_params=False)


def _local_residual_in_targets(params, shard):
    """Saves an allocation by writing the residual Y_hat − Y_k into the caller's Y_k."""
    ref.compute_local_gradients(params, shard)  # validation
    X_k, Y_k = shard
    Y_hat, cache = mlp_forward(params, X_k)
    np.subtract(Y_hat, Y_k, out=Y_k)
    d_out = Y_k.shape[1]
    loss_sum = float(np.sum(np.square(Y_k, dtype=np.float64)) / d_out)
    return mlp_backward(params, cache, Y_k * Y_k.dtype.type(2.0 / d_out)), loss_sum, int(X_k.shape[0])


def _local_per_example_gradients(params, shard):
    """Forms every example's weight gradient (outer products, (n_k, d_in, d_h) and (n_k, d_h, d_out)) and sums
    them: the right numbers, with n_k parameter trees alive."""
    _, loss_sum, n_k = ref.compute_local_gradients(params, shard)  # validation and the loss
    X_k, Y_k = shard
    Y_hat, cache = mlp_forward(params, X_k)
    _, dY = mse_loss_and_grad(Y_hat, Y_k)
    dY *= dY.dtype.type(n_k)
    dZ1 = (dY @ params["W2"].T) * (cache["Z1"] > 0)
    dW2_each = cache["A1"][:, :, None] * dY[:, None, :]
    dW1_each = X_k[:, :, None] * dZ1[:, None, :]
    grads = {"W1": dW1_each.sum(axis=0), "b1": dZ1.sum(axis=0), "W2": dW2_each.sum(axis=0), "b2": dY.sum(axis=0)}
    return grads, loss_sum, n_k


# --- Lesson 27 -------------------------------------------------------------------------------------
def _mean_in_order(arrays):
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    total /= total.dtype.type(len(arrays))
    return [total] + [total.copy() for _ in arrays[1:]]


def _all_reduce_empty_list(worker_arrays):
    """An empty list of workers gives an empty list of results."""
    if isinstance(worker_arrays, list) and not worker_arrays:
        return []
    return ref.all_reduce_mean(worker_arrays)


def _means_in_own_order(arrays: list) -> list:
    """Worker k's ((a_k + a_{k+1}) + ...) / N: each a correct mean, their bits differing between workers."""
    N, results = len(arrays), []
    for k in range(N):
        total = arrays[k].copy()
        for j in range(1, N):
            total += arrays[(k + j) % N]
        results.append(total / total.dtype.type(N))
    return results


def _all_reduce_own_order(worker_arrays):
    """Worker k computes ((a_k + a_{k+1}) + ...) / N: a correct mean to rounding, but the workers' copies
    differ in the last bits (the contract: bit-identical on every worker)."""
    ref.all_reduce_mean(worker_arrays)  # validation
    return _means_in_own_order(list(worker_arrays))


def _all_reduce_no_dtype_check(worker_arrays):
    """Checks the shapes but not the dtypes: float32 and float64 workers are silently promoted."""
    if not isinstance(worker_arrays, (list, tuple)):
        raise TypeError("worker_arrays must be a list")
    if not worker_arrays:
        raise ValueError("worker_arrays must not be empty")
    for k, a in enumerate(worker_arrays):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            raise TypeError(f"worker_arrays[{k}] must be a floating NumPy array")
        if a.shape != worker_arrays[0].shape:
            raise ValueError(f"worker_arrays[{k}] has shape {a.shape}, worker_arrays[0] {worker_arrays[0].shape}")
    total = sum(a.astype(np.result_type(*worker_arrays)) for a in worker_arrays)
    return [total / len(worker_arrays) for _ in worker_arrays]


def _all_reduce_integer_arrays(worker_arrays):
    """Accepts integer arrays (their mean comes back as float64)."""
    if isinstance(worker_arrays, list) and worker_arrays and all(
            isinstance(a, np.ndarray) and a.dtype.kind == "i" for a in worker_arrays):
        return _mean_in_order([a.astype(np.float64) for a in worker_arrays])
    return ref.all_reduce_mean(worker_arrays)


def _all_reduce_indexes_any_container(worker_arrays):
    """Reads worker_arrays[0 … len − 1] without checking it is a list: a dict keyed 0, 1, … goes through."""
    return ref.all_reduce_mean([worker_arrays[k] for k in range(len(worker_arrays))])


# --- Lesson 28 -------------------------------------------------------------------------------------
def _ring_empty_list(worker_arrays):
    """No worker: no result and no message."""
    if isinstance(worker_arrays, list) and not worker_arrays:
        return [], []
    return ref_ring.ring_all_reduce_mean(worker_arrays)


def _ring_no_shape_check(worker_arrays):
    """Checks types and dtypes but cuts every buffer by worker 0's chunk bounds, whatever its size."""
    if not isinstance(worker_arrays, (list, tuple)) or not worker_arrays:
        raise ValueError("worker_arrays must be a non-empty list")
    for k, a in enumerate(worker_arrays):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f" or a.dtype != worker_arrays[0].dtype:
            raise TypeError(f"worker_arrays[{k}] must be a floating array of worker_arrays[0]'s dtype")
    shape = worker_arrays[0].shape
    flats = [a.reshape(-1)[:worker_arrays[0].size] for a in worker_arrays]
    results, log = ref_ring.ring_all_reduce_mean(flats)
    if any(a.shape != shape for a in worker_arrays):
        results = [r.reshape(a.shape) for r, a in zip(results, worker_arrays)]  # numpy's reshape error
    return [r.reshape(shape) for r in results], log


def _ring_integer_arrays(worker_arrays):
    """Accepts integer arrays (converted to float64 first)."""
    if isinstance(worker_arrays, list) and worker_arrays and all(
            isinstance(a, np.ndarray) and a.dtype.kind == "i" for a in worker_arrays):
        return ref_ring.ring_all_reduce_mean([a.astype(np.float64) for a in worker_arrays])
    return ref_ring.ring_all_reduce_mean(worker_arrays)


def _ring_indexes_any_container(worker_arrays):
    """Reads worker_arrays[0 … len − 1] without checking it is a list: a dict keyed 0, 1, … goes through."""
    return ref_ring.ring_all_reduce_mean([worker_arrays[k] for k in range(len(worker_arrays))])


def _ring_each_worker_sums_itself(worker_arrays):
    """The right log, but every worker adds the N contributions itself, starting with its own: the copies
    equal the mean to rounding, not one another bit for bit."""
    _, log = ref_ring.ring_all_reduce_mean(worker_arrays)  # validation and the schedule
    return _means_in_own_order(worker_arrays), log


# --- Lesson 29 -------------------------------------------------------------------------------------
def _dp_reference_with(params, shards, lr, *, counts=None, extra_bytes=False, scale32=False):
    ref.data_parallel_train_step(params, shards, lr)  # validation
    N = len(shards)
    local = [ref.compute_local_gradients(params, s) for s in shards]
    n = sum(n_k for _, _, n_k in local) if counts is None else counts(local)
    flats = [ref.flatten_params(g) for g, _, _ in local]
    means, log = ref_ring.ring_all_reduce_mean(flats)
    factor = np.float32(N / n) if scale32 else means[0].dtype.type(N / n)
    grads = ref.unflatten_params(means[0] * factor, params)
    loss = sum(l for _, l, _ in local) / sum(n_k for _, _, n_k in local)
    sent = ref_ring.bytes_sent_per_worker(log, N)
    if extra_bytes:  # the counts and the loss sums all-reduced on the ring too
        _, log2 = ref_ring.ring_all_reduce_mean([np.array([l, n_k], dtype=flats[0].dtype) for _, l, n_k in local])
        sent = [a + b for a, b in zip(sent, ref_ring.bytes_sent_per_worker(log2, N))]
    return sgd_step(params, grads, lr), loss, sent


def _dp_exchanges_counts(params, shards, lr):
    """All-reduces the counts n_k and the loss sums on the ring as well, and counts those bytes."""
    return _dp_reference_with(params, shards, lr, extra_bytes=True)


def _dp_assumes_equal_counts(params, shards, lr):
    """Takes n = N · n_0, as if every worker had worker 0's number of examples."""
    return _dp_reference_with(params, shards, lr, counts=lambda local: len(local) * local[0][2])


def _dp_scale_in_float32(params, shards, lr):
    """Multiplies by N/n rounded to float32 (np.float32(N / n)), also for float64 parameters."""
    return _dp_reference_with(params, shards, lr, scale32=True)


def _dp_updates_params_in_place(params, shards, lr):
    """The right numbers, but the caller's parameter arrays are updated and returned."""
    new, loss, sent = ref.data_parallel_train_step(params, shards, lr)
    for key in params:
        params[key][...] = new[key]
    return params, loss, sent


def _dp_accepts_no_shards(params, shards, lr):
    """No shard, no gradient: returns copies of the parameters and a NaN loss."""
    if isinstance(shards, list) and not shards:
        return {k: v.copy() for k, v in params.items()}, float("nan"), []
    return ref.data_parallel_train_step(params, shards, lr)


def _dp_accepts_zero_lr(params, shards, lr):
    """Refuses a negative lr but lets 0 through (a step that changes nothing)."""
    if lr == 0:
        new, loss, sent = ref.data_parallel_train_step(params, shards, 1.0)
        return {k: v.copy() for k, v in params.items()}, loss, sent
    return ref.data_parallel_train_step(params, shards, lr)


def _dp_only_checks_sign_of_lr(params, shards, lr):
    """Checks ``lr <= 0`` only and takes the step by hand: nan and inf go through."""
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    new, loss, sent = ref.data_parallel_train_step(params, shards, 1.0)
    grads = {k: params[k] - new[k] for k in params}  # the gradient (lr = 1)
    return {k: (params[k] - params[k].dtype.type(lr) * grads[k]) for k in params}, loss, sent


def _dp_accepts_any_container(params, shards, lr):
    """Reads shards[0 … len − 1] without checking it is a list: a dict keyed 0, 1, … goes through."""
    return ref.data_parallel_train_step(params, [shards[k] for k in range(len(shards))], lr)


def _dp_unpacks_shards(params, shards, lr):
    """``for X_k, Y_k in shards`` without checking each is a pair: a lone array's error names nothing."""
    if isinstance(shards, (list, tuple)):
        for X_k, Y_k in shards:
            pass
    return ref.data_parallel_train_step(params, shards, lr)


def _dp_params_never_validated(params, shards, lr):
    """Checks the shards and lr, then runs the workers' forward passes by hand: a malformed params is a
    KeyError, not an error naming params."""
    if not isinstance(shards, (list, tuple)) or not shards:
        raise ValueError("shards must be a non-empty list")
    for k, shard in enumerate(shards):
        if not isinstance(shard, (tuple, list)) or len(shard) != 2:
            raise TypeError(f"shards[{k}] must be a pair (X_k, Y_k)")
        X_k, Y_k = shard
        if not all(isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.ndim == 2 for a in shard):
            raise TypeError(f"shards[{k}] must hold two 2-D floating arrays")
        if len(X_k) != len(Y_k) or len(X_k) == 0:
            raise ValueError(f"shards[{k}] must have as many rows (>= 1) in X_k as in Y_k")
        if X_k.shape[1] != params["W1"].shape[0] or Y_k.shape[1] != params["W2"].shape[1]:
            raise ValueError(f"shards[{k}] widths do not match the weights")
    if not (np.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be finite and > 0, got {lr}")
    local = [_local_core(params, s, validate_params=False) for s in shards]
    N, n = len(shards), sum(n_k for _, _, n_k in local)
    means, log = ref_ring.ring_all_reduce_mean([ref.flatten_params(g) for g, _, _ in local])
    grads = ref.unflatten_params(means[0] * means[0].dtype.type(N / n), params)
    new = {k: (params[k] - params[k].dtype.type(lr) * grads[k]) for k in params}
    return new, sum(l for _, l, _ in local) / n, ref_ring.bytes_sent_per_worker(log, N)


# --- Lesson 30 -------------------------------------------------------------------------------------
def _buckets_with(grads, bucket_cap_bytes, first_bucket_cap_bytes=None, *, flat=None, mutate=False):
    buckets = ref_buckets.bucket_gradients(grads, bucket_cap_bytes, first_bucket_cap_bytes)
    if flat is not None:
        for b in buckets:
            b["flat"] = flat([grads[k] for k in b["keys"]])
            b["bytes"] = int(b["flat"].nbytes)
    if mutate:
        for key in grads:
            grads[key] = grads[key].reshape(-1)
    return buckets


def _buckets_float64_buffer(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    """Preallocates each flat with np.zeros (float64 by default) and copies the gradients in."""
    def fill(arrays):
        out = np.zeros(sum(a.size for a in arrays))
        np.concatenate([a.reshape(-1) for a in arrays], out=out, casting="unsafe")
        return out
    return _buckets_with(grads, bucket_cap_bytes, first_bucket_cap_bytes, flat=fill)


def _buckets_fortran_ravel(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    """Ravels every gradient in column-major (Fortran) order."""
    return _buckets_with(grads, bucket_cap_bytes, first_bucket_cap_bytes,
                         flat=lambda arrays: np.concatenate([a.ravel(order="F") for a in arrays]))


def _buckets_ravel_into_grads(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    """Replaces every grads[key] by its raveled view (to reuse it when unbucketing)."""
    return _buckets_with(grads, bucket_cap_bytes, first_bucket_cap_bytes, mutate=True)


def _buckets_empty_grads(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    """No gradient, no bucket: an empty dict gives an empty list."""
    if isinstance(grads, dict) and not grads:
        ref_buckets.assign_buckets([], bucket_cap_bytes, first_bucket_cap_bytes)  # the caps are still checked
        return []
    return ref_buckets.bucket_gradients(grads, bucket_cap_bytes, first_bucket_cap_bytes)


def _buckets_fractional_cap_value_error(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    """Refuses a cap of 2.5 with a ValueError (a wrong value) instead of the contract's TypeError."""
    if isinstance(bucket_cap_bytes, float) and not bucket_cap_bytes.is_integer():
        raise ValueError(f"bucket_cap_bytes must be a whole number of bytes, got {bucket_cap_bytes}")
    return ref_buckets.bucket_gradients(grads, bucket_cap_bytes, first_bucket_cap_bytes)


def _buckets_any_mapping_or_list(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    """Accepts a list of arrays as well, keyed by position."""
    if isinstance(grads, list):
        grads = {str(i): g for i, g in enumerate(grads)}
    return ref_buckets.bucket_gradients(grads, bucket_cap_bytes, first_bucket_cap_bytes)


def _buckets_oversized_alone(grads, bucket_cap_bytes, first_bucket_cap_bytes=None):
    """Gives a gradient that reaches the cap on its own a bucket of its own, closing the open one first."""
    sizes = [grads[k].nbytes for k in list(grads)[::-1]] if isinstance(grads, dict) else []
    limits = iter([first_bucket_cap_bytes or bucket_cap_bytes] + [bucket_cap_bytes] * len(sizes))
    buckets = ref_buckets.bucket_gradients(grads, bucket_cap_bytes, first_bucket_cap_bytes)
    split, limit = [], next(limits)
    for b in buckets:
        keys = b["keys"]
        if len(keys) > 1 and grads[keys[-1]].nbytes >= limit:
            split += [keys[:-1], keys[-1:]]
        else:
            split.append(keys)
        limit = next(limits)
    return [{"keys": k, "flat": np.concatenate([grads[x].reshape(-1) for x in k]),
             "bytes": int(sum(grads[x].nbytes for x in k))} for k in split]


WITNESSES = {
    "shard_dataset_across_workers": {
        "remainder policy": [existing("shard_dataset_across_workers", "gives the whole remainder to the last worker"),
                             existing("shard_dataset_across_workers", "gives the extra rows to the LAST r workers")],
        "mutation": [existing("shard_dataset_across_workers", "copies each shard instead of slicing"),
                     existing("shard_dataset_across_workers", "copies the shards when N > 4")],
        "shuffling is not this function's job": [("rows dealt out round-robin, X[k::N]", _shard_round_robin),
                                                 ("rows shuffled before the blocks are cut", _shard_shuffled)],
        "failure modes": [
            ("num_workers = 0 gives an empty list", _shard_zero_workers_empty),
            existing("shard_dataset_across_workers", "accepts N = n + 1"),
            ("num_workers = 2.0 refused with a ValueError", _shard_float_count_value_error),
            existing("shard_dataset_across_workers", "accepts num_workers=True"),
            existing("shard_dataset_across_workers", "row-count mismatch message names X"),
        ],
        "metric that proves it correct": [existing("shard_dataset_across_workers", "drops the remainder (n mod N"),
                                          existing("shard_dataset_across_workers", "drops the remainder (contract")],
    },
    "compute_local_gradients": {
        "mutation": [("the residual written into the caller's Y_k", _local_residual_in_targets)],
        "memory": [("every example's gradient formed, then summed", _local_per_example_gradients)],
        "failure modes": [
            ("shard unpacked without checking it is a pair", _local_unpacks_without_checking),
            existing("compute_local_gradients", "accepts a shard of three items"),
            ("no row-count check", _local_no_row_check),
            existing("compute_local_gradients", "no width checks"),
            existing("compute_local_gradients", "no Y_k width check"),
            existing("compute_local_gradients", "accepts integer shards"),
            ("no check for an empty shard", _local_no_empty_check),
            ("the forward pass by hand, params never validated", _local_forward_by_hand),
        ],
        "metric that proves it correct": [
            existing("compute_local_gradients", "returns the shard's mean gradient, not"),
            existing("compute_local_gradients", "sums over examples and outputs"),
            existing("compute_local_gradients", "returns the shard's mean loss instead"),
        ],
    },
    "all_reduce_mean": {
        "new arrays, one per worker": [existing("all_reduce_mean", "returns the same array object"),
                                       existing("all_reduce_mean", "[mean] * N"),
                                       existing("all_reduce_mean", "returns the input itself for one worker")],
        "mutation": [existing("all_reduce_mean", "accumulates into worker 0's input"),
                     existing("all_reduce_mean", "accumulates into worker_arrays[0]")],
        "arithmetic": [("each worker sums starting from its own array: bits differ between workers",
                        _all_reduce_own_order),
                       existing("all_reduce_mean", "divides by np.float64(N)"),
                       existing("all_reduce_mean", "returns the sum, not the mean")],
        "failure modes": [
            ("an empty list gives an empty list", _all_reduce_empty_list),
            existing("all_reduce_mean", "error messages omit the culprit's index"),
            ("no dtype check: mixed dtypes promoted", _all_reduce_no_dtype_check),
            ("integer arrays accepted", _all_reduce_integer_arrays),
            existing("all_reduce_mean", "accepts Python lists as entries"),
            ("any container indexed 0 … N−1 accepted", _all_reduce_indexes_any_container),
        ],
        "metric that proves it correct": [existing("all_reduce_mean", "returns the sum, not the mean"),
                                          existing("all_reduce_mean", "returns the sum (contract")],
    },
    "ring_all_reduce_mean": {
        "chunks": [existing("ring_all_reduce_mean", "logs n // N elements per message"),
                   existing("ring_all_reduce_mean", "logs floor(n/N) elements per message"),
                   existing("ring_all_reduce_mean", "omits 0-byte messages")],
        "which chunk": [existing("ring_all_reduce_mean", "all-gather chunk index off by one"),
                        existing("ring_all_reduce_mean", "all-gather adds the received chunk"),
                        existing("ring_all_reduce_mean", "sends to worker k − 1"),
                        existing("ring_all_reduce_mean", "all-gather reuses the reduce-scatter index"),
                        existing("ring_all_reduce_mean", "adds during the all-gather"),
                        existing("ring_all_reduce_mean", "ring turned the other way")],
        "the division": [existing("ring_all_reduce_mean", "averages twice"),
                         existing("ring_all_reduce_mean", "divides every hop and again at the end")],
        "mutation": [existing("ring_all_reduce_mean", "works on reshape views of the inputs")],
        "failure modes": [
            ("an empty list gives no result and no message", _ring_empty_list),
            ("no shape check: buffers cut by worker 0's bounds", _ring_no_shape_check),
            existing("ring_all_reduce_mean", "accepts mixed dtypes"),
            ("integer arrays accepted", _ring_integer_arrays),
            ("any container indexed 0 … N−1 accepted", _ring_indexes_any_container),
        ],
        "metric that proves it correct": [
            ("every worker sums the contributions itself: copies equal only to rounding",
             _ring_each_worker_sums_itself),
            existing("ring_all_reduce_mean", "step restarts at 0 in the all-gather"),
        ],
    },
    "data_parallel_train_step": {
        "the pipeline per worker": [existing("data_parallel_train_step", "skips the gradient exchange"),
                                    existing("data_parallel_train_step", "forgets the N/n factor"),
                                    existing("data_parallel_train_step", "no exchange: steps with worker 0's"),
                                    existing("data_parallel_train_step", "forgets the factor N/n")],
        "why $n/n$ is local": [("n = N · n_0, as if every shard had worker 0's size", _dp_assumes_equal_counts),
                               ("the counts and loss sums exchanged on the ring too, their bytes counted",
                                _dp_exchanges_counts)],
        "mutation": [("params updated in place and returned", _dp_updates_params_in_place)],
        "failure modes": [
            ("no shards accepted", _dp_accepts_no_shards),
            ("any container indexed 0 … N−1 accepted as shards", _dp_accepts_any_container),
            ("shards unpacked without checking each is a pair", _dp_unpacks_shards),
            ("lr = 0 accepted", _dp_accepts_zero_lr),
            ("only the sign of lr checked, the step by hand", _dp_only_checks_sign_of_lr),
            existing("data_parallel_train_step", "shard errors name 'shards' without the index"),
            existing("data_parallel_train_step", "silently drops an empty shard"),
            existing("data_parallel_train_step", "no params validation"),
            ("params never validated, the forward passes by hand", _dp_params_never_validated),
        ],
        "metric that proves it correct": [
            existing("data_parallel_train_step", "averages the shards' mean gradients equally"),
            existing("data_parallel_train_step", "averages the shards' mean gradients (contract"),
            existing("data_parallel_train_step", "loss = mean of the shards' mean losses"),
            existing("data_parallel_train_step", "bytes from the even-split formula"),
            existing("data_parallel_train_step", "counts the bytes each worker RECEIVED"),
            ("N/n rounded to float32", _dp_scale_in_float32),
        ],
    },
    "bucket_gradients": {
        "the filling rule": [existing("bucket_gradients", "ignores first_bucket_cap_bytes (contract"),
                             existing("bucket_gradients", "closes a bucket before a gradient would exceed"),
                             existing("bucket_gradients", "closes a bucket only once it passes the cap"),
                             existing("bucket_gradients", "keeps using the first cap"),
                             ("a gradient that reaches the cap alone gets its own bucket", _buckets_oversized_alone)],
        "a bucket": [existing("bucket_gradients", "bytes is np.int64"),
                     existing("bucket_gradients", "a one-key bucket's flat is a view"),
                     ("flat preallocated with np.zeros: float64", _buckets_float64_buffer),
                     ("gradients raveled in Fortran order", _buckets_fortran_ravel)],
        "mutation": [existing("bucket_gradients", "a one-key bucket's flat is a view"),
                     ("grads[key] replaced by its raveled view", _buckets_ravel_into_grads)],
        "failure modes": [
            ("a cap of 2.5 refused with a ValueError", _buckets_fractional_cap_value_error),
            existing("bucket_gradients", "first_bucket_cap_bytes not validated"),
            ("empty grads give no bucket", _buckets_empty_grads),
            ("a list of arrays accepted", _buckets_any_mapping_or_list),
            existing("bucket_gradients", "accepts bucket_cap_bytes=True"),
            existing("bucket_gradients", "accepts an integral float cap"),
            existing("bucket_gradients", "accepts mixed dtypes"),
        ],
        "metric that proves it correct": [existing("bucket_gradients", "fills buckets in forward parameter order"),
                                          existing("bucket_gradients", "fills in forward order"),
                                          existing("bucket_gradients", "closes only when a bucket PASSES the cap"),
                                          existing("bucket_gradients", "closes before a gradient would exceed the cap (contract")],
    },
}
