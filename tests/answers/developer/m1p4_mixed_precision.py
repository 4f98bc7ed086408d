"""Mutants for Module 1, Part 4 (lessons 19–24), the mistakes the notebooks' "Common mistakes" name."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trainsys.memtrain import mixed_precision as ref
from trainsys.memtrain.mlp import mlp_backward, mlp_forward, mse_loss_and_grad

REFERENCE = "trainsys.memtrain.mixed_precision"


def validated(reference: Callable, wrong: Callable) -> Callable:
    """Validate like the reference (same errors on bad input), then compute ``wrong``."""

    def mutant(*args, **kwargs):
        reference(*args, **kwargs)
        return wrong(*args, **kwargs)

    return mutant


def _cast(clip: bool = False, count=None, copy: bool = True, flush_subnormals: bool = False):
    def wrong(tree, dtype=np.float16):
        half, overflow = {}, {}
        for key, x in tree.items():
            y = np.asarray(np.clip(x, -65504, 65504)) if clip else x
            h = y.astype(np.float16, copy=copy)
            if flush_subnormals:
                h = np.where(np.abs(h) < 2.0**-14, np.float16(0), h)
            half[key] = h
            overflow[key] = int(count(x, h)) if count else int(np.sum(np.isfinite(x) & np.isinf(h)))
        return half, overflow

    return validated(ref.cast_to_half_precision, wrong)


def _unscale_in_place(grads, scale):
    ref.unscale_gradients(grads, scale)
    for g in grads.values():
        g /= g.dtype.type(scale)
    return {k: g.astype(np.float32) for k, g in grads.items()}


def _step(update_on_overflow: bool = False, grow_on_overflow: bool = False, reset_tracker: bool = True,
          unscale: bool = True, cast_before_scaling: bool = False, grow_late: bool = False,
          half_master: bool = False, in_place_scaler: bool = False):
    """A mixed-precision step with one deliberate mistake (the flags)."""

    def wrong(master, X, Y, scaler, lr):
        ref.mixed_precision_step(master, X, Y, scaler, lr)  # validation
        s = scaler["scale"]
        half = {k: v.astype(np.float16) for k, v in master.items()}
        Y_hat, cache = mlp_forward(half, X.astype(np.float16))
        loss, dY = mse_loss_and_grad(Y_hat.astype(np.float32), Y)
        if cast_before_scaling:  # the loss gradient rounded to float16 first: below 2^-25 it is already 0
            dY = dY.astype(np.float16).astype(np.float32)
        G = (dY * np.float32(s)).astype(np.float16)
        divisor = np.float32(s if unscale else 1.0)
        grads = {k: g.astype(np.float32) / divisor for k, g in mlp_backward(half, cache, G).items()}
        found = any(not np.all(np.isfinite(g)) for g in grads.values())
        if found and not update_on_overflow:
            new_master = {k: v.copy() for k, v in master.items()}
        elif half_master:
            new_master = {k: (half[k] - np.float16(lr) * grads[k].astype(np.float16)).astype(np.float32)
                          for k in master}
        else:
            new_master = {k: (v - np.float32(lr) * grads[k]).astype(np.float32) for k, v in master.items()}
        new = scaler if in_place_scaler else dict(scaler)
        if found and not grow_on_overflow:
            new["scale"] = s * scaler["backoff_factor"]
            new["growth_tracker"] = 0 if reset_tracker else scaler["growth_tracker"]
        else:
            tracker = scaler["growth_tracker"] + 1
            if tracker == scaler["growth_interval"] + (1 if grow_late else 0):
                new["scale"], tracker = s * scaler["growth_factor"], 0
            new["growth_tracker"] = tracker
        return new_master, new, {"loss": loss, "skipped": bool(found), "scale_used": s}

    return wrong


MUTANTS: dict[str, list[tuple[str, Callable]]] = {
    "cast_to_half_precision": [
        ("clips to ±65504 instead of overflowing to inf (hides the overflow)", _cast(clip=True)),
        ("counts nan (and already-infinite entries) as overflow", _cast(count=lambda x, h: np.sum(~np.isfinite(h)))),
        ("counts every inf after the cast, including inputs that were already inf",
         _cast(count=lambda x, h: np.sum(np.isinf(h)))),
        ("returns the input itself when it is already float16 (astype(copy=False))", _cast(copy=False)),
        ("flushes subnormals to zero", _cast(flush_subnormals=True)),
    ],
    "make_master_params": [
        ("np.asarray(v, dtype=np.float32): aliases float32 inputs",
         validated(ref.make_master_params, lambda p: {k: np.asarray(v, dtype=np.float32) for k, v in p.items()})),
        ("copies but keeps the input dtype (float16/float64 masters)",
         validated(ref.make_master_params, lambda p: {k: v.copy() for k, v in p.items()})),
        ("makes the master from the float16 weights (precision already lost)",
         validated(ref.make_master_params,
                   lambda p: {k: v.astype(np.float16).astype(np.float32) for k, v in p.items()})),
    ],
    "scale_loss": [
        ("divides by the scale", validated(ref.scale_loss, lambda loss, s: float(loss) / s)),
        ("multiplies in float16 (overflows past 65504, rounds the loss)",
         validated(ref.scale_loss, lambda loss, s: float(np.float16(loss) * np.float16(s)))),
        ("no check of the scale (accepts 0 and negative scales)", lambda loss, s: float(loss) * float(s)),
    ],
    "unscale_gradients": [
        ("multiplies by 1/scale in float16, then converts to float32 (underflow and overflow)",
         validated(ref.unscale_gradients, lambda g, s: {k: (v * v.dtype.type(1.0 / s)).astype(np.float32)
                                                       for k, v in g.items()})),
        ("multiplies by the scale", validated(
            ref.unscale_gradients, lambda g, s: {k: v.astype(np.float32) * np.float32(s) for k, v in g.items()})),
        ("divides the input arrays in place", _unscale_in_place),
        ("keeps the input dtype (float16 gradients stay float16)",
         validated(ref.unscale_gradients, lambda g, s: {k: (v.astype(np.float32) / np.float32(s)).astype(v.dtype)
                                                       for k, v in g.items()})),
    ],
    "has_non_finite_gradients": [
        ("checks only for inf (misses nan)",
         validated(ref.has_non_finite_gradients, lambda g: any(bool(np.isinf(v).any()) for v in g.values()))),
        ("checks only the first array", validated(
            ref.has_non_finite_gradients, lambda g: bool(g) and not bool(np.all(np.isfinite(next(iter(g.values()))))))),
        ("compares the largest entry with inf (misses -inf and nan)",
         validated(ref.has_non_finite_gradients, lambda g: any(v.size > 0 and v.max() == np.inf for v in g.values()))),
    ],
    "mixed_precision_step": [
        ("updates the master even when the gradients overflowed", _step(update_on_overflow=True)),
        ("grows the scale on overflow instead of backing off", _step(grow_on_overflow=True)),
        ("does not reset growth_tracker on overflow", _step(reset_tracker=False)),
        ("forgets to unscale: the update is lr · scale · g", _step(unscale=False)),
        ("casts the loss gradient to float16 before scaling (tiny gradients flush to zero)",
         _step(cast_before_scaling=True)),
        ("grows one step late (after growth_interval + 1 clean steps)", _step(grow_late=True)),
        ("updates the float16 weights, not the float32 master", _step(half_master=True)),
        ("updates the scaler dict in place", _step(in_place_scaler=True)),
    ],
}
