r"""Module 1, Part 4 — mixed precision: float16 compute, a float32 master copy, dynamic loss scaling.

Micikevicius et al. 2018 ("Mixed Precision Training"): run forward and backward in float16, which
halves the bytes of every activation and gradient, and keep three things in float32 — the master
weights the optimizer updates, the loss, and the unscaled gradients. float16 has a 5-bit exponent:

.. math::

    \text{max} = 65504,\quad \text{min normal} = 2^{-14} \approx 6.10\times10^{-5},\quad
    \text{min subnormal} = 2^{-24} \approx 5.96\times10^{-8},\quad \varepsilon = 2^{-10}.

Gradients smaller than :math:`2^{-25}` round to zero. Loss scaling multiplies the loss by
:math:`s` (so every gradient by :math:`s`, by the chain rule), runs backward in float16, and divides
by :math:`s` in float32 before the update. Too large an :math:`s` overflows to ``inf``: the step is
then skipped and :math:`s` backed off. The scaler follows ``torch.amp.GradScaler`` (defaults
``init_scale`` :math:`2^{16}`, ``growth_factor`` 2, ``backoff_factor`` 0.5, ``growth_interval`` 2000).
NumPy has no bfloat16 (8-bit exponent, :math:`\varepsilon = 2^{-7}`), so the course casts to float16.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping

import numpy as np
from numpy.typing import DTypeLike

from trainsys._validation import (
    describe,
    require_axis_match,
    require_float_array,
    require_float_tree,
    require_int,
    require_keys,
    require_real,
)
from trainsys.memtrain.mlp import (
    Params,
    mlp_backward,
    mlp_forward,
    mse_loss_and_grad,
    sgd_step,
    validate_mlp_params,
)

SCALER_KEYS: tuple[str, ...] = ("scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker")
"""The keys of a loss-scaler state dict (:func:`init_loss_scaler`)."""


# --- Lesson 19 -------------------------------------------------------------------------------------
def cast_to_half_precision(
    tree: Mapping[str, np.ndarray], dtype: DTypeLike = np.float16
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    r"""Cast every array of ``tree`` to float16; report, per key, how many entries overflowed.

    Returns ``(half, overflow)``: ``half[k]`` is a **new** float16 array of ``tree[k]``'s shape (a copy
    even when ``tree[k]`` is already float16), rounded to nearest even; ``overflow[k]`` is the number of
    entries finite before the cast and :math:`\pm\infty` after — :math:`|x| \ge 65520` (between 65504
    and 65520 rounds down to 65504). Overflow is reported, never clipped; ``nan`` and entries already
    infinite are not counted. Magnitudes below :math:`2^{-14}` become subnormal and below
    :math:`2^{-25}` become :math:`\pm 0` — silently, as in hardware. ``tree`` is not mutated.

    ``dtype`` must name float16 (``np.float16``, ``np.dtype("float16")`` or ``"float16"``): a
    non-float dtype raises ``TypeError``, another float dtype ``ValueError`` (NumPy has no bfloat16).
    """
    try:
        target = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be float16, got {dtype!r}, which is not a NumPy dtype "
                        "(NumPy has no bfloat16)") from None
    if not np.issubdtype(target, np.floating):
        raise TypeError(f"dtype must be the floating-point dtype float16, got {target}")
    if target != np.float16:
        raise ValueError(f"dtype must be float16 (the half precision this course uses; NumPy has no "
                         f"bfloat16), got {target}")
    tree = require_float_tree("tree", tree)
    half, overflow = {}, {}
    with np.errstate(over="ignore"):  # overflow is expected here, and reported below
        for key, value in tree.items():
            half[key] = value.astype(np.float16, copy=True)  # same shape, float16
            overflow[key] = int(np.count_nonzero(np.isfinite(value) & np.isinf(half[key])))
    return half, overflow


# --- Lesson 20 -------------------------------------------------------------------------------------
def make_master_params(params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    r"""The float32 master copy of ``params``: one new float32 array per key, same shapes.

    The copies never share memory with ``params``, even when an array is already float32
    (``np.asarray`` would return that very array, and an in-place update of the master would then
    write into the caller's weights). float16 input is widened exactly; float64 input is rounded to
    float32. ``params`` may be any dict of floating-point arrays and is not mutated.
    """
    params = require_float_tree("params", params)
    return {key: np.array(value, dtype=np.float32, copy=True) for key, value in params.items()}


# --- Lesson 21 -------------------------------------------------------------------------------------
def scale_loss(loss: float, scale: float) -> float:
    r"""The scaled loss :math:`s \cdot L` as a Python float.

    Backpropagating :math:`sL` gives :math:`s\,\partial L/\partial\theta` for every parameter, so the
    float16 gradients are shifted up by :math:`\log_2 s` binades, away from the underflow threshold.
    ``loss`` is a real number (a non-finite loss passes through: the overflow check on the gradients
    catches it); ``scale`` must be finite and > 0 (``ValueError``), a real number (``TypeError``).
    """
    if isinstance(loss, (bool, np.bool_)) or not isinstance(loss, numbers.Real):
        raise TypeError(f"loss must be a real number, got {describe(loss)}")
    scale = require_real("scale", scale, strictly_positive=True)
    return float(loss) * scale


# --- Lesson 22 -------------------------------------------------------------------------------------
def unscale_gradients(grads: Mapping[str, np.ndarray], scale: float) -> dict[str, np.ndarray]:
    r"""New float32 gradients :math:`g / s`, converting each array to float32 **before** dividing.

    In float16, :math:`s = 2^{16}` is not even representable (it rounds to ``inf``), and multiplying by
    :math:`1/s = 2^{-16}` sends every entry below :math:`2^{-9}` back to zero (below :math:`2^{-25}`)
    and every entry below 4 into the subnormals; unscaling with :math:`s < 1` can overflow. In float32
    neither happens. ``inf`` and ``nan`` pass through (:func:`has_non_finite_gradients`
    finds them). ``scale`` must be finite and > 0; ``grads`` is not mutated.
    """
    grads = require_float_tree("grads", grads)
    scale = require_real("scale", scale, strictly_positive=True)
    if not np.isfinite(np.float32(scale)):
        raise ValueError(f"scale must be representable in float32 (below {float(np.finfo(np.float32).max):.3g}), "
                         f"got {scale}")
    out = {key: value.astype(np.float32, copy=True) for key, value in grads.items()}  # widen first
    for value in out.values():
        value /= np.float32(scale)  # in float32, on the new arrays (0-d arrays stay arrays)
    return out


# --- Lesson 23 -------------------------------------------------------------------------------------
def has_non_finite_gradients(grads: Mapping[str, np.ndarray]) -> bool:
    r"""``True`` when any entry of any array of ``grads`` is :math:`+\infty`, :math:`-\infty` or ``nan``.

    Every array is inspected (an overflow can appear in any layer); an empty dict or empty arrays give
    ``False``. Returns a Python ``bool``; ``grads`` is not mutated.
    """
    grads = require_float_tree("grads", grads)
    return any(not bool(np.all(np.isfinite(value))) for value in grads.values())


# --- Lesson 24 -------------------------------------------------------------------------------------
def init_loss_scaler(
    init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5, growth_interval: int = 2000
) -> dict[str, float | int]:
    """A loss-scaler state: ``{"scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker": 0}``.

    Defaults are ``torch.amp.GradScaler``'s. Raises unless ``init_scale`` is finite and > 0,
    ``growth_factor`` > 1, ``0 < backoff_factor < 1`` and ``growth_interval`` is an integer ≥ 1.
    """
    return _check_scaler(
        {"scale": init_scale, "growth_factor": growth_factor, "backoff_factor": backoff_factor,
         "growth_interval": growth_interval, "growth_tracker": 0},
        lambda key: "init_scale" if key == "scale" else key,
    )


def _check_scaler(values: Mapping, name: Callable[[str], str]) -> dict[str, float | int]:
    """Check the five scaler fields (``name(key)`` is what an error calls each); return them normalised."""
    scale = require_real(name("scale"), values["scale"], strictly_positive=True)
    growth = require_real(name("growth_factor"), values["growth_factor"])
    if growth <= 1:
        raise ValueError(f"{name('growth_factor')} must be > 1, got {growth}")
    backoff = require_real(name("backoff_factor"), values["backoff_factor"])
    if not 0 < backoff < 1:
        raise ValueError(f"{name('backoff_factor')} must be in (0, 1), got {backoff}")
    interval = require_int(name("growth_interval"), values["growth_interval"], minimum=1)
    tracker = require_int(name("growth_tracker"), values["growth_tracker"], minimum=0, maximum=interval - 1)
    return {"scale": scale, "growth_factor": growth, "backoff_factor": backoff,
            "growth_interval": interval, "growth_tracker": tracker}


def _validate_scaler(scaler: object) -> dict[str, float | int]:
    """Check a loss-scaler state dict and return a normalised copy (errors name ``scaler['key']``)."""
    require_keys("scaler", scaler, SCALER_KEYS)
    return _check_scaler(scaler, lambda key: f"scaler[{key!r}]")


def update_loss_scale(scaler: Mapping[str, float | int], found_inf: bool) -> dict[str, float | int]:
    r"""The scaler after one step, as a **new** dict (``scaler`` is not mutated): ``GradScaler.update``'s rule.

    .. math::

        \text{found\_inf}:\ s \leftarrow s \cdot \text{backoff},\ t \leftarrow 0; \qquad
        \text{else}:\ t \leftarrow t + 1,\ \text{and if } t = \text{growth\_interval}:\
        s \leftarrow s \cdot \text{growth},\ t \leftarrow 0

    with ``t = growth_tracker``, the number of consecutive clean steps since the last change. As in
    torch (whose scale is a float32 tensor), a growth that would overflow float32 keeps the scale
    (the tracker still resets): the scale stops at :math:`2^{127}` with the default factor 2.
    ``found_inf`` must be a ``bool``.
    """
    scaler = _validate_scaler(scaler)
    if not isinstance(found_inf, (bool, np.bool_)):
        raise TypeError(f"found_inf must be a bool, got {describe(found_inf)}")
    if found_inf:
        scaler["scale"] *= scaler["backoff_factor"]
        scaler["growth_tracker"] = 0
    else:
        scaler["growth_tracker"] += 1
        if scaler["growth_tracker"] == scaler["growth_interval"]:
            grown = scaler["scale"] * scaler["growth_factor"]
            with np.errstate(over="ignore"):
                if np.isfinite(np.float32(grown)):  # torch keeps its float32 scale when growing would overflow
                    scaler["scale"] = grown
            scaler["growth_tracker"] = 0
    return scaler


def mixed_precision_step(
    master: Params, X: np.ndarray, Y: np.ndarray, scaler: Mapping[str, float | int], lr: float
) -> tuple[Params, dict[str, float | int], dict[str, float | bool]]:
    r"""One SGD step of the two-layer MLP in mixed precision with dynamic loss scaling.

    1. cast ``master`` (float32) and ``X: (batch, d_in)`` to float16; forward in float16;
    2. loss and :math:`\partial L/\partial\hat Y` in float32 from the float16 prediction and the targets
       ``Y: (batch, d_out)`` (any float dtype, used as float32);
    3. :math:`G = \mathrm{fp16}(s \cdot \partial L/\partial\hat Y)` with ``s = scaler["scale"]`` (the gradient of
       :math:`sL`, scaled in float32 *then* cast, so tiny gradients survive); backward in float16;
    4. unscale to float32 (:func:`unscale_gradients`); if any gradient is non-finite
       (:func:`has_non_finite_gradients`) skip the update — the master keeps its values — else
       :math:`\theta \leftarrow \theta - \eta\, g` on the float32 master;
    5. ``scaler`` updated by :func:`update_loss_scale` (back off on overflow, grow after
       ``growth_interval`` clean steps).

    Returns ``(new_master, new_scaler, info)``: new float32 arrays (copies when skipped), a new scaler
    dict, and ``info = {"loss": float, "skipped": bool, "scale_used": float}`` with the unscaled loss
    before the update. ``master``, ``X``, ``Y`` and ``scaler`` are not mutated. ``master`` must be
    float32 (``TypeError``).
    """
    master = validate_mlp_params(master, "master")
    for key, value in master.items():
        if value.dtype != np.float32:
            raise TypeError(f"master[{key!r}] must be float32 (make_master_params), got {describe(value)}")
    X = require_float_array("X", X, ndim=2)
    Y = require_float_array("Y", Y, ndim=2)
    require_axis_match("X", X, 1, "master['W1']", master["W1"], 0, "input-feature")
    require_axis_match("X", X, 0, "Y", Y, 0, "batch")
    require_axis_match("Y", Y, 1, "master['W2']", master["W2"], 1, "output-feature")
    scaler = _validate_scaler(scaler)
    lr = require_real("lr", lr, strictly_positive=True)
    scale = scaler["scale"]

    with np.errstate(over="ignore", invalid="ignore"):  # overflow is detected, not warned about
        half, _ = cast_to_half_precision(master)
        Y_hat, cache = mlp_forward(half, X.astype(np.float16))  # (batch, d_out) float16
        loss, dY_hat = mse_loss_and_grad(Y_hat.astype(np.float32), Y.astype(np.float32))  # float32
        G = (dY_hat * np.float32(scale)).astype(np.float16)  # (batch, d_out): gradient of s·L
        grads = unscale_gradients(mlp_backward(half, cache, G), scale)  # float32
    skipped = has_non_finite_gradients(grads)
    if skipped:
        new_master = {key: value.copy() for key, value in master.items()}
    else:
        new_master = sgd_step(master, grads, lr)
    info = {"loss": loss, "skipped": skipped, "scale_used": scale}
    return new_master, update_loss_scale(scaler, skipped), info


def training_memory_by_precision(
    d_in: int, d_hidden: int, d_out: int, batch: int, precision: str
) -> dict[str, int]:
    r"""Bytes per tensor class of one training step of the two-layer MLP, by precision.

    With :math:`\Psi = d_{in}h + h + h\,d_{out} + d_{out}` parameters and activations
    :math:`n(d_{in} + 2h)` elements (the input and the cache ``Z1, A1`` of :func:`mlp_forward`):

    - ``"float32"``: parameters :math:`4\Psi`, gradients :math:`4\Psi`, activations :math:`4n(d_{in}+2h)`;
    - ``"mixed"`` (this module's step): float32 master :math:`4\Psi`, its float16 copy :math:`2\Psi`,
      float16 gradients :math:`2\Psi` and their float32 unscaled copy :math:`4\Psi`, float16
      activations :math:`2n(d_{in}+2h)` — half the float32 activations, for :math:`4\Psi` more
      parameter-shaped bytes;
    - ``"mixed_bf16"``: the same step in bfloat16 (:mod:`trainsys.memtrain.formats`) — the same bytes,
      2 per element like float16, but no loss scale: bfloat16 keeps float32's exponent range, so its
      gradients need no scaling to stay above underflow, and their float32 copy is a plain cast.
    """
    sizes = {name: require_int(name, value, minimum=1)
             for name, value in (("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out), ("batch", batch))}
    h = sizes["d_hidden"]
    psi = sizes["d_in"] * h + h + h * sizes["d_out"] + sizes["d_out"]
    acts = sizes["batch"] * (sizes["d_in"] + 2 * h)
    if precision == "float32":
        return {"parameters (float32)": 4 * psi, "gradients (float32)": 4 * psi, "activations (float32)": 4 * acts}
    if precision == "mixed":
        return {"master weights (float32)": 4 * psi, "weights (float16 copy)": 2 * psi,
                "gradients (float16)": 2 * psi, "unscaled gradients (float32)": 4 * psi,
                "activations (float16)": 2 * acts}
    if precision == "mixed_bf16":
        return {"master weights (float32)": 4 * psi, "weights (bfloat16 copy)": 2 * psi,
                "gradients (bfloat16)": 2 * psi, "gradients (float32 copy)": 4 * psi,
                "activations (bfloat16)": 2 * acts}
    raise ValueError(f"precision must be 'float32', 'mixed' or 'mixed_bf16', got {precision!r}")
