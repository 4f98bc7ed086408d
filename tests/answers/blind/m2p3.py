"""Red team, Module 2 Part 3 (parameter arithmetic utilities): wrong answers and correct alternatives written
from the release notebooks only."""

from __future__ import annotations

import copy
import math

import numpy as np


def _float_tree(name, tree):
    if not isinstance(tree, dict):
        raise TypeError(f"{name} must be a dict of floating-point arrays, got {type(tree).__name__}")
    for key, value in tree.items():
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"{name}[{key!r}] must be a floating-point numpy array")


def _is_real(c):
    return isinstance(c, (int, float, np.integer, np.floating)) and not isinstance(c, (bool, np.bool_))


# ==========================================================================================================
# Lesson 12: clone_params
# ==========================================================================================================
def _clone_shallow(params):
    _float_tree("params", params)
    return dict(params)


def _clone_copy_copy(params):
    _float_tree("params", params)
    return copy.copy(params)


def _clone_cast32(params):
    _float_tree("params", params)
    return {k: v.astype(np.float32) for k, v in params.items()}


def _clone_identity(params):
    _float_tree("params", params)
    return params


def _clone_contiguous(params):
    _float_tree("params", params)
    return {k: np.ascontiguousarray(v) for k, v in params.items()}  # copies only non-contiguous views


def _clone_lists_ok(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    out = {}
    for k, v in params.items():
        arr = np.array(v, copy=True)  # a list of floats is converted instead of refused
        if not np.issubdtype(arr.dtype, np.floating):
            raise TypeError(f"params[{k!r}] must be floating")
        out[k] = arr
    return out


def _clone_not_integer(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, v in params.items():
        if not isinstance(v, np.ndarray) or np.issubdtype(v.dtype, np.integer):
            raise TypeError(f"params[{k!r}] must not be an integer array")  # bool/complex pass
    return {k: v.copy() for k, v in params.items()}


def _clone_plus_zero(params):
    _float_tree("params", params)
    return {k: v + 0.0 for k, v in params.items()}  # a new array, but -0.0 becomes +0.0


def _clone_readonly(params):
    _float_tree("params", params)
    return {k: np.frombuffer(v.tobytes(), dtype=v.dtype).reshape(v.shape) for k, v in params.items()}


def _clone_deepcopy_unchecked(params):
    return copy.deepcopy(params)


def _clone_alt_np_array(params):
    if type(params) is not dict and not isinstance(params, dict):
        raise TypeError("params must be a dict")
    clone = {}
    for key in params:
        value = params[key]
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            raise TypeError(f"params[{key!r}] must be a floating-point ndarray, got {type(value).__name__}")
        clone[key] = np.array(value, copy=True, order="C")
    return clone


def _clone_alt_empty_copyto(params):
    _float_tree("params", params)
    out = {}
    for k, v in params.items():
        buf = np.empty(v.shape, dtype=v.dtype)
        np.copyto(buf, v, casting="no")
        out[k] = buf
    return out


# ==========================================================================================================
# Lesson 13: scale_params
# ==========================================================================================================
def _scale_check(params, c):
    _float_tree("params", params)
    if not _is_real(c):
        raise TypeError(f"c must be a real number, got {type(c).__name__}")
    c = float(c)
    if not math.isfinite(c):
        raise ValueError(f"c must be finite, got {c}")
    return c


def _scale_in_place(params, c):
    c = _scale_check(params, c)
    for v in params.values():
        v *= c
    return params


def _scale_weights_only(params, c):
    c = _scale_check(params, c)
    return {k: (v * c).astype(v.dtype, copy=False) if k.startswith("W") else v.copy() for k, v in params.items()}


def _scale_divide(params, c):
    c = _scale_check(params, c)
    return {k: (v / c).astype(v.dtype, copy=False) for k, v in params.items()}


def _scale_dtype_drift(params, c):
    _float_tree("params", params)
    if isinstance(c, bool) or not _is_real(c):
        raise TypeError("c must be a real number")
    if not np.isfinite(c):
        raise ValueError("c must be finite")
    return {k: v * np.float64(c) for k, v in params.items()}


def _scale_one_shortcut(params, c):
    c = _scale_check(params, c)
    if c == 1.0:
        return dict(params)
    return {k: (v * c).astype(v.dtype, copy=False) for k, v in params.items()}


def _scale_python_types_only(params, c):
    _float_tree("params", params)
    if isinstance(c, bool) or not isinstance(c, (int, float)):  # np.float32 / np.int64 refused
        raise TypeError("c must be an int or a float")
    if not math.isfinite(c):
        raise ValueError("c must be finite")
    return {k: (v * float(c)).astype(v.dtype, copy=False) for k, v in params.items()}


def _scale_float_conversion(params, c):
    _float_tree("params", params)
    if isinstance(c, (bool, str, np.bool_)):
        raise TypeError("c must be a real number")
    try:
        c = float(c)  # a 0-d or one-element array converts fine
    except (TypeError, ValueError) as exc:
        raise TypeError(f"c must be a real number: {exc}") from None
    if not math.isfinite(c):
        raise ValueError("c must be finite")
    return {k: (v * c).astype(v.dtype, copy=False) for k, v in params.items()}


def _scale_numpy_factor_kept(params, c):
    _float_tree("params", params)
    if not _is_real(c):
        raise TypeError("c must be a real number")
    if not np.isfinite(c):
        raise ValueError("c must be finite")
    # the NumPy scalar is kept as it is: np.float64 c makes the product float64, rounded once at the end
    return {k: (v * c).astype(v.dtype, copy=False) for k, v in params.items()}


def _scale_float64_product(params, c):
    c = _scale_check(params, c)
    return {k: (v.astype(np.float64) * c).astype(v.dtype) for k, v in params.items()}


def _scale_pos_inf_only(params, c):
    _float_tree("params", params)
    if not _is_real(c):
        raise TypeError("c must be a real number")
    c = float(c)
    if math.isnan(c) or c == math.inf:  # -inf forgotten
        raise ValueError("c must be finite")
    return {k: (v * c).astype(v.dtype, copy=False) for k, v in params.items()}


def _scale_int_arrays(params, c):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    if not _is_real(c):
        raise TypeError("c must be a real number")
    c = float(c)
    if not math.isfinite(c):
        raise ValueError("c must be finite")
    return {k: (np.asarray(v) * c).astype(np.asarray(v).dtype, copy=False) for k, v in params.items()}


def _scale_alt_torch(params, c):
    import torch

    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.integer, np.floating)):
        raise TypeError(f"c must be a real number, got {c!r}")
    for k, v in params.items():
        if not isinstance(v, np.ndarray) or v.dtype.kind != "f":
            raise TypeError(f"params[{k!r}] must be a floating-point array")
    c = float(c)
    if math.isnan(c) or math.isinf(c):
        raise ValueError(f"c must be finite, got {c}")
    out = {}
    for k, v in params.items():
        if v.dtype == np.float16:
            out[k] = np.multiply(v, c).astype(np.float16, copy=False)
        else:
            out[k] = torch.mul(torch.from_numpy(np.ascontiguousarray(v)), c).numpy().copy()
    return out


def _scale_alt_multiply_out(params, c):
    c = _scale_check(params, c)
    out = {}
    for k, v in params.items():
        res = np.empty_like(v)
        np.multiply(v, c, out=res)
        out[k] = res
    return out


# ==========================================================================================================
# Lesson 14: subtract_params
# ==========================================================================================================
def _sub_check(a, b):
    _float_tree("a", a)
    _float_tree("b", b)
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise ValueError(f"a and b have different keys: only in a {only_a}, only in b {only_b}")
    for k in a:
        if a[k].shape != b[k].shape:
            raise ValueError(f"key {k!r}: a has shape {a[k].shape}, b has shape {b[k].shape}")


def _sub_reversed(a, b):
    _sub_check(a, b)
    return {k: (b[k] - a[k]).astype(a[k].dtype, copy=False) for k in a}


def _sub_no_structure(a, b):
    _float_tree("a", a)
    _float_tree("b", b)
    return {k: (a[k] - b[k]).astype(a[k].dtype, copy=False) for k in a}


def _sub_in_place(a, b):
    _sub_check(a, b)
    for k in a:
        a[k] -= b[k]
    return a


def _sub_promoted_dtype(a, b):
    _sub_check(a, b)
    return {k: a[k] - b[k] for k in a}  # float32 - float64 -> float64


def _sub_cast_b_first(a, b):
    _sub_check(a, b)
    return {k: a[k] - b[k].astype(a[k].dtype) for k in a}  # b rounded to a's dtype, then the difference rounded


def _sub_dtype_of_b(a, b):
    _sub_check(a, b)
    return {k: (a[k] - b[k]).astype(b[k].dtype, copy=False) for k in a}


def _sub_broadcastable(a, b):
    _float_tree("a", a)
    _float_tree("b", b)
    if set(a) != set(b):
        raise ValueError(f"a and b have different keys: {sorted(set(a) ^ set(b))}")
    for k in a:
        if np.broadcast_shapes(a[k].shape, b[k].shape) != a[k].shape:  # b of shape () or (1,) accepted
            raise ValueError(f"key {k!r}: shapes {a[k].shape} and {b[k].shape} do not match")
    return {k: (a[k] - b[k]).astype(a[k].dtype, copy=False) for k in a}


def _sub_int_arrays(a, b):
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, dict):
            raise TypeError(f"{name} must be a dict")
    if set(a) != set(b):
        raise ValueError(f"a and b have different keys: {sorted(set(a) ^ set(b))}")
    for k in a:
        if np.shape(a[k]) != np.shape(b[k]):
            raise ValueError(f"key {k!r}: shapes differ")
    return {k: np.asarray(a[k]) - np.asarray(b[k]) for k in a}


def _sub_alt_float64(a, b):
    # a's validity first, then b's, then the structure; the difference in float64, rounded once
    _float_tree("a", a)
    _float_tree("b", b)
    missing, extra = set(a) - set(b), set(b) - set(a)
    if missing or extra:
        raise ValueError(f"a and b must have the same keys; missing from b: {sorted(missing)}, "
                         f"extra in b: {sorted(extra)}")
    out = {}
    for k in sorted(a):
        if a[k].shape != b[k].shape:
            raise ValueError(f"{k}: a[{k!r}].shape = {a[k].shape} but b[{k!r}].shape = {b[k].shape}")
        out[k] = (a[k].astype(np.float64) - b[k].astype(np.float64)).astype(a[k].dtype)
    return {k: out[k] for k in a}


def _sub_alt_add_negative(a, b):
    _sub_check(a, b)
    return {k: np.add(a[k], np.negative(b[k])).astype(a[k].dtype, copy=False) for k in a}


# ==========================================================================================================
# Lesson 15: average_params
# ==========================================================================================================
def _avg_validate_trees(list_of_params):
    if not isinstance(list_of_params, (list, tuple)):
        raise TypeError(f"list_of_params must be a list of trees, got {type(list_of_params).__name__}")
    if len(list_of_params) == 0:
        raise ValueError("list_of_params must hold at least one tree")
    first = list_of_params[0]
    _float_tree("list_of_params[0]", first)
    for i, tree in enumerate(list_of_params):
        _float_tree(f"list_of_params[{i}]", tree)
        if set(tree) != set(first):
            raise ValueError(f"tree {i} has keys {sorted(tree)}; missing/extra: {sorted(set(first) ^ set(tree))}")
        for k in first:
            if tree[k].shape != first[k].shape:
                raise ValueError(f"tree {i}, key {k!r}: shape {tree[k].shape} != {first[k].shape}")
    return first


def _avg_weights(weights, k):
    if weights is None:
        return [1.0 / k] * k
    if isinstance(weights, np.ndarray):
        if weights.ndim != 1:
            raise ValueError("weights must be 1-D")
        weights = list(weights)
    if not isinstance(weights, (list, tuple)) or len(weights) != k:
        raise ValueError(f"weights must hold {k} numbers")
    w = []
    for x in weights:
        if not _is_real(x) or not math.isfinite(float(x)) or float(x) < 0:
            raise ValueError(f"weights must be finite and >= 0, got {x!r}")
        w.append(float(x))
    total = sum(w)
    if total <= 0:
        raise ValueError("weights must have a positive sum")
    return [x / total for x in w]


def _avg_unnormalised(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    k = len(list_of_params)
    w = [1.0 / k] * k if weights is None else [float(x) for x in weights]
    _avg_weights(weights, k)
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key].astype(np.float64)
        out[key] = acc.astype(ref.dtype)
    return out


def _avg_ignores_weights(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    k = len(list_of_params)
    _avg_weights(weights, k)
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for t in list_of_params:
            acc += t[key].astype(np.float64) / k
        out[key] = acc.astype(ref.dtype)
    return out


def _avg_divided_by_k(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    k = len(list_of_params)
    _avg_weights(weights, k)
    w = [1.0] * k if weights is None else [float(x) for x in weights]
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key].astype(np.float64)
        out[key] = (acc / k).astype(ref.dtype)
    return out


def _avg_first_tree(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    _avg_weights(weights, len(list_of_params))
    return {k: v.copy() for k, v in first.items()}


def _avg_float32_accumulation(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    w = _avg_weights(weights, len(list_of_params))
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, ref.dtype)  # accumulated in the trees' own dtype
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key]
        out[key] = acc
    return out


def _avg_inf_weight_ok(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    k = len(list_of_params)
    if weights is None:
        w = np.full(k, 1.0 / k)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or len(w) != k:
            raise ValueError("weights must have one entry per tree")
        if np.any(np.isnan(w)) or np.any(w < 0) or w.sum() <= 0:  # inf not refused
            raise ValueError("weights must be >= 0 with a positive sum")
        w = w / w.sum()
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key].astype(np.float64)
        out[key] = acc.astype(ref.dtype)
    return out


def _avg_ravel_weights(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    k = len(list_of_params)
    w = None if weights is None else np.asarray(weights, dtype=np.float64).ravel()  # [[1, 3]] accepted
    w = _avg_weights(None if w is None else list(w), k)
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key].astype(np.float64)
        out[key] = acc.astype(ref.dtype)
    return out


def _avg_list_only(list_of_params, weights=None):
    if not isinstance(list_of_params, list):  # a tuple of trees refused
        raise TypeError("list_of_params must be a list")
    first = _avg_validate_trees(list_of_params)
    w = _avg_weights(weights, len(list_of_params))
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key].astype(np.float64)
        out[key] = acc.astype(ref.dtype)
    return out


def _avg_result_type(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    w = _avg_weights(weights, len(list_of_params))
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key].astype(np.float64)
        out[key] = acc.astype(np.result_type(*[t[key] for t in list_of_params]))  # not the first tree's dtype
    return out


def _avg_extra_keys_later(list_of_params, weights=None):
    if not isinstance(list_of_params, (list, tuple)):
        raise TypeError("list_of_params must be a list")
    if not list_of_params:
        raise ValueError("list_of_params is empty")
    first = list_of_params[0]
    for i, t in enumerate(list_of_params):
        _float_tree(f"list_of_params[{i}]", t)
        for k in first:  # later trees may carry extra keys unnoticed
            if k not in t:
                raise ValueError(f"tree {i} is missing the key {k!r}")
            if t[k].shape != first[k].shape:
                raise ValueError(f"tree {i}: {k!r} has shape {t[k].shape}")
    w = _avg_weights(weights, len(list_of_params))
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key].astype(np.float64)
        out[key] = acc.astype(ref.dtype)
    return out


def _avg_single_alias(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    w = _avg_weights(weights, len(list_of_params))
    if len(list_of_params) == 1:
        return dict(first)
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key].astype(np.float64)
        out[key] = acc.astype(ref.dtype)
    return out


def _avg_product_in_tree_dtype(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    w = _avg_weights(weights, len(list_of_params))
    out = {}
    for key, ref in first.items():
        acc = np.zeros(ref.shape, np.float64)
        for wi, t in zip(w, list_of_params):
            acc += wi * t[key]  # a Python float times a float32 array is rounded to float32 first (NEP 50)
        out[key] = acc.astype(ref.dtype)
    return out


def _avg_alt_np_average(list_of_params, weights=None):
    first = _avg_validate_trees(list_of_params)
    k = len(list_of_params)
    if weights is not None:
        _avg_weights(weights, k)
        w = np.asarray(weights, dtype=np.float64)
    else:
        w = None
    out = {}
    for key, ref in first.items():
        stack = np.stack([t[key].astype(np.float64) for t in list_of_params])  # (k, *shape)
        out[key] = np.average(stack, axis=0, weights=w).astype(ref.dtype)
    return out


def _avg_alt_loops(list_of_params, weights=None):
    # weights validated before the trees; outer loop over trees, inner loop over keys
    if not isinstance(list_of_params, (list, tuple)):
        raise TypeError("list_of_params must be a list or tuple of parameter trees")
    k = len(list_of_params)
    if k == 0:
        raise ValueError("list_of_params is empty")
    w = _avg_weights(weights, k)
    first = _avg_validate_trees(list_of_params)
    acc = {key: np.zeros(ref.shape, dtype=np.float64) for key, ref in first.items()}
    for wi, tree in zip(w, list_of_params):
        for key in acc:
            acc[key] += wi * tree[key].astype(np.float64)
    return {key: acc[key].astype(first[key].dtype) for key in first}


MUTANTS = {
    "clone_params": [
        ("dict(params): a new dict sharing every array (contract: 'no array of clone shares a byte')",
         _clone_shallow),
        ("copy.copy(params): shallow copy", _clone_copy_copy),
        ("astype(np.float32) 'to be safe' (contract: 'the same dtype as the input, key by key')", _clone_cast32),
        ("return params (contract: 'The returned dict is not params itself')", _clone_identity),
        ("np.ascontiguousarray: contiguous arrays come back as themselves", _clone_contiguous),
        ("np.array(value) on anything: a list value is converted (contract: 'a list — TypeError')",
         _clone_lists_ok),
        ("only integer arrays refused: bool/complex/object pass (contract: 'not a floating-point array')",
         _clone_not_integer),
        ("value + 0.0: new arrays, but -0.0 turns into +0.0 (contract: 'bit for bit equal')", _clone_plus_zero),
        ("np.frombuffer copy: read-only arrays (contract: 'writing into either tree never changes the other')",
         _clone_readonly),
        ("copy.deepcopy without any validation (contract: TypeError naming params)", _clone_deepcopy_unchecked),
    ],
    "scale_params": [
        ("scales in place and returns params (contract: 'Mutation: none')", _scale_in_place),
        ("scales only the weights (contract: 'every array of the tree')", _scale_weights_only),
        ("divides by c (the red team's own, written blind)", _scale_divide),
        ("np.float64(c) without astype: dtype drifts (contract: 'the dtype of each input array')",
         _scale_dtype_drift),
        ("c = 1 returns the same arrays (contract: 'scaling by 1 is a copy, not the same arrays')",
         _scale_one_shortcut),
        ("only Python int/float accepted: np.float32(0.5), np.int64(2) refused (contract: 'or a NumPy real "
         "scalar')", _scale_python_types_only),
        ("float(c): a 0-d / one-element array accepted (contract: 'an array — TypeError naming c')",
         _scale_float_conversion),
        ("refuses nan and +inf but not -inf (contract: 'nan or ±inf — ValueError')", _scale_pos_inf_only),
        ("integer arrays accepted and truncated (contract: 'TypeError naming params')", _scale_int_arrays),
    ],
    "subtract_params": [
        ("b - a: local minus original (contract: a - b)", _sub_reversed),
        ("no structure check: broadcasting, ignored keys (contract: 'No broadcasting, ever')", _sub_no_structure),
        ("subtracts in place into a (contract: 'Neither a nor b is changed')", _sub_in_place),
        ("no cast: float32 - float64 comes back float64 (contract: 'a[κ]'s dtype')", _sub_promoted_dtype),
        ("b cast to a's dtype before subtracting: double rounding (contract: 'a - b computed in float64 and "
         "rounded once')", _sub_cast_b_first),
        ("result in b's dtype (contract: 'a[κ]'s dtype')", _sub_dtype_of_b),
        ("accepts b that broadcasts to a's shape, e.g. 0-d or (1,) (contract: 'b[κ].shape == a[κ].shape')",
         _sub_broadcastable),
        ("no dtype checks: integer arrays or lists accepted (contract: 'TypeError naming it')", _sub_int_arrays),
    ],
    "average_params": [
        ("weights not normalised: sum w_i theta_i (contract: '/ sum w_i')", _avg_unnormalised),
        ("weights ignored: always the uniform mean", _avg_ignores_weights),
        ("weighted sum divided by k", _avg_divided_by_k),
        ("returns (a copy of) the first tree", _avg_first_tree),
        ("accumulated in the trees' dtype (contract: 'accumulated in float64, rounded once')",
         _avg_float32_accumulation),
        ("w_i * theta_i rounded in float32 before the float64 sum (contract: 'accumulated in float64')",
         _avg_product_in_tree_dtype),
        ("infinite weight accepted (contract: 'a negative, nan or infinite entry — ValueError naming weights')",
         _avg_inf_weight_ok),
        ("weights raveled: a 2-D weights array accepted (contract: 'list / tuple / 1-D array of k')",
         _avg_ravel_weights),
        ("a tuple of trees refused (contract, Implementation: 'a list or tuple')", _avg_list_only),
        ("result in the promoted dtype of all trees (contract: 'the first tree's dtypes')", _avg_result_type),
        ("extra keys in later trees ignored (contract: 'exactly the first tree's keys')", _avg_extra_keys_later),
        ("k = 1 returns the tree's own arrays (contract: 'shares no memory ... even for k = 1')", _avg_single_alias),
    ],
}

ALTERNATIVES = {
    "clone_params": [
        ("np.array(value, copy=True, order='C') with dtype.kind check", _clone_alt_np_array),
        ("np.empty + np.copyto(casting='no')", _clone_alt_empty_copyto),
    ],
    "scale_params": [
        ("torch.mul on tensor views (float16 by NumPy), validation reordered", _scale_alt_torch),
        ("np.multiply into a preallocated np.empty_like", _scale_alt_multiply_out),
    ],
    "subtract_params": [
        ("difference computed in float64 and rounded once, keys visited sorted", _sub_alt_float64),
        ("a + (-b) (exact negation)", _sub_alt_add_negative),
    ],
    "average_params": [
        ("np.average over a float64 stack (the lesson's own oracle)", _avg_alt_np_average),
        ("weights validated first; loop over trees outside, keys inside", _avg_alt_loops),
    ],
}


_WITHIN_2U = ("the Rounding clause accepts any result within 2u of c*x; a float64 product rounded once is within u/2 "
              "(bit-for-bit agreement with torch.mul is the lesson's metric, one correct implementation among others)")
DISPUTED = {
    "scale_params": [
        ("NumPy float64 factor kept: product in float64, rounded once (contract: 'Convert c to a Python float'; "
         "differs from torch.mul bit for bit)", _WITHIN_2U),
        ("product computed in float64 then rounded (contract: 'bit for bit in float32' with torch.mul)", _WITHIN_2U),
    ],
}
