"""Witnesses for Module 1, Part 3 (activation checkpointing): one wrong answer per broken clause and case."""

from __future__ import annotations

import math

import numpy as np

from tests.answers.clauses import existing
from trainsys.memtrain import checkpointing as ref
from trainsys.memtrain.mlp import linear_backward, linear_forward, relu_forward


# --- Lesson 15 · mlp_forward_checkpointed ----------------------------------------------------------
def _forward_in_float32(params, X, segment_size):
    """Runs every layer in float32, the lessons' usual dtype: a float64 network comes back float32."""
    ref.mlp_forward_checkpointed(params, X, segment_size)  # validation
    L, boundaries, a = len(params), [X], X
    for l in range(L):
        W, b = params[l]["W"].astype(np.float32, copy=False), params[l]["b"].astype(np.float32, copy=False)
        z = linear_forward(a.astype(np.float32, copy=False), W, b)
        a = relu_forward(z) if l < L - 1 else z
        if (l + 1) % segment_size == 0 and l + 1 < L:
            boundaries.append(a)
    return a, {"segment_size": segment_size, "boundaries": boundaries}


def _forward_relu_on_boundaries(params, X, segment_size):
    """After the pass, applies the ReLU in place to every stored boundary ("boundaries are activations"), X too."""
    Y_hat, ckpt = ref.mlp_forward_checkpointed(params, X, segment_size)
    for boundary in ckpt["boundaries"]:
        np.maximum(boundary, boundary.dtype.type(0), out=boundary)
    return Y_hat, ckpt


def _forward_no_lower_bound(params, X, segment_size):
    """Checks segment_size <= L but not >= 1: segment_size = 0 ends in a ZeroDivisionError."""
    if isinstance(segment_size, (int, np.integer)) and not isinstance(segment_size, bool) and segment_size < 1:
        L, boundaries, a = len(params), [X], X
        for l in range(L):
            a = relu_forward(linear_forward(a, params[l]["W"], params[l]["b"]))
            if (l + 1) % segment_size == 0:
                boundaries.append(a)
    return ref.mlp_forward_checkpointed(params, X, segment_size)


def _forward_accepts_bool(params, X, segment_size):
    """``isinstance(segment_size, int)`` lets True through as a segment size of 1."""
    if isinstance(segment_size, bool):
        segment_size = int(segment_size)
    return ref.mlp_forward_checkpointed(params, X, segment_size)


# --- Lesson 16 · recompute_block_activations --------------------------------------------------------
def _recompute_last_layer_linear(params, x_in, start, stop):
    """Treats the segment's last rebuilt layer as an output layer: no ReLU on a_{stop-1}."""
    ref.recompute_block_activations(params, x_in, start, stop)  # validation
    a = [x_in]
    for l in range(start, stop - 1):
        z = linear_forward(a[-1], params[l]["W"], params[l]["b"])
        a.append(relu_forward(z) if l < stop - 2 else z)
    return {"a": a}


def _recompute_in_float32(params, x_in, start, stop):
    """Rebuilds in float32 whatever the network's dtype."""
    ref.recompute_block_activations(params, x_in, start, stop)  # validation
    a = [x_in]
    for l in range(start, stop - 1):
        W, b = params[l]["W"].astype(np.float32, copy=False), params[l]["b"].astype(np.float32, copy=False)
        a.append(relu_forward(linear_forward(a[-1].astype(np.float32, copy=False), W, b)))
    return {"a": a}


def _recompute_relu_on_x_in(params, x_in, start, stop):
    """Clamps the boundary at zero in place ("a boundary is a ReLU output"): the network input X is changed."""
    out = ref.recompute_block_activations(params, x_in, start, stop)
    np.maximum(x_in, x_in.dtype.type(0), out=x_in)
    return out


# --- Lesson 17 · mlp_backward_checkpointed ----------------------------------------------------------
def _backward_pops_boundaries(params, ckpt_cache, dY_hat):
    """Pops each boundary off ckpt_cache['boundaries'] once its segment is done, "to free it"."""
    grads, count = ref.mlp_backward_checkpointed(params, ckpt_cache, dY_hat)
    boundaries = ckpt_cache["boundaries"]
    while boundaries:
        boundaries.pop()
    return grads, count


def _backward_keeps_rebuilt_in_cache(params, ckpt_cache, dY_hat):
    """Writes each rebuilt segment back into ckpt_cache (so that a second backward need not rebuild)."""
    grads, count = ref.mlp_backward_checkpointed(params, ckpt_cache, dY_hat)
    L, s = len(params), ckpt_cache["segment_size"]
    ckpt_cache["rebuilt"] = [ref.recompute_block_activations(params, b, k * s, min((k + 1) * s, L))["a"]
                             for k, b in enumerate(ckpt_cache["boundaries"])]
    return grads, count


def _backward_no_batch_check(params, ckpt_cache, dY_hat):
    """Checks dY_hat's width but not its batch: NumPy's matmul error names no argument of the contract."""
    X = ckpt_cache["boundaries"][0]
    if isinstance(dY_hat, np.ndarray) and dY_hat.ndim == 2 and dY_hat.shape[0] != X.shape[0] \
            and dY_hat.shape[1] == params[-1]["W"].shape[1]:
        X.T @ dY_hat  # layer 0's dW = X^T G: NumPy's matmul ValueError
    return ref.mlp_backward_checkpointed(params, ckpt_cache, dY_hat)


def _backward_no_boundary_count_check(params, ckpt_cache, dY_hat):
    """Does not compare len(boundaries) with ceil(L/s): a short cache fails deep inside the backward pass."""
    L, s = len(params), ckpt_cache["segment_size"]
    boundaries = ckpt_cache["boundaries"]
    if isinstance(s, int) and 1 <= s <= L and len(boundaries) != math.ceil(L / s):
        k = len(boundaries) - 1  # the last boundary taken for the last segment's
        start, stop = k * s, min((k + 1) * s, L)
        a = ref.recompute_block_activations(params, boundaries[k], start, stop)["a"]
        linear_backward(dY_hat, a[-1], params[stop - 1]["W"])  # ValueError naming dOut and W
    return ref.mlp_backward_checkpointed(params, ckpt_cache, dY_hat)


# --- Lesson 18 · estimate_checkpointing_memory_savings ---------------------------------------------
def _estimate_pops_output_width(layer_widths, batch, segment_size, bytes_per_elem=4):
    """Pops the output width off the caller's layer_widths to get at the hidden widths, then works on a copy."""
    out = ref.estimate_checkpointing_memory_savings(layer_widths, batch, segment_size, bytes_per_elem)
    layer_widths.pop()
    return out


def _estimate_with_arrays(layer_widths, batch, segment_size, bytes_per_elem=4):
    """Counts each activation's bytes from a zero array of its shape (np.zeros(...).nbytes)."""
    out = ref.estimate_checkpointing_memory_savings(layer_widths, batch, segment_size, bytes_per_elem)
    nbytes = [np.ones((batch, w * bytes_per_elem), np.uint8).nbytes for w in layer_widths]
    assert nbytes == [batch * w * bytes_per_elem for w in layer_widths]
    return out


def _estimate_int_of_segment_size(layer_widths, batch, segment_size, bytes_per_elem=4):
    """``int(segment_size)`` before validating: 2.0 is taken as 2."""
    if isinstance(segment_size, float) and segment_size.is_integer():
        segment_size = int(segment_size)
    return ref.estimate_checkpointing_memory_savings(layer_widths, batch, segment_size, bytes_per_elem)


def _estimate_int_of_widths(layer_widths, batch, segment_size, bytes_per_elem=4):
    """``[int(w) for w in layer_widths]`` before validating: a width of 8.0 is taken as 8."""
    if isinstance(layer_widths, list):
        layer_widths = [int(w) if isinstance(w, float) else w for w in layer_widths]
    return ref.estimate_checkpointing_memory_savings(layer_widths, batch, segment_size, bytes_per_elem)


WITNESSES = {
    "mlp_forward_checkpointed": {
        "no copy of the input": [existing("mlp_forward_checkpointed", "copies X as the first boundary")],
        "dtype": [("every layer run in float32, whatever the network's dtype", _forward_in_float32),
                  existing("mlp_forward_checkpointed", "np.einsum instead of linear_forward")],
        "mutation": [("the ReLU applied in place to every boundary, X included", _forward_relu_on_boundaries)],
        "failure modes": [
            existing("mlp_forward_checkpointed", "accepts segment_size=2.0"),
            ("segment_size = 0 not refused (ZeroDivisionError)", _forward_no_lower_bound),
            ("segment_size = True taken as 1", _forward_accepts_bool),
            existing("mlp_forward_checkpointed", "layer dicts with extra keys accepted"),
            existing("mlp_forward_checkpointed", "widths that do not chain are not validated"),
        ],
        "metric that proves it correct": [
            existing("mlp_forward_checkpointed", "keeps every activation (no memory saved)"),
            existing("mlp_forward_checkpointed", "stores each segment's second activation"),
            existing("mlp_forward_checkpointed", "keeps every activation during the loop"),
        ],
    },
    "recompute_block_activations": {
        "x_in comes back as it went in": [
            existing("recompute_block_activations", "copies x_in instead of reusing the boundary"),
            existing("recompute_block_activations", "copies x_in when start == 0"),
        ],
        "only inputs, only activations": [existing("recompute_block_activations", "stores pre-activations z")],
        "the layers that run": [existing("recompute_block_activations", "also runs the segment's last layer"),
                                ("no ReLU on the segment's last rebuilt layer", _recompute_last_layer_linear)],
        "dtype and mutation": [("rebuilt in float32 whatever the network's dtype", _recompute_in_float32),
                               ("x_in clamped at zero in place", _recompute_relu_on_x_in)],
        "failure modes": [
            existing("recompute_block_activations", "accepts start=1.0 / stop=3.0"),
            existing("recompute_block_activations", "accepts an integer x_in"),
            existing("recompute_block_activations", "start == L reported as a bad stop"),
            existing("recompute_block_activations", "checks x_in's width before the bounds"),
        ],
        "metric that proves it correct": [
            existing("recompute_block_activations", "bias folded into an augmented matmul"),
            existing("recompute_block_activations", "result['a'] is a tuple"),
        ],
        "replay": [
            existing("recompute_block_activations", "draws fresh dropout masks from np.random.default_rng()"),
            existing("recompute_block_activations", "replays the masks but drops without scaling"),
            existing("recompute_block_activations", "replays rng_state but leaves out the top layer's mask"),
            existing("recompute_block_activations", "draws the top layer's mask first"),
            existing("recompute_block_activations", "draws a mask for the output layer too"),
            existing("recompute_block_activations", "divides by (1 - p) instead of multiplying"),
        ],
    },
    "mlp_backward_checkpointed": {
        "schedule": [
            existing("mlp_backward_checkpointed", "keeps every rebuilt segment alive"),
            existing("mlp_backward_checkpointed", "plain forward from boundaries[0]"),
            existing("mlp_backward_checkpointed", "rebuilds every segment from X and reports the formula"),
            existing("mlp_backward_checkpointed", "layer 0 through linear_backward"),
        ],
        "mutation": [
            existing("mlp_backward_checkpointed", "writes the masked gradient into the activation buffer"),
            ("boundaries popped off ckpt_cache['boundaries']", _backward_pops_boundaries),
            ("rebuilt segments written back into ckpt_cache", _backward_keeps_rebuilt_in_cache),
        ],
        "failure modes": [
            ("dY_hat's batch not checked", _backward_no_batch_check),
            ("the number of boundaries not checked", _backward_no_boundary_count_check),
            existing("mlp_backward_checkpointed", "segment_size above L accepted"),
        ],
        "metric that proves it correct": [
            existing("mlp_backward_checkpointed", "counts every layer as recomputed"),
            existing("mlp_backward_checkpointed", "forgets the ReLU mask"),
            existing("mlp_backward_checkpointed", "recomputed_layers as np.int64"),
        ],
    },
    "estimate_checkpointing_memory_savings": {
        "mutation": [("the output width popped off layer_widths", _estimate_pops_output_width),
                     ("bytes counted from arrays of the activations' shapes", _estimate_with_arrays)],
        "failure modes": [
            existing("estimate_checkpointing_memory_savings", "batch validated before segment_size"),
            ("segment_size = 2.0 taken as 2", _estimate_int_of_segment_size),
            ("a width of 8.0 taken as 8", _estimate_int_of_widths),
        ],
        "metric that proves it correct": [
            existing("estimate_checkpointing_memory_savings", "counts the last layer of each segment"),
            existing("estimate_checkpointing_memory_savings", "extra compute relative to one forward"),
            existing("estimate_checkpointing_memory_savings", "picks the segment size with the fewest boundaries"),
            existing("estimate_checkpointing_memory_savings", "ties go to the largest s"),
            existing("estimate_checkpointing_memory_savings", "saved_bytes = abs(plain - ckpt)"),
        ],
    },
}
