"""Witnesses for Module 1, Part 1 (the MLP core): one wrong answer per broken clause and case."""

from __future__ import annotations

import copy

import numpy as np

from tests.answers.clauses import existing
from trainsys.memtrain import mlp as ref


# --- Lesson 1 · make_synthetic_regression_batch ----------------------------------------------------
def _batch_X_drawn_transposed(n, d_in, d_out, rng, noise_std=0.1):
    """X drawn as (d_in, n) ("one column per example") and transposed: the same draws, another layout."""
    ref.make_synthetic_regression_batch(n, d_in, d_out, np.random.default_rng(0), noise_std)  # validation
    teacher = rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)
    X = rng.standard_normal((d_in, n)).T
    Y = X @ teacher + noise_std * rng.standard_normal((n, d_out))
    return X.astype(np.float32), Y.astype(np.float32)


def _batch_on_a_copy_of_rng(n, d_in, d_out, rng, noise_std=0.1):
    """Draws from a deep copy of ``rng`` "to leave the caller's generator alone": the caller's never advances."""
    return ref.make_synthetic_regression_batch(n, d_in, d_out, copy.deepcopy(rng), noise_std)


# --- Lesson 2 · init_mlp_params --------------------------------------------------------------------
def _init_core(d_in, d_hidden, d_out, rng):
    W1 = rng.standard_normal((d_in, d_hidden)) * np.sqrt(2.0 / d_in)
    W2 = rng.standard_normal((d_hidden, d_out)) * np.sqrt(1.0 / d_hidden)
    return {"W1": W1.astype(np.float32), "b1": np.zeros(d_hidden, np.float32),
            "W2": W2.astype(np.float32), "b2": np.zeros(d_out, np.float32)}


def _init_accepts_integral_float(d_in, d_hidden, d_out, rng):
    """Accepts a size such as 3.0 because ``int(3.0) == 3.0``."""
    sizes = []
    for name, value in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer)) or int(value) != value:
            raise TypeError(f"{name} must be an integer, got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value!r}")
        sizes.append(int(value))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return _init_core(*sizes, rng)


def _init_sizes_from_zero(d_in, d_hidden, d_out, rng):
    """Sizes checked ``>= 0`` instead of ``>= 1``: a width of 0 is let through."""
    for name, value in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {value!r}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    W1 = rng.standard_normal((d_in, d_hidden)) * np.sqrt(2.0 / max(d_in, 1))
    W2 = rng.standard_normal((d_hidden, d_out)) * np.sqrt(1.0 / max(d_hidden, 1))
    return {"W1": W1.astype(np.float32), "b1": np.zeros(d_hidden, np.float32),
            "W2": W2.astype(np.float32), "b2": np.zeros(d_out, np.float32)}


def _init_seed_becomes_generator(d_in, d_hidden, d_out, rng):
    """Refuses None but turns an integer seed into a generator ("a seed is as good as a Generator")."""
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        rng = np.random.default_rng(rng)
    return ref.init_mlp_params(d_in, d_hidden, d_out, rng)


def _init_w2_torch_shape(d_in, d_hidden, d_out, rng):
    """W2 returned as (d_out, d_hidden), torch's nn.Linear layout for the output layer."""
    params = ref.init_mlp_params(d_in, d_hidden, d_out, rng)
    params["W2"] = np.ascontiguousarray(params["W2"].T)
    return params


def _init_w2_first(d_in, d_hidden, d_out, rng):
    """W2 drawn before W1."""
    ref.init_mlp_params(d_in, d_hidden, d_out, np.random.default_rng(0))  # validation
    W2 = rng.standard_normal((d_hidden, d_out)) * np.sqrt(1.0 / d_hidden)
    W1 = rng.standard_normal((d_in, d_hidden)) * np.sqrt(2.0 / d_in)
    return {"W1": W1.astype(np.float32), "b1": np.zeros(d_hidden, np.float32),
            "W2": W2.astype(np.float32), "b2": np.zeros(d_out, np.float32)}


def _init_on_a_copy_of_rng(d_in, d_hidden, d_out, rng):
    """Draws from a deep copy of ``rng``: right values, but the caller's generator never advances."""
    return ref.init_mlp_params(d_in, d_hidden, d_out, copy.deepcopy(rng))


def _init_draws_biases_too(d_in, d_hidden, d_out, rng):
    """Draws the biases as well, after the weights, and multiplies them by 0: three extra draw calls."""
    params = ref.init_mlp_params(d_in, d_hidden, d_out, rng)
    params["b1"] = (rng.standard_normal(d_hidden) * 0.0).astype(np.float32)
    params["b2"] = (rng.standard_normal(d_out) * 0.0).astype(np.float32)
    return params


def _init_float64(d_in, d_hidden, d_out, rng):
    """Keeps the float64 draws: 8Ψ bytes instead of 4Ψ."""
    ref.init_mlp_params(d_in, d_hidden, d_out, np.random.default_rng(0))  # validation
    W1 = rng.standard_normal((d_in, d_hidden)) * np.sqrt(2.0 / d_in)
    W2 = rng.standard_normal((d_hidden, d_out)) * np.sqrt(1.0 / d_hidden)
    return {"W1": W1, "b1": np.zeros(d_hidden), "W2": W2, "b2": np.zeros(d_out)}


def _init_bias_per_input(d_in, d_hidden, d_out, rng):
    """b1 with one entry per input feature, (d_in,), instead of one per hidden unit."""
    params = ref.init_mlp_params(d_in, d_hidden, d_out, rng)
    params["b1"] = np.zeros(d_in, np.float32)
    return params


# --- Lesson 3 · linear_forward ---------------------------------------------------------------------
def _lin_cast_to_w(X, W, b):
    """Casts Z to W's dtype ("the parameters decide the precision")."""
    return ref.linear_forward(X, W, b).astype(W.dtype)


def _lin_checks_x_dtype_only(X, W, b):
    """Refuses an integer X but not an integer W or b."""
    for name, array, ndim in (("X", X, 2), ("W", W, 2), ("b", b, 1)):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a numpy.ndarray")
        if array.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D, got shape {array.shape}")
    if not np.issubdtype(X.dtype, np.floating):
        raise TypeError(f"X must be floating point, got {X.dtype}")
    if X.shape[1] != W.shape[0] or b.shape != (W.shape[1],):
        raise ValueError(f"shapes do not chain: X {X.shape}, W {W.shape}, b {b.shape}")
    return X @ W + b


def _lin_into_x_when_square(X, W, b):
    """Writes Z into X's buffer when the shapes allow it (square W), "to save an allocation"."""
    Z = ref.linear_forward(X, W, b)
    if X.shape == Z.shape and X.dtype == Z.dtype:
        X[...] = Z
        return X
    return Z


def _lin_accepts_row_bias(X, W, b):
    """Accepts a (1, d_out) bias, since it broadcasts correctly."""
    if isinstance(b, np.ndarray) and b.shape == (1, getattr(W, "shape", (0, 0))[-1]):
        return ref.linear_forward(X, W, b[0])
    return ref.linear_forward(X, W, b)


def _lin_no_w_row_check(X, W, b):
    """W's rows are not compared with X's features: NumPy's matmul error names no argument."""
    for name, array, ndim in (("X", X, 2), ("W", W, 2), ("b", b, 1)):
        if not isinstance(array, np.ndarray) or not np.issubdtype(array.dtype, np.floating):
            raise TypeError(f"{name} must be a floating-point numpy.ndarray")
        if array.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D, got shape {array.shape}")
    if b.shape[0] != W.shape[1]:
        raise ValueError(f"b must have {W.shape[1]} entries, got {b.shape}")
    return X @ W + b


def _lin_no_bias_length_check(X, W, b):
    """b's length is not compared with W's columns: NumPy's "could not be broadcast" error is all one gets."""
    for name, array, ndim in (("X", X, 2), ("W", W, 2), ("b", b, 1)):
        if not isinstance(array, np.ndarray) or not np.issubdtype(array.dtype, np.floating):
            raise TypeError(f"{name} must be a floating-point numpy.ndarray")
        if array.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D, got shape {array.shape}")
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"W must have {X.shape[1]} rows, got {W.shape}")
    return X @ W + b


# --- Lesson 4 · relu_forward -----------------------------------------------------------------------
def _relu_clip_to_finite(Z):
    """np.clip(Z, 0, the largest finite value): +inf becomes a finite number."""
    ref.relu_forward(Z)  # validation
    return np.clip(Z, Z.dtype.type(0), np.finfo(Z.dtype).max)


def _relu_2d_only(Z):
    """Requires a (batch, d_hidden) matrix: a vector or a stack raises ValueError."""
    A = ref.relu_forward(Z)
    if Z.ndim != 2:
        raise ValueError(f"Z must be 2-D (batch, d_hidden), got shape {Z.shape}")
    return A


def _relu_flattened(Z):
    """Reshapes Z to (batch, -1) before the max and returns that shape."""
    A = ref.relu_forward(Z)
    return A.reshape(A.shape[0], -1) if A.ndim > 1 else A


# --- Lesson 5 · mlp_forward ------------------------------------------------------------------------
_KEYS = ("W1", "b1", "W2", "b2")


def _mlpf_float32_network(params, X):
    """Casts Y_hat and the hidden arrays to float32 ("the network is float32")."""
    Y_hat, cache = ref.mlp_forward(params, X)
    return Y_hat.astype(np.float32), {"X": X, "Z1": cache["Z1"].astype(np.float32),
                                      "A1": cache["A1"].astype(np.float32)}


def _mlpf_astype_copies_x(params, X):
    """``X = X.astype(np.float32)`` "to be safe": astype copies, so the cache holds a copy of X."""
    ref.mlp_forward(params, X)  # validation
    X = X.astype(np.float32)
    return ref.mlp_forward({k: v.astype(np.float32) for k, v in params.items()}, X)


def _mlpf_keyerror_for_missing(params, X):
    """Reads the four keys directly: a missing one raises KeyError, not ValueError."""
    W1, b1, W2, b2 = (params[k] for k in _KEYS)
    return ref.mlp_forward({"W1": W1, "b1": b1, "W2": W2, "b2": b2}, X)


def _mlpf_no_x_width_check(params, X):
    """X's feature axis is not compared with W1's rows: NumPy's matmul error names no argument."""
    ref.validate_mlp_params(params)
    if not isinstance(X, np.ndarray) or not np.issubdtype(X.dtype, np.floating):
        raise TypeError("X must be a floating-point numpy array")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    Z1 = X @ params["W1"] + params["b1"]
    A1 = np.maximum(Z1, Z1.dtype.type(0))
    return A1 @ params["W2"] + params["b2"], {"X": X, "Z1": Z1, "A1": A1}


def _mlpf_no_dict_check(params, X):
    """Checks the keys with ``in`` but not that params is a dict: a list of arrays gives NumPy's ValueError."""
    missing = [k for k in _KEYS if k not in params]
    if missing:
        raise ValueError(f"params is missing {missing}")
    return ref.mlp_forward(params, X)


# --- Lesson 6 · mse_loss_and_grad ------------------------------------------------------------------
def _mse_validate(Y_hat, Y, *, check_dtype=True, check_ndim=True, check_shape=True, arrays_only=True):
    for name, a in (("Y_hat", Y_hat), ("Y", Y)):
        if arrays_only and not isinstance(a, np.ndarray):
            raise TypeError(f"{name} must be a numpy array")
        if check_dtype and not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{name} must be floating point")
        if check_ndim and a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if check_shape and Y_hat.shape != Y.shape:
        raise ValueError(f"Y has shape {Y.shape}, Y_hat has shape {Y_hat.shape}")


def _mse_core(Y_hat, Y):
    E = Y_hat - Y
    return float(np.mean(np.square(E, dtype=np.float64))), (E * (2.0 / E.size)).astype(Y_hat.dtype, copy=False)


def _mse_mean_over_outputs(Y_hat, Y):
    """Divides by d_out only (a sum over the batch of per-example means)."""
    _mse_validate(Y_hat, Y)
    E = (Y_hat - Y).astype(np.float64)
    d_out = Y_hat.shape[1]
    return float(np.sum(E * E) / d_out), (2.0 * E / d_out).astype(Y_hat.dtype)


def _mse_difference_in_place(Y_hat, Y):
    """``Y_hat -= Y`` to save the (batch, d_out) difference array: the caller's prediction is overwritten."""
    _mse_validate(Y_hat, Y)
    Y_hat -= Y
    E = Y_hat
    return float(np.mean(np.square(E, dtype=np.float64))), (E * (2.0 / E.size)).astype(E.dtype)


def _mse_no_shape_check(Y_hat, Y):
    """Shapes not compared: NumPy's broadcasting error is all one gets for (4, 3) against (4, 2)."""
    _mse_validate(Y_hat, Y, check_shape=False)
    return _mse_core(Y_hat, Y)


def _mse_accepts_1d(Y_hat, Y):
    """No rank check: two vectors of equal length are averaged as they are."""
    _mse_validate(Y_hat, Y, check_ndim=False)
    return _mse_core(Y_hat, Y)


def _mse_accepts_int_y(Y_hat, Y):
    """Checks Y_hat's dtype only: integer targets are accepted."""
    _mse_validate(Y_hat, Y, check_dtype=False)
    if not np.issubdtype(Y_hat.dtype, np.floating):
        raise TypeError("Y_hat must be floating point")
    return _mse_core(Y_hat, Y)


def _mse_accepts_lists(Y_hat, Y):
    """``np.asarray`` turns lists into arrays."""
    return ref.mse_loss_and_grad(np.asarray(Y_hat), np.asarray(Y))


# --- Lesson 7 · linear_backward --------------------------------------------------------------------
def _lb_validate(dOut, X, W, *, check_batch=True):
    for name, a in (("dOut", dOut), ("X", X), ("W", W)):
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{name} must be a floating-point numpy array")
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    if check_batch and dOut.shape[0] != X.shape[0]:
        raise ValueError(f"dOut has {dOut.shape[0]} rows but X has {X.shape[0]}")
    if W.shape != (X.shape[1], dOut.shape[1]):
        raise ValueError(f"W has shape {W.shape}, expected ({X.shape[1]}, {dOut.shape[1]})")


def _lb_dw_in_float64(dOut, X, W):
    """dW accumulated in float64 "for accuracy" and returned so: float32 in, float64 out."""
    dX, _, db = ref.linear_backward(dOut, X, W)
    return dX, X.T.astype(np.float64) @ dOut.astype(np.float64), db


def _lb_dx_into_x(dOut, X, W):
    """Writes dX into X's buffer ("X is not needed after the backward"): the caller's X is overwritten."""
    _, dW, db = ref.linear_backward(dOut, X, W)
    np.matmul(dOut, W.T, out=X)
    return X, dW, db


def _lb_no_batch_check(dOut, X, W):
    """dOut's and X's batch axes are not compared: NumPy's matmul error names no argument."""
    _lb_validate(dOut, X, W, check_batch=False)
    return dOut @ W.T, X.T @ dOut, dOut.sum(axis=0)


# --- Lesson 8 · relu_backward ----------------------------------------------------------------------
def _rb_same_dtype_required(dA, Z):
    """Refuses a Z whose dtype differs from dA's."""
    dZ = ref.relu_backward(dA, Z)
    if dA.dtype != Z.dtype:
        raise TypeError(f"dA ({dA.dtype}) and Z ({Z.dtype}) must have the same dtype")
    return dZ


def _rb_mask_with_tolerance(dA, Z):
    """Gate open where ``Z > 1e-12``, "so that round-off around 0 does not open it"."""
    ref.relu_backward(dA, Z)  # validation
    return dA * (Z > 1e-12)


def _rb_mask_from_sign_bit(dA, Z):
    """Gate open where Z's sign bit is clear: +0.0 is open."""
    ref.relu_backward(dA, Z)  # validation
    return dA * ~np.signbit(Z)


def _rb_no_shape_check(dA, Z):
    """Shapes not compared: NumPy's broadcasting error names neither dA nor Z."""
    for name, a in (("dA", dA), ("Z", Z)):
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{name} must be a floating-point numpy array")
    return dA * (Z > 0)


def _rb_shape_error_names_only_z(dA, Z):
    """The shape error names Z but not dA."""
    if isinstance(dA, np.ndarray) and isinstance(Z, np.ndarray) and dA.shape != Z.shape:
        raise ValueError(f"Z has shape {Z.shape}, expected {dA.shape}")
    return ref.relu_backward(dA, Z)


def _rb_nan_to_num(dA, Z):
    """Cleans dA with np.nan_to_num before masking: a diverged step's NaN is hidden even where the gate is open."""
    ref.relu_backward(dA, Z)  # validation
    return np.nan_to_num(dA) * (Z > 0)


def _rb_accepts_integer_z(dA, Z):
    """Refuses a boolean Z ("a precomputed mask") but not an integer one."""
    if not isinstance(dA, np.ndarray) or not np.issubdtype(dA.dtype, np.floating):
        raise TypeError("dA must be a floating-point numpy array")
    if not isinstance(Z, np.ndarray) or Z.dtype == np.bool_:
        raise TypeError("Z must be a numeric numpy array, not a mask")
    if dA.shape != Z.shape:
        raise ValueError(f"dA {dA.shape} and Z {Z.shape} must have the same shape")
    return dA * (Z > 0)


# --- Lesson 9 · first_linear_backward --------------------------------------------------------------
def _flb_takes_w1(dOut, X, W1):
    """Lesson 7's signature kept: W1 is a required third argument."""
    return ref.first_linear_backward(dOut, X)


def _flb_db_in_float64(dOut, X):
    """db summed with ``dtype=np.float64`` "for accuracy": float32 in, float64 out."""
    dW, _ = ref.first_linear_backward(dOut, X)
    return dW, dOut.sum(axis=0, dtype=np.float64)


def _flb_float32_always(dOut, X):
    """Casts both gradients to float32 ("gradients are float32")."""
    dW, db = ref.first_linear_backward(dOut, X)
    return dW.astype(np.float32), db.astype(np.float32)


# --- Lesson 10 · mlp_backward ----------------------------------------------------------------------
def _mlpb_d_keys(params, cache, dY_hat):
    """Names the gradients 'dW1', 'db1', 'dW2', 'db2'."""
    grads = ref.mlp_backward(params, cache, dY_hat)
    return {f"d{k}": v for k, v in grads.items()}


def _mlpb_recomputes_z1(params, cache, dY_hat):
    """Recomputes Z1 = X W1 + b1 for the ReLU gate instead of reading cache['Z1']."""
    ref.mlp_backward(params, cache, dY_hat)  # validation
    Z1 = cache["X"] @ params["W1"] + params["b1"]
    dW2, db2 = cache["A1"].T @ dY_hat, dY_hat.sum(axis=0)
    dZ1 = (dY_hat @ params["W2"].T) * (Z1 > 0)
    return {"W1": cache["X"].T @ dZ1, "b1": dZ1.sum(axis=0), "W2": dW2, "b2": db2}


def _mlpb_recomputes_a1(params, cache, dY_hat):
    """Recomputes A1 = ReLU(X W1 + b1) for dW2 instead of reading cache['A1']."""
    grads = ref.mlp_backward(params, cache, dY_hat)
    A1 = np.maximum(cache["X"] @ params["W1"] + params["b1"], 0)
    grads["W2"] = (A1.T @ dY_hat).astype(grads["W2"].dtype)
    return grads


def _mlpb_float64(params, cache, dY_hat):
    """Computes in float64 "for accuracy" and returns float64 gradients."""
    ref.mlp_backward(params, cache, dY_hat)  # validation
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    c64 = {k: v.astype(np.float64) for k, v in cache.items()}
    return ref.mlp_backward(p64, c64, dY_hat.astype(np.float64))


def _mlpb_batch_of_one_views(params, cache, dY_hat):
    """For a batch of one, db2 is dY_hat's only row: a view instead of a sum ("a sum of one row is the row")."""
    grads = ref.mlp_backward(params, cache, dY_hat)
    if dY_hat.shape[0] == 1:
        grads["b2"] = dY_hat[0]
    return grads


def _mlpb_keyerror_for_cache(params, cache, dY_hat):
    """Reads cache['X'], cache['Z1'], cache['A1'] directly: a missing key raises KeyError, not ValueError."""
    X, Z1, A1 = cache["X"], cache["Z1"], cache["A1"]
    return ref.mlp_backward(params, {"X": X, "Z1": Z1, "A1": A1}, dY_hat)


def _mlpb_keyerror_for_params(params, cache, dY_hat):
    """Reads params['b1'] directly for its shape check: a missing b1 raises KeyError, not ValueError."""
    b1 = params["b1"]
    if b1.shape != (params["W1"].shape[1],):
        raise ValueError(f"params['b1'] has shape {b1.shape}, expected ({params['W1'].shape[1]},)")
    return ref.mlp_backward(params, cache, dY_hat)


def _mlpb_arithmetic(params, cache, dY_hat):
    X, Z1, A1 = cache["X"], cache["Z1"], cache["A1"]
    dZ1 = (dY_hat @ params["W2"].T) * (Z1 > 0)
    return {"W1": X.T @ dZ1, "b1": dZ1.sum(axis=0), "W2": A1.T @ dY_hat, "b2": dY_hat.sum(axis=0)}


def _mlpb_no_batch_check(params, cache, dY_hat):
    """Every check but dY_hat's batch against the cache's: for that one, NumPy's error names no argument."""
    if (isinstance(dY_hat, np.ndarray) and isinstance(cache, dict) and "A1" in cache and dY_hat.ndim == 2
            and dY_hat.shape[0] != cache["A1"].shape[0]):
        return _mlpb_arithmetic(params, cache, dY_hat)
    return ref.mlp_backward(params, cache, dY_hat)


WITNESSES = {
    "make_synthetic_regression_batch": {
        "draw order": [existing("make_synthetic_regression_batch", "draws X before the teacher"),
                       ("X drawn as (d_in, n) and transposed", _batch_X_drawn_transposed)],
        "dtype": [existing("make_synthetic_regression_batch", "returns float64 arrays"),
                  existing("make_synthetic_regression_batch", "computes Y in float32")],
        "mutation": [existing("make_synthetic_regression_batch", "skips the noise draw when noise_std == 0"),
                     ("draws from a copy of the caller's generator", _batch_on_a_copy_of_rng)],
        "failure modes": [
            existing("make_synthetic_regression_batch", "size errors do not name the argument"),
            existing("make_synthetic_regression_batch", "ValueError for a non-integer size"),
            existing("make_synthetic_regression_batch", "accepts True as a size"),
            existing("make_synthetic_regression_batch", "accepts an integral float size"),
            existing("make_synthetic_regression_batch", "only checks noise_std < 0"),
            existing("make_synthetic_regression_batch", "duck-types rng"),
        ],
        "metric that proves it correct": [
            existing("make_synthetic_regression_batch", "scales the noise by the variance"),
            existing("make_synthetic_regression_batch", "teacher not scaled"),
        ],
    },
    "init_mlp_params": {
        "arguments": [("accepts an integral float size such as 3.0", _init_accepts_integral_float),
                      existing("init_mlp_params", "accepts True as a width"),
                      existing("init_mlp_params", "duck-types rng")],
        "layout": [existing("init_mlp_params", "W1 stored as (d_hidden, d_in)"),
                   ("W2 returned as (d_out, d_hidden)", _init_w2_torch_shape)],
        "draw order": [existing("init_mlp_params", "W1 drawn in torch's (d_hidden, d_in) layout"),
                       existing("init_mlp_params", "W2 drawn as (d_out, d_hidden) then transposed"),
                       existing("init_mlp_params", "draws cast to float32 before scaling"),
                       ("W2 drawn before W1", _init_w2_first),
                       ("draws from a copy of the caller's generator", _init_on_a_copy_of_rng),
                       ("the biases drawn too, then multiplied by 0", _init_draws_biases_too)],
        "failure modes": [("sizes checked >= 0: a width of 0 let through", _init_sizes_from_zero),
                          existing("init_mlp_params", "d_out never validated"),
                          existing("init_mlp_params", "rng=None raises ValueError"),
                          ("an integer seed turned into a generator", _init_seed_becomes_generator)],
        "size": [("float64 parameters (8Ψ bytes)", _init_float64),
                 ("b1 of shape (d_in,)", _init_bias_per_input)],
        "metric that proves it correct": [existing("init_mlp_params", "uses the variance 2/d_in"),
                                          existing("init_mlp_params", "He scale from fan-out"),
                                          existing("init_mlp_params", "He gain √2 on the linear output layer")],
    },
    "linear_forward": {
        "dtype": [existing("linear_forward", "casts Z to X's dtype"),
                  ("casts Z to W's dtype", _lin_cast_to_w),
                  existing("linear_forward", "accepts integer arrays"),
                  ("refuses an integer X but not an integer W", _lin_checks_x_dtype_only),
                  existing("linear_forward", "accepts Python lists")],
        "mutation": [("writes Z into X's buffer when W is square", _lin_into_x_when_square)],
        "failure modes": [existing("linear_forward", "accepts a 1-D X"),
                          ("W's rows not checked: NumPy's matmul error", _lin_no_w_row_check),
                          ("b's length not checked: NumPy's broadcasting error", _lin_no_bias_length_check),
                          ("accepts a (1, d_out) bias", _lin_accepts_row_bias),
                          existing("linear_forward", "accepts a length-1 bias")],
        "metric that proves it correct": [existing("linear_forward", "forgets the bias"),
                                          existing("linear_forward", "bias broadcast along the batch axis"),
                                          existing("linear_forward", "uses Wᵀ")],
    },
    "relu_forward": {
        "legal range": [existing("relu_forward", "np.fmax maps nan to 0"),
                        ("clips +inf to the largest finite value", _relu_clip_to_finite)],
        "mutation": [existing("relu_forward", "clips Z in place and returns it"),
                     existing("relu_forward", "returns Z itself when nothing is negative")],
        "rank": [("requires a 2-D Z", _relu_2d_only), ("returns A reshaped to (batch, -1)", _relu_flattened)],
        "failure modes": [existing("relu_forward", "ValueError for an integer array"),
                          existing("relu_forward", "rejects only integer dtypes"),
                          existing("relu_forward", "accepts lists via np.asarray")],
        "metric that proves it correct": [existing("relu_forward", "leaky ReLU"),
                                          existing("relu_forward", "returns float64 whatever the input dtype")],
    },
    "mlp_forward": {
        "dtype": [existing("mlp_forward", "accepts integer parameter arrays"),
                  existing("mlp_forward", "accepts an integer X"),
                  ("Y_hat and the hidden arrays cast to float32", _mlpf_float32_network)],
        "mutation": [existing("mlp_forward", "cache['X'] is a copy"),
                     ("X.astype(np.float32) puts a copy of X in the cache", _mlpf_astype_copies_x)],
        "failure modes": [("X's width not checked: NumPy's matmul error", _mlpf_no_x_width_check),
                          ("KeyError for a missing key", _mlpf_keyerror_for_missing),
                          existing("mlp_forward", "ignores unexpected keys in params"),
                          existing("mlp_forward", "delegates shape checks to linear_forward"),
                          ("no dict check: a list of arrays gives NumPy's ValueError", _mlpf_no_dict_check)],
        "metric that proves it correct": [existing("mlp_forward", "forgets the ReLU"),
                                          existing("mlp_forward", "applies a ReLU to the output too"),
                                          existing("mlp_forward", "caches the activation A1 under 'Z1'")],
    },
    "mse_loss_and_grad": {
        "the mean is over batch *and* outputs": [
            existing("mse_loss_and_grad", "divides by the batch size only"),
            ("divides by d_out only", _mse_mean_over_outputs),
        ],
        "precision": [existing("mse_loss_and_grad", "loss returned as np.float64"),
                      existing("mse_loss_and_grad", "gradient dtype follows promotion with Y"),
                      existing("mse_loss_and_grad", "loss accumulated in float32")],
        "mutation": [("the difference formed in place in Y_hat", _mse_difference_in_place)],
        "failure modes": [("shapes not compared: NumPy's broadcasting error", _mse_no_shape_check),
                          existing("mse_loss_and_grad", "accepts a (batch, 1) target"),
                          ("accepts 1-D arrays", _mse_accepts_1d),
                          ("accepts an integer Y", _mse_accepts_int_y),
                          ("np.asarray accepts lists", _mse_accepts_lists)],
        "metric that proves it correct": [existing("mse_loss_and_grad", "gradient without the factor 2"),
                                          existing("mse_loss_and_grad", "gradient with the sign reversed")],
    },
    "linear_backward": {
        "dtype": [("dW accumulated and returned in float64", _lb_dw_in_float64),
                  existing("linear_backward", "db summed with dtype=float32"),
                  existing("linear_backward", "accepts integer arrays")],
        "mutation": [("dX written into X's buffer", _lb_dx_into_x)],
        "failure modes": [("batch axes not compared: NumPy's matmul error", _lb_no_batch_check),
                          existing("linear_backward", "W's shape not validated"),
                          existing("linear_backward", "np.atleast_2d turns a 1-D dOut/X into a batch")],
        "metric that proves it correct": [existing("linear_backward", "db averaged over the batch"),
                                          existing("linear_backward", "dW transposed"),
                                          existing("linear_backward", "dX = dOut W without the transpose"),
                                          existing("linear_backward", "db = dOut.mean(axis=0)")],
    },
    "relu_backward": {
        "dtype": [existing("relu_backward", "mask cast to Z's dtype"),
                  ("requires dA and Z of one dtype", _rb_same_dtype_required)],
        "convention at zero": [existing("relu_backward", "mask Z ≥ 0"),
                               ("gate open where Z > 1e-12", _rb_mask_with_tolerance),
                               ("gate open where the sign bit is clear (+0.0 open)", _rb_mask_from_sign_bit)],
        "mutation": [existing("relu_backward", "clamps Z in place"),
                     existing("relu_backward", "returns dA itself when every gate is open")],
        "failure modes": [("shapes not compared: NumPy's broadcasting error", _rb_no_shape_check),
                          ("the shape error names only Z", _rb_shape_error_names_only_z),
                          existing("relu_backward", "accepts broadcastable shapes"),
                          ("accepts an integer Z", _rb_accepts_integer_z),
                          existing("relu_backward", "accepts a boolean Z"),
                          ("a NaN in dA at an open gate becomes 0 (np.nan_to_num first)", _rb_nan_to_num)],
        "metric that proves it correct": [existing("relu_backward", "mask from the incoming gradient"),
                                          existing("relu_backward", "returns the mask")],
    },
    "first_linear_backward": {
        "what is not an input": [("W1 a required third argument", _flb_takes_w1)],
        "what is not an output": [existing("first_linear_backward", "returns the unneeded dX as well"),
                                  existing("first_linear_backward", "computes dX with a dummy W")],
        "dtype": [("db summed in float64", _flb_db_in_float64),
                  ("gradients cast to float32 whatever the input", _flb_float32_always)],
        "failure modes": [existing("first_linear_backward", "batch-mismatch message names only X"),
                          existing("first_linear_backward", "accepts a 1-D dOut"),
                          existing("first_linear_backward", "accepts integer arrays"),
                          existing("first_linear_backward", "accepts Python lists")],
        "metric that proves it correct": [existing("first_linear_backward", "db averaged over the batch"),
                                          existing("first_linear_backward", "dW divided by the batch size")],
    },
    "mlp_backward": {
        "keys": [("gradients under 'dW1', 'db1', 'dW2', 'db2'", _mlpb_d_keys)],
        "which weights are read": [("Z1 recomputed from X, W1 and b1", _mlpb_recomputes_z1),
                                   ("A1 recomputed from X, W1 and b1", _mlpb_recomputes_a1)],
        "dtype": [existing("mlp_backward", "writes dZ1 into cache['Z1']'s buffer"),
                  ("float64 gradients for float32 inputs", _mlpb_float64),
                  ("batch of one: db2 a view of dY_hat", _mlpb_batch_of_one_views),
                  existing("mlp_backward", "accepts integer arrays")],
        "failure modes": [("dY_hat's batch not checked: NumPy's matmul error", _mlpb_no_batch_check),
                          ("KeyError for a missing cache key", _mlpb_keyerror_for_cache),
                          existing("mlp_backward", "b1/b2 shapes not checked"),
                          ("KeyError for a missing params key", _mlpb_keyerror_for_params),
                          existing("mlp_backward", "dY_hat's width not checked"),
                          existing("mlp_backward", "Z1/A1 batch not checked")],
        "metric that proves it correct": [existing("mlp_backward", "skips the ReLU backward"),
                                          existing("mlp_backward", "dW2 from the pre-activation"),
                                          existing("mlp_backward", "db1 summed before the ReLU mask"),
                                          existing("mlp_backward", "ReLU mask Z1 ≥ 0")],
    },
}
