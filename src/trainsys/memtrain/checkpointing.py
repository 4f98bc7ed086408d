r"""Module 1, Part 3 — activation checkpointing: trade recomputation for activation memory.

The network is the deep MLP of :mod:`trainsys.memtrain.deep_mlp`: ``L`` affine layers with a ReLU after every
layer but the last, whose plain cache keeps each layer's input, ``[a_0, …, a_{L-1}]``.

Checkpointing with segments of ``s`` layers keeps only the segment boundaries ``a_0, a_s, a_{2s}, …``
and, during the backward pass, rebuilds one segment at a time from its boundary (Chen et al. 2016).
Stored activations fall from ``L`` to about ``L/s + s``, smallest at ``s ≈ √L``, for
``L − ⌈L/s⌉`` recomputed layer forwards — less than one extra forward pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import require_axis_match, require_float_array, require_int, require_keys
from trainsys.memtrain.deep_mlp import (  # the plain deep MLP, re-exported: lessons and the package import it from here
    Layer,
    _layer_forward,
    _segment_backward,
    _validate_dY,
    deep_mlp_backward,
    deep_mlp_forward,
    init_deep_mlp_params,
    validate_deep_params,
    validate_layer_widths,
)
from trainsys.memtrain.dropout_checkpointing import generator_from_state, recompute_dropout_block, validate_dropout_p

# --- Lesson 15 -------------------------------------------------------------------------------------
def mlp_forward_checkpointed(
    params: list[Layer], X: np.ndarray, segment_size: int
) -> tuple[np.ndarray, dict[str, object]]:
    """Forward pass keeping only segment boundaries.

    Layers are grouped into consecutive segments of ``segment_size`` layers (the last may be shorter).
    Returns ``(Y_hat, {"segment_size": s, "boundaries": [a_0, a_s, a_{2s}, …]})`` with one boundary per
    segment: the input of its first layer (``a_0`` is ``X`` itself, not a copy). Every other activation
    is freed as soon as the next layer has read it. ``Y_hat`` is bit-identical to :func:`deep_mlp_forward`.
    Raises ``ValueError`` when ``segment_size < 1`` or ``> L``.
    """
    X = require_float_array("X", X, ndim=2)
    params = validate_deep_params(params, X)
    s = require_int("segment_size", segment_size, minimum=1, maximum=len(params))
    boundaries = [X]
    a = X
    for l in range(len(params)):
        a = _layer_forward(params, l, a)  # the previous activation is released here unless it is a boundary
        if (l + 1) % s == 0 and l + 1 < len(params):
            boundaries.append(a)
    return a, {"segment_size": s, "boundaries": boundaries}


# --- Lesson 16 -------------------------------------------------------------------------------------
def recompute_block_activations(
    params: list[Layer], x_in: np.ndarray, start: int, stop: int, dropout: Mapping[str, object] | None = None
) -> dict[str, list[np.ndarray]]:
    """Rebuild the cache of layers ``start … stop−1`` from their input ``x_in = a_start``.

    Returns ``{"a": [a_start, …, a_{stop−1}]}`` — ``x_in`` itself first, then ``stop − start − 1``
    recomputed activations, each bit-identical to the plain forward's (same operations, same order).
    Layer ``stop − 1`` is not run: its output is the next boundary (or the network's output).

    ``dropout = {"p": p, "rng_state": σ}`` rebuilds a block of the network with inverted dropout after
    every hidden ReLU (:mod:`trainsys.memtrain.dropout_checkpointing`), ``σ`` the ``bit_generator.state``
    its checkpointed forward recorded at this segment's start. The masks are *replayed*: a new generator
    is set to ``σ`` (no other generator is read or moved) and
    :func:`~trainsys.memtrain.dropout_checkpointing.recompute_dropout_block` rebuilds the block from it,
    returning ``{"a": [...], "keep": [m_start, …]}`` — the forward's activations and masks bit for bit,
    the top layer's mask included when that layer is hidden (``stop < L``). Validated after the bounds:
    ``dropout`` a dict with exactly those keys (naming ``dropout``), ``0 ≤ p < 1`` (naming ``dropout['p']``),
    ``σ`` a NumPy bit generator's state (naming ``dropout['rng_state']``).
    """
    params = validate_deep_params(params)
    x_in = require_float_array("x_in", x_in, ndim=2)
    start = require_int("start", start, minimum=0, maximum=len(params) - 1)
    stop = require_int("stop", stop, minimum=start + 1, maximum=len(params))
    require_axis_match("x_in", x_in, 1, f"params[{start}]['W']", params[start]["W"], 0, "input-feature")
    if dropout is not None:
        require_keys("dropout", dropout, ("p", "rng_state"))
        p = validate_dropout_p(dropout["p"], "dropout['p']")
        rng = generator_from_state("dropout['rng_state']", dropout["rng_state"])
        return recompute_dropout_block(params, x_in, start, stop, p, rng)
    a = [x_in]
    for l in range(start, stop - 1):
        a.append(_layer_forward(params, l, a[-1]))
    return {"a": a}


# --- Lesson 17 -------------------------------------------------------------------------------------
def mlp_backward_checkpointed(
    params: list[Layer], ckpt_cache: Mapping[str, object], dY_hat: np.ndarray
) -> tuple[list[Layer], int]:
    """Backward pass from boundaries only: rebuild each segment (last first), back-propagate, drop it.

    Returns ``(grads, recomputed_layers)``: the same gradients as :func:`deep_mlp_backward` (bit for bit)
    and the number of layer forwards recomputed, ``L − ⌈L/s⌉``. At any moment one segment's
    activations are alive beside the boundaries.
    """
    params = validate_deep_params(params)
    boundaries = list(ckpt_cache["boundaries"])  # type: ignore[call-overload]
    dY_hat = _validate_dY(params, dY_hat, boundaries[0])
    s = require_int("ckpt_cache['segment_size']", ckpt_cache["segment_size"], minimum=1, maximum=len(params))
    L = len(params)
    if len(boundaries) != math.ceil(L / s):
        raise ValueError(f"ckpt_cache['boundaries'] must hold ceil(L / s) = {math.ceil(L / s)} arrays, "
                         f"got {len(boundaries)}")
    grads: list[Layer | None] = [None] * L
    recomputed = 0
    g = dY_hat
    for k in range(len(boundaries) - 1, -1, -1):
        start, stop = k * s, min((k + 1) * s, L)
        segment = recompute_block_activations(params, boundaries[k], start, stop)
        recomputed += stop - start - 1
        g = _segment_backward(params, segment["a"], start, g, grads)
        del segment  # free this segment before rebuilding the next
    return grads, recomputed  # type: ignore[return-value]


def checkpointed_forward_backward(
    params: list[Layer], X: np.ndarray, Y: np.ndarray, segment_size: int | None
) -> list[Layer]:
    """Forward, MSE gradient and backward in one call (``segment_size=None``: no checkpointing).

    The function whose ``tracemalloc`` peak :func:`estimate_checkpointing_memory_savings` predicts.
    """
    if segment_size is None:
        Y_hat, cache = deep_mlp_forward(params, X)
        dY = (Y_hat - Y) * (2.0 / Y.size)
        del Y_hat
        return deep_mlp_backward(params, cache, dY)
    Y_hat, ckpt = mlp_forward_checkpointed(params, X, segment_size)
    dY = (Y_hat - Y) * (2.0 / Y.size)
    del Y_hat
    return mlp_backward_checkpointed(params, ckpt, dY)[0]


# --- Lesson 18 -------------------------------------------------------------------------------------
def checkpointing_memory_timeline(
    layer_widths: Sequence[int], batch: int, segment_size: int | None, bytes_per_elem: int = 4,
    include_gradients: bool = True,
) -> list[tuple[str, int]]:
    """Bytes alive at each busy moment of :func:`checkpointed_forward_backward` (``X``, ``Y``, params excluded).

    A walk over the same schedule as the code, from shapes alone. Alive at a backward moment of layer
    ``l``: the kept activations (all of them, or the boundaries), the current segment's rebuilt
    activations, ``dY``, the gradient entering the segment, the gradient entering layer ``l``, the
    working set of ``l`` (``dA``, the boolean mask plus NumPy's cast buffer, the masked gradient) and
    the parameter gradients made so far (left out with ``include_gradients=False``: the activation part
    alone, as the memory report counts gradients separately). ``segment_size=None`` is the plain pass.
    """
    widths = validate_layer_widths(layer_widths)
    n = require_int("batch", batch, minimum=1)
    b = require_int("bytes_per_elem", bytes_per_elem, minimum=1)
    L = len(widths) - 1
    if segment_size is None:
        bounds, plain = [(0, L)], True
    else:
        s = require_int("segment_size", segment_size, minimum=1, maximum=L)
        bounds, plain = [(k * s, min((k + 1) * s, L)) for k in range(math.ceil(L / s))], False
    act = [n * w * b for w in widths]  # a_l bytes; act[L] is the output
    mask = [n * w + b * min(np.getbufsize(), n * w) for w in widths]  # bool mask and its cast buffer
    param = [b * (widths[l] * widths[l + 1] + widths[l + 1]) * bool(include_gradients) for l in range(L)]
    timeline: list[tuple[str, int]] = []

    # Forward: the kept activations, plus the pre-activation and activation of the layer being run.
    kept = 0
    for l in range(L - 1):
        timeline.append((f"forward layer {l}", kept + 2 * act[l + 1]))
        if plain or (l + 1) % bounds[0][1] == 0:
            kept += act[l + 1]
    timeline.append(("forward output", kept + act[L]))
    boundaries = kept if not plain else 0
    stored = kept if plain else boundaries

    grads, dY = 0, act[L]
    g_segment = 0  # the gradient entering the current segment, when it is not dY itself
    for start, stop in reversed(bounds):
        rebuilt = 0
        if not plain:
            for l in range(start, stop - 1):  # recompute: z and a of layer l alive together
                timeline.append((f"recompute layer {l}", stored + rebuilt + 2 * act[l + 1] + dY + g_segment + grads))
                rebuilt += act[l + 1]
        g_layer = 0  # the gradient entering layer l, when it differs from the segment's
        for l in range(stop - 1, start - 1, -1):
            grads += param[l]
            base = stored + rebuilt + dY + g_segment + g_layer + grads
            if l == 0:
                timeline.append(("layer 0 weight gradient", base))
                break
            timeline.append((f"layer {l} ReLU backward", base + act[l] + mask[l] + act[l]))
            g_layer = act[l]
        g_segment, rebuilt = g_layer, 0
    return timeline


def estimate_checkpointing_memory_savings(
    layer_widths: Sequence[int], batch: int, segment_size: int, bytes_per_elem: int = 4
) -> dict[str, float]:
    r"""Peak memory of a training pass with and without checkpointing, and what the saving costs.

    Returns ``plain_peak_bytes`` and ``checkpointed_peak_bytes`` (the maxima of
    :func:`checkpointing_memory_timeline`, which agree with ``tracemalloc`` within a few percent),
    ``saved_bytes``, ``recomputed_layers`` (``L − ⌈L/s⌉``), ``extra_forward_flops``
    (:math:`2\,n\,w_l\,w_{l+1}` summed over the recomputed layers), ``extra_compute_fraction`` (that
    over the ``3×`` forward cost of a plain step) and ``optimal_segment_size``, the ``s`` with the
    lowest checkpointed peak (≈ √L for equal widths).
    """
    widths = validate_layer_widths(layer_widths)
    L = len(widths) - 1
    s = require_int("segment_size", segment_size, minimum=1, maximum=L)
    n = require_int("batch", batch, minimum=1)

    def peak(seg: int | None) -> int:
        return max(m for _, m in checkpointing_memory_timeline(widths, n, seg, bytes_per_elem))

    recomputed = [l for k in range(math.ceil(L / s)) for l in range(k * s, min((k + 1) * s, L) - 1)]
    flops = [2 * n * widths[l] * widths[l + 1] for l in range(L)]
    extra = sum(flops[l] for l in recomputed)
    plain, checkpointed = peak(None), peak(s)
    return {
        "plain_peak_bytes": plain,
        "checkpointed_peak_bytes": checkpointed,
        "saved_bytes": plain - checkpointed,
        "recomputed_layers": len(recomputed),
        "extra_forward_flops": extra,
        "extra_compute_fraction": extra / (3 * sum(flops)),
        "optimal_segment_size": min(range(1, L + 1), key=peak),
    }
