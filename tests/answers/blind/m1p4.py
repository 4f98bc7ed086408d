"""Red team, Part 4 (mixed precision training): wrong answers and correct alternatives written from the release
notebooks only."""

from __future__ import annotations

import math

import numpy as np

# Earlier lessons' pieces, imported by the lessons' setup cells (given to the student).
from trainsys.memtrain.mixed_precision import cast_to_half_precision, has_non_finite_gradients, unscale_gradients
from trainsys.memtrain.mlp import mlp_backward, mlp_forward, mse_loss_and_grad


def _is_real(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _is_float_array(x) -> bool:
    return isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating)


# --------------------------------------------------------------------------------------------------------------
# Lesson 19 · cast_to_half_precision
# --------------------------------------------------------------------------------------------------------------
def _cast_check_dtype(dtype, *, non_float_error=TypeError):
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float16, got {dtype!r}") from exc
    if not np.issubdtype(dt, np.floating):
        raise non_float_error(f"dtype must be a floating dtype (float16), got {dt}")
    if dt != np.float16:
        raise ValueError(f"dtype must be float16, got {dt}")


def _cast_check_tree(tree, *, check_values=True, name_tree=True):
    if not isinstance(tree, dict):
        raise TypeError(f"tree must be a dict, got {type(tree).__name__}")
    if check_values:
        for k, v in tree.items():
            if not _is_float_array(v):
                raise TypeError(f"tree[{k!r}] must be a floating-point array" if name_tree
                                else f"entry {k!r} must be a floating-point array")


def _cast_core(tree):
    half, overflow = {}, {}
    with np.errstate(over="ignore"):
        for k, v in tree.items():
            h = v.astype(np.float16)
            half[k] = h
            overflow[k] = int(np.count_nonzero(np.isfinite(v) & np.isinf(h)))
    return half, overflow


def _cast_accepts_non_float(tree, dtype=np.float16):
    _cast_check_dtype(dtype)
    _cast_check_tree(tree, check_values=False)
    return _cast_core(tree)


def _cast_valueerror_for_int_dtype(tree, dtype=np.float16):
    _cast_check_dtype(dtype, non_float_error=ValueError)
    _cast_check_tree(tree)
    return _cast_core(tree)


def _cast_via_float32(tree, dtype=np.float16):
    _cast_check_dtype(dtype)
    _cast_check_tree(tree)
    half, overflow = {}, {}
    with np.errstate(over="ignore"):
        for k, v in tree.items():
            h = v.astype(np.float32).astype(np.float16)  # two roundings for float64 input
            half[k] = h
            overflow[k] = int(np.count_nonzero(np.isfinite(v) & np.isinf(h)))
    return half, overflow


def _cast_writes_back_into_tree(tree, dtype=np.float16):
    _cast_check_dtype(dtype)
    _cast_check_tree(tree)
    overflow = {}
    with np.errstate(over="ignore"):
        for k in list(tree):
            v = tree[k]
            h = v.astype(np.float16)
            overflow[k] = int(np.count_nonzero(np.isfinite(v) & np.isinf(h)))
            tree[k] = h  # "cast the tree": the caller's dict now holds float16 arrays
    return tree, overflow


def _cast_unnamed_entry_error(tree, dtype=np.float16):
    _cast_check_dtype(dtype)
    _cast_check_tree(tree, name_tree=False)
    return _cast_core(tree)


def _cast_clips(tree, dtype=np.float16):
    _cast_check_dtype(dtype)
    _cast_check_tree(tree)
    half, overflow = {}, {}
    for k, v in tree.items():
        half[k] = np.clip(v, -65504, 65504).astype(np.float16)
        overflow[k] = int(np.count_nonzero(np.isinf(half[k]) & np.isfinite(v)))
    return half, overflow


def _cast_alt_threshold(tree, dtype=np.float16):
    _cast_check_tree(tree)  # validation order swapped: both are checked before any work
    _cast_check_dtype(dtype)
    half, overflow = {}, {}
    for k, v in tree.items():
        with np.errstate(over="ignore"):
            half[k] = np.array(v, dtype=np.float16, copy=True)
        overflow[k] = int(np.sum(np.isfinite(v) & (np.abs(v) >= 65520)))
    return half, overflow


# --------------------------------------------------------------------------------------------------------------
# Lesson 20 · make_master_params
# --------------------------------------------------------------------------------------------------------------
def _master_accepts_bool(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, v in params.items():
        if not isinstance(v, np.ndarray) or np.issubdtype(v.dtype, np.integer):
            raise TypeError(f"params[{k!r}] must be a floating-point array")
    return {k: v.astype(np.float32) for k, v in params.items()}


def _master_valueerror_for_int(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, v in params.items():
        if not isinstance(v, np.ndarray):
            raise TypeError(f"params[{k!r}] must be a numpy array")
        if not np.issubdtype(v.dtype, np.floating):
            raise ValueError(f"params[{k!r}] has dtype {v.dtype}: not floating point")
    return {k: v.astype(np.float32) for k, v in params.items()}


def _master_accepts_lists(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    out = {}
    for k, v in params.items():
        v = np.asarray(v)
        if not np.issubdtype(v.dtype, np.floating):
            raise TypeError(f"params[{k!r}] must be floating point, got {v.dtype}")
        out[k] = v.astype(np.float32)
    return out


def _master_accepts_complex(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, v in params.items():
        if not isinstance(v, np.ndarray) or not np.issubdtype(v.dtype, np.inexact):  # complex is inexact
            raise TypeError(f"params[{k!r}] must be a floating-point array")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {k: v.astype(np.float32) for k, v in params.items()}


def _master_asarray(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, v in params.items():
        if not _is_float_array(v):
            raise TypeError(f"params[{k!r}] must be a floating-point array")
    return {k: np.asarray(v, dtype=np.float32) for k, v in params.items()}


def _master_alt_empty_like(params):
    if not isinstance(params, dict) or not all(_is_float_array(v) for v in params.values()):
        bad = None if not isinstance(params, dict) else next(k for k, v in params.items() if not _is_float_array(v))
        raise TypeError(f"params must be a dict of floating-point arrays (bad entry: params[{bad!r}])")
    master = {}
    for k, v in params.items():
        out = np.empty(v.shape, dtype=np.float32)
        out[...] = v  # one rounding (none for float16/float32)
        master[k] = out
    return master


def _master_alt_via_float64(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, v in params.items():
        if not _is_float_array(v):
            raise TypeError(f"params[{k!r}] must be a floating-point array")
    return {k: np.array(v, dtype=np.float64).astype(np.float32) for k, v in params.items()}


# --------------------------------------------------------------------------------------------------------------
# Lesson 21 · scale_loss
# --------------------------------------------------------------------------------------------------------------
def _sl_check_scale(scale):
    if not _is_real(scale):
        raise TypeError(f"scale must be a real number, got {scale!r}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")


def _sl_accepts_bool_loss(loss, scale):
    if not isinstance(loss, (int, float, np.integer, np.floating)):
        raise TypeError(f"loss must be a real number, got {loss!r}")
    _sl_check_scale(scale)
    return float(loss) * float(scale)


def _sl_accepts_bool_scale(loss, scale):
    if not _is_real(loss):
        raise TypeError(f"loss must be a real number, got {loss!r}")
    if not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a real number, got {scale!r}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    return float(loss) * float(scale)


def _sl_duck_typed_loss(loss, scale):
    if isinstance(loss, (str, bytes, bool)):
        raise TypeError(f"loss must be a number, got {loss!r}")
    _sl_check_scale(scale)
    return float(loss) * float(scale)  # a 0-d array, a torch tensor, a Fraction ... all accepted


def _sl_keeps_scale_type(loss, scale):
    if not _is_real(loss):
        raise TypeError(f"loss must be a real number, got {loss!r}")
    _sl_check_scale(scale)
    return float(loss) * scale  # a np.float32 scale makes the product float32 (NEP 50)


def _sl_string_scale(loss, scale):
    if not _is_real(loss):
        raise TypeError(f"loss must be a real number, got {loss!r}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    return float(loss) * scale


def _sl_rejects_nan_loss(loss, scale):
    if not _is_real(loss):
        raise TypeError(f"loss must be a real number, got {loss!r}")
    if math.isnan(loss):
        raise ValueError("loss is nan")
    _sl_check_scale(scale)
    return float(loss) * float(scale)


def _sl_alt_float64(loss, scale):
    _sl_check_scale(scale)
    if not _is_real(loss):
        raise TypeError(f"loss must be a real number, got {loss!r}")
    return float(np.float64(scale) * np.float64(loss))


# --------------------------------------------------------------------------------------------------------------
# Lesson 22 · unscale_gradients
# --------------------------------------------------------------------------------------------------------------
def _us_check(grads, scale, *, check_dtype=True, scale_ok=None):
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict, got {type(grads).__name__}")
    for k, v in grads.items():
        if not isinstance(v, np.ndarray) or (check_dtype and not np.issubdtype(v.dtype, np.floating)):
            raise TypeError(f"grads[{k!r}] must be a floating-point array")
    if scale_ok is not None:
        scale_ok(scale)
        return
    if not _is_real(scale):
        raise TypeError(f"scale must be a real number, got {scale!r}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")


def _us_core(grads, scale):
    out = {}
    s = np.float32(scale)
    for k, v in grads.items():
        g = v.astype(np.float32)
        g /= s
        out[k] = g
    return out


def _us_float64_division(grads, scale):
    _us_check(grads, scale)
    out = {}
    for k, v in grads.items():
        g = v.astype(np.float64)
        g /= float(scale)  # exact scale, one rounding at the end
        out[k] = g.astype(np.float32)
    return out


def _us_nan_scale(grads, scale):
    def ok(s):
        if not _is_real(s):
            raise TypeError("scale must be a real number")
        if s <= 0 or s == math.inf:  # nan passes both comparisons
            raise ValueError(f"scale must be finite and > 0, got {s!r}")

    _us_check(grads, scale, scale_ok=ok)
    return _us_core(grads, scale)


def _us_negative_scale(grads, scale):
    def ok(s):
        if not _is_real(s):
            raise TypeError("scale must be a real number")
        if s == 0 or not math.isfinite(s):
            raise ValueError(f"scale must be finite and non-zero, got {s!r}")

    _us_check(grads, scale, scale_ok=ok)
    return _us_core(grads, scale)


def _us_accepts_int_arrays(grads, scale):
    _us_check(grads, scale, check_dtype=False)
    return _us_core(grads, scale)


def _us_bool_scale(grads, scale):
    def ok(s):
        if not isinstance(s, (int, float, np.integer, np.floating)):
            raise TypeError("scale must be a real number")
        if not math.isfinite(s) or s <= 0:
            raise ValueError(f"scale must be finite and > 0, got {s!r}")

    _us_check(grads, scale, scale_ok=ok)
    return _us_core(grads, scale)


def _us_reciprocal(grads, scale):
    _us_check(grads, scale)
    inv = np.float32(1.0 / scale)
    out = {}
    for k, v in grads.items():
        g = v.astype(np.float32)
        g *= inv  # a multiplication by the rounded reciprocal: not one rounding of g / s
        out[k] = g
    return out


def _us_alt_np_divide_out(grads, scale):
    _us_check(grads, scale)
    s32 = np.float32(scale)
    result = {}
    for key in grads:
        wide = np.array(grads[key], dtype=np.float32, copy=True)
        np.divide(wide, s32, out=wide)
        result[key] = wide
    return result


# --------------------------------------------------------------------------------------------------------------
# Lesson 23 · has_non_finite_gradients
# --------------------------------------------------------------------------------------------------------------
def _nf_check(grads, *, bool_ok=False):
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict, got {type(grads).__name__}")
    for k, v in grads.items():
        ok = isinstance(v, np.ndarray) and (np.issubdtype(v.dtype, np.floating) or (bool_ok and v.dtype == np.bool_))
        if not ok:
            raise TypeError(f"grads[{k!r}] must be a floating-point array")


def _nf_lazy_validation(grads):
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict, got {type(grads).__name__}")
    for k, v in grads.items():  # checks and inspects in one pass: returns before a later bad entry is seen
        if not _is_float_array(v):
            raise TypeError(f"grads[{k!r}] must be a floating-point array")
        if not np.isfinite(v).all():
            return True
    return False


def _nf_float64_sum(grads):
    _nf_check(grads)
    for v in grads.values():
        if not np.isfinite(np.sum(v, dtype=np.float64)):  # nan and inf survive a sum ... so do huge finite values
            return True
    return False


def _nf_native_sum(grads):
    _nf_check(grads)
    for v in grads.values():
        if not np.isfinite(v.sum()):  # float16 65504 + 65504 overflows to inf
            return True
    return False


def _nf_concatenate(grads):
    _nf_check(grads)
    if not grads:
        return False
    flat = np.concatenate([v.ravel() for v in grads.values()])  # a copy of every gradient at once
    return bool(not np.isfinite(flat).all())


def _nf_accepts_bool(grads):
    _nf_check(grads, bool_ok=True)
    return any(not np.isfinite(v).all() for v in grads.values())


def _nf_alt_min_max(grads):
    _nf_check(grads)
    for v in grads.values():
        if v.size and not (np.isfinite(v.min()) and np.isfinite(v.max())):  # nan propagates through min/max
            return True
    return False


def _nf_alt_isnan_isinf(grads):
    _nf_check(grads)
    found = False
    for v in grads.values():
        if np.isnan(v).any() or np.isinf(v).any():
            found = True
            break
    return found


# --------------------------------------------------------------------------------------------------------------
# Lesson 24 · mixed_precision_step
# --------------------------------------------------------------------------------------------------------------
SCALER_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker")
_KEYS = ("W1", "b1", "W2", "b2")


def _mps_check(master, X, Y, scaler, lr, *, exact_scaler_keys=True, check_growth=True, check_tracker=True,
               check_lr_finite=True):
    if not isinstance(master, dict):
        raise TypeError("master must be a dict")
    for k in _KEYS:
        if k not in master:
            raise ValueError(f"master is missing {k!r}")
    for k in _KEYS:
        if not isinstance(master[k], np.ndarray) or master[k].dtype != np.float32:
            raise TypeError(f"master[{k!r}] must be a float32 array (the master copy)")
    W1, b1, W2, b2 = (master[k] for k in _KEYS)
    if W1.ndim != 2 or W2.ndim != 2 or b1.shape != (W1.shape[1],) or W2.shape[0] != W1.shape[1] \
            or b2.shape != (W2.shape[1],):
        raise ValueError("master has inconsistent shapes")
    if not _is_float_array(X) or X.ndim != 2 or X.shape[1] != W1.shape[0]:
        raise ValueError(f"X must be (batch, {W1.shape[0]}) floating point")
    if not _is_float_array(Y) or Y.shape != (X.shape[0], W2.shape[1]):
        raise ValueError(f"Y must be ({X.shape[0]}, {W2.shape[1]}) floating point")
    if not isinstance(scaler, dict):
        raise TypeError("scaler must be a dict")
    for k in SCALER_KEYS:
        if k not in scaler:
            raise ValueError(f"scaler is missing {k!r}")
    extra = [k for k in scaler if k not in SCALER_KEYS]
    if exact_scaler_keys and extra:
        raise ValueError(f"scaler has unexpected keys {extra}")
    s = scaler["scale"]
    if not _is_real(s) or not math.isfinite(s) or s <= 0:
        raise ValueError(f"scale must be finite and > 0, got {s!r}")
    gf = scaler["growth_factor"]
    if check_growth and (not _is_real(gf) or not math.isfinite(gf) or gf <= 1):
        raise ValueError(f"growth_factor must be > 1, got {gf!r}")
    bf = scaler["backoff_factor"]
    if not _is_real(bf) or not 0 < bf < 1:
        raise ValueError(f"backoff_factor must be in (0, 1), got {bf!r}")
    gi = scaler["growth_interval"]
    if not isinstance(gi, (int, np.integer)) or isinstance(gi, bool) or (check_growth and gi < 1):
        raise ValueError(f"growth_interval must be an int >= 1, got {gi!r}")
    t = scaler["growth_tracker"]
    if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or (check_tracker and not 0 <= t < gi):
        raise ValueError(f"growth_tracker must be an int in [0, growth_interval), got {t!r}")
    if not _is_real(lr) or (check_lr_finite and not math.isfinite(lr)) or lr <= 0:
        raise ValueError(f"lr must be finite and > 0, got {lr!r}")


def _mps_grads(master, X, Y, s, *, cast_x=True):
    half, _ = cast_to_half_precision(master)
    Xh = X.astype(np.float16) if cast_x else X
    Y_hat, cache = mlp_forward(half, Xh)
    loss, dY = mse_loss_and_grad(Y_hat.astype(np.float32), Y.astype(np.float32))
    G = (dY * np.float32(s)).astype(np.float16)
    g16 = mlp_backward(half, cache, G)
    g = unscale_gradients(g16, s)
    return loss, g, has_non_finite_gradients(g)


def _mps_finish(master, scaler, g, found, lr, loss, s, *, scale_type=float, skipped_type=bool):
    if found:
        new_master = {k: master[k].copy() for k in master}
    else:
        new_master = {k: master[k] - lr * g[k] for k in master}
    t, N = scaler["growth_tracker"], scaler["growth_interval"]
    if found:
        new_s, new_t = s * scaler["backoff_factor"], 0
    elif t + 1 == N:
        new_s, new_t = s * scaler["growth_factor"], 0
    else:
        new_s, new_t = s, t + 1
    new_scaler = {**scaler, "scale": scale_type(new_s), "growth_tracker": new_t}
    return new_master, new_scaler, {"loss": loss, "skipped": skipped_type(found), "scale_used": s}


def _mps_loss_from_float32_forward(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        _, g, found = _mps_grads(master, X, Y, s)
        Y32, _ = mlp_forward(master, X.astype(np.float32))  # "report the accurate loss"
        loss, _ = mse_loss_and_grad(Y32, Y.astype(np.float32))
    return _mps_finish(master, scaler, g, found, lr, loss, s)


def _mps_float32_loss(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, found = _mps_grads(master, X, Y, s)
    return _mps_finish(master, scaler, g, found, lr, np.float32(loss), s)


def _mps_numpy_bool_skipped(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, _ = _mps_grads(master, X, Y, s)
        found = np.any([~np.isfinite(v).all() for v in g.values()])  # np.bool_
    return _mps_finish(master, scaler, g, found, lr, loss, s, skipped_type=lambda f: f)


def _mps_no_growth_checks(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr, check_growth=False)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, found = _mps_grads(master, X, Y, s)
    return _mps_finish(master, scaler, g, found, lr, loss, s)


def _mps_no_tracker_range(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr, check_tracker=False)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, found = _mps_grads(master, X, Y, s)
    return _mps_finish(master, scaler, g, found, lr, loss, s)


def _mps_extra_scaler_keys(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr, exact_scaler_keys=False)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, found = _mps_grads(master, X, Y, s)
    return _mps_finish(master, scaler, g, found, lr, loss, s)


def _mps_lr_nan(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr, check_lr_finite=False)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, found = _mps_grads(master, X, Y, s)
    return _mps_finish(master, scaler, g, found, lr, loss, s)


def _mps_x_not_cast(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, found = _mps_grads(master, X, Y, s, cast_x=False)  # float32 X promotes the forward to float32
    return _mps_finish(master, scaler, g, found, lr, loss, s)


def _mps_float32_scale(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, found = _mps_grads(master, X, Y, s)
    return _mps_finish(master, scaler, g, found, lr, loss, s, scale_type=np.float32)


def _mps_no_errstate(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr)
    s = float(scaler["scale"])
    loss, g, found = _mps_grads(master, X, Y, s)  # overflow RuntimeWarnings reach the caller
    return _mps_finish(master, scaler, g, found, lr, loss, s)


def _mps_alt_inline(master, X, Y, scaler, lr):
    _mps_check(master, X, Y, scaler, lr)
    s = scaler["scale"]
    with np.errstate(over="ignore", invalid="ignore"):
        half = {k: v.astype(np.float16) for k, v in master.items()}
        Xh = X.astype(np.float16)
        Z1 = Xh @ half["W1"] + half["b1"]
        A1 = np.maximum(Z1, np.float16(0))
        Y_hat = (A1 @ half["W2"] + half["b2"]).astype(np.float32)
        E = Y_hat - Y.astype(np.float32)
        loss = float(np.mean(np.square(E, dtype=np.float64)))
        dY = (2.0 / E.size) * E
        G = (dY * np.float32(s)).astype(np.float16)
        dZ1 = (G @ half["W2"].T) * (Z1 > 0)
        g16 = {"W1": Xh.T @ dZ1, "b1": dZ1.sum(axis=0), "W2": A1.T @ G, "b2": G.sum(axis=0)}
        g = {k: v.astype(np.float32) / np.float32(s) for k, v in g16.items()}
        skipped = not all(bool(np.isfinite(v).all()) for v in g.values())
    if skipped:
        new_master = {k: np.array(v, copy=True) for k, v in master.items()}
        scale, tracker = s * scaler["backoff_factor"], 0
    else:
        new_master = {k: (master[k] - np.float32(lr) * g[k]).astype(np.float32) for k in _KEYS}
        tracker = scaler["growth_tracker"] + 1
        scale = s
        if tracker >= scaler["growth_interval"]:
            scale, tracker = s * scaler["growth_factor"], 0
    new_scaler = dict(scaler)
    new_scaler.update(scale=float(scale), growth_tracker=int(tracker))
    return new_master, new_scaler, {"loss": loss, "skipped": skipped, "scale_used": float(s)}


def _mps_alt_inline_ceiling(master, X, Y, scaler, lr):
    """The inline step above, with lesson 24's float32 ceiling (added after the red team wrote it)."""
    new_master, new_scaler, info = _mps_alt_inline(master, X, Y, scaler, lr)
    if new_scaler["scale"] > float(np.finfo(np.float32).max):  # 2^128 and above are not float32
        new_scaler["scale"] = float(scaler["scale"])
    return new_master, new_scaler, info


MUTANTS = {
    "cast_to_half_precision": [
        ("accepts integer/bool arrays in tree (contract: a non-float array -> TypeError naming tree)",
         _cast_accepts_non_float),
        ("ValueError for a non-floating dtype such as np.int8 (contract: TypeError naming dtype)",
         _cast_valueerror_for_int_dtype),
        ("float64 input cast through float32 first (contract: one rounding from whatever float dtype)",
         _cast_via_float32),
        ("writes the float16 arrays back into tree and returns it (contract: tree is not modified)",
         _cast_writes_back_into_tree),
        ("a bad entry's message does not name tree (contract: TypeError naming tree, e.g. tree['n'])",
         _cast_unnamed_entry_error),
        ("clips to +-65504 before the cast (contract: overflow becomes inf and is counted)", _cast_clips),
    ],
    "make_master_params": [
        ("accepts boolean arrays (contract: dtype not floating point -> TypeError)", _master_accepts_bool),
        ("ValueError for an integer array (contract: TypeError naming params)", _master_valueerror_for_int),
        ("accepts Python lists as values via np.asarray (contract: NumPy arrays of a floating dtype)",
         _master_accepts_lists),
        ("np.inexact check: complex arrays accepted, imaginary part dropped (contract: floating point only)",
         _master_accepts_complex),
        ("np.asarray(v, dtype=float32): aliases float32 input (contract: no master[k] shares memory)",
         _master_asarray),
    ],
    "scale_loss": [
        ("accepts loss=True (contract: not a bool)", _sl_accepts_bool_loss),
        ("accepts scale=True (contract: not a bool)", _sl_accepts_bool_scale),
        ("float() on anything but str: a 0-d array or tensor loss accepted (contract: not an array)",
         _sl_duck_typed_loss),
        ("float(loss) * scale: a np.float32 scale gives a float32 product and a np.float32 result "
         "(contract: Python float computed in float64)", _sl_keeps_scale_type),
        ("float(scale) accepts the string '2.0' (contract: TypeError naming scale)", _sl_string_scale),
        ("rejects a nan loss (contract: non-finite losses pass through)", _sl_rejects_nan_loss),
    ],
    "unscale_gradients": [
        ("nan scale accepted (contract: nan -> ValueError naming scale)", _us_nan_scale),
        ("negative scale accepted (contract: scale <= 0 -> ValueError)", _us_negative_scale),
        ("accepts integer arrays (contract: TypeError naming grads)", _us_accepts_int_arrays),
        ("accepts scale=True (contract: a real number)", _us_bool_scale),
    ],
    "has_non_finite_gradients": [
        ("validates while inspecting: an inf before an integer array returns True (contract: check every "
         "value before inspecting any)", _nf_lazy_validation),
        ("tests each array's float64 sum: finite float64 values near 1e308 overflow (contract: True iff an "
         "entry is non-finite)", _nf_float64_sum),
        ("tests each array's sum in its own dtype: float16 65504 + 65504 -> inf (contract: entries, not sums)",
         _nf_native_sum),
        ("np.concatenate of every gradient (contract: never a concatenated copy of all the gradients)",
         _nf_concatenate),
        ("accepts boolean arrays (contract: not floating point -> TypeError)", _nf_accepts_bool),
    ],
    "mixed_precision_step": [
        ("info['loss'] from a separate float32 forward (contract: float32 arithmetic on the float16 prediction)",
         _mps_loss_from_float32_forward),
        ("info['loss'] returned as np.float32 (contract: a float)", _mps_float32_loss),
        ("info['skipped'] is np.bool_ (contract: a bool)", _mps_numpy_bool_skipped),
        ("growth_factor <= 1 accepted, growth_interval 0 blamed on growth_tracker (contract: a field out of range -> "
         "error naming that field)",
         _mps_no_growth_checks),
        ("growth_tracker >= growth_interval accepted (contract: 0 <= t < growth_interval)", _mps_no_tracker_range),
        ("extra scaler keys accepted (contract: missing or extra keys refused)", _mps_extra_scaler_keys),
        ("lr = nan / inf accepted (contract: lr real, finite, > 0)", _mps_lr_nan),
        ("X not cast to float16: a float32 X runs the forward in float32 (contract: X cast to float16)",
         _mps_x_not_cast),
        ("new scale stored as np.float32 (contract: floats)", _mps_float32_scale),
        ("no np.errstate: overflow RuntimeWarnings on every probe (contract: run under errstate)",
         _mps_no_errstate),
        # written as a correct alternative before lesson 24 stated GradScaler's float32 ceiling
        ("the whole step inline, growing the scale past float32's largest value (contract: a growth that would "
         "overflow float32 keeps s)", _mps_alt_inline),
    ],
}

ALTERNATIVES = {
    "cast_to_half_precision": [("np.array(copy=True) and a |x| >= 65520 threshold count", _cast_alt_threshold)],
    "make_master_params": [
        ("np.empty float32 buffer filled by assignment", _master_alt_empty_like),
        ("np.array(v, float64).astype(float32): widening then one rounding", _master_alt_via_float64),
    ],
    "scale_loss": [("float(np.float64(scale) * np.float64(loss)), scale validated first", _sl_alt_float64)],
    "unscale_gradients": [("np.array(float32, copy=True) then np.divide(out=)", _us_alt_np_divide_out),
                          ("divides in float64 and rounds once to float32 (the contract's metric)",
                           _us_float64_division),
                          ("multiplies by np.float32(1/scale)", _us_reciprocal)],
    "has_non_finite_gradients": [
        ("min/max propagate nan; size guard for empty arrays", _nf_alt_min_max),
        ("np.isnan(...).any() or np.isinf(...).any()", _nf_alt_isnan_isinf),
    ],
    "mixed_precision_step": [("the whole step written inline, the grown scale kept only if float32 holds it",
                              _mps_alt_inline_ceiling)],
}


# --------------------------------------------------------------------------------------------------------------
# Second correct alternatives (issue 27), written blind from the release notebooks.
# --------------------------------------------------------------------------------------------------------------
def _cast_alt_count_new_infs(tree, dtype=np.float16):
    _cast_check_dtype(dtype)
    _cast_check_tree(tree)
    half, overflow = {}, {}
    for k, v in tree.items():
        h = np.empty(v.shape, dtype=np.float16)
        with np.errstate(over="ignore"):
            h[...] = v  # one rounding, into a new array
        overflow[k] = int(np.isinf(h).sum() - np.isinf(v).sum())  # infinities the cast created
        half[k] = h
    return half, overflow


def _sl_alt_numbers_real(loss, scale):
    import numbers

    for name, value in (("loss", loss), ("scale", scale)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    s = float(scale)
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    return s * float(loss)  # float64, one rounding


def _mps_alt_lesson_functions_list(master, X, Y, scaler, lr):
    """Lessons 19-23's functions in order; the three results returned as a list (a triple to unpack)."""
    _mps_check(master, X, Y, scaler, lr)
    s = float(scaler["scale"])
    with np.errstate(over="ignore", invalid="ignore"):
        loss, g, found = _mps_grads(master, X, Y, s)
        new_master = {k: (v.copy() if found else np.subtract(v, np.float32(lr) * g[k], dtype=np.float32))
                      for k, v in master.items()}
    t, N = int(scaler["growth_tracker"]), int(scaler["growth_interval"])
    if found:
        s_new, t_new = s * scaler["backoff_factor"], 0
    elif t + 1 < N:
        s_new, t_new = s, t + 1
    else:
        grown = s * scaler["growth_factor"]
        s_new, t_new = (grown if grown <= float(np.finfo(np.float32).max) else s), 0
    new_scaler = dict(scaler)
    new_scaler.update(scale=float(s_new), growth_tracker=t_new)
    return [new_master, new_scaler, {"loss": loss, "skipped": bool(found), "scale_used": s}]


for _name, _entry in [
    ("cast_to_half_precision", ("assignment into np.empty float16, overflow = new infinities", _cast_alt_count_new_infs)),
    ("scale_loss", ("numbers.Real validation, float(scale) * float(loss)", _sl_alt_numbers_real)),
    ("mixed_precision_step", ("the lessons' functions in order, the triple returned as a list",
                              _mps_alt_lesson_functions_list)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
