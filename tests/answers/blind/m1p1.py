"""Red team, Part 1 (MLP forward and backward core): wrong answers and correct alternatives written from the
release notebooks only."""

from __future__ import annotations

import math

import numpy as np


# --------------------------------------------------------------------------------------------------------------
# shared student-style helpers (each written from the lessons' contracts)
# --------------------------------------------------------------------------------------------------------------
def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_size(name, value):
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")


def _check_rng(rng):
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _check_noise(noise_std):
    if isinstance(noise_std, (bool, np.bool_)) or not isinstance(noise_std, (int, float, np.integer, np.floating)):
        raise TypeError(f"noise_std must be a real number, got {noise_std!r}")
    if not math.isfinite(float(noise_std)) or noise_std < 0:
        raise ValueError(f"noise_std must be finite and >= 0, got {noise_std!r}")


def _is_float_array(x) -> bool:
    return isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating)


def _require_float(name, x):
    if not _is_float_array(x):
        raise TypeError(f"{name} must be a floating-point numpy array, got {type(x).__name__}"
                        f"{'' if not isinstance(x, np.ndarray) else ' of ' + str(x.dtype)}")


# --------------------------------------------------------------------------------------------------------------
# Lesson 1 · make_synthetic_regression_batch
# --------------------------------------------------------------------------------------------------------------
def _batch_ok_core(n, d_in, d_out, rng, noise_std):
    W = rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)
    X = rng.standard_normal((n, d_in))
    E = rng.standard_normal((n, d_out))
    Y = X @ W + noise_std * E
    return X.astype(np.float32), Y.astype(np.float32)


def _batch_accepts_bool(n, d_in, d_out, rng, noise_std=0.1):
    for name, v in (("n", n), ("d_in", d_in), ("d_out", d_out)):
        if not isinstance(v, (int, np.integer)):  # bool is an int subclass: True slips through
            raise TypeError(f"{name} must be an integer, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v!r}")
    _check_rng(rng)
    _check_noise(noise_std)
    return _batch_ok_core(int(n), int(d_in), int(d_out), rng, noise_std)


def _batch_accepts_integral_float(n, d_in, d_out, rng, noise_std=0.1):
    sizes = []
    for name, v in (("n", n), ("d_in", d_in), ("d_out", d_out)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or int(v) != v:
            raise TypeError(f"{name} must be an integer, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v!r}")
        sizes.append(int(v))
    _check_rng(rng)
    _check_noise(noise_std)
    return _batch_ok_core(*sizes, rng, noise_std)


def _batch_nan_inf_noise(n, d_in, d_out, rng, noise_std=0.1):
    for name, v in (("n", n), ("d_in", d_in), ("d_out", d_out)):
        _check_size(name, v)
    _check_rng(rng)
    if noise_std < 0:  # nan < 0 and inf < 0 are both False
        raise ValueError(f"noise_std must be >= 0, got {noise_std!r}")
    return _batch_ok_core(n, d_in, d_out, rng, noise_std)


def _batch_duck_typed_rng(n, d_in, d_out, rng, noise_std=0.1):
    for name, v in (("n", n), ("d_in", d_in), ("d_out", d_out)):
        _check_size(name, v)
    if not hasattr(rng, "standard_normal"):  # legacy RandomState (and the np.random module) pass
        raise TypeError(f"rng must be a numpy.random.Generator, got {rng!r}")
    _check_noise(noise_std)
    return _batch_ok_core(n, d_in, d_out, rng, noise_std)


def _batch_float32_arithmetic(n, d_in, d_out, rng, noise_std=0.1):
    for name, v in (("n", n), ("d_in", d_in), ("d_out", d_out)):
        _check_size(name, v)
    _check_rng(rng)
    _check_noise(noise_std)
    W = (rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)).astype(np.float32)
    X = rng.standard_normal((n, d_in)).astype(np.float32)
    E = rng.standard_normal((n, d_out)).astype(np.float32)
    Y = X @ W + np.float32(noise_std) * E  # float32 all the way, not "float64 then one cast"
    return X, Y


def _batch_skips_noise_draw(n, d_in, d_out, rng, noise_std=0.1):
    for name, v in (("n", n), ("d_in", d_in), ("d_out", d_out)):
        _check_size(name, v)
    _check_rng(rng)
    _check_noise(noise_std)
    W = rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)
    X = rng.standard_normal((n, d_in))
    Y = X @ W
    if noise_std != 0:  # "no noise, no need to draw it": the generator then advances less
        Y = Y + noise_std * rng.standard_normal((n, d_out))
    return X.astype(np.float32), Y.astype(np.float32)


def _batch_unnamed_size_errors(n, d_in, d_out, rng, noise_std=0.1):
    for v in (n, d_in, d_out):
        if not _is_int(v):
            raise TypeError(f"sizes must be integers, got {v!r}")
        if v < 1:
            raise ValueError(f"sizes must be positive, got {v!r}")
    _check_rng(rng)
    _check_noise(noise_std)
    return _batch_ok_core(n, d_in, d_out, rng, noise_std)


def _batch_valueerror_for_noninteger(n, d_in, d_out, rng, noise_std=0.1):
    for name, v in (("n", n), ("d_in", d_in), ("d_out", d_out)):
        if not _is_int(v) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    _check_rng(rng)
    _check_noise(noise_std)
    return _batch_ok_core(n, d_in, d_out, rng, noise_std)


def _batch_alt_one_draw(n, d_in, d_out, rng, noise_std=0.1):
    _check_noise(noise_std)  # validation in another order
    _check_rng(rng)
    for name, v in (("d_out", d_out), ("d_in", d_in), ("n", n)):
        _check_size(name, v)
    z = rng.standard_normal(d_in * d_out + n * d_in + n * d_out)  # one call, the same stream
    W = z[: d_in * d_out].reshape(d_in, d_out) / math.sqrt(d_in)
    X = z[d_in * d_out: d_in * d_out + n * d_in].reshape(n, d_in)
    E = z[d_in * d_out + n * d_in:].reshape(n, d_out)
    Y = noise_std * E + np.matmul(X, W)
    return np.array(X, dtype=np.float32), Y.astype(np.float32)


# --------------------------------------------------------------------------------------------------------------
# Lesson 2 · init_mlp_params
# --------------------------------------------------------------------------------------------------------------
def _init_ok_core(d_in, d_hidden, d_out, rng):
    W1 = rng.standard_normal((d_in, d_hidden)) * np.sqrt(2.0 / d_in)
    W2 = rng.standard_normal((d_hidden, d_out)) * np.sqrt(1.0 / d_hidden)
    return {"W1": W1.astype(np.float32), "b1": np.zeros(d_hidden, np.float32),
            "W2": W2.astype(np.float32), "b2": np.zeros(d_out, np.float32)}


def _init_validate(d_in, d_hidden, d_out, rng):
    for name, v in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)):
        _check_size(name, v)
    _check_rng(rng)


def _init_accepts_bool(d_in, d_hidden, d_out, rng):
    for name, v in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)):
        if not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v!r}")
    _check_rng(rng)
    return _init_ok_core(int(d_in), int(d_hidden), int(d_out), rng)


def _init_w1_torch_layout(d_in, d_hidden, d_out, rng):
    _init_validate(d_in, d_hidden, d_out, rng)
    W1 = rng.standard_normal((d_hidden, d_in)).T * np.sqrt(2.0 / d_in)  # drawn as (out, in), then transposed
    W2 = rng.standard_normal((d_hidden, d_out)) * np.sqrt(1.0 / d_hidden)
    return {"W1": W1.astype(np.float32), "b1": np.zeros(d_hidden, np.float32),
            "W2": W2.astype(np.float32), "b2": np.zeros(d_out, np.float32)}


def _init_w2_torch_layout(d_in, d_hidden, d_out, rng):
    _init_validate(d_in, d_hidden, d_out, rng)
    W1 = rng.standard_normal((d_in, d_hidden)) * np.sqrt(2.0 / d_in)
    W2 = rng.standard_normal((d_out, d_hidden)).T * np.sqrt(1.0 / d_hidden)  # (out, in) then transposed
    return {"W1": W1.astype(np.float32), "b1": np.zeros(d_hidden, np.float32),
            "W2": W2.astype(np.float32), "b2": np.zeros(d_out, np.float32)}


def _init_scaled_in_float32(d_in, d_hidden, d_out, rng):
    _init_validate(d_in, d_hidden, d_out, rng)
    W1 = rng.standard_normal((d_in, d_hidden)).astype(np.float32) * np.float32(np.sqrt(2.0 / d_in))
    W2 = rng.standard_normal((d_hidden, d_out)).astype(np.float32) * np.float32(np.sqrt(1.0 / d_hidden))
    return {"W1": W1, "b1": np.zeros(d_hidden, np.float32), "W2": W2, "b2": np.zeros(d_out, np.float32)}


def _init_duck_typed_rng(d_in, d_hidden, d_out, rng):
    for name, v in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)):
        _check_size(name, v)
    if not hasattr(rng, "standard_normal"):
        raise TypeError(f"rng must be a numpy.random.Generator, got {rng!r}")
    return _init_ok_core(d_in, d_hidden, d_out, rng)


def _init_none_rng_valueerror(d_in, d_hidden, d_out, rng):
    for name, v in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)):
        _check_size(name, v)
    if rng is None:
        raise ValueError("rng is required: pass np.random.default_rng(seed)")
    _check_rng(rng)
    return _init_ok_core(d_in, d_hidden, d_out, rng)


def _init_forgets_d_out(d_in, d_hidden, d_out, rng):
    for name, v in (("d_in", d_in), ("d_hidden", d_hidden)):  # d_out never validated
        _check_size(name, v)
    _check_rng(rng)
    return _init_ok_core(d_in, d_hidden, d_out, rng)


def _init_rejects_numpy_int(d_in, d_hidden, d_out, rng):
    for name, v in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)):
        if type(v) is not int:
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v!r}")
    _check_rng(rng)
    return _init_ok_core(d_in, d_hidden, d_out, rng)


def _init_alt_rng_normal(d_in, d_hidden, d_out, rng):
    _check_rng(rng)
    for name, v in (("d_out", d_out), ("d_hidden", d_hidden), ("d_in", d_in)):
        _check_size(name, v)
    W1 = rng.normal(0.0, math.sqrt(2.0 / d_in), size=(d_in, d_hidden))
    W2 = rng.normal(0.0, math.sqrt(1.0 / d_hidden), size=(d_hidden, d_out))
    params = {"W1": W1, "b1": np.zeros(d_hidden), "W2": W2, "b2": np.zeros(d_out)}
    return {k: v.astype(np.float32) for k, v in params.items()}


# --------------------------------------------------------------------------------------------------------------
# Lesson 3 · linear_forward
# --------------------------------------------------------------------------------------------------------------
def _lin_validate_shapes(X, W, b):
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (batch, d_in), got shape {X.shape}")
    if W.ndim != 2:
        raise ValueError(f"W must be 2-D (d_in, d_out), got shape {W.shape}")
    if b.ndim != 1:
        raise ValueError(f"b must be 1-D (d_out,), got shape {b.shape}")
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"W has {W.shape[0]} rows but X has {X.shape[1]} features: X {X.shape}, W {W.shape}")
    if b.shape[0] != W.shape[1]:
        raise ValueError(f"b has shape {b.shape}, expected ({W.shape[1]},) for W {W.shape}")


def _lin_ok(X, W, b):
    for name, a in (("X", X), ("W", W), ("b", b)):
        _require_float(name, a)
    _lin_validate_shapes(X, W, b)
    return X @ W + b


def _lin_accepts_int_arrays(X, W, b):
    for name, a in (("X", X), ("W", W), ("b", b)):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name} must be a numpy array")
    _lin_validate_shapes(X, W, b)
    return X @ W + b


def _lin_accepts_lists(X, W, b):
    X, W, b = np.asarray(X), np.asarray(W), np.asarray(b)
    for name, a in (("X", X), ("W", W), ("b", b)):
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{name} must be floating point, got {a.dtype}")
    _lin_validate_shapes(X, W, b)
    return X @ W + b


def _lin_dtype_follows_x(X, W, b):
    for name, a in (("X", X), ("W", W), ("b", b)):
        _require_float(name, a)
    _lin_validate_shapes(X, W, b)
    return (X @ W + b).astype(X.dtype)  # "the output has the input's dtype"


def _lin_accepts_1d_x(X, W, b):
    for name, a in (("X", X), ("W", W), ("b", b)):
        _require_float(name, a)
    if X.ndim not in (1, 2):
        raise ValueError(f"X must be 1-D or 2-D, got shape {X.shape}")
    if W.ndim != 2:
        raise ValueError(f"W must be 2-D, got shape {W.shape}")
    if b.ndim != 1:
        raise ValueError(f"b must be 1-D, got shape {b.shape}")
    if X.shape[-1] != W.shape[0]:
        raise ValueError(f"W has {W.shape[0]} rows but X has {X.shape[-1]} features")
    if b.shape[0] != W.shape[1]:
        raise ValueError(f"b has shape {b.shape}, expected ({W.shape[1]},)")
    return X @ W + b


def _lin_accepts_length1_bias(X, W, b):
    for name, a in (("X", X), ("W", W), ("b", b)):
        _require_float(name, a)
    if X.ndim != 2 or W.ndim != 2:
        raise ValueError(f"X and W must be 2-D, got X {X.shape}, W {W.shape}")
    if b.ndim != 1 or b.shape[0] not in (1, W.shape[1]):  # "a single bias broadcasts fine"
        raise ValueError(f"b must have shape ({W.shape[1]},), got {b.shape}")
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"W has {W.shape[0]} rows but X has {X.shape[1]} features")
    return X @ W + b


def _lin_alt_inplace_bias(X, W, b):
    for name, a in (("b", b), ("W", W), ("X", X)):
        _require_float(name, a)
    _lin_validate_shapes(X, W, b)
    Z = np.matmul(X, W)
    if Z.dtype == np.result_type(Z, b):
        Z += b  # Z is new, so adding in place is safe
        return Z
    return Z + b


def _lin_alt_augmented(X, W, b):
    for name, a in (("X", X), ("W", W), ("b", b)):
        _require_float(name, a)
    _lin_validate_shapes(X, W, b)
    ones = np.ones((X.shape[0], 1), dtype=X.dtype)
    return np.hstack([X, ones]) @ np.vstack([W, b[None, :]])  # the lesson's [X 1][W; b^T]


# --------------------------------------------------------------------------------------------------------------
# Lesson 4 · relu_forward
# --------------------------------------------------------------------------------------------------------------
def _relu_alias_when_nothing_clipped(Z):
    _require_float("Z", Z)
    if not np.any(Z < 0):
        return Z  # "nothing to clip, no need for a copy"
    return np.maximum(Z, Z.dtype.type(0))


def _relu_only_rejects_integers(Z):
    if not isinstance(Z, np.ndarray) or np.issubdtype(Z.dtype, np.integer):
        raise TypeError(f"Z must be a float array, got {Z!r}")
    return np.maximum(Z, Z.dtype.type(0))


def _relu_accepts_lists(Z):
    Z = np.asarray(Z)
    if not np.issubdtype(Z.dtype, np.floating):
        raise TypeError(f"Z must be floating point, got {Z.dtype}")
    return np.maximum(Z, Z.dtype.type(0))


def _relu_valueerror_for_int(Z):
    if not isinstance(Z, np.ndarray):
        raise TypeError("Z must be a numpy array")
    if not np.issubdtype(Z.dtype, np.floating):
        raise ValueError(f"Z must be floating point, got {Z.dtype}")
    return np.maximum(Z, Z.dtype.type(0))


def _relu_fmax(Z):
    _require_float("Z", Z)
    return np.fmax(Z, Z.dtype.type(0))  # fmax ignores nan: a diverged run looks like zeros


def _relu_alt_copy_then_clip(Z):
    _require_float("Z", Z)
    A = Z.copy()
    A[A < 0] = 0
    return A


def _relu_alt_clip(Z):
    _require_float("Z", Z)
    return Z.clip(min=Z.dtype.type(0))


# --------------------------------------------------------------------------------------------------------------
# Lesson 5 · mlp_forward
# --------------------------------------------------------------------------------------------------------------
_PARAM_KEYS = ("W1", "b1", "W2", "b2")


def _mlpf_validate(params, X, *, exact_keys=True, check_dtype=True, check_X_dtype=True):
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    missing = [k for k in _PARAM_KEYS if k not in params]
    extra = [k for k in params if k not in _PARAM_KEYS]
    if missing or (exact_keys and extra):
        raise ValueError(f"params: missing keys {missing}, unexpected keys {extra}")
    W1, b1, W2, b2 = (params[k] for k in _PARAM_KEYS)
    for k, ndim in zip(_PARAM_KEYS, (2, 1, 2, 1)):
        v = params[k]
        if not isinstance(v, np.ndarray) or (check_dtype and not np.issubdtype(v.dtype, np.floating)):
            raise TypeError(f"params[{k!r}] must be a floating-point array")
        if v.ndim != ndim:
            raise ValueError(f"params[{k!r}] must be {ndim}-D, got shape {v.shape}")
    if not (W1.shape[1] == b1.shape[0] == W2.shape[0]):
        raise ValueError(f"W1 {W1.shape}, b1 {b1.shape} and W2 {W2.shape} do not chain")
    if W2.shape[1] != b2.shape[0]:
        raise ValueError(f"W2 {W2.shape} and b2 {b2.shape} do not agree")
    if not isinstance(X, np.ndarray) or (check_X_dtype and not np.issubdtype(X.dtype, np.floating)):
        raise TypeError("X must be a floating-point array")
    if X.ndim != 2 or X.shape[1] != W1.shape[0]:
        raise ValueError(f"X has shape {X.shape}, expected (batch, {W1.shape[0]})")


def _mlpf_core(params, X):
    Z1 = X @ params["W1"] + params["b1"]
    A1 = np.maximum(Z1, Z1.dtype.type(0))
    Y_hat = A1 @ params["W2"] + params["b2"]
    return Y_hat, Z1, A1


def _mlpf_copies_x(params, X):
    _mlpf_validate(params, X)
    Y_hat, Z1, A1 = _mlpf_core(params, X)
    return Y_hat, {"X": X.copy(), "Z1": Z1, "A1": A1}  # "the cache should own its arrays"


def _mlpf_ignores_extra_keys(params, X):
    _mlpf_validate(params, X, exact_keys=False)
    Y_hat, Z1, A1 = _mlpf_core(params, X)
    return Y_hat, {"X": X, "Z1": Z1, "A1": A1}


def _mlpf_accepts_int_params(params, X):
    _mlpf_validate(params, X, check_dtype=False)
    Y_hat, Z1, A1 = _mlpf_core(params, X)
    return Y_hat, {"X": X, "Z1": Z1, "A1": A1}


def _mlpf_accepts_int_x(params, X):
    _mlpf_validate(params, X, check_X_dtype=False)
    Y_hat, Z1, A1 = _mlpf_core(params, X)
    return Y_hat, {"X": X, "Z1": Z1, "A1": A1}


def _lesson3_linear_forward(X, W, b):
    """Lesson 3's function, as the student wrote it: its errors name X, W and b."""
    return _lin_ok(X, W, b)


def _mlpf_delegates_shape_checks(params, X):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    missing = [k for k in _PARAM_KEYS if k not in params]
    extra = [k for k in params if k not in _PARAM_KEYS]
    if missing or extra:
        raise ValueError(f"params: missing keys {missing}, unexpected keys {extra}")
    # shapes are checked by linear_forward anyway ... but its messages say "W"/"b", not "W2"/"b1"
    Z1 = _lesson3_linear_forward(X, params["W1"], params["b1"])
    A1 = np.maximum(Z1, Z1.dtype.type(0))
    Y_hat = _lesson3_linear_forward(A1, params["W2"], params["b2"])
    return Y_hat, {"X": X, "Z1": Z1, "A1": A1}


def _mlpf_alt_inline(params, X):
    _mlpf_validate(params, X)
    Z1 = np.dot(X, params["W1"]) + params["b1"]
    A1 = np.where(Z1 > 0, Z1, Z1.dtype.type(0))
    cache = {"X": X, "Z1": Z1, "A1": A1}
    return np.dot(A1, params["W2"]) + params["b2"], cache


# --------------------------------------------------------------------------------------------------------------
# Lesson 6 · mse_loss_and_grad
# --------------------------------------------------------------------------------------------------------------
def _mse_validate(Y_hat, Y, *, check_dtype=True, allow_column=False):
    for name, a in (("Y_hat", Y_hat), ("Y", Y)):
        if not isinstance(a, np.ndarray) or (check_dtype and not np.issubdtype(a.dtype, np.floating)):
            raise TypeError(f"{name} must be a floating-point numpy array")
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if Y.shape != Y_hat.shape and not (allow_column and Y.shape == (Y_hat.shape[0], 1)):
        raise ValueError(f"Y has shape {Y.shape} but Y_hat has shape {Y_hat.shape}")


def _mse_float32_loss(Y_hat, Y):
    _mse_validate(Y_hat, Y)
    E = Y_hat - Y
    loss = float(np.mean(E * E))  # accumulated in the inputs' dtype
    return loss, ((2.0 / E.size) * E).astype(Y_hat.dtype, copy=False)


def _mse_grad_promotes(Y_hat, Y):
    _mse_validate(Y_hat, Y)
    E = Y_hat - Y
    loss = float(np.mean(np.square(E, dtype=np.float64)))
    return loss, 2.0 * E / E.size  # dtype of Y_hat - Y, not of Y_hat


def _mse_numpy_scalar_loss(Y_hat, Y):
    _mse_validate(Y_hat, Y)
    E = Y_hat - Y
    loss = np.mean(np.square(E, dtype=np.float64))  # np.float64, not a Python float
    return loss, ((2.0 / E.size) * E).astype(Y_hat.dtype, copy=False)


def _mse_broadcast_column(Y_hat, Y):
    _mse_validate(Y_hat, Y, allow_column=True)
    E = Y_hat - Y
    loss = float(np.mean(np.square(E, dtype=np.float64)))
    return loss, ((2.0 / E.size) * E).astype(Y_hat.dtype, copy=False)


def _mse_accepts_ints(Y_hat, Y):
    _mse_validate(Y_hat, Y, check_dtype=False)
    E = Y_hat - Y
    loss = float(np.mean(np.square(E, dtype=np.float64)))
    return loss, (2.0 / E.size) * E


def _mse_alt_einsum(Y_hat, Y):
    _mse_validate(Y_hat, Y)
    E = Y_hat - Y
    E64 = E.astype(np.float64)
    loss = float(np.einsum("ij,ij->", E64, E64) / E.size)
    return loss, (2 * E / E.size).astype(Y_hat.dtype)


# --------------------------------------------------------------------------------------------------------------
# Lesson 7 · linear_backward
# --------------------------------------------------------------------------------------------------------------
def _lb_validate(dOut, X, W, *, check_W=True, check_dtype=True):
    for name, a in (("dOut", dOut), ("X", X), ("W", W)):
        if not isinstance(a, np.ndarray) or (check_dtype and not np.issubdtype(a.dtype, np.floating)):
            raise ValueError(f"{name} must be a floating-point array")
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if dOut.shape[0] != X.shape[0]:
        raise ValueError(f"dOut has batch {dOut.shape[0]} but X has batch {X.shape[0]}")
    if check_W and (W.shape[0] != X.shape[1] or W.shape[1] != dOut.shape[1]):
        raise ValueError(f"W has shape {W.shape}, expected ({X.shape[1]}, {dOut.shape[1]})")


def _lb_db_mean(dOut, X, W):
    _lb_validate(dOut, X, W)
    return dOut @ W.T, X.T @ dOut, dOut.mean(axis=0)


def _lb_no_w_check(dOut, X, W):
    _lb_validate(dOut, X, W, check_W=False)
    return dOut @ W.T, X.T @ dOut, dOut.sum(axis=0)


def _lb_atleast_2d(dOut, X, W):
    dOut, X = np.atleast_2d(dOut), np.atleast_2d(X)  # "a 1-D array is a batch of one"
    _lb_validate(dOut, X, W)
    return dOut @ W.T, X.T @ dOut, dOut.sum(axis=0)


def _lb_accepts_ints(dOut, X, W):
    _lb_validate(dOut, X, W, check_dtype=False)
    return dOut @ W.T, X.T @ dOut, dOut.sum(axis=0)


def _lb_db_float32(dOut, X, W):
    _lb_validate(dOut, X, W)
    return dOut @ W.T, X.T @ dOut, np.sum(dOut, axis=0, dtype=np.float32)  # "gradients are float32"


def _lb_alt_transposes(dOut, X, W):
    _lb_validate(dOut, X, W)
    dX = (W @ dOut.T).T
    dW = (dOut.T @ X).T
    db = np.einsum("ik->k", dOut)
    return dX, dW, db


# --------------------------------------------------------------------------------------------------------------
# Lesson 8 · relu_backward
# --------------------------------------------------------------------------------------------------------------
def _rb_validate(dA, Z, *, bool_ok=False, broadcast_ok=False):
    if not _is_float_array(dA):
        raise TypeError("dA must be a floating-point array")
    if not isinstance(Z, np.ndarray) or not (np.issubdtype(Z.dtype, np.floating)
                                             or (bool_ok and Z.dtype == np.bool_)):
        raise TypeError(f"Z must be a floating-point array, got {getattr(Z, 'dtype', type(Z))}")
    if broadcast_ok:
        try:
            ok = np.broadcast_shapes(dA.shape, Z.shape) == dA.shape
        except ValueError:
            ok = False
    else:
        ok = dA.shape == Z.shape
    if not ok:
        raise ValueError(f"dA {dA.shape} and Z {Z.shape} must have the same shape")


def _rb_where_hides_nan(dA, Z):
    _rb_validate(dA, Z)
    return np.where(Z > 0, dA, dA.dtype.type(0))


def _rb_mask_in_z_dtype(dA, Z):
    _rb_validate(dA, Z)
    return dA * (Z > 0).astype(Z.dtype)


def _rb_accepts_bool_mask(dA, Z):
    _rb_validate(dA, Z, bool_ok=True)
    return dA * (Z > 0)


def _rb_accepts_broadcast(dA, Z):
    _rb_validate(dA, Z, broadcast_ok=True)
    return dA * (Z > 0)


def _rb_clamps_z_in_place(dA, Z):
    _rb_validate(dA, Z)
    np.maximum(Z, 0, out=Z)  # reuse Z's memory for the mask computation
    return dA * (Z > 0)


def _rb_alias_when_all_open(dA, Z):
    _rb_validate(dA, Z)
    mask = Z > 0
    if mask.all():
        return dA
    return dA * mask


def _rb_alt_where(dA, Z):
    _rb_validate(dA, Z)
    return np.where(Z > 0, dA, dA * 0)


def _rb_alt_copy_and_zero(dA, Z):
    _rb_validate(dA, Z)
    dZ = dA.copy()
    closed = ~(Z > 0)
    dZ[closed] = dZ[closed] * 0  # keeps nan * 0 = nan
    return dZ


# --------------------------------------------------------------------------------------------------------------
# Lesson 9 · first_linear_backward
# --------------------------------------------------------------------------------------------------------------
def _flb_validate(dOut, X, *, check_dtype=True, check_dOut_rank=True, name_both=True):
    for name, a in (("dOut", dOut), ("X", X)):
        if not isinstance(a, np.ndarray) or (check_dtype and not np.issubdtype(a.dtype, np.floating)):
            raise TypeError(f"{name} must be a floating-point numpy array")
        if a.ndim != 2 and (name == "X" or check_dOut_rank):
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if dOut.shape[0] != X.shape[0]:
        if name_both:
            raise ValueError(f"dOut {dOut.shape} and X {X.shape} have different batch sizes")
        raise ValueError(f"X has {X.shape[0]} rows, expected {dOut.shape[0]}")


def _flb_accepts_ints(dOut, X):
    _flb_validate(dOut, X, check_dtype=False)
    return X.T @ dOut, dOut.sum(axis=0)


def _flb_accepts_lists(dOut, X):
    dOut, X = np.asarray(dOut), np.asarray(X)
    _flb_validate(dOut, X)
    return X.T @ dOut, dOut.sum(axis=0)


def _flb_names_only_x(dOut, X):
    _flb_validate(dOut, X, name_both=False)
    return X.T @ dOut, dOut.sum(axis=0)


def _flb_1d_dout(dOut, X):
    _flb_validate(dOut, X, check_dOut_rank=False)
    return X.T @ dOut, dOut.sum(axis=0)


def _flb_computes_dx(dOut, X):
    _flb_validate(dOut, X)
    W_dummy = np.zeros((X.shape[1], dOut.shape[1]), dtype=dOut.dtype)  # reuse Lesson 7's three gradients
    dX = dOut @ W_dummy.T  # computed, then thrown away
    dW, db = X.T @ dOut, dOut.sum(axis=0)
    del dX
    return dW, db


def _flb_alt_tensordot(dOut, X):
    _flb_validate(dOut, X)
    dW = np.tensordot(X, dOut, axes=([0], [0]))
    db = np.add.reduce(dOut, axis=0)
    return (dW, db)


# --------------------------------------------------------------------------------------------------------------
# Lesson 10 · mlp_backward
# --------------------------------------------------------------------------------------------------------------
def _mlpb_validate(params, cache, dY_hat, *, check_width=True, check_biases=True, check_cache_rows=True,
                   check_dtype=True):
    if not isinstance(params, dict) or not isinstance(cache, dict):
        raise TypeError("params and cache must be dicts")
    for k in _PARAM_KEYS:
        if k not in params:
            raise ValueError(f"params is missing {k!r}")
    for k in ("X", "Z1", "A1"):
        if k not in cache:
            raise ValueError(f"cache is missing {k!r}")
    arrays = {**{k: params[k] for k in _PARAM_KEYS}, "X": cache["X"], "Z1": cache["Z1"], "A1": cache["A1"],
              "dY_hat": dY_hat}
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray) or (check_dtype and not np.issubdtype(a.dtype, np.floating)):
            raise TypeError(f"{name} must be a floating-point numpy array")
        want = 1 if name in ("b1", "b2") else 2
        if a.ndim != want:
            raise ValueError(f"{name} must be {want}-D, got shape {a.shape}")
    X, Z1, A1 = cache["X"], cache["Z1"], cache["A1"]
    W1, b1, W2, b2 = (params[k] for k in _PARAM_KEYS)
    n, d_in = X.shape
    d_h, d_out = W2.shape
    if W1.shape != (d_in, d_h):
        raise ValueError(f"W1 has shape {W1.shape}, expected ({d_in}, {d_h})")
    if check_biases and b1.shape != (d_h,):
        raise ValueError(f"b1 has shape {b1.shape}, expected ({d_h},)")
    if check_biases and b2.shape != (d_out,):
        raise ValueError(f"b2 has shape {b2.shape}, expected ({d_out},)")
    if check_cache_rows:
        for name, a in (("Z1", Z1), ("A1", A1)):
            if a.shape != (n, d_h):
                raise ValueError(f"{name} has shape {a.shape}, expected ({n}, {d_h})")
    if dY_hat.shape[0] != n or (check_width and dY_hat.shape[1] != d_out):
        raise ValueError(f"dY_hat has shape {dY_hat.shape}, expected ({n}, {d_out})")


def _mlpb_core(params, cache, dY_hat):
    X, Z1, A1 = cache["X"], cache["Z1"], cache["A1"]
    dW2 = A1.T @ dY_hat
    db2 = dY_hat.sum(axis=0)
    dA1 = dY_hat @ params["W2"].T
    dZ1 = dA1 * (Z1 > 0)
    return {"W1": X.T @ dZ1, "b1": dZ1.sum(axis=0), "W2": dW2, "b2": db2}


def _mlpb_reuses_z1_buffer(params, cache, dY_hat):
    _mlpb_validate(params, cache, dY_hat)
    X, Z1, A1 = cache["X"], cache["Z1"], cache["A1"]
    dW2 = A1.T @ dY_hat
    db2 = dY_hat.sum(axis=0)
    dA1 = dY_hat @ params["W2"].T
    dZ1 = np.multiply(dA1, Z1 > 0, out=Z1)  # "Z1 is not needed any more": save an (n, d_h) buffer
    return {"W1": X.T @ dZ1, "b1": dZ1.sum(axis=0), "W2": dW2, "b2": db2}


def _mlpb_no_width_check(params, cache, dY_hat):
    _mlpb_validate(params, cache, dY_hat, check_width=False)
    return _mlpb_core(params, cache, dY_hat)


def _mlpb_no_bias_check(params, cache, dY_hat):
    _mlpb_validate(params, cache, dY_hat, check_biases=False)
    return _mlpb_core(params, cache, dY_hat)


def _mlpb_no_cache_consistency(params, cache, dY_hat):
    _mlpb_validate(params, cache, dY_hat, check_cache_rows=False)
    return _mlpb_core(params, cache, dY_hat)


def _mlpb_accepts_ints(params, cache, dY_hat):
    _mlpb_validate(params, cache, dY_hat, check_dtype=False)
    return _mlpb_core(params, cache, dY_hat)


def _mlpb_alt_einsum(params, cache, dY_hat):
    _mlpb_validate(params, cache, dY_hat)
    X, Z1, A1 = cache["X"], cache["Z1"], cache["A1"]
    G = dY_hat
    dZ1 = np.einsum("nk,hk->nh", G, params["W2"]) * (Z1 > 0)
    return {"W2": np.einsum("nh,nk->hk", A1, G), "b2": G.sum(axis=0),
            "W1": np.einsum("nd,nh->dh", X, dZ1), "b1": dZ1.sum(axis=0)}


# --------------------------------------------------------------------------------------------------------------
MUTANTS = {
    "make_synthetic_regression_batch": [
        ("accepts True as a size (contract: 'True' raises TypeError)", _batch_accepts_bool),
        ("accepts an integral float size such as 4.0 (contract: a non-integer size raises TypeError)",
         _batch_accepts_integral_float),
        ("only checks noise_std < 0: nan and inf accepted (contract: negative, infinite or NaN -> ValueError)",
         _batch_nan_inf_noise),
        ("duck-types rng: legacy RandomState accepted (contract: 'not the legacy RandomState')",
         _batch_duck_typed_rng),
        ("computes Y in float32 (contract: computed in float64, cast to float32 once at the end)",
         _batch_float32_arithmetic),
        ("skips the noise draw when noise_std == 0 (contract: rng advances by d_in*d_out + n*d_in + n*d_out)",
         _batch_skips_noise_draw),
        ("size errors do not name the argument (contract: every message names the argument)",
         _batch_unnamed_size_errors),
        ("ValueError for a non-integer size (contract: non-integer size -> TypeError)",
         _batch_valueerror_for_noninteger),
    ],
    "init_mlp_params": [
        ("accepts True as a width (contract: not bool)", _init_accepts_bool),
        ("W1 drawn in torch's (d_hidden, d_in) layout then transposed (contract: standard_normal((d_in, d_hidden)))",
         _init_w1_torch_layout),
        ("W2 drawn as (d_out, d_hidden) then transposed (contract: standard_normal((d_hidden, d_out)))",
         _init_w2_torch_layout),
        ("draws cast to float32 before scaling (contract: drawn in float64, then scaled and cast)",
         _init_scaled_in_float32),
        ("duck-types rng: RandomState accepted (contract: rng is a numpy.random.Generator)", _init_duck_typed_rng),
        ("rng=None raises ValueError (contract: a missing rng raises TypeError)", _init_none_rng_valueerror),
        ("d_out never validated: d_out=0 gives empty arrays (contract: every size >= 1)", _init_forgets_d_out),
    ],
    "linear_forward": [
        ("accepts integer arrays (contract: integer arrays raise TypeError)", _lin_accepts_int_arrays),
        ("accepts Python lists via np.asarray (contract: floating-point numpy.ndarrays only)", _lin_accepts_lists),
        ("casts Z to X's dtype (contract: output follows NumPy promotion, float32 x float64 -> float64)",
         _lin_dtype_follows_x),
        ("accepts a 1-D X (contract: X not 2-D raises ValueError)", _lin_accepts_1d_x),
        ("accepts a length-1 bias broadcast over every output (contract: b.shape == (d_out,))",
         _lin_accepts_length1_bias),
    ],
    "relu_forward": [
        ("returns Z itself when nothing is negative (contract: A does not share memory with Z)",
         _relu_alias_when_nothing_clipped),
        ("rejects only integer dtypes: bool/complex accepted (contract: floating dtype required)",
         _relu_only_rejects_integers),
        ("accepts lists via np.asarray (contract: a non-array raises TypeError)", _relu_accepts_lists),
        ("ValueError for an integer array (contract: TypeError naming Z)", _relu_valueerror_for_int),
        ("np.fmax maps nan to 0 (contract: NaN stays NaN)", _relu_fmax),
    ],
    "mlp_forward": [
        ("cache['X'] is a copy (contract: the cache holds references to X, not copies)", _mlpf_copies_x),
        ("ignores unexpected keys in params (contract: exactly the keys W1, b1, W2, b2)",
         _mlpf_ignores_extra_keys),
        ("accepts integer parameter arrays (contract: TypeError for a non-float array)", _mlpf_accepts_int_params),
        ("accepts an integer X (contract: X must be floating point)", _mlpf_accepts_int_x),
        ("delegates shape checks to linear_forward: a bad b1/b2 is reported as 'b' (contract: names the culprit)",
         _mlpf_delegates_shape_checks),
    ],
    "mse_loss_and_grad": [
        ("loss accumulated in float32 (contract: accumulated in float64)", _mse_float32_loss),
        ("gradient dtype follows promotion with Y (contract: dY_hat in Y_hat's dtype)", _mse_grad_promotes),
        ("loss returned as np.float64 (contract: a Python float)", _mse_numpy_scalar_loss),
        ("accepts a (batch, 1) target by broadcasting (contract: shapes must match exactly)",
         _mse_broadcast_column),
        ("accepts integer arrays (contract: non-float input raises TypeError)", _mse_accepts_ints),
    ],
    "linear_backward": [
        ("db = dOut.mean(axis=0) (contract: db is a sum over the batch)", _lb_db_mean),
        ("W's shape not validated: numpy's matmul error does not name W (contract: ValueError naming W)",
         _lb_no_w_check),
        ("np.atleast_2d turns a 1-D dOut/X into a batch (contract: wrong rank raises ValueError)", _lb_atleast_2d),
        ("accepts integer arrays (contract: floating-point arrays)", _lb_accepts_ints),
        ("db summed with dtype=float32: float64 inputs give a float32 db (contract: dtype follows the inputs)",
         _lb_db_float32),
    ],
    "relu_backward": [
        ("mask cast to Z's dtype promotes a float32 dA with a float64 Z (contract: result has dA's dtype)",
         _rb_mask_in_z_dtype),
        ("accepts a boolean Z (contract: integer or boolean Z raises TypeError)", _rb_accepts_bool_mask),
        ("accepts broadcastable shapes (contract: identical shapes)", _rb_accepts_broadcast),
        ("clamps Z in place while building the mask (contract: neither input is modified)", _rb_clamps_z_in_place),
        ("returns dA itself when every gate is open (contract: a new array is returned)", _rb_alias_when_all_open),
    ],
    "first_linear_backward": [
        ("accepts integer arrays (contract: an integer array raises TypeError)", _flb_accepts_ints),
        ("accepts Python lists via np.asarray (contract: a non-array raises TypeError)", _flb_accepts_lists),
        ("batch-mismatch message names only X (contract: ValueError naming both)", _flb_names_only_x),
        ("accepts a 1-D dOut (contract: an argument that is not 2-D raises ValueError)", _flb_1d_dout),
        ("computes dX with a dummy W and discards it (contract: do not compute dX)", _flb_computes_dx),
    ],
    "mlp_backward": [
        ("writes dZ1 into cache['Z1']'s buffer (contract: nothing is mutated, not the cache)",
         _mlpb_reuses_z1_buffer),
        ("dY_hat's width not checked against W2 (contract: ValueError naming dY_hat)", _mlpb_no_width_check),
        ("b1/b2 shapes not checked (contract: inconsistent shapes raise ValueError naming the key)",
         _mlpb_no_bias_check),
        ("Z1/A1 batch not checked against X (contract: the shapes agree)", _mlpb_no_cache_consistency),
        ("accepts integer arrays (contract: every array is floating point)", _mlpb_accepts_ints),
    ],
}

ALTERNATIVES = {
    "make_synthetic_regression_batch": [
        ("one standard_normal call split into teacher, X, noise; validation in reverse order", _batch_alt_one_draw),
    ],
    "init_mlp_params": [("rng.normal(0, std) instead of standard_normal * std", _init_alt_rng_normal)],
    "linear_forward": [
        ("np.matmul then in-place bias add on the new array", _lin_alt_inplace_bias),
        ("augmented matrix [X 1] @ [W; b^T] from the lesson's mathematics", _lin_alt_augmented),
    ],
    "relu_forward": [
        ("copy, then zero the negatives of the copy", _relu_alt_copy_then_clip),
        ("ndarray.clip(min=0 of Z's dtype)", _relu_alt_clip),
    ],
    "mlp_forward": [("inline np.dot arithmetic and np.where ReLU", _mlpf_alt_inline)],
    "mse_loss_and_grad": [("float64 einsum for the loss, (2 * E) / size for the gradient", _mse_alt_einsum)],
    "linear_backward": [("transposed products and einsum for db", _lb_alt_transposes)],
    "relu_backward": [
        ("np.where(Z > 0, dA, dA * 0)", _rb_alt_where),
        ("copy dA and multiply the closed entries by 0", _rb_alt_copy_and_zero),
        ("np.where(Z > 0, dA, 0): a NaN or inf in dA becomes 0 at a closed gate, as torch's threshold_backward",
         _rb_where_hides_nan),
    ],
    "first_linear_backward": [("np.tensordot and np.add.reduce", _flb_alt_tensordot)],
    "mlp_backward": [("all three products with np.einsum", _mlpb_alt_einsum)],
}

DISPUTED = {
    "init_mlp_params": [
        ("rejects NumPy integers such as np.int64(3) (Lesson 1: 'Python or NumPy' ints; ambiguous here)",
         "Lesson 2 says only 'integers >= 1 (not floats, not bool)'; `type(v) is int` is a fair reading"),
    ],
}


# --------------------------------------------------------------------------------------------------------------
# Second correct alternatives (issue 27), written blind from the release notebooks: other summation orders,
# float64 accumulation then one cast, other draw calls that consume the same stream.
# --------------------------------------------------------------------------------------------------------------
def _batch_alt_float64_einsum(n, d_in, d_out, rng, noise_std=0.1):
    for name, v in (("n", n), ("d_in", d_in), ("d_out", d_out)):
        _check_size(name, v)
    _check_rng(rng)
    _check_noise(noise_std)
    teacher = rng.standard_normal(d_in * d_out).reshape(d_in, d_out) * (1.0 / math.sqrt(d_in))
    X = rng.standard_normal(size=(n, d_in))
    E = rng.standard_normal(size=(n, d_out))
    Y = np.einsum("ni,io->no", X, teacher) + float(noise_std) * E  # float64, another summation order
    return X.astype(np.float32), Y.astype(np.float32)


def _init_alt_flat_draws(d_in, d_hidden, d_out, rng):
    _init_validate(d_in, d_hidden, d_out, rng)
    W1 = rng.standard_normal(d_in * d_hidden).reshape(d_in, d_hidden)  # the same stream, C order
    W2 = rng.standard_normal(d_hidden * d_out).reshape(d_hidden, d_out)
    return {"W1": (W1 * math.sqrt(2 / d_in)).astype(np.float32), "b1": np.zeros((d_hidden,), dtype=np.float32),
            "W2": (W2 / math.sqrt(d_hidden)).astype(np.float32), "b2": np.zeros((d_out,), dtype=np.float32)}


def _mlpf_alt_transposed(params, X):
    _mlpf_validate(params, X)
    Z1 = (params["W1"].T @ X.T).T + params["b1"]  # (batch, d_hidden), another product order
    A1 = np.where(Z1 > 0, Z1, Z1.dtype.type(0))
    Y_hat = np.einsum("bh,ho->bo", A1, params["W2"]) + params["b2"]
    return Y_hat, {"X": X, "Z1": Z1, "A1": A1}


def _mse_alt_sum_over_size(Y_hat, Y):
    _mse_validate(Y_hat, Y)
    E = Y_hat - Y  # (batch, d_out) in Y_hat's dtype
    E64 = E.astype(np.float64)
    loss = float(np.sum(E64 * E64) / E.size)
    return loss, (E64 * (2.0 / E.size)).astype(Y_hat.dtype)  # float64 product, one cast


def _lb_alt_row_loop(dOut, X, W):
    _lb_validate(dOut, X, W)
    dW = np.zeros((X.shape[1], dOut.shape[1]), dtype=np.result_type(X, dOut))
    for x_i, g_i in zip(X, dOut):  # the batch sum one example at a time
        dW += np.outer(x_i, g_i)
    db = np.zeros(dOut.shape[1], dtype=dOut.dtype)
    for g_i in dOut[::-1]:  # summed backwards
        db += g_i
    return dOut @ W.T, dW, db


def _flb_alt_float64(dOut, X):
    _flb_validate(dOut, X)
    dW = np.zeros((X.shape[1], dOut.shape[1]))  # float64 accumulators, blocks of 64 rows (no (batch, .) copy)
    db = np.zeros(dOut.shape[1])
    for i in range(0, X.shape[0], 64):
        g = dOut[i:i + 64].astype(np.float64)
        dW += X[i:i + 64].T.astype(np.float64) @ g
        db += g.sum(axis=0)
    return dW.astype(np.result_type(X, dOut)), db.astype(dOut.dtype)  # one cast each


def _mlpb_alt_float64_then_cast(params, cache, dY_hat):
    _mlpb_validate(params, cache, dY_hat)
    X, Z1, A1 = (cache[k].astype(np.float64) for k in ("X", "Z1", "A1"))
    G = dY_hat.astype(np.float64)
    dZ1 = (G @ params["W2"].astype(np.float64).T) * (Z1 > 0)
    grads = {"W1": X.T @ dZ1, "b1": dZ1.sum(axis=0), "W2": A1.T @ G, "b2": G.sum(axis=0)}
    return {k: v.astype(params[k].dtype) for k, v in grads.items()}


for _name, _entry in [
    ("make_synthetic_regression_batch", ("separate draws, float64 einsum for Y, one cast", _batch_alt_float64_einsum)),
    ("init_mlp_params", ("flat standard_normal draws reshaped (the same stream)", _init_alt_flat_draws)),
    ("mlp_forward", ("transposed first product, einsum second, np.where ReLU", _mlpf_alt_transposed)),
    ("mse_loss_and_grad", ("float64 sum / size; gradient as a float64 product cast once", _mse_alt_sum_over_size)),
    ("linear_backward", ("dW and db summed one example at a time (db backwards)", _lb_alt_row_loop)),
    ("first_linear_backward", ("float64 accumulation, one cast", _flb_alt_float64)),
    ("mlp_backward", ("the whole backward in float64, cast once to the parameters' dtype",
                      _mlpb_alt_float64_then_cast)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
