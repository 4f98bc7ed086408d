"""Mutants for Module 2, Part 5 (lessons 21–24): outer-optimizer mistakes the notebooks name."""

from __future__ import annotations

import numpy as np

from trainsys.diloco import outer as ref
from trainsys.diloco.params import average_params

REFERENCE = "trainsys.diloco.outer"


def _init(variant: str):
    def wrong(params):
        ref.init_outer_optimizer(params)
        if variant == "params copy":
            return {"step": 0, "momentum_buffer": {k: v.copy() for k, v in params.items()}}
        if variant == "float64":
            return {"step": 0, "momentum_buffer": {k: np.zeros(v.shape) for k, v in params.items()}}
        return {"step": 1, "momentum_buffer": {k: np.zeros_like(v) for k, v in params.items()}}

    return wrong


def _momentum(variant: str):
    def wrong(state, outer_grad, momentum):
        ref.update_outer_momentum(state, outer_grad, momentum)
        b = state["momentum_buffer"]
        if variant == "dampened":
            new = {k: momentum * b[k] + (1 - momentum) * outer_grad[k] for k in b}
        elif variant == "scaled sum":
            new = {k: momentum * (b[k] + outer_grad[k]) for k in b}
        else:
            new = {k: momentum * b[k] + outer_grad[k] for k in b}
        return {"step": state["step"] + (0 if variant == "no step" else 1),
                "momentum_buffer": {k: v.astype(b[k].dtype) for k, v in new.items()}}

    return wrong


def _nesterov(variant: str):
    def wrong(params, state, outer_grad, lr, momentum):
        ref.nesterov_outer_step(params, state, outer_grad, lr, momentum)
        new_state = ref.update_outer_momentum(state, outer_grad, momentum)
        b_new, b_old = new_state["momentum_buffer"], state["momentum_buffer"]
        if variant == "plain momentum":
            d = {k: b_new[k] for k in params}
        elif variant == "old buffer":
            d = {k: outer_grad[k] + momentum * b_old[k] for k in params}
        else:  # ascent
            d = {k: -(outer_grad[k] + momentum * b_new[k]) for k in params}
        return {k: (params[k] - lr * d[k]).astype(params[k].dtype) for k in params}, new_state

    return wrong


def _outer_grad(variant: str):
    def wrong(global_params, worker_params):
        ref.compute_outer_gradient(global_params, worker_params)
        if variant == "reversed":
            mean = average_params(worker_params)
            return {k: (mean[k] - global_params[k]).astype(global_params[k].dtype) for k in global_params}
        if variant == "sum":
            return {k: sum(global_params[k] - w[k] for w in worker_params) for k in global_params}
        return {k: global_params[k] - worker_params[-1][k] for k in global_params}

    return wrong


MUTANTS = {
    "init_outer_optimizer": [
        ("the buffer starts as a copy of the parameters", _init("params copy")),
        ("np.zeros(shape): a float64 buffer", _init("float64")),
        ("step starts at 1", _init("step 1")),
    ],
    "update_outer_momentum": [
        ("dampened like Adam: mu b + (1 - mu) delta", _momentum("dampened")),
        ("mu (b + delta)", _momentum("scaled sum")),
        ("forgets to count the step", _momentum("no step")),
    ],
    "nesterov_outer_step": [
        ("Nesterov as plain momentum: theta - lr b'", _nesterov("plain momentum")),
        ("Nesterov look-ahead with the old buffer", _nesterov("old buffer")),
        ("adds the step (ascent)", _nesterov("ascent")),
    ],
    "compute_outer_gradient": [
        ("reversed pseudo-gradient sign: mean(theta_k) - theta_global (torchft PR #233)", _outer_grad("reversed")),
        ("sums over workers instead of the mean", _outer_grad("sum")),
        ("uses the last worker only", _outer_grad("last")),
    ],
}
