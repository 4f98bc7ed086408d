r"""Module 2, Part 5 — the outer optimizer: SGD with Nesterov momentum on the pseudo-gradient.

After ``H`` inner steps the workers' parameters :math:`\theta_k` are averaged into the outer gradient

.. math::

    \Delta = \theta_{global} - \frac1k\sum_{k} \theta_k ,

which points *uphill* like an ordinary gradient (it is :math:`\eta` times the summed inner gradients
when ``H = 1`` and the inner optimizer is SGD). Reversing it (local − original) makes the outer step
climb — the sign bug torchft fixed in PR #233 (2025). The outer step is ``torch.optim.SGD(lr,
momentum=μ, nesterov=True)`` with dampening 0:

.. math::

    b \leftarrow \mu b + \Delta,\qquad \theta \leftarrow \theta - \eta\,(\Delta + \mu b).

torch sets :math:`b = \Delta` on its first step; a zero-initialised buffer gives exactly the same.
DiLoCo's defaults: :math:`\eta = 0.7`, :math:`\mu = 0.9`. With :math:`\eta = 1, \mu = 0` the step
returns :math:`\frac1k\sum_k\theta_k`: FedAvg's parameter averaging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import describe, require_float_tree, require_int, require_real, require_same_tree
from trainsys.diloco.params import Params, average_params, subtract_params

OuterState = dict[str, object]

OUTER_STATE_KEYS: tuple[str, ...] = ("step", "momentum_buffer")
"""The keys of an outer optimizer state (:func:`init_outer_optimizer`)."""


def require_momentum(value: object, name: str = "momentum") -> float:
    """A momentum coefficient in ``[0, 1)``."""
    value = require_real(name, value, minimum=0.0)
    if value >= 1.0:
        raise ValueError(f"{name} must be < 1, got {value}")
    return value


def validate_outer_state(state: object, params: Mapping[str, np.ndarray] | None = None) -> OuterState:
    """Require ``{"step": int >= 0, "momentum_buffer": tree}`` (shaped like ``params`` when given)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be an outer optimizer state {{'step', 'momentum_buffer'}}, got {describe(state)}")
    if set(state) != set(OUTER_STATE_KEYS):
        raise ValueError(f"state must have exactly the keys {sorted(OUTER_STATE_KEYS)}, got {sorted(map(str, state))}")
    require_int("state['step']", state["step"], minimum=0)
    require_float_tree("state['momentum_buffer']", state["momentum_buffer"])
    if params is not None:
        require_same_tree("params", params, "state['momentum_buffer']", state["momentum_buffer"])
    return state  # type: ignore[return-value]


# --- Lesson 21 -------------------------------------------------------------------------------------
def init_outer_optimizer(params: Params) -> OuterState:
    """``{"step": 0, "momentum_buffer": zeros like params}`` — new arrays, ``params`` not mutated.

    Only the global model has an outer state: one per run, held by whoever applies the outer step.
    """
    require_float_tree("params", params)
    return {"step": 0, "momentum_buffer": {k: np.zeros_like(v) for k, v in params.items()}}


# --- Lesson 22 -------------------------------------------------------------------------------------
def update_outer_momentum(state: OuterState, outer_grad: Params, momentum: float) -> OuterState:
    r"""The next outer state: :math:`b \leftarrow \mu b + \Delta` (dampening 0, as torch's default), ``step + 1``.

    Returns a new state with new arrays in the buffer's dtype; ``state`` and ``outer_grad`` are not
    mutated. ``momentum`` in ``[0, 1)``; ``outer_grad`` shaped like the buffer.
    """
    validate_outer_state(state)
    require_same_tree("state['momentum_buffer']", state["momentum_buffer"], "outer_grad", outer_grad)
    mu = require_momentum(momentum)
    buf = state["momentum_buffer"]
    new_buf = {k: (mu * buf[k] + outer_grad[k]).astype(buf[k].dtype, copy=False) for k in buf}
    return {"step": int(state["step"]) + 1, "momentum_buffer": new_buf}


# --- Lesson 23 -------------------------------------------------------------------------------------
def nesterov_outer_step(
    params: Params, state: OuterState, outer_grad: Params, lr: float, momentum: float
) -> tuple[Params, OuterState]:
    r"""``torch.optim.SGD(lr, momentum, nesterov=True)`` applied to the pseudo-gradient.

    :math:`b' = \mu b + \Delta`, :math:`\theta' = \theta - \eta(\Delta + \mu b')` — the step looks ahead
    along the *updated* buffer; plain (heavy-ball) momentum would use :math:`\theta - \eta b'`.
    Returns ``(new_params, new_state)``; nothing is mutated. ``lr > 0``, ``momentum`` in ``[0, 1)``.
    """
    validate_outer_state(state, params)
    require_same_tree("params", params, "outer_grad", outer_grad)
    lr = require_real("lr", lr, strictly_positive=True)
    mu = require_momentum(momentum)
    new_state = update_outer_momentum(state, outer_grad, mu)
    buf = new_state["momentum_buffer"]
    new_params = {k: (params[k] - lr * (outer_grad[k] + mu * buf[k])).astype(params[k].dtype, copy=False)
                  for k in params}
    return new_params, new_state


# --- Lesson 24 -------------------------------------------------------------------------------------
def compute_outer_gradient(global_params: Params, worker_params: Sequence[Params]) -> Params:
    r"""The pseudo-gradient :math:`\Delta = \theta_{global} - \frac1k\sum_k \theta_k` — original minus local.

    ``worker_params``: a non-empty list of the ``k`` workers' parameters after their inner steps, each
    with ``global_params``' structure. New arrays in ``global_params``' dtypes; nothing is mutated.
    The mean is :func:`~trainsys.diloco.params.average_params` (float64 accumulation).
    """
    require_float_tree("global_params", global_params)
    if isinstance(worker_params, Mapping) or not isinstance(worker_params, Sequence) or len(worker_params) == 0:
        raise TypeError(f"worker_params must be a non-empty list of parameter dicts, got {describe(worker_params)}")
    for i, tree in enumerate(worker_params):
        require_same_tree("global_params", global_params, f"worker_params[{i}]", tree)
    return subtract_params(global_params, average_params(worker_params))
