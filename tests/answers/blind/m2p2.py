"""Red team, Module 2 Part 2 (inner optimizer: AdamW): wrong answers and correct alternatives written from
the release notebooks only."""

from __future__ import annotations

import math

import numpy as np


# ----------------------------------------------------------------------------------------------------------
# Helpers a student would write once and reuse (validation only; every answer does its own arithmetic)
# ----------------------------------------------------------------------------------------------------------
def _float_tree(name, tree):
    if not isinstance(tree, dict):
        raise TypeError(f"{name} must be a dict of floating-point arrays, got {type(tree).__name__}")
    for key, value in tree.items():
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"{name}[{key!r}] must be a floating-point numpy array")


def _same_structure(ref_name, ref, name, tree):
    if set(tree) != set(ref):
        raise ValueError(f"{name} has keys {sorted(tree)}, expected the keys of {ref_name} {sorted(ref)}")
    for key in ref:
        if tree[key].shape != ref[key].shape:
            raise ValueError(f"{name}[{key!r}] has shape {tree[key].shape}, expected {ref[key].shape}")


def _real(x):
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _beta(name, b):
    if not _real(b) or not (0.0 <= float(b) < 1.0):
        raise ValueError(f"{name} must be a real number in [0, 1), got {b!r}")
    return float(b)


def _step_int(step):
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"step must be an int, got {type(step).__name__}")
    return int(step)


def _state(state):
    if not isinstance(state, dict) or set(state) != {"step", "m", "v"}:
        raise ValueError("state must be a dict with exactly the keys 'step', 'm', 'v'")
    step = _step_int(state["step"])
    if step < 0:
        raise ValueError(f"state['step'] must be >= 0, got {step}")
    _float_tree("state['m']", state["m"])
    _float_tree("state['v']", state["v"])
    _same_structure("state['m']", state["m"], "state['v']", state["v"])
    return step


def _grads_like(m, grads):
    _float_tree("grads", grads)
    if set(grads) != set(m):
        raise ValueError(f"grads has keys {sorted(grads)}, expected {sorted(m)}")
    for key in m:
        if grads[key].shape != m[key].shape:
            raise ValueError(f"grads[{key!r}] has shape {grads[key].shape}, expected {m[key].shape}")


def _positive(name, x):
    if not _real(x) or not math.isfinite(float(x)) or float(x) <= 0:
        raise ValueError(f"{name} must be a finite real number > 0, got {x!r}")
    return float(x)


# ==========================================================================================================
# Lesson 7: init_adamw_state
# ==========================================================================================================
def _init_step_one(params):
    _float_tree("params", params)
    return {"step": 1, "m": {k: np.zeros_like(a) for k, a in params.items()},
            "v": {k: np.zeros_like(a) for k, a in params.items()}}


def _init_one_tree(params):
    _float_tree("params", params)
    zeros = {k: np.zeros_like(a) for k, a in params.items()}
    return {"step": 0, "m": zeros, "v": zeros}


def _init_shared_arrays(params):
    _float_tree("params", params)
    m = {k: np.zeros_like(a) for k, a in params.items()}
    return {"step": 0, "m": m, "v": dict(m)}  # two dicts, but the same arrays under every key


def _init_float64(params):
    _float_tree("params", params)
    return {"step": 0, "m": {k: np.zeros(a.shape) for k, a in params.items()},
            "v": {k: np.zeros(a.shape) for k, a in params.items()}}


def _init_half_upcast(params):
    _float_tree("params", params)
    dt = lambda a: np.float32 if a.dtype == np.float16 else a.dtype  # "fp16 moments are unsafe"
    return {"step": 0, "m": {k: np.zeros(a.shape, dt(a)) for k, a in params.items()},
            "v": {k: np.zeros(a.shape, dt(a)) for k, a in params.items()}}


def _init_times_zero(params):
    _float_tree("params", params)
    return {"step": 0, "m": {k: a * 0 for k, a in params.items()}, "v": {k: a * 0.0 for k, a in params.items()}}


def _init_numpy_step(params):
    _float_tree("params", params)
    return {"step": np.int64(0), "m": {k: np.zeros_like(a) for k, a in params.items()},
            "v": {k: np.zeros_like(a) for k, a in params.items()}}


def _init_only_int_refused(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, a in params.items():
        if np.issubdtype(np.asarray(a).dtype, np.integer):
            raise TypeError(f"params[{k!r}] has an integer dtype")
    return {"step": 0, "m": {k: np.zeros_like(a) for k, a in params.items()},
            "v": {k: np.zeros_like(a) for k, a in params.items()}}


def _init_accepts_lists(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    arrays = {k: np.asarray(a) for k, a in params.items()}
    for k, a in arrays.items():
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"params[{k!r}] must be floating")
    return {"step": 0, "m": {k: np.zeros_like(a) for k, a in arrays.items()},
            "v": {k: np.zeros_like(a) for k, a in arrays.items()}}


def _init_no_validation(params):
    return {"step": 0, "m": {k: np.zeros_like(a) for k, a in params.items()},
            "v": {k: np.zeros_like(a) for k, a in params.items()}}


def _init_alt_loop(params):
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, not {type(params).__name__}")
    m, v = {}, {}
    for key in params:
        arr = params[key]
        if not (isinstance(arr, np.ndarray) and arr.dtype.kind == "f"):
            raise TypeError(f"params[{key!r}] is not a floating-point ndarray")
        m[key] = np.zeros(arr.shape, dtype=arr.dtype)
        v[key] = np.full(arr.shape, 0, dtype=arr.dtype)
    return {"step": 0, "m": m, "v": v}


def _init_alt_empty_fill(params):
    _float_tree("params", params)
    m = {k: np.empty_like(a) for k, a in params.items()}
    v = {k: np.empty_like(a) for k, a in params.items()}
    for tree in (m, v):
        for a in tree.values():
            a.fill(0)
    return dict(step=0, m=m, v=v)


# ==========================================================================================================
# Lesson 8: update_moments
# ==========================================================================================================
def _um_body(state, grads, beta1, beta2):
    step = _state(state)
    b1, b2 = _beta("beta1", beta1), _beta("beta2", beta2)
    _grads_like(state["m"], grads)
    return step, b1, b2


def _um_swapped(state, grads, beta1, beta2):
    step, b1, b2 = _um_body(state, grads, beta1, beta2)
    m = {k: ((1 - b1) * a + b1 * grads[k]).astype(a.dtype, copy=False) for k, a in state["m"].items()}
    v = {k: ((1 - b2) * a + b2 * grads[k] ** 2).astype(a.dtype, copy=False) for k, a in state["v"].items()}
    return {"step": step + 1, "m": m, "v": v}


def _um_v_with_beta1(state, grads, beta1, beta2):
    step, b1, b2 = _um_body(state, grads, beta1, beta2)
    m = {k: (b1 * a + (1 - b1) * grads[k]).astype(a.dtype, copy=False) for k, a in state["m"].items()}
    v = {k: (b2 * a + (1 - b1) * grads[k] ** 2).astype(a.dtype, copy=False) for k, a in state["v"].items()}
    return {"step": step + 1, "m": m, "v": v}


def _um_no_count(state, grads, beta1, beta2):
    step, b1, b2 = _um_body(state, grads, beta1, beta2)
    m = {k: (b1 * a + (1 - b1) * grads[k]).astype(a.dtype, copy=False) for k, a in state["m"].items()}
    v = {k: (b2 * a + (1 - b2) * grads[k] ** 2).astype(a.dtype, copy=False) for k, a in state["v"].items()}
    return {"step": step, "m": m, "v": v}


def _um_in_place(state, grads, beta1, beta2):
    step, b1, b2 = _um_body(state, grads, beta1, beta2)
    for k in state["m"]:
        state["m"][k] *= b1
        state["m"][k] += (1 - b1) * grads[k]
        state["v"][k] *= b2
        state["v"][k] += (1 - b2) * grads[k] ** 2
    return {"step": step + 1, "m": state["m"], "v": state["v"]}


def _um_dtype_of_grads(state, grads, beta1, beta2):
    step, b1, b2 = _um_body(state, grads, beta1, beta2)
    m = {k: b1 * a + (1 - b1) * grads[k] for k, a in state["m"].items()}           # no cast back
    v = {k: b2 * a + (1 - b2) * grads[k] ** 2 for k, a in state["v"].items()}
    return {"step": step + 1, "m": m, "v": v}


def _um_beta_zero_alias(state, grads, beta1, beta2):
    step, b1, b2 = _um_body(state, grads, beta1, beta2)
    m, v = {}, {}
    for k in state["m"]:
        # "no memory: the moment is the gradient" -- hands back the caller's gradient array itself
        m[k] = grads[k] if b1 == 0.0 else (b1 * state["m"][k] + (1 - b1) * grads[k]).astype(state["m"][k].dtype)
        v[k] = (b2 * state["v"][k] + (1 - b2) * grads[k] ** 2).astype(state["v"][k].dtype, copy=False)
    return {"step": step + 1, "m": m, "v": v}


def _um_nan_beta(state, grads, beta1, beta2):
    step = _state(state)
    for name, b in (("beta1", beta1), ("beta2", beta2)):
        if b < 0 or b >= 1:  # NaN compares False both ways and slips through
            raise ValueError(f"{name} must be in [0, 1)")
    _grads_like(state["m"], grads)
    m = {k: (beta1 * a + (1 - beta1) * grads[k]).astype(a.dtype, copy=False) for k, a in state["m"].items()}
    v = {k: (beta2 * a + (1 - beta2) * grads[k] ** 2).astype(a.dtype, copy=False) for k, a in state["v"].items()}
    return {"step": step + 1, "m": m, "v": v}


def _um_extra_grad_keys(state, grads, beta1, beta2):
    step = _state(state)
    b1, b2 = _beta("beta1", beta1), _beta("beta2", beta2)
    _float_tree("grads", grads)
    for key in state["m"]:  # only the moments' keys are looked up; extra gradient keys are ignored
        if key not in grads:
            raise ValueError(f"grads is missing the key {key!r}")
        if grads[key].shape != state["m"][key].shape:
            raise ValueError(f"grads[{key!r}] has shape {grads[key].shape}")
    m = {k: (b1 * a + (1 - b1) * grads[k]).astype(a.dtype, copy=False) for k, a in state["m"].items()}
    v = {k: (b2 * a + (1 - b2) * grads[k] ** 2).astype(a.dtype, copy=False) for k, a in state["v"].items()}
    return {"step": step + 1, "m": m, "v": v}


def _um_cast_grads_first(state, grads, beta1, beta2):
    step, b1, b2 = _um_body(state, grads, beta1, beta2)
    m, v = {}, {}
    for k in state["m"]:
        g = grads[k].astype(state["m"][k].dtype)  # float16 moments: g**2 overflows before the 1 - beta2 factor
        m[k] = b1 * state["m"][k] + (1 - b1) * g
        v[k] = b2 * state["v"][k] + (1 - b2) * (g * g)
    return {"step": step + 1, "m": m, "v": v}


def _um_no_step_check(state, grads, beta1, beta2):
    if not isinstance(state, dict) or set(state) != {"step", "m", "v"}:
        raise ValueError("state must have the keys step, m, v")
    _float_tree("state['m']", state["m"])
    _float_tree("state['v']", state["v"])
    b1, b2 = _beta("beta1", beta1), _beta("beta2", beta2)
    _grads_like(state["m"], grads)
    m = {k: (b1 * a + (1 - b1) * grads[k]).astype(a.dtype, copy=False) for k, a in state["m"].items()}
    v = {k: (b2 * a + (1 - b2) * grads[k] ** 2).astype(a.dtype, copy=False) for k, a in state["v"].items()}
    return {"step": state["step"] + 1, "m": m, "v": v}  # a negative, float or bool step is carried on


def _um_alt_ufuncs(state, grads, beta1, beta2):
    # validation in another order: betas first, then the state, then the gradients
    b1, b2 = _beta("beta1", beta1), _beta("beta2", beta2)
    step = _state(state)
    _grads_like(state["m"], grads)
    m, v = {}, {}
    for k in state["m"]:
        g = grads[k]
        new_m = np.add(np.multiply(state["m"][k], b1), np.multiply(g, 1.0 - b1))
        new_v = np.add(np.multiply(state["v"][k], b2), np.multiply(np.square(g), 1.0 - b2))
        m[k] = new_m.astype(state["m"][k].dtype, copy=False)
        v[k] = new_v.astype(state["v"][k].dtype, copy=False)
    return {"step": step + 1, "m": m, "v": v}


# ==========================================================================================================
# Lesson 9: bias_correct_moments
# ==========================================================================================================
def _bc_check(m, v, step, beta1, beta2):
    _float_tree("m", m)
    _float_tree("v", v)
    _same_structure("m", m, "v", v)
    t = _step_int(step)
    if t < 1:
        raise ValueError(f"step must be >= 1, got {t}")
    return t, _beta("beta1", beta1), _beta("beta2", beta2)


def _bc_none(m, v, step, beta1, beta2):
    _bc_check(m, v, step, beta1, beta2)
    return {k: a.copy() for k, a in m.items()}, {k: a.copy() for k, a in v.items()}


def _bc_off_by_one(m, v, step, beta1, beta2):
    t, b1, b2 = _bc_check(m, v, step, beta1, beta2)
    c1, c2 = 1 - b1 ** (t - 1), 1 - b2 ** (t - 1)
    c1, c2 = (c1 or 1.0), (c2 or 1.0)  # "guarded" at t = 1
    return ({k: (a / c1).astype(a.dtype, copy=False) for k, a in m.items()},
            {k: (a / c2).astype(a.dtype, copy=False) for k, a in v.items()})


def _bc_v_with_beta1(m, v, step, beta1, beta2):
    t, b1, b2 = _bc_check(m, v, step, beta1, beta2)
    c1 = 1 - b1 ** t
    return ({k: (a / c1).astype(a.dtype, copy=False) for k, a in m.items()},
            {k: (a / c1).astype(a.dtype, copy=False) for k, a in v.items()})


def _bc_identity_shortcut(m, v, step, beta1, beta2):
    t, b1, b2 = _bc_check(m, v, step, beta1, beta2)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    m_hat = m if c1 == 1.0 else {k: (a / c1).astype(a.dtype, copy=False) for k, a in m.items()}
    v_hat = v if c2 == 1.0 else {k: (a / c2).astype(a.dtype, copy=False) for k, a in v.items()}
    return m_hat, v_hat


def _bc_bool_step(m, v, step, beta1, beta2):
    _float_tree("m", m)
    _float_tree("v", v)
    _same_structure("m", m, "v", v)
    if not isinstance(step, int):  # True is an int
        raise TypeError("step must be an int")
    if step < 1:
        raise ValueError("step must be >= 1")
    b1, b2 = _beta("beta1", beta1), _beta("beta2", beta2)
    c1, c2 = 1 - b1 ** step, 1 - b2 ** step
    return ({k: (a / c1).astype(a.dtype, copy=False) for k, a in m.items()},
            {k: (a / c2).astype(a.dtype, copy=False) for k, a in v.items()})


def _bc_keys_only(m, v, step, beta1, beta2):
    _float_tree("m", m)
    _float_tree("v", v)
    if set(m) != set(v):
        raise ValueError("v must have the keys of m")  # shapes never compared
    t = _step_int(step)
    if t < 1:
        raise ValueError("step must be >= 1")
    b1, b2 = _beta("beta1", beta1), _beta("beta2", beta2)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    return ({k: (a / c1).astype(a.dtype, copy=False) for k, a in m.items()},
            {k: (a / c2).astype(a.dtype, copy=False) for k, a in v.items()})


def _bc_extra_v_keys(m, v, step, beta1, beta2):
    _float_tree("m", m)
    _float_tree("v", v)
    for k in m:
        if k not in v or v[k].shape != m[k].shape:
            raise ValueError(f"v[{k!r}] missing or of another shape")
    t = _step_int(step)
    if t < 1:
        raise ValueError("step must be >= 1")
    b1, b2 = _beta("beta1", beta1), _beta("beta2", beta2)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    return ({k: (a / c1).astype(a.dtype, copy=False) for k, a in m.items()},
            {k: (a / c2).astype(a.dtype, copy=False) for k, a in v.items()})  # v's extra keys carried along


def _bc_numpy_factor(m, v, step, beta1, beta2):
    t, b1, b2 = _bc_check(m, v, step, beta1, beta2)
    c1, c2 = 1 - np.power(np.float64(b1), t), 1 - np.power(np.float64(b2), t)  # NumPy float64 scalars
    return {k: a / c1 for k, a in m.items()}, {k: a / c2 for k, a in v.items()}


def _bc_nan_beta(m, v, step, beta1, beta2):
    _float_tree("m", m)
    _float_tree("v", v)
    _same_structure("m", m, "v", v)
    t = _step_int(step)
    if t < 1:
        raise ValueError("step must be >= 1")
    for name, b in (("beta1", beta1), ("beta2", beta2)):
        if b < 0 or b >= 1:
            raise ValueError(f"{name} must be in [0, 1)")
    c1, c2 = 1 - beta1 ** t, 1 - beta2 ** t
    return ({k: (a / c1).astype(a.dtype, copy=False) for k, a in m.items()},
            {k: (a / c2).astype(a.dtype, copy=False) for k, a in v.items()})


def _bc_in_place(m, v, step, beta1, beta2):
    t, b1, b2 = _bc_check(m, v, step, beta1, beta2)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    for a in m.values():
        a /= c1
    for a in v.values():
        a /= c2
    return {k: a for k, a in m.items()}, {k: a for k, a in v.items()}


def _bc_alt_divide(m, v, step, beta1, beta2):
    t = _step_int(step)
    if t < 1:
        raise ValueError(f"step must be >= 1 (there is nothing to correct before the first gradient), got {t}")
    b1, b2 = _beta("beta1", beta1), _beta("beta2", beta2)
    _float_tree("m", m)
    _float_tree("v", v)
    _same_structure("m", m, "v", v)
    c1 = 1.0 - math.pow(b1, t)
    c2 = 1.0 - math.pow(b2, t)
    m_hat, v_hat = {}, {}
    for k in m:
        m_hat[k] = np.divide(m[k], c1).astype(m[k].dtype, copy=False)
        v_hat[k] = np.divide(v[k], c2).astype(v[k].dtype, copy=False)
    return m_hat, v_hat


# ==========================================================================================================
# Lesson 10: adamw_param_step
# ==========================================================================================================
def _ps_check(params, m_hat, v_hat, lr, eps):
    _float_tree("params", params)
    _float_tree("m_hat", m_hat)
    _float_tree("v_hat", v_hat)
    _same_structure("params", params, "m_hat", m_hat)
    _same_structure("params", params, "v_hat", v_hat)
    return _positive("lr", lr), _positive("eps", eps)


def _ps_eps_inside(params, m_hat, v_hat, lr, eps):
    lr, eps = _ps_check(params, m_hat, v_hat, lr, eps)
    return {k: (p - lr * m_hat[k] / np.sqrt(v_hat[k] + eps)).astype(p.dtype, copy=False) for k, p in params.items()}


def _ps_no_sqrt(params, m_hat, v_hat, lr, eps):
    lr, eps = _ps_check(params, m_hat, v_hat, lr, eps)
    return {k: (p - lr * m_hat[k] / (v_hat[k] + eps)).astype(p.dtype, copy=False) for k, p in params.items()}


def _ps_ascent(params, m_hat, v_hat, lr, eps):
    lr, eps = _ps_check(params, m_hat, v_hat, lr, eps)
    return {k: (p + lr * m_hat[k] / (np.sqrt(v_hat[k]) + eps)).astype(p.dtype, copy=False) for k, p in params.items()}


def _ps_dtype_of_moments(params, m_hat, v_hat, lr, eps):
    lr, eps = _ps_check(params, m_hat, v_hat, lr, eps)
    return {k: p - lr * m_hat[k] / (np.sqrt(v_hat[k]) + eps) for k, p in params.items()}  # no cast back


def _ps_extra_keys(params, m_hat, v_hat, lr, eps):
    _float_tree("params", params)
    _float_tree("m_hat", m_hat)
    _float_tree("v_hat", v_hat)
    for k in params:  # extra keys in the moments are never noticed
        for name, tree in (("m_hat", m_hat), ("v_hat", v_hat)):
            if k not in tree or tree[k].shape != params[k].shape:
                raise ValueError(f"{name}[{k!r}] is missing or has the wrong shape")
    lr, eps = _positive("lr", lr), _positive("eps", eps)
    return {k: (p - lr * m_hat[k] / (np.sqrt(v_hat[k]) + eps)).astype(p.dtype, copy=False) for k, p in params.items()}


def _ps_eps_zero_ok(params, m_hat, v_hat, lr, eps):
    _float_tree("params", params)
    _float_tree("m_hat", m_hat)
    _float_tree("v_hat", v_hat)
    _same_structure("params", params, "m_hat", m_hat)
    _same_structure("params", params, "v_hat", v_hat)
    lr = _positive("lr", lr)
    if eps < 0:  # "non-negative" instead of strictly positive
        raise ValueError("eps must be >= 0")
    return {k: (p - lr * m_hat[k] / (np.sqrt(v_hat[k]) + eps)).astype(p.dtype, copy=False) for k, p in params.items()}


def _ps_nonfinite_lr(params, m_hat, v_hat, lr, eps):
    _float_tree("params", params)
    _float_tree("m_hat", m_hat)
    _float_tree("v_hat", v_hat)
    _same_structure("params", params, "m_hat", m_hat)
    _same_structure("params", params, "v_hat", v_hat)
    if lr <= 0:  # inf accepted, NaN slips through the comparison
        raise ValueError("lr must be > 0")
    if eps <= 0:
        raise ValueError("eps must be > 0")
    return {k: (p - lr * m_hat[k] / (np.sqrt(v_hat[k]) + eps)).astype(p.dtype, copy=False) for k, p in params.items()}


def _ps_clipped(params, m_hat, v_hat, lr, eps):
    lr, eps = _ps_check(params, m_hat, v_hat, lr, eps)
    out = {}
    for k, p in params.items():
        direction = np.clip(m_hat[k] / (np.sqrt(v_hat[k]) + eps), -1.0, 1.0)  # "a step of at most lr"
        out[k] = (p - lr * direction).astype(p.dtype, copy=False)
    return out


def _ps_in_place(params, m_hat, v_hat, lr, eps):
    lr, eps = _ps_check(params, m_hat, v_hat, lr, eps)
    for k, p in params.items():
        p -= (lr * m_hat[k] / (np.sqrt(v_hat[k]) + eps)).astype(p.dtype)
    return dict(params)


def _ps_alt_loop(params, m_hat, v_hat, lr, eps):
    lr, eps = _positive("lr", lr), _positive("eps", eps)
    _float_tree("params", params)
    for name, tree in (("m_hat", m_hat), ("v_hat", v_hat)):
        _float_tree(name, tree)
        _same_structure("params", params, name, tree)
    new = {}
    for k in params:
        denom = np.sqrt(v_hat[k])
        denom = denom + eps
        update = lr * m_hat[k]
        update = update / denom
        new[k] = np.subtract(params[k], update).astype(params[k].dtype, copy=False)
    return new


# ==========================================================================================================
# Lesson 11: decoupled_weight_decay
# ==========================================================================================================
def _wd_check(params, lr, weight_decay):
    _float_tree("params", params)
    lr = _positive("lr", lr)
    if not _real(weight_decay) or not math.isfinite(float(weight_decay)) or float(weight_decay) < 0:
        raise ValueError(f"weight_decay must be a finite real number >= 0, got {weight_decay!r}")
    return lr, float(weight_decay)


def _wd_unscaled(params, lr, weight_decay):
    lr, wd = _wd_check(params, lr, weight_decay)
    return {k: (p * (1.0 - wd)).astype(p.dtype, copy=False) for k, p in params.items()}


def _wd_weights_only(params, lr, weight_decay):
    lr, wd = _wd_check(params, lr, weight_decay)
    f = 1.0 - lr * wd
    return {k: (p * f).astype(p.dtype, copy=False) if k.startswith("W") else p.copy() for k, p in params.items()}


def _wd_in_place(params, lr, weight_decay):
    lr, wd = _wd_check(params, lr, weight_decay)
    for p in params.values():
        p *= 1.0 - lr * wd
    return dict(params)


def _wd_zero_shortcut(params, lr, weight_decay):
    lr, wd = _wd_check(params, lr, weight_decay)
    if wd == 0.0:
        return dict(params)  # "nothing to do"
    return {k: (p * (1.0 - lr * wd)).astype(p.dtype, copy=False) for k, p in params.items()}


def _wd_numpy_factor(params, lr, weight_decay):
    lr, wd = _wd_check(params, lr, weight_decay)
    factor = np.float64(1.0) - np.multiply(lr, wd)  # a NumPy float64 promotes float32 arrays
    return {k: p * factor for k, p in params.items()}


def _wd_refuses_large(params, lr, weight_decay):
    lr, wd = _wd_check(params, lr, weight_decay)
    if lr * wd > 1.0:
        raise ValueError("lr * weight_decay must be <= 1")
    return {k: (p * (1.0 - lr * wd)).astype(p.dtype, copy=False) for k, p in params.items()}


def _wd_int_arrays(params, lr, weight_decay):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    lr = _positive("lr", lr)
    if weight_decay < 0 or not math.isfinite(weight_decay):
        raise ValueError("weight_decay must be >= 0")
    f = 1.0 - lr * weight_decay
    return {k: (np.asarray(p) * f).astype(np.asarray(p).dtype) for k, p in params.items()}


def _wd_nonfinite(params, lr, weight_decay):
    _float_tree("params", params)
    if lr <= 0:
        raise ValueError("lr must be > 0")
    if weight_decay < 0:  # inf and NaN pass
        raise ValueError("weight_decay must be >= 0")
    f = 1.0 - lr * weight_decay
    return {k: (p * f).astype(p.dtype, copy=False) for k, p in params.items()}


def _wd_after_style(params, lr, weight_decay):
    lr, wd = _wd_check(params, lr, weight_decay)
    # decays by (1 - lr)^wd ... a "continuous-time" reading of the decay
    f = (1.0 - lr) ** wd if lr < 1 else 0.0
    return {k: (p * f).astype(p.dtype, copy=False) for k, p in params.items()}


def _wd_alt_multiply(params, lr, weight_decay):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, p in params.items():
        if not isinstance(p, np.ndarray) or p.dtype.kind != "f":
            raise TypeError(f"params[{k!r}] must be a floating-point array")
    if not _real(weight_decay) or not np.isfinite(weight_decay) or weight_decay < 0:
        raise ValueError("weight_decay must be finite and >= 0")
    if not _real(lr) or not np.isfinite(lr) or lr <= 0:
        raise ValueError("lr must be finite and > 0")
    factor = float(1 - float(lr) * float(weight_decay))
    out = {}
    for k, p in params.items():
        out[k] = np.multiply(p, factor, dtype=p.dtype)
    return out


def _wd_alt_torch(params, lr, weight_decay):
    import torch

    lr, wd = _wd_check(params, lr, weight_decay)
    factor = 1.0 - lr * wd
    out = {}
    for k, p in params.items():
        if p.dtype == np.float16:
            out[k] = (p * factor).astype(p.dtype, copy=False)
        else:
            out[k] = torch.mul(torch.from_numpy(np.ascontiguousarray(p)), factor).numpy().copy()
    return out


MUTANTS = {
    "init_adamw_state": [
        ("step starts at 1 (contract: 'state[\"step\"] ... t = 0')", _init_step_one),
        ("one zero tree for both moments (contract: 'm[key], v[key] and params[key] must be three different buffers')",
         _init_one_tree),
        ("two dicts sharing the same arrays key by key (aliasing m[key] is v[key])", _init_shared_arrays),
        ("np.zeros(shape): float64 moments (contract: 'each array's own dtype')", _init_float64),
        ("float16 parameters get float32 moments (contract: 'each array's own dtype')", _init_half_upcast),
        ("moments as params * 0: NaN/inf parameters give NaN moments (contract: 'exact zeros')", _init_times_zero),
        ("step is numpy.int64(0) (contract: 'Python int')", _init_numpy_step),
        ("only integer dtypes refused: bool/complex/object arrays accepted (contract: floating-point dtype)",
         _init_only_int_refused),
        ("np.asarray on values: a list of floats accepted (contract: 'every value is a NumPy array')",
         _init_accepts_lists),
        ("no validation at all (contract: TypeError naming params)", _init_no_validation),
    ],
    "update_moments": [
        ("beta and 1 - beta swapped (contract: m = b1 m + (1 - b1) g)", _um_swapped),
        ("v folded in with (1 - beta1) (contract: v = b2 v + (1 - b2) g^2)", _um_v_with_beta1),
        ("step not incremented (contract: result step t + 1)", _um_no_count),
        ("updates the caller's moments in place (contract: 'Neither state ... nor grads may change')", _um_in_place),
        ("no cast back: float64 gradients turn float32 moments float64 (contract: 'dtype of state[\"m\"]')",
         _um_dtype_of_grads),
        ("beta1 = 0 shortcut returns grads[k] itself (contract: 'the result is a new dict of new arrays')",
         _um_beta_zero_alias),
        ("NaN betas slip through `b < 0 or b >= 1` (contract: real numbers in [0, 1))", _um_nan_beta),
        ("extra keys in grads ignored (contract: 'keys ... differ ... raises ValueError')", _um_extra_grad_keys),
        ("gradients cast to the moment dtype before squaring: float16 g^2 overflows (contract: compute, then "
         "'.astype(dtype)')", _um_cast_grads_first),
        ("state['step'] not validated: negative/float/bool steps carried on (contract: 'step a non-negative int')",
         _um_no_step_check),
    ],
    "bias_correct_moments": [
        ("no correction at all (contract: m_hat = m / (1 - b1^t))", _bc_none),
        ("off by one: corrects with t - 1, guarded at t = 1 (contract: 'not 0, and not the index of the step "
         "about to be taken')", _bc_off_by_one),
        ("v corrected with beta1 (contract: v_hat = v / (1 - b2^t))", _bc_v_with_beta1),
        ("returns the input trees when the correction is exactly 1 (contract: 'new arrays even when the "
         "correction is a division by 1')", _bc_identity_shortcut),
        ("step=True accepted as 1 (contract: 'an int (not a bool ...)')", _bc_bool_step),
        ("m and v compared by keys only, shapes never (contract: 'different keys or shapes raise naming v')",
         _bc_keys_only),
        ("extra keys of v ignored/carried (contract: 'the same keys')", _bc_extra_v_keys),
        ("NumPy float64 correction factor, no cast back: float32 moments come back float64 (contract: 'dtype of "
         "m / v')", _bc_numpy_factor),
        ("NaN betas slip through the comparison (contract: decay rate outside [0, 1) names beta1/beta2)",
         _bc_nan_beta),
        ("divides the caller's moments in place (contract: 'Mutation: none')", _bc_in_place),
    ],
    "adamw_param_step": [
        ("eps inside the square root (contract: 'added after the square root')", _ps_eps_inside),
        ("divides by v_hat, not sqrt(v_hat)", _ps_no_sqrt),
        ("adds the step (ascent)", _ps_ascent),
        ("no cast back: float64 moments make float32 parameters float64 (contract: 'dtypes of params')",
         _ps_dtype_of_moments),
        ("extra keys in m_hat/v_hat ignored (contract: 'moments whose keys ... differ from params raise')",
         _ps_extra_keys),
        ("eps = 0 accepted (contract: 'eps <= 0 ... raise ValueError')", _ps_eps_zero_ok),
        ("lr = inf / NaN accepted (contract: 'finite real numbers, strictly positive')", _ps_nonfinite_lr),
        ("direction clipped to [-1, 1] (contract: theta - lr m_hat / (sqrt(v_hat) + eps), no clipping)",
         _ps_clipped),
        ("updates params in place (contract: 'params, m_hat and v_hat are only read')", _ps_in_place),
    ],
    "decoupled_weight_decay": [
        ("not scaled by lr: factor 1 - weight_decay (contract: theta (1 - lr lambda))", _wd_unscaled),
        ("biases exempt from the decay (contract: 'every array passed in, biases included')", _wd_weights_only),
        ("decays in place (contract: 'Mutation: none')", _wd_in_place),
        ("weight_decay = 0 returns the same arrays (contract: 'a new array for every key — also when lambda = 0')",
         _wd_zero_shortcut),
        ("NumPy float64 factor, no cast back: float32 arrays come back float64 (contract: 'dtypes of params')",
         _wd_numpy_factor),
        ("refuses lr * weight_decay > 1 (contract: any lr > 0 and weight_decay >= 0 are legal)", _wd_refuses_large),
        ("integer arrays accepted and truncated (contract: 'a non-float array raises naming params')",
         _wd_int_arrays),
        ("weight_decay = inf / NaN accepted (contract: 'weight_decay (finite, >= 0)')", _wd_nonfinite),
        ("factor (1 - lr)^weight_decay (a continuous-time reading; contract: 1 - lr * weight_decay)",
         _wd_after_style),
    ],
}

ALTERNATIVES = {
    "init_adamw_state": [
        ("explicit loop, np.zeros(shape, dtype) and np.full, dtype.kind check", _init_alt_loop),
        ("np.empty_like then fill(0)", _init_alt_empty_fill),
    ],
    "update_moments": [("betas validated first; np.multiply/np.add/np.square ufuncs", _um_alt_ufuncs)],
    "bias_correct_moments": [("step validated first; math.pow and np.divide", _bc_alt_divide)],
    "adamw_param_step": [("scalars validated first; the update built in named temporaries", _ps_alt_loop)],
    "decoupled_weight_decay": [
        ("np.multiply(p, factor, dtype=p.dtype), weight_decay validated before lr", _wd_alt_multiply),
        ("torch.mul on a tensor view (float16 by NumPy)", _wd_alt_torch),
    ],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _um_alt_lerp_float64(state, grads, beta1, beta2):
    """m + (1 - b1)(g - m): the same recursion in interpolation form, in float64, cast once."""
    step, b1, b2 = _um_body(state, grads, beta1, beta2)
    m, v = {}, {}
    for k, m_old in state["m"].items():
        g = grads[k].astype(np.float64)
        m64, v64 = m_old.astype(np.float64), state["v"][k].astype(np.float64)
        m[k] = (m64 + (1.0 - b1) * (g - m64)).astype(m_old.dtype)
        v[k] = (v64 + (1.0 - b2) * (g * g - v64)).astype(state["v"][k].dtype)
    return {"step": step + 1, "m": m, "v": v}


def _bc_alt_multiply_by_reciprocal(m, v, step, beta1, beta2):
    t, b1, b2 = _bc_check(m, v, step, beta1, beta2)
    def reciprocal(beta):  # 1 / (1 - beta^t), with 1 - beta^t = -expm1(t log beta) (no cancellation)
        return 1.0 if beta == 0 else 1.0 / -math.expm1(t * math.log(beta))

    r1, r2 = reciprocal(b1), reciprocal(b2)
    return ({k: (a * r1).astype(a.dtype) for k, a in m.items()},
            {k: (a * r2).astype(a.dtype) for k, a in v.items()})


def _ps_alt_float64(params, m_hat, v_hat, lr, eps):
    _ps_check(params, m_hat, v_hat, lr, eps)
    out = {}
    for k, p in params.items():
        step = float(lr) * m_hat[k].astype(np.float64) / (np.sqrt(v_hat[k].astype(np.float64)) + float(eps))
        out[k] = (p.astype(np.float64) - step).astype(p.dtype)
    return out


for _name, _entry in [
    ("update_moments", ("interpolation form m + (1-b1)(g-m) in float64, cast once", _um_alt_lerp_float64)),
    ("bias_correct_moments", ("multiplies by 1/(1-beta^t) from expm1/log1p", _bc_alt_multiply_by_reciprocal)),
    ("adamw_param_step", ("the step in float64, cast once to the parameter's dtype", _ps_alt_float64)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
