"""Red team, Module 1 Part 6 (ZeRO-style optimizer sharding): wrong answers and correct alternatives written
from the release notebooks only."""

from __future__ import annotations

import math
import numbers

import numpy as np

# Given in lesson 35's setup cell (earlier lessons' pieces); never the function under test.
from trainsys.memtrain.data_parallel import flatten_params, unflatten_params
from trainsys.memtrain.zero import all_gather_param_shards, local_shard_adam_update, partition_optimizer_state


# ======================================================================================================
# Lesson 31 · init_adam_state
# ======================================================================================================

def _ias_core(params, *, dtype_rule="result_type", shared=False, step=0, key_msg=True, asarray=False,
              kind_check="floating", sort_keys=False, readonly=False):
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    m, v = {}, {}
    keys = sorted(params) if sort_keys else list(params)
    for key in keys:
        p = params[key]
        if asarray:
            p = np.asarray(p, dtype=float) if not isinstance(p, np.ndarray) else p
        where = f"params[{key!r}]" if key_msg else "params"
        if not isinstance(p, np.ndarray):
            raise TypeError(f"{where} must be a NumPy array")
        ok = np.issubdtype(p.dtype, np.floating) if kind_check == "floating" else p.dtype.kind not in "iu"
        if not ok:
            raise TypeError(f"{where} must be floating point, got {p.dtype}")
        if dtype_rule == "result_type":
            dt = np.result_type(p.dtype, np.float32)
        elif dtype_rule == "like":
            dt = p.dtype
        elif dtype_rule == "float32":
            dt = np.dtype(np.float32)
        else:
            raise AssertionError(dtype_rule)
        if readonly:
            m[key] = np.broadcast_to(np.zeros((), dt), p.shape)
            v[key] = np.broadcast_to(np.zeros((), dt), p.shape)
        else:
            m[key] = np.zeros(p.shape, dt)
            v[key] = m[key] if shared else np.zeros(p.shape, dt)
    return {"m": m, "v": v, "step": step}


def _ias_shared_buffers(params):
    return _ias_core(params, shared=True)


def _ias_zeros_like(params):
    return _ias_core(params, dtype_rule="like")


def _ias_always_float32(params):
    return _ias_core(params, dtype_rule="float32")


def _ias_step_one(params):
    return _ias_core(params, step=1)


def _ias_step_numpy(params):
    return _ias_core(params, step=np.int64(0))


def _ias_message_without_key(params):
    return _ias_core(params, key_msg=False)


def _ias_accepts_non_arrays(params):
    return _ias_core(params, asarray=True)


def _ias_accepts_bool_and_complex(params):
    return _ias_core(params, kind_check="not_int")


def _ias_readonly_broadcast(params):
    return _ias_core(params, readonly=True)


def _ias_alt_promote_full(params):
    if not isinstance(params, dict):
        raise TypeError("params must be a dict of arrays")
    for key, p in params.items():
        if not isinstance(p, np.ndarray) or p.dtype.kind != "f":
            raise TypeError(f"params[{key!r}] must be a floating-point NumPy array")
    dts = {key: np.promote_types(p.dtype, np.float32) for key, p in params.items()}
    return {"m": {key: np.full(p.shape, 0, dts[key]) for key, p in params.items()},
            "v": {key: np.full(p.shape, 0, dts[key]) for key, p in params.items()},
            "step": int(0)}


# ======================================================================================================
# Lesson 32 · partition_optimizer_state
# ======================================================================================================

def _pos_check(value, name, *, accept_bool=False, accept_float=False, reject_np=False, accept_str=False):
    if accept_str and isinstance(value, str):
        value = int(value)
    if accept_float and isinstance(value, float) and value.is_integer():
        value = int(value)
    if reject_np:
        ok = type(value) is int
    else:
        ok = isinstance(value, (int, np.integer)) and (accept_bool or not isinstance(value, bool))
    if not ok:
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _pos_core(flat_numel, num_workers, *, ceil_rule="int", keep_np=False, order="psi_first", **check):
    flat_check = dict(check)
    worker_check = {k: v for k, v in check.items() if k != "accept_float_psi"}
    accept_float_psi = flat_check.pop("accept_float_psi", False)
    if order == "psi_first":
        psi = _pos_check(flat_numel, "flat_numel", accept_float=accept_float_psi, **flat_check)
        N = _pos_check(num_workers, "num_workers", **worker_check)
    else:
        N = _pos_check(num_workers, "num_workers", **worker_check)
        psi = _pos_check(flat_numel, "flat_numel", accept_float=accept_float_psi, **flat_check)
    if ceil_rule == "int":
        s = -(-psi // N)
    elif ceil_rule == "float":
        s = math.ceil(psi / N)
    elif ceil_rule == "floor":
        s = psi // N
    else:
        raise AssertionError(ceil_rule)
    if not keep_np:
        s, N = int(s), int(N)
    return [(k * s, (k + 1) * s) for k in range(N)]


def _pos_floor(flat_numel, num_workers):
    return _pos_core(flat_numel, num_workers, ceil_rule="floor")


def _pos_last_takes_rest(flat_numel, num_workers):
    for name, value in (("flat_numel", flat_numel), ("num_workers", num_workers)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int")
        if value < 1:
            raise ValueError(f"{name} must be >= 1")
    s = flat_numel // num_workers
    ranges = [(k * s, (k + 1) * s) for k in range(num_workers)]
    ranges[-1] = (ranges[-1][0], flat_numel)
    return ranges


def _pos_float_ceil(flat_numel, num_workers):
    return _pos_core(flat_numel, num_workers, ceil_rule="float")


def _pos_accepts_bool(flat_numel, num_workers):
    return _pos_core(flat_numel, num_workers, accept_bool=True)


def _pos_accepts_float_psi(flat_numel, num_workers):
    return _pos_core(flat_numel, num_workers, accept_float_psi=True)


def _pos_rejects_numpy_int(flat_numel, num_workers):
    return _pos_core(flat_numel, num_workers, reject_np=True)


def _pos_returns_numpy_ints(flat_numel, num_workers):
    return _pos_core(flat_numel, num_workers, keep_np=True)


def _pos_accepts_numeric_string(flat_numel, num_workers):
    return _pos_core(flat_numel, num_workers, accept_str=True)


def _pos_validates_workers_first(flat_numel, num_workers):
    return _pos_core(flat_numel, num_workers, order="workers_first")


def _pos_alt_divmod(flat_numel, num_workers):
    for name, value in (("flat_numel", flat_numel), ("num_workers", num_workers)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer (not {type(value).__name__})")
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    q, r = divmod(int(flat_numel), int(num_workers))
    s = q + (1 if r else 0)
    out, start = [], 0
    for _ in range(int(num_workers)):
        out.append((start, start + s))
        start += s
    return out


# ======================================================================================================
# Lesson 33 · local_shard_adam_update
# ======================================================================================================

def _lsa_validate(param_shard, grad_shard, state_shard, hp, *, exact_keys=True, beta_low="closed",
                  check_finite=True, accept_bool_step=False, accept_float_step=False, check_moment_shape=True):
    if not isinstance(hp, dict):
        raise ValueError("hp must be a dict")
    need = {"lr", "beta1", "beta2", "eps"}
    if (set(hp) != need) if exact_keys else not need <= set(hp):
        raise ValueError(f"hp must have exactly the keys {sorted(need)}, got {sorted(hp)}")
    for name in ("lr", "eps"):
        value = hp[name]
        if check_finite:
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value}")
        elif value <= 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    for name in ("beta1", "beta2"):
        value = hp[name]
        low_ok = value >= 0 if beta_low == "closed" else value > 0
        if not (low_ok and value < 1):
            raise ValueError(f"{name} must be in [0, 1), got {value}")
    for name, a in (("param_shard", param_shard), ("grad_shard", grad_shard)):
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{name} must be a floating NumPy array")
    if grad_shard.shape != param_shard.shape:
        raise ValueError(f"grad_shard has shape {grad_shard.shape}, param_shard {param_shard.shape}")
    if not isinstance(state_shard, dict) or not {"m", "v", "step"} <= set(state_shard):
        raise ValueError("state_shard must be a dict with m, v, step")
    for name in ("m", "v"):
        a = state_shard[name]
        if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"state_shard[{name!r}] must be a floating array")
        if check_moment_shape and a.shape != param_shard.shape:
            raise ValueError(f"state_shard[{name!r}] has shape {a.shape}, expected {param_shard.shape}")
    step = state_shard["step"]
    if accept_float_step and isinstance(step, float) and step.is_integer():
        step = int(step)
    if isinstance(step, bool) and not accept_bool_step:
        raise ValueError("step must be an integer, not a bool")
    if not isinstance(step, (int, np.integer)):
        raise ValueError(f"step must be an integer, got {step!r}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return int(step)


def _lsa_core(param_shard, grad_shard, state_shard, hp, *, bias_correction=True, eps_mode="torch",
              inplace=False, advance=True, step_type=int, cast_param=True, moment_dtype="keep",
              zero_shortcut=False, mutate_step=False, order="torch", **validate):
    step = _lsa_validate(param_shard, grad_shard, state_shard, hp, **validate)
    lr, b1, b2, eps = hp["lr"], hp["beta1"], hp["beta2"], hp["eps"]
    m, v, g = state_shard["m"], state_shard["v"], grad_shard
    if zero_shortcut and not np.any(g) and not np.any(m):
        return param_shard, {"m": m.copy(), "v": v.copy(), "step": step + 1}
    t = step + 1
    if inplace:
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        new_m, new_v = m, v
    else:
        new_m = (b1 * m + (1 - b1) * g).astype(m.dtype)
        new_v = (b2 * v + (1 - b2) * g * g).astype(v.dtype)
    if moment_dtype == "param":
        new_m, new_v = new_m.astype(param_shard.dtype), new_v.astype(param_shard.dtype)
    if not bias_correction:
        update = lr * new_m / (np.sqrt(new_v) + eps)
    elif order == "textbook":
        m_hat = new_m / (1 - b1 ** t)
        v_hat = new_v / (1 - b2 ** t)
        update = lr * m_hat / (np.sqrt(v_hat) + eps)
    elif eps_mode == "torch":
        step_size = lr / (1 - b1 ** t)
        denom = np.sqrt(new_v) / math.sqrt(1 - b2 ** t) + eps
        update = step_size * (new_m / denom)
    elif eps_mode == "inside":
        m_hat = new_m / (1 - b1 ** t)
        v_hat = new_v / (1 - b2 ** t)
        update = lr * m_hat / np.sqrt(v_hat + eps)
    elif eps_mode == "before_correction":
        step_size = lr / (1 - b1 ** t)
        denom = (np.sqrt(new_v) + eps) / math.sqrt(1 - b2 ** t)
        update = step_size * (new_m / denom)
    else:
        raise AssertionError(eps_mode)
    new_p = param_shard - update
    if cast_param:
        new_p = new_p.astype(param_shard.dtype)
    if mutate_step:
        state_shard["step"] = t
    new_step = step_type(t if advance else step)
    return new_p, {"m": new_m, "v": new_v, "step": new_step}


def _lsa_no_bias_correction(p, g, s, hp):
    return _lsa_core(p, g, s, hp, bias_correction=False)


def _lsa_eps_inside_sqrt(p, g, s, hp):
    return _lsa_core(p, g, s, hp, eps_mode="inside")


def _lsa_eps_before_correction(p, g, s, hp):
    return _lsa_core(p, g, s, hp, eps_mode="before_correction")


def _lsa_inplace_moments(p, g, s, hp):
    return _lsa_core(p, g, s, hp, inplace=True)


def _lsa_step_not_advanced(p, g, s, hp):
    return _lsa_core(p, g, s, hp, advance=False)


def _lsa_float_step(p, g, s, hp):
    return _lsa_core(p, g, s, hp, step_type=float, accept_float_step=True)


def _lsa_extra_hp_keys(p, g, s, hp):
    return _lsa_core(p, g, s, hp, exact_keys=False)


def _lsa_rejects_beta_zero(p, g, s, hp):
    return _lsa_core(p, g, s, hp, beta_low="open")


def _lsa_accepts_nan_lr(p, g, s, hp):
    return _lsa_core(p, g, s, hp, check_finite=False)


def _lsa_accepts_bool_step(p, g, s, hp):
    return _lsa_core(p, g, s, hp, accept_bool_step=True)


def _lsa_accepts_float_step(p, g, s, hp):
    return _lsa_core(p, g, s, hp, accept_float_step=True)


def _lsa_no_cast_back(p, g, s, hp):
    return _lsa_core(p, g, s, hp, cast_param=False)


def _lsa_moments_in_param_dtype(p, g, s, hp):
    return _lsa_core(p, g, s, hp, moment_dtype="param")


def _lsa_no_moment_shape_check(p, g, s, hp):
    return _lsa_core(p, g, s, hp, check_moment_shape=False)


def _lsa_zero_grad_returns_input(p, g, s, hp):
    return _lsa_core(p, g, s, hp, zero_shortcut=True)


def _lsa_advances_callers_step(p, g, s, hp):
    return _lsa_core(p, g, s, hp, mutate_step=True)


def _lsa_alt_textbook_order(p, g, s, hp):
    return _lsa_core(p, g, s, hp, order="textbook")


def _lsa_alt_torch(param_shard, grad_shard, state_shard, hp):
    """The same step through torch's own in-place kernels, on copies."""
    import torch

    step = _lsa_validate(param_shard, grad_shard, state_shard, hp)
    lr, b1, b2, eps = hp["lr"], hp["beta1"], hp["beta2"], hp["eps"]
    t = step + 1
    p = torch.from_numpy(np.array(param_shard, copy=True))
    g = torch.from_numpy(np.asarray(grad_shard))
    m = torch.from_numpy(np.array(state_shard["m"], copy=True))
    v = torch.from_numpy(np.array(state_shard["v"], copy=True))
    m.lerp_(g.to(m.dtype), 1 - b1)
    v.mul_(b2).addcmul_(g.to(v.dtype), g.to(v.dtype), value=1 - b2)
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
    p_new = p.to(m.dtype).addcdiv(m, denom, value=-lr / bc1)
    return p_new.numpy().astype(param_shard.dtype), {"m": m.numpy(), "v": v.numpy(), "step": t}


# ======================================================================================================
# Lesson 34 · all_gather_param_shards
# ======================================================================================================

def _ags_core(shards, flat_numel, *, rule="exact_ceil", allow_tuple=True, check_dtype=True, check_ndim=True,
              check_float=True, accept_bool=False, index_in_msg=True, zero_padding_inplace=False, mode="trim"):
    kinds = (list, tuple) if allow_tuple else (list,)
    if not isinstance(shards, kinds) or len(shards) == 0:
        raise ValueError("shards must be a non-empty list of arrays")
    first = shards[0]
    for k, a in enumerate(shards):
        where = f"shards[{k}]" if index_in_msg else "shards"
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{where} must be a NumPy array")
        if check_float and not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{where} must be floating point")
        if check_ndim and a.ndim != 1:
            raise ValueError(f"{where} must be 1-D")
        if a.size != first.size:
            raise ValueError(f"{where} has length {a.size}, shards[0] has {first.size}")
        if check_dtype and a.dtype != first.dtype:
            raise ValueError(f"{where} has dtype {a.dtype}, shards[0] has {first.dtype}")
    if isinstance(flat_numel, bool) and not accept_bool:
        raise TypeError("flat_numel must be an integer, not a bool")
    if not isinstance(flat_numel, (int, np.integer)):
        raise TypeError("flat_numel must be an integer")
    N, s = len(shards), first.size
    if flat_numel < 1:
        raise ValueError("flat_numel must be >= 1")
    if rule == "exact_ceil":
        if -(-flat_numel // N) != s:
            raise ValueError(f"flat_numel={flat_numel} implies shards of {-(-flat_numel // N)}, got {s}")
    elif rule == "fits":
        if flat_numel > N * s:
            raise ValueError(f"flat_numel={flat_numel} exceeds the {N * s} gathered elements")
    if zero_padding_inplace:
        pad = N * s - flat_numel
        for k in range(N - 1, -1, -1):
            take = min(pad, s)
            if take:
                shards[k].reshape(-1)[s - take:] = 0
            pad -= take
    if mode == "trim":
        return np.concatenate([a.reshape(-1) for a in shards])[:flat_numel].copy()
    if mode == "trim_zeros":
        return np.trim_zeros(np.concatenate(shards), "b")
    raise AssertionError(mode)


def _ags_keeps_padding(shards, flat_numel):
    _ags_core(shards, flat_numel)
    return np.concatenate(shards)


def _ags_trim_zeros(shards, flat_numel):
    return _ags_core(shards, flat_numel, mode="trim_zeros")


def _ags_floor_from_each(shards, flat_numel):
    _ags_core(shards, flat_numel)
    q = flat_numel // len(shards)
    return np.concatenate([a[:q] for a in shards])


def _ags_only_checks_fit(shards, flat_numel):
    return _ags_core(shards, flat_numel, rule="fits")


def _ags_accepts_bool(shards, flat_numel):
    return _ags_core(shards, flat_numel, accept_bool=True)


def _ags_mixed_dtypes(shards, flat_numel):
    return _ags_core(shards, flat_numel, check_dtype=False)


def _ags_ravels_2d(shards, flat_numel):
    return _ags_core(shards, flat_numel, check_ndim=False)


def _ags_rejects_tuple(shards, flat_numel):
    return _ags_core(shards, flat_numel, allow_tuple=False)


def _ags_accepts_int_shards(shards, flat_numel):
    return _ags_core(shards, flat_numel, check_float=False)


def _ags_message_without_index(shards, flat_numel):
    return _ags_core(shards, flat_numel, index_in_msg=False)


def _ags_zeroes_padding_in_place(shards, flat_numel):
    return _ags_core(shards, flat_numel, zero_padding_inplace=True)


def _ags_single_shard_view(shards, flat_numel):
    out = _ags_core(shards, flat_numel)
    if len(shards) == 1 and flat_numel < shards[0].size:
        return shards[0][:flat_numel]
    return out


def _ags_alt_preallocated(shards, flat_numel):
    if not isinstance(shards, (list, tuple)) or not shards:
        raise ValueError("shards must be a non-empty list or tuple")
    s, dt = len(shards[0]) if isinstance(shards[0], np.ndarray) else None, None
    for k, a in enumerate(shards):
        if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind != "f":
            raise ValueError(f"shards[{k}] must be a 1-D floating array")
        if dt is None:
            dt = a.dtype
        if a.shape != (s,) or a.dtype != dt:
            raise ValueError(f"shards[{k}] differs from shards[0] in length or dtype")
    if type(flat_numel) is bool or not isinstance(flat_numel, (int, np.integer)):
        raise TypeError("flat_numel must be an integer")
    N = len(shards)
    if flat_numel < 1 or (flat_numel + N - 1) // N != s:
        raise ValueError(f"flat_numel={flat_numel} does not fit {N} shards of {s} "
                         f"(it implies shards of {(max(flat_numel, 1) + N - 1) // N})")
    out = np.empty(flat_numel, dtype=dt)
    for k, a in enumerate(shards):
        lo = k * s
        if lo >= flat_numel:
            break
        hi = min(lo + s, flat_numel)
        out[lo:hi] = a[:hi - lo]
    return out


# ======================================================================================================
# Lesson 35 · zero_optimizer_step
# ======================================================================================================

def _zos_validate(params, worker_grads, worker_states, *, check_shapes=True, exact_keys=True, check_v=True,
                  check_states=True):
    if not isinstance(worker_grads, list) or len(worker_grads) == 0:
        raise ValueError("worker_grads must be a non-empty list")
    for k, g in enumerate(worker_grads):
        if not isinstance(g, dict):
            raise TypeError(f"worker_grads[{k}] must be a dict")
        if (list(g) != list(params)) if exact_keys else not set(params) <= set(g):
            raise ValueError(f"worker_grads[{k}] keys differ from params")
        for key in params:
            if check_shapes and g[key].shape != params[key].shape:
                raise ValueError(f"worker_grads[{k}][{key!r}] has shape {g[key].shape}")
            if not check_shapes and g[key].size != params[key].size:
                raise ValueError(f"worker_grads[{k}][{key!r}] has the wrong size")
    if not isinstance(worker_states, list) or len(worker_states) != len(worker_grads):
        raise ValueError("worker_states must be a list with one state per gradient")
    N = len(worker_grads)
    psi = flatten_params(params).size
    ranges = partition_optimizer_state(psi, N)
    s = ranges[0][1] - ranges[0][0]
    if check_states:
        for k, st in enumerate(worker_states):
            if not isinstance(st, dict) or "m" not in st or "v" not in st:
                raise ValueError(f"worker_states[{k}] must be a dict with m and v")
            if st["m"].shape != (s,) or (check_v and st["v"].shape != (s,)):
                raise ValueError(f"worker_states[{k}] must hold (s,) = ({s},) moments")
    return N, psi, ranges, s


def _zos_core(params, worker_grads, worker_states, hp, *, reduce="mean", own_only=False, pad_dtype="like",
              padding_shortcut=False, bias_correction=True, inplace_states=False, **validate):
    N, psi, ranges, s = _zos_validate(params, worker_grads, worker_states, **validate)
    total = N * s
    flat_p = flatten_params(params)
    pad = np.zeros(total - psi) if pad_dtype == "float64" else np.zeros(total - psi, flat_p.dtype)
    flat_p = np.concatenate([flat_p, pad])
    flat_g = [np.concatenate([flatten_params(g, "worker_grads"), np.zeros(total - psi, flat_p.dtype)])
              for g in worker_grads]
    new_shards, new_states = [], []
    for k, (a, b) in enumerate(ranges):
        if own_only:
            g_k = flat_g[k][a:b].copy()
        else:
            if reduce == "mean":
                g_k = flat_g[0][a:b].copy()
                for j in range(1, N):
                    g_k = g_k + flat_g[j][a:b]
                g_k = g_k / g_k.dtype.type(N)
            elif reduce == "sum":
                g_k = sum(flat_g[j][a:b] for j in range(N))
            elif reduce == "divide_first":
                g_k = flat_g[0][a:b] / N
                for j in range(1, N):
                    g_k = g_k + flat_g[j][a:b] / N
            else:
                raise AssertionError(reduce)
        st = worker_states[k]
        if padding_shortcut and a >= psi:
            new_shards.append(flat_p[a:b].copy())
            new_states.append(st)
            continue
        if inplace_states:
            b1, b2 = hp["beta1"], hp["beta2"]
            st["m"] *= b1
            st["m"] += (1 - b1) * g_k
            st["v"] *= b2
            st["v"] += (1 - b2) * g_k * g_k
            t = st["step"] + 1
            st["step"] = t
            denom = np.sqrt(st["v"]) / math.sqrt(1 - b2 ** t) + hp["eps"]
            new_shards.append(flat_p[a:b] - hp["lr"] / (1 - b1 ** t) * st["m"] / denom)
            new_states.append(st)
            continue
        if bias_correction:
            p_k, st_new = local_shard_adam_update(flat_p[a:b], g_k, st, hp)
        else:
            b1, b2 = hp["beta1"], hp["beta2"]
            m = b1 * st["m"] + (1 - b1) * g_k
            v = b2 * st["v"] + (1 - b2) * g_k * g_k
            p_k = flat_p[a:b] - hp["lr"] * m / (np.sqrt(v) + hp["eps"])
            st_new = {"m": m, "v": v, "step": st["step"] + 1}
        new_shards.append(p_k)
        new_states.append(st_new)
    flat = all_gather_param_shards(new_shards, psi)
    return unflatten_params(flat, params), new_states


def _zos_replicated_state(params, worker_grads, worker_states, hp):
    N, psi, _, _ = _zos_validate(params, worker_grads, worker_states, check_states=False)
    full = [{"m": np.concatenate([st["m"] for st in worker_states])[:psi],
             "v": np.concatenate([st["v"] for st in worker_states])[:psi], "step": worker_states[0]["step"]}]
    flat_p = flatten_params(params)
    mean = sum(flatten_params(g) for g in worker_grads) / N
    new_p, st = local_shard_adam_update(flat_p, mean, full[0], hp)
    return unflatten_params(new_p, params), [{"m": st["m"].copy(), "v": st["v"].copy(), "step": st["step"]}
                                             for _ in range(N)]


def _zos_sums(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, reduce="sum")


def _zos_no_reduce_scatter(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, own_only=True)


def _zos_no_bias_correction(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, bias_correction=False)


def _zos_divide_first(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, reduce="divide_first")


def _zos_float64_padding(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, pad_dtype="float64")


def _zos_padding_worker_shortcut(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, padding_shortcut=True)


def _zos_inplace_states(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, inplace_states=True)


def _zos_size_only_grad_check(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, check_shapes=False)


def _zos_extra_grad_keys(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, exact_keys=False)


def _zos_checks_m_only(params, worker_grads, worker_states, hp):
    return _zos_core(params, worker_grads, worker_states, hp, check_v=False)


def _zos_alt_unsharded_then_split(params, worker_grads, worker_states, hp):
    """Adam is elementwise: run it once on the padded vector with the concatenated state, then re-cut."""
    N, psi, ranges, s = _zos_validate(params, worker_grads, worker_states)
    total = N * s
    dt = flatten_params(params).dtype
    padded = lambda v: np.concatenate([v, np.zeros(total - psi, v.dtype)])  # noqa: E731
    theta = padded(flatten_params(params).astype(dt))
    grads = [padded(flatten_params(g, "worker_grads")) for g in worker_grads]
    mean = grads[0].copy()
    for g in grads[1:]:
        mean = mean + g
    mean = mean / mean.dtype.type(N)
    state = {"m": np.concatenate([st["m"] for st in worker_states]),
             "v": np.concatenate([st["v"] for st in worker_states]),
             "step": worker_states[0]["step"]}
    new_theta, new_state = local_shard_adam_update(theta, mean, state, hp)
    new_states = [{"m": new_state["m"][a:b].copy(), "v": new_state["v"][a:b].copy(), "step": new_state["step"]}
                  for a, b in ranges]
    return unflatten_params(new_theta[:psi].copy(), params), new_states


# ======================================================================================================

MUTANTS = {
    "init_adam_state": [
        ("one zeros tree for both moments (contract: 'm[key] and v[key] must be different buffers')",
         _ias_shared_buffers),
        ("np.zeros_like(p): float16 moments (contract: 'float16 → float32')", _ias_zeros_like),
        ("always float32, also for float64 parameters (contract: 'float64 → float64')", _ias_always_float32),
        ("step starts at 1 (contract: 'step ... 0')", _ias_step_one),
        ("step is np.int64(0) (contract: 'Python int')", _ias_step_numpy),
        ("integer-array error names 'params' without the key (contract: 'TypeError naming params[key]')",
         _ias_message_without_key),
        ("accepts Python lists/floats as parameters via np.asarray (contract: 'not a floating-point array: "
         "TypeError')", _ias_accepts_non_arrays),
        ("accepts boolean and complex arrays (contract: 'not a floating-point array: TypeError')",
         _ias_accepts_bool_and_complex),
        ("read-only broadcast zeros (contract: buffers updated in place, 'every array returned is new')",
         _ias_readonly_broadcast),
    ],
    "partition_optimizer_state": [
        ("s = Ψ // N (contract: 's = ceil(Ψ/N)')", _pos_floor),
        ("last worker takes the remainder (contract: 'ranges[k] == (k*s, (k+1)*s)', equal lengths)",
         _pos_last_takes_rest),
        ("math.ceil(Ψ / N) through float64 (contract: 'integer arithmetic ... exact at every size')",
         _pos_float_ceil),
        ("accepts True (contract: 'True ... raises TypeError')", _pos_accepts_bool),
        ("accepts flat_numel=10.0 (contract: 'a non-integer (2.0, ...) raises TypeError')", _pos_accepts_float_psi),
        ("rejects NumPy integers (contract: 'int or a NumPy integer')", _pos_rejects_numpy_int),
        ("returns NumPy ints for NumPy inputs (contract: 'with Python ints')", _pos_returns_numpy_ints),
        ("accepts the string '4' (contract: '\"4\" raises TypeError')", _pos_accepts_numeric_string),
    ],
    "local_shard_adam_update": [
        ("no bias correction (contract: m_hat = m/(1-β1^t), v_hat = v/(1-β2^t))", _lsa_no_bias_correction),
        ("ε inside the square root (contract: sqrt(v_hat) + ε)", _lsa_eps_inside_sqrt),
        ("ε added before dividing by sqrt(1-β2^t) (contract: denom = sqrt(v)/sqrt(1-β2^t) + ε)",
         _lsa_eps_before_correction),
        ("moments updated in place (contract: 'Mutation: none')", _lsa_inplace_moments),
        ("step not advanced (contract: 'step = t')", _lsa_step_not_advanced),
        ("step returned as a float (contract: step is an int)", _lsa_float_step),
        ("hp with extra keys accepted (contract: 'exactly lr, beta1, beta2, eps')", _lsa_extra_hp_keys),
        ("β1 = 0 rejected (contract: '0 <= β < 1')", _lsa_rejects_beta_zero),
        ("lr / eps = nan or inf accepted (contract: 'lr and eps must be finite and > 0')", _lsa_accepts_nan_lr),
        ("step=True accepted (contract: 'a step that is ... not an integer')", _lsa_accepts_bool_step),
        ("step=2.0 accepted (contract: 'a step that is ... not an integer')", _lsa_accepts_float_step),
        ("new parameters not cast back (contract: 'new_param_shard: param_shard's dtype')", _lsa_no_cast_back),
        ("moments cast to the parameter dtype (contract: 'm, v keep their dtype')", _lsa_moments_in_param_dtype),
        ("moment shapes not checked (contract: 'a moment of another shape: ValueError naming state_shard')",
         _lsa_no_moment_shape_check),
        ("zero gradient and zero moments: returns param_shard itself (contract: 'every result is a new array')",
         _lsa_zero_grad_returns_input),
        ("writes t into the caller's state_shard['step'] (contract: 'the caller's state is left as it was')",
         _lsa_advances_callers_step),
    ],
    "all_gather_param_shards": [
        ("keeps the padding (contract: 'padding removed')", _ags_keeps_padding),
        ("strips trailing zeros (contract: 'by position — never by value')", _ags_trim_zeros),
        ("takes floor(Ψ/N) values from every shard (contract: padding all at the end)", _ags_floor_from_each),
        ("only checks Ψ <= N s (contract: 'one for which ceil(Ψ/N) != s' is an error naming flat_numel)",
         _ags_only_checks_fit),
        ("accepts flat_numel=True (contract: 'an integer (not bool)')", _ags_accepts_bool),
        ("accepts shards of different dtypes (contract: 'whose ... dtype differs from shards[0]')",
         _ags_mixed_dtypes),
        ("accepts 2-D shards and ravels them (contract: 'a shard that is not a 1-D floating array')",
         _ags_ravels_2d),
        ("refuses a tuple of shards (contract: 'a non-empty list or tuple')", _ags_rejects_tuple),
        ("accepts integer shards (contract: 'not a 1-D floating array')", _ags_accepts_int_shards),
        ("shard errors name 'shards' without the index (contract: 'name shards[k]')", _ags_message_without_index),
        ("zeroes the padding slots of the shards in place (contract: 'Mutation: none')",
         _ags_zeroes_padding_in_place),
    ],
    "zero_optimizer_step": [
        ("replicates the full state on every worker (contract: states of ceil(Ψ/N) elements)",
         _zos_replicated_state),
        ("sums instead of averaging in the reduce-scatter (contract: 'divided by N')", _zos_sums),
        ("each worker uses its own gradient slice (contract: reduce-scatter over all workers)",
         _zos_no_reduce_scatter),
        ("no bias correction in the local step (contract: Lesson 33's Adam)", _zos_no_bias_correction),
        ("pads with float64 zeros: float32 params come back float64 (contract: 'new_params: params' dtype')",
         _zos_float64_padding),
        ("padding-only workers return their old state object, step not advanced (contract: 'the advanced "
         "state shards', 'step': t)", _zos_padding_worker_shortcut),
        ("updates the state shards in place (contract: 'Mutation: none')", _zos_inplace_states),
        ("checks only each gradient's size, not its shape (contract: 'keys or shapes differ ... "
         "worker_grads[k]')", _zos_size_only_grad_check),
        ("ignores extra keys in a gradient (contract: 'a gradient whose keys ... differ from params')",
         _zos_extra_grad_keys),
        ("checks m's shape but not v's (contract: 'a state whose m/v is not (s,)')", _zos_checks_m_only),
    ],
}

ALTERNATIVES = {
    "init_adam_state": [("np.promote_types and np.full, dict comprehensions", _ias_alt_promote_full)],
    "partition_optimizer_state": [("divmod and a running start", _pos_alt_divmod)],
    "local_shard_adam_update": [
        ("textbook order lr·m_hat/(sqrt(v_hat)+ε) (equal to rounding, as the lesson says)", _lsa_alt_textbook_order),
        ("torch kernels (lerp_, addcmul_, addcdiv) on copies", _lsa_alt_torch),
    ],
    "all_gather_param_shards": [
        ("preallocated output filled shard by shard", _ags_alt_preallocated),
        # was a mutant: one shard never has padding (ceil(Ψ/1) = Ψ = s), and invalid inputs are refused
        # before the shortcut, so its view branch never runs
        ("returns a view for 'one shard with padding', a layout that cannot occur", _ags_single_shard_view),
    ],
    "zero_optimizer_step": [("one unsharded Adam on the padded vector, state re-cut into shards",
                             _zos_alt_unsharded_then_split)],
}

DISPUTED = {
    "partition_optimizer_state": [
        ("validates num_workers before flat_numel (contract: 'Validate each argument in turn')",
         "'Validate each argument in turn' does not say which error wins when both arguments are invalid; "
         "each is named correctly on its own"),
    ],
}


# --------------------------------------------------------------------------------------------------------------
# Second correct alternatives (issue 27), written blind from the release notebooks.
# --------------------------------------------------------------------------------------------------------------
def _ias_alt_result_type_zeros(params):
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    m, v = {}, {}
    for key, p in params.items():
        if not isinstance(p, np.ndarray) or not np.issubdtype(p.dtype, np.floating):
            raise TypeError(f"params[{key!r}] must be a floating-point array")
        dtype = np.result_type(p.dtype, np.float32)
        m[key], v[key] = np.zeros(p.shape, dtype), np.zeros(p.shape, dtype)
    return dict(m=m, v=v, step=0)


def _pos_alt_ceil_by_addition(flat_numel, num_workers):
    for name, value in (("flat_numel", flat_numel), ("num_workers", num_workers)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    psi, N = int(flat_numel), int(num_workers)
    s = (psi + N - 1) // N  # ceil in integer arithmetic
    return list(zip(range(0, N * s, s), range(s, N * s + 1, s)))


def _zos_alt_stacked_mean(params, worker_grads, worker_states, hp):
    """The reduce-scatter as np.mean over the stacked slices (another summation order than worker order)."""
    N, psi, ranges, s = _zos_validate(params, worker_grads, worker_states)
    flat_p = flatten_params(params)
    pad = np.zeros(N * s - psi, flat_p.dtype)
    flat_p = np.concatenate([flat_p, pad])
    stacked = np.stack([np.concatenate([flatten_params(g, "worker_grads").astype(flat_p.dtype), pad])
                        for g in worker_grads])  # (N, N s)
    shards, states = [], []
    for k, (a, b) in enumerate(ranges):
        g_k = stacked[:, a:b].mean(axis=0).astype(flat_p.dtype)
        p_k, st = local_shard_adam_update(flat_p[a:b], g_k, worker_states[k], hp)
        shards.append(p_k)
        states.append(st)
    return unflatten_params(all_gather_param_shards(shards, psi), params), states


for _name, _entry in [
    ("init_adam_state", ("np.result_type and np.zeros per buffer; dict(m=, v=, step=)", _ias_alt_result_type_zeros)),
    ("partition_optimizer_state", ("s = (psi + N - 1) // N; zip of two ranges", _pos_alt_ceil_by_addition)),
    ("zero_optimizer_step", ("np.mean over the stacked slices (another summation order)", _zos_alt_stacked_mean)),
    ("zero_optimizer_step", ("each slice divided by N before adding (DDP's order; was DISPUTED, the check accepts it)",
                             _zos_divide_first)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
