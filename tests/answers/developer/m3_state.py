"""Mutants for Module 3, Part 4 (lessons 11–16: state dicts and the weighted average).

Includes the issue's aggregation mistake at this level: the unweighted mean (the other two, weights
over all clients and deltas with the wrong sign, live in the server's round: ``m3_server.py``).
"""

from __future__ import annotations

import torch

from trainsys.fedavg import state as ref

REFERENCE = "trainsys.fedavg.state"


def _clone_alias(model):
    ref.clone_model_state(model)
    return dict(model.state_dict())  # shares storage with the live model


def _clone_params_only(model):
    ref.clone_model_state(model)
    return {name: p.detach().clone() for name, p in model.named_parameters()}  # buffers lost


def _clone_float(model):
    ref.clone_model_state(model)
    return {k: v.detach().float().clone() for k, v in model.state_dict().items()}


def _load_non_strict(model, state):
    model.load_state_dict(dict(state), strict=False)  # a missing key is silently skipped
    return model


def _load_assign(model, state):
    ref.require_same_structure("model.state_dict()", ref._without_device(model.state_dict()), "state",
                               ref._without_device(ref.require_state_dict("state", state)))
    model.load_state_dict(dict(state), assign=True)  # the model now aliases the caller's tensors
    return model


def _load_unvalidated(model, state):
    model.load_state_dict(dict(state))  # RuntimeError, not the contract's ValueError naming state
    return model


def _zeros_default_dtype(state):
    ref.zeros_like_state(state)
    return {k: torch.zeros(v.shape) for k, v in state.items()}


def _zeros_times_zero(state):
    ref.zeros_like_state(state)
    return {k: v * 0 for k, v in state.items()}


def _zeros_in_place(state):
    ref.zeros_like_state(state)
    for v in state.values():
        v.zero_()
    return state


def _add_in_place(a, b):
    ref.add_state_dicts(a, b)
    for k in a:
        a[k] += b[k]
    return a


def _add_by_position(a, b):
    ref.add_state_dicts(a, b)
    return {k: x + y for (k, x), y in zip(a.items(), b.values())}


def _add_common_keys(a, b):
    return {k: a[k] + b[k] for k in a if k in b}  # no error for a missing or extra key


def _scale_counters(state, c):
    ref.scale_state_dict(state, c)
    return {k: v * c for k, v in state.items()}


def _scale_in_place(state, c):
    ref.scale_state_dict(state, c)
    for v in state.values():
        if v.is_floating_point():
            v.mul_(c)
    return state


def _scale_weights_only(state, c):
    ref.scale_state_dict(state, c)
    return {k: v * c if k.endswith("weight") else v.clone() for k, v in state.items()}


def _aggregate(variant: str):
    def wrong(states, num_samples):
        ref.aggregate_weighted_average(states, num_samples)  # validation
        m = sum(num_samples)
        if variant == "unweighted":
            weights = [1 / len(states)] * len(states)
        elif variant == "integer_division":
            weights = [n // m for n in num_samples]
        elif variant == "unnormalised":
            weights = [float(n) for n in num_samples]
        else:
            weights = [n / m for n in num_samples]
        out = {}
        for key, first in states[0].items():
            acc = sum(w * s[key].to(torch.float64) for w, s in zip(weights, states))
            if variant == "truncate" or first.is_floating_point():
                out[key] = acc.to(first.dtype)  # int64 cast truncates 3.6 to 3
            else:
                out[key] = torch.round(acc).to(first.dtype)
        if variant == "accumulate_in_first":
            for key in out:
                states[0][key].copy_(out[key])
            return states[0]
        return out

    return wrong


MUTANTS = {
    "clone_model_state": [
        ("returns model.state_dict() (shares memory with the live model)", _clone_alias),
        ("parameters only: the BatchNorm buffers are lost", _clone_params_only),
        ("casts every tensor to float32 (the int64 counter too)", _clone_float),
    ],
    "load_model_state": [
        ("load_state_dict(strict=False): a missing key is silently ignored", _load_non_strict),
        ("load_state_dict(assign=True): the model aliases the caller's tensors", _load_assign),
        ("no validation: torch's RuntimeError instead of a ValueError naming state", _load_unvalidated),
    ],
    "zeros_like_state": [
        ("torch.zeros(shape): dtype and device lost", _zeros_default_dtype),
        ("state[k] * 0: inf and NaN survive", _zeros_times_zero),
        ("zeroes the input in place", _zeros_in_place),
    ],
    "add_state_dicts": [
        ("adds b into a in place", _add_in_place),
        ("pairs tensors by position, not by key", _add_by_position),
        ("silently keeps only the common keys", _add_common_keys),
    ],
    "scale_state_dict": [
        ("scales the integer counters too (they become float tensors)", _scale_counters),
        ("scales the input in place", _scale_in_place),
        ("scales the weights but not the biases and buffers", _scale_weights_only),
    ],
    "aggregate_weighted_average": [
        ("unweighted mean of the client states (the issue's first mutant)", _aggregate("unweighted")),
        ("integer division n_k // m: every weight is 0", _aggregate("integer_division")),
        ("forgets to divide by m: sum of n_k * w_k", _aggregate("unnormalised")),
        ("integer buffers truncated instead of rounded", _aggregate("truncate")),
        ("accumulates into states[0] in place", _aggregate("accumulate_in_first")),
    ],
}
