"""Red team, Module 2 Part 7 (evaluation & communication analysis): wrong answers and correct alternatives
written from the release notebooks only."""

from __future__ import annotations

import numpy as np

from trainsys.diloco.model import cross_entropy_loss, model_forward


# ----------------------------------------------------------------------------------------------------------
# Shared validation of (params, X, y), as Lessons 28-29 describe it
# ----------------------------------------------------------------------------------------------------------
def _n_classes(params):
    L = sum(1 for k in params if k.startswith("W"))
    return params[f"b{L - 1}"].shape[0]


def _check_X(params, X):
    if not isinstance(X, np.ndarray) or not np.issubdtype(X.dtype, np.floating) or X.ndim != 2:
        raise ValueError("X must be a 2-D floating-point array")
    if X.shape[0] < 1:
        raise ValueError("X must hold at least one example")
    if X.shape[1] != params["W0"].shape[0]:
        raise ValueError(f"X has {X.shape[1]} features, params['W0'] expects {params['W0'].shape[0]}")


def _check_y(params, X, y, *, lower=True):
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
        raise ValueError("y must be a 1-D integer array")
    if len(y) != X.shape[0]:
        raise ValueError(f"y has {len(y)} labels for {X.shape[0]} examples")
    C = _n_classes(params)
    if (lower and y.min() < 0) or y.max() >= C:
        raise ValueError(f"y: labels must lie in [0, {C})")


def _check(params, X, y):
    _check_X(params, X)
    _check_y(params, X, y)


def _lse_loss(logits, y, dtype=np.float64):
    z = logits.astype(dtype)
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.sum(np.exp(z - m), axis=1))
    return lse - z[np.arange(len(y)), y]


# ==========================================================================================================
# Lesson 28: evaluate_heldout_loss
# ==========================================================================================================
def _ehl_log_softmax(params, X, y):
    _check(params, X, y)
    z = model_forward(params, X)[0]
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p = p / p.sum(axis=1, keepdims=True)
    return float(-np.mean(np.log(p[np.arange(len(y)), y])))


def _ehl_first_batch(params, X, y):
    _check(params, X, y)
    Xb, yb = X[:32], y[:32]  # a loop copied from the training code: one batch of 32
    return float(cross_entropy_loss(model_forward(params, Xb)[0], yb))


def _ehl_brier(params, X, y):
    _check(params, X, y)
    z = model_forward(params, X)[0].astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    onehot = np.eye(z.shape[1])[y]
    return float(np.mean((p - onehot) ** 2))


def _ehl_sum(params, X, y):
    _check(params, X, y)
    return float(np.sum(_lse_loss(model_forward(params, X)[0], y)))


def _ehl_numpy_scalar(params, X, y):
    _check(params, X, y)
    return np.mean(_lse_loss(model_forward(params, X)[0], y))  # numpy.float64, not a Python float


def _ehl_float32(params, X, y):
    _check(params, X, y)
    logits = model_forward(params, X)[0]
    return float(np.mean(_lse_loss(logits, y, dtype=logits.dtype)))  # float32 logits stay float32


def _ehl_upper_bound_only(params, X, y):
    _check_X(params, X)
    _check_y(params, X, y, lower=False)
    return float(np.mean(_lse_loss(model_forward(params, X)[0], y)))  # y = -1 reads class C - 1


def _ehl_float_labels(params, X, y):
    _check_X(params, X)
    y = np.asarray(y).astype(np.int64)  # float labels truncated instead of refused
    _check_y(params, X, y)
    return float(cross_entropy_loss(model_forward(params, X)[0], y))


def _ehl_no_empty_check(params, X, y):
    if not isinstance(X, np.ndarray) or X.ndim != 2 or X.shape[1] != params["W0"].shape[0]:
        raise ValueError("X has the wrong shape")
    _check_y(params, X, y, lower=True) if len(y) else None
    z = model_forward(params, X)[0]
    with np.errstate(all="ignore"):
        return float(np.mean(_lse_loss(z, y))) if len(y) else float("nan")


def _ehl_int_X(params, X, y):
    X = np.asarray(X, dtype=np.float64)  # integer features converted instead of refused
    _check(params, X, y)
    return float(cross_entropy_loss(model_forward(params, X)[0], y))


def _ehl_class_balanced(params, X, y):
    _check(params, X, y)
    per = _lse_loss(model_forward(params, X)[0], y)
    return float(np.mean([per[y == c].mean() for c in np.unique(y)]))


def _ehl_alt_chunks(params, X, y):
    # evaluated in chunks of 7 rows and recombined with the size-weighted mean (the lesson's additivity)
    _check(params, X, y)
    total, n = 0.0, X.shape[0]
    for start in range(0, n, 7):
        Xc, yc = X[start:start + 7], y[start:start + 7]
        total += len(yc) * cross_entropy_loss(model_forward(params, Xc)[0], yc)
    return float(total / n)


def _ehl_alt_torch(params, X, y):
    import torch

    _check(params, X, y)
    logits = model_forward(params, X)[0]
    loss = torch.nn.functional.cross_entropy(torch.from_numpy(logits.astype(np.float64)), torch.from_numpy(y.astype(np.int64)))
    return float(loss.item())


# ==========================================================================================================
# Lesson 29: classification_accuracy
# ==========================================================================================================
def _ca_count(params, X, y):
    _check(params, X, y)
    return float(np.sum(np.argmax(model_forward(params, X)[0], axis=1) == y))


def _ca_threshold(params, X, y):
    _check(params, X, y)
    z = model_forward(params, X)[0].astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return float(np.mean(p[np.arange(len(y)), y] > 0.5))


def _ca_last_max(params, X, y):
    _check(params, X, y)
    z = model_forward(params, X)[0]
    pred = z.shape[1] - 1 - np.argmax(z[:, ::-1], axis=1)  # ties to the last class
    return float(np.mean(pred == y))


def _ca_numpy_scalar(params, X, y):
    _check(params, X, y)
    return np.mean(np.argmax(model_forward(params, X)[0], axis=1) == y)  # numpy.float64


def _ca_naive_softmax(params, X, y):
    _check(params, X, y)
    z = model_forward(params, X)[0]
    with np.errstate(all="ignore"):
        e = np.exp(z)  # overflows to inf for logits above ~89 (float32) / ~709 (float64)
        p = e / e.sum(axis=1, keepdims=True)
    return float(np.mean(np.argmax(p, axis=1) == y))


def _ca_upper_bound_only(params, X, y):
    _check_X(params, X)
    _check_y(params, X, y, lower=False)
    return float(np.mean(np.argmax(model_forward(params, X)[0], axis=1) == y))


def _ca_float_labels(params, X, y):
    _check_X(params, X)
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != X.shape[0]:
        raise ValueError("y must be 1-D, one label per row")
    if y.min() < 0 or y.max() >= _n_classes(params):
        raise ValueError("y out of range")
    return float(np.mean(np.argmax(model_forward(params, X)[0], axis=1) == y))  # 1.0 == 1 counts


def _ca_no_empty_check(params, X, y):
    if not isinstance(X, np.ndarray) or X.ndim != 2 or X.shape[1] != params["W0"].shape[0]:
        raise ValueError("X has the wrong shape")
    if len(y):
        _check_y(params, X, y)
    with np.errstate(all="ignore"):
        return float(np.mean(np.argmax(model_forward(params, X)[0], axis=1) == y)) if len(y) else float("nan")


def _ca_alt_torch(params, X, y):
    import torch

    _check(params, X, y)
    logits = torch.from_numpy(model_forward(params, X)[0])
    correct = int((torch.argmax(logits, dim=1) == torch.from_numpy(y.astype(np.int64))).sum().item())
    return correct / len(y)


def _ca_alt_mask(params, X, y):
    _check(params, X, y)
    z = model_forward(params, X)[0]
    is_max = z == z.max(axis=1, keepdims=True)
    pred = np.argmax(is_max, axis=1)  # the first True: the lowest maximiser
    hits = 0
    for p_i, y_i in zip(pred, y):
        hits += int(p_i == y_i)
    return hits / float(len(y))


# ==========================================================================================================
# Lesson 30: communication_savings
# ==========================================================================================================
ENTRY_KEYS = ("round", "steps", "train_loss", "heldout_loss", "heldout_accuracy", "bytes_communicated",
              "cumulative_bytes")


def _validate_history(name, history, *, allow_tuple=True, index_in_message=True):
    kinds = (list, tuple) if allow_tuple else (list,)
    if not isinstance(history, kinds) or len(history) == 0:
        raise TypeError(f"{name} must be a non-empty list of dicts")
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise TypeError(f"{name}[{i}] must be a dict" if index_in_message else f"{name}: an entry is not a dict")
        missing = [k for k in ENTRY_KEYS if k not in entry]
        if missing:
            raise ValueError(f"{name}[{i}] lacks {missing}" if index_in_message else f"{name}: an entry lacks {missing}")


def _sigma(metric):
    if metric not in ("heldout_loss", "heldout_accuracy"):
        raise ValueError(f"metric must be 'heldout_loss' or 'heldout_accuracy', got {metric!r}")
    return 1.0 if metric == "heldout_accuracy" else -1.0


def _first_at(history, metric, s, target):
    return next(e for e in history if s * e[metric] >= s * target)


def _positive_counts(name, *entries):
    for e in entries:
        if e["steps"] <= 0 or e["cumulative_bytes"] <= 0:
            raise ValueError(f"{name}: steps and cumulative_bytes must be > 0 where a ratio needs them")


def _savings(diloco_history, sync_history, metric, *, target_rule="worse", pick="first", sign=None,
             per_step="products", ratio_rule="bytes", per_step_from="last", check_zero=True, allow_tuple=True,
             index_in_message=True, numpy_target=False, bytes_from_round=False, metric_check=None):
    _validate_history("diloco_history", diloco_history, allow_tuple=allow_tuple, index_in_message=index_in_message)
    _validate_history("sync_history", sync_history, allow_tuple=allow_tuple, index_in_message=index_in_message)
    if metric_check is not None:
        s = metric_check(metric)
    else:
        s = _sigma(metric)
    if sign is not None:
        s = sign
    best_d = max(s * e[metric] for e in diloco_history)
    best_s = max(s * e[metric] for e in sync_history)
    if target_rule == "worse":
        target = s * min(best_d, best_s)
    else:  # the better of the two
        target = s * max(best_d, best_s)
    if pick == "first":
        d, y = _first_at(diloco_history, metric, s, target), _first_at(sync_history, metric, s, target)
    else:
        d = [e for e in diloco_history if s * e[metric] >= s * target][-1]
        y = [e for e in sync_history if s * e[metric] >= s * target][-1]
    d_last, s_last = diloco_history[-1], sync_history[-1]
    if check_zero:
        _positive_counts("diloco_history", d, d_last)
        _positive_counts("sync_history", y, s_last)
    cum = (lambda e: e["round"] * e["bytes_communicated"]) if bytes_from_round else (lambda e: e["cumulative_bytes"])
    d_ref, s_ref = (d_last, s_last) if per_step_from == "last" else (diloco_history[0], sync_history[0])
    if per_step == "products":
        bps = (cum(s_ref) * d_ref["steps"]) / (cum(d_ref) * s_ref["steps"])
    elif per_step == "quotients":
        bps = (cum(s_ref) / s_ref["steps"]) / (cum(d_ref) / d_ref["steps"])
    else:  # per round / logging interval
        bps = s_last["bytes_communicated"] / d_last["bytes_communicated"]
    if ratio_rule == "bytes":
        ratio = cum(y) / cum(d)
    elif ratio_rule == "whole":
        ratio = cum(s_last) / cum(d_last)
    else:  # from the steps: H * s_S / s_D
        ratio = bps * y["steps"] / d["steps"]
    return {"metric": metric, "target": np.float64(target) if numpy_target else float(target),
            "diloco_round": int(d["round"]), "sync_round": int(y["round"]), "diloco_bytes": int(cum(d)),
            "sync_bytes": int(cum(y)), "ratio": float(ratio), "bytes_per_step_ratio": float(bps)}


def _cs_whole_runs(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, ratio_rule="whole")


def _cs_better_target(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, target_rule="better")


def _cs_last_crossing(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, pick="last")


def _cs_higher_is_better(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, sign=1.0)


def _cs_per_round(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, per_step="per_round")


def _cs_two_quotients(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, per_step="quotients")


def _cs_ratio_from_steps(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, ratio_rule="steps")


def _cs_any_key_metric(diloco_history, sync_history, metric="heldout_loss"):
    def check(m):
        if m not in ENTRY_KEYS:
            raise ValueError(f"metric {m!r} is not a history key")
        return 1.0 if "accuracy" in m else -1.0  # "train_loss" and "round" accepted

    return _savings(diloco_history, sync_history, metric, metric_check=check)


def _cs_list_only(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, allow_tuple=False)


def _cs_no_index(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, index_in_message=False)


def _cs_no_zero_check(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, check_zero=False)


def _cs_numpy_target(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, numpy_target=True)


def _cs_per_step_first(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, per_step_from="first")


def _cs_bytes_from_round(diloco_history, sync_history, metric="heldout_loss"):
    return _savings(diloco_history, sync_history, metric, bytes_from_round=True)


def _cs_alt(diloco_history, sync_history, metric="heldout_loss"):
    """Alternative: index arithmetic with NumPy arrays, Fraction for the per-step ratio."""
    from fractions import Fraction

    for name, hist in (("diloco_history", diloco_history), ("sync_history", sync_history)):
        if isinstance(hist, dict) or not isinstance(hist, (list, tuple)) or not hist:
            raise TypeError(f"{name} must be a non-empty list of run-record entries")
        for i, e in enumerate(hist):
            if not isinstance(e, dict):
                raise TypeError(f"{name}[{i}] is not a dict")
            for key in ENTRY_KEYS:
                if key not in e:
                    raise ValueError(f"{name}[{i}] has no {key!r}")
    if metric == "heldout_accuracy":
        better = 1.0
    elif metric == "heldout_loss":
        better = -1.0
    else:
        raise ValueError(f"unknown metric {metric!r}")
    qd = np.array([better * e[metric] for e in diloco_history], dtype=np.float64)
    qs = np.array([better * e[metric] for e in sync_history], dtype=np.float64)
    goal = min(qd.max(), qs.max())
    i_d = int(np.argmax(qd >= goal))  # first True
    i_s = int(np.argmax(qs >= goal))
    d, s = diloco_history[i_d], sync_history[i_s]
    for name, entries in (("diloco_history", (d, diloco_history[-1])), ("sync_history", (s, sync_history[-1]))):
        if any(e["steps"] <= 0 or e["cumulative_bytes"] <= 0 for e in entries):
            raise ValueError(f"{name} has zero steps or bytes")
    dl, sl = diloco_history[-1], sync_history[-1]
    per_step = Fraction(int(sl["cumulative_bytes"]) * int(dl["steps"]), int(dl["cumulative_bytes"]) * int(sl["steps"]))
    return {"metric": metric, "target": float(better * goal),
            "diloco_round": d["round"], "sync_round": s["round"], "diloco_bytes": d["cumulative_bytes"],
            "sync_bytes": s["cumulative_bytes"], "ratio": s["cumulative_bytes"] / d["cumulative_bytes"],
            "bytes_per_step_ratio": float(per_step)}


MUTANTS = {
    "evaluate_heldout_loss": [
        ("-log(softmax) : inf for a confidently wrong example (contract: 'No softmax is formed')",
         _ehl_log_softmax),
        ("only the first 32 examples (a training-loop batch)", _ehl_first_batch),
        ("Brier score instead of cross-entropy", _ehl_brier),
        ("sum instead of mean", _ehl_sum),
        ("returns numpy.float64 (contract: 'Python float')", _ehl_numpy_scalar),
        ("float32 logits reduced in float32 (contract: 'accumulated in float64')", _ehl_float32),
        ("labels checked only from above: -1 read as class C-1 (contract: 'outside [0, C) ... ValueError naming "
         "y')", _ehl_upper_bound_only),
        ("float labels truncated to int (contract: 'labels that are not a 1-D integer array ... naming y')",
         _ehl_float_labels),
        ("empty X returns nan (contract: 'an empty X ... error naming X')", _ehl_no_empty_check),
        ("integer X converted (contract: 'X a 2-D floating-point array')", _ehl_int_X),
        ("class-balanced mean of per-class losses (contract: plain mean over n)", _ehl_class_balanced),
    ],
    "classification_accuracy": [
        ("the count, not the fraction", _ca_count),
        ("p_y > 0.5 counted as correct (contract: argmax)", _ca_threshold),
        ("ties to the last class (contract: 'Ties go to the lowest class index')", _ca_last_max),
        ("returns numpy.float64 (contract: 'Python float')", _ca_numpy_scalar),
        ("argmax of a naive softmax: exp overflows for large logits (contract: 'No softmax')", _ca_naive_softmax),
        ("labels checked only from above: -1 silently wrong (contract: 'An out-of-range label must not quietly "
         "count as wrong')", _ca_upper_bound_only),
        ("float labels accepted (contract: 'labels that are not 1-D integers ... ValueError naming y')",
         _ca_float_labels),
        ("empty X returns nan (contract: 'an empty X ... naming X')", _ca_no_empty_check),
    ],
    "communication_savings": [
        ("bytes of the whole runs (contract: bytes at the first entry reaching the target)", _cs_whole_runs),
        ("target = the better run's best (contract: 'the worse of the two runs' best values')",
         _cs_better_target),
        ("the last entry at the target (contract: 'first entry at least as good')", _cs_last_crossing),
        ("lower loss treated as worse (contract: 'lower loss / higher accuracy is better')", _cs_higher_is_better),
        ("bytes per logging interval instead of per step (contract: 'baseline bytes per step / DiLoCo bytes per "
         "step')", _cs_per_round),
        ("per-step ratio as a quotient of two quotients (contract: 'a single division of integer products')",
         _cs_two_quotients),
        ("ratio rebuilt from steps, H s_S / s_D (contract: 'sync_bytes / diloco_bytes')", _cs_ratio_from_steps),
        ("any history key accepted as metric, e.g. 'train_loss' (contract: 'heldout_loss or heldout_accuracy')",
         _cs_any_key_metric),
        ("tuple histories refused (contract: 'a list or tuple')", _cs_list_only),
        ("missing-key error without the entry's index (contract: 'naming the history and the entry's index')",
         _cs_no_index),
        ("zero steps/bytes not refused: ZeroDivisionError (contract: 'ValueError naming the history')",
         _cs_no_zero_check),
        ("target returned as numpy.float64 (contract: 'target float')", _cs_numpy_target),
        ("bytes_per_step_ratio from the first entries (contract: 'from the last entries', over the whole runs)",
         _cs_per_step_first),
        ("bytes reconstructed as round * bytes_communicated (contract: 'the cumulative_bytes of those entries')",
         _cs_bytes_from_round),
    ],
}

ALTERNATIVES = {
    "evaluate_heldout_loss": [
        ("evaluated in chunks of 7 and recombined by size (the lesson's additivity)", _ehl_alt_chunks),
        ("torch.nn.functional.cross_entropy in float64", _ehl_alt_torch),
    ],
    "classification_accuracy": [
        ("torch.argmax (first maximiser) and a Python division", _ca_alt_torch),
        ("mask of maxima, first True, explicit count", _ca_alt_mask),
    ],
    "communication_savings": [("NumPy first-True search, Fraction for the per-step ratio", _cs_alt)],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _cs_alt_min_max(diloco_history, sync_history, metric="heldout_loss"):
    """Bests by min/max on the metric's own scale, first crossings by index loops, divisions in float."""
    _validate_history("diloco_history", diloco_history)
    _validate_history("sync_history", sync_history)
    if metric not in ("heldout_loss", "heldout_accuracy"):
        raise ValueError(f"metric must be 'heldout_loss' or 'heldout_accuracy', got {metric!r}")
    lower = metric == "heldout_loss"
    best = min if lower else max
    bests = [best(e[metric] for e in h) for h in (diloco_history, sync_history)]
    target = max(bests) if lower else min(bests)  # the worse of the two bests
    good = (lambda q: q <= target) if lower else (lambda q: q >= target)
    firsts = []
    for h in (diloco_history, sync_history):
        i = 0
        while not good(h[i][metric]):
            i += 1
        firsts.append(h[i])
    for name, h, first in (("diloco_history", diloco_history, firsts[0]), ("sync_history", sync_history, firsts[1])):
        for e in (first, h[-1]):
            if not (e["steps"] > 0 and e["cumulative_bytes"] > 0):
                raise ValueError(f"{name}: steps and cumulative_bytes must be positive")
    last_d, last_s = diloco_history[-1], sync_history[-1]  # one division of integer products (the lesson)
    return {"metric": metric, "target": float(target),
            "diloco_round": int(firsts[0]["round"]), "sync_round": int(firsts[1]["round"]),
            "diloco_bytes": int(firsts[0]["cumulative_bytes"]), "sync_bytes": int(firsts[1]["cumulative_bytes"]),
            "ratio": firsts[1]["cumulative_bytes"] / firsts[0]["cumulative_bytes"],
            "bytes_per_step_ratio": (int(last_s["cumulative_bytes"]) * int(last_d["steps"]))
            / (int(last_d["cumulative_bytes"]) * int(last_s["steps"]))}


ALTERNATIVES.setdefault("communication_savings", []).append(
    ("min/max bests, index loops for the first crossing", _cs_alt_min_max))
