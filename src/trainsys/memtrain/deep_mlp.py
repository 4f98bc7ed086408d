r"""Module 1, Part 3 — the deep MLP that activation checkpointing works on (plain forward and backward).

The network is a stack of ``L`` affine layers with a ReLU after every layer but the last:

.. math::

    a_0 = X,\qquad z_l = a_l W_l + b_l,\qquad a_{l+1} = \mathrm{ReLU}(z_l)\ (l < L-1),\qquad \hat Y = z_{L-1},

``params`` a list of ``L`` dicts ``{"W": (w_l, w_{l+1}), "b": (w_{l+1},)}``. The backward pass of
layer ``l`` needs its input ``a_l`` and the ReLU mask of its output, and since
:math:`\mathbb 1[z_l > 0] = \mathbb 1[a_{l+1} > 0]` exactly, **each layer keeps only its input**: the
plain cache is ``[a_0, …, a_{L-1}]``.

:mod:`trainsys.memtrain.checkpointing` and :mod:`trainsys.memtrain.dropout_checkpointing` build on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import require_axis_match, require_float_array, require_generator, require_int
from trainsys.memtrain.mlp import first_linear_backward, linear_backward, linear_forward, relu_backward, relu_forward

Layer = dict[str, np.ndarray]


def init_deep_mlp_params(layer_widths: Sequence[int], rng: np.random.Generator) -> list[Layer]:
    """``L = len(layer_widths) − 1`` float32 layers: He init (``√(2/w_in)``) before a ReLU, ``√(1/w_in)`` for the last."""
    widths = validate_layer_widths(layer_widths)
    rng = require_generator("rng", rng)
    params = []
    for l, (w_in, w_out) in enumerate(zip(widths[:-1], widths[1:])):
        gain = 2.0 if l < len(widths) - 2 else 1.0
        W = rng.standard_normal((w_in, w_out)) * np.sqrt(gain / w_in)  # (w_in, w_out)
        params.append({"W": W.astype(np.float32), "b": np.zeros(w_out, np.float32)})
    return params


def validate_layer_widths(layer_widths: object) -> list[int]:
    """Require a sequence of at least two positive integer widths ``[d_in, w_1, …, d_out]``."""
    if isinstance(layer_widths, (str, bytes)) or not isinstance(layer_widths, Sequence):
        raise TypeError(f"layer_widths must be a list of integers, got {type(layer_widths).__name__}")
    if len(layer_widths) < 2:
        raise ValueError(f"layer_widths must hold at least 2 widths (input and output), got {list(layer_widths)}")
    return [require_int(f"layer_widths[{i}]", w, minimum=1) for i, w in enumerate(layer_widths)]


def validate_deep_params(params: object, X: np.ndarray | None = None) -> list[Layer]:
    """Check a list of layer dicts whose shapes chain (and match ``X``'s features, if given)."""
    if not isinstance(params, Sequence) or isinstance(params, Mapping) or len(params) == 0:
        raise TypeError(f"params must be a non-empty list of layer dicts {{'W', 'b'}}, got {type(params).__name__}")
    for l, layer in enumerate(params):
        if not isinstance(layer, Mapping) or set(layer) != {"W", "b"}:
            raise ValueError(f"params[{l}] must be a dict with exactly the keys 'W' and 'b'")
        W = require_float_array(f"params[{l}]['W']", layer["W"], ndim=2)
        b = require_float_array(f"params[{l}]['b']", layer["b"], ndim=1)
        require_axis_match(f"params[{l}]['W']", W, 1, f"params[{l}]['b']", b, 0, "output-feature")
        if l > 0:
            require_axis_match(f"params[{l - 1}]['W']", params[l - 1]["W"], 1, f"params[{l}]['W']", W, 0, "width")
    if X is not None:
        require_axis_match("X", X, 1, "params[0]['W']", params[0]["W"], 0, "input-feature")
    return list(params)


def _layer_forward(params: list[Layer], l: int, a: np.ndarray) -> np.ndarray:
    """Output of layer ``l`` on its input ``a``: ReLU(a W + b), or the linear output for the last layer."""
    z = linear_forward(a, params[l]["W"], params[l]["b"])  # (batch, w_{l+1})
    return relu_forward(z) if l < len(params) - 1 else z


def deep_mlp_forward(params: list[Layer], X: np.ndarray) -> tuple[np.ndarray, dict[str, list[np.ndarray]]]:
    """Plain forward pass: ``(Y_hat, {"a": [a_0, …, a_{L-1}]})`` — every layer's input is kept."""
    X = require_float_array("X", X, ndim=2)
    params = validate_deep_params(params, X)
    a = [X]
    for l in range(len(params) - 1):
        a.append(_layer_forward(params, l, a[-1]))  # a_{l+1}: (batch, w_{l+1})
    return _layer_forward(params, len(params) - 1, a[-1]), {"a": a}


def _segment_backward(
    params: list[Layer], a: list[np.ndarray], start: int, g: np.ndarray, grads: list[Layer | None]
) -> np.ndarray | None:
    """Back through layers ``start + len(a) − 1 … start`` given ``g = ∂L/∂(output of the top layer)``.

    ``a[i]`` is the input of layer ``start + i``. For a hidden top layer the caller has already applied
    its ReLU mask to ``g``. Fills ``grads`` and returns ``∂L/∂a[0]`` (``None`` below layer 0).
    """
    for i in range(len(a) - 1, -1, -1):
        l = start + i
        if l == 0:
            grads[0] = dict(zip(("W", "b"), first_linear_backward(g, a[0])))
            return None
        dA, dW, db = linear_backward(g, a[i], params[l]["W"])  # dA: (batch, w_l) = ∂L/∂a_l
        grads[l] = {"W": dW, "b": db}
        g = relu_backward(dA, a[i])  # mask 1[z_{l-1} > 0] = 1[a_l > 0]
        del dA
    return g


def _validate_dY(params: list[Layer], dY_hat: object, X: np.ndarray) -> np.ndarray:
    dY_hat = require_float_array("dY_hat", dY_hat, ndim=2)
    require_axis_match("dY_hat", dY_hat, 1, f"params[{len(params) - 1}]['W']", params[-1]["W"], 1, "output")
    require_axis_match("dY_hat", dY_hat, 0, "the cached input", X, 0, "batch")
    return dY_hat


def deep_mlp_backward(params: list[Layer], cache: Mapping[str, list[np.ndarray]], dY_hat: np.ndarray) -> list[Layer]:
    """Gradients ``[{"W", "b"}, …]`` of every layer from the plain cache of :func:`deep_mlp_forward`."""
    params = validate_deep_params(params)
    dY_hat = _validate_dY(params, dY_hat, cache["a"][0])
    grads: list[Layer | None] = [None] * len(params)
    _segment_backward(params, list(cache["a"]), 0, dY_hat, grads)
    return grads  # type: ignore[return-value]
