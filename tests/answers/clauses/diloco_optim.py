"""Witnesses for Module 2, Parts 2, 3 and 5 (AdamW, parameter-tree arithmetic, the Nesterov outer optimizer):
wrong answers, each breaking one clause of its lesson's contract."""

from __future__ import annotations

import numpy as np

from tests.answers.clauses import existing
from trainsys.diloco import adamw as ref_adamw
from trainsys.diloco import outer as ref_outer
from trainsys.diloco import params as ref_params
from trainsys.diloco.adamw import require_beta
from trainsys.diloco.outer import require_momentum
from trainsys._validation import require_float_tree, require_int, require_real, require_same_tree


def _floating(name, tree):
    """A dict of floating-point arrays (what most witnesses still check)."""
    require_float_tree(name, tree)


# --- Lesson 7: init_adamw_state ---------------------------------------------------------------------
def _init_cleans_params_in_place(params):
    """Guards against diverged parameters by cleaning them in place before building the zeros."""
    _floating("params", params)
    for value in params.values():
        np.nan_to_num(value, copy=False)
    return ref_adamw.init_adamw_state(params)


def _init_reuses_zero_params(params):
    """An all-zero parameter is already "m_0 = 0": it is reused as its first moment."""
    state = ref_adamw.init_adamw_state(params)
    state["m"] = {k: v if not v.any() else state["m"][k] for k, v in params.items()}
    return state


def _init_integer_arrays_ok(params):
    """Refuses a non-dict, but gives an integer array integer zeros."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    return {"step": 0, "m": {k: np.zeros_like(v) for k, v in params.items()},
            "v": {k: np.zeros_like(v) for k, v in params.items()}}


# --- Lesson 8: update_moments -----------------------------------------------------------------------
def _um_counts_on_caller(state, grads, beta1, beta2):
    """Counts the step on the state passed in (``state["step"] += 1``), then builds the new one."""
    new = ref_adamw.update_moments(state, grads, beta1, beta2)
    state["step"] += 1
    return {"step": state["step"], "m": new["m"], "v": new["v"]}


def _um_beta_one_ok(state, grads, beta1, beta2):
    """Decay rates checked against [0, 1] — 1 included."""
    for name, beta in (("beta1", beta1), ("beta2", beta2)):
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {beta}")
    return _um_unchecked_betas(state, grads, beta1, beta2)


def _um_unchecked_betas(state, grads, beta1, beta2):
    ref_adamw.validate_adamw_state(state)
    require_same_tree("state['m']", state["m"], "grads", grads)
    m, v = state["m"], state["v"]
    return {"step": state["step"] + 1,
            "m": {k: (beta1 * m[k] + (1 - beta1) * grads[k]).astype(m[k].dtype) for k in m},
            "v": {k: (beta2 * v[k] + (1 - beta2) * np.square(grads[k])).astype(v[k].dtype) for k in v}}


def _um_negative_beta_ok(state, grads, beta1, beta2):
    """Only ``beta >= 1`` refused: a negative decay rate goes through."""
    for name, beta in (("beta1", beta1), ("beta2", beta2)):
        if not beta < 1.0:
            raise ValueError(f"{name} must be < 1, got {beta}")
    return _um_unchecked_betas(state, grads, beta1, beta2)


def _um_numpy_shape_errors(state, grads, beta1, beta2):
    """Keys checked; shapes left to NumPy, whose errors are re-raised naming the key — a (3,) gradient
    broadcasts into a (4, 3) moment without one."""
    ref_adamw.validate_adamw_state(state)
    if set(grads) != set(state["m"]):
        raise ValueError(f"grads must have the keys of state['m'], got {sorted(grads)}")
    beta1, beta2 = require_beta("beta1", beta1), require_beta("beta2", beta2)
    m, v = state["m"], state["v"]
    new_m, new_v = {}, {}
    for k in m:
        try:
            new_m[k] = (beta1 * m[k] + (1 - beta1) * grads[k]).astype(m[k].dtype)
            new_v[k] = (beta2 * v[k] + (1 - beta2) * np.square(grads[k])).astype(v[k].dtype)
        except ValueError as exc:
            raise ValueError(f"grads[{k!r}]: {exc}") from None
    return {"step": state["step"] + 1, "m": new_m, "v": new_v}


def _um_no_shape_check(state, grads, beta1, beta2):
    """Keys and betas checked, shapes never: NumPy's anonymous broadcasting error (or a silent broadcast)."""
    ref_adamw.validate_adamw_state(state)
    if set(grads) != set(state["m"]):
        raise ValueError(f"grads must have the keys of state['m'], got {sorted(grads)}")
    beta1, beta2 = require_beta("beta1", beta1), require_beta("beta2", beta2)
    m, v = state["m"], state["v"]
    return {"step": state["step"] + 1,
            "m": {k: (beta1 * m[k] + (1 - beta1) * grads[k]).astype(m[k].dtype) for k in m},
            "v": {k: (beta2 * v[k] + (1 - beta2) * np.square(grads[k])).astype(v[k].dtype) for k in v}}


def _um_keys_unnamed(state, grads, beta1, beta2):
    """A key mismatch refused without saying which key."""
    if set(grads) != set(state.get("m", {})):
        raise ValueError("grads does not match the state")
    return ref_adamw.update_moments(state, grads, beta1, beta2)


# --- Lesson 9: bias_correct_moments -----------------------------------------------------------------
def _bc_zero_beta_shortcut(m, v, step, beta1, beta2):
    """With both betas 0 there is "nothing to correct": the input trees are returned."""
    if beta1 == 0 and beta2 == 0:
        require_same_tree("m", m, "v", v)
        require_int("step", step, minimum=1)
        return m, v
    return ref_adamw.bias_correct_moments(m, v, step, beta1, beta2)


def _bc_step_zero_ok(m, v, step, beta1, beta2):
    """``step`` checked like a state's step (``>= 0``): at 0 the correction divides by 0."""
    require_same_tree("m", m, "v", v)
    step = require_int("step", step, minimum=0)
    c1, c2 = 1.0 - beta1**step, 1.0 - beta2**step
    with np.errstate(all="ignore"):
        return ({k: (m[k] / np.float64(c1)).astype(m[k].dtype) for k in m},
                {k: (v[k] / np.float64(c2)).astype(v[k].dtype) for k in v})


def _bc_step_by_value(m, v, step, beta1, beta2):
    """``step`` checked by value only (``step < 1`` refused): 2.0 passes as a count."""
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    return ref_adamw.bias_correct_moments(m, v, int(step), beta1, beta2)


def _bc_no_structure_check(m, v, step, beta1, beta2):
    """m and v never compared: a key missing from v surfaces as a KeyError."""
    step = require_int("step", step, minimum=1)
    c1, c2 = 1.0 - beta1**step, 1.0 - beta2**step
    return {k: (m[k] / c1).astype(m[k].dtype) for k in m}, {k: (v[k] / c2).astype(v[k].dtype) for k in m}


# --- Lesson 10: adamw_param_step --------------------------------------------------------------------
def _ps_step(params, m_hat, v_hat, lr, eps):
    return {k: (params[k] - lr * m_hat[k] / (np.sqrt(v_hat[k]) + eps)).astype(params[k].dtype) for k in params}


def _ps_lr_finite_only(params, m_hat, v_hat, lr, eps):
    """lr checked for being finite, not for being positive."""
    require_same_tree("params", params, "m_hat", m_hat)
    require_same_tree("params", params, "v_hat", v_hat)
    if not np.isfinite(lr):
        raise ValueError(f"lr must be finite, got {lr}")
    require_real("eps", eps, strictly_positive=True)
    return _ps_step(params, m_hat, v_hat, lr, eps)


def _ps_lr_isinf(params, m_hat, v_hat, lr, eps):
    """``lr <= 0 or np.isinf(lr)`` refused: NaN passes both tests."""
    require_same_tree("params", params, "m_hat", m_hat)
    require_same_tree("params", params, "v_hat", v_hat)
    if lr <= 0 or np.isinf(lr):
        raise ValueError(f"lr must be a finite number > 0, got {lr}")
    require_real("eps", eps, strictly_positive=True)
    return _ps_step(params, m_hat, v_hat, lr, eps)


def _ps_eps_unchecked(params, m_hat, v_hat, lr, eps):
    """eps never validated: a negative floor goes through."""
    require_same_tree("params", params, "m_hat", m_hat)
    require_same_tree("params", params, "v_hat", v_hat)
    require_real("lr", lr, strictly_positive=True)
    return _ps_step(params, m_hat, v_hat, lr, eps)


def _ps_m_hat_unchecked(params, m_hat, v_hat, lr, eps):
    """v_hat compared with params, m_hat not: a missing key surfaces as a KeyError."""
    require_same_tree("params", params, "v_hat", v_hat)
    require_real("lr", lr, strictly_positive=True)
    require_real("eps", eps, strictly_positive=True)
    return _ps_step(params, m_hat, v_hat, lr, eps)


# --- Lesson 11: decoupled_weight_decay --------------------------------------------------------------
def _wd_decay(params, lr, weight_decay):
    return {k: (v * (1.0 - lr * weight_decay)).astype(v.dtype) for k, v in params.items()}


def _wd_negative_ok(params, lr, weight_decay):
    """weight_decay checked for being finite, not for its sign: an anti-decay inflates the weights."""
    _floating("params", params)
    require_real("lr", lr, strictly_positive=True)
    require_real("weight_decay", weight_decay)
    return _wd_decay(params, lr, weight_decay)


def _wd_nan_ok(params, lr, weight_decay):
    """``weight_decay < 0 or np.isinf(weight_decay)`` refused: NaN passes both tests."""
    _floating("params", params)
    require_real("lr", lr, strictly_positive=True)
    if weight_decay < 0 or np.isinf(weight_decay):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay}")
    return _wd_decay(params, lr, weight_decay)


def _wd_lr_unchecked(params, lr, weight_decay):
    """weight_decay validated, lr never: lr = 0 leaves the parameters undecayed without a word."""
    _floating("params", params)
    require_real("weight_decay", weight_decay, minimum=0.0)
    return _wd_decay(params, lr, weight_decay)


def _wd_no_dict_check(params, lr, weight_decay):
    """Arrays and scalars validated, the container not: a list fails with an AttributeError."""
    require_real("lr", lr, strictly_positive=True)
    require_real("weight_decay", weight_decay, minimum=0.0)
    for key, value in params.items():
        if not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"params[{key!r}] must be a floating-point array")
    return _wd_decay(params, lr, weight_decay)


# --- Lesson 12: clone_params ------------------------------------------------------------------------
def _clone_via_float64(params):
    """Copies through float64 "to lose nothing": a signalling NaN comes back quieted."""
    _floating("params", params)
    return {k: v.astype(np.float64).astype(v.dtype) for k, v in params.items()}


def _clone_empty_as_is(params):
    """An empty tree has nothing to copy: it is returned itself."""
    if isinstance(params, dict) and not params:
        return params
    return ref_params.clone_params(params)


def _clone_refills_callers_dict(params):
    """``out = params`` then every key refilled with a copy: the caller's dict is changed and returned."""
    _floating("params", params)
    out = params
    for key in list(out):
        out[key] = out[key].copy()
    return out


def _clone_integer_ok(params):
    """Refuses a non-dict and non-arrays, but copies an integer array (a step counter) along."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    for key, value in params.items():
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "fiu":
            raise TypeError(f"params[{key!r}] must be a numeric numpy array")
    return {k: v.copy() for k, v in params.items()}


def _clone_empty_refused(params):
    """An empty tree refused as a mistake."""
    if isinstance(params, dict) and not params:
        raise ValueError("params is empty: there is nothing to clone")
    return ref_params.clone_params(params)


# --- Lesson 13: scale_params ------------------------------------------------------------------------
def _scale_unchecked_c(params, c):
    """``c`` converted with ``float(c)`` and nothing more: NaN and the string '2' go through."""
    _floating("params", params)
    c = float(c)
    return {k: (v * c).astype(v.dtype) for k, v in params.items()}


def _scale_bool_ok(params, c):
    """``isinstance(c, (int, float))`` — True is an int to Python."""
    _floating("params", params)
    if not isinstance(c, (int, float, np.integer, np.floating)):
        raise TypeError(f"c must be a real number, got {type(c).__name__}")
    if not np.isfinite(c):
        raise ValueError(f"c must be finite, got {c}")
    return {k: (v * float(c)).astype(v.dtype) for k, v in params.items()}


def _scale_c_float32(params, c):
    """``np.float32(c)`` so that float32 trees stay float32: c = 0.1 is then off by 1.5e-9 in float64 arrays."""
    ref_params.scale_params(params, c)  # validation
    c32 = np.float32(c)
    return {k: (v * c32).astype(v.dtype) for k, v in params.items()}


def _scale_through_float16(params, c):
    """The product formed in float16 "to halve the temporary", then cast back."""
    ref_params.scale_params(params, c)  # validation
    return {k: (v.astype(np.float16) * np.float16(c)).astype(v.dtype) for k, v in params.items()}


# --- Lesson 14: subtract_params ---------------------------------------------------------------------
def _sub_keys_unnamed(a, b):
    """Key sets compared, but the message does not say which keys differ."""
    if isinstance(a, dict) and isinstance(b, dict) and set(a) != set(b):
        raise ValueError("a and b must have the same keys")
    return ref_params.subtract_params(a, b)


def _sub_only_unexpected_keys(a, b):
    """Keys of b that a lacks are refused; a key missing from b surfaces as a KeyError."""
    _floating("a", a)
    _floating("b", b)
    extra = sorted(set(b) - set(a))
    if extra:
        raise ValueError(f"b has keys a does not: {extra}")
    for k in a:
        if a[k].shape != b[k].shape:
            raise ValueError(f"a[{k!r}] and b[{k!r}] differ in shape: {a[k].shape} and {b[k].shape}")
    return {k: (a[k] - b[k]).astype(a[k].dtype) for k in a}


def _sub_b_dtype_unchecked(a, b):
    """a validated as a float tree, b only for its structure: an integer b is subtracted."""
    _floating("a", a)
    if not isinstance(b, dict) or set(b) != set(a):
        raise ValueError(f"b must have the keys of a; keys that differ: {sorted(set(a) ^ set(b))}")
    for k in a:
        if np.shape(b[k]) != a[k].shape:
            raise ValueError(f"b[{k!r}] has shape {np.shape(b[k])}, a[{k!r}] has {a[k].shape}")
    return {k: (a[k] - b[k]).astype(a[k].dtype) for k in a}


def _sub_a_unchecked(a, b):
    """b validated as a float tree, a never: a list under a key fails with an AttributeError."""
    _floating("b", b)
    if set(b) != set(a):
        raise ValueError(f"a and b must have the same keys: {sorted(set(a) ^ set(b))}")
    for k in a:
        if a[k].shape != b[k].shape:
            raise ValueError(f"a[{k!r}] and b[{k!r}] differ in shape")
    return {k: (a[k] - b[k]).astype(a[k].dtype) for k in a}


# --- Lesson 15: average_params ----------------------------------------------------------------------
def _avg_mean(list_of_params, w):
    first = list_of_params[0]
    out = {}
    for key, value in first.items():
        acc = np.zeros(value.shape, np.float64)
        for w_i, tree in zip(w, list_of_params):
            acc += np.float64(w_i) * tree[key]
        out[key] = acc.astype(value.dtype)
    return out


def _avg_zero_weight_refused(list_of_params, weights=None):
    """Every weight must be positive: a zero weight (a worker with no data) is refused."""
    if weights is not None and any(float(w) == 0 for w in np.ravel(weights)):
        raise ValueError("weights must be > 0")
    return ref_params.average_params(list_of_params, weights)


def _avg_first_tree_in_place(list_of_params, weights=None):
    """The sum accumulated into the first tree's arrays (no extra memory), then scaled in place."""
    k = len(list_of_params)
    w = np.full(k, 1.0 / k) if weights is None else np.asarray(weights, np.float64) / np.sum(weights)
    out = {}
    for key in list_of_params[0]:
        acc = list_of_params[0][key]
        acc *= acc.dtype.type(w[0])
        for w_i, tree in zip(w[1:], list_of_params[1:]):
            acc += acc.dtype.type(w_i) * tree[key]
        out[key] = acc
    return out


def _avg_empty_index_error(list_of_params, weights=None):
    """No emptiness check: ``list_of_params[0]`` comes first and raises an IndexError."""
    list_of_params[0]
    return ref_params.average_params(list_of_params, weights)


def _avg_wraps_a_dict(list_of_params, weights=None):
    """A bare dict taken for "a list of one"."""
    if len(list_of_params) == 0:
        raise ValueError("list_of_params is empty")
    if isinstance(list_of_params, dict):
        list_of_params = [list_of_params]
    return ref_params.average_params(list_of_params, weights)


def _avg_valid_trees(list_of_params):
    if isinstance(list_of_params, dict) or len(list_of_params) == 0:
        raise ValueError("list_of_params must be a non-empty list of trees")
    for i, tree in enumerate(list_of_params):
        require_same_tree("list_of_params[0]", list_of_params[0], f"list_of_params[{i}]", tree)


def _avg_zip_truncates(list_of_params, weights=None):
    """The length of ``weights`` never compared with k: ``zip`` drops the unweighted trees."""
    _avg_valid_trees(list_of_params)
    w = [1.0] * len(list_of_params) if weights is None else [float(x) for x in weights]
    if any(x < 0 or not np.isfinite(x) for x in w) or sum(w) <= 0:
        raise ValueError(f"weights must be finite, >= 0, with a positive sum, got {w}")
    return _avg_mean(list_of_params, [x / sum(w) for x in w])


def _avg_negative_ok(list_of_params, weights=None):
    """Weights checked for their number and finiteness, not for their sign."""
    _avg_valid_trees(list_of_params)
    k = len(list_of_params)
    w = [1.0] * k if weights is None else [float(x) for x in weights]
    if len(w) != k or not all(np.isfinite(w)):
        raise ValueError(f"weights must be {k} finite numbers, got {w}")
    with np.errstate(all="ignore"):
        return _avg_mean(list_of_params, [x / sum(w) if sum(w) else np.nan for x in w])


def _avg_zero_sum_ok(list_of_params, weights=None):
    """Each weight checked, their sum never: all zeros divide 0 by 0."""
    _avg_valid_trees(list_of_params)
    k = len(list_of_params)
    w = np.ones(k) if weights is None else np.array([float(x) for x in weights])
    if len(w) != k or np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be {k} finite numbers >= 0, got {w.tolist()}")
    with np.errstate(all="ignore"):
        return _avg_mean(list_of_params, w / w.sum())


def _avg_nan_weight_ok(list_of_params, weights=None):
    """``w < 0`` and ``np.isinf(w)`` refused: a NaN weight passes both tests."""
    _avg_valid_trees(list_of_params)
    k = len(list_of_params)
    w = np.ones(k) if weights is None else np.asarray(weights, np.float64)
    if w.ndim != 1 or len(w) != k or np.any(w < 0) or np.any(np.isinf(w)) or w.sum() == 0:
        raise ValueError(f"weights must be {k} finite numbers >= 0 with a positive sum, got {w.tolist()}")
    with np.errstate(all="ignore"):
        return _avg_mean(list_of_params, w / w.sum())


def _avg_checked_weights(weights, k):
    """The weights validated as the reference does (on k empty trees), then normalised."""
    ref_params.average_params([{}] * k, weights)
    return [1.0 / k] * k if weights is None else list(np.asarray(weights, np.float64) / np.sum(weights))


def _avg_no_structure_check(list_of_params, weights=None):
    """The trees never compared: a key missing from a later tree surfaces as a KeyError."""
    if isinstance(list_of_params, dict) or len(list_of_params) == 0:
        raise ValueError("list_of_params must be a non-empty list of trees")
    return _avg_mean(list_of_params, _avg_checked_weights(weights, len(list_of_params)))


def _avg_keys_only(list_of_params, weights=None):
    """Key sets compared, shapes never: a (1,) array broadcasts into the (3,) accumulator."""
    if isinstance(list_of_params, dict) or len(list_of_params) == 0:
        raise ValueError("list_of_params must be a non-empty list of trees")
    first = list_of_params[0]
    for i, tree in enumerate(list_of_params):
        if set(tree) != set(first):
            raise ValueError(f"list_of_params[{i}] keys differ: {sorted(set(tree) ^ set(first))}")
    return _avg_mean(list_of_params, _avg_checked_weights(weights, len(list_of_params)))


def _avg_float32_weights(list_of_params, weights=None):
    """Weights normalised in float32 (the trees' dtype), products and sum in float64: 7 × float32(1/7) ≠ 1."""
    ref_params.average_params(list_of_params, weights)  # validation
    k = len(list_of_params)
    w = np.full(k, 1.0 / k, np.float32) if weights is None else \
        (np.asarray(weights, np.float64) / np.sum(weights)).astype(np.float32)
    return _avg_mean(list_of_params, w)


# --- Lesson 21: init_outer_optimizer ----------------------------------------------------------------
def _ioo_cleans_params_in_place(params):
    """Guards against a diverged model by cleaning it in place before building the zero buffer."""
    _floating("params", params)
    for value in params.values():
        np.nan_to_num(value, copy=False)
    return ref_outer.init_outer_optimizer(params)


def _ioo_no_dict_check(params):
    """Values validated, the container not: a list fails with an AttributeError."""
    for key, value in params.items():
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"params[{key!r}] must be a floating-point array")
    return {"step": 0, "momentum_buffer": {k: np.zeros_like(v) for k, v in params.items()}}


def _ioo_integer_ok(params):
    """Refuses a non-dict, but gives an integer array an integer buffer."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    return {"step": 0, "momentum_buffer": {k: np.zeros_like(v) for k, v in params.items()}}


# --- Lesson 22: update_outer_momentum ---------------------------------------------------------------
def _uom_buffer(state, outer_grad, mu):
    buf = state["momentum_buffer"]
    return {k: (mu * buf[k] + outer_grad[k]).astype(buf[k].dtype) for k in buf}


def _uom_counts_on_caller(state, outer_grad, momentum):
    """Counts the round on the state passed in (``state["step"] += 1``), then builds the new one."""
    new = ref_outer.update_outer_momentum(state, outer_grad, momentum)
    state["step"] += 1
    return {"step": state["step"], "momentum_buffer": new["momentum_buffer"]}


def _uom_momentum_one_ok(state, outer_grad, momentum):
    """momentum checked against [0, 1] — 1 included (the buffer then never forgets)."""
    ref_outer.validate_outer_state(state)
    require_same_tree("state['momentum_buffer']", state["momentum_buffer"], "outer_grad", outer_grad)
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    return {"step": state["step"] + 1, "momentum_buffer": _uom_buffer(state, outer_grad, momentum)}


def _uom_negative_ok(state, outer_grad, momentum):
    """Only ``momentum >= 1`` refused: a negative momentum goes through."""
    ref_outer.validate_outer_state(state)
    require_same_tree("state['momentum_buffer']", state["momentum_buffer"], "outer_grad", outer_grad)
    if not momentum < 1.0:
        raise ValueError(f"momentum must be < 1, got {momentum}")
    return {"step": state["step"] + 1, "momentum_buffer": _uom_buffer(state, outer_grad, momentum)}


def _uom_missing_key_error(state, outer_grad, momentum):
    """Unexpected keys of outer_grad refused; a missing one surfaces as a KeyError."""
    ref_outer.validate_outer_state(state)
    mu = require_momentum(momentum)
    buf = state["momentum_buffer"]
    extra = sorted(set(outer_grad) - set(buf))
    if extra:
        raise ValueError(f"outer_grad has keys the buffer lacks: {extra}")
    for k in buf:
        if outer_grad[k].shape != buf[k].shape:
            raise ValueError(f"outer_grad[{k!r}] has shape {outer_grad[k].shape}, the buffer {buf[k].shape}")
    return {"step": state["step"] + 1, "momentum_buffer": _uom_buffer(state, outer_grad, mu)}


def _uom_bool_step_ok(state, outer_grad, momentum):
    """``isinstance(step, int) and step >= 0`` — True is an int to Python."""
    if not isinstance(state, dict) or set(state) != {"step", "momentum_buffer"}:
        raise ValueError("state must have exactly the keys 'step' and 'momentum_buffer'")
    if not isinstance(state["step"], int) or state["step"] < 0:
        raise ValueError(f"state['step'] must be an int >= 0, got {state['step']!r}")
    require_same_tree("state['momentum_buffer']", state["momentum_buffer"], "outer_grad", outer_grad)
    mu = require_momentum(momentum)
    return {"step": int(state["step"]) + 1, "momentum_buffer": _uom_buffer(state, outer_grad, mu)}


def _uom_extra_state_keys_ok(state, outer_grad, momentum):
    """The step and the buffer validated, the state's other keys never looked at."""
    require_int("state['step']", state["step"], minimum=0)
    require_same_tree("state['momentum_buffer']", state["momentum_buffer"], "outer_grad", outer_grad)
    mu = require_momentum(momentum)
    return {"step": state["step"] + 1, "momentum_buffer": _uom_buffer(state, outer_grad, mu)}


# --- Lesson 23: nesterov_outer_step -----------------------------------------------------------------
def _nos_step(params, state, outer_grad, lr, mu):
    buf = state["momentum_buffer"]
    new_buf = {k: (mu * buf[k] + outer_grad[k]).astype(buf[k].dtype) for k in buf}
    new_params = {k: (params[k] - lr * (outer_grad[k] + mu * new_buf[k])).astype(params[k].dtype) for k in params}
    return new_params, {"step": state["step"] + 1, "momentum_buffer": new_buf}


def _nos_structure(params, state, outer_grad):
    ref_outer.validate_outer_state(state, params)
    require_same_tree("params", params, "outer_grad", outer_grad)


def _nos_counts_on_caller(params, state, outer_grad, lr, momentum):
    """Counts the round on the state passed in (``state["step"] += 1``), then builds the new one."""
    new_params, new_state = ref_outer.nesterov_outer_step(params, state, outer_grad, lr, momentum)
    state["step"] += 1
    return new_params, {"step": state["step"], "momentum_buffer": new_state["momentum_buffer"]}


def _nos_lr_finite_only(params, state, outer_grad, lr, momentum):
    """lr checked for being finite, not for being positive."""
    _nos_structure(params, state, outer_grad)
    if not np.isfinite(lr):
        raise ValueError(f"lr must be finite, got {lr}")
    return _nos_step(params, state, outer_grad, lr, require_momentum(momentum))


def _nos_lr_isinf(params, state, outer_grad, lr, momentum):
    """``lr <= 0 or np.isinf(lr)`` refused: NaN passes both tests."""
    _nos_structure(params, state, outer_grad)
    if lr <= 0 or np.isinf(lr):
        raise ValueError(f"lr must be a finite number > 0, got {lr}")
    return _nos_step(params, state, outer_grad, lr, require_momentum(momentum))


def _nos_momentum_unchecked(params, state, outer_grad, lr, momentum):
    """lr validated, momentum never: 1.5 makes the buffer grow without bound."""
    _nos_structure(params, state, outer_grad)
    return _nos_step(params, state, outer_grad, require_real("lr", lr, strictly_positive=True), momentum)


def _nos_keys_only(params, state, outer_grad, lr, momentum):
    """outer_grad's keys compared with params', its shapes never: NumPy's anonymous error."""
    ref_outer.validate_outer_state(state, params)
    if set(outer_grad) != set(params):
        raise ValueError(f"outer_grad must have the keys of params, got {sorted(outer_grad)}")
    lr = require_real("lr", lr, strictly_positive=True)
    return _nos_step(params, state, outer_grad, lr, require_momentum(momentum))


# --- Lesson 24: compute_outer_gradient --------------------------------------------------------------
def _cog_in_place(global_params, worker_params):
    """Δ computed into the global model's arrays (no extra memory)."""
    ref_outer.compute_outer_gradient(global_params, worker_params)  # validation
    mean = ref_params.average_params(list(worker_params))
    for k in global_params:
        global_params[k] -= mean[k]
    return global_params


def _cog_missing_key_error(global_params, worker_params):
    """Workers' unexpected keys refused; a missing one surfaces as a KeyError."""
    require_float_tree("global_params", global_params)
    if isinstance(worker_params, dict) or len(worker_params) == 0:
        raise TypeError("worker_params must be a non-empty list of trees")
    for i, tree in enumerate(worker_params):
        extra = sorted(set(tree) - set(global_params))
        if extra:
            raise ValueError(f"worker_params[{i}] has unexpected keys {extra}")
    k = len(worker_params)
    return {key: (g - sum(np.float64(1.0 / k) * w[key] for w in worker_params)).astype(g.dtype)
            for key, g in global_params.items()}


def _cog_shapes_unchecked(global_params, worker_params):
    """Workers' keys compared with the global model's, their shapes never: a (1,) array broadcasts."""
    require_float_tree("global_params", global_params)
    if isinstance(worker_params, dict) or len(worker_params) == 0:
        raise TypeError("worker_params must be a non-empty list of trees")
    for i, tree in enumerate(worker_params):
        if set(tree) != set(global_params):
            raise ValueError(f"worker_params[{i}] keys differ: {sorted(set(tree) ^ set(global_params))}")
    k = len(worker_params)
    return {key: (g - sum(np.float64(1.0 / k) * w[key] for w in worker_params)).astype(g.dtype)
            for key, g in global_params.items()}


def _cog_global_unchecked(global_params, worker_params):
    """The workers validated against each other, global_params never: an integer model gives an integer Δ."""
    if isinstance(worker_params, dict) or len(worker_params) == 0:
        raise TypeError("worker_params must be a non-empty list of trees")
    mean = ref_params.average_params(list(worker_params))
    if set(mean) != set(global_params):
        raise ValueError(f"worker_params keys differ from global_params: {sorted(set(mean) ^ set(global_params))}")
    return {k: (global_params[k] - mean[k]).astype(global_params[k].dtype) for k in global_params}


def _cog_global_values_only(global_params, worker_params):
    """global_params' arrays checked, not that it is a dict: a list fails with an AttributeError."""
    for key, value in global_params.items():
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"global_params[{key!r}] must be a floating-point array")
    return ref_outer.compute_outer_gradient(global_params, worker_params)


WITNESSES = {
    "init_adamw_state": {
        "mutation": [("non-finite parameters cleaned in place", _init_cleans_params_in_place)],
        "aliasing": [existing("init_adamw_state", "m and v are the same arrays"),
                     existing("init_adamw_state", "one zero tree for both moments"),
                     ("an all-zero parameter reused as its first moment", _init_reuses_zero_params)],
        "failure modes": [existing("init_adamw_state", "no validation at all"),
                          ("integer arrays get integer zeros", _init_integer_arrays_ok),
                          existing("init_adamw_state", "only integer dtypes refused"),
                          existing("init_adamw_state", "np.asarray on values")],
        "metric that proves it correct": [existing("init_adamw_state", "step starts at 1 (contract"),
                                          existing("init_adamw_state", "np.zeros(shape): float64 moments for"),
                                          existing("init_adamw_state", "float16 parameters get float32 moments"),
                                          existing("init_adamw_state", "moments as params * 0"),
                                          existing("init_adamw_state", "step is numpy.int64(0)")],
    },
    "update_moments": {
        "mutation": [existing("update_moments", "updates the state in place"),
                     existing("update_moments", "beta1 = 0 shortcut returns grads[k] itself"),
                     ("the step counted on the caller's state", _um_counts_on_caller)],
        "failure modes": [("beta = 1 accepted", _um_beta_one_ok),
                          ("a negative beta accepted", _um_negative_beta_ok),
                          existing("update_moments", "NaN betas slip through"),
                          ("shapes never compared", _um_no_shape_check),
                          ("NumPy's shape errors re-raised: broadcastable shapes slip through", _um_numpy_shape_errors),
                          ("a key mismatch refused without naming the key", _um_keys_unnamed),
                          existing("update_moments", "state['step'] not validated")],
        "metric that proves it correct": [existing("update_moments", "beta and 1 - beta swapped (contract"),
                                          existing("update_moments", "v accumulates g instead of g squared"),
                                          existing("update_moments", "step not incremented"),
                                          existing("update_moments", "no cast back: float64 gradients"),
                                          existing("update_moments", "gradients cast to the moment dtype")],
    },
    "bias_correct_moments": {
        "mutation": [existing("bias_correct_moments", "returns the input trees when the correction is exactly 1"),
                     existing("bias_correct_moments", "divides the caller's moments in place"),
                     ("betas (0, 0) return the input trees", _bc_zero_beta_shortcut)],
        "failure modes": [("step = 0 accepted", _bc_step_zero_ok),
                          ("step checked by value only", _bc_step_by_value),
                          existing("bias_correct_moments", "step=True accepted as 1"),
                          ("m and v never compared", _bc_no_structure_check),
                          existing("bias_correct_moments", "extra keys of v ignored"),
                          existing("bias_correct_moments", "m and v compared by keys only"),
                          existing("bias_correct_moments", "NaN betas slip through")],
        "metric that proves it correct": [existing("bias_correct_moments", "bias correction forgotten"),
                                          existing("bias_correct_moments", "uses step - 1"),
                                          existing("bias_correct_moments", "corrects v with beta1"),
                                          existing("bias_correct_moments", "NumPy float64 correction factor")],
    },
    "adamw_param_step": {
        "mutation": [existing("adamw_param_step", "updates params in place")],
        "failure modes": [("lr checked for finiteness only", _ps_lr_finite_only),
                          existing("adamw_param_step", "lr = inf / NaN accepted"),
                          ("lr = NaN passes `lr <= 0 or isinf`", _ps_lr_isinf),
                          ("eps never validated", _ps_eps_unchecked),
                          existing("adamw_param_step", "eps = 0 accepted"),
                          ("m_hat never compared with params", _ps_m_hat_unchecked),
                          existing("adamw_param_step", "extra keys in m_hat/v_hat ignored")],
        "metric that proves it correct": [existing("adamw_param_step", "eps inside the square root (contract"),
                                          existing("adamw_param_step", "divides by v_hat, not sqrt"),
                                          existing("adamw_param_step", "adds the step (ascent)"),
                                          existing("adamw_param_step", "no cast back"),
                                          existing("adamw_param_step", "direction clipped")],
    },
    "decoupled_weight_decay": {
        "mutation": [existing("decoupled_weight_decay", "decays the parameters in place"),
                     existing("decoupled_weight_decay", "weight_decay = 0 returns the same arrays")],
        "which arrays": [existing("decoupled_weight_decay", "decays the weights but not the biases"),
                         existing("decoupled_weight_decay", "biases exempt from the decay")],
        "failure modes": [("a negative weight_decay accepted", _wd_negative_ok),
                          existing("decoupled_weight_decay", "weight_decay = inf / NaN accepted"),
                          ("weight_decay = NaN passes `< 0 or isinf`", _wd_nan_ok),
                          ("lr never validated", _wd_lr_unchecked),
                          existing("decoupled_weight_decay", "integer arrays accepted"),
                          ("a list of arrays fails with AttributeError", _wd_no_dict_check)],
        "metric that proves it correct": [existing("decoupled_weight_decay", "not scaled by lr"),
                                          existing("decoupled_weight_decay", "NumPy float64 factor"),
                                          existing("decoupled_weight_decay", "refuses lr * weight_decay > 1"),
                                          existing("decoupled_weight_decay", "factor (1 - lr)^weight_decay")],
    },
    "clone_params": {
        "values": [existing("clone_params", "value + 0.0"),
                   ("copied through float64", _clone_via_float64)],
        "memory": [existing("clone_params", "dict(params): a new dict aliasing"),
                   existing("clone_params", "copy.copy (shallow)"),
                   existing("clone_params", "returns params itself"),
                   existing("clone_params", "np.ascontiguousarray"),
                   ("an empty dict returned itself", _clone_empty_as_is)],
        "mutation": [existing("clone_params", "np.frombuffer copy"),
                     ("the caller's dict refilled with copies and returned", _clone_refills_callers_dict)],
        "failure modes": [existing("clone_params", "copy.deepcopy without any validation"),
                          ("integer arrays copied along", _clone_integer_ok),
                          existing("clone_params", "np.array(value) on anything"),
                          existing("clone_params", "only integer arrays refused"),
                          ("an empty dict refused", _clone_empty_refused)],
        "metric that proves it correct": [existing("clone_params", "casts every array to float32"),
                                          existing("clone_params", "astype(np.float32)")],
    },
    "scale_params": {
        "mutation": [existing("scale_params", "scales in place and returns params"),
                     existing("scale_params", "c = 1 returns the same arrays")],
        "failure modes": [("c converted with float(c) and nothing more", _scale_unchecked_c),
                          ("c = True accepted", _scale_bool_ok),
                          existing("scale_params", "refuses nan and +inf but not -inf"),
                          existing("scale_params", "float(c): a 0-d / one-element array accepted"),
                          existing("scale_params", "integer arrays accepted and truncated"),
                          existing("scale_params", "only Python int/float accepted")],
        "rounding": [("c rounded to float32 first", _scale_c_float32),
                     ("the product formed in float16", _scale_through_float16)],
        "metric that proves it correct": [existing("scale_params", "scales only the weights"),
                                          existing("scale_params", "scales the weights but not the biases"),
                                          existing("scale_params", "np.float64(c) without astype")],
    },
    "subtract_params": {
        "mutation": [existing("subtract_params", "subtracts in place into a (contract")],
        "failure modes": [existing("subtract_params", "no structure check: broadcasting"),
                          existing("subtract_params", "accepts b that broadcasts"),
                          ("a key mismatch refused without naming the keys", _sub_keys_unnamed),
                          ("a key missing from b surfaces as KeyError", _sub_only_unexpected_keys),
                          ("b's dtypes never checked", _sub_b_dtype_unchecked),
                          ("a never validated", _sub_a_unchecked)],
        "rounding": [existing("subtract_params", "b cast to a's dtype before subtracting")],
        "metric that proves it correct": [existing("subtract_params", "b - a: local minus original"),
                                          existing("subtract_params", "no cast: float32 - float64"),
                                          existing("subtract_params", "result in b's dtype")],
    },
    "average_params": {
        "normalisation": [existing("average_params", "weights not normalised: sum"),
                          existing("average_params", "weighted sum divided by k"),
                          ("zero weights refused", _avg_zero_weight_refused)],
        "precision": [existing("average_params", "accumulated in the trees' dtype"),
                      existing("average_params", "w_i * theta_i rounded in float32")],
        "mutation": [existing("average_params", "k = 1 returns the tree's own arrays"),
                     ("the sum accumulated into the first tree in place", _avg_first_tree_in_place)],
        "failure modes": [("an empty list raises IndexError", _avg_empty_index_error),
                          ("a bare dict taken for a list of one", _avg_wraps_a_dict),
                          ("zip drops the unweighted trees", _avg_zip_truncates),
                          ("negative weights accepted", _avg_negative_ok),
                          ("a zero sum divides 0 by 0", _avg_zero_sum_ok),
                          existing("average_params", "infinite weight accepted"),
                          ("a NaN weight passes `< 0 or isinf`", _avg_nan_weight_ok),
                          existing("average_params", "weights raveled"),
                          ("trees never compared: KeyError", _avg_no_structure_check),
                          existing("average_params", "extra keys in later trees ignored"),
                          ("keys compared, shapes never", _avg_keys_only)],
        "metric that proves it correct": [existing("average_params", "weights ignored: always the uniform mean"),
                                          existing("average_params", "returns (a copy of) the first tree"),
                                          existing("average_params", "result in the promoted dtype"),
                                          ("weights normalised in float32", _avg_float32_weights)],
    },
    "init_outer_optimizer": {
        "mutation": [("non-finite parameters cleaned in place", _ioo_cleans_params_in_place)],
        "aliasing": [existing("init_outer_optimizer", "an all-zero parameter array reused as its own buffer")],
        "failure modes": [("a list of arrays fails with AttributeError", _ioo_no_dict_check),
                          ("integer arrays get an integer buffer", _ioo_integer_ok),
                          existing("init_outer_optimizer", "np.asarray on values"),
                          existing("init_outer_optimizer", "only integer dtypes refused")],
        "metric that proves it correct": [existing("init_outer_optimizer", "buffer starts as a copy of the parameters"),
                                          existing("init_outer_optimizer", "np.zeros(shape): float64 buffer"),
                                          existing("init_outer_optimizer", "step starts at 1 (contract"),
                                          existing("init_outer_optimizer", "buffer = params * 0"),
                                          existing("init_outer_optimizer", "step is numpy.int64"),
                                          existing("init_outer_optimizer", "float16 parameters get a float32 buffer"),
                                          existing("init_outer_optimizer", "extra state key 'nesterov'")],
    },
    "update_outer_momentum": {
        "dampening 0": [existing("update_outer_momentum", "dampened like Adam: mu b + (1 - mu) Delta"),
                        existing("update_outer_momentum", "dampened like Adam: mu b + (1 - mu) delta")],
        "mutation": [existing("update_outer_momentum", "mu = 0 returns outer_grad's arrays"),
                     existing("update_outer_momentum", "updates the buffer in place"),
                     ("the round counted on the caller's state", _uom_counts_on_caller)],
        "dtype": [existing("update_outer_momentum", "no cast: float64 Delta")],
        "failure modes": [("momentum = 1 accepted", _uom_momentum_one_ok),
                          ("a negative momentum accepted", _uom_negative_ok),
                          existing("update_outer_momentum", "NaN momentum slips through"),
                          ("a key missing from outer_grad surfaces as KeyError", _uom_missing_key_error),
                          existing("update_outer_momentum", "extra keys in outer_grad ignored"),
                          existing("update_outer_momentum", "no shape check"),
                          existing("update_outer_momentum", "state barely validated"),
                          ("step = True passes isinstance(step, int)", _uom_bool_step_ok),
                          ("the state's other keys never looked at", _uom_extra_state_keys_ok)],
        "metric that proves it correct": [existing("update_outer_momentum", "mu (b + Delta)"),
                                          existing("update_outer_momentum", "round not counted")],
    },
    "nesterov_outer_step": {
        "mutation": [existing("nesterov_outer_step", "updates params in place (contract"),
                     existing("nesterov_outer_step", "mu = 0: the new buffer is outer_grad's own arrays"),
                     ("the round counted on the caller's state", _nos_counts_on_caller)],
        "failure modes": [("lr checked for finiteness only", _nos_lr_finite_only),
                          existing("nesterov_outer_step", "lr = inf / NaN accepted"),
                          ("lr = NaN passes `lr <= 0 or isinf`", _nos_lr_isinf),
                          ("momentum never validated", _nos_momentum_unchecked),
                          ("outer_grad compared by keys only", _nos_keys_only),
                          existing("nesterov_outer_step", "params never compared with outer_grad")],
        "metric that proves it correct": [existing("nesterov_outer_step", "heavy-ball"),
                                          existing("nesterov_outer_step", "look-ahead with the old buffer: theta"),
                                          existing("nesterov_outer_step", "ascent: theta + lr"),
                                          existing("nesterov_outer_step", "no cast back"),
                                          existing("nesterov_outer_step", "step not incremented")],
    },
    "compute_outer_gradient": {
        "precision": [existing("compute_outer_gradient", "mean accumulated in float32")],
        "mutation": [("Δ computed into the global model's arrays", _cog_in_place)],
        "failure modes": [existing("compute_outer_gradient", "no own validation"),
                          existing("compute_outer_gradient", "a bare dict wrapped into a list of one"),
                          ("a key missing from a worker surfaces as KeyError", _cog_missing_key_error),
                          existing("compute_outer_gradient", "extra keys in the workers ignored"),
                          ("workers' shapes never compared", _cog_shapes_unchecked),
                          ("global_params never validated", _cog_global_unchecked),
                          ("global_params' arrays checked, not that it is a dict", _cog_global_values_only)],
        "metric that proves it correct": [existing("compute_outer_gradient", "reversed sign: mean - global"),
                                          existing("compute_outer_gradient", "sum over workers instead of the mean"),
                                          existing("compute_outer_gradient", "only the last worker"),
                                          existing("compute_outer_gradient", "result in the workers' dtype")],
    },
}
