r"""Module 2, Part 3 — arithmetic on parameter dicts ("pytrees"): the algebra DiLoCo is written in.

A parameter tree is a dict ``{key: float array}``. DiLoCo needs four operations on whole trees:
a deep copy for each worker, scaling, the difference :math:`\theta_{global} - \theta_k`, and the
(weighted) average :math:`\sum_k w_k \theta_k / \sum_k w_k`. Two trees combine only when they have
the same keys and the same shape under each key: anything else is an error, never a broadcast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import describe, require_float_tree, require_real, require_same_tree

Params = dict[str, np.ndarray]


def params_nbytes(params: Mapping[str, np.ndarray]) -> int:
    """Bytes held by the arrays of a tree — what sending it over the network costs (``Σ a.nbytes``)."""
    require_float_tree("params", params)
    return int(sum(value.nbytes for value in params.values()))


# --- Lesson 12 -------------------------------------------------------------------------------------
def clone_params(params: Params) -> Params:
    """A deep copy: a new dict of new arrays, same keys, shapes, dtypes and values.

    No array of the copy shares memory with ``params`` (``np.shares_memory`` is ``False``), so a worker
    that updates its copy in place can never change the global parameters. ``dict(params)`` and
    ``copy.copy`` copy the dict but alias every array — the bug this lesson prevents.
    """
    require_float_tree("params", params)
    return {key: np.array(value, copy=True) for key, value in params.items()}


# --- Lesson 13 -------------------------------------------------------------------------------------
def scale_params(params: Params, c: float) -> Params:
    r""":math:`c\,\theta` for every array, as new arrays in each array's own dtype; ``params`` not mutated.

    ``c`` is any finite real number (0 and negatives included).
    """
    require_float_tree("params", params)
    c = require_real("c", c)
    return {key: (value * c).astype(value.dtype, copy=False) for key, value in params.items()}


# --- Lesson 14 -------------------------------------------------------------------------------------
def subtract_params(a: Params, b: Params) -> Params:
    """``a − b`` key by key, new arrays in ``a``'s dtypes; neither input is mutated.

    Raises ``ValueError`` when the keys differ or a shape differs (naming the key) — broadcasting a
    ``(4,)`` bias against a ``(1, 4)`` one would silently produce a ``(1, 4)`` "difference".
    """
    require_same_tree("a", a, "b", b)
    return {k: (a[k] - b[k]).astype(a[k].dtype, copy=False) for k in a}


# --- Lesson 15 -------------------------------------------------------------------------------------
def average_params(list_of_params: Sequence[Params], weights: Sequence[float] | None = None) -> Params:
    r"""The (weighted) mean tree :math:`\bar\theta = \sum_k w_k \theta_k / \sum_k w_k` (uniform if ``weights=None``).

    ``list_of_params``: a non-empty list of trees with identical structure. ``weights``: one finite
    number ``>= 0`` per tree with a positive sum (they need not sum to 1 — they are normalised, so
    shard sizes :math:`n_k` can be passed directly). Accumulated in float64 and cast once to the first
    tree's dtypes. Returns new arrays; nothing is mutated.
    """
    if isinstance(list_of_params, Mapping) or not isinstance(list_of_params, Sequence):
        raise TypeError(f"list_of_params must be a list of parameter dicts, got {describe(list_of_params)}")
    if len(list_of_params) == 0:
        raise ValueError("list_of_params must hold at least one parameter dict, got an empty list")
    first = list_of_params[0]
    for i, tree in enumerate(list_of_params):
        require_same_tree("list_of_params[0]", first, f"list_of_params[{i}]", tree)
    K = len(list_of_params)
    if weights is None:
        w = np.full(K, 1.0 / K)
    else:
        if isinstance(weights, (str, bytes)) or not isinstance(weights, (Sequence, np.ndarray)):
            raise TypeError(f"weights must be a list of {K} non-negative numbers, got {describe(weights)}")
        if len(weights) != K:
            raise ValueError(f"weights must hold one weight per tree ({K}), got {len(weights)}")
        w = np.array([require_real(f"weights[{i}]", x, minimum=0.0) for i, x in enumerate(weights)])
        if w.sum() <= 0:
            raise ValueError(f"weights must have a positive sum, got {list(map(float, w))}")
        w = w / w.sum()
    out = {}
    for key, value in first.items():
        acc = np.zeros(value.shape, dtype=np.float64)
        for w_k, tree in zip(w, list_of_params):
            acc += w_k * tree[key]
        out[key] = acc.astype(value.dtype)
    return out

