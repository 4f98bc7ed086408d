"""Red team, Part 2 (gradient accumulation): wrong answers and correct alternatives written from the release
notebooks only."""

from __future__ import annotations

import copy
import math

import numpy as np

# Earlier lessons' pieces, imported by the lessons' setup cells (given to the student).
from trainsys.memtrain.accumulation import (
    accumulate_gradients,
    scale_accumulated_gradients,
    split_into_micro_batches,
)
from trainsys.memtrain.mlp import mlp_backward, mlp_forward, mse_loss_and_grad, sgd_step


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_float_array(x) -> bool:
    return isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating)


# --------------------------------------------------------------------------------------------------------------
# Lesson 11 · split_into_micro_batches
# --------------------------------------------------------------------------------------------------------------
def _split_check_xy(X, Y, *, check_dtype=True, check_rank=True):
    for name, a in (("X", X), ("Y", Y)):
        if not isinstance(a, np.ndarray) or (check_dtype and not np.issubdtype(a.dtype, np.floating)):
            raise TypeError(f"{name} must be a floating-point numpy array")
        if check_rank and a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"Y has {Y.shape[0]} rows but X has {X.shape[0]}")


def _split_check_m(M, n):
    if not _is_int(M):
        raise TypeError(f"num_micro_batches must be an int, got {M!r}")
    if not 1 <= M <= n:
        raise ValueError(f"num_micro_batches must be in [1, {n}], got {M}")


def _split_bounds(n, M):
    q, r = divmod(n, M)
    bounds, s = [], 0
    for i in range(M):
        size = q + (1 if i < r else 0)
        bounds.append((s, s + size))
        s += size
    return bounds


def _split_accepts_bool(X, Y, num_micro_batches):
    _split_check_xy(X, Y)
    M = num_micro_batches
    if not isinstance(M, (int, np.integer)):  # True is an int
        raise TypeError(f"num_micro_batches must be an int, got {M!r}")
    if not 1 <= M <= X.shape[0]:
        raise ValueError(f"num_micro_batches must be in [1, {X.shape[0]}], got {M}")
    return [(X[a:b], Y[a:b]) for a, b in _split_bounds(X.shape[0], int(M))]


def _split_rejects_numpy_int(X, Y, num_micro_batches):
    _split_check_xy(X, Y)
    M = num_micro_batches
    if type(M) is not int:
        raise TypeError(f"num_micro_batches must be an int, got {type(M).__name__}")
    if not 1 <= M <= X.shape[0]:
        raise ValueError(f"num_micro_batches must be in [1, {X.shape[0]}], got {M}")
    return [(X[a:b], Y[a:b]) for a, b in _split_bounds(X.shape[0], M)]


def _split_checks_m_before_y(X, Y, num_micro_batches):
    for name, a in (("X", X), ("Y", Y)):
        if not _is_float_array(a):
            raise TypeError(f"{name} must be a floating-point numpy array")
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    _split_check_m(num_micro_batches, X.shape[0])  # before the row check (contract: Y rows first)
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"Y has {Y.shape[0]} rows but X has {X.shape[0]}")
    return [(X[a:b], Y[a:b]) for a, b in _split_bounds(X.shape[0], num_micro_batches)]


def _split_accepts_int_arrays(X, Y, num_micro_batches):
    _split_check_xy(X, Y, check_dtype=False)
    _split_check_m(num_micro_batches, X.shape[0])
    return [(X[a:b], Y[a:b]) for a, b in _split_bounds(X.shape[0], num_micro_batches)]


def _split_accepts_1d(X, Y, num_micro_batches):
    _split_check_xy(X, Y, check_rank=False)
    _split_check_m(num_micro_batches, X.shape[0])
    return [(X[a:b], Y[a:b]) for a, b in _split_bounds(X.shape[0], num_micro_batches)]


def _split_lists_not_tuples(X, Y, num_micro_batches):
    _split_check_xy(X, Y)
    _split_check_m(num_micro_batches, X.shape[0])
    return [[X[a:b], Y[a:b]] for a, b in _split_bounds(X.shape[0], num_micro_batches)]


def _split_remainder_last(X, Y, num_micro_batches):
    _split_check_xy(X, Y)
    _split_check_m(num_micro_batches, X.shape[0])
    n, M = X.shape[0], num_micro_batches
    size = n // M
    parts = []
    for i in range(M):
        a = i * size
        b = n if i == M - 1 else a + size
        parts.append((X[a:b], Y[a:b]))
    return parts


def _split_alt_array_split(X, Y, num_micro_batches):
    _split_check_xy(X, Y)
    _split_check_m(num_micro_batches, X.shape[0])
    return list(zip(np.array_split(X, num_micro_batches), np.array_split(Y, num_micro_batches)))


def _split_alt_cumulative(X, Y, num_micro_batches):
    _split_check_xy(X, Y)
    _split_check_m(num_micro_batches, X.shape[0])
    n, M = X.shape[0], int(num_micro_batches)
    sizes = [n // M + (1 if i < n % M else 0) for i in range(M)]
    edges = [0]
    for size in sizes:
        edges.append(edges[-1] + size)
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        out.append((X[a:b, :], Y[a:b, :]))
    return out


# --------------------------------------------------------------------------------------------------------------
# Lesson 12 · accumulate_gradients
# --------------------------------------------------------------------------------------------------------------
def _acc_check_grads(grads, *, check_dtype=True):
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict, got {type(grads).__name__}")
    for k, v in grads.items():
        if not isinstance(v, np.ndarray) or (check_dtype and not np.issubdtype(v.dtype, np.floating)):
            raise TypeError(f"grads[{k!r}] must be a floating-point array")


def _acc_check_pair(acc, grads, *, check_acc_dtype=True):
    if not isinstance(acc, dict):
        raise TypeError(f"acc must be a dict or None, got {type(acc).__name__}")
    if set(acc) != set(grads):
        raise ValueError(f"grads has keys {sorted(grads)} but acc has {sorted(acc)}")
    for k in grads:
        if check_acc_dtype and not _is_float_array(acc[k]):
            raise TypeError(f"acc[{k!r}] must be a floating-point array")
        if acc[k].shape != grads[k].shape:
            raise ValueError(f"{k}: acc has shape {acc[k].shape}, grads has {grads[k].shape}")


def _acc_lazy_validation(acc, grads):
    _acc_check_grads(grads)
    if acc is None:
        return {k: v.copy() for k, v in grads.items()}
    if set(acc) != set(grads):
        raise ValueError(f"grads has keys {sorted(grads)} but acc has {sorted(acc)}")
    for k in grads:  # shape checked key by key while adding: a late mismatch leaves acc half-updated
        if acc[k].shape != grads[k].shape:
            raise ValueError(f"{k}: acc has shape {acc[k].shape}, grads has {grads[k].shape}")
        acc[k] += grads[k]
    return acc


def _acc_upcasts_half(acc, grads):
    _acc_check_grads(grads)
    if acc is None:  # "accumulate in at least float32"
        return {k: v.astype(np.promote_types(v.dtype, np.float32)) for k, v in grads.items()}
    _acc_check_pair(acc, grads)
    for k in grads:
        acc[k] += grads[k]
    return acc


def _acc_ignores_extra_keys(acc, grads):
    _acc_check_grads(grads)
    if acc is None:
        return {k: v.copy() for k, v in grads.items()}
    missing = [k for k in acc if k not in grads]
    if missing:
        raise ValueError(f"grads is missing {missing}")
    for k in acc:
        if acc[k].shape != grads[k].shape:
            raise ValueError(f"{k}: acc has shape {acc[k].shape}, grads has {grads[k].shape}")
    for k in acc:
        acc[k] += grads[k]
    return acc


def _acc_accepts_int_grads(acc, grads):
    _acc_check_grads(grads, check_dtype=False)
    if acc is None:
        return {k: v.copy() for k, v in grads.items()}
    _acc_check_pair(acc, grads, check_acc_dtype=False)
    for k in grads:
        acc[k] += grads[k]
    return acc


def _acc_accepts_broadcast(acc, grads):
    _acc_check_grads(grads)
    if acc is None:
        return {k: v.copy() for k, v in grads.items()}
    if not isinstance(acc, dict) or set(acc) != set(grads):
        raise ValueError(f"grads has keys {sorted(grads)} but acc has {sorted(acc)}")
    for k in grads:
        try:
            ok = np.broadcast_shapes(acc[k].shape, grads[k].shape) == acc[k].shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{k}: grads shape {grads[k].shape} does not fit acc shape {acc[k].shape}")
    for k in grads:
        acc[k] += grads[k]
    return acc


def _acc_accepts_int_acc(acc, grads):
    _acc_check_grads(grads)
    if acc is None:
        return {k: v.copy() for k, v in grads.items()}
    _acc_check_pair(acc, grads, check_acc_dtype=False)
    for k in grads:
        acc[k] += grads[k]
    return acc


def _acc_alt_deepcopy_np_add(acc, grads):
    if not isinstance(grads, dict) or not all(_is_float_array(v) for v in grads.values()):
        raise TypeError("grads must be a dict of floating-point arrays")
    if acc is None:
        return copy.deepcopy(grads)
    _acc_check_pair(acc, grads)
    for k, g in grads.items():
        np.add(acc[k], g, out=acc[k], casting="same_kind")
    return acc


# --------------------------------------------------------------------------------------------------------------
# Lesson 13 · scale_accumulated_gradients
# --------------------------------------------------------------------------------------------------------------
def _scale_check_acc(acc, *, check_dtype=True):
    if not isinstance(acc, dict):
        raise TypeError(f"acc must be a dict, got {type(acc).__name__}")
    for k, v in acc.items():
        if not isinstance(v, np.ndarray) or (check_dtype and not np.issubdtype(v.dtype, np.floating)):
            raise TypeError(f"acc[{k!r}] must be a floating-point array")


def _scale_check_scale(scale):
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a real number, got {scale!r}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")


def _scale_accepts_bool(acc, scale):
    _scale_check_acc(acc)
    if not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a real number, got {scale!r}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    for k in acc:
        acc[k] *= acc[k].dtype.type(scale)
    return acc


def _scale_float64_multiply(acc, scale):
    _scale_check_acc(acc)
    _scale_check_scale(scale)
    for k in acc:
        acc[k] *= np.float64(scale)  # float64 product, cast back: not "scale converted to the dtype first"
    return acc


def _scale_accepts_strings(acc, scale):
    _scale_check_acc(acc)
    scale = float(scale)  # "0.5" works too
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    for k in acc:
        acc[k] *= acc[k].dtype.type(scale)
    return acc


def _scale_no_dtype_check(acc, scale):
    _scale_check_acc(acc, check_dtype=False)
    _scale_check_scale(scale)
    for k in acc:
        acc[k] *= acc[k].dtype.type(scale)  # an int64 buffer gets int64(0.1) == 0
    return acc


def _scale_weights_only(acc, scale):
    _scale_check_acc(acc)
    _scale_check_scale(scale)
    for k in acc:
        if k.startswith("W"):
            acc[k] *= acc[k].dtype.type(scale)
    return acc


def _scale_alt_np_multiply(acc, scale):
    _scale_check_scale(scale)
    _scale_check_acc(acc)
    for value in acc.values():
        np.multiply(value, np.asarray(scale, dtype=value.dtype), out=value)
    return acc


# --------------------------------------------------------------------------------------------------------------
# Lesson 14 · grad_accumulation_step
# --------------------------------------------------------------------------------------------------------------
def _step_check(params, lr):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k in ("W1", "b1", "W2", "b2"):
        if k not in params:
            raise ValueError(f"params is missing {k!r}")
    if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, (int, float, np.integer, np.floating)):
        raise TypeError(f"lr must be a real number, got {lr!r}")
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")


def _step_keeps_previous_cache(params, X, Y, num_micro_batches, lr):
    _step_check(params, lr)
    parts = split_into_micro_batches(X, Y, num_micro_batches)
    n = X.shape[0]
    acc, loss_sum = None, 0.0
    for X_i, Y_i in parts:  # no del: cache_i of the previous micro-batch is alive during the next forward
        Y_hat_i, cache_i = mlp_forward(params, X_i)
        loss_i, dY_i = mse_loss_and_grad(Y_hat_i, Y_i)
        dY_i = dY_i * dY_i.dtype.type(len(X_i))
        grads_i = mlp_backward(params, cache_i, dY_i)
        acc = accumulate_gradients(acc, grads_i)
        loss_sum += len(X_i) * loss_i
    acc = scale_accumulated_gradients(acc, 1.0 / n)
    return sgd_step(params, acc, lr), loss_sum / n


def _step_numpy_loss(params, X, Y, num_micro_batches, lr):
    _step_check(params, lr)
    n = X.shape[0]
    acc, losses, sizes = None, [], []
    for X_i, Y_i in split_into_micro_batches(X, Y, num_micro_batches):
        Y_hat_i, cache_i = mlp_forward(params, X_i)
        loss_i, dY_i = mse_loss_and_grad(Y_hat_i, Y_i)
        del Y_hat_i
        acc = accumulate_gradients(acc, mlp_backward(params, cache_i, dY_i * dY_i.dtype.type(len(X_i))))
        del cache_i, dY_i
        losses.append(loss_i)
        sizes.append(len(X_i))
    acc = scale_accumulated_gradients(acc, 1.0 / n)
    return sgd_step(params, acc, lr), np.dot(sizes, losses) / n  # np.float64, not a Python float


def _step_lr_nan_inf(params, X, Y, num_micro_batches, lr):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    if lr <= 0:  # nan <= 0 and inf <= 0 are False
        raise ValueError(f"lr must be > 0, got {lr!r}")
    n = X.shape[0]
    acc, loss_sum = None, 0.0
    for X_i, Y_i in split_into_micro_batches(X, Y, num_micro_batches):
        Y_hat_i, cache_i = mlp_forward(params, X_i)
        loss_i, dY_i = mse_loss_and_grad(Y_hat_i, Y_i)
        del Y_hat_i
        acc = accumulate_gradients(acc, mlp_backward(params, cache_i, dY_i * dY_i.dtype.type(len(X_i))))
        del cache_i, dY_i
        loss_sum += len(X_i) * loss_i
    acc = scale_accumulated_gradients(acc, 1.0 / n)
    return sgd_step(params, acc, lr), loss_sum / n


def _step_lr_bool(params, X, Y, num_micro_batches, lr):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    if not isinstance(lr, (int, float, np.integer, np.floating)):  # True is an int
        raise TypeError(f"lr must be a real number, got {lr!r}")
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    n = X.shape[0]
    acc, loss_sum = None, 0.0
    for X_i, Y_i in split_into_micro_batches(X, Y, num_micro_batches):
        Y_hat_i, cache_i = mlp_forward(params, X_i)
        loss_i, dY_i = mse_loss_and_grad(Y_hat_i, Y_i)
        del Y_hat_i
        acc = accumulate_gradients(acc, mlp_backward(params, cache_i, dY_i * dY_i.dtype.type(len(X_i))))
        del cache_i, dY_i
        loss_sum += len(X_i) * loss_i
    acc = scale_accumulated_gradients(acc, 1.0 / n)
    return sgd_step(params, acc, float(lr)), loss_sum / n


def _step_rejects_int_lr(params, X, Y, num_micro_batches, lr):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    if not isinstance(lr, float):
        raise TypeError(f"lr must be a float, got {type(lr).__name__}")
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")
    n = X.shape[0]
    acc, loss_sum = None, 0.0
    for X_i, Y_i in split_into_micro_batches(X, Y, num_micro_batches):
        Y_hat_i, cache_i = mlp_forward(params, X_i)
        loss_i, dY_i = mse_loss_and_grad(Y_hat_i, Y_i)
        del Y_hat_i
        acc = accumulate_gradients(acc, mlp_backward(params, cache_i, dY_i * dY_i.dtype.type(len(X_i))))
        del cache_i, dY_i
        loss_sum += len(X_i) * loss_i
    acc = scale_accumulated_gradients(acc, 1.0 / n)
    return sgd_step(params, acc, lr), loss_sum / n


def _step_keeps_all_grad_trees(params, X, Y, num_micro_batches, lr):
    _step_check(params, lr)
    n = X.shape[0]
    trees, loss_sum = [], 0.0
    for X_i, Y_i in split_into_micro_batches(X, Y, num_micro_batches):
        Y_hat_i, cache_i = mlp_forward(params, X_i)
        loss_i, dY_i = mse_loss_and_grad(Y_hat_i, Y_i)
        del Y_hat_i
        trees.append(mlp_backward(params, cache_i, dY_i * dY_i.dtype.type(len(X_i))))  # M trees alive
        del cache_i, dY_i
        loss_sum += len(X_i) * loss_i
    acc = None
    for g in trees:
        acc = accumulate_gradients(acc, g)
    acc = scale_accumulated_gradients(acc, 1.0 / n)
    return sgd_step(params, acc, lr), loss_sum / n


def _step_alt_weighted_means(params, X, Y, num_micro_batches, lr):
    _step_check(params, lr)
    parts = split_into_micro_batches(X, Y, num_micro_batches)
    n = sum(len(x) for x, _ in parts)
    acc = None
    weighted_loss = 0.0
    for X_i, Y_i in parts:
        n_i = X_i.shape[0]
        Y_hat_i, cache_i = mlp_forward(params, X_i)
        loss_i, dY_i = mse_loss_and_grad(Y_hat_i, Y_i)
        del Y_hat_i
        g_i = mlp_backward(params, cache_i, dY_i)  # gradient of the micro-batch mean ...
        del cache_i, dY_i
        g_i = scale_accumulated_gradients(g_i, n_i)  # ... times n_i = gradient of its summed loss
        acc = accumulate_gradients(acc, g_i)
        del g_i
        weighted_loss += (n_i / n) * loss_i
    grads = scale_accumulated_gradients(acc, 1 / n)
    return sgd_step(params, grads, lr), float(weighted_loss)


MUTANTS = {
    "split_into_micro_batches": [
        ("accepts num_micro_batches=True (contract: bool is a TypeError)", _split_accepts_bool),
        ("rejects np.int64 counts (contract: a NumPy integer is fine)", _split_rejects_numpy_int),
        ("checks num_micro_batches before the Y row count (contract: validate in this order)",
         _split_checks_m_before_y),
        ("accepts integer X/Y (contract: 2-D floating-point arrays)", _split_accepts_int_arrays),
        ("accepts 1-D X/Y (contract: 2-D arrays)", _split_accepts_1d),
        ("whole remainder in the last micro-batch (contract: the first n mod M get one extra)",
         _split_remainder_last),
    ],
    "accumulate_gradients": [
        ("validates shapes while adding: a late mismatch leaves acc half-updated (contract: check every key first)",
         _acc_lazy_validation),
        ("acc=None upcasts float16 gradients to a float32 buffer (contract: buffer keeps the first grads' dtype)",
         _acc_upcasts_half),
        ("extra keys in grads silently ignored (contract: keys that differ -> ValueError naming grads)",
         _acc_ignores_extra_keys),
        ("accepts integer gradient arrays (contract: TypeError naming grads)", _acc_accepts_int_grads),
        ("accepts a broadcastable grads shape (contract: the same shape per key)", _acc_accepts_broadcast),
        ("acc's own arrays not checked: an integer acc truncates the sum (contract: acc is floating point)",
         _acc_accepts_int_acc),
    ],
    "scale_accumulated_gradients": [
        ("accepts scale=True (contract: not a bool)", _scale_accepts_bool),
        ("accepts a string scale via float() (contract: TypeError for a non-real)", _scale_accepts_strings),
        ("no dtype check on acc: an int buffer is silently zeroed (contract: TypeError naming acc)",
         _scale_no_dtype_check),
        ("scales only the W* keys (contract: weights and biases)", _scale_weights_only),
    ],
    "grad_accumulation_step": [
        ("no del: the previous micro-batch's cache is alive during the next forward (contract: one cache alive)",
         _step_keeps_previous_cache),
        ("loss returned as np.float64 (contract: a Python float)", _step_numpy_loss),
        ("accepts lr=True (contract: a real number; bools are refused elsewhere in the course)", _step_lr_bool),
        ("rejects an int lr such as 1 (contract: lr is a real number > 0)", _step_rejects_int_lr),
        ("keeps all M gradient trees and sums them at the end (contract: one accumulated gradient tree)",
         _step_keeps_all_grad_trees),
    ],
}

ALTERNATIVES = {
    "split_into_micro_batches": [
        ("np.array_split on X and Y (views)", _split_alt_array_split),
        ("explicit edges from the size list, 2-D slices", _split_alt_cumulative),
        ("[X_i, Y_i] two-item lists instead of tuples (the contract says pairs)", _split_lists_not_tuples),
    ],
    "accumulate_gradients": [("copy.deepcopy on the first call, np.add(out=) afterwards", _acc_alt_deepcopy_np_add)],
    "scale_accumulated_gradients": [
        ("multiplies by np.float64(scale) in place (the product rounded once into the array's dtype)",
         _scale_float64_multiply),
        ("np.multiply(out=) with the scale as a 0-d array of the buffer's dtype", _scale_alt_np_multiply),
    ],
    "grad_accumulation_step": [
        ("mean-loss gradients scaled by n_i before accumulating; weighted loss", _step_alt_weighted_means),
        # Moved from MUTANTS: nan and inf are not accepted after all — sgd_step refuses them with a
        # ValueError naming lr, which is what the contract asks for.
        ("lr checked only with lr <= 0 up front; nan and inf refused by sgd_step (ValueError naming lr)",
         _step_lr_nan_inf),
    ],
}


# --------------------------------------------------------------------------------------------------------------
# Second correct alternatives (issue 27), written blind from the release notebooks.
# --------------------------------------------------------------------------------------------------------------
def _acc_alt_float64_then_cast(acc, grads):
    _acc_check_grads(grads)
    if acc is None:
        return {k: np.array(v, copy=True) for k, v in grads.items()}
    _acc_check_pair(acc, grads)  # every key and shape before the first addition
    for k, g in grads.items():
        acc[k][...] = acc[k].astype(np.float64) + g  # float64 sum, cast once into the same buffer
    return acc


ALTERNATIVES.setdefault("accumulate_gradients", []).append(
    ("the sum formed in float64 and written back into the buffer (one cast)", _acc_alt_float64_then_cast))
