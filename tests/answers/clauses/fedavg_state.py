"""Witnesses for Module 3, Part 4 (state dicts and the weighted average): one wrong answer per broken clause."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from tests.answers.clauses import existing
from trainsys.fedavg import state as ref


# --- clone_model_state -------------------------------------------------------------------------------
def _clone_in_eval_then_train(model):
    """Freezes the model with eval() for the copy, then 'restores' it with train(): an eval model comes back training."""
    model.eval()
    snapshot = ref.clone_model_state(model)
    model.train()
    return snapshot


def _clone_accepting_a_state(model):
    """A state dict given instead of a model is cloned as it is, not refused."""
    if isinstance(model, Mapping):
        return {k: v.detach().clone() for k, v in model.items()}
    return ref.clone_model_state(model)


def _clone_value_error(model):
    """Refuses a non-module, but with ValueError (the contract says TypeError)."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return ref.clone_model_state(model)


def _clone_accepting_a_list(model):
    """A list of tensors is taken as the parameters and numbered, not refused."""
    if isinstance(model, (list, tuple)):
        return {str(i): t.detach().clone() for i, t in enumerate(model)}
    return ref.clone_model_state(model)


# --- load_model_state --------------------------------------------------------------------------------
def _validate_load(model, state):
    ref.require_module("model", model)
    ref.require_same_structure("model.state_dict()", ref._without_device(model.state_dict()), "state",
                               ref._without_device(ref.require_state_dict("state", state)))


def _load_same_device_required(model, state):
    """Refuses a state on another device than the model's (the copy would move it)."""
    if isinstance(model, nn.Module) and isinstance(state, Mapping):
        for key, tensor in model.state_dict().items():
            value = state.get(key)
            if isinstance(value, torch.Tensor) and value.device != tensor.device:
                raise ValueError(f"state[{key!r}] is on {value.device}, the model's tensor on {tensor.device}")
    return ref.load_model_state(model, state)


def _load_in_eval_mode(model, state):
    """Switches the model to eval mode 'to load safely' and leaves it there."""
    if isinstance(model, nn.Module):
        model.eval()
    return ref.load_model_state(model, state)


def _load_model_unchecked(model, state):
    """No check that model is a module: a dict model fails with AttributeError on .state_dict()."""
    live = model.state_dict()
    if not isinstance(state, Mapping):
        raise TypeError("state must be a mapping")
    return ref.load_model_state(model, state) if isinstance(model, nn.Module) else live


def _load_unnamed_key(model, state):
    """A mismatch raises ValueError naming state, but not the key that is wrong."""
    try:
        _validate_load(model, state)
    except ValueError:
        raise ValueError("state does not match the model's state_dict()") from None
    return ref.load_model_state(model, state)


def _load_validating_while_copying(model, state):
    """Keys and value types checked first, shapes and dtypes only while copying: a late bad key half-loads."""
    ref.require_module("model", model)
    ref.require_state_dict("state", state)
    live = model.state_dict()
    if set(live) != set(state):
        raise ValueError(f"state must have the model's keys: it differs in {sorted(set(live) ^ set(state))}")
    with torch.no_grad():
        for key, target in live.items():
            value = state[key]
            if value.shape != target.shape or value.dtype != target.dtype:
                raise ValueError(f"state[{key!r}] has shape {tuple(value.shape)} and dtype {value.dtype}, the model's "
                                 f"{tuple(target.shape)} and {target.dtype}")
            target.copy_(value)
    return model


def _load_parameters_only(model, state):
    """Validates the whole state but copies only named_parameters(): BatchNorm's buffers stay stale."""
    _validate_load(model, state)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(state[name])
    return model


def _load_by_position(model, state):
    """Validates by key, then copies the values in the state's order into the model's tensors in its own order."""
    _validate_load(model, state)
    with torch.no_grad():
        for target, value in zip(model.state_dict().values(), state.values()):
            target.copy_(value)
    return model


# --- zeros_like_state --------------------------------------------------------------------------------
def _zeros_via_numpy(state):
    """np.zeros_like of each tensor's values: right on the CPU, but it reads the values (none on meta)."""
    ref.require_state_dict("state", state)
    return {k: torch.from_numpy(np.zeros_like(v.numpy())) for k, v in state.items()}


def _zeros_value_error_for_a_list(state):
    """Refuses a non-mapping with ValueError (the contract says TypeError)."""
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a mapping, got {type(state).__name__}")
    return ref.zeros_like_state(state)


def _zeros_flattened(state):
    """One flat zero vector per key ('a state dict is a long vector'): dtype and device kept, shape lost."""
    ref.require_state_dict("state", state)
    return {k: torch.zeros(v.numel(), dtype=v.dtype, device=v.device) for k, v in state.items()}


# --- add_state_dicts ---------------------------------------------------------------------------------
def _add_accepting_a_list(a, b):
    """A list b is paired with a's keys in order instead of being refused."""
    if isinstance(b, (list, tuple)):
        b = dict(zip(a, b))
    return ref.add_state_dicts(a, b)


def _add_unnamed_key(a, b):
    """A mismatch raises ValueError naming b, but not the key."""
    try:
        ref.require_same_structure("a", a, "b", b)
    except ValueError:
        raise ValueError("b does not have the structure of a") from None
    return ref.add_state_dicts(a, b)


def _add_no_dtype_check(a, b):
    """Keys, shapes and devices compared, dtypes not: int64 + float32 promotes to float32."""
    ref.require_state_dict("a", a)
    ref.require_state_dict("b", b)
    if set(a) != set(b):
        raise ValueError(f"b must have a's keys; they differ in {sorted(set(a) ^ set(b))}")
    for key in a:
        if a[key].shape != b[key].shape or a[key].device != b[key].device:
            raise ValueError(f"b[{key!r}] must have the shape and device of a[{key!r}]")
    return {key: a[key] + b[key] for key in a}


# --- scale_state_dict --------------------------------------------------------------------------------
def _scale_counters_not_copied(state, c):
    """Integer and bool tensors are returned as they are: the caller's own tensors, not copies."""
    result = ref.scale_state_dict(state, c)
    return {k: v if ref.is_counter(v) else result[k] for k, v in state.items()}


def _scale_string_c(state, c):
    """c is converted with float(c): the string '2' is accepted as 2.0."""
    if isinstance(c, str):
        c = float(c)
    return ref.scale_state_dict(state, c)


# --- aggregate_weighted_average ----------------------------------------------------------------------
def _average(states, counts):
    """The reference arithmetic, no validation: float64 accumulation, integers rounded."""
    total = sum(int(n) for n in counts)
    result = {}
    for key, first in states[0].items():
        acc = torch.zeros(first.shape, dtype=torch.float64, device=first.device)
        for n, state in zip(counts, states):
            acc += (int(n) / total) * state[key].to(torch.float64)
        result[key] = (torch.round(acc) if ref.is_counter(first) else acc).to(first.dtype)
    return result


def _counts(states, num_samples):
    """The reference's validation of ``states`` being non-empty and of the counts; returns the counts as a list."""
    if not isinstance(states, (list, tuple)) or len(states) == 0:
        raise ValueError("states must be a non-empty list of state dicts")
    ref.aggregate_weighted_average([states[0]] * len(states), num_samples)
    return num_samples.tolist() if isinstance(num_samples, torch.Tensor) else list(num_samples)


def _agg_length_unchecked(states, num_samples):
    """No check that there is one count per state: zip drops the extra count."""
    counts = num_samples.tolist() if isinstance(num_samples, torch.Tensor) else list(num_samples)
    return ref.aggregate_weighted_average(states, counts[:len(states)])


def _agg_zero_count(states, num_samples):
    """Counts checked for being integers and not negative, so n_k = 0 passes (that client is silently dropped)."""
    counts = num_samples.tolist() if isinstance(num_samples, torch.Tensor) else list(num_samples)
    if len(counts) != len(states):
        raise ValueError(f"num_samples must have one count per state, got {len(counts)} for {len(states)}")
    if any(n < 0 for n in counts):
        raise ValueError("num_samples must be >= 0")
    if 0 in counts:
        return _average([s for s, n in zip(states, counts) if n], [n for n in counts if n])
    return ref.aggregate_weighted_average(states, num_samples)


def _agg_keys_of_first(states, num_samples):
    """Reads every key of states[0] from the others: a missing key raises KeyError, not the contract's ValueError."""
    return _average(states, _counts(states, num_samples))


def _agg_no_dtype_check(states, num_samples):
    """Keys and shapes compared, dtypes and devices not: a float32 tensor is averaged with float64 ones."""
    counts = _counts(states, num_samples)
    for k, state in enumerate(states[1:], start=1):
        for key, first in states[0].items():
            if key not in state or tuple(state[key].shape) != tuple(first.shape):
                raise ValueError(f"states[{k}][{key!r}] does not match states[0]")
    return _average(states, counts)


def _agg_no_device_check(states, num_samples):
    """Keys, shapes and dtypes compared, devices not."""
    counts = _counts(states, num_samples)
    for k, state in enumerate(states[1:], start=1):
        for key, first in states[0].items():
            if key not in state or tuple(state[key].shape) != tuple(first.shape) or state[key].dtype != first.dtype:
                raise ValueError(f"states[{k}][{key!r}] does not match states[0]")
    return _average(states, counts)


WITNESSES = {
    "clone_model_state": {
        "parameters and buffers": [existing("clone_model_state", "parameters only: the BatchNorm buffers are lost"),
                                   existing("clone_model_state", "named_parameters only")],
        "mutation": [existing("clone_model_state", "model.eval() to freeze it"),
                     ("eval() for the copy, then train(): an eval model comes back training", _clone_in_eval_then_train)],
        "failure modes": [("a state dict is cloned instead of refused", _clone_accepting_a_state),
                          ("a non-module refused with ValueError", _clone_value_error),
                          ("a list of tensors numbered and cloned", _clone_accepting_a_list)],
        "metric that proves it correct": [
            existing("clone_model_state", "returns model.state_dict() (shares memory"),
            existing("clone_model_state", "buffers returned as detached views"),
            existing("clone_model_state", "casts every tensor to float32"),
            existing("clone_model_state", "rebuilt from .tolist()"),
            existing("clone_model_state", ".cpu().clone()"),
        ],
    },
    "load_model_state": {
        "devices may differ": [("a state on another device refused", _load_same_device_required)],
        "mutation": [existing("load_model_state", "load_state_dict(assign=True):"),
                     existing("load_model_state", "load_state_dict(assign=True) ("),
                     existing("load_model_state", "param.data = state[k].clone()"),
                     existing("load_model_state", "pops the loaded keys"),
                     existing("load_model_state", "model.train() after loading"),
                     ("the model left in eval mode", _load_in_eval_mode)],
        "failure modes": [
            existing("load_model_state", "load_state_dict(strict=False):"),
            existing("load_model_state", "load_state_dict(strict=False) ("),
            existing("load_model_state", "no validation: torch's RuntimeError"),
            existing("load_model_state", "unexpected keys ignored"),
            existing("load_model_state", "no shape check: copy_ broadcasts"),
            existing("load_model_state", "dtype checked only for floating tensors"),
            existing("load_model_state", "a list of (key, tensor) pairs accepted"),
            existing("load_model_state", "a non-tensor value raises AttributeError"),
            existing("load_model_state", "copies key by key and raises at the first bad key"),
            ("shapes and dtypes checked while copying: a late bad key half-loads", _load_validating_while_copying),
            ("model not checked: a dict fails with AttributeError", _load_model_unchecked),
            ("the mismatch message does not name the key", _load_unnamed_key),
        ],
        "metric that proves it correct": [("only named_parameters() copied: buffers stale", _load_parameters_only),
                                          ("values copied by position, not by key", _load_by_position)],
    },
    "zeros_like_state": {
        "any dtype": [existing("zeros_like_state", "torch.zeros(shape): float32 CPU"),
                      existing("zeros_like_state", "torch.zeros(shape): dtype and device lost")],
        "any values": [existing("zeros_like_state", "state[k] * 0: inf/NaN give NaN"),
                       existing("zeros_like_state", "state[k] * 0: inf and NaN survive"),
                       ("zeros through NumPy: the values are read", _zeros_via_numpy)],
        "mutation": [existing("zeros_like_state", "zero_() on the input"),
                     existing("zeros_like_state", "zeroes the input in place")],
        "failure modes": [existing("zeros_like_state", "an empty mapping gives {}"),
                          existing("zeros_like_state", "message names state but not the key"),
                          existing("zeros_like_state", "NumPy arrays converted"),
                          existing("zeros_like_state", "isinstance(state, dict)"),
                          ("a list refused with ValueError", _zeros_value_error_for_a_list)],
        "metric that proves it correct": [("flat zero vectors: shape lost", _zeros_flattened),
                                          existing("zeros_like_state", "torch.zeros(shape, dtype): device lost")],
    },
    "add_state_dicts": {
        "integers add exactly": [existing("add_state_dicts", "everything summed in float64")],
        "mutation": [existing("add_state_dicts", "a[k] += b[k], returns a"),
                     existing("add_state_dicts", "adds b into a in place")],
        "failure modes": [
            existing("add_state_dicts", "common keys only"),
            existing("add_state_dicts", "silently keeps only the common keys"),
            existing("add_state_dicts", "extra keys of b ignored"),
            existing("add_state_dicts", "no shape check"),
            existing("add_state_dicts", "no dtype check"),
            existing("add_state_dicts", "no device check"),
            existing("add_state_dicts", "empty operands give {}"),
            existing("add_state_dicts", "the key error names a"),
            ("the mismatch message does not name the key", _add_unnamed_key),
            ("dtypes not compared: int64 + float32 promotes", _add_no_dtype_check),
            ("a list b paired with a's keys", _add_accepting_a_list),
        ],
        "metric that proves it correct": [existing("add_state_dicts", "pairs by position"),
                                          existing("add_state_dicts", "pairs tensors by position"),
                                          existing("add_state_dicts", "result in b's key order")],
    },
    "scale_state_dict": {
        "dtype": [existing("scale_state_dict", "scales int64 counters too"),
                  existing("scale_state_dict", "scales the integer counters too"),
                  existing("scale_state_dict", "every floating key computed in float32"),
                  existing("scale_state_dict", "c turned into a float32 tensor")],
        "mutation": [existing("scale_state_dict", "mul_ on the input"),
                     existing("scale_state_dict", "scales the input in place"),
                     existing("scale_state_dict", "bool tensors returned as the input's own"),
                     ("integer tensors returned as the input's own", _scale_counters_not_copied)],
        "failure modes": [existing("scale_state_dict", "c=True accepted"),
                          existing("scale_state_dict", "0-d tensor c accepted"),
                          existing("scale_state_dict", "c=inf accepted"),
                          existing("scale_state_dict", "np.float32 c refused"),
                          existing("scale_state_dict", "an empty state gives {}"),
                          ("the string '2' accepted through float(c)", _scale_string_c)],
        "metric that proves it correct": [existing("scale_state_dict", "scales the weights but not the biases"),
                                          existing("scale_state_dict", "c == 0 answered with zeros_like")],
    },
    "aggregate_weighted_average": {
        "weights": [existing("aggregate_weighted_average", "unweighted mean of the client states"),
                    existing("aggregate_weighted_average", "unweighted mean ('"),
                    existing("aggregate_weighted_average", "integer division n_k // m"),
                    existing("aggregate_weighted_average", "forgets to divide by m")],
        "precision": [existing("aggregate_weighted_average", "accumulated in the tensor's dtype"),
                      existing("aggregate_weighted_average", "weights as float32")],
        "mutation": [existing("aggregate_weighted_average", "accumulates into states[0] in place"),
                     existing("aggregate_weighted_average", "accumulates into states[0] ('"),
                     existing("aggregate_weighted_average", "agreeing counters returned as states[0]'s tensor")],
        "failure modes": [
            existing("aggregate_weighted_average", "True accepted as a count"),
            existing("aggregate_weighted_average", "float counts accepted"),
            existing("aggregate_weighted_average", "only keys compared"),
            existing("aggregate_weighted_average", "an int tensor of counts refused"),
            existing("aggregate_weighted_average", "a tuple of states refused"),
            existing("aggregate_weighted_average", "an empty list crashes"),
            ("one count per state not checked: zip drops the extra", _agg_length_unchecked),
            ("a count of 0 accepted", _agg_zero_count),
            ("keys read from states[0]: a missing key raises KeyError", _agg_keys_of_first),
            ("dtypes not compared", _agg_no_dtype_check),
            ("devices not compared", _agg_no_device_check),
        ],
        "metric that proves it correct": [existing("aggregate_weighted_average", "counters truncated"),
                                          existing("aggregate_weighted_average", "integer buffers truncated"),
                                          existing("aggregate_weighted_average", "ties rounded up")],
    },
}
