"""Red team, Part 3 (activation checkpointing): wrong answers and correct alternatives written from the release
notebooks only."""

from __future__ import annotations

import math

import numpy as np

# Earlier lessons' pieces, imported by the lessons' setup cells (given to the student).
from trainsys.memtrain.checkpointing import (
    checkpointing_memory_timeline,
    deep_mlp_backward,
    deep_mlp_forward,
    recompute_block_activations,
)
from trainsys.memtrain.mlp import first_linear_backward, linear_backward, linear_forward, relu_backward, relu_forward


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_float_array(x) -> bool:
    return isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating)


def _check_layers(params, *, exact_keys=True, check_chain=True):
    if not isinstance(params, list) or not params:
        raise ValueError("params must be a non-empty list of layer dicts")
    for l, layer in enumerate(params):
        if not isinstance(layer, dict) or "W" not in layer or "b" not in layer or (exact_keys and set(layer) != {"W", "b"}):
            raise ValueError(f"params[{l}] must be a dict with exactly the keys 'W' and 'b'")
        W, b = layer["W"], layer["b"]
        if not _is_float_array(W) or not _is_float_array(b) or W.ndim != 2 or b.ndim != 1:
            raise ValueError(f"params[{l}]: W must be 2-D and b 1-D floating-point arrays")
        if b.shape[0] != W.shape[1]:
            raise ValueError(f"params[{l}]: b has shape {b.shape}, W has {W.shape}")
        if check_chain and l > 0 and params[l - 1]["W"].shape[1] != W.shape[0]:
            raise ValueError(f"params[{l}]['W'] has {W.shape[0]} rows, the previous layer outputs "
                             f"{params[l - 1]['W'].shape[1]}")


# --------------------------------------------------------------------------------------------------------------
# Lesson 15 · mlp_forward_checkpointed
# --------------------------------------------------------------------------------------------------------------
def _fc_check(params, X, segment_size, *, exact_keys=True, check_chain=True, check_X_dtype=True, int_check=None):
    _check_layers(params, exact_keys=exact_keys, check_chain=check_chain)
    if not isinstance(X, np.ndarray) or X.ndim != 2 or (check_X_dtype and not np.issubdtype(X.dtype, np.floating)):
        raise ValueError("X must be a 2-D floating-point array")
    if X.shape[1] != params[0]["W"].shape[0]:
        raise ValueError(f"X has {X.shape[1]} features but params[0]['W'] has {params[0]['W'].shape[0]} rows")
    if not (int_check or _is_int)(segment_size):
        raise TypeError(f"segment_size must be an int, got {segment_size!r}")
    if not 1 <= segment_size <= len(params):
        raise ValueError(f"segment_size must be in [1, {len(params)}], got {segment_size}")


def _fc_loop(params, X, segment_size):
    L = len(params)
    boundaries = [X]
    a = X
    for l, layer in enumerate(params):
        z = linear_forward(a, layer["W"], layer["b"])
        if l == L - 1:
            return z, {"segment_size": segment_size, "boundaries": boundaries}
        a = relu_forward(z)
        del z
        if (l + 1) % segment_size == 0:
            boundaries.append(a)


def _fc_keeps_all_then_drops(params, X, segment_size):
    _fc_check(params, X, segment_size)
    acts = [X]  # every layer input kept during the loop ...
    for layer in params[:-1]:
        acts.append(relu_forward(linear_forward(acts[-1], layer["W"], layer["b"])))
    Y_hat = linear_forward(acts[-1], params[-1]["W"], params[-1]["b"])
    boundaries = acts[::segment_size]  # ... and only the boundaries handed back
    del acts
    return Y_hat, {"segment_size": segment_size, "boundaries": boundaries}


def _fc_rejects_numpy_int(params, X, segment_size):
    _fc_check(params, X, segment_size, int_check=lambda v: type(v) is int)
    return _fc_loop(params, X, segment_size)


def _fc_accepts_integral_float(params, X, segment_size):
    ok = lambda v: not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating)) and int(v) == v
    _fc_check(params, X, segment_size, int_check=ok)
    return _fc_loop(params, X, int(segment_size))


def _fc_extra_layer_keys(params, X, segment_size):
    _fc_check(params, X, segment_size, exact_keys=False)
    return _fc_loop(params, X, segment_size)


def _fc_no_chain_check(params, X, segment_size):
    _fc_check(params, X, segment_size, check_chain=False)
    return _fc_loop(params, X, segment_size)


def _fc_accepts_int_x(params, X, segment_size):
    _fc_check(params, X, segment_size, check_X_dtype=False)
    return _fc_loop(params, X, segment_size)


def _fc_einsum(params, X, segment_size):
    _fc_check(params, X, segment_size)
    L = len(params)
    boundaries, a = [X], X
    for l, layer in enumerate(params):
        z = np.einsum("nd,dh->nh", a, layer["W"]) + layer["b"]  # another kernel: other rounding
        if l == L - 1:
            return z, {"segment_size": segment_size, "boundaries": boundaries}
        a = np.maximum(z, z.dtype.type(0))
        if (l + 1) % segment_size == 0:
            boundaries.append(a)


def _fc_alt_append_before_layer(params, X, segment_size):
    _fc_check(params, X, segment_size)
    boundaries = []
    a = X
    for l, layer in enumerate(params):
        if l % segment_size == 0:
            boundaries.append(a)  # the input of each segment's first layer; l = 0 appends X itself
        z = linear_forward(a, layer["W"], layer["b"])
        a = relu_forward(z) if l < len(params) - 1 else z
    return a, {"segment_size": int(segment_size), "boundaries": boundaries}


# --------------------------------------------------------------------------------------------------------------
# Lesson 16 · recompute_block_activations
# --------------------------------------------------------------------------------------------------------------
def _rc_check(params, x_in, start, stop, *, int_ok=None, start_max=None, check_x_dtype=True, width_first=False):
    _check_layers(params)
    L = len(params)
    if not isinstance(x_in, np.ndarray) or x_in.ndim != 2 or (check_x_dtype and not np.issubdtype(x_in.dtype, np.floating)):
        raise ValueError("x_in must be a 2-D floating-point array")
    is_int = int_ok or _is_int

    def width():
        if x_in.shape[1] != params[start]["W"].shape[0]:
            raise ValueError(f"x_in has width {x_in.shape[1]}, layer {start} expects {params[start]['W'].shape[0]}")

    if width_first:
        width()
    if not is_int(start):
        raise TypeError(f"start must be an int, got {start!r}")
    if not 0 <= start <= (L - 1 if start_max is None else start_max):
        raise ValueError(f"start must be in [0, {L - 1}], got {start}")
    if not is_int(stop):
        raise TypeError(f"stop must be an int, got {stop!r}")
    if not start + 1 <= stop <= L:
        raise ValueError(f"stop must be in [{start + 1}, {L}], got {stop}")
    if not width_first:
        width()


def _rc_loop(params, x_in, start, stop):
    a = [x_in]
    for l in range(start, stop - 1):
        a.append(relu_forward(linear_forward(a[-1], params[l]["W"], params[l]["b"])))
    return {"a": a}


def _rc_accepts_bool(params, x_in, start, stop):
    _rc_check(params, x_in, start, stop, int_ok=lambda v: isinstance(v, (int, np.integer)))
    return _rc_loop(params, x_in, int(start), int(stop))


def _rc_accepts_integral_float(params, x_in, start, stop):
    ok = lambda v: not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating)) and int(v) == v
    _rc_check(params, x_in, start, stop, int_ok=ok)
    return _rc_loop(params, x_in, int(start), int(stop))


def _rc_tuple(params, x_in, start, stop):
    _rc_check(params, x_in, start, stop)
    return {"a": tuple(_rc_loop(params, x_in, start, stop)["a"])}


def _rc_accepts_int_x(params, x_in, start, stop):
    _rc_check(params, x_in, start, stop, check_x_dtype=False)
    return _rc_loop(params, x_in, start, stop)


def _rc_start_may_equal_L(params, x_in, start, stop):
    L = len(params) if isinstance(params, list) else 0
    _rc_check(params, x_in, start, stop, start_max=L)  # start in [0, L]: start == L is blamed on stop
    return _rc_loop(params, x_in, start, stop)


def _rc_width_before_bounds(params, x_in, start, stop):
    _rc_check(params, x_in, start, stop, width_first=True)  # params[start] read before start is validated
    return _rc_loop(params, x_in, start, stop)


def _rc_copies_network_input(params, x_in, start, stop):
    _rc_check(params, x_in, start, stop)
    first = x_in.copy() if start == 0 else x_in  # "X belongs to the caller": copy the network input only
    return _rc_loop(params, first, start, stop)


def _rc_augmented(params, x_in, start, stop):
    _rc_check(params, x_in, start, stop)
    a = [x_in]
    for l in range(start, stop - 1):
        W, b = params[l]["W"], params[l]["b"]
        ones = np.ones((a[-1].shape[0], 1), a[-1].dtype)
        z = np.hstack([a[-1], ones]) @ np.vstack([W, b[None, :]])  # bias folded into the product
        a.append(np.maximum(z, z.dtype.type(0)))
    return {"a": a}


def _rc_alt_while(params, x_in, start, stop, dropout=None):
    _rc_check(params, x_in, start, stop)
    if dropout is not None:
        if not isinstance(dropout, dict) or set(dropout) != {"p", "rng_state"}:
            raise ValueError("dropout must be a dict with the keys 'p' and 'rng_state'")
        p = dropout["p"]
        if not 0 <= p < 1:
            raise ValueError(f"dropout p must be in [0, 1), got {p}")
        rng = np.random.default_rng()
        rng.bit_generator.state = dropout["rng_state"]  # the forward used default_rng: PCG64
    acts, keep = [x_in], []
    l = start
    while len(acts) < stop - start:
        z = linear_forward(acts[-1], params[l]["W"], params[l]["b"])
        h = relu_forward(z)
        if dropout is not None:
            keep.append(rng.random(h.shape) >= p)
            h = h * keep[-1]
            h *= h.dtype.type(1.0 / (1.0 - p))
        acts.append(h)
        l += 1
    if dropout is None:
        return {"a": acts}
    if stop < len(params):  # the top layer's mask: the backward pass enters the block through it
        keep.append(rng.random((x_in.shape[0], params[stop - 1]["W"].shape[1])) >= p)
    return {"a": acts, "keep": keep}


def _rc_replay(params, x_in, start, stop, dropout, *, top="last", divide=False):
    """Rebuild with dropout from a generator set to dropout['rng_state']; ``top`` says when (or whether) the
    top layer's mask is drawn: "last" (after the block's layers, as the forward), "first", "never", "always"
    (also at the network's output layer); ``divide``: a / (1 - p) instead of a * fl(1 / (1 - p))."""
    _rc_check(params, x_in, start, stop)
    p, L, n = dropout["p"], len(params), x_in.shape[0]
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = dropout["rng_state"]
    draw_top = top == "always" or (top in ("last", "first") and stop < L)
    top_mask = lambda: rng.random((n, params[stop - 1]["W"].shape[1])) >= p
    first = top_mask() if draw_top and top == "first" else None
    a, keep = [x_in], []
    for l in range(start, stop - 1):
        h = relu_forward(linear_forward(a[-1], params[l]["W"], params[l]["b"]))
        m = rng.random(h.shape) >= p
        keep.append(m)
        a.append(h * m / h.dtype.type(1 - p) if divide else h * m * h.dtype.type(1 / (1 - p)))
    if draw_top:
        keep.append(first if first is not None else top_mask())
    return {"a": a, "keep": keep}


def _rc_dropout_variant(**how):
    def answer(params, x_in, start, stop, dropout=None):
        if dropout is None:
            _rc_check(params, x_in, start, stop)
            return _rc_loop(params, x_in, start, stop)
        return _rc_replay(params, x_in, start, stop, dropout, **how)

    return answer


# --------------------------------------------------------------------------------------------------------------
# Lesson 17 · mlp_backward_checkpointed
# --------------------------------------------------------------------------------------------------------------
def _bc_check(params, ckpt_cache, dY_hat, *, check_s_upper=True):
    _check_layers(params)
    L = len(params)
    if not isinstance(ckpt_cache, dict) or "segment_size" not in ckpt_cache or "boundaries" not in ckpt_cache:
        raise ValueError("ckpt_cache must be a dict with 'segment_size' and 'boundaries'")
    s = ckpt_cache["segment_size"]
    if not _is_int(s):
        raise TypeError(f"segment_size must be an int, got {s!r}")
    if s < 1 or (check_s_upper and s > L):
        raise ValueError(f"segment_size must be in [1, {L}], got {s}")
    boundaries = ckpt_cache["boundaries"]
    if not isinstance(boundaries, (list, tuple)) or len(boundaries) != -(-L // s):
        raise ValueError(f"expected {-(-L // s)} boundaries for L={L}, s={s}")
    if not _is_float_array(dY_hat) or dY_hat.ndim != 2:
        raise ValueError("dY_hat must be a 2-D floating-point array")
    n = boundaries[0].shape[0]
    if dY_hat.shape != (n, params[-1]["W"].shape[1]):
        raise ValueError(f"dY_hat has shape {dY_hat.shape}, expected ({n}, {params[-1]['W'].shape[1]})")
    return L, s, boundaries


def _bc_segment_backward(params, acts, first, last, g, grads):
    """Back-propagate g = dL/dz_last through layers last..first whose inputs are acts[0..]."""
    for l in range(last, first - 1, -1):
        a_l = acts[l - first]
        if l == 0:
            dW, db = first_linear_backward(g, a_l)
        else:
            dA, dW, db = linear_backward(g, a_l, params[l]["W"])
            g = relu_backward(dA, a_l)
        grads[l] = {"W": dW, "b": db}
    return g


def _bc_from_x_every_time(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat)
    X = boundaries[0]
    grads, g = [None] * L, dY_hat
    n_seg = len(boundaries)
    for k in range(n_seg - 1, -1, -1):
        first, last = k * s, min((k + 1) * s, L) - 1
        acts = recompute_block_activations(params, X, 0, last + 1)["a"][first:]  # from the input each time
        g = _bc_segment_backward(params, acts, first, last, g, grads)
        del acts
    return grads, L - n_seg  # the formula, not the work done


def _bc_plain_pass(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat)
    _, cache = deep_mlp_forward(params, boundaries[0])  # every activation at once
    grads = deep_mlp_backward(params, cache, dY_hat)
    return grads, L - len(boundaries)


def _bc_writes_into_activations(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat)
    grads, g, count = [None] * L, dY_hat, 0
    for k in range(len(boundaries) - 1, -1, -1):
        first, last = k * s, min((k + 1) * s, L) - 1
        acts = recompute_block_activations(params, boundaries[k], first, last + 1)["a"]
        count += len(acts) - 1
        for l in range(last, first - 1, -1):
            a_l = acts[l - first]
            if l == 0:
                dW, db = first_linear_backward(g, a_l)
            else:
                dW, db = a_l.T @ g, g.sum(axis=0)
                mask = a_l > 0
                g = np.multiply(g @ params[l]["W"].T, mask, out=a_l)  # a_l is done with: reuse its buffer
            grads[l] = {"W": dW, "b": db}
        del acts
    return grads, count


def _bc_numpy_int_count(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat)
    grads, g, lengths = [None] * L, dY_hat, []
    for k in range(len(boundaries) - 1, -1, -1):
        first, last = k * s, min((k + 1) * s, L) - 1
        acts = recompute_block_activations(params, boundaries[k], first, last + 1)["a"]
        lengths.append(len(acts) - 1)
        g = _bc_segment_backward(params, acts, first, last, g, grads)
        del acts
    return grads, np.sum(lengths, dtype=np.int64)


def _bc_no_upper_s_check(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat, check_s_upper=False)
    grads, g, count = [None] * L, dY_hat, 0
    for k in range(len(boundaries) - 1, -1, -1):
        first, last = k * s, min((k + 1) * s, L) - 1
        acts = recompute_block_activations(params, boundaries[k], first, last + 1)["a"]
        count += len(acts) - 1
        g = _bc_segment_backward(params, acts, first, last, g, grads)
        del acts
    return grads, count


def _bc_keeps_rebuilt_segments(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat)
    grads, g, count = [None] * L, dY_hat, 0
    rebuilt = {}  # kept "in case they are needed again": every segment stays alive
    for k in range(len(boundaries) - 1, -1, -1):
        first, last = k * s, min((k + 1) * s, L) - 1
        rebuilt[k] = recompute_block_activations(params, boundaries[k], first, last + 1)["a"]
        count += len(rebuilt[k]) - 1
        g = _bc_segment_backward(params, rebuilt[k], first, last, g, grads)
    return grads, count


def _bc_layer0_full_linear_backward(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat)
    grads, g, count = [None] * L, dY_hat, 0
    for k in range(len(boundaries) - 1, -1, -1):
        first, last = k * s, min((k + 1) * s, L) - 1
        acts = recompute_block_activations(params, boundaries[k], first, last + 1)["a"]
        count += len(acts) - 1
        for l in range(last, first - 1, -1):
            dA, dW, db = linear_backward(g, acts[l - first], params[l]["W"])  # dX of the data computed too
            if l > 0:
                g = relu_backward(dA, acts[l - first])
            grads[l] = {"W": dW, "b": db}
        del acts
    return grads, count


def _bc_alt_inline(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat)
    grads = [None] * L
    g = dY_hat
    recomputed = 0
    starts = list(range(0, L, s))
    for k in reversed(range(len(starts))):
        first = starts[k]
        stop = min(first + s, L)
        acts = [boundaries[k]]
        for l in range(first, stop - 1):  # rebuild: the same two operations as the forward pass
            z = acts[-1] @ params[l]["W"] + params[l]["b"]
            acts.append(np.maximum(z, z.dtype.type(0)))
            recomputed += 1
        for l in range(stop - 1, first - 1, -1):
            a_l = acts[l - first]
            grads[l] = {"W": a_l.T @ g, "b": g.sum(axis=0)}
            if l > 0:
                g = (g @ params[l]["W"].T) * (a_l > 0)
        acts = None
    return grads, int(recomputed)


# --------------------------------------------------------------------------------------------------------------
# Lesson 18 · estimate_checkpointing_memory_savings
# --------------------------------------------------------------------------------------------------------------
def _est_check(layer_widths, batch, segment_size, bytes_per_elem, *, int_ok=None, check_bpe=True,
               batch_first=False):
    is_int = int_ok or _is_int
    if not isinstance(layer_widths, (list, tuple)) or len(layer_widths) < 2:
        raise ValueError(f"layer_widths must be a list of at least two widths, got {layer_widths!r}")
    for w in layer_widths:
        if not is_int(w):
            raise TypeError(f"layer_widths must hold integers, got {w!r}")
        if w < 1:
            raise ValueError(f"layer_widths must be >= 1, got {w!r}")
    L = len(layer_widths) - 1

    def check_batch():
        if not is_int(batch):
            raise TypeError(f"batch must be an int, got {batch!r}")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")

    if batch_first:
        check_batch()
    if not is_int(segment_size):
        raise TypeError(f"segment_size must be an int, got {segment_size!r}")
    if not 1 <= segment_size <= L:
        raise ValueError(f"segment_size must be in [1, {L}], got {segment_size}")
    if not batch_first:
        check_batch()
    if check_bpe:
        if not is_int(bytes_per_elem):
            raise TypeError(f"bytes_per_elem must be an int, got {bytes_per_elem!r}")
        if bytes_per_elem < 1:
            raise ValueError(f"bytes_per_elem must be >= 1, got {bytes_per_elem}")
    return L


def _est_peak(layer_widths, batch, s, bpe):
    return max(b for _, b in checkpointing_memory_timeline(list(layer_widths), batch, s, bpe))


def _est_recomputed(L, s):
    return [l for k in range(0, L, s) for l in range(k, min(k + s, L) - 1)]


def _est_result(layer_widths, batch, segment_size, bpe, *, optimal, recomputed=None, flops=None, saved=None):
    w = list(layer_widths)
    L = len(w) - 1
    plain = _est_peak(w, batch, None, bpe)
    ckpt = _est_peak(w, batch, segment_size, bpe)
    layers = _est_recomputed(L, segment_size) if recomputed is None else recomputed
    extra = sum(2 * batch * w[l] * w[l + 1] for l in layers) if flops is None else flops
    step = 3 * sum(2 * batch * w[l] * w[l + 1] for l in range(L))
    return {"plain_peak_bytes": plain, "checkpointed_peak_bytes": ckpt,
            "saved_bytes": plain - ckpt if saved is None else saved(plain, ckpt),
            "recomputed_layers": len(layers), "extra_forward_flops": extra,
            "extra_compute_fraction": extra / step, "optimal_segment_size": optimal}


def _est_opt(layer_widths, batch, bpe, *, ties_to_largest=False):
    L = len(layer_widths) - 1
    best_s, best_peak = None, None
    for s in range(1, L + 1):
        p = _est_peak(layer_widths, batch, s, bpe)
        if best_peak is None or p < best_peak or (ties_to_largest and p == best_peak):
            best_s, best_peak = s, p
    return best_s


def _est_ties_largest(layer_widths, batch, segment_size, bytes_per_elem=4):
    _est_check(layer_widths, batch, segment_size, bytes_per_elem)
    opt = _est_opt(layer_widths, batch, bytes_per_elem, ties_to_largest=True)
    return _est_result(layer_widths, batch, segment_size, bytes_per_elem, optimal=opt)


def _est_equal_width_flops(layer_widths, batch, segment_size, bytes_per_elem=4):
    L = _est_check(layer_widths, batch, segment_size, bytes_per_elem)
    R = L - math.ceil(L / segment_size)
    w = layer_widths[1]  # "all hidden widths are w"
    opt = _est_opt(layer_widths, batch, bytes_per_elem)
    return _est_result(layer_widths, batch, segment_size, bytes_per_elem, optimal=opt, flops=R * 2 * batch * w * w)


def _est_wrong_layers_flops(layer_widths, batch, segment_size, bytes_per_elem=4):
    L = _est_check(layer_widths, batch, segment_size, bytes_per_elem)
    layers = [l for k in range(0, L, segment_size) for l in range(k + 1, min(k + segment_size, L))]
    opt = _est_opt(layer_widths, batch, bytes_per_elem)
    return _est_result(layer_widths, batch, segment_size, bytes_per_elem, optimal=opt, recomputed=layers)


def _est_accepts_bool(layer_widths, batch, segment_size, bytes_per_elem=4):
    _est_check(layer_widths, batch, segment_size, bytes_per_elem, int_ok=lambda v: isinstance(v, (int, np.integer)))
    opt = _est_opt(layer_widths, batch, bytes_per_elem)
    return _est_result(layer_widths, batch, segment_size, bytes_per_elem, optimal=opt)


def _est_no_bpe_check(layer_widths, batch, segment_size, bytes_per_elem=4):
    _est_check(layer_widths, batch, segment_size, bytes_per_elem, check_bpe=False)
    opt = _est_opt(layer_widths, batch, bytes_per_elem)
    return _est_result(layer_widths, batch, segment_size, bytes_per_elem, optimal=opt)


def _est_abs_saved(layer_widths, batch, segment_size, bytes_per_elem=4):
    _est_check(layer_widths, batch, segment_size, bytes_per_elem)
    opt = _est_opt(layer_widths, batch, bytes_per_elem)
    return _est_result(layer_widths, batch, segment_size, bytes_per_elem, optimal=opt,
                       saved=lambda plain, ckpt: abs(plain - ckpt))


def _est_batch_first(layer_widths, batch, segment_size, bytes_per_elem=4):
    _est_check(layer_widths, batch, segment_size, bytes_per_elem, batch_first=True)
    opt = _est_opt(layer_widths, batch, bytes_per_elem)
    return _est_result(layer_widths, batch, segment_size, bytes_per_elem, optimal=opt)


def _est_sqrt_rule(layer_widths, batch, segment_size, bytes_per_elem=4):
    L = _est_check(layer_widths, batch, segment_size, bytes_per_elem)
    opt = min(L, max(1, round(math.sqrt(L))))  # the derivation's s* = sqrt(L), no search
    return _est_result(layer_widths, batch, segment_size, bytes_per_elem, optimal=opt)


def _est_alt_table(layer_widths, batch, segment_size, bytes_per_elem=4):
    L = _est_check(layer_widths, batch, segment_size, bytes_per_elem)
    widths = [int(w) for w in layer_widths]
    peaks = {s: max(b for _, b in checkpointing_memory_timeline(widths, batch, s, bytes_per_elem))
             for s in [None, *range(1, L + 1)]}
    layer_flops = [2 * batch * widths[l] * widths[l + 1] for l in range(L)]
    recomputed = [l for l in range(L) if (l % segment_size) != segment_size - 1 and l != L - 1]
    extra = sum(layer_flops[l] for l in recomputed)
    optimal = min(range(1, L + 1), key=lambda s: (peaks[s], s))
    return {"plain_peak_bytes": peaks[None], "checkpointed_peak_bytes": peaks[segment_size],
            "saved_bytes": peaks[None] - peaks[segment_size], "recomputed_layers": len(recomputed),
            "extra_forward_flops": extra, "extra_compute_fraction": extra / (3 * sum(layer_flops)),
            "optimal_segment_size": optimal}


MUTANTS = {
    "mlp_forward_checkpointed": [
        ("keeps every activation during the loop, hands back only a[::s] (contract: the pass peaks at the "
         "boundaries plus about three activations)", _fc_keeps_all_then_drops),
        ("accepts segment_size=2.0 (contract: non-integer -> TypeError)", _fc_accepts_integral_float),
        ("layer dicts with extra keys accepted (contract: exactly the keys 'W' and 'b')", _fc_extra_layer_keys),
        ("widths that do not chain are not validated (contract: widths must chain)", _fc_no_chain_check),
        ("np.einsum instead of linear_forward (contract: bit-identical to the plain pass)", _fc_einsum),
    ],
    "recompute_block_activations": [
        ("accepts start=1.0 / stop=3.0 (contract: non-integer bounds raise TypeError)", _rc_accepts_integral_float),
        ("result['a'] is a tuple (contract: a list)", _rc_tuple),
        ("accepts an integer x_in (contract: x_in a 2-D floating-point array)", _rc_accepts_int_x),
        ("start == L reported as a bad stop (contract: start outside [0, L-1] -> error naming start)",
         _rc_start_may_equal_L),
        ("checks x_in's width before the bounds: params[start] read with an unchecked start (contract: order)",
         _rc_width_before_bounds),
        ("copies x_in when start == 0 (contract: result['a'][0] is x_in)", _rc_copies_network_input),
        ("bias folded into an augmented matmul (contract: the very functions of the forward, bit for bit)",
         _rc_augmented),
        ("replays rng_state but leaves out the top layer's mask (contract: one mask per hidden layer of the "
         "block, the top layer's included)", _rc_dropout_variant(top="never")),
        ("draws the top layer's mask first, before the block's own (contract: the forward's draws, in layer "
         "order)", _rc_dropout_variant(top="first")),
        ("draws a mask for the output layer too when stop == L (contract: dropout follows hidden layers only)",
         _rc_dropout_variant(top="always")),
        ("divides by (1 - p) instead of multiplying by 1/(1 - p) (contract: the forward's rounding, bit for bit)",
         _rc_dropout_variant(divide=True)),
    ],
    "mlp_backward_checkpointed": [
        ("rebuilds every segment from X and reports the formula L - ceil(L/s) (contract: the layers re-run)",
         _bc_from_x_every_time),
        ("plain forward from boundaries[0] + plain backward: no memory saved (contract: rebuild, back-prop, drop)",
         _bc_plain_pass),
        ("writes the masked gradient into the activation buffer, i.e. into the caller's boundaries "
         "(contract: boundaries are read only)", _bc_writes_into_activations),
        ("recomputed_layers as np.int64 (contract: an int)", _bc_numpy_int_count),
        ("segment_size above L accepted when the count matches (contract: segment_size in [1, L])",
         _bc_no_upper_s_check),
        ("keeps every rebuilt segment alive until the end (contract: drop the rebuilt list)",
         _bc_keeps_rebuilt_segments),
        ("layer 0 through linear_backward: computes the data gradient dX (contract: first_linear_backward)",
         _bc_layer0_full_linear_backward),
    ],
    "estimate_checkpointing_memory_savings": [
        ("ties go to the largest s (contract: the smallest, on ties)", _est_ties_largest),
        ("extra FLOPs assume equal widths, R * 2 n w^2 (contract: sum over the recomputed layers' widths)",
         _est_equal_width_flops),
        ("FLOPs of the wrong layers: skips each segment's first layer, not its last (contract: R_s)",
         _est_wrong_layers_flops),
        ("saved_bytes = abs(plain - ckpt) (contract: negative when checkpointing costs memory)", _est_abs_saved),
        ("batch validated before segment_size (contract: validate in this order)", _est_batch_first),
        ("optimal_segment_size = round(sqrt(L)) without a search (contract: search s = 1..L)", _est_sqrt_rule),
    ],
}

# Three entries moved here from MUTANTS: the functions they call refuse the input anyway, with the error
# and the name the contract asks for (linear_forward: TypeError naming X; checkpointing_memory_timeline:
# TypeError/ValueError naming batch, segment_size or bytes_per_elem, in the contract's order).
ALTERNATIVES = {
    "mlp_forward_checkpointed": [
        ("boundary appended before running each segment's first layer", _fc_alt_append_before_layer),
        ("X's dtype left to linear_forward, which raises TypeError naming X", _fc_accepts_int_x),
    ],
    "recompute_block_activations": [("while loop until the list has stop - start arrays", _rc_alt_while)],
    "mlp_backward_checkpointed": [("inline per-layer arithmetic (same operations) with its own rebuild",
                                   _bc_alt_inline)],
    "estimate_checkpointing_memory_savings": [
        ("a dict of every peak, min over (peak, s), recomputed set by index test", _est_alt_table),
        ("bools left to checkpointing_memory_timeline, which refuses them (TypeError naming the argument)",
         _est_accepts_bool),
        ("bytes_per_elem left to checkpointing_memory_timeline, which validates it (naming bytes_per_elem)",
         _est_no_bpe_check),
    ],
}

DISPUTED = {
    "mlp_forward_checkpointed": [
        ("rejects np.int64 segment_size (contract: 'an integer'; ambiguous for NumPy ints)",
         "Lesson 15's table says `int` and its text 'an integer (not a bool)': `type(s) is int` is a fair reading"),
    ],
    "recompute_block_activations": [
        ("accepts start=True (contract: non-integer bounds raise TypeError)",
         "Lesson 16 refuses only non-integer bounds and, unlike Lesson 15, does not exclude bool (an int subclass)"),
    ],
}


# --------------------------------------------------------------------------------------------------------------
# Second correct alternatives (issue 27), written blind from the release notebooks: the lessons' own helpers.
# --------------------------------------------------------------------------------------------------------------
from trainsys.memtrain.dropout_checkpointing import dropout_forward  # noqa: E402 - the lesson's setup imports it


def _rc_alt_dropout_forward(params, x_in, start, stop, dropout=None):
    _rc_check(params, x_in, start, stop)
    rng = None
    if dropout is not None:
        if not isinstance(dropout, dict) or set(dropout) != {"p", "rng_state"}:
            raise ValueError("dropout must be {'p': p, 'rng_state': state}")
        p = dropout["p"]
        if not (isinstance(p, (int, float, np.floating)) and 0 <= p < 1):
            raise ValueError(f"dropout p must be in [0, 1), got {p!r}")
        rng = np.random.default_rng()
        rng.bit_generator.state = dropout["rng_state"]
    a, keep = [x_in], []
    for l in range(start, stop - 1):
        h = relu_forward(linear_forward(a[-1], params[l]["W"], params[l]["b"]))
        if rng is not None:
            h, m = dropout_forward(h, p, rng)  # (h * m * fl(1/(1-p)), m)
            keep.append(m)
        a.append(h)
    if rng is None:
        return {"a": a}
    if stop < len(params):
        keep.append(rng.random((x_in.shape[0], params[stop - 1]["W"].shape[1])) >= p)
    return {"a": a, "keep": keep}


def _bc_alt_helpers(params, ckpt_cache, dY_hat):
    L, s, boundaries = _bc_check(params, ckpt_cache, dY_hat)
    grads, g, recomputed = [None] * L, dY_hat, 0
    for k in range(len(boundaries) - 1, -1, -1):
        first, stop = k * s, min((k + 1) * s, L)
        acts = recompute_block_activations(params, boundaries[k], first, stop)["a"]
        recomputed += len(acts) - 1
        for l in range(stop - 1, first - 1, -1):
            a_l = acts[l - first]
            if l == 0:
                dW, db = first_linear_backward(g, a_l)
            else:
                dA, dW, db = linear_backward(g, a_l, params[l]["W"])
                g = relu_backward(dA, a_l)  # a_l > 0 exactly where its pre-activation is
            grads[l] = {"W": dW, "b": db}
        del acts
    return grads, recomputed


ALTERNATIVES.setdefault("recompute_block_activations", []).append(
    ("for loop with the lesson's dropout_forward helper for the replayed masks", _rc_alt_dropout_forward))
ALTERNATIVES.setdefault("mlp_backward_checkpointed", []).append(
    ("the lessons' helpers: recompute_block_activations, linear_backward, relu_backward on a", _bc_alt_helpers))
