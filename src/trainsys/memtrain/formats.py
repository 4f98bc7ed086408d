r"""Module 1, Part 4 — low-precision number formats: float16, bfloat16, FP8, and per-tensor scaling.

A binary floating-point format with :math:`e` exponent bits (bias :math:`b = 2^{e-1}-1`) and :math:`m`
mantissa bits stores :math:`(-1)^s\,2^{E-b}(1 + f/2^m)` (normal, :math:`1 \le E`) or
:math:`(-1)^s\,2^{1-b}(f/2^m)` (subnormal, :math:`E = 0`). Hence

.. math::

    \varepsilon = 2^{-m},\quad \text{smallest normal} = 2^{1-b},\quad
    \text{smallest subnormal} = 2^{1-b-m},

and a cast rounds to the nearest representable value, ties to the even mantissa. The five formats,
by name (:data:`FORMATS`; the last three are ``ml_dtypes`` types, the NumPy dtype extension JAX uses):

====================  ===  ===  ===========  =============  ==================  ========  ======
name                   e    m   max          smallest norm  smallest subnormal  eps       inf?
====================  ===  ===  ===========  =============  ==================  ========  ======
``float32``            8    23  3.40e38      1.18e-38       1.40e-45            2^-23     yes
``float16``            5    10  65504        6.10e-5        5.96e-8             2^-10     yes
``bfloat16``           8    7   3.39e38      1.18e-38       9.18e-41            2^-7      yes
``float8_e4m3fn``      4    3   448          2^-6           2^-9                2^-3      no
``float8_e5m2``        5    2   57344        2^-14          2^-16               2^-2      yes
====================  ===  ===  ===========  =============  ==================  ========  ======

(:func:`format_info` derives every column from the dtype; nothing in the code is typed in.)

What each is for:

- **float16** (Micikevicius et al. 2018, "Mixed Precision Training"): 11 bits of precision but only
  5 exponent bits, so small gradients underflow — hence loss scaling (Lessons 21–24).
- **bfloat16** (Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training"): float32's 8
  exponent bits with only 8 bits of precision (7 stored), so it has float32's *range* (normal numbers
  down to :math:`2^{-126}`): a gradient that is a normal float32 does not underflow, and no loss scaling is
  needed — a relative rounding error of up to :math:`2^{-8}` is the price.
- **float8_e4m3fn** and **float8_e5m2** (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"):
  E4M3 for the forward tensors (weights and activations need the extra mantissa bit), E5M2 for the
  gradients (they need the range). Neither covers a tensor's values without a **per-tensor scale**
  :math:`s`: store :math:`\mathrm{fp8}(s x)`, compute with :math:`\mathrm{fp8}(s x)/s`.

Overflow, per format (:func:`cast`, ``saturate=False``, as ``ml_dtypes`` and NumPy cast): float32,
float16, bfloat16 and E5M2 round past the largest finite value to :math:`\pm\infty`. E4M3\ *fn* ("finite",
"NaN only") has **no infinity** — its top exponent holds normal numbers up to 448 and the one NaN
pattern per sign, ``S.1111.111`` — so ``ml_dtypes`` turns an overflow, and :math:`\pm\infty`, into NaN
(a value at or above :math:`464 = (448 + 480)/2` rounds up to the NaN pattern). **torch 2.13 does not**:
its ``float8_e4m3fn`` cast *saturates* a finite overflow and :math:`\pm\infty` to :math:`\pm 448` (NaN stays
NaN; ``c10``'s ``fp8e4m3fn_from_fp32_value`` in ``torch/headeronly/util/Float8_e4m3fn.h``), while its
``float8_e5m2`` cast overflows to :math:`\pm\infty` like ``ml_dtypes``. CUDA's ``__nv_fp8_e4m3`` and
``__nv_fp8_e5m2`` conversions "rely on ``__NV_SATFINITE`` behavior for out-of-range values" (CUDA Math
API documentation, FP8 intrinsics): they saturate too. ``cast(x, fmt, saturate=True)`` clamps to
:math:`\pm\text{max}` before rounding (NaN stays NaN), which is torch's E4M3 cast bit for bit
(``tests/test_formats.py``).

Per-tensor **delayed scaling** (NVIDIA Transformer Engine documentation, "Using FP8 with Transformer
Engine"; ``transformer_engine.common.recipe.DelayedScaling`` with ``amax_history_len``,
``amax_compute_algo="max"``, ``margin``): each tensor keeps the absolute maxima (*amax*) of its last
``amax_history_len`` values, and the scale used at the next step is

.. math::

    s_{t+1} = \frac{\text{fp8\_max}}{\max(\text{history}_t)} \Big/ 2^{\text{margin}},

computed in float32 as ``transformer_engine/common/recipe/delayed_scaling.cu`` does; when that maximum
is 0 or not finite the previous scale is kept (TE starts from :math:`s = 1`). "Delayed": the scale
comes from *past* amaxes, so no extra pass over the current tensor is needed before casting it.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import ml_dtypes
import numpy as np

from trainsys._validation import describe, require_int, require_real
from trainsys.memtrain.mlp import (
    Params,
    first_linear_backward,
    init_mlp_params,
    linear_backward,
    linear_forward,
    make_synthetic_regression_batch,
    mlp_forward,
    mse_loss_and_grad,
    relu_backward,
    relu_forward,
    sgd_step,
)

FORMATS: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
"""Format name → NumPy dtype (``ml_dtypes`` for bfloat16 and the two FP8 formats)."""

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
"""The 8-bit formats: quantized with a per-tensor scale, and (on GPUs) with saturating casts."""

SCALINGS: tuple[str, ...] = ("none", "loss", "delayed")
"""The scaling strategies of :func:`train_in_format`."""

FORWARD_TENSORS: tuple[str, ...] = ("X", "W1", "A1", "W2")
"""The operands of the two forward GEMMs, quantized in the forward format."""

BACKWARD_TENSORS: tuple[str, ...] = ("dY_hat", "dZ1")
"""The gradients entering the backward GEMMs, quantized in the gradient format."""


def _require_format(name: str, fmt: object) -> str:
    """Require a known format name; the error lists the known ones."""
    if not isinstance(fmt, str):
        raise TypeError(f"{name} must be a format name (a str, one of {list(FORMATS)}), got {describe(fmt)}")
    if fmt not in FORMATS:
        raise ValueError(f"{name} must be one of {list(FORMATS)}, got {fmt!r}")
    return fmt


def _require_values(name: str, x: object) -> np.ndarray:
    """Require an ``ndarray`` of floating-point values: a NumPy float dtype or one of :data:`FORMATS`."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of floats, got {describe(x)}")
    if not (np.issubdtype(x.dtype, np.floating) or x.dtype in FORMATS.values()):
        raise TypeError(f"{name} must have a floating-point dtype (NumPy float or one of {list(FORMATS)}), "
                        f"got {describe(x)}")
    return x


def _require_scale(name: str, scale: object) -> np.float32:
    """A scale: a real number, finite and > 0 in float32 (the precision scales are kept in)."""
    value = require_real(name, scale, strictly_positive=True)
    with np.errstate(over="ignore", under="ignore"):
        as32 = np.float32(value)
    if not np.isfinite(as32) or as32 == 0:
        raise ValueError(f"{name} must be a positive number representable in float32 "
                         f"([{float(np.finfo(np.float32).smallest_subnormal):.3g}, "
                         f"{float(np.finfo(np.float32).max):.3g}]), got {value}")
    return as32


def format_info(fmt: str) -> dict[str, object]:
    r"""The properties of format ``fmt``, derived from its dtype (``ml_dtypes.finfo`` and one cast).

    Returns a new dict: ``name``, ``dtype``, ``bits`` (storage width), ``exponent_bits`` :math:`e`,
    ``mantissa_bits`` :math:`m` (stored, without the implicit leading 1), ``max`` (largest finite),
    ``smallest_normal`` :math:`2^{1-b}`, ``smallest_subnormal`` :math:`2^{1-b-m}`, ``eps``
    :math:`2^{-m}` (the gap above 1.0) — all Python ``int``/``float`` — and ``has_inf``: whether casting
    float32 :math:`+\infty` gives :math:`+\infty` (``False`` for ``float8_e4m3fn``, which gives NaN).
    """
    fmt = _require_format("fmt", fmt)
    dtype = FORMATS[fmt]
    info = ml_dtypes.finfo(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        has_inf = bool(np.isposinf(np.array(np.inf, np.float32).astype(dtype).astype(np.float32)))
    return {
        "name": fmt,
        "dtype": dtype,
        "bits": int(info.bits),
        "exponent_bits": int(info.nexp),
        "mantissa_bits": int(info.nmant),
        "max": float(info.max),
        "smallest_normal": float(info.smallest_normal),
        "smallest_subnormal": float(info.smallest_subnormal),
        "eps": float(info.eps),
        "has_inf": has_inf,
    }


def cast(x: np.ndarray, fmt: str, *, saturate: bool = False) -> np.ndarray:
    r"""``x`` rounded to format ``fmt``: a new array of ``FORMATS[fmt]``, ``x``'s shape.

    Round to nearest, ties to even, with one rounding from ``x``'s dtype (``ml_dtypes``/NumPy
    ``astype``). Values below half the smallest subnormal become :math:`\pm 0`; overflow follows the
    format (module docstring): :math:`\pm\infty` for float32/float16/bfloat16/E5M2, NaN for E4M3FN.
    With ``saturate=True`` every non-NaN value is first clamped to :math:`[-\text{max}, \text{max}]`,
    so overflow and :math:`\pm\infty` give :math:`\pm\text{max}` — torch's ``float8_e4m3fn`` cast, and
    CUDA's ``__NV_SATFINITE``. NaN stays NaN (its payload is not specified). ``x`` (any NumPy float
    dtype or a format of :data:`FORMATS`) is not mutated; an unknown ``fmt`` is refused with the list
    of known names.
    """
    x = _require_values("x", x)
    fmt = _require_format("fmt", fmt)
    if not isinstance(saturate, (bool, np.bool_)):
        raise TypeError(f"saturate must be a bool, got {describe(saturate)}")
    dtype = FORMATS[fmt]
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is the documented outcome, not a warning
        if saturate:
            top = float(ml_dtypes.finfo(dtype).max)
            wide = x.astype(np.float64) if x.dtype in FORMATS.values() else x  # ml_dtypes arrays: compare in float64
            x = np.clip(wide, -top, top)  # NaN passes np.clip unchanged; ±max is exact in every float dtype
        return x.astype(dtype, copy=True)


# --- per-tensor delayed scaling -----------------------------------------------------------------------
def init_amax_history(length: int) -> np.ndarray:
    """A new amax history of ``length`` entries (TE's ``amax_history_len``): float32 zeros, oldest first."""
    length = require_int("length", length, minimum=1)
    return np.zeros(length, dtype=np.float32)


def _require_history(history: object) -> np.ndarray:
    if not isinstance(history, np.ndarray) or history.dtype != np.float32 or history.ndim != 1 or history.size == 0:
        raise TypeError(f"history must be a non-empty 1-D float32 array (init_amax_history), got {describe(history)}")
    if np.isnan(history).any() or (history < 0).any():
        raise ValueError("history must hold absolute maxima: no NaN and no negative entries, "
                         f"got {history.tolist()}")
    return history


def tensor_amax(tensor: np.ndarray) -> np.float32:
    r""":math:`\max_i |x_i|` of ``tensor`` as float32, NaN entries ignored, 0 for an empty or all-NaN tensor.

    As TE's amax kernel (``fmaxf(fabsf(x), amax)`` from 0, and ``fmaxf`` ignores NaN): an infinite entry
    gives ``inf``, which :func:`delayed_scale` then refuses to use.
    """
    tensor = _require_values("tensor", tensor)
    wide = np.abs(tensor.astype(np.float64) if tensor.dtype in FORMATS.values() else tensor)
    finite_or_inf = wide[~np.isnan(wide)]
    with np.errstate(over="ignore"):
        return np.float32(finite_or_inf.max()) if finite_or_inf.size else np.float32(0.0)


def update_amax_history(history: np.ndarray, tensor: np.ndarray) -> np.ndarray:
    """A **new** history: ``history`` without its oldest (first) entry, with ``tensor``'s amax appended.

    ``history``: 1-D float32, non-negative, no NaN (:func:`init_amax_history`); ``tensor``: any float
    array (:func:`tensor_amax`). Neither is mutated.
    """
    history = _require_history(history)
    amax = tensor_amax(tensor)
    return np.concatenate([history[1:], np.array([amax], dtype=np.float32)])


def delayed_scale(history: np.ndarray, fmt: str, margin: float = 0, *, previous_scale: float = 1.0) -> float:
    r"""The next per-tensor scale: :math:`\text{max}_{fmt} \cdot 2^{-\text{margin}} / \max(\text{history})`.

    ``amax_compute_algo="max"``; the arithmetic is float32, as in TE's ``amax_and_scale_update`` kernel
    (``scaled_max = fp8_max * 2^-margin``, then ``scaled_max / amax``). When :math:`\max(\text{history})`
    is 0 (nothing seen yet) or infinite, ``previous_scale`` is returned unchanged (TE keeps the scale;
    its initial scale is 1). A quotient beyond float32's range (an amax below
    :math:`\text{max}_{fmt}/3.4\times10^{38}`) is clamped to float32's largest finite value — there TE's
    kernel would store ``inf``. ``fmt`` is any format of :data:`FORMATS` (TE uses the FP8 ones);
    ``margin`` ≥ 0 leaves :math:`2^{\text{margin}}` of headroom for amax growth. Returns a Python float.
    """
    history = _require_history(history)
    fmt = _require_format("fmt", fmt)
    margin = require_real("margin", margin, minimum=0.0)
    previous = float(_require_scale("previous_scale", previous_scale))
    amax = history.max()
    if not np.isfinite(amax) or amax == 0:
        return previous
    with np.errstate(over="ignore", under="ignore"):
        scaled_max = np.float32(ml_dtypes.finfo(FORMATS[fmt]).max) * np.float32(2.0**-margin)
        scale = scaled_max / amax  # float32 / float32
    if not np.isfinite(scale):
        scale = np.finfo(np.float32).max
    if scale == 0:  # a margin so large that 2^-margin underflows float32: no usable scale
        raise ValueError(f"margin = {margin} leaves no representable scale (2^-margin underflows float32)")
    return float(scale)


def quantize_dequantize(x: np.ndarray, fmt: str, scale: float, *, saturate: bool = False) -> np.ndarray:
    r"""``cast(x * scale, fmt)`` read back as float32 and divided by ``scale``: what a GEMM sees of ``x``.

    :math:`\hat x = \mathrm{fl}_{fmt}(s x)/s`, all arithmetic in float32 (``x`` is first converted to
    float32; ``s`` must be positive and representable in float32). A power-of-two ``scale`` only moves
    the window of representable magnitudes: :math:`s x` then :math:`/s` are exact in float32 unless they
    leave float32's range. TE dequantizes by multiplying with a stored float32 :math:`1/s`, which can
    differ from this division by one float32 ulp when :math:`s` is not a power of two. ``saturate`` as
    in :func:`cast`. Returns a new float32 array of ``x``'s shape; ``x`` is not mutated.
    """
    x = _require_values("x", x)
    fmt = _require_format("fmt", fmt)
    s = _require_scale("scale", scale)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = x.astype(np.float32) * s  # float32
        return cast(scaled, fmt, saturate=saturate).astype(np.float32) / s


# --- the measured experiment ------------------------------------------------------------------------
def _quantizer(scaling: str, loss_scale: np.float32, history_len: int, margin: float):
    """Per-tensor quantization state and the function that applies it (see :func:`train_in_format`)."""
    state = {name: {"history": init_amax_history(history_len), "scale": 1.0}
             for name in FORWARD_TENSORS + BACKWARD_TENSORS}
    counts = {"nonzero": 0, "flushed": 0}

    def quantize(name: str, t: np.ndarray, fmt_t: str) -> np.ndarray:
        entry = state[name]
        if scaling == "delayed":
            entry["scale"] = delayed_scale(entry["history"], fmt_t, margin, previous_scale=entry["scale"])
            entry["history"] = update_amax_history(entry["history"], t)  # this step's amax serves the next steps
        elif scaling == "loss" and name in BACKWARD_TENSORS:
            entry["scale"] = float(loss_scale)
        q = quantize_dequantize(t, fmt_t, entry["scale"], saturate=fmt_t in FP8_FORMATS)
        if name in BACKWARD_TENSORS:
            nonzero = t != 0
            counts["nonzero"] += int(np.count_nonzero(nonzero))
            counts["flushed"] += int(np.count_nonzero(nonzero & (q == 0)))
        return q

    return quantize, state, counts


def train_in_format(
    fmt: str,
    scaling: str,
    steps: int,
    seed: int,
    *,
    grad_fmt: str | None = None,
    n: int = 2048,
    d_in: int = 16,
    d_hidden: int = 32,
    d_out: int = 8,
    lr: float = 0.2,
    loss_scale: float = 2.0**12,
    amax_history_len: int = 16,
    margin: float = 0,
) -> dict:
    r"""Train the Module 1 MLP with its GEMM operands in format ``fmt`` and report what happened.

    **Problem.** One fixed batch from :func:`~trainsys.memtrain.mlp.make_synthetic_regression_batch`
    (``n`` × ``d_in`` → ``d_out``, noise 0.1, generator ``seed``), parameters from
    :func:`~trainsys.memtrain.mlp.init_mlp_params` (generator ``seed + 1``), full-batch gradient descent
    (:func:`~trainsys.memtrain.mlp.sgd_step`, rate ``lr``) on a float32 **master** copy. The mean in the
    loss makes every output gradient :math:`\partial L/\partial\hat Y = \frac{2}{n\,d_{out}}(\hat Y - Y)`
    small — :math:`1.2\times10^{-4}\,|\hat Y - Y|` with the defaults ``n = 2048, d_out = 8`` — Lesson 24's
    underflow story: every entry with :math:`|\hat Y - Y| \le 8` is at most half of E4M3's smallest subnormal
    (:math:`2^{-10}`) and rounds to 0, while bfloat16 holds it as a normal number.

    **One step**, simulating low-precision GEMMs that accumulate in float32 (as tensor cores do;
    Micikevicius et al. 2022): the operands ``X, W1`` and ``A1, W2`` of the two forward GEMMs pass
    through :func:`quantize_dequantize` in ``fmt``; the loss and its gradient are float32; the gradients
    entering the backward GEMMs, ``dY_hat`` and ``dZ1`` (after the ReLU mask), pass through it in
    ``grad_fmt`` (default ``fmt``; ``fmt="float8_e4m3fn", grad_fmt="float8_e5m2"`` is TE's ``HYBRID``).
    Biases are not GEMM operands and stay float32; GEMM outputs (``Z1``, ``Y_hat``, weight gradients)
    are float32. FP8 casts saturate (CUDA's conversions do); 16-bit casts overflow to ``inf``.

    **Scaling** of each quantized tensor: ``"none"`` — scale 1; ``"loss"`` — a static loss scale: the
    backward tensors use ``loss_scale`` (a power of two makes this exactly "multiply the loss by
    ``loss_scale``, divide the float32 gradients back"), forward tensors 1; ``"delayed"`` — every tensor its
    own :func:`delayed_scale` from its own amax history (``amax_history_len``, ``margin``; the first step
    uses scale 1, as TE does). A step whose loss or float32 gradients are not finite is skipped (the
    master keeps its values) and counted.

    Returns a run record ``{"config", "losses", "non_finite_steps", "final_loss",
    "gradient_flush_fraction", "final_scales"}``: ``losses[t]`` is the loss step ``t`` computed (from
    its quantized forward pass); ``final_loss`` is the float32 loss of the final master weights on the
    batch (:func:`~trainsys.memtrain.mlp.mlp_forward`: what the run learned); ``gradient_flush_fraction``
    is the fraction of non-zero backward-tensor entries, over all steps, that quantized to exactly 0;
    ``final_scales`` the per-tensor scales of the last step.
    """
    fmt = _require_format("fmt", fmt)
    grad_fmt = fmt if grad_fmt is None else _require_format("grad_fmt", grad_fmt)
    if not isinstance(scaling, str) or scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {list(SCALINGS)}, got {scaling!r}")
    steps = require_int("steps", steps, minimum=1)
    seed = require_int("seed", seed, minimum=0)
    sizes = {name: require_int(name, value, minimum=1)
             for name, value in (("n", n), ("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out))}
    lr = require_real("lr", lr, strictly_positive=True)
    scale32 = _require_scale("loss_scale", loss_scale)
    history_len = require_int("amax_history_len", amax_history_len, minimum=1)
    margin = require_real("margin", margin, minimum=0.0)

    X, Y = make_synthetic_regression_batch(sizes["n"], sizes["d_in"], sizes["d_out"], np.random.default_rng(seed))
    master: Params = init_mlp_params(sizes["d_in"], sizes["d_hidden"], sizes["d_out"], np.random.default_rng(seed + 1))
    quantize, state, counts = _quantizer(scaling, scale32, history_len, margin)
    losses: list[float] = []
    non_finite = 0
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite values are counted, not warned about
        for _ in range(steps):
            Xq, W1q = quantize("X", X, fmt), quantize("W1", master["W1"], fmt)
            Z1 = linear_forward(Xq, W1q, master["b1"])  # (n, d_hidden) float32
            A1q, W2q = quantize("A1", relu_forward(Z1), fmt), quantize("W2", master["W2"], fmt)
            Y_hat = linear_forward(A1q, W2q, master["b2"])  # (n, d_out)
            loss, dY_hat = mse_loss_and_grad(Y_hat, Y)
            G2 = quantize("dY_hat", dY_hat, grad_fmt)  # (n, d_out)
            dA1, dW2, db2 = linear_backward(G2, A1q, W2q)
            G1 = quantize("dZ1", relu_backward(dA1, Z1), grad_fmt)  # (n, d_hidden)
            dW1, db1 = first_linear_backward(G1, Xq)
            grads = {"W1": dW1, "b1": db1, "W2": dW2, "b2": db2}
            losses.append(loss)
            if not np.isfinite(loss) or not all(np.isfinite(g).all() for g in grads.values()):
                non_finite += 1
                continue
            master = sgd_step(master, grads, lr)
    final_loss, _ = mse_loss_and_grad(mlp_forward(master, X)[0], Y)
    return {
        "config": {"fmt": fmt, "grad_fmt": grad_fmt, "scaling": scaling, "steps": steps, "seed": seed, **sizes,
                   "lr": lr, "loss_scale": float(scale32), "amax_history_len": history_len, "margin": margin},
        "losses": losses,
        "non_finite_steps": non_finite,
        "final_loss": final_loss,
        "gradient_flush_fraction": counts["flushed"] / counts["nonzero"] if counts["nonzero"] else 0.0,
        "final_scales": {name: entry["scale"] for name, entry in state.items()},
    }


def loss_gap(run: Mapping, baseline: Mapping) -> float:
    """Relative final-loss gap ``(run − baseline) / baseline`` of two :func:`train_in_format` records."""
    for name, record in (("run", run), ("baseline", baseline)):
        if not isinstance(record, Mapping) or "final_loss" not in record:
            raise TypeError(f"{name} must be a run record of train_in_format, got {describe(record)}")
        if not isinstance(record["final_loss"], numbers.Real):
            raise TypeError(f"{name}['final_loss'] must be a real number, got {describe(record['final_loss'])}")
    if baseline["final_loss"] <= 0 or not np.isfinite(baseline["final_loss"]):
        raise ValueError(f"baseline['final_loss'] must be finite and > 0, got {baseline['final_loss']}")
    return (float(run["final_loss"]) - float(baseline["final_loss"])) / float(baseline["final_loss"])
