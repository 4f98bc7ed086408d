"""Red team, Module 2 Part 5 (outer optimizer with Nesterov momentum): wrong answers and correct alternatives
written from the release notebooks only."""

from __future__ import annotations

import math

import numpy as np


def _float_tree(name, tree):
    if not isinstance(tree, dict):
        raise TypeError(f"{name} must be a dict of floating-point arrays, got {type(tree).__name__}")
    for key, value in tree.items():
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating):
            raise TypeError(f"{name}[{key!r}] must be a floating-point numpy array")


def _is_real(x):
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _like(ref_name, ref, name, tree):
    _float_tree(name, tree)
    if set(tree) != set(ref):
        raise ValueError(f"{name} has keys {sorted(tree)}, {ref_name} has {sorted(ref)}")
    for k in ref:
        if tree[k].shape != ref[k].shape:
            raise ValueError(f"{name}[{k!r}] has shape {tree[k].shape}, {ref_name}[{k!r}] has {ref[k].shape}")


def _momentum(momentum):
    if not _is_real(momentum) or not math.isfinite(float(momentum)) or not 0 <= float(momentum) < 1:
        raise ValueError(f"momentum must be a finite real number in [0, 1), got {momentum!r}")
    return float(momentum)


def _lr(lr):
    if not _is_real(lr) or not math.isfinite(float(lr)) or float(lr) <= 0:
        raise ValueError(f"lr must be a finite real number > 0, got {lr!r}")
    return float(lr)


def _outer_state(state):
    if not isinstance(state, dict) or set(state) != {"step", "momentum_buffer"}:
        raise ValueError("state must be a dict with exactly the keys 'step' and 'momentum_buffer'")
    step = state["step"]
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"state['step'] must be an integer >= 0, got {step!r}")
    _float_tree("state['momentum_buffer']", state["momentum_buffer"])
    return int(step)


# ==========================================================================================================
# Lesson 21: init_outer_optimizer
# ==========================================================================================================
def _ioo_copy(params):
    _float_tree("params", params)
    return {"step": 0, "momentum_buffer": {k: v.copy() for k, v in params.items()}}


def _ioo_float64(params):
    _float_tree("params", params)
    return {"step": 0, "momentum_buffer": {k: np.zeros(v.shape) for k, v in params.items()}}


def _ioo_step_one(params):
    _float_tree("params", params)
    return {"step": 1, "momentum_buffer": {k: np.zeros_like(v) for k, v in params.items()}}


def _ioo_times_zero(params):
    _float_tree("params", params)
    return {"step": 0, "momentum_buffer": {k: v * 0 for k, v in params.items()}}  # inf * 0 = nan


def _ioo_alias_zero_params(params):
    _float_tree("params", params)
    # an array that is already all zeros "is" its own zero buffer
    return {"step": 0, "momentum_buffer": {k: (v if not v.any() else np.zeros_like(v)) for k, v in params.items()}}


def _ioo_numpy_step(params):
    _float_tree("params", params)
    return {"step": np.int64(0), "momentum_buffer": {k: np.zeros_like(v) for k, v in params.items()}}


def _ioo_lists_ok(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    arrays = {k: np.asarray(v) for k, v in params.items()}
    for k, v in arrays.items():
        if not np.issubdtype(v.dtype, np.floating):
            raise TypeError(f"params[{k!r}] must be floating")
    return {"step": 0, "momentum_buffer": {k: np.zeros_like(v) for k, v in arrays.items()}}


def _ioo_not_integer(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict")
    for k, v in params.items():
        if np.issubdtype(np.asarray(v).dtype, np.integer):  # bool, complex, object pass
            raise TypeError(f"params[{k!r}] is an integer array")
    return {"step": 0, "momentum_buffer": {k: np.zeros_like(v) for k, v in params.items()}}


def _ioo_half_upcast(params):
    _float_tree("params", params)
    return {"step": 0, "momentum_buffer": {k: np.zeros(v.shape, np.float32 if v.dtype == np.float16 else v.dtype)
                                           for k, v in params.items()}}


def _ioo_extra_key(params):
    _float_tree("params", params)
    return {"step": 0, "momentum_buffer": {k: np.zeros_like(v) for k, v in params.items()},
            "nesterov": True}


def _ioo_alt_loop(params):
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    buffer = {}
    for key, value in params.items():
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            raise TypeError(f"params[{key!r}] must be a floating-point array")
        buffer[key] = np.zeros(value.shape, dtype=value.dtype)
    return dict(step=0, momentum_buffer=buffer)


def _ioo_alt_full(params):
    _float_tree("params", params)
    return {"step": int(0), "momentum_buffer": {k: np.full_like(v, 0.0) for k, v in params.items()}}


# ==========================================================================================================
# Lesson 22: update_outer_momentum
# ==========================================================================================================
def _uom_checks(state, outer_grad, momentum):
    step = _outer_state(state)
    _like("momentum_buffer", state["momentum_buffer"], "outer_grad", outer_grad)
    return step, _momentum(momentum)


def _uom_dampened(state, outer_grad, momentum):
    step, mu = _uom_checks(state, outer_grad, momentum)
    buf = state["momentum_buffer"]
    return {"step": step + 1,
            "momentum_buffer": {k: (mu * b + (1 - mu) * outer_grad[k]).astype(b.dtype, copy=False) for k, b in buf.items()}}


def _uom_mu_times_all(state, outer_grad, momentum):
    step, mu = _uom_checks(state, outer_grad, momentum)
    buf = state["momentum_buffer"]
    return {"step": step + 1,
            "momentum_buffer": {k: (mu * (b + outer_grad[k])).astype(b.dtype, copy=False) for k, b in buf.items()}}


def _uom_no_count(state, outer_grad, momentum):
    step, mu = _uom_checks(state, outer_grad, momentum)
    buf = state["momentum_buffer"]
    return {"step": step,
            "momentum_buffer": {k: (mu * b + outer_grad[k]).astype(b.dtype, copy=False) for k, b in buf.items()}}


def _uom_zero_alias(state, outer_grad, momentum):
    step, mu = _uom_checks(state, outer_grad, momentum)
    buf = state["momentum_buffer"]
    if mu == 0.0:
        return {"step": step + 1, "momentum_buffer": dict(outer_grad)}
    return {"step": step + 1,
            "momentum_buffer": {k: (mu * b + outer_grad[k]).astype(b.dtype, copy=False) for k, b in buf.items()}}


def _uom_dtype_of_grad(state, outer_grad, momentum):
    step, mu = _uom_checks(state, outer_grad, momentum)
    buf = state["momentum_buffer"]
    return {"step": step + 1, "momentum_buffer": {k: mu * b + outer_grad[k] for k, b in buf.items()}}


def _uom_nan_momentum(state, outer_grad, momentum):
    step = _outer_state(state)
    _like("momentum_buffer", state["momentum_buffer"], "outer_grad", outer_grad)
    if momentum < 0 or momentum >= 1:  # NaN passes
        raise ValueError("momentum must be in [0, 1)")
    buf = state["momentum_buffer"]
    return {"step": step + 1,
            "momentum_buffer": {k: (momentum * b + outer_grad[k]).astype(b.dtype, copy=False) for k, b in buf.items()}}


def _uom_no_shape_check(state, outer_grad, momentum):
    step = _outer_state(state)
    _float_tree("outer_grad", outer_grad)
    if set(outer_grad) != set(state["momentum_buffer"]):
        raise ValueError("outer_grad must have the buffer's keys")
    mu = _momentum(momentum)
    buf = state["momentum_buffer"]
    # a (3,) pseudo-gradient broadcasts silently into a (4, 3) buffer
    return {"step": step + 1,
            "momentum_buffer": {k: (mu * b + outer_grad[k]).astype(b.dtype, copy=False) for k, b in buf.items()}}


def _uom_extra_keys(state, outer_grad, momentum):
    step = _outer_state(state)
    _float_tree("outer_grad", outer_grad)
    buf = state["momentum_buffer"]
    for k in buf:
        if k not in outer_grad or outer_grad[k].shape != buf[k].shape:
            raise ValueError(f"outer_grad[{k!r}] missing or of another shape")
    mu = _momentum(momentum)
    return {"step": step + 1,
            "momentum_buffer": {k: (mu * b + outer_grad[k]).astype(b.dtype, copy=False) for k, b in buf.items()}}


def _uom_loose_state(state, outer_grad, momentum):
    if not isinstance(state, dict) or "momentum_buffer" not in state:
        raise ValueError("state must hold a momentum_buffer")
    buf = state["momentum_buffer"]  # step never validated; extra state keys are fine
    _like("momentum_buffer", buf, "outer_grad", outer_grad)
    mu = _momentum(momentum)
    return {"step": state.get("step", 0) + 1,
            "momentum_buffer": {k: (mu * b + outer_grad[k]).astype(b.dtype, copy=False) for k, b in buf.items()}}


def _uom_in_place(state, outer_grad, momentum):
    step, mu = _uom_checks(state, outer_grad, momentum)
    buf = state["momentum_buffer"]
    for k, b in buf.items():
        b *= mu
        b += outer_grad[k].astype(b.dtype)
    return {"step": step + 1, "momentum_buffer": buf}


def _uom_alt_ufuncs(state, outer_grad, momentum):
    mu = _momentum(momentum)
    step = _outer_state(state)
    buf = state["momentum_buffer"]
    _like("momentum_buffer", buf, "outer_grad", outer_grad)
    new_buf = {}
    for k in buf:
        new_buf[k] = np.add(np.multiply(buf[k], mu), outer_grad[k]).astype(buf[k].dtype, copy=False)
    return {"momentum_buffer": new_buf, "step": step + 1}


# ==========================================================================================================
# Lesson 23: nesterov_outer_step
# ==========================================================================================================
def _nos_common(params, state, outer_grad, lr, momentum):
    lr, mu = _lr(lr), _momentum(momentum)
    _float_tree("params", params)
    _like("params", params, "outer_grad", outer_grad)
    step = _outer_state(state)
    _like("params", params, "momentum_buffer", state["momentum_buffer"])
    buf = state["momentum_buffer"]
    new_buf = {k: (mu * buf[k] + outer_grad[k]).astype(buf[k].dtype, copy=False) for k in buf}
    return lr, mu, step, new_buf


def _nos_heavy_ball(params, state, outer_grad, lr, momentum):
    lr, mu, step, nb = _nos_common(params, state, outer_grad, lr, momentum)
    return ({k: (p - lr * nb[k]).astype(p.dtype, copy=False) for k, p in params.items()},
            {"step": step + 1, "momentum_buffer": nb})


def _nos_old_buffer(params, state, outer_grad, lr, momentum):
    lr, mu, step, nb = _nos_common(params, state, outer_grad, lr, momentum)
    b = state["momentum_buffer"]
    return ({k: (p - lr * (outer_grad[k] + mu * b[k])).astype(p.dtype, copy=False) for k, p in params.items()},
            {"step": step + 1, "momentum_buffer": nb})


def _nos_ascent(params, state, outer_grad, lr, momentum):
    lr, mu, step, nb = _nos_common(params, state, outer_grad, lr, momentum)
    return ({k: (p + lr * (outer_grad[k] + mu * nb[k])).astype(p.dtype, copy=False) for k, p in params.items()},
            {"step": step + 1, "momentum_buffer": nb})


def _nos_no_cast(params, state, outer_grad, lr, momentum):
    lr, mu, step, nb = _nos_common(params, state, outer_grad, lr, momentum)
    return ({k: p - lr * (outer_grad[k] + mu * nb[k]) for k, p in params.items()},  # dtype follows Δ / buffer
            {"step": step + 1, "momentum_buffer": nb})


def _nos_nonfinite_lr(params, state, outer_grad, lr, momentum):
    if lr <= 0:  # inf and NaN pass
        raise ValueError("lr must be > 0")
    mu = _momentum(momentum)
    _float_tree("params", params)
    _like("params", params, "outer_grad", outer_grad)
    step = _outer_state(state)
    buf = state["momentum_buffer"]
    nb = {k: (mu * buf[k] + outer_grad[k]).astype(buf[k].dtype, copy=False) for k in buf}
    return ({k: (p - lr * (outer_grad[k] + mu * nb[k])).astype(p.dtype, copy=False) for k, p in params.items()},
            {"step": step + 1, "momentum_buffer": nb})


def _nos_params_unchecked(params, state, outer_grad, lr, momentum):
    lr, mu = _lr(lr), _momentum(momentum)
    step = _outer_state(state)
    buf = state["momentum_buffer"]
    _like("momentum_buffer", buf, "outer_grad", outer_grad)  # Δ is compared with the buffer, never with params
    nb = {k: (mu * buf[k] + outer_grad[k]).astype(buf[k].dtype, copy=False) for k in buf}
    return ({k: (p - lr * (outer_grad[k] + mu * nb[k])).astype(p.dtype, copy=False) for k, p in params.items()},
            {"step": step + 1, "momentum_buffer": nb})


def _nos_zero_alias(params, state, outer_grad, lr, momentum):
    lr, mu, step, nb = _nos_common(params, state, outer_grad, lr, momentum)
    if mu == 0.0:
        nb = dict(outer_grad)  # "b' = Δ": the caller's arrays become the buffer
    return ({k: (p - lr * (outer_grad[k] + mu * nb[k])).astype(p.dtype, copy=False) for k, p in params.items()},
            {"step": step + 1, "momentum_buffer": nb})


def _nos_in_place(params, state, outer_grad, lr, momentum):
    lr, mu, step, nb = _nos_common(params, state, outer_grad, lr, momentum)
    for k, p in params.items():
        p -= (lr * (outer_grad[k] + mu * nb[k])).astype(p.dtype)
    return dict(params), {"step": step + 1, "momentum_buffer": nb}


def _nos_step_unchanged(params, state, outer_grad, lr, momentum):
    lr, mu, step, nb = _nos_common(params, state, outer_grad, lr, momentum)
    return ({k: (p - lr * (outer_grad[k] + mu * nb[k])).astype(p.dtype, copy=False) for k, p in params.items()},
            {"step": step, "momentum_buffer": nb})


def _nos_alt_package(params, state, outer_grad, lr, momentum):
    from trainsys.diloco.outer import update_outer_momentum

    _float_tree("params", params)
    lr = _lr(lr)
    mu = _momentum(momentum)
    _like("params", params, "outer_grad", outer_grad)
    new_state = update_outer_momentum(state, outer_grad, mu)
    nb = new_state["momentum_buffer"]
    out = {}
    for k, p in params.items():
        look_ahead = outer_grad[k] + mu * nb[k]
        out[k] = (p - lr * look_ahead).astype(p.dtype, copy=False)
    return out, new_state


# ==========================================================================================================
# Lesson 24: compute_outer_gradient
# ==========================================================================================================
def _cog_checks(global_params, worker_params):
    _float_tree("global_params", global_params)
    if not isinstance(worker_params, (list, tuple)):
        raise TypeError(f"worker_params must be a list of trees, got {type(worker_params).__name__}")
    if len(worker_params) == 0:
        raise ValueError("worker_params must hold at least one tree")
    for i, w in enumerate(worker_params):
        _float_tree(f"worker_params[{i}]", w)
        if set(w) != set(global_params):
            raise ValueError(f"worker_params[{i}]: keys differ, {sorted(set(w) ^ set(global_params))}")
        for k in global_params:
            if w[k].shape != global_params[k].shape:
                raise ValueError(f"worker_params[{i}][{k!r}] has shape {w[k].shape}")


def _mean64(global_params, worker_params):
    k = len(worker_params)
    return {key: sum(w[key].astype(np.float64) for w in worker_params) / k for key in global_params}


def _cog_reversed(global_params, worker_params):
    _cog_checks(global_params, worker_params)
    mean = _mean64(global_params, worker_params)
    return {k: (mean[k].astype(g.dtype) - g).astype(g.dtype, copy=False) for k, g in global_params.items()}


def _cog_sum(global_params, worker_params):
    _cog_checks(global_params, worker_params)
    return {k: sum((g - w[k]).astype(np.float64) for w in worker_params).astype(g.dtype)
            for k, g in global_params.items()}


def _cog_last_worker(global_params, worker_params):
    _cog_checks(global_params, worker_params)
    last = worker_params[-1]
    return {k: (g - last[k]).astype(g.dtype, copy=False) for k, g in global_params.items()}


def _cog_float32_mean(global_params, worker_params):
    _cog_checks(global_params, worker_params)
    out = {}
    for k, g in global_params.items():
        acc = np.zeros_like(g)
        for w in worker_params:
            acc += w[k]  # summed in the parameters' own dtype
        out[k] = (g - acc / len(worker_params)).astype(g.dtype, copy=False)
    return out


def _cog_wraps_dict(global_params, worker_params):
    if isinstance(worker_params, dict):
        worker_params = [worker_params]  # "helpfully" treats one tree as a list of one
    _cog_checks(global_params, worker_params)
    mean = _mean64(global_params, worker_params)
    return {k: (g - mean[k].astype(g.dtype)).astype(g.dtype, copy=False) for k, g in global_params.items()}


def _cog_list_only(global_params, worker_params):
    if not isinstance(worker_params, list):  # a tuple of trees refused
        raise TypeError("worker_params must be a list")
    _cog_checks(global_params, worker_params)
    mean = _mean64(global_params, worker_params)
    return {k: (g - mean[k].astype(g.dtype)).astype(g.dtype, copy=False) for k, g in global_params.items()}


def _cog_extra_worker_keys(global_params, worker_params):
    _float_tree("global_params", global_params)
    if not isinstance(worker_params, (list, tuple)) or not worker_params:
        raise ValueError("worker_params must be a non-empty list")
    for i, w in enumerate(worker_params):
        _float_tree(f"worker_params[{i}]", w)
        for k in global_params:  # keys only the workers have are ignored
            if k not in w:
                raise ValueError(f"worker_params[{i}] lacks {k!r}")
            if w[k].shape != global_params[k].shape:
                raise ValueError(f"worker_params[{i}][{k!r}] has shape {w[k].shape}")
    mean = _mean64(global_params, worker_params)
    return {k: (g - mean[k].astype(g.dtype)).astype(g.dtype, copy=False) for k, g in global_params.items()}


def _cog_dtype_of_workers(global_params, worker_params):
    _cog_checks(global_params, worker_params)
    mean = {k: (sum(w[k].astype(np.float64) for w in worker_params) / len(worker_params)).astype(worker_params[0][k].dtype)
            for k in global_params}
    return {k: g - mean[k] for k, g in global_params.items()}  # float32 global - float64 mean -> float64


def _cog_package_errors(global_params, worker_params):
    from trainsys.diloco.params import average_params, subtract_params

    _float_tree("global_params", global_params)
    # no own checks: an empty list / bad worker is reported by average_params as `list_of_params`
    return subtract_params(global_params, average_params(worker_params))


def _cog_alt_package(global_params, worker_params):
    from trainsys.diloco.params import average_params, subtract_params

    _cog_checks(global_params, worker_params)
    return subtract_params(global_params, average_params(list(worker_params)))


def _cog_alt_manual(global_params, worker_params):
    # the recipe by hand: float64 mean with weights 1/k, cast once to the global dtype, then a - b
    if not isinstance(worker_params, (list, tuple)):
        raise TypeError("worker_params must be a list or tuple of parameter trees")
    if not worker_params:
        raise ValueError("worker_params is empty")
    _cog_checks(global_params, worker_params)
    k = len(worker_params)
    delta = {}
    for key, g in global_params.items():
        acc = np.zeros(g.shape, dtype=np.float64)
        for w in worker_params:
            acc += (1.0 / k) * w[key].astype(np.float64)
        mean = acc.astype(worker_params[0][key].dtype)
        delta[key] = (g - mean).astype(g.dtype, copy=False)
    return delta


MUTANTS = {
    "init_outer_optimizer": [
        ("buffer starts as a copy of the parameters (contract: b_0 = 0)", _ioo_copy),
        ("np.zeros(shape): float64 buffer (contract: 'each array's own dtype')", _ioo_float64),
        ("step starts at 1 (contract: 'step == 0')", _ioo_step_one),
        ("buffer = params * 0: NaN where a parameter is inf/NaN (contract: 'exact zeros')", _ioo_times_zero),
        ("an all-zero parameter array reused as its own buffer (contract: 'must not share memory with params')",
         _ioo_alias_zero_params),
        ("step is numpy.int64 (contract: 'Python int')", _ioo_numpy_step),
        ("np.asarray on values: list values accepted (contract: 'every value a NumPy array')", _ioo_lists_ok),
        ("only integer dtypes refused: bool/complex pass (contract: floating-point dtype)", _ioo_not_integer),
        ("float16 parameters get a float32 buffer (contract: 'each array's own dtype')", _ioo_half_upcast),
        ("extra state key 'nesterov' (contract: '{\"step\": 0, \"momentum_buffer\": buffer}')", _ioo_extra_key),
    ],
    "update_outer_momentum": [
        ("dampened like Adam: mu b + (1 - mu) Delta (contract: 'Dampening 0')", _uom_dampened),
        ("mu (b + Delta)", _uom_mu_times_all),
        ("round not counted (contract: step t + 1)", _uom_no_count),
        ("mu = 0 returns outer_grad's arrays (contract: 'it must not *be* outer_grad')", _uom_zero_alias),
        ("no cast: float64 Delta makes the float32 buffer float64 (contract: 'keeps its dtype')",
         _uom_dtype_of_grad),
        ("NaN momentum slips through the comparison (contract: 'non-finite mu raise ValueError')",
         _uom_nan_momentum),
        ("no shape check: a (3,) Delta broadcasts into a (4, 3) buffer (contract: 'other keys or shapes raise "
         "naming outer_grad')", _uom_no_shape_check),
        ("extra keys in outer_grad ignored (contract: 'other keys ... raises')", _uom_extra_keys),
        ("state barely validated: negative/bool step, extra keys accepted (contract: 'exactly the keys', 'negative "
         "or non-integer step raises naming state')", _uom_loose_state),
        ("updates the buffer in place (contract: 'Mutation: none')", _uom_in_place),
    ],
    "nesterov_outer_step": [
        ("heavy-ball: theta - lr b' (contract: theta - lr (Delta + mu b'))", _nos_heavy_ball),
        ("look-ahead with the old buffer: theta - lr (Delta + mu b)", _nos_old_buffer),
        ("ascent: theta + lr (Delta + mu b')", _nos_ascent),
        ("no cast back to the parameters' dtype (contract: new_params 'as params')", _nos_no_cast),
        ("lr = inf / NaN accepted (contract: 'lr <= 0 or non-finite raises ValueError')", _nos_nonfinite_lr),
        ("params never compared with outer_grad: a (1,) Delta and buffer broadcast into a (3,) parameter "
         "(contract: 'keys or shapes differ from params ... naming the key')", _nos_params_unchecked),
        ("mu = 0: the new buffer is outer_grad's own arrays (contract: 'everything returned is new')",
         _nos_zero_alias),
        ("updates params in place (contract: 'Mutation: none')", _nos_in_place),
        ("step not incremented (contract: new_state step t + 1)", _nos_step_unchanged),
    ],
    "compute_outer_gradient": [
        ("reversed sign: mean - global (contract: 'original minus local')", _cog_reversed),
        ("sum over workers instead of the mean", _cog_sum),
        ("only the last worker", _cog_last_worker),
        ("mean accumulated in float32 (contract: 'accumulated in float64 ... and cast once')", _cog_float32_mean),
        ("a bare dict wrapped into a list of one (contract: 'a single dict ... raises naming worker_params')",
         _cog_wraps_dict),
        ("a tuple of workers refused (contract, Implementation: 'a list or tuple')", _cog_list_only),
        ("extra keys in the workers ignored (contract: 'with an extra key ... ValueError naming the key')",
         _cog_extra_worker_keys),
        ("result in the workers' dtype (contract: 'global_params' dtypes')", _cog_dtype_of_workers),
        ("no own validation: errors name list_of_params (contract: naming worker_params)", _cog_package_errors),
    ],
}

ALTERNATIVES = {
    "init_outer_optimizer": [
        ("explicit loop, np.zeros(shape, dtype), dict(...) literal", _ioo_alt_loop),
        ("np.full_like(v, 0.0)", _ioo_alt_full),
    ],
    "update_outer_momentum": [("momentum validated first; np.multiply/np.add", _uom_alt_ufuncs)],
    "nesterov_outer_step": [("the package's update_outer_momentum for b', then the look-ahead", _nos_alt_package)],
    "compute_outer_gradient": [
        ("own validation, then subtract_params(global, average_params(list(workers)))", _cog_alt_package),
        ("the recipe by hand: float64 mean cast once, then the difference", _cog_alt_manual),
    ],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _uom_alt_float64(state, outer_grad, momentum):
    step, mu = _uom_checks(state, outer_grad, momentum)
    buf = state["momentum_buffer"]
    new = {k: (mu * b.astype(np.float64) + outer_grad[k].astype(np.float64)).astype(b.dtype) for k, b in buf.items()}
    return dict(step=step + 1, momentum_buffer=new)


def _nos_alt_expanded(params, state, outer_grad, lr, momentum):
    """theta - lr((1 + mu) Delta + mu^2 b): the same step with b' substituted, no call to Lesson 22."""
    lr, mu = _lr(lr), _momentum(momentum)
    _float_tree("params", params)
    _like("params", params, "outer_grad", outer_grad)
    step = _outer_state(state)
    b = state["momentum_buffer"]
    _like("params", params, "momentum_buffer", b)
    new_b = {k: (mu * b[k] + outer_grad[k]).astype(b[k].dtype) for k in b}
    new_p = {k: (p - lr * ((1 + mu) * outer_grad[k] + mu * mu * b[k])).astype(p.dtype) for k, p in params.items()}
    return new_p, {"step": step + 1, "momentum_buffer": new_b}


for _name, _entry in [
    ("update_outer_momentum", ("mu b + Delta in float64, cast once to the buffer's dtype", _uom_alt_float64)),
    ("nesterov_outer_step", ("b' substituted: theta - lr((1 + mu) Delta + mu^2 b)", _nos_alt_expanded)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
