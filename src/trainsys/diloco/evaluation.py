r"""Module 2, Part 7 — held-out quality and what the communication saved.

DiLoCo trades communication for local computation: per inner step, a synchronous data-parallel run
all-reduces one gradient per worker, DiLoCo one pseudo-gradient per worker every ``H`` steps, so its
bytes per step are ``H`` times smaller *by construction*. What must be measured is the other side:
how good the model is. The honest comparison is therefore at **matched quality**: the bytes each
run had communicated when it first reached a held-out quality that both runs reach,

.. math::

    \text{savings} = \frac{\text{bytes}_{sync}(\text{first round with quality} \ge q^*)}
                          {\text{bytes}_{DiLoCo}(\text{first round with quality} \ge q^*)},

with :math:`q^*` the worse of the two runs' best values. It equals ``H`` when DiLoCo needs as many
inner steps as the baseline to get there, less when it needs more, more when it needs fewer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import describe, require_axis_match, require_float_array
from trainsys.diloco.model import (
    Params,
    cross_entropy_loss,
    model_forward,
    num_layers,
    validate_labels,
    validate_model_params,
)

METRICS: dict[str, str] = {"heldout_loss": "lower", "heldout_accuracy": "higher"}
"""The quality metrics :func:`communication_savings` can match, and which direction is better."""

HISTORY_KEYS: tuple[str, ...] = ("round", "steps", "train_loss", "heldout_loss", "heldout_accuracy",
                                 "bytes_communicated", "cumulative_bytes")
"""The keys of one round's entry in a run record's ``history``."""


def _validate_eval(params: object, X: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    validate_model_params(params)
    X = require_float_array("X", X, ndim=2)
    if X.shape[0] == 0:
        raise ValueError("X must hold at least one example, got 0")
    require_axis_match("X", X, 1, "params['W0']", params["W0"], 0, "input-feature")
    L = num_layers(params)
    return X, validate_labels("y", y, X.shape[0], params[f"b{L - 1}"].shape[0])


# --- Lesson 28 -------------------------------------------------------------------------------------
def evaluate_heldout_loss(params: Params, X: np.ndarray, y: np.ndarray) -> float:
    r"""Mean cross-entropy of the model on ``(X: (n, d_in), y: (n,))`` — data it was never trained on.

    :math:`-\frac1n\sum_i \log p_\theta(y_i \mid x_i)` via :func:`model_forward` and
    :func:`cross_entropy_loss`; a Python float. Labels must lie in ``[0, C)``; ``n >= 1``.
    """
    X, y = _validate_eval(params, X, y)
    logits, _ = model_forward(params, X)  # (n, C)
    return cross_entropy_loss(logits, y)


# --- Lesson 29 -------------------------------------------------------------------------------------
def classification_accuracy(params: Params, X: np.ndarray, y: np.ndarray) -> float:
    """Fraction of examples whose largest logit is the true class, a Python float in ``[0, 1]``.

    Ties go to the lowest class index (``np.argmax``). Softmax is monotone, so the argmax of the
    logits is the argmax of the probabilities: no softmax is computed. Labels must lie in ``[0, C)``.
    """
    X, y = _validate_eval(params, X, y)
    logits, _ = model_forward(params, X)  # (n, C)
    return float(np.mean(np.argmax(logits, axis=1) == y))


def validate_history(name: str, history: object) -> list[Mapping]:
    """Require a non-empty list of per-round dicts holding at least :data:`HISTORY_KEYS`."""
    if isinstance(history, Mapping) or not isinstance(history, Sequence) or len(history) == 0:
        raise TypeError(f"{name} must be a non-empty list of per-round dicts (a run record's 'history'), "
                        f"got {describe(history)}")
    for i, entry in enumerate(history):
        if not isinstance(entry, Mapping):
            raise TypeError(f"{name}[{i}] must be a dict, got {describe(entry)}")
        missing = sorted(set(HISTORY_KEYS) - set(entry))
        if missing:
            raise ValueError(f"{name}[{i}] is missing the keys {missing}")
    return list(history)


# --- Lesson 30 -------------------------------------------------------------------------------------
def communication_savings(
    diloco_history: Sequence[Mapping], sync_history: Sequence[Mapping], metric: str = "heldout_loss"
) -> dict[str, object]:
    """Bytes saved by DiLoCo against the synchronous baseline, per step and at matched quality.

    Histories are run records' ``"history"`` lists (:data:`HISTORY_KEYS`). ``metric`` is
    ``"heldout_loss"`` (lower is better) or ``"heldout_accuracy"`` (higher is better). The target is
    the worse of the two runs' best values; each run's *first* round reaching it gives its bytes.
    Returns a dict:

    - ``metric``, ``target``;
    - ``diloco_round``, ``sync_round``: the ``"round"`` of those first entries;
    - ``diloco_bytes``, ``sync_bytes``: their ``"cumulative_bytes"``;
    - ``ratio``: ``sync_bytes / diloco_bytes`` — the saving at matched quality;
    - ``bytes_per_step_ratio``: (sync bytes per inner step) / (DiLoCo bytes per inner step) over the
      whole runs (last ``cumulative_bytes / steps``) — ``H`` exactly when both count the same arrays.
    """
    d = validate_history("diloco_history", diloco_history)
    s = validate_history("sync_history", sync_history)
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    sign = 1.0 if METRICS[metric] == "higher" else -1.0  # compare sign * value: larger is better
    best_d = max(sign * float(e[metric]) for e in d)
    best_s = max(sign * float(e[metric]) for e in s)
    target = min(best_d, best_s)
    first_d = next(e for e in d if sign * float(e[metric]) >= target)
    first_s = next(e for e in s if sign * float(e[metric]) >= target)
    for name, entry in (("diloco_history", first_d), ("sync_history", first_s), ("diloco_history", d[-1]),
                        ("sync_history", s[-1])):
        if entry["cumulative_bytes"] <= 0 or entry["steps"] <= 0:
            raise ValueError(f"{name} must count positive steps and bytes, got {entry['steps']} steps and "
                             f"{entry['cumulative_bytes']} bytes at round {entry['round']}")
    return {
        "metric": metric,
        "target": sign * target,
        "diloco_round": int(first_d["round"]),
        "sync_round": int(first_s["round"]),
        "diloco_bytes": int(first_d["cumulative_bytes"]),
        "sync_bytes": int(first_s["cumulative_bytes"]),
        "ratio": float(first_s["cumulative_bytes"] / first_d["cumulative_bytes"]),
        # (bytes_s / steps_s) / (bytes_d / steps_d), as one division of integer products: exactly H
        "bytes_per_step_ratio": (s[-1]["cumulative_bytes"] * d[-1]["steps"]) / (d[-1]["cumulative_bytes"] * s[-1]["steps"]),
    }
