"""Red team, Module 3 Part 4 (parameter utilities and aggregation): wrong answers and correct alternatives written
from the release notebooks only."""
from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn


def _check_module(model):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 11: clone_model_state
# ----------------------------------------------------------------------------------------------------------------------

def _clone(model, *, flaw=None):
    _check_module(model)
    if flaw == "state_dict":
        return model.state_dict()
    if flaw == "parameters_only":
        return {k: v.detach().clone() for k, v in model.named_parameters()}
    if flaw == "keep_vars":
        return {k: v.clone() for k, v in model.state_dict(keep_vars=True).items()}
    if flaw == "sorted":
        live = model.state_dict()
        return {k: live[k].detach().clone() for k in sorted(live)}
    out = {}
    params = {id(p) for p in model.parameters()}
    for k, v in model.state_dict(keep_vars=True).items():
        if flaw == "float":
            out[k] = v.detach().clone().float()
        elif flaw == "share_buffers" and id(v) not in params:
            out[k] = v.detach()
        elif flaw == "tolist":
            out[k] = torch.tensor(v.detach().tolist())
        elif flaw == "cpu":
            out[k] = v.detach().cpu().clone()
        else:
            out[k] = v.detach().clone()
    if flaw == "freeze_eval":
        model.eval()
    return out


def _mkc(flaw, doc):
    def clone_model_state(model):
        return _clone(model, flaw=flaw)
    clone_model_state.__name__ = f"_clone_{flaw}"
    clone_model_state.__doc__ = doc
    return clone_model_state


_clone_state_dict = _mkc("state_dict", "returns model.state_dict() itself")
_clone_parameters_only = _mkc("parameters_only", "named_parameters only")
_clone_keep_vars = _mkc("keep_vars", "state_dict(keep_vars=True) then clone: requires_grad and a graph")
_clone_sorted = _mkc("sorted", "keys sorted")
_clone_float = _mkc("float", ".float() on every entry")
_clone_share_buffers = _mkc("share_buffers", "parameters cloned, buffers returned as detached views")
_clone_tolist = _mkc("tolist", "rebuilt with torch.tensor(v.tolist()): float64 becomes float32")
_clone_cpu = _mkc("cpu", ".cpu().clone(): not the model's device (fails on meta)")
_clone_freeze_eval = _mkc("freeze_eval", "model.eval() to 'freeze' it, left in eval mode")


def _clone_alt_deepcopy_model(model):
    """Deep-copy the whole module and take the copy's state_dict: nobody else holds the copy's memory."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    return dict(copy.deepcopy(model).state_dict())


def _clone_alt_empty_like(model):
    """empty_like + copy_ under no_grad, built key by key."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model)!r}")
    out = {}
    with torch.no_grad():
        for key, tensor in model.state_dict().items():
            fresh = torch.empty_like(tensor, requires_grad=False)
            fresh.copy_(tensor)
            out[key] = fresh
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 12: load_model_state
# ----------------------------------------------------------------------------------------------------------------------

def _load(model, state, *, flaw=None):
    _check_module(model)
    if flaw == "pairs_ok" and not isinstance(state, Mapping):
        try:
            state = dict(state)
        except (TypeError, ValueError):
            raise TypeError("state must be a mapping") from None
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping, got {type(state).__name__}")
    live = model.state_dict()
    missing = [k for k in live if k not in state]
    extra = [k for k in state if k not in live]
    if missing or (extra and flaw != "extra_ok"):
        raise ValueError(f"state does not match the model: missing {missing}, unexpected {extra}")
    for key, target in live.items():
        value = state[key]
        if flaw != "no_tensor_check" and not isinstance(value, torch.Tensor):
            raise ValueError(f"state[{key!r}] is not a tensor")
        if flaw != "no_shape_check" and value.shape != target.shape:
            raise ValueError(f"state[{key!r}] has shape {tuple(value.shape)}, the model {tuple(target.shape)}")
        dtype_checked = target.is_floating_point() if flaw == "float_dtype_only" else True
        if dtype_checked and value.dtype != target.dtype:
            raise ValueError(f"state[{key!r}] has dtype {value.dtype}, the model {target.dtype}")
    with torch.no_grad():
        for key, target in live.items():
            target.copy_(state[key])
    if flaw == "pop":
        for key in list(live):
            state.pop(key)
    if flaw == "train_after":
        model.train()
    return model


def _mkld(flaw, doc):
    def load_model_state(model, state):
        return _load(model, state, flaw=flaw)
    load_model_state.__name__ = f"_load_{flaw}"
    load_model_state.__doc__ = doc
    return load_model_state


_load_extra_ok = _mkld("extra_ok", "unexpected keys ignored")
_load_no_shape_check = _mkld("no_shape_check", "copy_ broadcasts a wrong shape")
_load_float_dtype_only = _mkld("float_dtype_only", "dtype checked for floating tensors only")
_load_pop = _mkld("pop", "pops the loaded keys from the caller's dict")
_load_train_after = _mkld("train_after", "model.train() after loading")
_load_pairs_ok = _mkld("pairs_ok", "a list of (key, tensor) pairs accepted")
_load_no_tensor_check = _mkld("no_tensor_check", "a non-tensor value raises AttributeError")


def _load_strict_false(model, state):
    _check_module(model)
    if not isinstance(state, Mapping):
        raise TypeError("state must be a mapping")
    model.load_state_dict(dict(state), strict=False)
    return model


def _load_assign(model, state):
    _load(model, {k: v for k, v in state.items()} if isinstance(state, Mapping) else state)   # validation + copy
    model.load_state_dict(dict(state), assign=True)
    return model


def _load_not_atomic(model, state):
    _check_module(model)
    if not isinstance(state, Mapping):
        raise TypeError("state must be a mapping")
    live = model.state_dict()
    if set(state) - set(live):
        raise ValueError("state has unexpected keys")
    with torch.no_grad():
        for key, target in live.items():
            if key not in state:
                raise ValueError(f"state is missing {key!r}")
            value = state[key]
            if value.shape != target.shape or value.dtype != target.dtype:
                raise ValueError(f"state[{key!r}] does not match")
            target.copy_(value)
    return model


def _load_rebind_data(model, state):
    _load(model, state)                      # validation (and a first copy)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.data = state[name].clone()
    return model


def _load_alt_load_state_dict(model, state):
    """Validate everything first, then PyTorch's strict load_state_dict, which copies into the existing tensors."""
    if not isinstance(model, nn.Module):
        raise TypeError("model: expected an nn.Module")
    if not isinstance(state, Mapping):
        raise TypeError("state: expected a mapping of tensors")
    live = model.state_dict()
    if set(live) != set(state):
        raise ValueError(f"state: keys differ (missing {sorted(set(live) - set(state))}, "
                         f"unexpected {sorted(set(state) - set(live))})")
    for key in live:
        value = state[key]
        if not torch.is_tensor(value) or value.shape != live[key].shape or value.dtype != live[key].dtype:
            raise ValueError(f"state[{key!r}]: expected a {live[key].dtype} tensor of shape {tuple(live[key].shape)}")
    model.load_state_dict({key: state[key] for key in live}, strict=True)
    return model


def _load_alt_named_tensors(model, state):
    """Walk named_parameters and named_buffers and copy_ into each under no_grad."""
    _check_module(model)
    if not isinstance(state, Mapping):
        raise TypeError("state must be a Mapping")
    targets = dict(model.named_parameters())
    targets.update({k: v for k, v in model.named_buffers() if k in model.state_dict()})
    if set(targets) != set(state):
        raise ValueError("state: the keys are not the model's")
    for key, target in targets.items():
        value = state[key]
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(target.shape) \
                or value.dtype is not target.dtype:
            raise ValueError(f"state[{key}]: shape or dtype mismatch")
    with torch.no_grad():
        for key, target in targets.items():
            target.copy_(state[key])
    return model


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 13: zeros_like_state
# ----------------------------------------------------------------------------------------------------------------------

def _zeros(state, *, flaw=None):
    kind = dict if flaw == "dict_only" else Mapping
    if not isinstance(state, kind):
        raise TypeError(f"state must be a mapping, got {type(state).__name__}")
    if flaw != "empty_ok" and len(state) == 0:
        raise ValueError("state is empty")
    out = {}
    for key, value in state.items():
        if flaw == "numpy_ok" and isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if not isinstance(value, torch.Tensor):
            where = "state" if flaw == "unnamed_key" else f"state[{key!r}]"
            raise TypeError(f"{where} is not a tensor: {type(value).__name__}")
        if flaw == "times_zero":
            out[key] = value * 0
        elif flaw == "default_dtype":
            out[key] = torch.zeros(value.shape)
        elif flaw == "no_device":
            out[key] = torch.zeros(value.shape, dtype=value.dtype)
        elif flaw == "in_place":
            out[key] = value.zero_()
        else:
            out[key] = torch.zeros_like(value)
    return out


def _mkz(flaw, doc):
    def zeros_like_state(state):
        return _zeros(state, flaw=flaw)
    zeros_like_state.__name__ = f"_zeros_{flaw}"
    zeros_like_state.__doc__ = doc
    return zeros_like_state


_zeros_times_zero = _mkz("times_zero", "state[k] * 0")
_zeros_default_dtype = _mkz("default_dtype", "torch.zeros(shape)")
_zeros_no_device = _mkz("no_device", "torch.zeros(shape, dtype=...)")
_zeros_in_place = _mkz("in_place", "zero_() on the input")
_zeros_empty_ok = _mkz("empty_ok", "an empty mapping gives {}")
_zeros_unnamed_key = _mkz("unnamed_key", "message names state but not the key")
_zeros_dict_only = _mkz("dict_only", "isinstance(state, dict)")
_zeros_numpy_ok = _mkz("numpy_ok", "NumPy arrays converted")


def _zeros_alt_new_zeros(state):
    """tensor.new_zeros(shape): dtype and device follow the tensor (contiguous layout)."""
    if not isinstance(state, Mapping):
        raise TypeError("state: expected a mapping")
    if not state:
        raise ValueError("state: empty mapping")
    for key, value in state.items():
        if not torch.is_tensor(value):
            raise TypeError(f"state[{key!r}]: expected a tensor, got {type(value).__name__}")
    return {key: value.new_zeros(value.shape) for key, value in state.items()}


def _zeros_alt_explicit(state):
    """torch.zeros with the tensor's dtype and device spelled out."""
    if not isinstance(state, Mapping):
        raise TypeError("state: not a mapping")
    if len(state) == 0:
        raise ValueError("state: nothing to copy")
    out = {}
    for key in state:
        value = state[key]
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"state[{key!r}]: not a tensor")
        out[key] = torch.zeros(tuple(value.shape), dtype=value.dtype, device=value.device)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 14: add_state_dicts
# ----------------------------------------------------------------------------------------------------------------------

def _check_operand(name, x, *, allow_empty=False):
    if not isinstance(x, Mapping):
        raise TypeError(f"{name} must be a mapping, got {type(x).__name__}")
    if not allow_empty and len(x) == 0:
        raise ValueError(f"{name} is empty")
    for key, value in x.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name}[{key!r}] is not a tensor")


def _add(a, b, *, flaw=None):
    _check_operand("a", a, allow_empty=flaw == "empty_ok")
    _check_operand("b", b, allow_empty=flaw == "empty_ok")
    missing = [k for k in a if k not in b]
    extra = [k for k in b if k not in a]
    if missing or (extra and flaw != "extra_ok"):
        if flaw == "blames_a":
            raise ValueError(f"a and the other operand disagree on keys: {missing + extra}")
        raise ValueError(f"b does not match a: missing {missing}, unexpected {extra}")
    for key in a:
        x, y = a[key], b[key]
        if flaw != "no_shape_check" and x.shape != y.shape:
            raise ValueError(f"b[{key!r}] has shape {tuple(y.shape)}, a {tuple(x.shape)}")
        if x.dtype != y.dtype:
            raise ValueError(f"b[{key!r}] has dtype {y.dtype}, a {x.dtype}")
        if flaw != "no_device_check" and x.device != y.device:
            raise ValueError(f"b[{key!r}] is on {y.device}, a on {x.device}")
    if flaw == "via_float64":
        return {k: (a[k].to(torch.float64) + b[k].to(torch.float64)).to(a[k].dtype) for k in a}
    if flaw == "b_order":
        return {k: a[k] + b[k] for k in b}
    return {k: a[k] + b[k] for k in a}


def _mka(flaw, doc):
    def add_state_dicts(a, b):
        return _add(a, b, flaw=flaw)
    add_state_dicts.__name__ = f"_add_{flaw}"
    add_state_dicts.__doc__ = doc
    return add_state_dicts


_add_extra_ok = _mka("extra_ok", "extra keys of b ignored")
_add_no_shape_check = _mka("no_shape_check", "shapes broadcast")
_add_no_device_check = _mka("no_device_check", "devices not compared")
_add_empty_ok = _mka("empty_ok", "empty operands give {}")
_add_blames_a = _mka("blames_a", "the key error names a, not b")
_add_via_float64 = _mka("via_float64", "every key summed in float64 and cast back (int64 loses exactness)")
_add_b_order = _mka("b_order", "result in b's key order")


def _add_by_position(a, b):
    _check_operand("a", a)
    _check_operand("b", b)
    if len(a) != len(b):
        raise ValueError("b does not have a's keys")
    return {k: x + y for (k, x), y in zip(a.items(), b.values())}


def _add_in_place(a, b):
    _add(a, b)                                          # validation
    for k in a:
        a[k] += b[k]
    return a


def _add_common_keys(a, b):
    _check_operand("a", a)
    _check_operand("b", b)
    return {k: a[k] + b[k] for k in a if k in b}


def _add_no_dtype_check(a, b):
    _check_operand("a", a)
    _check_operand("b", b)
    if set(a) != set(b):
        raise ValueError("b's keys differ from a's")
    return {k: a[k] + b[k] for k in a}


def _add_alt_clone_add(a, b):
    """clone, then add_ into the clone: new memory, the operands' dtype kept."""
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, Mapping):
            raise TypeError(f"{name}: expected a mapping")
        if not x:
            raise ValueError(f"{name}: empty")
        if not all(torch.is_tensor(v) for v in x.values()):
            raise TypeError(f"{name}: every value must be a tensor")
    if set(a) != set(b):
        raise ValueError(f"b: missing {sorted(set(a) - set(b))}, unexpected {sorted(set(b) - set(a))}")
    out = {}
    for key, x in a.items():
        y = b[key]
        if (x.shape, x.dtype, x.device) != (y.shape, y.dtype, y.device):
            raise ValueError(f"b[{key!r}]: shape/dtype/device differ from a's")
        out[key] = x.clone().add_(y)
    return out


def _add_alt_float64_floats(a, b):
    """Floating keys summed in float64 and rounded once to their dtype (double rounding is innocuous for one
    addition); integer keys added natively."""
    _add(a, b)                                           # validation
    out = {}
    for key in a:
        if a[key].is_floating_point():
            out[key] = (a[key].double() + b[key].double()).to(a[key].dtype)
        else:
            out[key] = torch.add(a[key], b[key])
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 15: scale_state_dict
# ----------------------------------------------------------------------------------------------------------------------

def _scale(state, c, *, flaw=None):
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping, got {type(state).__name__}")
    if flaw != "empty_ok" and len(state) == 0:
        raise ValueError("state is empty")
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"state[{key!r}] is not a tensor")
    if flaw == "tensor_c" and isinstance(c, torch.Tensor) and c.numel() == 1:
        c = c.item()
    if flaw == "python_types_only":
        if type(c) not in (int, float) and not isinstance(c, float):
            raise TypeError(f"c must be an int or a float, got {type(c).__name__}")
    elif (flaw != "bool_c" and isinstance(c, (bool, np.bool_))) or not isinstance(c, numbers.Real):
        raise TypeError(f"c must be a real number, got {type(c).__name__}")
    c = float(c)
    if math.isnan(c) or (flaw != "inf_c" and math.isinf(c)):
        raise ValueError(f"c must be finite, got {c}")
    out = {}
    for key, value in state.items():
        if not value.is_floating_point():
            out[key] = value if (flaw == "bool_passthrough" and value.dtype == torch.bool) else value.clone()
        elif flaw == "zero_shortcut" and c == 0:
            out[key] = torch.zeros_like(value)
        elif flaw == "c_float32_tensor":
            out[key] = value * torch.tensor(c, dtype=torch.float32)
        elif flaw == "float32_compute":
            out[key] = (value.to(torch.float32) * c).to(value.dtype)
        else:
            out[key] = value * c
    return out


def _mksc(flaw, doc):
    def scale_state_dict(state, c):
        return _scale(state, c, flaw=flaw)
    scale_state_dict.__name__ = f"_scale_{flaw}"
    scale_state_dict.__doc__ = doc
    return scale_state_dict


_scale_bool_c = _mksc("bool_c", "c=True accepted")
_scale_tensor_c = _mksc("tensor_c", "0-d tensor c accepted")
_scale_inf_c = _mksc("inf_c", "c=inf accepted")
_scale_python_types_only = _mksc("python_types_only", "np.float32 c refused")
_scale_bool_passthrough = _mksc("bool_passthrough", "bool tensors returned as the input's own")
_scale_zero_shortcut = _mksc("zero_shortcut", "c == 0 answered with zeros_like")
_scale_c_float32_tensor = _mksc("c_float32_tensor", "c as a float32 tensor: float64 keys lose precision")
_scale_float32_compute = _mksc("float32_compute", "every floating key computed in float32 and cast back")
_scale_empty_ok = _mksc("empty_ok", "an empty state gives {}")


def _scale_everything(state, c):
    _scale(state, c)
    return {k: v * float(c) for k, v in state.items()}


def _scale_in_place(state, c):
    _scale(state, c)
    for v in state.values():
        if v.is_floating_point():
            v.mul_(float(c))
    return dict(state)


def _scale_alt_upcast_half(state, c):
    """Low-precision floats upcast to float32, multiplied and rounded back (PyTorch's own opmath); torch.mul."""
    if not isinstance(state, Mapping):
        raise TypeError("state: expected a mapping")
    if not state:
        raise ValueError("state: empty")
    if isinstance(c, bool) or not isinstance(c, numbers.Real):
        raise TypeError(f"c: expected a real number, got {type(c).__name__}")
    if not math.isfinite(c):
        raise ValueError(f"c: expected a finite number, got {c}")
    c = float(c)
    out = {}
    for key, value in state.items():
        if not torch.is_tensor(value):
            raise TypeError(f"state[{key!r}]: expected a tensor")
        if value.dtype in (torch.float16, torch.bfloat16):
            out[key] = torch.mul(value.float(), c).to(value.dtype)
        elif value.is_floating_point():
            out[key] = torch.mul(value, c)
        else:
            out[key] = value.detach().clone()
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 16: aggregate_weighted_average
# ----------------------------------------------------------------------------------------------------------------------

def _agg(states, num_samples, *, flaw=None):
    kinds = (list,) if flaw == "list_only" else (list, tuple)
    if not isinstance(states, kinds) or (len(states) == 0 and flaw != "empty_unchecked"):
        raise ValueError("states must be a non-empty list of state dicts")
    if isinstance(num_samples, torch.Tensor):
        if flaw == "no_tensor_counts":
            raise TypeError("num_samples must be a list of integers")
        num_samples = num_samples.tolist()
    if not isinstance(num_samples, (list, tuple)):
        raise TypeError("num_samples must be a list of integers")
    if len(num_samples) != len(states):
        raise ValueError(f"num_samples has {len(num_samples)} counts for {len(states)} states")
    counts = []
    for n in num_samples:
        if flaw == "float_counts" and isinstance(n, float) and n >= 1:
            counts.append(n)
            continue
        ok = isinstance(n, (int, np.integer)) if flaw == "bool_counts" else (
            isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_)))
        if not ok:
            raise TypeError(f"num_samples must hold integers, got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"num_samples must be >= 1, got {n}")
        counts.append(int(n))
    ref = states[0]
    for k, s in enumerate(states):
        if not isinstance(s, Mapping):
            raise ValueError(f"states[{k}] is not a mapping")
        if set(s) != set(ref):
            raise ValueError(f"states[{k}] has keys {sorted(s)}, states[0] {sorted(ref)}")
        if flaw == "keys_only":
            continue
        for key in ref:
            x, y = ref[key], s[key]
            if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
                raise ValueError(f"states[{k}][{key!r}] differs in shape, dtype or device")
    m_t = sum(counts)
    weights = [n / m_t for n in counts]
    if flaw == "float32_weights":
        weights = torch.tensor(counts, dtype=torch.float32) / float(m_t)
        weights = [float(w) for w in weights]
    keys = sorted(ref) if flaw == "sorted_keys" else list(ref)
    out = {}
    for key in keys:
        t0 = ref[key]
        if flaw == "native_dtype" and t0.is_floating_point():
            acc = torch.zeros_like(t0)
            for w, s in zip(weights, states):
                acc = acc + s[key] * w
            out[key] = acc
            continue
        if not t0.is_floating_point():
            if flaw == "reuse_agreeing_counters" and all(torch.equal(s[key], t0) for s in states):
                out[key] = t0
                continue
        acc = torch.zeros(t0.shape, dtype=torch.float64, device=t0.device)
        for w, s in zip(weights, states):
            acc += w * s[key].to(torch.float64)
        if t0.is_floating_point():
            out[key] = acc.to(t0.dtype)
        elif t0.dtype == torch.bool and flaw == "bool_any":
            out[key] = acc > 0
        elif flaw == "ties_up":
            out[key] = torch.floor(acc + 0.5).to(t0.dtype)
        elif flaw == "truncate":
            out[key] = acc.to(t0.dtype)
        else:
            out[key] = torch.round(acc).to(t0.dtype)
    return out


def _mkag(flaw, doc):
    def aggregate_weighted_average(states, num_samples):
        return _agg(states, num_samples, flaw=flaw)
    aggregate_weighted_average.__name__ = f"_agg_{flaw}"
    aggregate_weighted_average.__doc__ = doc
    return aggregate_weighted_average


_agg_truncate = _mkag("truncate", "counters cast without rounding")
_agg_native_dtype = _mkag("native_dtype", "accumulated in each tensor's own dtype")
_agg_ties_up = _mkag("ties_up", "counters rounded half up")
_agg_no_tensor_counts = _mkag("no_tensor_counts", "an int tensor of counts refused")
_agg_bool_counts = _mkag("bool_counts", "True accepted as a count")
_agg_float_counts = _mkag("float_counts", "float counts accepted")
_agg_keys_only = _mkag("keys_only", "shapes/dtypes/devices not compared")
_agg_sorted_keys = _mkag("sorted_keys", "result keys sorted")
_agg_float32_weights = _mkag("float32_weights", "weights computed as float32")
_agg_reuse_agreeing_counters = _mkag("reuse_agreeing_counters", "identical counters returned as states[0]'s tensor")
_agg_bool_any = _mkag("bool_any", "bool buffers combined with any()")
_agg_list_only = _mkag("list_only", "a tuple of states refused")
_agg_empty_unchecked = _mkag("empty_unchecked", "an empty list fails with ZeroDivisionError/IndexError")


def _agg_unweighted(states, num_samples):
    _agg(states, num_samples)
    return _agg(states, [1] * len(states))


def _agg_in_place_first(states, num_samples):
    result = _agg(states, num_samples)
    for key, value in result.items():
        states[0][key].copy_(value)
    return dict(states[0])


def _agg_alt_tensordot(states, num_samples):
    """torch.stack in float64 and tensordot with the weights, integer keys through torch.round."""
    if not isinstance(states, (list, tuple)) or not states:
        raise ValueError("states: expected a non-empty list of state dicts")
    counts = num_samples.tolist() if torch.is_tensor(num_samples) else num_samples
    if not isinstance(counts, (list, tuple)):
        raise TypeError("num_samples: expected a list of ints")
    if len(counts) != len(states):
        raise ValueError("num_samples: one count per state is required")
    for n in counts:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"num_samples: {n!r} is not an integer")
        if n < 1:
            raise ValueError(f"num_samples: {n} < 1")
    first = states[0]
    for k, s in enumerate(states):
        if not isinstance(s, Mapping) or set(s) != set(first):
            raise ValueError(f"states[{k}]: keys differ from states[0]")
        for key in first:
            if (s[key].shape, s[key].dtype, s[key].device) != (first[key].shape, first[key].dtype, first[key].device):
                raise ValueError(f"states[{k}][{key!r}]: shape/dtype/device differ")
    p = torch.tensor([int(n) for n in counts], dtype=torch.float64)
    p = p / p.sum()
    out = {}
    for key, ref in first.items():
        stacked = torch.stack([s[key].to(torch.float64) for s in states])
        mean = torch.tensordot(p.to(ref.device), stacked, dims=1)
        out[key] = mean.to(ref.dtype) if ref.is_floating_point() else torch.round(mean).to(ref.dtype)
    return out


def _agg_alt_divide_last(states, num_samples):
    """sum_k n_k w_k in float64, divided by m_t at the end."""
    _agg(states, num_samples)                            # validation
    counts = [int(n) for n in (num_samples.tolist() if torch.is_tensor(num_samples) else num_samples)]
    m_t = sum(counts)
    out = {}
    for key, ref in states[0].items():
        total = torch.zeros(ref.shape, dtype=torch.float64, device=ref.device)
        for n, s in zip(counts, states):
            total += float(n) * s[key].double()
        mean = total / m_t
        out[key] = mean.to(ref.dtype) if ref.is_floating_point() else mean.round().to(ref.dtype)
    return out


MUTANTS = {
    "clone_model_state": [
        ("returns model.state_dict() ('a detached copy ... its own storage')", _clone_state_dict),
        ("named_parameters only ('model.parameters() misses the buffers')", _clone_parameters_only),
        ("state_dict(keep_vars=True).clone(): requires_grad and a graph ('requires_grad=False')", _clone_keep_vars),
        ("keys sorted ('in the same order')", _clone_sorted),
        (".float() on every entry ('the shape, dtype and device of the model's tensor')", _clone_float),
        ("buffers returned as detached views ('its own storage' for every key)", _clone_share_buffers),
        ("rebuilt from .tolist(): a float64 model comes back float32 ('same dtype')", _clone_tolist),
        (".cpu().clone(): the model's device is not kept; meta tensors fail ('same device')", _clone_cpu),
        ("model.eval() to freeze it ('its training mode [is] left as [it was]')", _clone_freeze_eval),
    ],
    "load_model_state": [
        ("load_state_dict(strict=False) ('a missing or extra key ... ValueError')", _load_strict_false),
        ("load_state_dict(assign=True) ('the Parameter objects, their storage ... stay the same')", _load_assign),
        ("copies key by key and raises at the first bad key ('raised before anything is copied')", _load_not_atomic),
        ("param.data = state[k].clone() ('their storage ... stay the same')", _load_rebind_data),
        ("unexpected keys ignored ('a missing or extra key')", _load_extra_ok),
        ("no shape check: copy_ broadcasts ('a tensor of another shape ... ValueError')", _load_no_shape_check),
        ("dtype checked only for floating tensors: a float counter is cast ('or dtype')", _load_float_dtype_only),
        ("pops the loaded keys from the caller's state ('state is not mutated')", _load_pop),
        ("model.train() after loading ('the model's training mode stay[s] the same')", _load_train_after),
        ("a list of (key, tensor) pairs accepted ('state not a mapping -> TypeError')", _load_pairs_ok),
        ("a non-tensor value raises AttributeError ('ValueError naming state (and the key)')", _load_no_tensor_check),
    ],
    "zeros_like_state": [
        ("state[k] * 0: inf/NaN give NaN ('the input's values are never read')", _zeros_times_zero),
        ("torch.zeros(shape): float32 CPU ('state[k]'s shape, dtype and device')", _zeros_default_dtype),
        ("torch.zeros(shape, dtype): device lost ('and device')", _zeros_no_device),
        ("zero_() on the input ('Mutation: none')", _zeros_in_place),
        ("an empty mapping gives {} ('an empty mapping (ValueError)')", _zeros_empty_ok),
        ("message names state but not the key ('TypeError naming state[key]')", _zeros_unnamed_key),
        ("isinstance(state, dict): other mappings refused ('any state dict', 'state not a mapping')", _zeros_dict_only),
        ("NumPy arrays converted ('a value that is not a tensor (TypeError)')", _zeros_numpy_ok),
    ],
    "add_state_dicts": [
        ("pairs by position ('matched by name')", _add_by_position),
        ("a[k] += b[k], returns a ('Mutation: none')", _add_in_place),
        ("common keys only ('a key in one dict and not the other ... ValueError')", _add_common_keys),
        ("no dtype check: int64 + float32 promotes ('in a[k]'s dtype', dtype mismatch -> ValueError)",
         _add_no_dtype_check),
        ("extra keys of b ignored ('a key in one dict and not the other')", _add_extra_ok),
        ("no shape check: (2,) + (1,) broadcasts ('shape ... differ: ValueError')", _add_no_shape_check),
        ("no device check ('or device differ: ValueError naming b')", _add_no_device_check),
        ("empty operands give {} ('is empty (ValueError)')", _add_empty_ok),
        ("the key error names a ('ValueError naming b and the key')", _add_blames_a),
        ("everything summed in float64: int64 above 2**53 is rounded ('Integers add exactly')", _add_via_float64),
        ("result in b's key order ('in a's key order')", _add_b_order),
    ],
    "scale_state_dict": [
        ("scales int64 counters too ('integer ... result[k] = a copy')", _scale_everything),
        ("mul_ on the input ('Mutation: none')", _scale_in_place),
        ("c=True accepted ('not bool')", _scale_bool_c),
        ("0-d tensor c accepted ('a tensor -> TypeError naming c')", _scale_tensor_c),
        ("c=inf accepted ('NaN or infinite -> ValueError')", _scale_inf_c),
        ("np.float32 c refused ('int, float, NumPy scalar')", _scale_python_types_only),
        ("bool tensors returned as the input's own ('every result tensor is new memory')", _scale_bool_passthrough),
        ("c == 0 answered with zeros_like: inf*0 and -x*0 not as c*state ('floating result[k] = c * state[k]')",
         _scale_zero_shortcut),
        ("c turned into a float32 tensor: float64 keys scaled by fl32(c) ('float64 stays float64', c * state[k])",
         _scale_c_float32_tensor),
        ("every floating key computed in float32 and cast back: float64 loses digits ('c * state[k] in its dtype')",
         _scale_float32_compute),
        ("an empty state gives {} ('state not a non-empty mapping')", _scale_empty_ok),
    ],
    "aggregate_weighted_average": [
        ("unweighted mean ('sum_k n_k/m_t w^k')", _agg_unweighted),
        ("counters truncated ('rounded to the nearest integer')", _agg_truncate),
        ("accumulated in the tensor's dtype ('accumulate in float64, cast ... once')", _agg_native_dtype),
        ("ties rounded up ('ties to even')", _agg_ties_up),
        ("accumulates into states[0] ('the result shares no memory with any upload')", _agg_in_place_first),
        ("an int tensor of counts refused ('list of m integers (or an int tensor)')", _agg_no_tensor_counts),
        ("True accepted as a count ('an integer >= 1, not a bool')", _agg_bool_counts),
        ("float counts accepted ('a count that is not an integer')", _agg_float_counts),
        ("only keys compared ('keys, shapes, dtypes or devices differ -> ValueError')", _agg_keys_only),
        ("result keys sorted ('in states[0]'s key order')", _agg_sorted_keys),
        ("weights as float32 ('weights p_k = n_k / m_t as Python floats', float64 accumulation)",
         _agg_float32_weights),
        ("agreeing counters returned as states[0]'s tensor ('shares no memory ... not even with states[0]')",
         _agg_reuse_agreeing_counters),
        ("bool buffers combined with any() ('integer and bool keys: that mean rounded')", _agg_bool_any),
        ("a tuple of states refused ('a non-empty list or tuple')", _agg_list_only),
        ("an empty list crashes with ZeroDivisionError ('ValueError naming states for an empty list')",
         _agg_empty_unchecked),
    ],
}

ALTERNATIVES = {
    "clone_model_state": [
        ("dict(copy.deepcopy(model).state_dict())", _clone_alt_deepcopy_model),
        ("empty_like + copy_ under no_grad", _clone_alt_empty_like),
    ],
    "load_model_state": [
        ("own validation, then strict load_state_dict (copies in place)", _load_alt_load_state_dict),
        ("named_parameters + named_buffers, copy_ each", _load_alt_named_tensors),
    ],
    "zeros_like_state": [
        ("tensor.new_zeros(shape)", _zeros_alt_new_zeros),
        ("torch.zeros(shape, dtype=, device=)", _zeros_alt_explicit),
    ],
    "add_state_dicts": [
        ("clone().add_()", _add_alt_clone_add),
        ("floats via float64 rounded once, ints natively", _add_alt_float64_floats),
    ],
    "scale_state_dict": [
        ("float16/bfloat16 upcast to float32 and back; torch.mul", _scale_alt_upcast_half),
    ],
    "aggregate_weighted_average": [
        ("torch.stack + tensordot in float64", _agg_alt_tensordot),
        ("sum of n_k w_k in float64 divided by m_t at the end", _agg_alt_divide_last),
    ],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _scale_alt_torch_mul(state, c):
    """torch.mul with a Python float, a dict comprehension; clones for integer and bool tensors."""
    if not isinstance(state, Mapping) or not state:
        raise (TypeError if not isinstance(state, Mapping) else ValueError)("state must be a non-empty mapping")
    if any(not isinstance(t, torch.Tensor) for t in state.values()):
        raise TypeError("state must map keys to tensors")
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.integer, np.floating)):
        raise TypeError(f"c must be a real number, got {type(c).__name__}")
    if not math.isfinite(float(c)):
        raise ValueError(f"c must be finite, got {c!r}")
    return {k: torch.mul(t, float(c)) if t.is_floating_point() else t.clone() for k, t in state.items()}


ALTERNATIVES.setdefault("scale_state_dict", []).append(
    ("torch.mul(t, float(c)) in a dict comprehension", _scale_alt_torch_mul))
