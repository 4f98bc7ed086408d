r"""Module 2, Part 1 — the MLP classifier every DiLoCo worker trains, forward, loss and backward by hand.

A stack of ``L`` affine layers with a ReLU after every layer but the last:

.. math::

    A_0 = X,\qquad Z_l = A_l W_l + b_l,\qquad A_{l+1} = \mathrm{ReLU}(Z_l)\ (l < L-1),\qquad
    \text{logits} = Z_{L-1},

``params = {"W0": (d_in, h_1), "b0": (h_1,), …, "W{L-1}": (h_{L-1}, C), "b{L-1}": (C,)}`` for ``C``
classes. The loss is the mean cross-entropy of the softmax,

.. math::

    p_{ic} = \frac{e^{z_{ic} - m_i}}{\sum_j e^{z_{ij} - m_i}},\qquad
    \ell = -\frac1n \sum_i \Big(z_{i y_i} - m_i - \log \sum_j e^{z_{ij} - m_i}\Big),\qquad m_i = \max_j z_{ij},

computed with the row maximum subtracted so that logits of :math:`\pm 10^4` stay finite, and its
gradient with respect to the logits is the famous :math:`(P - \mathrm{onehot}(y)) / n`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import (
    describe,
    require_axis_match,
    require_float_array,
    require_generator,
    require_int,
    require_real,
)

Params = dict[str, np.ndarray]


def validate_sizes(sizes: object) -> list[int]:
    """Require a sequence of at least two positive integer widths ``[d_in, h_1, …, n_classes]``."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise TypeError(f"sizes must be a list of integers [d_in, hidden..., n_classes], got {describe(sizes)}")
    if len(sizes) < 2:
        raise ValueError(f"sizes must hold at least 2 widths (input and classes), got {list(sizes)}")
    return [require_int(f"sizes[{i}]", s, minimum=1) for i, s in enumerate(sizes)]


def num_layers(params: Mapping[str, np.ndarray]) -> int:
    """``L``, the number of ``W`` keys of a parameter dict (no validation)."""
    return sum(1 for key in params if key.startswith("W"))


def validate_model_params(params: object, name: str = "params") -> int:
    """Check keys ``W0, b0, …, W{L-1}, b{L-1}``, float arrays, chaining shapes; return ``L``."""
    if not isinstance(params, Mapping):
        raise TypeError(f"{name} must be a dict {{'W0', 'b0', ...}} of arrays, got {describe(params)}")
    L = num_layers(params)
    expected = {f"{p}{l}" for l in range(L) for p in "Wb"}
    if L == 0 or set(params) != expected:
        raise ValueError(f"{name} must have the keys W0, b0, ..., W{{L-1}}, b{{L-1}}; got {sorted(map(str, params))}")
    for l in range(L):
        W = require_float_array(f"{name}['W{l}']", params[f"W{l}"], ndim=2)
        b = require_float_array(f"{name}['b{l}']", params[f"b{l}"], ndim=1)
        require_axis_match(f"{name}['W{l}']", W, 1, f"{name}['b{l}']", b, 0, "output-feature")
        if l > 0:
            require_axis_match(f"{name}['W{l - 1}']", params[f"W{l - 1}"], 1, f"{name}['W{l}']", W, 0, "width")
    return L


def validate_labels(name: str, y: object, n: int | None = None, n_classes: int | None = None) -> np.ndarray:
    """Require 1-D integer labels (of length ``n`` and in ``[0, n_classes)`` when given)."""
    if not isinstance(y, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of integer class labels, got {describe(y)}")
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"{name} must be a 1-D integer array of class labels, got {describe(y)}")
    if n is not None and len(y) != n:
        raise ValueError(f"{name} must hold one label per example ({n}), got {len(y)}")
    if n_classes is not None and len(y) and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(f"{name} must lie in [0, {n_classes}) for {n_classes} classes, "
                         f"got values from {int(y.min())} to {int(y.max())}")
    return y


# --- Lesson 1 --------------------------------------------------------------------------------------
def init_model_params(sizes: Sequence[int], rng: np.random.Generator) -> Params:
    r"""Initial float32 parameters for layer widths ``sizes = [d_in, h_1, …, C]`` (``L = len(sizes) − 1``).

    ``W_l: (sizes[l], sizes[l+1])`` ~ :math:`\mathcal N(0, 2/\text{fan\_in})` (He) for every layer
    followed by a ReLU and :math:`\mathcal N(0, 1/\text{fan\_in})` for the output layer; ``b_l`` zeros.
    Drawn from ``rng`` in layer order ``W0, W1, …`` (in float64, then cast once).
    Raises ``TypeError``/``ValueError`` for fewer than two sizes, a size < 1, or a non-Generator ``rng``.
    """
    widths = validate_sizes(sizes)
    rng = require_generator("rng", rng)
    L = len(widths) - 1
    params: Params = {}
    for l, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        gain = 2.0 if l < L - 1 else 1.0
        W = rng.standard_normal((fan_in, fan_out)) * np.sqrt(gain / fan_in)  # (fan_in, fan_out)
        params[f"W{l}"] = W.astype(np.float32)
        params[f"b{l}"] = np.zeros(fan_out, dtype=np.float32)
    return params


# --- Lesson 2 --------------------------------------------------------------------------------------
def relu(x: np.ndarray) -> np.ndarray:
    r"""Elementwise :math:`\max(x, 0)`: a new array of ``x``'s shape and dtype; NaN stays NaN."""
    x = require_float_array("x", x)
    return np.maximum(x, x.dtype.type(0))


# --- Lesson 3 --------------------------------------------------------------------------------------
def model_forward(params: Params, X: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    r"""Logits of the MLP and the cache its backward pass needs.

    ``X: (batch, d_in)`` → ``logits: (batch, C)`` and ``cache = {"A0": X, "A1", …, "A{L-1}", "logits"}``:
    the input of every layer (for :math:`\partial W_l = A_l^\top G_l`; the ReLU mask of layer ``l − 1``
    is :math:`\mathbb 1[A_l > 0]`, identical to :math:`\mathbb 1[Z_{l-1} > 0]`) and the logits (for the
    softmax in the loss gradient). ``cache["A0"]`` is ``X`` itself, not a copy. Nothing is mutated.
    """
    L = validate_model_params(params)
    X = require_float_array("X", X, ndim=2)
    require_axis_match("X", X, 1, "params['W0']", params["W0"], 0, "input-feature")
    cache: dict[str, np.ndarray] = {"A0": X}
    A = X
    for l in range(L):
        Z = A @ params[f"W{l}"] + params[f"b{l}"]  # (batch, sizes[l+1])
        if l < L - 1:
            A = relu(Z)  # (batch, sizes[l+1])
            cache[f"A{l + 1}"] = A
    cache["logits"] = Z  # (batch, C)
    return Z, cache


# --- Lesson 4 --------------------------------------------------------------------------------------
def softmax(logits: np.ndarray) -> np.ndarray:
    r"""Row-wise softmax :math:`p_{ic} = e^{z_{ic} - m_i} / \sum_j e^{z_{ij} - m_i}` with :math:`m_i = \max_j z_{ij}`.

    ``logits: (batch, C)`` → probabilities of the same shape and dtype, every row summing to 1.
    Subtracting the row maximum changes nothing mathematically and keeps every exponent
    :math:`\le 0`, so logits of :math:`\pm 10^4` (``exp(1e4)`` is ``inf`` in any float) stay finite.
    """
    logits = require_float_array("logits", logits, ndim=2)
    shifted = logits - logits.max(axis=1, keepdims=True)  # (batch, C), every entry <= 0
    e = np.exp(shifted)  # (batch, C), the row maximum becomes 1
    return e / e.sum(axis=1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    r""":math:`\log p_{ic} = (z_{ic} - m_i) - \log\sum_j e^{z_{ij} - m_i}`: log-sum-exp, finite for huge logits."""
    logits = require_float_array("logits", logits, ndim=2)
    shifted = logits - logits.max(axis=1, keepdims=True)  # (batch, C)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


# --- Lesson 5 --------------------------------------------------------------------------------------
def cross_entropy_loss(logits: np.ndarray, y: np.ndarray) -> float:
    r"""Mean cross-entropy :math:`\ell = -\frac1n\sum_i \log p_{i y_i}` by log-sum-exp, as a Python float.

    ``logits: (batch, C)`` float, ``y: (batch,)`` integer labels in ``[0, C)``, ``batch >= 1``.
    Never forms ``log(softmax(...))``: a probability that underflows to 0 would give ``inf``.
    The mean is accumulated in float64. Raises ``ValueError`` for a label out of range (naming ``y``),
    a length mismatch or an empty batch.
    """
    logits = require_float_array("logits", logits, ndim=2)
    if logits.shape[0] == 0:
        raise ValueError(f"logits must hold at least one example, got {describe(logits)}")
    y = validate_labels("y", y, logits.shape[0], logits.shape[1])
    log_p = log_softmax(logits)  # (batch, C)
    picked = log_p[np.arange(len(y)), y]  # (batch,)
    return float(-np.mean(picked, dtype=np.float64))


# --- Lesson 6 --------------------------------------------------------------------------------------
def model_backward(params: Params, cache: Mapping[str, np.ndarray], y: np.ndarray) -> Params:
    r"""Gradients of :func:`cross_entropy_loss` (of the cached logits) with respect to every parameter.

    .. math::

        G_{L-1} = \frac{P - \mathrm{onehot}(y)}{n},\quad \partial W_l = A_l^\top G_l,\quad
        \partial b_l = \textstyle\sum_i (G_l)_i,\quad G_{l-1} = (G_l W_l^\top) \odot \mathbb 1[A_l > 0]

    ``cache`` as returned by :func:`model_forward`, ``y: (batch,)`` labels. Returns a dict with the keys
    and shapes of ``params``, in their dtype. The ReLU derivative at 0 is taken as 0.
    """
    L = validate_model_params(params)
    if not isinstance(cache, Mapping):
        raise TypeError(f"cache must be the dict returned by model_forward, got {describe(cache)}")
    expected = {f"A{l}" for l in range(L)} | {"logits"}
    if set(cache) != expected:
        raise ValueError(f"cache must have exactly the keys {sorted(expected)}, got {sorted(map(str, cache))}")
    logits = require_float_array("cache['logits']", cache["logits"], ndim=2)
    n, C = logits.shape
    y = validate_labels("y", y, n, C)
    G = softmax(logits)  # (batch, C)
    G[np.arange(n), y] -= 1.0
    G /= G.dtype.type(n)  # dL/dlogits: (batch, C)
    grads: Params = {}
    for l in range(L - 1, -1, -1):
        A = cache[f"A{l}"]  # (batch, sizes[l])
        grads[f"W{l}"] = A.T @ G  # (sizes[l], sizes[l+1])
        grads[f"b{l}"] = G.sum(axis=0)  # (sizes[l+1],)
        if l > 0:
            G = (G @ params[f"W{l}"].T) * (A > 0)  # (batch, sizes[l]): through layer l, then ReLU l-1
    return {key: grads[key] for key in params}


# --- Data ------------------------------------------------------------------------------------------
def make_classification_data(
    n: int,
    d_in: int,
    n_classes: int,
    rng: np.random.Generator,
    *,
    clusters_per_class: int = 2,
    class_sep: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""A labelled Gaussian-mixture data set: ``X: (n, d_in)`` float32, ``y: (n,)`` int64 in ``[0, C)``.

    Every class owns ``clusters_per_class`` centres :math:`\mu \sim \mathcal N(0, \text{class\_sep}^2 I)`;
    an example of class ``c`` is a centre of ``c`` (chosen uniformly) plus :math:`\mathcal N(0, I)` noise.
    Two clusters per class make the classes non-convex — a linear model cannot fit them, a small MLP
    can — and the overlap set by ``class_sep`` keeps the best accuracy below 100 %. Labels are balanced
    (``n mod C`` classes get one more example). Draw order: centres ``(C · clusters, d_in)``, a
    permutation of the labels ``arange(n) % C``, the cluster of each example, the noise ``(n, d_in)``.
    """
    n = require_int("n", n, minimum=1)
    d_in = require_int("d_in", d_in, minimum=1)
    n_classes = require_int("n_classes", n_classes, minimum=2)
    rng = require_generator("rng", rng)
    clusters = require_int("clusters_per_class", clusters_per_class, minimum=1)
    class_sep = require_real("class_sep", class_sep, minimum=0.0)
    centres = rng.standard_normal((n_classes * clusters, d_in)) * class_sep  # (C * clusters, d_in)
    y = rng.permutation(np.arange(n) % n_classes)  # (n,)
    which = rng.integers(0, clusters, size=n)  # (n,)
    X = centres[y * clusters + which] + rng.standard_normal((n, d_in))  # (n, d_in)
    return X.astype(np.float32), y.astype(np.int64)


def split_heldout(
    X: np.ndarray, y: np.ndarray, heldout_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_heldout, y_heldout)``: a random ``heldout_fraction`` of the examples set aside.

    Done **before** anything is fitted or sharded, so that no worker ever sees a held-out example.
    ``n_heldout = round(heldout_fraction · n)`` must leave at least one example on each side.
    One permutation is drawn from ``rng``; its first ``n_heldout`` indices are held out.
    """
    X = require_float_array("X", X, ndim=2)
    y = validate_labels("y", y, X.shape[0])
    frac = require_real("heldout_fraction", heldout_fraction, strictly_positive=True)
    rng = require_generator("rng", rng)
    n = X.shape[0]
    n_held = int(round(frac * n))
    if not 1 <= n_held <= n - 1:
        raise ValueError(f"heldout_fraction must leave at least one example on each side: {frac} of {n} "
                         f"examples is {n_held}")
    perm = rng.permutation(n)
    held, train = perm[:n_held], perm[n_held:]
    return X[train], y[train], X[held], y[held]
