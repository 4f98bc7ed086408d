"""Mutants for Module 2, Part 2 (lessons 7–11): the AdamW mistakes the notebooks name."""

from __future__ import annotations

import numpy as np

from trainsys.diloco import adamw as ref

REFERENCE = "trainsys.diloco.adamw"


def _init(step: int = 0, shared: bool = False, float64: bool = False):
    def wrong(params):
        ref.init_adamw_state(params)
        zeros = {k: np.zeros(v.shape) if float64 else np.zeros_like(v) for k, v in params.items()}
        return {"step": step, "m": zeros, "v": zeros if shared else {k: z.copy() for k, z in zeros.items()}}

    return wrong


def _moments(swap_weights: bool = False, v_of_g: bool = False, keep_step: bool = False, in_place: bool = False):
    def wrong(state, grads, beta1, beta2):
        ref.update_moments(state, grads, beta1, beta2)
        m, v = state["m"], state["v"]
        if in_place:
            for k in m:
                m[k] *= beta1
                m[k] += (1 - beta1) * grads[k]
                v[k] *= beta2
                v[k] += (1 - beta2) * grads[k] ** 2
            state["step"] += 1
            return state
        g2 = {k: grads[k] if v_of_g else grads[k] ** 2 for k in grads}
        if swap_weights:
            new_m = {k: (1 - beta1) * m[k] + beta1 * grads[k] for k in m}
            new_v = {k: (1 - beta2) * v[k] + beta2 * g2[k] for k in v}
        else:
            new_m = {k: beta1 * m[k] + (1 - beta1) * grads[k] for k in m}
            new_v = {k: beta2 * v[k] + (1 - beta2) * g2[k] for k in v}
        return {"step": state["step"] + (0 if keep_step else 1), "m": new_m, "v": new_v}

    return wrong


def _bias(variant: str):
    def wrong(m, v, step, beta1, beta2):
        ref.bias_correct_moments(m, v, step, beta1, beta2)
        if variant == "none":
            return {k: a.copy() for k, a in m.items()}, {k: a.copy() for k, a in v.items()}
        t = step - 1 if variant == "step-1" else step
        if variant == "beta1 for both":
            beta2 = beta1
        c1 = 1 - beta1**t if t > 0 else 1.0
        c2 = 1 - beta2**t if t > 0 else 1.0
        return ({k: (a / c1).astype(a.dtype) for k, a in m.items()}, {k: (a / c2).astype(a.dtype) for k, a in v.items()})

    return wrong


def _param_step(variant: str):
    def wrong(params, m_hat, v_hat, lr, eps):
        ref.adamw_param_step(params, m_hat, v_hat, lr, eps)
        if variant == "eps inside the root":
            step = {k: m_hat[k] / np.sqrt(v_hat[k] + eps) for k in params}
        elif variant == "no root":
            step = {k: m_hat[k] / (v_hat[k] + eps) for k in params}
        else:  # ascent
            step = {k: -m_hat[k] / (np.sqrt(v_hat[k]) + eps) for k in params}
        return {k: (params[k] - lr * step[k]).astype(params[k].dtype) for k in params}

    return wrong


def _decay(variant: str):
    def wrong(params, lr, weight_decay):
        ref.decoupled_weight_decay(params, lr, weight_decay)
        if variant == "in place":
            for v in params.values():
                v *= 1 - lr * weight_decay
            return params
        if variant == "not scaled by lr":
            return {k: (v * (1 - weight_decay)).astype(v.dtype) for k, v in params.items()}
        return {k: (v * (1 - lr * weight_decay)).astype(v.dtype) if k.startswith("W") else v.copy()
                for k, v in params.items()}

    return wrong


MUTANTS = {
    "init_adamw_state": [
        ("step starts at 1", _init(step=1)),
        ("m and v are the same arrays", _init(shared=True)),
        ("np.zeros(shape): float64 moments for float32 parameters", _init(float64=True)),
    ],
    "update_moments": [
        ("beta and 1 - beta swapped", _moments(swap_weights=True)),
        ("v accumulates g instead of g squared", _moments(v_of_g=True)),
        ("forgets to count the step", _moments(keep_step=True)),
        ("updates the state in place", _moments(in_place=True)),
    ],
    "bias_correct_moments": [
        ("bias correction forgotten", _bias("none")),
        ("uses step - 1 (off by one)", _bias("step-1")),
        ("corrects v with beta1", _bias("beta1 for both")),
    ],
    "adamw_param_step": [
        ("eps inside the square root", _param_step("eps inside the root")),
        ("divides by v_hat, not its square root", _param_step("no root")),
        ("adds the step (gradient ascent)", _param_step("ascent")),
    ],
    "decoupled_weight_decay": [
        ("decay not scaled by the learning rate", _decay("not scaled by lr")),
        ("decays the weights but not the biases", _decay("weights only")),
        ("decays the parameters in place", _decay("in place")),
    ],
}
