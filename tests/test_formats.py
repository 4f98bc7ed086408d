"""Module 1, Part 4 — low-precision formats (``trainsys.memtrain.formats``) against torch and by hand.

Oracles: torch 2.13's own casts to ``float16``, ``bfloat16``, ``float8_e4m3fn`` and ``float8_e5m2``
(compared bit pattern by bit pattern), ``torch.finfo``, hand-computed amax histories and scales (the
formula of Transformer Engine's ``DelayedScaling``), and the plain float32 Module 1 training loop.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainsys.memtrain import formats as fm
from trainsys.memtrain import mlp

TORCH_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}
# NaN bit patterns legitimately differ for two formats: ml_dtypes keeps the sign and gives the canonical
# quiet NaN (bfloat16 0x7FC0 / 0xFFC0, E5M2 0x7E / 0xFE); torch 2.13 gives 0xFFFF for every bfloat16 NaN and
# 0x7F / 0xFF for E5M2. For float16 and E4M3FN the NaN patterns agree too, and are compared bit for bit.
NAN_PATTERN_DIFFERS = {"bfloat16", "float8_e5m2"}


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8 if a.itemsize == 1 else np.uint16)


def _torch_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    t = torch.from_numpy(x).to(TORCH_DTYPES[fmt])
    return t.view(torch.uint8).numpy() if t.element_size() == 1 else t.view(torch.int16).numpy().view(np.uint16)


def _as_float(bits: np.ndarray, fmt: str) -> np.ndarray:
    return bits.view(fm.FORMATS[fmt]).astype(np.float32)


def _sweep(fmt: str) -> np.ndarray:
    """float32 inputs that probe every rounding decision of ``fmt``.

    Every representable value (all bit patterns: zeros, subnormals, normals, the largest finite), every
    midpoint between two neighbours (round-half-to-even ties; exact in float32) and the float32
    neighbours on both sides of each midpoint; around the largest finite ``M``: the tie ``M + ulp/2`` with
    its neighbours, then ``2M``, ``1e38``, float32's max and its subnormals, ±inf, ±NaN.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # NaN patterns, and nextafter/casts past float32's max
        return _sweep_points(fmt)


def _sweep_points(fmt: str) -> np.ndarray:
    dtype = fm.FORMATS[fmt]
    patterns = np.arange(2 ** (8 * dtype.itemsize), dtype=np.uint8 if dtype.itemsize == 1 else np.uint16)
    values = patterns.view(dtype).astype(np.float64)
    values = np.unique(values[~np.isnan(values)])  # sorted, -0.0 and 0.0 merged (both added below)
    finite = values[np.isfinite(values)]
    mid64 = (finite[:-1] + finite[1:]) / 2
    mid = mid64.astype(np.float32)
    assert np.array_equal(mid.astype(np.float64), mid64), "a midpoint is not exact in float32"
    info = fm.format_info(fmt)
    top, ulp = info["max"], 2.0 ** (np.floor(np.log2(info["max"])) - info["mantissa_bits"])
    tie_above_max = np.float32(top + ulp / 2)
    f32 = np.finfo(np.float32)
    specials = np.array([0.0, -0.0, top, tie_above_max, 2 * top, 1e38, f32.max, f32.smallest_subnormal,
                         3 * f32.smallest_subnormal, np.inf, np.nan], dtype=np.float32)
    specials = np.concatenate([specials, -specials])
    points = np.concatenate([finite.astype(np.float32), mid, specials])
    up = np.nextafter(points, np.float32(np.inf))
    down = np.nextafter(points, np.float32(-np.inf))
    return np.concatenate([points, up, down]).astype(np.float32)


def _compare_with_torch(ours: np.ndarray, theirs: np.ndarray, fmt: str) -> None:
    ours_nan, theirs_nan = np.isnan(_as_float(ours, fmt)), np.isnan(_as_float(theirs, fmt))
    np.testing.assert_array_equal(ours_nan, theirs_nan)
    keep = ~ours_nan if fmt in NAN_PATTERN_DIFFERS else np.ones_like(ours_nan)
    mismatch = np.flatnonzero(ours[keep] != theirs[keep])
    assert mismatch.size == 0, f"{fmt}: {mismatch.size} bit patterns differ from torch's"


# --- cast: bit-identical to torch ------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e5m2"])
def test_cast_is_bit_identical_to_torch(fmt: str) -> None:
    x = _sweep(fmt)
    _compare_with_torch(_bits(fm.cast(x, fmt)), _torch_bits(x, fmt), fmt)


def test_e4m3fn_overflow_is_nan_in_ml_dtypes_and_saturates_in_torch() -> None:
    x = _sweep("float8_e4m3fn")
    ours, theirs = _bits(fm.cast(x, "float8_e4m3fn")), _torch_bits(x, "float8_e4m3fn")
    # 464 = (448 + 480) / 2 rounds to even (448); anything above it, and ±inf, overflows
    overflow = ~np.isnan(x) & (np.abs(x) > 464)
    assert overflow.sum() > 10
    assert np.isnan(_as_float(ours[overflow], "float8_e4m3fn")).all()  # ml_dtypes: NaN, no infinity to go to
    np.testing.assert_array_equal(_as_float(theirs[overflow], "float8_e4m3fn"), np.sign(x[overflow]) * 448)
    np.testing.assert_array_equal(ours[~overflow], theirs[~overflow])  # everything else, NaN included
    # saturate=True is torch's cast, bit for bit, on the whole sweep
    np.testing.assert_array_equal(_bits(fm.cast(x, "float8_e4m3fn", saturate=True)), theirs)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e5m2"])
def test_saturate_replaces_exactly_torchs_infinities_with_the_largest_finite(fmt: str) -> None:
    x = _sweep(fmt)
    ours = fm.cast(x, fmt, saturate=True).astype(np.float32)
    theirs = _as_float(_torch_bits(x, fmt), fmt)
    inf = np.isinf(theirs)
    assert inf.sum() > 10 and not np.isinf(ours).any()
    np.testing.assert_array_equal(ours[inf], np.sign(theirs[inf]) * fm.format_info(fmt)["max"])
    np.testing.assert_array_equal(ours[~inf], theirs[~inf])  # NaN == NaN under assert_array_equal


@pytest.mark.parametrize(
    "fmt, tie, expected",
    [
        ("float8_e4m3fn", 1 + 1 / 16, 1.0),  # between 1.000 (mantissa 000) and 1.125 (001): to 000
        ("float8_e4m3fn", 1 + 3 / 16, 1.25),  # between 1.125 (001) and 1.250 (010): to 010
        ("float8_e4m3fn", 2.0**-10, 0.0),  # half the smallest subnormal: to 0
        ("float8_e4m3fn", 3 * 2.0**-10, 2.0**-8),  # between subnormals 1 and 2 (x 2^-9): to 2
        ("float8_e5m2", 1 + 1 / 8, 1.0),
        ("float8_e5m2", 61440.0, np.inf),  # (57344 + 65536)/2: the even neighbour is 2^16, i.e. inf
        ("bfloat16", 1 + 2.0**-8, 1.0),
        ("bfloat16", 1 + 3 * 2.0**-8, 1 + 2.0**-6),
        ("float16", 65520.0, np.inf),  # (65504 + 65536)/2 rounds to even: overflow
        ("float16", 2.0**-25, 0.0),
    ],
)
def test_cast_rounds_ties_to_even_as_torch_does(fmt: str, tie: float, expected: float) -> None:
    x = np.array([tie, -tie], np.float32)
    ours = fm.cast(x, fmt).astype(np.float32)
    np.testing.assert_array_equal(ours, [expected, -expected])
    np.testing.assert_array_equal(_bits(fm.cast(x, fmt)), _torch_bits(x, fmt))


def test_cast_returns_a_new_array_and_accepts_low_precision_input() -> None:
    x = np.array([1.0, 2.5, 1e-3], np.float32)
    snapshot = x.copy()
    same = fm.cast(x, "float32")
    assert same.dtype == np.float32 and not np.shares_memory(same, x)
    np.testing.assert_array_equal(x, snapshot)
    twice = fm.cast(fm.cast(x, "bfloat16"), "float8_e4m3fn", saturate=True)
    assert twice.dtype == fm.FORMATS["float8_e4m3fn"] and twice.shape == (3,)


# --- format properties -----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(TORCH_DTYPES) + ["float32"])
def test_format_info_equals_torch_finfo(fmt: str) -> None:
    tdtype = TORCH_DTYPES.get(fmt, torch.float32)
    tinfo, info = torch.finfo(tdtype), fm.format_info(fmt)
    assert info["name"] == fmt and info["dtype"] == fm.FORMATS[fmt]
    assert info["bits"] == tinfo.bits
    assert info["max"] == tinfo.max
    assert info["smallest_normal"] == tinfo.smallest_normal
    assert info["eps"] == tinfo.eps
    assert 2.0 ** -info["mantissa_bits"] == tinfo.eps
    assert info["exponent_bits"] == tinfo.bits - 1 - info["mantissa_bits"]
    # smallest subnormal: the bit pattern 0...01 read by torch
    one = torch.tensor([1], dtype=torch.int32 if tinfo.bits == 32 else torch.int16 if tinfo.bits == 16 else torch.uint8)
    assert info["smallest_subnormal"] == one.view(tdtype).float().item()
    assert info["has_inf"] == bool(torch.isinf(torch.tensor(float("inf")).to(tdtype).float()).item())


def test_e4m3fn_alone_has_no_infinity() -> None:
    assert [fmt for fmt in fm.FORMATS if not fm.format_info(fmt)["has_inf"]] == ["float8_e4m3fn"]


# --- delayed scaling -------------------------------------------------------------------------------
def test_amax_history_rolls_oldest_out_by_hand() -> None:
    h0 = fm.init_amax_history(3)
    assert h0.dtype == np.float32 and h0.tolist() == [0.0, 0.0, 0.0]
    h1 = fm.update_amax_history(h0, np.array([[-3.0, 2.0]], np.float32))
    h2 = fm.update_amax_history(h1, np.array([1.0, np.nan, -0.5]))  # NaN ignored, as TE's fmaxf does
    h3 = fm.update_amax_history(h2, np.array([np.inf, 1.0], np.float32))
    h4 = fm.update_amax_history(h3, np.array([], np.float32))  # empty: amax 0
    assert h1.tolist() == [0, 0, 3] and h2.tolist() == [0, 3, 1] and h3.tolist() == [3, 1, np.inf]
    assert h4.tolist() == [1, np.inf, 0]
    assert h0.tolist() == [0, 0, 0] and h1.tolist() == [0, 0, 3]  # inputs untouched
    assert fm.update_amax_history(fm.init_amax_history(1), np.array([-7.5])).tolist() == [7.5]


def test_delayed_scale_formula_by_hand() -> None:
    history = np.array([0.0, 2.0, 1.0], np.float32)
    assert fm.delayed_scale(history, "float8_e4m3fn") == 224.0  # 448 / max(history) = 448 / 2
    assert fm.delayed_scale(history, "float8_e4m3fn", margin=1) == 112.0  # / 2^1
    assert fm.delayed_scale(history, "float8_e5m2", margin=2) == 57344 / 2 / 4
    assert fm.delayed_scale(np.array([3.0], np.float32), "float8_e4m3fn") == 149.3333282470703  # float32(448/3)
    zeros = fm.init_amax_history(4)
    assert fm.delayed_scale(zeros, "float8_e4m3fn") == 1.0  # nothing seen yet: TE's initial scale
    assert fm.delayed_scale(zeros, "float8_e4m3fn", previous_scale=0.25) == 0.25
    assert fm.delayed_scale(np.array([1.0, np.inf], np.float32), "float8_e5m2", previous_scale=8.0) == 8.0
    tiny = np.array([1e-44], np.float32)  # 448 / 1e-44 overflows float32: clamped
    assert fm.delayed_scale(tiny, "float8_e4m3fn") == float(np.finfo(np.float32).max)


def test_quantize_dequantize_by_hand_and_against_torch() -> None:
    g = np.array([1e-4], np.float32)
    assert fm.quantize_dequantize(g, "float8_e4m3fn", 1.0).tolist() == [0.0]  # below 2^-10: flushed
    # 1e-4 * 2^12 = 0.4096 → nearest E4M3 in [0.25, 0.5) (step 1/32) is 13/32; back: 13 * 2^-17
    assert fm.quantize_dequantize(g, "float8_e4m3fn", 2.0**12).tolist() == [13 * 2.0**-17]
    big = np.array([1000.0, -1000.0], np.float32)
    assert np.isnan(fm.quantize_dequantize(big, "float8_e4m3fn", 1.0)).all()
    assert fm.quantize_dequantize(big, "float8_e4m3fn", 1.0, saturate=True).tolist() == [448.0, -448.0]
    x = np.random.default_rng(0).standard_normal(2000).astype(np.float32) * 10.0 ** np.arange(-5, 5).repeat(200)
    for scale in (1.0, 3.7, 2.0**-7, 448 / 37.1):
        ours = fm.quantize_dequantize(x, "float8_e4m3fn", scale, saturate=True)
        s = torch.tensor(scale, dtype=torch.float32)
        theirs = (torch.from_numpy(x) * s).to(torch.float8_e4m3fn).float() / s
        assert ours.dtype == np.float32
        np.testing.assert_array_equal(ours, theirs.numpy())


# --- the experiment --------------------------------------------------------------------------------
STEPS = 200  # ~1 s per run on one core


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    return {
        "fp32": fm.train_in_format("float32", "none", STEPS, 0),
        "bf16": fm.train_in_format("bfloat16", "none", STEPS, 0),
        "fp8_none": fm.train_in_format("float8_e4m3fn", "none", STEPS, 0),
        "fp8_delayed": fm.train_in_format("float8_e4m3fn", "delayed", STEPS, 0),
    }


def test_float32_run_is_the_plain_module_1_training_loop(runs: dict) -> None:
    config = runs["fp32"]["config"]
    X, Y = mlp.make_synthetic_regression_batch(config["n"], config["d_in"], config["d_out"], np.random.default_rng(0))
    params = mlp.init_mlp_params(config["d_in"], config["d_hidden"], config["d_out"], np.random.default_rng(1))
    losses = []
    for _ in range(STEPS):
        Y_hat, cache = mlp.mlp_forward(params, X)
        loss, dY = mlp.mse_loss_and_grad(Y_hat, Y)
        losses.append(loss)
        params = mlp.sgd_step(params, mlp.mlp_backward(params, cache, dY), config["lr"])
    assert runs["fp32"]["losses"] == losses
    assert runs["fp32"]["final_loss"] == mlp.mse_loss_and_grad(mlp.mlp_forward(params, X)[0], Y)[0]
    assert runs["fp32"]["final_loss"] < 0.1 * losses[0]  # it trains: measured 2.05 → 0.081


def test_bfloat16_without_scaling_trains_like_float32(runs: dict) -> None:
    # measured: gap +0.01% at 200 steps (seeds 0, 1, 2); 0.5% leaves a 50x margin
    assert abs(fm.loss_gap(runs["bf16"], runs["fp32"])) < 0.005
    assert runs["bf16"]["non_finite_steps"] == 0 and runs["bf16"]["gradient_flush_fraction"] == 0.0


def test_float8_without_scaling_fails_by_underflow(runs: dict) -> None:
    run = runs["fp8_none"]
    # measured: every non-zero gradient entry flushed to 0, so the weights never move and the final loss
    # is the initial one (2.05, +2400% vs float32); requiring 99% flushed and 90% of the initial loss kept
    assert run["gradient_flush_fraction"] > 0.99
    assert run["final_loss"] > 0.9 * runs["fp32"]["losses"][0]
    assert fm.loss_gap(run, runs["fp32"]) > 5.0


def test_float8_with_delayed_scaling_trains(runs: dict) -> None:
    run = runs["fp8_delayed"]
    # measured: gap +1.0% (seed 0; +1.6%, +1.1% for seeds 1, 2), 0.5% of gradient entries flushed;
    # thresholds 10% and 5% leave a margin of 6x or more
    assert 0 <= fm.loss_gap(run, runs["fp32"]) < 0.10
    assert run["gradient_flush_fraction"] < 0.05 and run["non_finite_steps"] == 0
    # X never changes, so its scale is 448 / amax(X) in float32 from the second step on
    X, _ = mlp.make_synthetic_regression_batch(2048, 16, 8, np.random.default_rng(0))
    assert run["final_scales"]["X"] == float(np.float32(448) / np.float32(np.abs(X).max()))


def test_static_loss_scale_is_the_scale_of_every_gradient_tensor() -> None:
    run = fm.train_in_format("float16", "loss", 2, 0, loss_scale=2.0**10)
    assert run["final_scales"] == {"X": 1.0, "W1": 1.0, "A1": 1.0, "W2": 1.0, "dY_hat": 1024.0, "dZ1": 1024.0}
    assert run["config"]["grad_fmt"] == "float16" and len(run["losses"]) == 2


# --- bad input -------------------------------------------------------------------------------------
X4 = np.ones(4, np.float32)
H3 = np.zeros(3, np.float32)


@pytest.mark.parametrize(
    "call, error, name",
    [
        (lambda: fm.cast([1.0], "float16"), TypeError, "x"),
        (lambda: fm.cast(np.arange(3), "float16"), TypeError, "x"),
        (lambda: fm.cast(X4, "fp8"), ValueError, "fmt"),
        (lambda: fm.cast(X4, np.float16), TypeError, "fmt"),
        (lambda: fm.cast(X4, "float16", saturate=1), TypeError, "saturate"),
        (lambda: fm.format_info("float64"), ValueError, "fmt"),
        (lambda: fm.init_amax_history(0), ValueError, "length"),
        (lambda: fm.init_amax_history(2.0), TypeError, "length"),
        (lambda: fm.update_amax_history(np.zeros(3), X4), TypeError, "history"),
        (lambda: fm.update_amax_history(np.array([-1.0], np.float32), X4), ValueError, "history"),
        (lambda: fm.update_amax_history(H3, [1.0]), TypeError, "tensor"),
        (lambda: fm.delayed_scale(H3, "int8"), ValueError, "fmt"),
        (lambda: fm.delayed_scale(H3, "float8_e4m3fn", margin=-1), ValueError, "margin"),
        (lambda: fm.delayed_scale(H3, "float8_e4m3fn", previous_scale=0.0), ValueError, "previous_scale"),
        (lambda: fm.quantize_dequantize(X4, "float8_e5m2", 0.0), ValueError, "scale"),
        (lambda: fm.quantize_dequantize(X4, "float8_e5m2", float("inf")), ValueError, "scale"),
        (lambda: fm.quantize_dequantize(X4, "float8_e5m2", 1e-50), ValueError, "scale"),
        (lambda: fm.quantize_dequantize(X4, "float8_e5m2", "2"), TypeError, "scale"),
        (lambda: fm.train_in_format("float16", "dynamic", 1, 0), ValueError, "scaling"),
        (lambda: fm.train_in_format("fp16", "none", 1, 0), ValueError, "fmt"),
        (lambda: fm.train_in_format("float16", "none", 1, 0, grad_fmt="e5m2"), ValueError, "grad_fmt"),
        (lambda: fm.train_in_format("float16", "none", 0, 0), ValueError, "steps"),
        (lambda: fm.train_in_format("float16", "none", 1, -1), ValueError, "seed"),
        (lambda: fm.train_in_format("float16", "loss", 1, 0, loss_scale=0), ValueError, "loss_scale"),
        (lambda: fm.train_in_format("float16", "none", 1, 0, amax_history_len=0), ValueError, "amax_history_len"),
        (lambda: fm.loss_gap({"final_loss": 1.0}, {"final_loss": 0.0}), ValueError, "baseline"),
        (lambda: fm.loss_gap([], {"final_loss": 1.0}), TypeError, "run"),
    ],
)
def test_bad_input_names_the_argument(call, error: type, name: str) -> None:
    with pytest.raises(error, match=rf"\b{name}\b"):
        call()


def test_unknown_format_lists_the_known_ones() -> None:
    with pytest.raises(ValueError) as caught:
        fm.cast(X4, "float8_e4m3")
    for known in fm.FORMATS:
        assert repr(known) in str(caught.value)
