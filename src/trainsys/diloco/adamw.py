r"""Module 2, Part 2 — AdamW, the inner optimizer every DiLoCo worker runs, by hand.

Loshchilov & Hutter 2019 ("Decoupled Weight Decay Regularization"), as ``torch.optim.AdamW``
implements it. At step :math:`t = 1, 2, …` with gradient :math:`g_t`:

.. math::

    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t,\qquad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,\qquad
    \hat m_t = \frac{m_t}{1-\beta_1^t},\qquad \hat v_t = \frac{v_t}{1-\beta_2^t},

.. math::

    \theta_t = \theta_{t-1}(1 - \eta\lambda) - \eta\,\frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}.

The decay :math:`\theta(1-\eta\lambda)` is *decoupled*: it never enters :math:`m` or :math:`v`.
Adding :math:`\lambda\theta` to the gradient instead (Adam with L2) lets the adaptive denominator
shrink the decay of parameters with large gradients — a different optimizer. DiLoCo's inner defaults:
:math:`\beta = (0.9, 0.95)`, :math:`\lambda = 0.1`. An optimizer state is
``{"step": t, "m": {key: array}, "v": {key: array}}``; it belongs to one worker and is never averaged.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from trainsys._validation import describe, require_float_tree, require_int, require_real, require_same_tree

Params = dict[str, np.ndarray]
AdamWState = dict[str, object]

STATE_KEYS: tuple[str, ...] = ("step", "m", "v")
"""The keys of an AdamW state dict (:func:`init_adamw_state`)."""


def require_beta(name: str, value: object) -> float:
    """A decay rate in ``[0, 1)``."""
    value = require_real(name, value, minimum=0.0)
    if value >= 1.0:
        raise ValueError(f"{name} must be < 1 (a decay rate in [0, 1)), got {value}")
    return value


def validate_adamw_state(state: object, params: Mapping[str, np.ndarray] | None = None,
                         name: str = "state") -> AdamWState:
    """Require ``{"step": int >= 0, "m": tree, "v": tree}`` with ``m``, ``v`` shaped like ``params`` (if given)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{name} must be an AdamW state dict {{'step', 'm', 'v'}}, got {describe(state)}")
    if set(state) != set(STATE_KEYS):
        raise ValueError(f"{name} must have exactly the keys {sorted(STATE_KEYS)}, got {sorted(map(str, state))}")
    require_int(f"{name}['step']", state["step"], minimum=0)
    require_same_tree(f"{name}['m']", state["m"], f"{name}['v']", state["v"])
    if params is not None:
        require_same_tree("params", params, f"{name}['m']", state["m"])
    return state  # type: ignore[return-value]


# --- Lesson 7 --------------------------------------------------------------------------------------
def init_adamw_state(params: Params) -> AdamWState:
    """A fresh AdamW state: ``step`` 0 and zero moments ``m``, ``v`` shaped and typed like ``params``.

    New arrays (never views of ``params``); ``params`` is not mutated.
    """
    require_float_tree("params", params)
    return {
        "step": 0,
        "m": {key: np.zeros_like(value) for key, value in params.items()},
        "v": {key: np.zeros_like(value) for key, value in params.items()},
    }


# --- Lesson 8 --------------------------------------------------------------------------------------
def update_moments(state: AdamWState, grads: Params, beta1: float, beta2: float) -> AdamWState:
    r"""The next state: :math:`m \leftarrow \beta_1 m + (1-\beta_1) g`,
    :math:`v \leftarrow \beta_2 v + (1-\beta_2) g^2`, ``step + 1``.

    Returns a **new** state dict with new arrays (dtype of ``m``); ``state`` and ``grads`` are not
    mutated. ``beta1``, ``beta2`` in ``[0, 1)``; ``grads`` must have ``state["m"]``'s keys and shapes.
    """
    validate_adamw_state(state)
    require_same_tree("state['m']", state["m"], "grads", grads)
    beta1 = require_beta("beta1", beta1)
    beta2 = require_beta("beta2", beta2)
    m, v = state["m"], state["v"]
    new_m = {k: (beta1 * m[k] + (1.0 - beta1) * grads[k]).astype(m[k].dtype, copy=False) for k in m}
    new_v = {k: (beta2 * v[k] + (1.0 - beta2) * np.square(grads[k])).astype(v[k].dtype, copy=False) for k in v}
    return {"step": int(state["step"]) + 1, "m": new_m, "v": new_v}


# --- Lesson 9 --------------------------------------------------------------------------------------
def bias_correct_moments(
    m: Params, v: Params, step: int, beta1: float, beta2: float
) -> tuple[Params, Params]:
    r"""``(m_hat, v_hat)``: :math:`\hat m = m / (1-\beta_1^t)`, :math:`\hat v = v / (1-\beta_2^t)`, ``t = step``.

    ``step`` is the number of updates already folded into ``m`` and ``v`` (``state["step"]`` after
    :func:`update_moments`), so ``step >= 1``: at ``step = 0`` the correction divides by zero.
    Because :math:`m_0 = v_0 = 0`, the raw moments are biased towards zero early on (by the factor
    :math:`1-\beta^t`); at ``t = 1`` the correction recovers :math:`\hat m = g`, :math:`\hat v = g^2`.
    New arrays in ``m``'s dtype; nothing is mutated.
    """
    require_same_tree("m", m, "v", v)
    step = require_int("step", step, minimum=1)
    beta1 = require_beta("beta1", beta1)
    beta2 = require_beta("beta2", beta2)
    c1 = 1.0 - beta1**step
    c2 = 1.0 - beta2**step
    m_hat = {k: (m[k] / c1).astype(m[k].dtype, copy=False) for k in m}
    v_hat = {k: (v[k] / c2).astype(v[k].dtype, copy=False) for k in v}
    return m_hat, v_hat


# --- Lesson 10 -------------------------------------------------------------------------------------
def adamw_param_step(params: Params, m_hat: Params, v_hat: Params, lr: float, eps: float) -> Params:
    r"""The adaptive step :math:`\theta - \eta\, \hat m / (\sqrt{\hat v} + \epsilon)`, new arrays in ``params``' dtype.

    ``eps`` is added *after* the square root (as torch does), ``lr > 0``, ``eps > 0``. Weight decay is
    not part of this step (see :func:`decoupled_weight_decay`). Nothing is mutated.
    """
    require_same_tree("params", params, "m_hat", m_hat)
    require_same_tree("params", params, "v_hat", v_hat)
    lr = require_real("lr", lr, strictly_positive=True)
    eps = require_real("eps", eps, strictly_positive=True)
    return {
        k: (params[k] - lr * m_hat[k] / (np.sqrt(v_hat[k]) + eps)).astype(params[k].dtype, copy=False)
        for k in params
    }


# --- Lesson 11 -------------------------------------------------------------------------------------
def decoupled_weight_decay(params: Params, lr: float, weight_decay: float) -> Params:
    r"""Shrink every parameter: :math:`\theta (1 - \eta\lambda)` — new arrays, ``params`` not mutated.

    The decay is scaled by the learning rate, as in ``torch.optim.AdamW`` (and Loshchilov & Hutter's
    schedule-multiplied form). It touches every array given, biases included, as torch does for the
    parameters passed to it. ``weight_decay >= 0`` (0 leaves the values unchanged), ``lr > 0``.
    """
    require_float_tree("params", params)
    lr = require_real("lr", lr, strictly_positive=True)
    weight_decay = require_real("weight_decay", weight_decay, minimum=0.0)
    factor = 1.0 - lr * weight_decay
    return {k: (v * factor).astype(v.dtype, copy=False) for k, v in params.items()}


def adamw_step(
    params: Params,
    grads: Params,
    state: AdamWState,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.1,
) -> tuple[Params, AdamWState]:
    r"""One AdamW step, ``torch.optim.AdamW(lr, betas=(beta1, beta2), eps, weight_decay)`` by hand.

    :func:`update_moments` → :func:`bias_correct_moments` → :func:`decoupled_weight_decay` on the
    *current* parameters → :func:`adamw_param_step`. Returns ``(new_params, new_state)``; neither
    ``params``, ``grads`` nor ``state`` is mutated. Defaults are DiLoCo's inner ones.
    """
    validate_adamw_state(state, params)
    require_same_tree("params", params, "grads", grads)
    new_state = update_moments(state, grads, beta1, beta2)
    m_hat, v_hat = bias_correct_moments(new_state["m"], new_state["v"], new_state["step"], beta1, beta2)
    decayed = decoupled_weight_decay(params, lr, weight_decay)
    return adamw_param_step(decayed, m_hat, v_hat, lr, eps), new_state
