"""Witnesses for Module 1, Part 4 (mixed precision): one wrong answer per broken clause and case."""

from __future__ import annotations

import math

import numpy as np

from tests.answers.clauses import existing
from trainsys.memtrain import mixed_precision as ref
from trainsys.memtrain.mlp import mlp_backward, mlp_forward, mse_loss_and_grad


# --- Lesson 19 · cast_to_half_precision ------------------------------------------------------------
def _cast_counts_above_max(tree, dtype=np.float16):
    """Counts every finite entry above float16's max 65504 as overflow, also those in [65504, 65520) that round down."""
    half, overflow = ref.cast_to_half_precision(tree, dtype)
    return half, {k: int(np.count_nonzero(np.isfinite(v) & (np.abs(v) > 65504))) for k, v in tree.items()}


def _cast_reports_underflow(tree, dtype=np.float16):
    """Adds the entries that became zero (underflow) to the overflow count: "every value the cast lost"."""
    half, overflow = ref.cast_to_half_precision(tree, dtype)
    with np.errstate(all="ignore"):
        lost = {k: int(np.count_nonzero((tree[k] != 0) & (half[k] == 0))) for k in tree}
    return half, {k: overflow[k] + lost[k] for k in tree}


def _cast_any_float_dtype(tree, dtype=np.float16):
    """Casts to whatever float dtype it is given (np.float32 and 'float64' accepted)."""
    try:
        target = np.dtype(dtype)
    except TypeError:
        target = None
    if target is not None and np.issubdtype(target, np.floating) and target != np.float16:
        _, overflow = ref.cast_to_half_precision(tree)  # the tree is validated
        return {k: v.astype(target) for k, v in tree.items()}, overflow
    return ref.cast_to_half_precision(tree, dtype)


# --- Lesson 20 · make_master_params ----------------------------------------------------------------
def _master_mlp_keys_only(params):
    """Copies the four MLP keys W1, b1, W2, b2 (the ones it knows) and nothing else."""
    ref.make_master_params(params)  # validation
    return {k: params[k].astype(np.float32) for k in ("W1", "b1", "W2", "b2") if k in params}


def _master_requires_mlp_keys(params):
    """Refuses a dict whose keys are not the MLP's W1, b1, W2, b2."""
    master = ref.make_master_params(params)
    if not set(params) <= {"W1", "b1", "W2", "b2"}:
        raise ValueError(f"params must hold the MLP keys W1, b1, W2, b2, got {sorted(params)}")
    return master


def _master_finite(params):
    """Replaces nan and ±inf by finite numbers in the copies ("a master weight must be a number")."""
    master = ref.make_master_params(params)
    for value in master.values():
        np.nan_to_num(value, copy=False)
    return master


# --- Lesson 21 · scale_loss ------------------------------------------------------------------------
def _scale_loss_rejects_inf(loss, scale):
    """Refuses a non-finite loss with math.isfinite: an inf loss raises ValueError."""
    result = ref.scale_loss(loss, scale)
    if not math.isfinite(float(loss)):
        raise ValueError(f"loss must be finite, got {loss}")
    return result


# --- Lesson 22 · unscale_gradients -----------------------------------------------------------------
def _unscale_without_copy(grads, scale):
    """``astype(np.float32, copy=False)`` then ``/=``: float32 inputs are divided in place."""
    ref.unscale_gradients(grads, scale)  # validation
    out = {}
    for key, g in grads.items():
        g32 = g.astype(np.float32, copy=False)
        g32 /= np.float32(scale)
        out[key] = g32
    return out


def _unscale_scale_one_is_identity(grads, scale):
    """Hands float32 inputs back as they are when the scale is 1 (nothing to divide)."""
    out = ref.unscale_gradients(grads, scale)
    if scale == 1:
        out = {k: (g if g.dtype == np.float32 else out[k]) for k, g in grads.items()}
    return out


def _unscale_nan_to_num(grads, scale):
    """Cleans the new arrays with np.nan_to_num (hides the overflow the next lesson must see)."""
    out = ref.unscale_gradients(grads, scale)
    for value in out.values():
        np.nan_to_num(value, copy=False)
    return out


def _unscale_out_of_place(grads, scale):
    """``g.astype(np.float32) / np.float32(scale)``: a 0-d array comes back as a NumPy scalar."""
    ref.unscale_gradients(grads, scale)  # validation
    return {k: g.astype(np.float32) / np.float32(scale) for k, g in grads.items()}


# --- Lesson 23 · has_non_finite_gradients ----------------------------------------------------------
def _nf_float16_max_is_overflow(grads):
    """Treats |g| >= 65504 (float16's max) as an overflow."""
    found = ref.has_non_finite_gradients(grads)
    return found or any(bool(np.any(np.abs(g) >= 65504)) for g in grads.values())


def _nf_largest_magnitude(grads):
    """``np.isfinite(np.abs(g).max())`` per array: raises on an empty array (a reduction with no identity)."""
    ref.has_non_finite_gradients(grads)  # validation
    return any(not bool(np.isfinite(np.abs(g).max())) for g in grads.values())


def _nf_cleans_in_place(grads):
    """Zeroes the non-finite entries in place once it has found them, "so the next step is clean"."""
    found = ref.has_non_finite_gradients(grads)
    for g in grads.values():
        np.nan_to_num(g, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return found


def _nf_every_mask_at_once(grads):
    """Builds every array's np.isfinite mask first, then reduces them: all the masks are alive together."""
    ref.has_non_finite_gradients(grads)  # validation
    masks = [np.isfinite(g) for g in grads.values()]
    return not all(bool(m.all()) for m in masks)


# --- Lesson 24 · mixed_precision_step --------------------------------------------------------------
def _step_recomputed(master, X, Y, scaler, lr, **errstate):
    """The reference's result, with its float16 arithmetic run again under ``np.errstate(**errstate)``."""
    result = ref.mixed_precision_step(master, X, Y, scaler, lr)
    with np.errstate(**errstate):
        half, _ = ref.cast_to_half_precision(master)
        Y_hat, cache = mlp_forward(half, X.astype(np.float16))
        _, dY_hat = mse_loss_and_grad(Y_hat.astype(np.float32), Y.astype(np.float32))
        G = (dY_hat * np.float32(scaler["scale"])).astype(np.float16)
        ref.unscale_gradients(mlp_backward(half, cache, G), scaler["scale"])
    return result


def _step_raises_on_overflow(master, X, Y, scaler, lr):
    """Runs the float16 arithmetic under np.errstate(over="raise"): an overflow is an exception."""
    return _step_recomputed(master, X, Y, scaler, lr, over="raise")


def _step_without_errstate(master, X, Y, scaler, lr):
    """Runs the float16 arithmetic without np.errstate: every overflow prints a RuntimeWarning."""
    return _step_recomputed(master, X, Y, scaler, lr)


def _step_returns_master_when_skipped(master, X, Y, scaler, lr):
    """On a skipped step, hands back the master's own arrays ("nothing changed")."""
    new_master, new_scaler, info = ref.mixed_precision_step(master, X, Y, scaler, lr)
    return (dict(master) if info["skipped"] else new_master), new_scaler, info


def _step_lr_zero(master, X, Y, scaler, lr):
    """Refuses lr < 0 but lets lr = 0 through (a step that changes nothing)."""
    if isinstance(lr, float) and lr == 0:
        new_master, new_scaler, info = ref.mixed_precision_step(master, X, Y, scaler, 1.0)
        return {k: v.copy() for k, v in master.items()}, new_scaler, info
    return ref.mixed_precision_step(master, X, Y, scaler, lr)


def _step_lr_checked_late(master, X, Y, scaler, lr):
    """Validates lr only where the update uses it: a skipped step never looks at lr."""
    probe = ref.mixed_precision_step(master, X, Y, scaler, 1.0)  # everything but lr validated, then computed
    if probe[2]["skipped"]:
        return probe
    return ref.mixed_precision_step(master, X, Y, scaler, lr)


def _step_extra_scaler_keys(master, X, Y, scaler, lr):
    """Reads the five fields it needs and ignores any other key of the scaler."""
    if isinstance(scaler, dict):
        scaler = {k: v for k, v in scaler.items() if k in ref.SCALER_KEYS}
    return ref.mixed_precision_step(master, X, Y, scaler, lr)


def _step_tracker_unbounded(master, X, Y, scaler, lr):
    """Accepts growth_tracker >= growth_interval as a step that is due for growth."""
    if isinstance(scaler, dict) and isinstance(scaler.get("growth_tracker"), int) \
            and isinstance(scaler.get("growth_interval"), int) and scaler["growth_interval"] >= 1 \
            and scaler["growth_tracker"] >= scaler["growth_interval"]:
        scaler = {**scaler, "growth_tracker": scaler["growth_interval"] - 1}
    return ref.mixed_precision_step(master, X, Y, scaler, lr)


def _step_casts_master(master, X, Y, scaler, lr):
    """Casts a float64 (or float16) master to float32 instead of refusing it."""
    if isinstance(master, dict):
        master = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype != np.float32 else v)
                  for k, v in master.items()}
    return ref.mixed_precision_step(master, X, Y, scaler, lr)


def _step_backoff_checked_late(master, X, Y, scaler, lr):
    """Validates backoff_factor only when it backs off: a clean step never looks at it."""
    if isinstance(scaler, dict) and not 0 < scaler.get("backoff_factor", 0.5) < 1:
        result = ref.mixed_precision_step(master, X, Y, {**scaler, "backoff_factor": 0.5}, lr)
        if not result[2]["skipped"]:
            return result[0], {**result[1], "backoff_factor": scaler["backoff_factor"]}, result[2]
    return ref.mixed_precision_step(master, X, Y, scaler, lr)


def _step_growth_factor_one(master, X, Y, scaler, lr):
    """Checks growth_factor >= 1 instead of > 1: a growth factor of 1 is accepted."""
    if isinstance(scaler, dict) and scaler.get("growth_factor") == 1.0:
        new_master, new_scaler, info = ref.mixed_precision_step(master, X, Y, {**scaler, "growth_factor": 2.0}, lr)
        return new_master, {**new_scaler, "growth_factor": 1.0}, info
    return ref.mixed_precision_step(master, X, Y, scaler, lr)


WITNESSES = {
    "cast_to_half_precision": {
        "rounding": [existing("cast_to_half_precision", "float64 input cast through float32 first")],
        "what counts as overflow": [
            existing("cast_to_half_precision", "counts nan (and already-infinite entries) as overflow"),
            existing("cast_to_half_precision", "counts every inf after the cast"),
            ("finite entries above 65504 counted, also those that round down to 65504", _cast_counts_above_max),
        ],
        "underflow is silent": [existing("cast_to_half_precision", "flushes subnormals to zero"),
                                ("entries that became zero added to the overflow report", _cast_reports_underflow)],
        "mutation and memory": [
            existing("cast_to_half_precision", "returns the input itself when it is already float16"),
            existing("cast_to_half_precision", "writes the float16 arrays back into tree"),
        ],
        "failure modes": [
            existing("cast_to_half_precision", "accepts integer/bool arrays in tree"),
            existing("cast_to_half_precision", "ValueError for a non-floating dtype"),
            existing("cast_to_half_precision", "a bad entry's message does not name tree"),
            ("any float dtype accepted as the target", _cast_any_float_dtype),
        ],
        "metric that proves it correct": [
            existing("cast_to_half_precision", "clips to ±65504 instead of overflowing"),
            existing("cast_to_half_precision", "clips to +-65504 before the cast"),
        ],
    },
    "make_master_params": {
        "values by input dtype": [
            existing("make_master_params", "copies but keeps the input dtype"),
            existing("make_master_params", "makes the master from the float16 weights"),
        ],
        "mutation and memory": [existing("make_master_params", "np.asarray(v, dtype=np.float32): aliases")],
        "not only the mlp": [("only the MLP's four keys copied", _master_mlp_keys_only),
                             ("keys other than the MLP's refused", _master_requires_mlp_keys)],
        "failure modes": [
            existing("make_master_params", "accepts boolean arrays"),
            existing("make_master_params", "ValueError for an integer array"),
            existing("make_master_params", "accepts Python lists as values"),
            existing("make_master_params", "np.inexact check: complex arrays accepted"),
        ],
        "metric that proves it correct": [existing("make_master_params", "copies but keeps the input dtype"),
                                          ("nan and ±inf replaced by finite numbers", _master_finite)],
    },
    "scale_loss": {
        "non-finite losses pass through": [existing("scale_loss", "rejects a nan loss"),
                                           ("an inf loss refused", _scale_loss_rejects_inf)],
        "failure modes": [
            existing("scale_loss", "no check of the scale"),
            existing("scale_loss", "accepts loss=True"),
            existing("scale_loss", "accepts scale=True"),
            existing("scale_loss", "float() on anything but str"),
        ],
        "metric that proves it correct": [
            existing("scale_loss", "divides by the scale"),
            existing("scale_loss", "multiplies in float16"),
            existing("scale_loss", "float(loss) * scale: a np.float32 scale"),
        ],
    },
    "unscale_gradients": {
        "order of operations": [
            existing("unscale_gradients", "multiplies by 1/scale in float16"),
            existing("unscale_gradients", "keeps the input dtype"),
        ],
        "mutation": [
            existing("unscale_gradients", "divides the input arrays in place"),
            ("astype(copy=False) then /=: float32 inputs divided in place", _unscale_without_copy),
            ("float32 inputs handed back when the scale is 1", _unscale_scale_one_is_identity),
        ],
        "non-finite entries pass through": [("np.nan_to_num on the result", _unscale_nan_to_num)],
        "0-d arrays stay arrays": [("divided out of place: a 0-d array becomes a NumPy scalar", _unscale_out_of_place)],
        "failure modes": [
            existing("unscale_gradients", "nan scale accepted"),
            existing("unscale_gradients", "negative scale accepted"),
            existing("unscale_gradients", "accepts integer arrays"),
            existing("unscale_gradients", "accepts scale=True"),
        ],
        "metric that proves it correct": [existing("unscale_gradients", "multiplies by the scale"),
                                          existing("unscale_gradients", "keeps the input dtype")],
    },
    "has_non_finite_gradients": {
        "edge cases": [("|g| >= 65504 taken for an overflow", _nf_float16_max_is_overflow),
                       ("np.abs(g).max() per array, which raises on an empty array", _nf_largest_magnitude)],
        "mutation": [("the non-finite entries zeroed in place", _nf_cleans_in_place)],
        "memory": [existing("has_non_finite_gradients", "np.concatenate of every gradient"),
                   ("every array's mask built before any is reduced", _nf_every_mask_at_once)],
        "failure modes": [existing("has_non_finite_gradients", "validates while inspecting"),
                          existing("has_non_finite_gradients", "accepts boolean arrays")],
        "metric that proves it correct": [
            existing("has_non_finite_gradients", "checks only for inf"),
            existing("has_non_finite_gradients", "checks only the first array"),
            existing("has_non_finite_gradients", "compares the largest entry with inf"),
            existing("has_non_finite_gradients", "tests each array's float64 sum"),
            existing("has_non_finite_gradients", "tests each array's sum in its own dtype"),
        ],
    },
    "mixed_precision_step": {
        "the scaler's fields": [
            existing("mixed_precision_step", "does not reset growth_tracker on overflow"),
            existing("mixed_precision_step", "grows one step late"),
            existing("mixed_precision_step", "new scale stored as np.float32"),
            existing("mixed_precision_step", "the whole step inline, growing the scale past float32's largest"),
        ],
        "mutation": [existing("mixed_precision_step", "updates the scaler dict in place"),
                     ("the master's own arrays returned on a skipped step", _step_returns_master_when_skipped)],
        "overflow is an outcome, not an error": [
            ("float16 arithmetic under np.errstate(over='raise')", _step_raises_on_overflow),
            ("float16 arithmetic without np.errstate (RuntimeWarnings)", _step_without_errstate),
        ],
        "failure modes": [
            ("a float64 master cast instead of refused", _step_casts_master),
            ("extra scaler keys ignored", _step_extra_scaler_keys),
            ("growth_factor = 1 accepted", _step_growth_factor_one),
            ("growth_tracker >= growth_interval accepted", _step_tracker_unbounded),
            ("lr = 0 accepted", _step_lr_zero),
            ("lr validated only when the update is applied", _step_lr_checked_late),
            ("backoff_factor validated only when the scale backs off", _step_backoff_checked_late),
        ],
        "metrics that prove it correct": [
            existing("mixed_precision_step", "forgets to unscale"),
            existing("mixed_precision_step", "casts the loss gradient to float16 before scaling"),
            existing("mixed_precision_step", "updates the float16 weights"),
            existing("mixed_precision_step", "updates the master even when the gradients overflowed"),
            existing("mixed_precision_step", "info['loss'] from a separate float32 forward"),
        ],
    },
}
