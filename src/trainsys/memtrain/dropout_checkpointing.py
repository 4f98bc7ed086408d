r"""Module 1, Part 3 — dropout under activation checkpointing: replay the random masks, do not redraw them.

The deep MLP of :mod:`trainsys.memtrain.deep_mlp` with inverted dropout (Srivastava et al. 2014)
after every hidden ReLU. For a hidden layer ``l < L−1``, with ``a_l: (n, w_l)``:

.. math::

    z_l = a_l W_l + b_l,\quad u_l \sim \mathcal U[0, 1)^{n \times w_{l+1}},\quad
    m_l = \mathbb 1[u_l \ge p],\quad a_{l+1} = \mathrm{ReLU}(z_l) \odot m_l \,/\, (1 - p),

so :math:`\mathbb E[a_{l+1} \mid z_l] = \mathrm{ReLU}(z_l)` (kept units are scaled up at training time,
as ``torch.nn.Dropout`` documents). ``u_l`` is one ``rng.random((n, w_{l+1}))`` call per hidden layer, in
layer order, whatever ``p`` (``p = 0`` draws too: the generator's path does not depend on ``p``). Backward:

.. math::

    \frac{\partial L}{\partial z_l} = \frac{\partial L}{\partial a_{l+1}} \odot \frac{m_l}{1 - p}
    \odot \mathbb 1[z_l > 0],\qquad \mathbb 1[z_l > 0]\, m_l = \mathbb 1[a_{l+1} > 0]

(as ``1/(1−p) ≥ 1``), so the ReLU mask is still read from the kept output ``a_{l+1}``.

Checkpointing (Chen et al. 2016) rebuilds a segment's activations from its boundary in the backward
pass. Here they depend on the masks, and the masks on the generator's state when they were drawn —
by then the generator has moved on. Drawing again gives *other* masks: the rebuilt activations are not
the ones that produced the loss, and the gradients are silently wrong. Keeping the masks would cost a
byte per hidden unit; instead each segment's forward records ``rng.bit_generator.state`` at its start
(PCG64's 128-bit state and increment in two small dicts: about 460 bytes as ``tracemalloc`` counts them),
and the backward sets it before rebuilding the segment and puts the caller's state back afterwards.
``torch.utils.checkpoint.checkpoint(..., preserve_rng_state=True)`` does the same for torch's CPU
generator — ``torch.get_rng_state()`` (a 5056-byte tensor) stashed in the forward,
``torch.set_rng_state`` inside ``torch.random.fork_rng`` for the recomputation (PyTorch documentation
of ``torch.utils.checkpoint``; ``torch/utils/checkpoint.py``, 2.13).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from trainsys._validation import (
    describe,
    require_axis_match,
    require_float_array,
    require_generator,
    require_int,
    require_keys,
    require_real,
    require_same_shape,
)
from trainsys.memtrain.deep_mlp import Layer, _layer_forward, _validate_dY, validate_deep_params
from trainsys.memtrain.mlp import first_linear_backward, linear_backward, relu_backward

PLAIN_CACHE_KEYS: tuple[str, ...] = ("p", "a", "keep")
"""The plain cache: ``p``, every layer's input ``[a_0, …, a_{L-1}]`` and every mask ``[m_0, …, m_{L-2}]``."""

CHECKPOINT_CACHE_KEYS: tuple[str, ...] = ("p", "segment_size", "boundaries", "rng_states")
"""The checkpointed cache: ``p``, ``s``, ``[a_0, a_s, …]`` and the generator state at each segment's start."""


def validate_dropout_p(p: object, name: str = "p") -> float:
    """Require a dropout probability ``0 ≤ p < 1`` (``p = 1`` keeps nothing and ``1/(1−p)`` is infinite).

    ``name`` is the argument's name in the error messages.
    """
    p = require_real(name, p, minimum=0.0)
    if p >= 1.0:
        raise ValueError(f"{name} must be < 1 ({name} = 1 drops every unit and divides by 1 - p = 0), got {p}")
    return p


def generator_from_state(name: str, state: object) -> np.random.Generator:
    """A new ``numpy.random.Generator`` in the recorded ``state`` (a ``bit_generator.state`` dict).

    The bit generator is the one ``state["bit_generator"]`` names (``"PCG64"`` for ``default_rng``),
    made with a fixed seed and then set to ``state``: no generator the caller holds is read or moved,
    and no operating-system entropy is drawn. Raises ``TypeError`` (not a dict) or ``ValueError``
    (not a state of a NumPy bit generator) naming ``name``.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"{name} must be a bit_generator.state dict, got {describe(state)}")
    kind = state.get("bit_generator")
    cls = getattr(np.random, kind, None) if isinstance(kind, str) else None
    if not (isinstance(cls, type) and issubclass(cls, np.random.BitGenerator)):
        raise ValueError(f"{name}['bit_generator'] must name a numpy.random bit generator such as 'PCG64', got {kind!r}")
    bit_generator = cls(0)
    try:
        bit_generator.state = dict(state)
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"{name} is not a valid {kind} state: {error}") from error
    return np.random.Generator(bit_generator)


def dropout_forward(h: np.ndarray, p: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Inverted dropout of ``h: (n, w)``: returns ``(h ⊙ m / (1−p), m)``, ``m = rng.random((n, w)) ≥ p`` (bool).

    The scale ``1/(1−p)`` is rounded once to ``h``'s dtype, so a kept unit is ``h · fl(1/(1−p))``,
    one rounding — the same product as ``h * noise`` in torch with ``noise = m · fl(1/(1−p))``.
    """
    h = require_float_array("h", h, ndim=2)
    p = validate_dropout_p(p)
    rng = require_generator("rng", rng)
    keep = rng.random(h.shape) >= p  # (n, w) bool; the float64 uniforms are freed at once
    out = h * keep  # (n, w): h or 0, exact
    out *= h.dtype.type(1.0 / (1.0 - p))
    return out, keep


def dropout_backward(g: np.ndarray, keep: np.ndarray, p: float) -> np.ndarray:
    """``∂L/∂h = g ⊙ m / (1−p)``, ``g = ∂L/∂(dropout output): (n, w)``, ``keep: (n, w)`` the bool mask.

    The same map as the forward (dropout is linear and diagonal), with the same single rounding.
    """
    g = require_float_array("g", g, ndim=2)
    if not isinstance(keep, np.ndarray) or keep.dtype != np.bool_:
        raise TypeError(f"keep must be a bool numpy.ndarray (the mask from dropout_forward), got {describe(keep)}")
    require_same_shape("g", g, "keep", keep)
    p = validate_dropout_p(p)
    out = g * keep  # (n, w)
    out *= g.dtype.type(1.0 / (1.0 - p))
    return out


def _run_layers(
    params: list[Layer], a: np.ndarray, start: int, stop: int, p: float, rng: np.random.Generator, keep_all: bool
) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Run layers ``start … stop−1`` on ``a = a_start``; return ``(output, activations, masks)``.

    With ``keep_all``: ``activations = [a_start, …]``, the input and every hidden layer's output (so it
    ends with ``a_stop`` unless the last layer ran), and ``masks = [m_start, …]``; otherwise both lists
    are empty and every intermediate is freed as soon as the next layer has read it.
    """
    acts: list[np.ndarray] = [a] if keep_all else []
    masks: list[np.ndarray] = []
    L = len(params)
    for l in range(start, stop):
        a = _layer_forward(params, l, a)  # ReLU(z_l), or z_{L-1} for the last layer: (n, w_{l+1})
        if l < L - 1:
            a, keep = dropout_forward(a, p, rng)  # a_{l+1}
            if keep_all:
                masks.append(keep)
                acts.append(a)
            del keep
    return a, acts, masks


def _segment_backward(
    params: list[Layer], a: list[np.ndarray], keep: list[np.ndarray], start: int, p: float,
    g: np.ndarray, grads: list[Layer | None],
) -> np.ndarray | None:
    """Back through layers ``start + len(a) − 1 … start`` given ``g = ∂L/∂z`` of the top layer.

    ``a[i]`` is the input of layer ``start + i`` and ``keep[i]`` the mask that produced ``a[i+1]``.
    Fills ``grads``; returns ``∂L/∂a[0]`` (the caller takes it back through the dropout and ReLU that
    made ``a[0]``), or ``None`` when the block starts at layer 0.
    """
    for i in range(len(a) - 1, -1, -1):
        l = start + i
        if l == 0:
            grads[0] = dict(zip(("W", "b"), first_linear_backward(g, a[0])))
            return None
        dA, dW, db = linear_backward(g, a[i], params[l]["W"])  # dA = ∂L/∂a_l: (n, w_l)
        grads[l] = {"W": dW, "b": db}
        if i == 0:
            return dA
        g = _through_dropout_relu(dA, keep[i - 1], a[i], p)
    return g


def _through_dropout_relu(dA: np.ndarray, keep: np.ndarray, a_out: np.ndarray, p: float) -> np.ndarray:
    """``∂L/∂z_l`` from ``dA = ∂L/∂a_{l+1}``, the mask ``m_l`` and ``a_{l+1}`` (``1[a_{l+1}>0] = m_l·1[z_l>0]``)."""
    return relu_backward(dropout_backward(dA, keep, p), a_out)


# --- Plain pass: every activation and mask cached ---------------------------------------------------
def dropout_mlp_forward(
    params: list[Layer], X: np.ndarray, p: float, rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, object]]:
    """Forward pass with dropout: ``(Y_hat, {"p", "a": [a_0, …, a_{L-1}], "keep": [m_0, …, m_{L-2}]})``.

    Draws ``L − 1`` masks from ``rng`` (one ``rng.random((n, w_{l+1}))`` per hidden layer, in order).
    With ``p = 0`` the output and the gradients are bit-identical to those of
    :func:`~trainsys.memtrain.checkpointing.deep_mlp_forward` and ``deep_mlp_backward``.
    """
    X = require_float_array("X", X, ndim=2)
    params = validate_deep_params(params, X)
    p = validate_dropout_p(p)
    rng = require_generator("rng", rng)
    Y_hat, a, keep = _run_layers(params, X, 0, len(params), p, rng, keep_all=True)
    return Y_hat, {"p": p, "a": a, "keep": keep}


def dropout_mlp_backward(params: list[Layer], cache: Mapping[str, object], dY_hat: np.ndarray) -> list[Layer]:
    """Gradients ``[{"W", "b"}, …]`` from the plain cache of :func:`dropout_mlp_forward` (draws nothing)."""
    params = validate_deep_params(params)
    require_keys("cache", cache, PLAIN_CACHE_KEYS)
    p = validate_dropout_p(cache["p"])
    a, keep = list(cache["a"]), list(cache["keep"])  # type: ignore[call-overload]
    L = len(params)
    if len(a) != L or len(keep) != L - 1:
        raise ValueError(f"cache must hold L = {L} activations and L - 1 = {L - 1} masks, got {len(a)} and {len(keep)}")
    dY_hat = _validate_dY(params, dY_hat, a[0])
    grads: list[Layer | None] = [None] * L
    _segment_backward(params, a, keep, 0, p, dY_hat, grads)
    return grads  # type: ignore[return-value]


# --- Checkpointed pass: boundaries and generator states only ------------------------------------------
def dropout_mlp_forward_checkpointed(
    params: list[Layer], X: np.ndarray, p: float, rng: np.random.Generator, segment_size: int
) -> tuple[np.ndarray, dict[str, object]]:
    """Forward pass keeping, per segment of ``segment_size`` layers, its input and ``rng``'s state at its start.

    Returns ``(Y_hat, {"p", "segment_size", "boundaries": [a_0, a_s, …], "rng_states": [σ_0, σ_1, …]})``,
    ``σ_k = rng.bit_generator.state`` before segment ``k`` draws. Draws exactly what
    :func:`dropout_mlp_forward` draws, in the same order: ``Y_hat`` and ``rng``'s final state are the same.
    Raises ``ValueError`` when ``segment_size < 1`` or ``> L``.
    """
    X = require_float_array("X", X, ndim=2)
    params = validate_deep_params(params, X)
    p = validate_dropout_p(p)
    rng = require_generator("rng", rng)
    L = len(params)
    s = require_int("segment_size", segment_size, minimum=1, maximum=L)
    boundaries, states = [], []
    a = X
    for start in range(0, L, s):
        boundaries.append(a)
        states.append(rng.bit_generator.state)  # a fresh dict: later draws do not change it
        a, _, _ = _run_layers(params, a, start, min(start + s, L), p, rng, keep_all=False)
    return a, {"p": p, "segment_size": s, "boundaries": boundaries, "rng_states": states}


def recompute_dropout_block(
    params: list[Layer], x_in: np.ndarray, start: int, stop: int, p: float, rng: np.random.Generator
) -> dict[str, list[np.ndarray]]:
    """Rebuild the cache of layers ``start … stop−1`` from ``x_in = a_start``, drawing masks from ``rng`` as it is.

    Returns ``{"a": [a_start, …, a_{stop−1}], "keep": [m_start, …]}``: ``stop − start − 1`` recomputed
    layers and the masks of every hidden layer in the block — the top one too (``m_{stop−1}`` when
    ``stop < L``), drawn but not applied, since the backward pass needs it to enter the block. The masks
    are the forward's only if ``rng`` is in the state it had when the forward reached layer ``start``.
    """
    params = validate_deep_params(params)
    x_in = require_float_array("x_in", x_in, ndim=2)
    L = len(params)
    start = require_int("start", start, minimum=0, maximum=L - 1)
    stop = require_int("stop", stop, minimum=start + 1, maximum=L)
    p = validate_dropout_p(p)
    rng = require_generator("rng", rng)
    require_axis_match("x_in", x_in, 1, f"params[{start}]['W']", params[start]["W"], 0, "input-feature")
    _, a, keep = _run_layers(params, x_in, start, stop - 1, p, rng, keep_all=True)  # a ends with a_{stop-1}
    if stop < L:  # the top layer is hidden: draw its mask exactly as the forward did, skip its matmul
        keep.append(rng.random((x_in.shape[0], params[stop - 1]["W"].shape[1])) >= p)
    return {"a": a, "keep": keep}


def dropout_mlp_backward_checkpointed(
    params: list[Layer], ckpt_cache: Mapping[str, object], dY_hat: np.ndarray, rng: np.random.Generator,
    *, replay_rng_state: bool = True,
) -> tuple[list[Layer], int]:
    """Backward pass from boundaries: rebuild each segment (last first) with its own masks, back-propagate.

    ``replay_rng_state=True``: before rebuilding segment ``k``, ``rng``'s state is set to ``σ_k``; when the
    pass ends (or fails) it is set back to where it was — the gradients are bit-identical to
    :func:`dropout_mlp_backward`'s and ``rng`` is not advanced. ``replay_rng_state=False`` is the mistake:
    the rebuild draws fresh masks from ``rng`` (advancing it), the gradients belong to a network that did
    not produce the loss. Returns ``(grads, recomputed_layers)``, ``recomputed_layers = L − ⌈L/s⌉``.
    """
    params = validate_deep_params(params)
    require_keys("ckpt_cache", ckpt_cache, CHECKPOINT_CACHE_KEYS)
    p = validate_dropout_p(ckpt_cache["p"])
    rng = require_generator("rng", rng)
    if not isinstance(replay_rng_state, bool):
        raise TypeError(f"replay_rng_state must be a bool, got {type(replay_rng_state).__name__}")
    L = len(params)
    s = require_int("ckpt_cache['segment_size']", ckpt_cache["segment_size"], minimum=1, maximum=L)
    boundaries = list(ckpt_cache["boundaries"])  # type: ignore[call-overload]
    states = list(ckpt_cache["rng_states"])  # type: ignore[call-overload]
    for name, items in (("boundaries", boundaries), ("rng_states", states)):
        if len(items) != math.ceil(L / s):
            raise ValueError(f"ckpt_cache['{name}'] must hold ceil(L / s) = {math.ceil(L / s)} entries, "
                             f"got {len(items)}")
    dY_hat = _validate_dY(params, dY_hat, boundaries[0])
    kind = rng.bit_generator.state["bit_generator"]
    if replay_rng_state and any(not isinstance(st, Mapping) or st.get("bit_generator") != kind for st in states):
        found = sorted({str(st.get("bit_generator")) if isinstance(st, Mapping) else describe(st) for st in states})
        raise ValueError(f"rng must use the bit generator whose states ckpt_cache['rng_states'] holds: "
                         f"rng uses {kind}, the recorded states are {found}")

    grads: list[Layer | None] = [None] * L
    recomputed = 0
    g = dY_hat  # ∂L/∂z_{L-1}; then ∂L/∂a at the boundary just above the segment being rebuilt
    caller_state = rng.bit_generator.state
    try:
        for k in range(len(boundaries) - 1, -1, -1):
            start, stop = k * s, min((k + 1) * s, L)
            if replay_rng_state:
                rng.bit_generator.state = states[k]
            segment = recompute_dropout_block(params, boundaries[k], start, stop, p, rng)
            recomputed += stop - start - 1
            if stop < L:  # enter through the top layer's dropout and ReLU: a_stop is the next boundary
                g = _through_dropout_relu(g, segment["keep"][-1], boundaries[k + 1], p)
            g = _segment_backward(params, segment["a"], segment["keep"], start, p, g, grads)
            del segment  # free this segment before rebuilding the next
    finally:
        if replay_rng_state:
            rng.bit_generator.state = caller_state
    return grads, recomputed  # type: ignore[return-value]
