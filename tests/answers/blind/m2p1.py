"""Red team, Module 2 Part 1 (model, forward and loss): wrong answers and correct alternatives written from the
release notebooks only."""

from __future__ import annotations

import math
import numbers

import numpy as np


# ======================================================================================================
# Lesson 1 · init_model_params
# ======================================================================================================

def _imp_validate(sizes, rng, *, accept_bool=False, accept_float=False, accept_array=False, rng_none=False,
                  duck_rng=False):
    kinds = (list, tuple, np.ndarray) if accept_array else (list, tuple)
    if not isinstance(sizes, kinds):
        raise TypeError(f"sizes must be a list or tuple, got {type(sizes).__name__}")
    sizes = list(sizes)
    if len(sizes) < 2:
        raise ValueError(f"sizes must hold at least two widths, got {sizes}")
    out = []
    for i, w in enumerate(sizes):
        if accept_float and isinstance(w, float) and w.is_integer():
            w = int(w)
        if isinstance(w, (bool, np.bool_)) and not accept_bool:
            raise TypeError(f"sizes[{i}] must be an int, not a bool")
        if not isinstance(w, (int, np.integer)):
            raise TypeError(f"sizes[{i}] must be an int, got {w!r}")
        if w < 1:
            raise ValueError(f"sizes[{i}] must be >= 1, got {w}")
        out.append(int(w))
    if rng is None and rng_none:
        rng = np.random.default_rng()
    if duck_rng:
        if not hasattr(rng, "standard_normal"):
            raise TypeError("rng must provide standard_normal")
    elif not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return out, rng


def _imp_core(sizes, rng, *, hidden_gain=2.0, out_gain=1.0, std_mode="sqrt", bias="zeros", draw="f64",
              fan="in", key_order="interleaved", transpose=False, copy_rng=False, **validate):
    sizes, rng = _imp_validate(sizes, rng, **validate)
    if copy_rng:
        import copy as _copy

        rng = _copy.deepcopy(rng)
    L = len(sizes) - 1
    Ws, bs = {}, {}
    for l in range(L):
        fan_in, fan_out = sizes[l], sizes[l + 1]
        gain = hidden_gain if l < L - 1 else out_gain
        fan_n = fan_in if fan == "in" else fan_out
        std = math.sqrt(gain / fan_n) if std_mode == "sqrt" else gain / fan_n
        if draw == "f64":
            z = rng.standard_normal((fan_out, fan_in)).T if transpose else rng.standard_normal((fan_in, fan_out))
            Ws[l] = (z * std).astype(np.float32)
        elif draw == "f32_then_scale":
            Ws[l] = rng.standard_normal((fan_in, fan_out)).astype(np.float32) * np.float32(std)
        elif draw == "f32_stream":
            Ws[l] = rng.standard_normal((fan_in, fan_out), dtype=np.float32) * np.float32(std)
        else:
            raise AssertionError(draw)
        if bias == "zeros":
            bs[l] = np.zeros(fan_out, np.float32)
        elif bias == "float64":
            bs[l] = np.zeros(fan_out)
        elif bias == "random":
            bs[l] = (0.01 * rng.standard_normal(fan_out)).astype(np.float32)
        else:
            raise AssertionError(bias)
    params = {}
    if key_order == "interleaved":
        for l in range(L):
            params[f"W{l}"], params[f"b{l}"] = Ws[l], bs[l]
    else:
        params.update({f"W{l}": Ws[l] for l in range(L)})
        params.update({f"b{l}": bs[l] for l in range(L)})
    return params


def _imp_he_everywhere(sizes, rng):
    return _imp_core(sizes, rng, out_gain=2.0)


def _imp_variance_as_std(sizes, rng):
    return _imp_core(sizes, rng, std_mode="variance")


def _imp_random_biases(sizes, rng):
    return _imp_core(sizes, rng, bias="random")


def _imp_xavier_hidden(sizes, rng):
    return _imp_core(sizes, rng, hidden_gain=1.0)


def _imp_float32_stream(sizes, rng):
    return _imp_core(sizes, rng, draw="f32_stream")


def _imp_transposed_draw(sizes, rng):
    return _imp_core(sizes, rng, transpose=True)


def _imp_float64_biases(sizes, rng):
    return _imp_core(sizes, rng, bias="float64")


def _imp_accepts_bool(sizes, rng):
    return _imp_core(sizes, rng, accept_bool=True)


def _imp_accepts_float_width(sizes, rng):
    return _imp_core(sizes, rng, accept_float=True)


def _imp_accepts_array(sizes, rng):
    return _imp_core(sizes, rng, accept_array=True)


def _imp_none_rng_global(sizes, rng):
    return _imp_core(sizes, rng, rng_none=True)


def _imp_duck_typed_rng(sizes, rng):
    return _imp_core(sizes, rng, duck_rng=True)


def _imp_weights_then_biases(sizes, rng):
    return _imp_core(sizes, rng, key_order="grouped")


def _imp_draws_from_copy(sizes, rng):
    return _imp_core(sizes, rng, copy_rng=True)


def _imp_alt_cast_then_scale(sizes, rng):
    return _imp_core(sizes, rng, draw="f32_then_scale")


def _imp_alt_one_draw_split(sizes, rng):
    """One draw of all weights at once, split in order (the stream is the same as drawing layer by layer)."""
    if isinstance(sizes, str) or not isinstance(sizes, (list, tuple)):
        raise TypeError("sizes must be a list or tuple of ints")
    if len(sizes) < 2:
        raise ValueError("sizes needs at least two widths")
    for i, w in enumerate(sizes):
        if type(w) is bool or not isinstance(w, numbers.Integral):
            raise TypeError(f"sizes[{i}] is not an integer")
        if w < 1:
            raise ValueError(f"sizes[{i}] must be at least 1")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    counts = [sizes[l] * sizes[l + 1] for l in range(len(sizes) - 1)]
    z = rng.standard_normal(sum(counts))
    params, start = {}, 0
    L = len(sizes) - 1
    for l, cnt in enumerate(counts):
        var = (2.0 if l < L - 1 else 1.0) / sizes[l]
        params[f"W{l}"] = (z[start:start + cnt].reshape(sizes[l], sizes[l + 1]) * np.sqrt(var)).astype(np.float32)
        params[f"b{l}"] = np.zeros(sizes[l + 1], dtype=np.float32)
        start += cnt
    return params


# ======================================================================================================
# Lesson 2 · relu
# ======================================================================================================

def _relu_check(x, *, allow_list=False, kinds="f"):
    if allow_list and not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a NumPy array, got {type(x).__name__}")
    if x.dtype.kind not in kinds:
        raise TypeError(f"x must be floating point, got {x.dtype}")
    return x


def _relu_where(x):
    x = _relu_check(x)
    return np.where(x > 0, x, x.dtype.type(0))


def _relu_inplace(x):
    x = _relu_check(x)
    x[x < 0] = 0
    return x


def _relu_float64(x):
    x = _relu_check(x)
    return np.maximum(x, np.float64(0))


def _relu_times_mask(x):
    x = _relu_check(x)
    return x * (x > 0)


def _relu_fmax(x):
    x = _relu_check(x)
    return np.fmax(x, x.dtype.type(0))


def _relu_no_validation(x):
    return np.maximum(x, 0)


def _relu_accepts_complex(x):
    x = _relu_check(x, kinds="fc")
    return np.maximum(x, x.dtype.type(0))


def _relu_accepts_python_float(x):
    if isinstance(x, (float, int)) and not isinstance(x, bool):
        x = np.asarray(x, dtype=float)
    x = _relu_check(x)
    return np.maximum(x, x.dtype.type(0))


def _relu_returns_input_if_nonnegative(x):
    x = _relu_check(x)
    if not np.any(x < 0):
        return x
    return np.maximum(x, x.dtype.type(0))


def _relu_abs_trick(x):
    x = _relu_check(x)
    return (np.abs(x) + x) / x.dtype.type(2)


def _relu_float32_compute(x):
    x = _relu_check(x)
    return np.maximum(x.astype(np.float32), np.float32(0))


def _relu_alt_clip(x):
    if not isinstance(x, np.ndarray) or not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"x must be a floating-point numpy.ndarray, got {type(x).__name__}")
    return np.clip(x, x.dtype.type(0), None)


def _relu_alt_copy_and_zero(x):
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        raise TypeError(f"x: expected a floating ndarray, got {type(x).__name__}")
    out = x.copy()
    out[out < 0] = 0  # NaN < 0 is False: NaN stays
    return out


def _relu_alt_out_buffer(x):
    if not (isinstance(x, np.ndarray) and x.dtype.kind == "f"):
        raise TypeError("x must be a floating-point ndarray")
    out = np.empty_like(x)
    np.maximum(x, x.dtype.type(0), out=out)
    return out


# ======================================================================================================
# Lesson 3 · model_forward
# ======================================================================================================

def _mf_validate(params, X, *, check_chain=True, check_bias=True, exact_keys=True, check_X_float=True,
                 check_X_2d=True):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    L = sum(1 for k in params if k.startswith("W"))
    if L < 1:
        raise ValueError("params has no layers")
    expected = {f"{p}{l}" for l in range(L) for p in "Wb"}
    if (set(params) != expected) if exact_keys else not expected <= set(params):
        raise ValueError(f"params must have exactly the keys {sorted(expected)}")
    for l in range(L):
        W, b = params[f"W{l}"], params[f"b{l}"]
        if not (isinstance(W, np.ndarray) and isinstance(b, np.ndarray)):
            raise TypeError(f"params: W{l}/b{l} must be arrays")
        if W.ndim != 2:
            raise ValueError(f"params: W{l} must be 2-D")
        if check_bias and (b.ndim != 1 or b.shape[0] != W.shape[1]):
            raise ValueError(f"params: b{l} must have shape ({W.shape[1]},)")
        if check_chain and l > 0 and W.shape[0] != params[f"W{l - 1}"].shape[1]:
            raise ValueError(f"params: W{l} does not chain with W{l - 1}")
    if not isinstance(X, np.ndarray):
        raise TypeError("X must be a NumPy array")
    if check_X_float and not np.issubdtype(X.dtype, np.floating):
        raise TypeError(f"X must be floating point, got {X.dtype}")
    if check_X_2d and X.ndim != 2:
        raise ValueError(f"X must be 2-D, got {X.ndim}-D")
    if X.shape[-1] != params["W0"].shape[0]:
        raise ValueError(f"X has {X.shape[-1]} features, W0 expects {params['W0'].shape[0]}")
    return L


def _mf_core(params, X, *, out_relu=False, cache_z=False, bias=True, copy_x=False, copy_logits=False,
             act="maximum", as_float64=False, reshape_1d=False, **validate):
    if reshape_1d and isinstance(X, np.ndarray) and X.ndim == 1:
        X = X.reshape(1, -1)
    L = _mf_validate(params, X, **validate)
    cache = {"A0": X.copy() if copy_x else X}
    A = X.astype(np.float64) if as_float64 else X
    Z = None
    for l in range(L):
        Z = A @ params[f"W{l}"]
        if bias:
            Z = Z + params[f"b{l}"]
        if l < L - 1 or out_relu:
            if act == "maximum":
                A_next = np.maximum(Z, Z.dtype.type(0))
            else:
                A_next = np.where(Z > 0, Z, Z.dtype.type(0))
            if l < L - 1:
                cache[f"A{l + 1}"] = Z if cache_z else A_next
            A = A_next
            if l == L - 1:
                Z = A_next
    logits = Z
    cache["logits"] = logits.copy() if copy_logits else logits
    return logits, cache


def _mf_relu_on_logits(params, X):
    return _mf_core(params, X, out_relu=True)


def _mf_caches_preactivations(params, X):
    return _mf_core(params, X, cache_z=True)


def _mf_no_bias(params, X):
    return _mf_core(params, X, bias=False)


def _mf_copies_x(params, X):
    return _mf_core(params, X, copy_x=True)


def _mf_cache_logits_copy(params, X):
    return _mf_core(params, X, copy_logits=True)


def _mf_where_relu(params, X):
    return _mf_core(params, X, act="where")


def _mf_float64(params, X):
    return _mf_core(params, X, as_float64=True)


def _mf_no_chain_check(params, X):
    return _mf_core(params, X, check_chain=False)


def _mf_no_bias_shape_check(params, X):
    return _mf_core(params, X, check_bias=False)


def _mf_extra_keys_ignored(params, X):
    return _mf_core(params, X, exact_keys=False)


def _mf_integer_x(params, X):
    return _mf_core(params, X, check_X_float=False)


def _mf_accepts_1d_x(params, X):
    return _mf_core(params, X, reshape_1d=True)


def _mf_alt_einsum(params, X):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    L = len(params) // 2
    if L < 1 or set(params) != {f"{p}{l}" for l in range(L) for p in ("W", "b")}:
        raise ValueError("params must hold exactly W0, b0, ..., W{L-1}, b{L-1}")
    prev = None
    for l in range(L):
        W, b = params[f"W{l}"], params[f"b{l}"]
        if not isinstance(W, np.ndarray) or not isinstance(b, np.ndarray) or W.dtype.kind != "f" or b.dtype.kind != "f":
            raise TypeError(f"params: W{l} and b{l} must be floating arrays")
        if W.ndim != 2 or b.shape != (W.shape[1],) or (prev is not None and W.shape[0] != prev):
            raise ValueError(f"params: layer {l} has inconsistent shapes")
        prev = W.shape[1]
    if not isinstance(X, np.ndarray) or X.dtype.kind != "f":
        raise TypeError("X must be a floating-point array")
    if X.ndim != 2 or X.shape[1] != params["W0"].shape[0]:
        raise ValueError(f"X must have shape (batch, {params['W0'].shape[0]})")
    cache, A = {"A0": X}, X
    for l in range(L):
        Z = np.einsum("ni,io->no", A, params[f"W{l}"]) + params[f"b{l}"]
        if l == L - 1:
            cache["logits"] = Z
            return Z, cache
        A = np.maximum(Z, Z.dtype.type(0))
        cache[f"A{l + 1}"] = A
    raise AssertionError("unreachable")


# ======================================================================================================
# Lesson 4 · softmax
# ======================================================================================================

def _sm_check(logits, *, allow_list=False, allow_1d=False, kinds="f"):
    if allow_list and not isinstance(logits, np.ndarray):
        logits = np.asarray(logits, dtype=float)
    if not isinstance(logits, np.ndarray) or logits.dtype.kind not in kinds:
        raise TypeError("logits must be a floating NumPy array")
    if logits.ndim != 2:
        if allow_1d and logits.ndim == 1:
            return logits.reshape(1, -1)
        raise ValueError(f"logits must be 2-D, got {logits.ndim}-D")
    return logits


def _sm_no_shift(logits):
    z = _sm_check(logits)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _sm_global_max(logits):
    z = _sm_check(logits)
    e = np.exp(z - z.max())
    return e / e.sum(axis=1, keepdims=True)


def _sm_axis0(logits):
    z = _sm_check(logits)
    e = np.exp(z - z.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def _sm_inplace(logits):
    z = _sm_check(logits)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def _sm_subtract_inplace_only(logits):
    z = _sm_check(logits)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _sm_accepts_list(logits):
    z = _sm_check(logits, allow_list=True)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sm_accepts_1d(logits):
    z = _sm_check(logits, allow_1d=True)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    out = e / e.sum(axis=1, keepdims=True)
    return out.reshape(logits.shape)


def _sm_subtract_mean(logits):
    z = _sm_check(logits)
    e = np.exp(z - z.mean(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sm_float64(logits):
    z = _sm_check(logits).astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sm_alt_log_softmax(logits):
    if not isinstance(logits, np.ndarray) or not np.issubdtype(logits.dtype, np.floating):
        raise TypeError("logits must be a floating-point numpy array")
    if logits.ndim != 2:
        raise ValueError("logits must be 2-D (batch, C)")
    m = np.max(logits, axis=1, keepdims=True)
    shifted = logits - m
    log_norm = np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return np.exp(shifted - log_norm)


def _sm_alt_rowwise(logits):
    if not isinstance(logits, np.ndarray) or logits.dtype.kind != "f":
        raise TypeError("logits: expected a floating ndarray")
    if logits.ndim != 2:
        raise ValueError("logits: expected shape (batch, C)")
    out = np.empty_like(logits)
    for i, row in enumerate(logits):
        e = np.exp(row - row.max())
        out[i] = e / e.sum()
    return out


# ======================================================================================================
# Lesson 5 · cross_entropy_loss
# ======================================================================================================

def _ce_validate(logits, y, *, label_kinds="iu", allow_list=False, ravel_y=False, check_len=True, check_neg=True,
                 check_logits_float=True, check_empty=True):
    if not isinstance(logits, np.ndarray) or logits.ndim != 2:
        raise ValueError("logits must be a 2-D array")
    if check_logits_float and not np.issubdtype(logits.dtype, np.floating):
        raise TypeError("logits must be floating point")
    if check_empty and logits.shape[0] < 1:
        raise ValueError("logits must have at least one row")
    if allow_list and not isinstance(y, np.ndarray):
        y = np.asarray(y)
    if not isinstance(y, np.ndarray):
        raise TypeError("y must be a NumPy array")
    if ravel_y:
        y = y.reshape(-1)
    if y.dtype.kind not in label_kinds:
        raise TypeError(f"y must hold integers, got {y.dtype}")
    if y.ndim != 1:
        raise ValueError("y must be 1-D")
    if check_len and y.shape[0] != logits.shape[0]:
        raise ValueError(f"y has {y.shape[0]} labels for {logits.shape[0]} rows")
    C = logits.shape[1]
    if (check_neg and np.any(y < 0)) or np.any(y >= C):
        raise ValueError(f"y must lie in [0, {C})")
    return y.astype(np.intp)


def _ce_core(logits, y, *, mode="lse", reduce="mean", acc="float64", result="float", pick="rows", **validate):
    y = _ce_validate(logits, y, **validate)
    if not np.issubdtype(logits.dtype, np.floating):
        logits = logits.astype(np.float64)
    n = logits.shape[0]
    if mode == "lse":
        m = logits.max(axis=1, keepdims=True)
        shifted = logits - m
        lse = np.log(np.exp(shifted).sum(axis=1))
        picked = shifted[np.arange(n), y] if pick == "rows" else shifted[:, y]
        terms = (lse - picked) if pick == "rows" else (lse[:, None] - picked)
    elif mode == "global_max":
        M = logits.max()
        lse = M + np.log(np.exp(logits - M).sum(axis=1))
        terms = lse - logits[np.arange(n), y]
    elif mode == "no_max":
        lse = np.log(np.exp(logits).sum(axis=1))
        terms = lse - logits[np.arange(n), y]
    elif mode == "log_softmax_prob":
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        terms = -np.log(p[np.arange(n), y])
    elif mode == "upcast":
        z = logits.astype(np.float64)
        m = z.max(axis=1, keepdims=True)
        terms = np.log(np.exp(z - m).sum(axis=1)) - (z - m)[np.arange(n), y]
    else:
        raise AssertionError(mode)
    if reduce == "sum":
        value = np.sum(terms, dtype=np.float64)
    elif acc == "float64":
        value = np.mean(terms, dtype=np.float64)
    else:
        value = np.mean(terms)
    return float(value) if result == "float" else np.float64(value)


def _ce_log_of_softmax(logits, y):
    return _ce_core(logits, y, mode="log_softmax_prob")


def _ce_sum(logits, y):
    return _ce_core(logits, y, reduce="sum")


def _ce_no_max(logits, y):
    return _ce_core(logits, y, mode="no_max")


def _ce_column_pick(logits, y):
    return _ce_core(logits, y, pick="columns")


def _ce_global_max(logits, y):
    return _ce_core(logits, y, mode="global_max")


def _ce_numpy_scalar(logits, y):
    return _ce_core(logits, y, result="numpy")


def _ce_float32_mean(logits, y):
    return _ce_core(logits, y, acc="native")


def _ce_no_negative_check(logits, y):
    return _ce_core(logits, y, check_neg=False)


def _ce_accepts_bool_labels(logits, y):
    return _ce_core(logits, y, label_kinds="iub")


def _ce_accepts_list_labels(logits, y):
    return _ce_core(logits, y, allow_list=True)


def _ce_ravels_2d_labels(logits, y):
    return _ce_core(logits, y, ravel_y=True)


def _ce_no_length_check(logits, y):
    return _ce_core(logits, y, check_len=False)


def _ce_accepts_integer_logits(logits, y):
    return _ce_core(logits, y, check_logits_float=False)


def _ce_empty_batch(logits, y):
    return _ce_core(logits, y, check_empty=False)


def _ce_accepts_float_labels(logits, y):
    y = np.asarray(y)
    if y.dtype.kind == "f" and np.all(y == np.round(y)):
        y = y.astype(np.int64)
    return _ce_core(logits, y)


def _ce_alt_logaddexp_reduce(logits, y):
    if not isinstance(logits, np.ndarray) or logits.dtype.kind != "f" or logits.ndim != 2 or len(logits) == 0:
        raise ValueError("logits must be a non-empty 2-D floating array")
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer):
        raise TypeError("y must be an integer numpy array")
    if y.shape != (logits.shape[0],):
        raise ValueError(f"y must have shape ({logits.shape[0]},), got {y.shape}")
    C = logits.shape[1]
    if y.size and (y.min() < 0 or y.max() >= C):
        raise ValueError(f"y out of range: labels must be in [0, {C})")
    lse = np.logaddexp.reduce(logits, axis=1)
    picked = np.take_along_axis(logits, y[:, None].astype(np.intp), axis=1)[:, 0]
    return float(np.mean(lse - picked, dtype=np.float64))


def _ce_alt_loop(logits, y):
    _ce_validate(logits, y)
    total = 0.0
    for row, label in zip(logits, y):
        m = row.max()
        total += float(m + np.log(np.sum(np.exp(row - m))) - row[label])
    return total / logits.shape[0]


# ======================================================================================================
# Lesson 6 · model_backward
# ======================================================================================================

def _softmax_rows(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _mb_validate(params, cache, y, *, exact_cache=True, check_neg=True, check_len=True, check_params=True,
                 label_kinds="iu"):
    if check_params:
        if not isinstance(params, dict):
            raise TypeError("params must be a dict")
        L = sum(1 for k in params if k.startswith("W"))
        if L < 1 or set(params) != {f"{p}{l}" for l in range(L) for p in "Wb"}:
            raise ValueError("params must hold exactly W0, b0, ..., W{L-1}, b{L-1}")
    else:
        L = sum(1 for k in params if k.startswith("W"))
    if not isinstance(cache, dict):
        raise TypeError("cache must be a dict")
    need = {f"A{l}" for l in range(L)} | {"logits"}
    if (set(cache) != need) if exact_cache else not need <= set(cache):
        raise ValueError(f"cache must have exactly the keys {sorted(need)}")
    logits = cache["logits"]
    if not isinstance(y, np.ndarray) or y.dtype.kind not in label_kinds or y.ndim != 1:
        raise TypeError("y must be a 1-D integer array")
    if check_len and y.shape[0] != logits.shape[0]:
        raise ValueError("y must have one label per row")
    C = logits.shape[1]
    if np.any(y >= C) or (check_neg and np.any(y < 0)):
        raise ValueError(f"y must lie in [0, {C})")
    return L


def _mb_core(params, cache, y, *, mean=True, mask="gt", onehot=True, mask_from="below", bias_reduce="sum",
             key_order="params", inplace_logits=False, promote=False, **validate):
    L = _mb_validate(params, cache, y, **validate)
    logits = cache["logits"]
    n = logits.shape[0]
    if inplace_logits:
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=1, keepdims=True)
        G = logits.copy()
    else:
        G = _softmax_rows(logits)
    if onehot:
        G[np.arange(n), y] -= 1
    if mean:
        G = G / (np.float64(n) if promote else G.dtype.type(n))
    grads = {}
    for l in range(L - 1, -1, -1):
        A = cache[f"A{l}"]
        grads[f"W{l}"] = A.T @ G
        grads[f"b{l}"] = G.sum(axis=0) if bias_reduce == "sum" else G.mean(axis=0)
        if l > 0:
            GW = G @ params[f"W{l}"].T
            if mask_from == "below":
                M = A > 0 if mask == "gt" else A >= 0
                G = GW * M
            else:  # the mask of the ReLU above layer l's output
                above = cache.get(f"A{l + 1}")
                G = GW * (above > 0) if above is not None and above.shape == GW.shape else GW
    if key_order == "params":
        return {k: grads[k] for k in params}
    return grads


def _mb_no_mean(params, cache, y):
    return _mb_core(params, cache, y, mean=False)


def _mb_mask_ge(params, cache, y):
    return _mb_core(params, cache, y, mask="ge")


def _mb_no_onehot(params, cache, y):
    return _mb_core(params, cache, y, onehot=False)


def _mb_mask_of_layer_above(params, cache, y):
    return _mb_core(params, cache, y, mask_from="above")


def _mb_bias_mean(params, cache, y):
    return _mb_core(params, cache, y, bias_reduce="mean")


def _mb_reverse_key_order(params, cache, y):
    return _mb_core(params, cache, y, key_order="backward")


def _mb_softmax_in_place_on_cache(params, cache, y):
    return _mb_core(params, cache, y, inplace_logits=True)


def _mb_float64_divisor(params, cache, y):
    return _mb_core(params, cache, y, promote=True)


def _mb_no_negative_label_check(params, cache, y):
    return _mb_core(params, cache, y, check_neg=False)


def _mb_no_length_check(params, cache, y):
    return _mb_core(params, cache, y, check_len=False)


def _mb_extra_cache_keys(params, cache, y):
    return _mb_core(params, cache, y, exact_cache=False)


def _mb_no_params_check(params, cache, y):
    return _mb_core(params, cache, y, check_params=False)


def _mb_accepts_float_labels(params, cache, y):
    if isinstance(y, np.ndarray) and y.dtype.kind == "f":
        y = y.astype(np.int64)
    return _mb_core(params, cache, y)


def _mb_alt_einsum_onehot(params, cache, y):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    L = len(params) // 2
    if L < 1 or set(params) != {f"{p}{l}" for l in range(L) for p in ("W", "b")}:
        raise ValueError("params must hold W0, b0, ..., W{L-1}, b{L-1}")
    if not isinstance(cache, dict) or set(cache) != {f"A{l}" for l in range(L)} | {"logits"}:
        raise ValueError("cache must hold A0, ..., A{L-1} and logits")
    logits = cache["logits"]
    n, C = logits.shape
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or y.shape != (n,):
        raise TypeError(f"y must be an integer array of shape ({n},)")
    if np.any((y < 0) | (y >= C)):
        raise ValueError(f"y has labels outside [0, {C})")
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    onehot = np.eye(C, dtype=logits.dtype)[y]
    G = (P - onehot) / logits.dtype.type(n)
    out = {}
    for l in reversed(range(L)):
        A = cache[f"A{l}"]
        out[f"W{l}"] = np.einsum("ni,no->io", A, G)
        out[f"b{l}"] = np.add.reduce(G, axis=0)
        if l:
            G = np.where(A > 0, G @ params[f"W{l}"].T, G.dtype.type(0))
    return {k: out[k] for k in params}


# ======================================================================================================

def _imp_fan_out_everywhere(sizes, rng):
    return _imp_core(sizes, rng, fan="out")


MUTANTS = {
    "init_model_params": [
        ("He on the output layer too (contract: 'N(0, 1/sizes[L-1]) for the output layer')", _imp_he_everywhere),
        ("variance used as the standard deviation (contract: 'multiplied by its standard deviation')",
         _imp_variance_as_std),
        ("small random biases (contract: 'b{l} ... zeros', 'The biases take no draws')", _imp_random_biases),
        ("gain 1 on the hidden layers (contract: 'N(0, 2/sizes[l]) if a ReLU follows')", _imp_xavier_hidden),
        ("draws float32 normals directly (contract: 'rng.standard_normal((fan_in, fan_out)) in float64')",
         _imp_float32_stream),
        ("draws (fan_out, fan_in) and transposes (contract: 'rng.standard_normal((fan_in, fan_out))')",
         _imp_transposed_draw),
        ("float64 biases (contract: 'b{l} ... float32')", _imp_float64_biases),
        ("fan-out instead of fan-in (contract: 'N(0, 2/sizes[l])')", _imp_fan_out_everywhere),
        ("accepts True as a width (contract: 'integers (not bool)')", _imp_accepts_bool),
        ("accepts integral float widths (contract: 'not an integer (... TypeError)')", _imp_accepts_float_width),
        ("accepts a NumPy array of sizes (contract: 'sizes that is not a list or tuple (TypeError)')",
         _imp_accepts_array),
        ("rng=None falls back to a fresh global generator (contract: 'a seed or None ... raises TypeError')",
         _imp_none_rng_global),
        ("duck-typed rng: a legacy RandomState is accepted (contract: 'rng is a numpy.random.Generator')",
         _imp_duck_typed_rng),
        ("keys W0, W1, ..., b0, b1, ... (contract: 'keys W0, b0, W1, b1, …')", _imp_weights_then_biases),
        ("draws from a copy of the generator (contract: 'Only the generator's state changes')",
         _imp_draws_from_copy),
    ],
    "relu": [
        ("np.where(x > 0, x, 0): NaN becomes 0 (contract: 'NaN ↦ NaN')", _relu_where),
        ("clips x in place (contract: 'x is read and never written')", _relu_inplace),
        ("np.maximum(x, np.float64(0)): promoted (contract: 'same as x' dtype)", _relu_float64),
        ("x * (x > 0): -inf becomes NaN (contract: '-∞ ↦ 0')", _relu_times_mask),
        ("np.fmax: NaN becomes 0 (contract: 'NaN ↦ NaN')", _relu_fmax),
        ("no validation (contract: 'A Python list or an integer array raises TypeError naming x')",
         _relu_no_validation),
        ("accepts complex arrays (contract: 'float16, float32 or float64')", _relu_accepts_complex),
        ("accepts a Python float (contract: 'x must be a numpy.ndarray')", _relu_accepts_python_float),
        ("returns x itself when nothing is negative (contract: 'out does not share memory with it')",
         _relu_returns_input_if_nonnegative),
        ("(|x| + x) / 2: overflow at float16's max and NaN at -inf (contract: exact max(x, 0))", _relu_abs_trick),
        ("computes in float32 (contract: 'returned ... in x's own dtype')", _relu_float32_compute),
    ],
    "model_forward": [
        ("ReLU after the output layer (contract: 'logits ... no ReLU')", _mf_relu_on_logits),
        ("caches the pre-activations Z (contract: 'cache[\"A{l}\"] ... relu(Z_{l-1})')", _mf_caches_preactivations),
        ("forgets the biases (contract: 'Z = A W_l + b_l')", _mf_no_bias),
        ("copies X into the cache (contract: 'X itself (the same object, not a copy)')", _mf_copies_x),
        ("cache['logits'] is a copy of logits (contract: 'the same array as logits')", _mf_cache_logits_copy),
        ("np.where ReLU: NaN pre-activations become 0 (contract: uses Lesson 2's relu)", _mf_where_relu),
        ("computes in float64 (contract: 'logits ... as the inputs')", _mf_float64),
        ("no chaining check: matmul's error does not name params (contract: 'shapes that do not chain "
         "(ValueError naming params)')", _mf_no_chain_check),
        ("no bias shape check: a (1,) bias broadcasts (contract: 'b{l} as long as W{l} is wide')",
         _mf_no_bias_shape_check),
        ("extra keys ignored (contract: 'keys are exactly W0, b0, …')", _mf_extra_keys_ignored),
        ("integer X accepted (contract: 'X not ... floating point (TypeError naming X)')", _mf_integer_x),
        ("1-D X reshaped to one row (contract: 'X not 2-D ... naming X')", _mf_accepts_1d_x),
    ],
    "softmax": [
        ("no max subtraction (contract: 'with each row's maximum subtracted first')", _sm_no_shift),
        ("one maximum for the whole batch (contract: 'm_i = max_j z_ij', per row)", _sm_global_max),
        ("normalises the columns (contract: 'row-wise')", _sm_axis0),
        ("computes in place in logits and returns it (contract: 'logits is read, never written', new array)",
         _sm_inplace),
        ("subtracts the row maxima in place (contract: 'logits is read, never written')", _sm_subtract_inplace_only),
        ("accepts a Python list (contract: 'A non-array ... raises an error naming logits')", _sm_accepts_list),
        ("treats a 1-D vector as one row (contract: 'A 1-D vector is refused')", _sm_accepts_1d),
        ("subtracts the row mean (contract: 'm_i = max_j z_ij')", _sm_subtract_mean),
        ("computes and returns float64 (contract: 'probs ... as logits')", _sm_float64),
    ],
    "cross_entropy_loss": [
        ("log of the softmax probability (contract: 'Do not call np.log on a probability')", _ce_log_of_softmax),
        ("a sum instead of a mean (contract: 'the mean over the batch')", _ce_sum),
        ("log-sum-exp without the maximum (contract: 'with the row maximum pulled out')", _ce_no_max),
        ("picks with [:, y] (contract: 'Z[np.arange(n), y], not Z[:, y]')", _ce_column_pick),
        ("one maximum for the whole batch (contract: 'm_i = max_j z_ij')", _ce_global_max),
        ("returns np.float64 (contract: 'Python float')", _ce_numpy_scalar),
        ("mean accumulated in the logits' dtype (contract: 'their mean is accumulated in float64')",
         _ce_float32_mean),
        ("negative labels wrap around (contract: 'A label ... negative (ValueError naming y)')",
         _ce_no_negative_check),
        ("boolean labels accepted (contract: 'y integer')", _ce_accepts_bool_labels),
        ("a Python list of labels accepted (contract: 'a 1-D integer numpy.ndarray')", _ce_accepts_list_labels),
        ("(n, 1) labels raveled (contract: 'y: (batch,)', 1-D)", _ce_ravels_2d_labels),
        ("label count not checked: NumPy's IndexError (contract: 'a label count that differs ... naming y')",
         _ce_no_length_check),
        ("integer logits accepted (contract: 'logits ... floating')", _ce_accepts_integer_logits),
        ("empty batch gives NaN (contract: 'empty ... logits (naming logits)')", _ce_empty_batch),
        ("integral float labels cast to int (contract: 'float labels ... error naming y')", _ce_accepts_float_labels),
    ],
    "model_backward": [
        ("forgets the 1/n (contract: 'G_{L-1} = (P - onehot(y))/n')", _mb_no_mean),
        ("mask A >= 0 (contract: '1[A_l > 0]', 'derivative at exactly 0 is taken as 0')", _mb_mask_ge),
        ("softmax without the one-hot (contract: 'P - onehot(y)')", _mb_no_onehot),
        ("mask of the layer above (contract: 'the mask ... comes from layer l's own cached input')",
         _mb_mask_of_layer_above),
        ("bias gradient as a batch mean (contract: 'a sum, not a mean')", _mb_bias_mean),
        ("grads keys in backward order W{L-1}, b{L-1}, ... (contract: 'exactly the keys of params, so an "
         "optimizer can walk both dicts together')", _mb_reverse_key_order),
        ("softmax computed in place in cache['logits'] (contract: 'the cache ... read only')",
         _mb_softmax_in_place_on_cache),
        ("divides by np.float64(n): float32 promoted (contract: 'divide by n in G's dtype')", _mb_float64_divisor),
        ("negative labels wrap around (contract: 'labels out of range (naming y)')", _mb_no_negative_label_check),
        ("label count not checked (contract: 'labels ... of the wrong length (naming y)')", _mb_no_length_check),
        ("extra cache keys accepted (contract: 'cache a dict with exactly the keys A0, …, A{L-1}, logits')",
         _mb_extra_cache_keys),
        ("params not validated (contract: 'inconsistent params (naming params)')", _mb_no_params_check),
        ("float labels cast to int (contract: 'y a 1-D integer array')", _mb_accepts_float_labels),
    ],
}

ALTERNATIVES = {
    "init_model_params": [
        ("one draw for all weights, split in order (same stream)", _imp_alt_one_draw_split),
        ("cast the float64 draw to float32, then scale in float32 (agrees to float32 rounding, the stated metric)",
         _imp_alt_cast_then_scale),
    ],
    "relu": [
        ("np.clip(x, 0, None)", _relu_alt_clip),
        ("copy, then zero the negative entries of the copy", _relu_alt_copy_and_zero),
        ("np.maximum into an empty_like buffer", _relu_alt_out_buffer),
    ],
    "model_forward": [("einsum for the affine maps", _mf_alt_einsum)],
    "softmax": [
        ("exp of the log-softmax", _sm_alt_log_softmax),
        ("a loop over rows", _sm_alt_rowwise),
    ],
    "cross_entropy_loss": [
        ("np.logaddexp.reduce and take_along_axis", _ce_alt_logaddexp_reduce),
        ("a Python loop over examples, float64 total", _ce_alt_loop),
    ],
    "model_backward": [("np.eye one-hot, einsum, np.where mask", _mb_alt_einsum_onehot)],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _mf_alt_transposed_products(params, X):
    L = _mf_validate(params, X)
    cache, A = {"A0": X}, X
    for l in range(L):
        Z = (params[f"W{l}"].T @ A.T).T + params[f"b{l}"]  # (batch, h_{l+1}), another product order
        if l == L - 1:
            cache["logits"] = Z
            return Z, cache
        A = Z * (Z > 0)  # relu; -0.0 where Z < 0 equals 0
        cache[f"A{l + 1}"] = A


def _mb_alt_float64_then_cast(params, cache, y):
    """The softmax gradient in float64 (shifted exponentials), cast once to the logits' dtype; then the
    layers from the top, with A_l > 0 as the ReLU gate."""
    L = _mb_validate(params, cache, y)
    logits = cache["logits"]
    z = logits.astype(np.float64)
    n = z.shape[0]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    G64 = p / p.sum(axis=1, keepdims=True)
    G64[np.arange(n), y] -= 1.0
    G = (G64 / n).astype(logits.dtype)
    grads = {}
    for l in range(L - 1, -1, -1):
        A = cache[f"A{l}"]
        grads[f"W{l}"] = A.T @ G
        grads[f"b{l}"] = np.add.reduce(G, axis=0)
        if l > 0:
            G = np.where(A > 0, G @ params[f"W{l}"].T, 0).astype(G.dtype)
    return {k: grads[k] for k in params}


for _name, _entry in [
    ("model_forward", ("transposed products, Z * (Z > 0) for the ReLU", _mf_alt_transposed_products)),
    ("model_backward", ("softmax gradient in float64 cast once, np.where gate", _mb_alt_float64_then_cast)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
