r"""Module 1, Part 1 — the two-layer MLP, forward and backward, by hand.

Everything the rest of Module 1 trains is this network:

.. math::

    Z_1 = X W_1 + b_1,\quad A_1 = \mathrm{ReLU}(Z_1),\quad \hat Y = A_1 W_2 + b_2,\quad
    L = \frac{1}{n\,d_{out}} \sum_{i,j} (\hat Y_{ij} - Y_{ij})^2

with ``X: (batch, d_in)``, ``W1: (d_in, d_hidden)``, ``b1: (d_hidden,)``, ``W2: (d_hidden, d_out)``,
``b2: (d_out,)``. Parameters live in a plain ``dict`` of NumPy arrays so that later parts can count,
cast, shard and split them. Lessons 1–10 each implement one function below; the notebooks import
the earlier ones from here.
"""

from __future__ import annotations

import numpy as np

from trainsys._validation import (
    require_axis_match,
    require_float_array,
    require_generator,
    require_int,
    require_keys,
    require_real,
    require_same_shape,
)

PARAM_KEYS: tuple[str, ...] = ("W1", "b1", "W2", "b2")
"""The keys of an MLP parameter dict, in the order the forward pass uses them."""

CACHE_KEYS: tuple[str, ...] = ("X", "Z1", "A1")
"""What :func:`mlp_forward` keeps for :func:`mlp_backward`: the input, the pre-activation, the activation."""

Params = dict[str, np.ndarray]


# --- Lesson 1 --------------------------------------------------------------------------------------
def make_synthetic_regression_batch(
    n: int, d_in: int, d_out: int, rng: np.random.Generator, noise_std: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    r"""A regression batch from a random linear teacher: ``Y = X W* + noise``.

    Draws, in this order, from ``rng`` (the order is part of the contract, so that one seed
    gives the same data in every lesson):

    1. ``W*: (d_in, d_out)`` with entries :math:`\mathcal N(0, 1/d_{in})`, so each target has
       unit variance before noise;
    2. ``X: (n, d_in)`` with entries :math:`\mathcal N(0, 1)`;
    3. ``E: (n, d_out)`` with entries :math:`\mathcal N(0, 1)`, and ``Y = X W* + noise_std * E``.

    Returns ``(X, Y)``, both float32 (computed in float64, then cast once).
    Raises ``TypeError``/``ValueError`` for non-integer or non-positive sizes, a negative or
    non-finite ``noise_std``, or an ``rng`` that is not a ``numpy.random.Generator``.
    """
    n = require_int("n", n, minimum=1)
    d_in = require_int("d_in", d_in, minimum=1)
    d_out = require_int("d_out", d_out, minimum=1)
    rng = require_generator("rng", rng)
    noise_std = require_real("noise_std", noise_std, minimum=0.0)

    teacher = rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)  # (d_in, d_out)
    X = rng.standard_normal((n, d_in))  # (n, d_in)
    noise = rng.standard_normal((n, d_out))  # (n, d_out)
    Y = X @ teacher + noise_std * noise  # (n, d_out)
    return X.astype(np.float32), Y.astype(np.float32)


# --- Lesson 2 --------------------------------------------------------------------------------------
def init_mlp_params(d_in: int, d_hidden: int, d_out: int, rng: np.random.Generator) -> Params:
    r"""Initial parameters of the two-layer MLP, float32.

    ``W1: (d_in, d_hidden)`` ~ :math:`\mathcal N(0, 2/d_{in})` — He (Kaiming) initialisation for the
    layer followed by a ReLU, fan-in mode, as ``torch.nn.init.kaiming_normal_(nonlinearity="relu")``;
    ``W2: (d_hidden, d_out)`` ~ :math:`\mathcal N(0, 1/d_{hidden})` — gain 1 for the linear output layer;
    ``b1: (d_hidden,)`` and ``b2: (d_out,)`` are zeros. ``W1`` is drawn before ``W2``.
    """
    d_in = require_int("d_in", d_in, minimum=1)
    d_hidden = require_int("d_hidden", d_hidden, minimum=1)
    d_out = require_int("d_out", d_out, minimum=1)
    rng = require_generator("rng", rng)

    W1 = rng.standard_normal((d_in, d_hidden)) * np.sqrt(2.0 / d_in)  # (d_in, d_hidden)
    W2 = rng.standard_normal((d_hidden, d_out)) * np.sqrt(1.0 / d_hidden)  # (d_hidden, d_out)
    return {
        "W1": W1.astype(np.float32),
        "b1": np.zeros(d_hidden, dtype=np.float32),
        "W2": W2.astype(np.float32),
        "b2": np.zeros(d_out, dtype=np.float32),
    }


def validate_mlp_params(params: object, name: str = "params") -> Params:
    """Check that ``params`` is an MLP parameter dict with consistent shapes; return it.

    Used by every function that takes ``params``: ``W1 (d_in, d_hidden)``, ``b1 (d_hidden,)``,
    ``W2 (d_hidden, d_out)``, ``b2 (d_out,)``, all floating point.
    """
    require_keys(name, params, PARAM_KEYS)
    W1 = require_float_array(f"{name}['W1']", params["W1"], ndim=2)
    b1 = require_float_array(f"{name}['b1']", params["b1"], ndim=1)
    W2 = require_float_array(f"{name}['W2']", params["W2"], ndim=2)
    b2 = require_float_array(f"{name}['b2']", params["b2"], ndim=1)
    require_axis_match(f"{name}['W1']", W1, 1, f"{name}['b1']", b1, 0, "hidden")
    require_axis_match(f"{name}['W1']", W1, 1, f"{name}['W2']", W2, 0, "hidden")
    require_axis_match(f"{name}['W2']", W2, 1, f"{name}['b2']", b2, 0, "output")
    return params  # type: ignore[return-value]


# --- Lesson 3 --------------------------------------------------------------------------------------
def linear_forward(X: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    r"""Affine map :math:`Z = X W + b` (``b`` broadcast over the batch axis).

    ``X: (batch, d_in)``, ``W: (d_in, d_out)``, ``b: (d_out,)`` → ``Z: (batch, d_out)``; the dtype
    follows NumPy promotion (float32 in, float32 out). Nothing is mutated. Raises ``ValueError`` when
    the ranks or the shared axes disagree — no silent broadcasting of a wrong-shaped bias.
    """
    X = require_float_array("X", X, ndim=2)
    W = require_float_array("W", W, ndim=2)
    b = require_float_array("b", b, ndim=1)
    require_axis_match("X", X, 1, "W", W, 0, "input-feature")
    require_axis_match("W", W, 1, "b", b, 0, "output-feature")
    return X @ W + b  # (batch, d_out)


# --- Lesson 4 --------------------------------------------------------------------------------------
def relu_forward(Z: np.ndarray) -> np.ndarray:
    r"""Elementwise :math:`\max(Z, 0)` as a new array of ``Z``'s shape and dtype; ``Z`` is not mutated.

    NaN stays NaN (``np.maximum`` propagates it), so a diverged run is not hidden.
    """
    Z = require_float_array("Z", Z)
    return np.maximum(Z, Z.dtype.type(0))


# --- Lesson 5 --------------------------------------------------------------------------------------
def mlp_forward(params: Params, X: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    r"""Forward pass of the two-layer MLP.

    ``X: (batch, d_in)`` → ``Y_hat: (batch, d_out)`` and ``cache = {"X", "Z1", "A1"}`` — exactly what
    :func:`mlp_backward` needs: ``X`` for ``dW1``, ``Z1: (batch, d_hidden)`` for the ReLU mask,
    ``A1: (batch, d_hidden)`` for ``dW2``. The output pre-activation is not kept: nothing reads it.
    """
    params = validate_mlp_params(params)
    X = require_float_array("X", X, ndim=2)
    require_axis_match("X", X, 1, "params['W1']", params["W1"], 0, "input-feature")
    Z1 = linear_forward(X, params["W1"], params["b1"])  # (batch, d_hidden)
    A1 = relu_forward(Z1)  # (batch, d_hidden)
    Y_hat = linear_forward(A1, params["W2"], params["b2"])  # (batch, d_out)
    return Y_hat, {"X": X, "Z1": Z1, "A1": A1}


# --- Lesson 6 --------------------------------------------------------------------------------------
def mse_loss_and_grad(Y_hat: np.ndarray, Y: np.ndarray) -> tuple[float, np.ndarray]:
    r"""Mean squared error over batch *and* outputs, and its gradient.

    :math:`L = \frac{1}{n d}\sum_{i,j}(\hat Y_{ij}-Y_{ij})^2`, :math:`\partial L/\partial \hat Y =
    \frac{2}{n d}(\hat Y - Y)` with ``Y_hat, Y: (batch, d_out)``. Returns ``(loss, dY_hat)``: a
    Python float and an array of ``Y_hat``'s shape and dtype.
    """
    Y_hat = require_float_array("Y_hat", Y_hat, ndim=2)
    Y = require_float_array("Y", Y, ndim=2)
    require_same_shape("Y_hat", Y_hat, "Y", Y)
    diff = Y_hat - Y  # (batch, d_out)
    count = diff.size
    loss = float(np.mean(np.square(diff, dtype=np.float64)))
    dY_hat = (diff * (2.0 / count)).astype(Y_hat.dtype, copy=False)
    return loss, dY_hat


# --- Lesson 7 --------------------------------------------------------------------------------------
def linear_backward(
    dOut: np.ndarray, X: np.ndarray, W: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Gradients of :math:`Z = XW + b` given :math:`G = \partial L/\partial Z`.

    ``dOut: (batch, d_out)``, ``X: (batch, d_in)``, ``W: (d_in, d_out)`` →
    ``dX = dOut Wᵀ: (batch, d_in)``, ``dW = Xᵀ dOut: (d_in, d_out)``,
    ``db = Σ_batch dOut: (d_out,)`` — a sum, not a mean: the loss already divided by the batch.
    """
    dOut = require_float_array("dOut", dOut, ndim=2)
    X = require_float_array("X", X, ndim=2)
    W = require_float_array("W", W, ndim=2)
    require_axis_match("dOut", dOut, 0, "X", X, 0, "batch")
    require_axis_match("X", X, 1, "W", W, 0, "input-feature")
    require_axis_match("dOut", dOut, 1, "W", W, 1, "output-feature")
    dX = dOut @ W.T  # (batch, d_in)
    dW = X.T @ dOut  # (d_in, d_out)
    db = dOut.sum(axis=0)  # (d_out,)
    return dX, dW, db


# --- Lesson 8 --------------------------------------------------------------------------------------
def relu_backward(dA: np.ndarray, Z: np.ndarray) -> np.ndarray:
    r"""Gradient through :math:`A = \max(Z, 0)`: :math:`\partial L/\partial Z = \partial L/\partial A
    \odot \mathbb 1[Z > 0]`.

    At ``Z == 0`` the derivative is taken to be 0 (the subgradient PyTorch and JAX use), so the mask
    is strictly ``Z > 0``. ``dA`` and ``Z`` share a shape; the result has ``dA``'s dtype.
    """
    dA = require_float_array("dA", dA)
    Z = require_float_array("Z", Z)
    require_same_shape("dA", dA, "Z", Z)
    return dA * (Z > 0)


# --- Lesson 9 --------------------------------------------------------------------------------------
def first_linear_backward(dOut: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Weight and bias gradients of the *first* layer only: ``dW = Xᵀ dOut``, ``db = Σ_batch dOut``.

    The input ``X`` is data, not a parameter, so ``dX = dOut W1ᵀ`` — a ``(batch, d_in)`` matmul and
    array — is never needed. ``dOut: (batch, d_hidden)``, ``X: (batch, d_in)``.
    """
    dOut = require_float_array("dOut", dOut, ndim=2)
    X = require_float_array("X", X, ndim=2)
    require_axis_match("dOut", dOut, 0, "X", X, 0, "batch")
    return X.T @ dOut, dOut.sum(axis=0)  # (d_in, d_hidden), (d_hidden,)


# --- Lesson 10 -------------------------------------------------------------------------------------
def mlp_backward(params: Params, cache: dict[str, np.ndarray], dY_hat: np.ndarray) -> Params:
    r"""Backward pass of the two-layer MLP: ``{"W1", "b1", "W2", "b2"}`` gradients, each shaped like
    its parameter.

    .. math::

        \partial W_2 = A_1^\top G,\ \partial b_2 = \textstyle\sum_i G_i,\ 
        \partial Z_1 = (G W_2^\top) \odot \mathbb 1[Z_1>0],\ 
        \partial W_1 = X^\top \partial Z_1,\ \partial b_1 = \textstyle\sum_i (\partial Z_1)_i

    with ``G = dY_hat: (batch, d_out)`` and ``cache`` as returned by :func:`mlp_forward`.
    """
    params = validate_mlp_params(params)
    require_keys("cache", cache, CACHE_KEYS)
    dY_hat = require_float_array("dY_hat", dY_hat, ndim=2)
    A1 = require_float_array("cache['A1']", cache["A1"], ndim=2)
    require_axis_match("dY_hat", dY_hat, 0, "cache['A1']", A1, 0, "batch")
    require_axis_match("dY_hat", dY_hat, 1, "params['W2']", params["W2"], 1, "output-feature")
    dA1, dW2, db2 = linear_backward(dY_hat, A1, params["W2"])  # (batch, d_hidden), ...
    dZ1 = relu_backward(dA1, cache["Z1"])  # (batch, d_hidden)
    dW1, db1 = first_linear_backward(dZ1, cache["X"])  # (d_in, d_hidden), (d_hidden,)
    return {"W1": dW1, "b1": db1, "W2": dW2, "b2": db2}


def sgd_step(params: Params, grads: Params, lr: float) -> Params:
    """A plain gradient-descent step ``θ ← θ − lr · g`` returning new arrays (``params`` is not mutated)."""
    params = validate_mlp_params(params)
    validate_mlp_params(grads, "grads")
    lr = require_real("lr", lr, strictly_positive=True)
    out = {}
    for key in PARAM_KEYS:
        require_same_shape(f"params['{key}']", params[key], f"grads['{key}']", grads[key])
        out[key] = (params[key] - lr * grads[key]).astype(params[key].dtype, copy=False)
    return out
