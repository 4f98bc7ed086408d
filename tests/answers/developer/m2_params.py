"""Mutants for Module 2, Part 3 (lessons 12–15): parameter-tree mistakes the notebooks name."""

from __future__ import annotations

import copy

import numpy as np

from trainsys.diloco import params as ref

REFERENCE = "trainsys.diloco.params"


def _clone_shallow(params):
    ref.clone_params(params)
    return dict(params)


def _clone_copy_module(params):
    ref.clone_params(params)
    return copy.copy(params)


def _clone_float32(params):
    ref.clone_params(params)
    return {k: np.array(v, dtype=np.float32) for k, v in params.items()}


def _clone_same(params):
    ref.clone_params(params)
    return params


def _scale_in_place(params, c):
    ref.scale_params(params, c)
    for v in params.values():
        v *= c
    return params


def _scale_weights_only(params, c):
    ref.scale_params(params, c)
    return {k: (v * c).astype(v.dtype) if k.startswith("W") else v.copy() for k, v in params.items()}


def _scale_divide(params, c):
    ref.scale_params(params, c)
    return {k: (v / c if c else v * 0).astype(v.dtype) for k, v in params.items()}


def _sub_reversed(a, b):
    ref.subtract_params(a, b)
    return {k: b[k] - a[k] for k in a}


def _sub_unchecked(a, b):
    return {k: a[k] - b[k] for k in a}  # no structure check: broadcasts, ignores extra keys


def _sub_in_place(a, b):
    ref.subtract_params(a, b)
    for k in a:
        a[k] -= b[k]
    return a


def _avg(variant: str):
    def wrong(list_of_params, weights=None):
        ref.average_params(list_of_params, weights)
        K = len(list_of_params)
        w = np.ones(K) if weights is None else np.asarray(weights, dtype=np.float64)
        if variant == "unnormalised":
            w = w / K if weights is None else w
        elif variant == "ignores weights":
            w = np.ones(K) / K
        elif variant == "divides by K":
            w = w / K
        else:  # first tree only
            w = np.eye(K)[0]
        return {k: sum(wi * t[k].astype(np.float64) for wi, t in zip(w, list_of_params)).astype(v.dtype)
                for k, v in list_of_params[0].items()}

    return wrong


MUTANTS = {
    "clone_params": [
        ("dict(params): a new dict aliasing every array", _clone_shallow),
        ("copy.copy (shallow)", _clone_copy_module),
        ("casts every array to float32", _clone_float32),
        ("returns params itself", _clone_same),
    ],
    "scale_params": [
        ("scales in place", _scale_in_place),
        ("scales the weights but not the biases", _scale_weights_only),
        ("divides by c", _scale_divide),
    ],
    "subtract_params": [
        ("b - a (reversed)", _sub_reversed),
        ("no structure check (broadcasts, ignores extra keys)", _sub_unchecked),
        ("subtracts in place into a", _sub_in_place),
    ],
    "average_params": [
        ("weights not normalised (their sum is not 1)", _avg("unnormalised")),
        ("ignores the weights", _avg("ignores weights")),
        ("divides the weighted sum by K", _avg("divides by K")),
        ("returns the first tree", _avg("first")),
    ],
}
