r"""Module 1, Part 5 — data parallelism: N workers, one model, the union batch's gradient.

Each of ``N`` workers holds a full copy of the parameters and a disjoint shard :math:`B_k` of the
batch (:math:`n_k` examples, :math:`\sum_k n_k = n`). The union batch's mean loss is
:math:`L = \frac1n \sum_e \ell_e`, with :math:`\ell_e = \frac{1}{d_{out}}\sum_j (\hat y_{ej} - y_{ej})^2`
the per-example loss, so its gradient splits over workers:

.. math::

    \nabla L = \frac{1}{n}\sum_{k=1}^{N} S_k,\qquad S_k = \sum_{e \in B_k} \nabla \ell_e
             = n_k\,\nabla L_{B_k}
             = \frac{N}{n}\cdot\underbrace{\frac{1}{N}\sum_{k} S_k}_{\text{all-reduce mean}} .

Each worker computes its shard's *summed* gradient :math:`S_k` (Lesson 26); one all-reduce mean
(Lessons 27–28) gives every worker :math:`\frac1N\sum_k S_k`, and the factor :math:`N/n` — known to
every worker, since the sharding rule is deterministic — turns it into :math:`\nabla L`. Averaging the
shards' *mean* gradients instead, :math:`\frac1N\sum_k \nabla L_{B_k}`, is correct only when every
:math:`n_k = n/N`. The lessons simulate the workers in one process so that every byte can be counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import (
    describe,
    require_axis_match,
    require_float_array,
    require_float_tree,
    require_int,
    require_real,
)
from trainsys.memtrain.accumulation import micro_batch_bounds
from trainsys.memtrain.mlp import (
    PARAM_KEYS,
    Params,
    mlp_backward,
    mlp_forward,
    mse_loss_and_grad,
    sgd_step,
    validate_mlp_params,
)
from trainsys.memtrain.ring_allreduce import bytes_sent_per_worker, ring_all_reduce_mean, validate_worker_arrays

Shard = tuple[np.ndarray, np.ndarray]


# --- Lesson 25 -------------------------------------------------------------------------------------
def shard_dataset_across_workers(X: np.ndarray, Y: np.ndarray, num_workers: int) -> list[Shard]:
    """Split ``X: (n, d_in)`` and ``Y: (n, d_out)`` into ``N = num_workers`` contiguous shards.

    Shard ``k`` is rows ``[start_k, stop_k)`` of both arrays, in order; the shards are disjoint and
    cover every example once. Remainder rule (the one of
    :func:`~trainsys.memtrain.accumulation.micro_batch_bounds`, i.e. ``np.array_split``'s): with
    ``n = qN + r``, the first ``r`` workers get ``q + 1`` examples and the others ``q``, so shard sizes
    differ by at most one and no example is dropped. The shards are *views* of ``X`` and ``Y`` (no copy).
    Raises ``ValueError`` when ``num_workers < 1`` or ``num_workers > n`` (a worker without examples
    has no loss), ``TypeError`` when it is not an integer.
    """
    X = require_float_array("X", X, ndim=2)
    Y = require_float_array("Y", Y, ndim=2)
    require_axis_match("X", X, 0, "Y", Y, 0, "batch")
    N = require_int("num_workers", num_workers, minimum=1, maximum=X.shape[0])
    return [(X[a:b], Y[a:b]) for a, b in micro_batch_bounds(X.shape[0], N)]  # views, (n_k, d_in), (n_k, d_out)


def _validate_shard(shard: object, params: Params, name: str = "shard") -> Shard:
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise TypeError(f"{name} must be a pair (X_k, Y_k) of arrays, got {describe(shard)}")
    X_k = require_float_array(f"{name}[0] (X_k)", shard[0], ndim=2)
    Y_k = require_float_array(f"{name}[1] (Y_k)", shard[1], ndim=2)
    require_axis_match(f"{name}[0] (X_k)", X_k, 0, f"{name}[1] (Y_k)", Y_k, 0, "batch")
    if X_k.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one example, got X_k of shape {X_k.shape}")
    require_axis_match(f"{name}[0] (X_k)", X_k, 1, "params['W1']", params["W1"], 0, "input-feature")
    require_axis_match(f"{name}[1] (Y_k)", Y_k, 1, "params['W2']", params["W2"], 1, "output")
    return X_k, Y_k


# --- Lesson 26 -------------------------------------------------------------------------------------
def compute_local_gradients(params: Params, shard: Shard) -> tuple[Params, float, int]:
    r"""One worker's contribution: the gradient of its shard's **summed** loss, that loss, and its size.

    With ``shard = (X_k: (n_k, d_in), Y_k: (n_k, d_out))`` and :math:`L_{B_k}` the shard's mean loss
    (:func:`~trainsys.memtrain.mlp.mse_loss_and_grad`), returns ``(grad_sum, loss_sum, n_k)``:

    - ``grad_sum``: :math:`S_k = n_k \nabla L_{B_k} = \sum_{e\in B_k}\nabla\ell_e`, a dict shaped like
      ``params`` in ``params``' dtype (the mean loss's output gradient times :math:`n_k`, then backward);
    - ``loss_sum``: :math:`n_k L_{B_k} = \sum_{e\in B_k}\ell_e` (a Python float);
    - ``n_k``: the number of examples (an ``int``).

    Sums, not means, so that uneven shards combine exactly: :math:`\nabla L = \sum_k S_k / \sum_k n_k`.
    Nothing is mutated. Raises when ``shard`` is not a pair of 2-D float arrays with the same number
    (≥ 1) of rows and the widths of ``params``.
    """
    params = validate_mlp_params(params)
    X_k, Y_k = _validate_shard(shard, params)
    n_k = X_k.shape[0]
    Y_hat, cache = mlp_forward(params, X_k)  # (n_k, d_out)
    loss, dY_hat = mse_loss_and_grad(Y_hat, Y_k)  # dY_hat: (n_k, d_out), gradient of the mean
    dY_hat *= dY_hat.dtype.type(n_k)  # gradient of the summed loss over the shard
    return mlp_backward(params, cache, dY_hat), loss * n_k, n_k


# --- Lesson 27 -------------------------------------------------------------------------------------
def all_reduce_mean(worker_arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    r"""Naive all-reduce: every worker ends with :math:`\bar a = \frac1N\sum_{k=0}^{N-1} a_k`.

    ``worker_arrays``: a non-empty list of ``N`` float arrays of one shape and one dtype (any shape).
    Returns ``N`` **new** arrays (one per worker, none sharing memory with another or with the inputs),
    each of that shape and dtype, computed as ``((a_0 + a_1) + … + a_{N-1}) / N`` in the arrays' dtype.
    The inputs are not mutated. Raises ``ValueError`` for an empty list or unequal shapes or dtypes,
    ``TypeError`` for a non-list or a non-float array (messages name ``worker_arrays[k]``).

    As communication this is "everyone sends everything to one worker, which sends the mean back": the
    root receives :math:`(N-1)S` bytes and sends :math:`(N-1)S`; the ring (Lesson 28) spreads that load.
    """
    arrays = validate_worker_arrays(worker_arrays)
    total = arrays[0].copy()  # (...), the first worker's contribution
    for a in arrays[1:]:
        total += a
    total /= total.dtype.type(len(arrays))
    return [total] + [total.copy() for _ in arrays[1:]]


# --- flat views of a parameter dict (Lessons 29, 30, 35) ----------------------------------------------
def flatten_params(tree: Mapping[str, np.ndarray], name: str = "params") -> np.ndarray:
    """Concatenate every array of ``tree``, raveled (C order), in the dict's own key order, into a new 1-D array.

    For an MLP dict from :func:`~trainsys.memtrain.mlp.init_mlp_params` the order is ``W1, b1, W2, b2``.
    All arrays must share one floating dtype (``ValueError`` otherwise), and ``tree`` must not be empty.
    """
    tree = require_float_tree(name, tree)
    if not tree:
        raise ValueError(f"{name} must hold at least one array, got an empty dict")
    dtypes = {value.dtype for value in tree.values()}
    if len(dtypes) != 1:
        raise ValueError(f"{name} must have one dtype to be flattened, got {sorted(map(str, dtypes))}")
    return np.concatenate([value.reshape(-1) for value in tree.values()])  # (numel,)


def unflatten_params(flat: np.ndarray, like: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inverse of :func:`flatten_params`: new arrays shaped like ``like``'s, in ``like``'s key order.

    ``flat: (numel,)`` with ``numel`` the total size of ``like``; the results are copies in ``flat``'s dtype.
    """
    like = require_float_tree("like", like)
    flat = require_float_array("flat", flat, ndim=1)
    numel = sum(value.size for value in like.values())
    if flat.size != numel:
        raise ValueError(f"flat must have {numel} elements (the total size of like), got {flat.size}")
    out, offset = {}, 0
    for key, value in like.items():
        out[key] = flat[offset:offset + value.size].reshape(value.shape).copy()  # like[key].shape
        offset += value.size
    return out


# --- Lesson 29 -------------------------------------------------------------------------------------
def data_parallel_train_step(params: Params, shards: Sequence[Shard], lr: float) -> tuple[Params, float, list[int]]:
    r"""One synchronous data-parallel SGD step; equal to the single-worker step on the union batch.

    For ``N = len(shards)`` workers (``shards`` as from :func:`shard_dataset_across_workers`, or any
    non-empty shards of one width; sizes may differ):

    1. each worker ``k``: ``(S_k, loss_sum_k, n_k) = compute_local_gradients(params, shards[k])``;
    2. each worker flattens :math:`S_k` (:func:`flatten_params`, key order ``W1, b1, W2, b2``) and
       :func:`~trainsys.memtrain.ring_allreduce.ring_all_reduce_mean` gives all of them
       :math:`\frac1N\sum_k S_k`;
    3. each worker multiplies by :math:`N/n` (:math:`n = \sum_k n_k`, known to every worker) — the
       union batch's mean gradient — and takes :math:`\theta - \text{lr}\,\nabla L`.

    Returns ``(new_params, loss, bytes_sent)``: the new parameters (new arrays in ``params``' dtype;
    every worker's copy is identical, worker 0's is returned), the union batch's mean loss before the
    step (:math:`\sum_k \text{loss\_sum}_k / n`, a logging scalar whose exchange is not counted), and
    ``bytes_sent[k]``, the bytes worker ``k`` put on the ring for the gradient
    (:func:`~trainsys.memtrain.ring_allreduce.bytes_sent_per_worker`). ``params`` is not mutated.
    Equality with the one-worker step: about 1e-12 relative in float64; float32 differs by rounding
    (the sums run in another order).
    """
    params = validate_mlp_params(params)
    if not isinstance(shards, (list, tuple)) or len(shards) == 0:
        raise ValueError(f"shards must be a non-empty list of (X_k, Y_k) pairs, got {describe(shards)}")
    for k, shard in enumerate(shards):
        _validate_shard(shard, params, f"shards[{k}]")
    lr = require_real("lr", lr, strictly_positive=True)
    N = len(shards)
    local = [compute_local_gradients(params, shard) for shard in shards]  # one (S_k, loss_k, n_k) per worker
    n = sum(n_k for _, _, n_k in local)
    flats = [flatten_params(grad_sum) for grad_sum, _, _ in local]  # N arrays of (numel,)
    means, log = ring_all_reduce_mean(flats)  # N identical arrays of (numel,)
    new_per_worker = []
    for mean in means:  # what each worker does with its own copy
        grad = unflatten_params(mean * mean.dtype.type(N / n), params)  # union-batch mean gradient
        new_per_worker.append(sgd_step(params, {key: grad[key] for key in PARAM_KEYS}, lr))
    loss = sum(loss_sum for _, loss_sum, _ in local) / n
    return new_per_worker[0], loss, bytes_sent_per_worker(log, N)
