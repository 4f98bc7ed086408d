"""Mutants for Module 1, Part 3 (lessons 15–18): the checkpointing mistakes the notebooks name."""

from __future__ import annotations

import math

import numpy as np

from trainsys.memtrain import checkpointing as ref

REFERENCE = "trainsys.memtrain.checkpointing"


def _forward(variant: str):
    def wrong(params, X, segment_size):
        Y, ckpt = ref.mlp_forward_checkpointed(params, X, segment_size)  # validation and output
        _, plain = ref.deep_mlp_forward(params, X)
        a, s, L = plain["a"], segment_size, len(params)
        if variant == "keep_all":
            return Y, {"segment_size": s, "boundaries": list(a)}
        if variant == "segment_end":  # the output of each segment's first layer instead of its input
            return Y, {"segment_size": s, "boundaries": [X] + [a[k * s + 1] if k * s + 1 < L else a[-1]
                                                               for k in range(1, math.ceil(L / s))]}
        return Y, {"segment_size": s, "boundaries": [X.copy()] + ckpt["boundaries"][1:]}

    return wrong


def _recompute(variant: str):
    def wrong(params, x_in, start, stop):
        ref.recompute_block_activations(params, x_in, start, stop)
        a = [x_in]
        last = stop if variant == "run_last_layer" else stop - 1
        for l in range(start, last):
            z = x_in if False else a[-1] @ params[l]["W"] + params[l]["b"]
            if variant == "store_pre_activation":
                a.append(z)
            else:
                a.append(np.maximum(z, 0) if l < len(params) - 1 else z)
        if variant == "copy_input":
            a[0] = x_in.copy()
        return {"a": a}

    return wrong


def _recompute_dropout(variant: str):
    """Replays dropout wrongly: fresh masks from a new unseeded generator, or kept units not scaled by 1/(1-p)."""
    def wrong(params, x_in, start, stop, dropout=None):
        out = ref.recompute_block_activations(params, x_in, start, stop, dropout)  # validation; no-dropout answer
        if dropout is None:
            return out
        p = dropout["p"]
        rng = np.random.default_rng() if variant == "fresh_masks" else np.random.default_rng(0)
        if variant != "fresh_masks":
            rng.bit_generator.state = dropout["rng_state"]
        a, keep, L = [x_in], [], len(params)
        for l in range(start, stop):
            if l < stop - 1:
                h = np.maximum(a[-1] @ params[l]["W"] + params[l]["b"], 0)
            m = rng.random((x_in.shape[0], params[l]["W"].shape[1])) >= p if l < L - 1 else None
            if m is not None:
                keep.append(m)
            if l < stop - 1:
                scale = h.dtype.type(1.0) if variant == "no_scale" else h.dtype.type(1.0 / (1.0 - p))
                a.append(h * m * scale)
        return {"a": a, "keep": keep}

    return wrong


def _backward(variant: str):
    def wrong(params, ckpt_cache, dY_hat):
        grads, count = ref.mlp_backward_checkpointed(params, ckpt_cache, dY_hat)
        L, s = len(params), ckpt_cache["segment_size"]
        if variant == "count_every_layer":
            return grads, L
        if variant == "recompute_from_input":  # rebuild each segment from X: quadratic work
            return grads, sum(min((k + 1) * s, L) - 1 for k in range(math.ceil(L / s)))
        # "no_mask_at_boundary": the gradient leaving a segment skips its ReLU mask
        boundaries, g = ckpt_cache["boundaries"], dY_hat
        out = [None] * L
        for k in range(len(boundaries) - 1, -1, -1):
            start, stop = k * s, min((k + 1) * s, L)
            a = ref.recompute_block_activations(params, boundaries[k], start, stop)["a"]
            for i in range(len(a) - 1, -1, -1):
                l = start + i
                out[l] = {"W": a[i].T @ g, "b": g.sum(axis=0)}
                if l == 0:
                    break
                dA = g @ params[l]["W"].T
                g = dA if i == 0 else dA * (a[i] > 0)
        return out, count

    return wrong


def _estimate(variant: str):
    def wrong(layer_widths, batch, segment_size, bytes_per_elem=4):
        out = ref.estimate_checkpointing_memory_savings(layer_widths, batch, segment_size, bytes_per_elem)
        L = len(layer_widths) - 1
        if variant == "count_last_layer":
            out["recomputed_layers"] = L
        elif variant == "flops_without_2":
            out["extra_forward_flops"] /= 2
            out["extra_compute_fraction"] /= 2
        elif variant == "fraction_of_one_forward":
            out["extra_compute_fraction"] *= 3
        elif variant == "optimum_boundaries_only":
            out["optimal_segment_size"] = L  # fewest boundaries, ignoring the rebuilt segment
        return out

    return wrong


MUTANTS = {
    "mlp_forward_checkpointed": [
        ("keeps every activation (no memory saved)", _forward("keep_all")),
        ("stores each segment's second activation instead of its input (off by one)", _forward("segment_end")),
        ("copies X as the first boundary", _forward("copy_input")),
    ],
    "recompute_block_activations": [
        ("also runs the segment's last layer", _recompute("run_last_layer")),
        ("stores pre-activations z instead of activations a", _recompute("store_pre_activation")),
        ("copies x_in instead of reusing the boundary", _recompute("copy_input")),
        ("draws fresh dropout masks from np.random.default_rng() instead of replaying rng_state",
         _recompute_dropout("fresh_masks")),
        ("replays the masks but drops without scaling by 1/(1-p)", _recompute_dropout("no_scale")),
    ],
    "mlp_backward_checkpointed": [
        ("counts every layer as recomputed", _backward("count_every_layer")),
        ("rebuilds every segment from the input X", _backward("recompute_from_input")),
        ("forgets the ReLU mask where a gradient leaves a segment", _backward("no_mask_at_boundary")),
    ],
    "estimate_checkpointing_memory_savings": [
        ("counts the last layer of each segment as recomputed", _estimate("count_last_layer")),
        ("FLOPs of a matmul without the factor 2", _estimate("flops_without_2")),
        ("extra compute relative to one forward instead of a 3-forward step", _estimate("fraction_of_one_forward")),
        ("picks the segment size with the fewest boundaries", _estimate("optimum_boundaries_only")),
    ],
}
