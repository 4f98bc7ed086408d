r"""Module 1, Part 2 — gradient accumulation: a large batch's step in a small batch's memory.

The activations of a step grow with the batch (Lesson 5: ``4 n (d_in + 2 d_hidden)`` bytes), the
parameters and gradients do not. Splitting the batch of ``n`` examples into ``M`` micro-batches and
running forward and backward on one at a time keeps only one micro-batch of activations alive; the
gradients are summed into one buffer and scaled once at the end:

.. math::

    \nabla L = \frac{1}{n}\sum_{i=1}^{M} \sum_{e \in B_i} \nabla \ell_e
             = \frac{1}{n}\sum_{i=1}^{M} n_i \, \nabla L_{B_i},

where :math:`L_{B_i}` is micro-batch ``i``'s mean loss over its :math:`n_i` examples. When the
:math:`n_i` differ, this is *not* the mean of the per-micro-batch means
:math:`\frac1M\sum_i \nabla L_{B_i}` — the bug fixed in Hugging Face transformers in October 2024.
"""

from __future__ import annotations

import numpy as np

from trainsys._validation import (
    require_axis_match,
    require_float_array,
    require_float_tree,
    require_int,
    require_real,
    require_same_tree,
)
from trainsys.memtrain.mlp import (
    Params,
    mlp_backward,
    mlp_forward,
    mse_loss_and_grad,
    sgd_step,
    validate_mlp_params,
)


# --- Lesson 11 -------------------------------------------------------------------------------------
def split_into_micro_batches(
    X: np.ndarray, Y: np.ndarray, num_micro_batches: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Split ``X: (n, d_in)`` and ``Y: (n, d_out)`` along the batch axis into ``M`` micro-batches.

    Consecutive, in order, covering every example once. When ``M`` does not divide ``n`` the first
    ``n mod M`` micro-batches get one extra example (``np.array_split``'s rule), so sizes differ by at
    most one. The pieces are *views* of ``X`` and ``Y``: splitting allocates no array memory.
    Raises ``ValueError`` when ``M < 1`` or ``M > n`` (an empty micro-batch has no mean loss).
    """
    X = require_float_array("X", X, ndim=2)
    Y = require_float_array("Y", Y, ndim=2)
    require_axis_match("X", X, 0, "Y", Y, 0, "batch")
    return [(X[a:b], Y[a:b]) for a, b in micro_batch_bounds(X.shape[0], num_micro_batches)]  # views


def micro_batch_bounds(n: int, num_micro_batches: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the ``M`` micro-batches of ``n`` examples (the first ``n mod M`` get one more)."""
    n = require_int("n", n, minimum=1)
    M = require_int("num_micro_batches", num_micro_batches, minimum=1, maximum=n)
    base, extra = divmod(n, M)
    bounds, start = [], 0
    for i in range(M):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


# --- Lesson 12 -------------------------------------------------------------------------------------
def accumulate_gradients(acc: Params | None, grads: Params) -> Params:
    """Add ``grads`` into the running sum ``acc`` and return it.

    ``acc=None`` starts the sum: a new dict of copies of ``grads`` (never the same arrays, so a later
    in-place add cannot corrupt the caller's gradients). Otherwise ``acc``'s arrays are updated
    **in place** (``acc[k] += grads[k]``: one gradient buffer for the whole step, no new allocation)
    and ``acc`` itself is returned. Keys and shapes must match (``ValueError`` naming the key);
    ``grads`` is never modified.
    """
    if acc is None:
        require_float_tree("grads", grads)
        return {key: np.array(value, copy=True) for key, value in grads.items()}
    require_same_tree("acc", acc, "grads", grads)
    for key in acc:
        acc[key] += grads[key]
    return acc


# --- Lesson 13 -------------------------------------------------------------------------------------
def scale_accumulated_gradients(acc: Params, scale: float) -> Params:
    """Multiply every accumulated gradient by ``scale`` **in place** and return ``acc``.

    With sums of per-example gradients accumulated over micro-batches of sizes ``n_i``, the full-batch
    mean gradient is ``scale = 1 / sum(n_i)`` — the total number of examples, not the number of
    micro-batches. ``scale`` must be a finite number > 0.
    """
    require_float_tree("acc", acc)
    scale = require_real("scale", scale, strictly_positive=True)
    for key in acc:
        acc[key] *= acc[key].dtype.type(scale)
    return acc


# --- Lesson 14 -------------------------------------------------------------------------------------
def grad_accumulation_step(
    params: Params, X: np.ndarray, Y: np.ndarray, num_micro_batches: int, lr: float
) -> tuple[Params, float]:
    """One SGD step on the batch ``(X, Y)``, computed in ``num_micro_batches`` micro-batches.

    For each micro-batch ``B_i`` of ``n_i`` examples: forward, the mean loss's gradient times ``n_i``
    (the gradient of the micro-batch's *summed* loss), backward, accumulate — and drop the cache before
    the next micro-batch, so one micro-batch of activations is alive at a time. Then scale the sum by
    ``1/n`` and take ``θ − lr·g``. Returns ``(new_params, loss)`` with ``loss`` the full batch's mean
    loss before the step; ``params`` is not mutated. Equals the full-batch step up to float rounding
    (the order of the sums differs).
    """
    params = validate_mlp_params(params)
    split_into_micro_batches(X, Y, num_micro_batches)  # validates X, Y and num_micro_batches
    lr = require_real("lr", lr, strictly_positive=True)
    n = X.shape[0]
    acc: Params | None = None
    loss_sum = 0.0
    for start, stop in micro_batch_bounds(n, num_micro_batches):  # one view at a time
        X_i, Y_i = X[start:stop], Y[start:stop]
        n_i = stop - start
        Y_hat, cache = mlp_forward(params, X_i)  # (n_i, d_out), cache of n_i rows
        loss_i, dY_hat = mse_loss_and_grad(Y_hat, Y_i)
        del Y_hat  # the loss has its gradient: the prediction is no longer needed
        dY_hat *= dY_hat.dtype.type(n_i)  # gradient of the summed loss over B_i
        acc = accumulate_gradients(acc, mlp_backward(params, cache, dY_hat))
        loss_sum += loss_i * n_i
        del cache, dY_hat  # this micro-batch's activations are freed here
    grads = scale_accumulated_gradients(acc, 1.0 / n)
    return sgd_step(params, grads, lr), loss_sum / n


def accumulation_memory_timeline(
    n: int, d_in: int, d_hidden: int, d_out: int, num_micro_batches: int, bytes_per_elem: int = 4
) -> list[tuple[str, int]]:
    r"""Bytes alive at the busiest moments of :func:`grad_accumulation_step`, allocated by the step itself.

    With ``b`` bytes per element, ``h = d_hidden``, ``o = d_out``, ``m`` the rows of a micro-batch,
    ``P`` the bytes of one parameter-shaped tree and ``acc`` = ``P`` once the accumulator exists:

    - *ReLU backward* of a micro-batch: cache ``Z1, A1`` (``2bmh``), ``dY`` (``bmo``), ``dA1`` and
      ``dZ1`` (``2bmh``), the boolean mask (``mh`` bytes) and the buffer NumPy casts it through
      (``np.getbufsize()`` elements, 8192 by default), ``dW2, db2`` (``b(ho + o)``), plus ``acc``;
    - *first-layer weight gradient*: the mask is gone, ``dW1`` (``b d_in h``) is being written;
    - *accumulate*: the cache and ``dY`` are still alive beside a full gradient tree and ``acc``;
    - *update*: ``acc``, the new parameters, and one parameter-sized temporary.

    The first micro-batch (the largest, ``m = ceil(n/M)``, no accumulator yet) and the second (with the
    accumulator) are listed. The step's peak is the largest entry: :func:`estimate_accumulation_peak_bytes`.
    Arrays that exist before the call (``params``, ``X``, ``Y``) are not counted.
    """
    n = require_int("n", n, minimum=1)
    M = require_int("num_micro_batches", num_micro_batches, minimum=1, maximum=n)
    d_in = require_int("d_in", d_in, minimum=1)
    h = require_int("d_hidden", d_hidden, minimum=1)
    o = require_int("d_out", d_out, minimum=1)
    b = require_int("bytes_per_elem", bytes_per_elem, minimum=1)
    P = b * (d_in * h + h + h * o + o)
    largest_tensor = b * max(d_in * h, h * o)
    sizes = [n // M + (1 if i < n % M else 0) for i in range(min(M, 2))]
    timeline = []
    for i, m in enumerate(sizes):
        acc = P if i > 0 else 0
        timeline += [
            (f"micro-batch {i + 1}: ReLU backward",
             b * m * (4 * h + o) + m * h + b * min(np.getbufsize(), m * h) + b * (h * o + o) + acc),
            (f"micro-batch {i + 1}: first-layer dW", b * m * (4 * h + o) + b * (h * o + o + d_in * h) + acc),
            (f"micro-batch {i + 1}: accumulate", b * m * (2 * h + o) + 2 * P),
        ]
    timeline.append(("update", 2 * P + largest_tensor))
    return timeline


def estimate_accumulation_peak_bytes(
    n: int, d_in: int, d_hidden: int, d_out: int, num_micro_batches: int, bytes_per_elem: int = 4
) -> int:
    """Peak bytes allocated by :func:`grad_accumulation_step`: the maximum of its memory timeline."""
    return max(b for _, b in accumulation_memory_timeline(n, d_in, d_hidden, d_out, num_micro_batches,
                                                          bytes_per_elem))
