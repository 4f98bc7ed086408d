r"""Module 3, Part 4 — state dicts as vectors: copy, load, zero, add, scale, and the weighted average.

A state dict maps names to tensors: the parameters (``0.weight``, …) **and** the buffers
(BatchNorm's ``running_mean``, ``running_var``, ``num_batches_tracked``). FedAvg treats the floating
entries as one long vector and averages them with the clients' sample counts:

.. math::

    w_{t+1} = \sum_{k \in S_t} \frac{n_k}{m_t}\, w^k_{t+1},\qquad m_t = \sum_{k \in S_t} n_k .

**Integer buffers are handled explicitly.** ``num_batches_tracked`` (int64) is a counter, not a
coordinate of the model: multiplying it by 0.3 has no meaning, and ``int64 * 0.3`` in PyTorch
silently produces a *float* tensor, after which ``load_state_dict`` would cast it back by truncation.
The policy here:

* :func:`scale_state_dict` scales floating tensors and copies integer (and bool) tensors unchanged;
* :func:`add_state_dicts` adds every tensor, integers exactly;
* :func:`aggregate_weighted_average` gives an integer tensor the **sample-weighted mean rounded to
  the nearest integer** (computed in float64, ties to even), cast back to its dtype.

Every function preserves each tensor's dtype and device and returns new tensors (inputs are never
mutated, and results never share memory with them), except :func:`load_model_state`, which copies
into the model's own tensors.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from trainsys._validation import describe
from trainsys.fedavg.model import require_module

StateDict = dict[str, torch.Tensor]


def require_state_dict(name: str, value: object) -> Mapping[str, torch.Tensor]:
    """Require a non-empty mapping of string keys to tensors."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a state dict (a dict of tensors), got {describe(value)}")
    if len(value) == 0:
        raise ValueError(f"{name} must hold at least one tensor, got an empty dict")
    for key, tensor in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{name} keys must be strings, got {describe(key)}")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}[{key!r}] must be a torch.Tensor, got {describe(tensor)}")
    return value


def require_same_structure(name_a: str, a: object, name_b: str, b: object) -> None:
    """Raise ``ValueError`` (naming ``name_b`` and the key) unless ``b`` has ``a``'s keys, shapes, dtypes, devices."""
    require_state_dict(name_a, a)
    require_state_dict(name_b, b)
    missing, extra = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if missing or extra:
        raise ValueError(f"{name_b} must have the same keys as {name_a}; missing {missing}, unexpected {extra}")
    for key in a:
        ta, tb = a[key], b[key]
        for what, va, vb in (("shape", tuple(ta.shape), tuple(tb.shape)), ("dtype", ta.dtype, tb.dtype),
                             ("device", ta.device, tb.device)):
            if va != vb:
                raise ValueError(f"{name_b}[{key!r}] must have the {what} of {name_a}[{key!r}]: "
                                 f"expected {va}, got {vb}")


def state_dict_bytes(state: Mapping[str, torch.Tensor]) -> int:
    """Bytes of all tensors in ``state``: :math:`\\sum_t \\text{numel}(t) \\cdot \\text{element\\_size}(t)`."""
    state = require_state_dict("state", state)
    return sum(t.numel() * t.element_size() for t in state.values())


def is_counter(tensor: torch.Tensor) -> bool:
    """True for integer and bool tensors: counters and flags, averaged by rounding, never scaled."""
    return not (tensor.is_floating_point() or tensor.is_complex())


# --- Lesson 11 -------------------------------------------------------------------------------------
def clone_model_state(model: nn.Module) -> StateDict:
    """An independent snapshot of ``model.state_dict()``: parameters **and** buffers, same key order.

    Every tensor is ``detach().clone()``-d: same shape, dtype and device, ``requires_grad=False``, and
    its own memory — ``model.state_dict()`` alone returns tensors that *share* storage with the model,
    so a "snapshot" taken that way changes as soon as the model trains. Nothing is mutated.
    """
    model = require_module("model", model)
    return {key: tensor.detach().clone() for key, tensor in model.state_dict().items()}


# --- Lesson 12 -------------------------------------------------------------------------------------
def load_model_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """Copy ``state`` into ``model``'s own parameters and buffers **in place**; return ``model``.

    Strict: ``state`` must have exactly the keys of ``model.state_dict()``, each with the same shape
    and dtype — otherwise ``ValueError`` naming ``state`` and the key, before anything is copied (no
    half-loaded model; ``load_state_dict(strict=False)`` would silently skip a missing key and leave
    a stale tensor behind). Values are copied, never aliased: changing ``state`` afterwards does not
    change the model. ``state`` itself is not mutated.
    """
    model = require_module("model", model)
    require_same_structure("model.state_dict()", _without_device(model.state_dict()), "state",
                           _without_device(require_state_dict("state", state)))
    model.load_state_dict(dict(state), strict=True)  # copies into the existing tensors
    return model


def _without_device(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # loading copies across devices, so only keys, shapes and dtypes must agree: compare meta stand-ins
    return {k: torch.empty(tuple(t.shape), dtype=t.dtype, device="meta") for k, t in state.items()}


# --- Lesson 13 -------------------------------------------------------------------------------------
def zeros_like_state(state: Mapping[str, torch.Tensor]) -> StateDict:
    """A state dict of zeros with ``state``'s keys, shapes, dtypes and devices (``torch.zeros_like``).

    Not ``state[k] * 0``: that keeps NaN and inf (``inf * 0 = nan``) and costs a read of every tensor.
    """
    state = require_state_dict("state", state)
    return {key: torch.zeros_like(tensor) for key, tensor in state.items()}


# --- Lesson 14 -------------------------------------------------------------------------------------
def add_state_dicts(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> StateDict:
    """Key-by-key sum ``a[k] + b[k]``, a new dict in ``a``'s key order; integer tensors add exactly.

    Keys are matched by **name**, not by position (two dicts with the same keys in another order are
    the same state). ``ValueError`` naming ``b`` and the key when keys, shapes, dtypes or devices
    differ. Neither input is mutated.
    """
    require_same_structure("a", a, "b", b)
    return {key: a[key] + b[key] for key in a}


# --- Lesson 15 -------------------------------------------------------------------------------------
def scale_state_dict(state: Mapping[str, torch.Tensor], c: float) -> StateDict:
    """``c * state`` for floating tensors, dtype kept; integer and bool tensors copied **unchanged**.

    ``c`` is any finite real (negative for a difference, ``0`` allowed). Counters such as
    ``num_batches_tracked`` are not scaled: ``int64 * 0.5`` would turn them into a float tensor and a
    later cast back would truncate. Returns a new dict; ``state`` is not mutated.
    """
    state = require_state_dict("state", state)
    if isinstance(c, bool) or not isinstance(c, numbers.Real) or not math.isfinite(float(c)):
        raise TypeError(f"c must be a finite real number, got {describe(c)}")
    c = float(c)
    return {key: t.clone() if is_counter(t) else t * c for key, t in state.items()}


# --- Lesson 16 -------------------------------------------------------------------------------------
def aggregate_weighted_average(
    states: Sequence[Mapping[str, torch.Tensor]], num_samples: Sequence[int]
) -> StateDict:
    r"""FedAvg's server update: :math:`\sum_k \frac{n_k}{m} w^k` with :math:`m = \sum_k n_k` over the given clients.

    ``states`` are the ``m`` selected clients' state dicts (same keys, shapes, dtypes, devices) and
    ``num_samples`` their example counts :math:`n_k \ge 1` (the weights are normalised over *these*
    clients, the paper's erratum — not over all ``K`` clients, and not ``1/m`` each). Floating
    tensors are accumulated in float64 and cast back to their dtype once; integer and bool tensors
    (``num_batches_tracked``) get the weighted mean **rounded to the nearest integer** (ties to even).
    Returns a new state dict in ``states[0]``'s key order on the same devices; inputs are not mutated.
    Raises ``ValueError`` when the lists are empty or differ in length, a count is < 1, or two states
    differ in keys, shapes or dtypes (the message names ``states[k]`` and the key).
    """
    if not isinstance(states, Sequence) or isinstance(states, (str, bytes)) or len(states) == 0:
        raise ValueError(f"states must be a non-empty list of state dicts, got {describe(states)}")
    if isinstance(num_samples, torch.Tensor):
        num_samples = num_samples.tolist()
    if not isinstance(num_samples, Sequence) or isinstance(num_samples, (str, bytes)):
        raise TypeError(f"num_samples must be a list of integers, got {describe(num_samples)}")
    if len(num_samples) != len(states):
        raise ValueError(f"num_samples must have one count per state: {len(states)} states, "
                         f"{len(num_samples)} counts")
    for k, n_k in enumerate(num_samples):
        if isinstance(n_k, bool) or not isinstance(n_k, numbers.Integral) or n_k < 1:
            raise ValueError(f"num_samples[{k}] must be an integer >= 1, got {describe(n_k)}")
    for k in range(1, len(states)):
        require_same_structure("states[0]", states[0], f"states[{k}]", states[k])
    require_state_dict("states[0]", states[0])

    total = sum(int(n) for n in num_samples)  # m_t
    weights = [int(n) / total for n in num_samples]  # n_k / m_t, float64
    result = {}
    for key, first in states[0].items():
        acc = torch.zeros(first.shape, dtype=torch.float64, device=first.device)
        for w, state in zip(weights, states):
            acc += w * state[key].to(torch.float64)
        result[key] = (torch.round(acc) if is_counter(first) else acc).to(first.dtype)
    return result
