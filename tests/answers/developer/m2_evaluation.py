"""Mutants for Module 2, Part 7 (lessons 28–30): evaluation mistakes the notebooks name."""

from __future__ import annotations

import numpy as np

from trainsys.diloco import evaluation as ref
from trainsys.diloco.model import model_forward, softmax

REFERENCE = "trainsys.diloco.evaluation"


def _loss(variant: str):
    def wrong(params, X, y):
        ref.evaluate_heldout_loss(params, X, y)
        logits, _ = model_forward(params, X)
        if variant == "log of softmax":
            return float(-np.mean(np.log(softmax(logits)[np.arange(len(y)), y])))
        if variant == "first batch":
            n = min(len(y), 4)
            return ref.cross_entropy_loss(logits[:n], y[:n])
        onehot = np.eye(logits.shape[1])[y]
        return float(np.mean((softmax(logits) - onehot) ** 2))  # MSE of probabilities

    return wrong


def _accuracy(variant: str):
    def wrong(params, X, y):
        ref.classification_accuracy(params, X, y)
        logits, _ = model_forward(params, X)
        if variant == "count":
            return float(np.sum(np.argmax(logits, axis=1) == y))
        if variant == "threshold":
            return float(np.mean(softmax(logits)[np.arange(len(y)), y] > 0.5))
        return float(np.mean(np.argmax(logits[:, ::-1], axis=1) == logits.shape[1] - 1 - y))  # ties to the last

    return wrong


def _savings(variant: str):
    def wrong(diloco_history, sync_history, metric="heldout_loss"):
        right = ref.communication_savings(diloco_history, sync_history, metric)
        d, s = diloco_history, sync_history
        sign = 1.0 if ref.METRICS[metric] == "higher" else -1.0
        if variant == "loss as higher-is-better":
            sign = 1.0
        best_d, best_s = max(sign * e[metric] for e in d), max(sign * e[metric] for e in s)
        target = max(best_d, best_s) if variant == "better run's best" else min(best_d, best_s)
        reach = [e for e in d if sign * e[metric] >= target], [e for e in s if sign * e[metric] >= target]
        pick = -1 if variant == "last round" else 0
        first_d, first_s = reach[0][pick], reach[1][pick]
        out = dict(right, target=sign * target, diloco_round=first_d["round"], sync_round=first_s["round"],
                   diloco_bytes=first_d["cumulative_bytes"], sync_bytes=first_s["cumulative_bytes"],
                   ratio=first_s["cumulative_bytes"] / first_d["cumulative_bytes"])
        if variant == "whole runs":
            out["ratio"] = s[-1]["cumulative_bytes"] / d[-1]["cumulative_bytes"]
        if variant == "per round":
            out["bytes_per_step_ratio"] = s[-1]["bytes_communicated"] / d[-1]["bytes_communicated"]
        return out

    return wrong


MUTANTS = {
    "evaluate_heldout_loss": [
        ("log of the softmax (infinite for large logits)", _loss("log of softmax")),
        ("evaluates the first few examples only", _loss("first batch")),
        ("mean squared error of the probabilities", _loss("mse")),
    ],
    "classification_accuracy": [
        ("the number of correct examples, not the fraction", _accuracy("count")),
        ("counts p(true class) > 0.5 as correct", _accuracy("threshold")),
        ("ties go to the last class", _accuracy("ties last")),
    ],
    "communication_savings": [
        ("bytes of the whole runs, not at matched quality", _savings("whole runs")),
        ("target = the better run's best (the other never reaches it)", _savings("better run's best")),
        ("last round at the target instead of the first", _savings("last round")),
        ("treats a lower loss as worse", _savings("loss as higher-is-better")),
        ("bytes per round ratio instead of per step", _savings("per round")),
    ],
}
