"""Checks behind the hidden tests of Module 2, Parts 4, 6 and 7 (lessons 16–20 and 25–30): shards,
local training, the DiLoCo round and trainers, evaluation and the communication analysis.

Shards: sizes that do not divide, one worker per example, Dirichlet α from 0.1 (redraws happen) to
100. Rounds and runs: 1 to 4 workers whose AdamW states differ (so averaging or resetting them shows),
a non-zero outer buffer, inner SGD with outer lr 1 (FedAvg), IID and non-IID. The trainers run on
configs of a few hundred steps (tens of milliseconds) and are compared field by field with the
reference run record. Generators are passed in fresh per call, so batches must be drawn exactly as
the contract says, and the caller's generators (each worker's, in a round) must end in the reference's
state. Shards and batches must be copies (``np.shares_memory``), the global ``np.random`` state is left
alone, and where a contract names the error type (TypeError or ValueError) the check demands it.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from trainsys.diloco import evaluation as ref_eval
from trainsys.diloco import loop as ref_loop
from trainsys.diloco import sharding as ref_shard
from trainsys.diloco.adamw import init_adamw_state
from trainsys.diloco.model import init_model_params, make_classification_data
from trainsys.diloco.outer import init_outer_optimizer
from trainsys.grading._harness import (
    assert_unchanged,
    fixed as _args,
    BAD,
    Args,
    CheckFailure,
    call,
    expect_raises,
    expect_raises_naming_any,
    assert_array,
    assert_array_dict,
    assert_scalar,
    assert_tuple,
    passed,
    quiet,
    rng_for,
    run_cases,
)

__all__ = [
    "check_iid_shard_dataset",
    "check_noniid_shard_dataset",
    "check_sample_worker_batch",
    "check_local_train_step",
    "check_run_inner_steps",
    "check_diloco_round",
    "check_train_diloco",
    "check_train_synchronous_baseline",
    "check_evaluate_heldout_loss",
    "check_classification_accuracy",
    "check_communication_savings",
]

CLAUSES = {
    "iid_shard_dataset": {
        "the recipe": ("n=10, num_workers=3",),
        "invariants": ("n=10, num_workers=3", "n=5, num_workers=1"),
        "mutation": ("n=5, num_workers=1", "n=10, num_workers=3"),
        "failure modes": ("num_workers = True", "num_workers = 7 > 6 examples", "y with 5 labels for 6 rows",
                          "rng = 3", "integer X"),
        "metric that proves it correct": ("n=10, num_workers=3",),
    },
    "noniid_shard_dataset": {
        "the deal": ("n=60, 3 classes, num_workers=4, alpha=0.1",),
        "redraw": ("n=24, 2 classes, num_workers=3, alpha=0.05",
                   "n=30, 2 classes, num_workers=6, alpha=0.05 (75 deals before none is empty)",
                   "n=30, 2 classes, num_workers=6, alpha=0.05: 100 deals all leave a worker empty"),
        "invariants": ("n=30, 3 classes, num_workers=1", "n=60, 3 classes, num_workers=4, alpha=0.1",
                       "n=24, 2 classes, num_workers=3, alpha=0.05"),
        "mutation": ("n=30, 3 classes, num_workers=1", "n=60, 3 classes, num_workers=4, alpha=0.1"),
        "failure modes": ("alpha = True", "num_workers = 13 > 12 examples", "rng = 3", "integer X"),
        "metric that proves it correct": ("n=60, 3 classes, num_workers=4, alpha=0.1",),
    },
    "sample_worker_batch": {
        "the draw": ("shard of 10, batch_size=4",),
        "mutation": ("shard of 10, batch_size=4", "shard of 1, batch_size=1", "the global np.random state"),
        "failure modes": ("batch_size = True", "batch_size = 0", "shard is an array, not a pair",
                          "float labels in the shard", "rng = None"),
        "metric that proves it correct": ("shard of 10, batch_size=4",),
    },
    "local_train_step": {
        "the step": ("AdamW, fresh state", "SGD, fresh state", "AdamW, state after 3 steps"),
        "mutation": ("SGD, fresh state", "AdamW, fresh state"),
        "failure modes": ("hp with an extra key 'momentum'", "a label -1", "SGD with hp['beta1'] = 1.0",
                          "opt_state without 'v'", "batch with 4 features for W0's 3"),
        "metric that proves it correct": ("AdamW, state after 3 steps",),
    },
    "run_inner_steps": {
        "the loop": ("H = 4", "batch_size 12 for a shard of 8 rows"),
        "mutation": ("H = 1",),
        "failure modes": ("H = 0", "H = 2.5", "H = True", "rng = None", "shard labels outside the model's 2 classes"),
        "metric that proves it correct": ("H = 1", "H = 6 from a state after 2 steps"),
    },
    "diloco_round": {
        "order and randomness": ("3 workers, H = 3, outer lr 0.7, momentum 0.9",),
        "bytes": ("3 workers, H = 3, outer lr 0.7, momentum 0.9",),
        "mutation": ("3 workers, H = 3, outer lr 0.7, momentum 0.9",),
        "failure modes": ("shards = [] (no worker)", "one rng for two workers",
                          "outer_lr = 0.0 is refused before any worker trains"),
        "metric that proves it correct": ("3 workers, H = 3, outer lr 0.7, momentum 0.9", "4 non-IID workers, H = 1"),
    },
    "train_diloco": {
        "mutation": ("3 IID workers, H = 3, 3 rounds",),
        "failure modes": ("an unknown key 'H'", "config = 5"),
        "metric that proves it correct": ("3 IID workers, H = 3, 3 rounds",),
    },
    "train_synchronous_baseline": {
        "one step": ("3 IID workers, H = 3, 3 rounds", "2 non-IID workers (alpha 0.3)",
                     "inner SGD, outer lr 1, momentum 0"),
        "bytes": ("3 IID workers, H = 3, 3 rounds",),
        "mutation": ("3 IID workers, H = 3, 3 rounds",),
        "failure modes": ("an unknown key 'H'", "config = 5"),
        "metric that proves it correct": ("3 IID workers, H = 3, 3 rounds",
                                          "inner SGD, outer lr 0.5 and momentum 0.3 (unused by the baseline)"),
    },
    "evaluate_heldout_loss": {
        "how": ("weights x300: logits near 1e5", "a bias of 1e5 on every class"),
        "mutation": ("8 examples, 3 classes",),
        "failure modes": ("a label -1", "float labels", "an empty X (0 examples)", "integer X"),
        "metric that proves it correct": ("8 examples, 3 classes", "50 examples"),
    },
    "classification_accuracy": {
        "the prediction": ("8 examples, 3 classes", "weights x300: logits near 1e5"),
        "ties": ("all-zero parameters (every logit tied)",),
        "mutation": ("8 examples, 3 classes",),
        "failure modes": ("a label -1", "float labels", "an empty X (0 examples)"),
        "metric that proves it correct": ("8 examples, 3 classes",),
    },
    "communication_savings": {
        "mutation": ("DiLoCo H = 10 vs a baseline logged every 2 steps",),
        "failure modes": ("metric = 'train_loss'", "an empty DiLoCo history",
                          "a baseline round without 'cumulative_bytes'", "sync_history[17] without 'cumulative_bytes'",
                          "DiLoCo reaches the target at a logged round 0"),
        "metric that proves it correct": ("DiLoCo H = 10 vs a baseline logged every 2 steps",
                                          "the same, matched on accuracy", "H = 15",
                                          "DiLoCo's worker count doubles"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

TE = (TypeError,)
"""The contract says TypeError (a wrong type: ``True`` or ``2.5`` for an integer, an integer X, a non-Generator)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value, length or shape)."""

# float32 (eps = 1.2e-7) through a few hundred operations: up to 4 workers × 6 steps of a forward, a
# backward (sums of ≤ 30 products) and an AdamW update whose m / (sqrt(v) + eps) turns a relative error
# of the gradient into the same relative error of the step; another correct order of the float32 sums
# drifts by ~1e-6 relative after a few steps, so rtol 1e-4 keeps a factor of ~100, and atol 1e-6
# covers entries that pass near 0 (the parameters are O(0.1-1)).
TOL = {"rtol": 1e-4, "atol": 1e-6}
"""Trained parameters and losses: float32 through a few hundred operations in a different order."""




def _data(n: int, d_in: int, C: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    return make_classification_data(n, d_in, C, np.random.default_rng(seed))


def _hp(optimizer: str = "adamw", **over: Any) -> dict[str, Any]:
    return {**ref_shard.DEFAULT_INNER_HP, "optimizer": optimizer, "lr": 1e-2 if optimizer == "adamw" else 0.1,
            "batch_size": 5, **over}


def _trained_state(params: dict, shard: tuple, steps: int, seed: int) -> dict:
    """A realistic mid-run AdamW state: ``steps`` reference steps on ``shard``."""
    _, state, _ = ref_shard.run_inner_steps(params, init_adamw_state(params), shard, steps, _hp(), rng_for(seed, 7))
    return state


def _rng_after(reference: Callable[..., Any], index: int) -> Callable[..., Any]:
    """The reference, also returning the state of its generator argument ``args[index]`` after the call."""
    def run(*args: Any, **kwargs: Any) -> tuple[Any, dict]:
        return reference(*args, **kwargs), copy.deepcopy(args[index].bit_generator.state)
    return run


def _check_rng(label: str, rng: Any, expected_state: dict, rule: str) -> None:
    if not isinstance(rng, np.random.Generator) or rng.bit_generator.state != expected_state:
        raise CheckFailure(f"[{label}] the caller's rng must be advanced by exactly {rule}; its state after the call "
                           "differs from the reference's (a draw skipped or added, or drawn from a copy of rng)")


def _exact_type(label: str, what: str, got: Any, kind: type) -> None:
    if type(got) is not kind:
        raise CheckFailure(f"[{label}] {what} must be a Python {kind.__name__}, got {type(got).__name__} {got!r} "
                           f"(convert with {kind.__name__}(...))")


def _shards_compare(label: str, got: Any, expected: list, X: np.ndarray, y: np.ndarray) -> None:
    if not isinstance(got, list) or len(got) != len(expected):
        raise CheckFailure(f"[{label}] must return a list of {len(expected)} (X_k, y_k) shards, got "
                           f"{len(got) if isinstance(got, list) else type(got).__name__}")
    sizes, want = [len(s[1]) if isinstance(s, (tuple, list)) and len(s) == 2 else None for s in got], \
        [len(s[1]) for s in expected]
    if sizes != want:
        raise CheckFailure(f"[{label}] shard sizes are {sizes}, expected {want}")
    for i, (pair, (X_ref, y_ref)) in enumerate(zip(got, expected)):
        X_k, y_k = assert_tuple(label, f"shard {i}", pair, 2)
        # exact: a shard is rows of X and y picked by index, no arithmetic
        assert_array(label, f"X of shard {i}", X_k, X_ref, exact=True)
        assert_array(label, f"y of shard {i}", y_k, y_ref, exact=True)
        if np.shares_memory(X_k, X) or np.shares_memory(y_k, y):
            raise CheckFailure(f"[{label}] shard {i} shares memory with the caller's X or y: the shards must be new "
                               "arrays (fancy indexing copies, even for one worker), so that a worker that modifies "
                               "its shard cannot change X")


# --- Lesson 16 -------------------------------------------------------------------------------------
def check_iid_shard_dataset(fn: Callable[..., Any]) -> str:
    """One permutation, np.array_split sizes, X's order inside a shard, X and y kept together."""
    sizes = [(10, 3), (12, 4), (7, 7), (5, 1), (13, 5)]
    def case(i: int, n: int, k: int) -> Callable[[], Args]:
        return lambda: ((*_data(n, 3, 3, 300 + i), k, rng_for(i, 301)), {})

    cases = [(f"n={n}, num_workers={k}", case(i, n, k)) for i, (n, k) in enumerate(sizes)]
    cases.append(("float64 X, int32 y (the shards keep both dtypes)", lambda: (
        (lambda X, y: (X.astype(np.float64), y.astype(np.int32), 3, rng_for(7, 301)))(*_data(11, 3, 3, 307)), {})))

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        _shards_compare(label, got, expected[0], *inputs[0][:2])
        _check_rng(label, inputs[0][3], expected[1], "one rng.permutation(n), even for one worker")

    X, y = _data(6, 3, 3, 1)
    # the contract names the error types: TypeError for a wrong type, ValueError for a wrong value or length
    invalid = [("num_workers = 0", VE, "num_workers", _args(X, y, 0, rng_for(0, 1))),
               ("num_workers = 7 > 6 examples", VE, "num_workers", _args(X, y, 7, rng_for(0, 1))),
               ("num_workers = True", TE, "num_workers", _args(X, y, True, rng_for(0, 1))),
               ("y with 5 labels for 6 rows", VE, "y", _args(X, y[:5], 2, rng_for(0, 1))),
               ("rng = 3", TE, "rng", _args(X, y, 2, 3))]
    invalid += _dataset_invalid(X, y, lambda X_, y_: (X_, y_, 2, rng_for(0, 1)), typed=True)
    return run_cases("iid_shard_dataset", fn, _rng_after(ref_shard.iid_shard_dataset, 3), cases, compare, invalid,
                     mutable=(3,), compare_with_inputs=True, unchanged=assert_unchanged)


def _dataset_invalid(X: np.ndarray, y: np.ndarray, args: Callable[..., tuple], typed: bool) -> list:
    """X and y of the wrong type or rank, each named (what np.asarray would silently convert). ``typed``: the
    contract's types (Lesson 16: TypeError for a non-floating X or a y that is not 1-D integer, ValueError
    for an X without 2 axes); otherwise either."""
    te, ve = (TE, VE) if typed else (BAD, BAD)
    return [("integer X", te, "X", _args(*args(X.astype(np.int64), y))),
            ("1-D X", ve, "X", _args(*args(X[:, 0].copy(), y))),
            ("float labels y", te, "y", _args(*args(X, y.astype(np.float64)))),
            ("2-D labels y of shape (n, 1)", te, "y", _args(*args(X, y[:, None].copy())))]


# --- Lesson 17 -------------------------------------------------------------------------------------
def check_noniid_shard_dataset(fn: Callable[..., Any]) -> str:
    """Dirichlet label skew per class, floor cuts of the cumulative shares, redraws until no shard is empty."""
    # the last config needs 75 deals (more than 10, fewer than the contract's 100) before no worker is empty
    configs = [(60, 3, 4, 0.1), (60, 3, 4, 100.0), (40, 5, 2, 1.0), (30, 3, 1, 0.5), (50, 4, 5, 0.3), (24, 2, 3, 0.05),
               (30, 2, 6, 0.05)]

    def case(i: int, n: int, C: int, k: int, alpha: float) -> Callable[[], Args]:
        return lambda: ((*_data(n, 3, C, 310 + i), k, rng_for(i, 311), alpha), {})

    cases = [(f"n={n}, {C} classes, num_workers={k}, alpha={a}", case(i, n, C, k, a))
             for i, (n, C, k, a) in enumerate(configs)]
    cases[-1] = (cases[-1][0] + " (75 deals before none is empty)", cases[-1][1])

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        _shards_compare(label, got, expected[0], *inputs[0][:2])
        _check_rng(label, inputs[0][3], expected[1], "2C draws per deal (a permutation and a Dirichlet per class), "
                   "even for one worker")

    X, y = _data(12, 3, 3, 2)
    invalid = [("alpha = 0", BAD, "alpha", _args(X, y, 2, rng_for(0, 1), 0.0)),
               ("alpha = -1", BAD, "alpha", _args(X, y, 2, rng_for(0, 1), -1.0)),
               ("alpha = True", BAD, "alpha", _args(X, y, 2, rng_for(0, 1), True)),
               ("alpha = inf", BAD, "alpha", _args(X, y, 2, rng_for(0, 1), math.inf)),
               ("alpha = nan", BAD, "alpha", _args(X, y, 2, rng_for(0, 1), math.nan)),
               ("num_workers = 0", BAD, "num_workers", _args(X, y, 0, rng_for(0, 1), 0.5)),
               ("num_workers = 13 > 12 examples", BAD, "num_workers", _args(X, y, 13, rng_for(0, 1), 0.5)),
               ("y with 11 labels for 12 rows", BAD, "y", _args(X, y[:11], 2, rng_for(0, 1), 0.5)),
               ("rng = 3", BAD, "rng", _args(X, y, 2, 3, 0.5))]
    invalid += _dataset_invalid(X, y, lambda X_, y_: (X_, y_, 2, rng_for(0, 1), 0.5), typed=False)
    # with this generator the first deal that leaves no worker empty is the 136th: the contract's 100 deals
    # all fail, so the call must raise (naming alpha) rather than deal on
    X30, y30 = _data(30, 3, 2, 2)
    invalid.append(("n=30, 2 classes, num_workers=6, alpha=0.05: 100 deals all leave a worker empty (the 136th "
                    "would not)", VE, "alpha", _args(X30, y30, 6, rng_for(1, 317), 0.05)))
    return run_cases("noniid_shard_dataset", fn, _rng_after(ref_shard.noniid_shard_dataset, 3), cases, compare,
                     invalid, mutable=(3,), compare_with_inputs=True, unchanged=assert_unchanged)


# --- Lesson 18 -------------------------------------------------------------------------------------
def check_sample_worker_batch(fn: Callable[..., Any]) -> str:
    """``rng.integers(0, n_k, batch_size)`` rows of X and the same rows of y, even past the shard's size."""
    def case(i: int, n: int, b: int) -> Callable[[], Args]:
        return lambda: ((_data(n, 4, 3, 320 + i), b, rng_for(i, 321)), {})

    sizes = [(10, 4), (3, 8), (1, 1), (50, 50)]
    cases = [(f"shard of {n}, batch_size={b}", case(i, n, b)) for i, (n, b) in enumerate(sizes)]
    cases += [("the shard as a list [X_k, y_k]", lambda: ((list(_data(9, 4, 3, 325)), 5, rng_for(5, 321)), {})),
              ("float64 X_k, int32 y_k (the batch keeps both dtypes)", lambda: (
                  (lambda X, y: ((X.astype(np.float64), y.astype(np.int32)), 6, rng_for(6, 321)))(*_data(8, 4, 3, 326)),
                  {}))]

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        X_b, y_b = assert_tuple(label, "the batch (X_b, y_b)", got, 2)
        # exact: the batch is rows of the shard picked by index, no arithmetic
        assert_array(label, "X_b", X_b, expected[0][0], exact=True)
        assert_array(label, "y_b", y_b, expected[0][1], exact=True)
        X_k, y_k = inputs[0][0]
        if np.shares_memory(X_b, X_k) or np.shares_memory(y_b, y_k):
            raise CheckFailure(f"[{label}] the batch shares memory with the shard: it must be a copy (fancy "
                               "indexing X_k[idx], y_k[idx]), so that a caller that normalises it in place cannot "
                               "change the shard")
        _check_rng(label, inputs[0][2], expected[1], "one rng.integers(0, n_k, size=batch_size)")

    shard = _data(6, 3, 3, 3)
    X, y = shard
    # the contract names the types: TypeError for a shard that is not a pair, a non-integer batch_size and a
    # non-Generator rng, ValueError for batch_size < 1 and a malformed shard (for a shard of the wrong dtype or
    # rank either type, as the package's validator and the lesson's solution raise TypeError there)
    invalid = [("batch_size = 0", VE, "batch_size", _args(shard, 0, rng_for(0, 1))),
               ("batch_size = True", TE, "batch_size", _args(shard, True, rng_for(0, 1))),
               ("shard is an array, not a pair", TE, "shard", _args(shard[0], 2, rng_for(0, 1))),
               ("float labels in the shard", BAD, "shard", _args((X, y.astype(np.float64)), 2, rng_for(0, 1))),
               ("1-D features in the shard", BAD, "shard", _args((X[:, 0].copy(), y), 2, rng_for(0, 1))),
               ("an empty shard", VE, "shard", _args((X[:0].copy(), y[:0].copy()), 2, rng_for(0, 1))),
               ("rng = None", TE, "rng", _args(shard, 2, None))]
    count = run_cases("sample_worker_batch", fn, _rng_after(ref_shard.sample_worker_batch, 2), cases, compare,
                      invalid, mutable=(2,), compare_with_inputs=True, unchanged=assert_unchanged, count_only=True)
    label = "the global np.random state is left alone"
    saved = np.random.get_state()
    try:
        np.random.seed(20240611)
        np.random.random(3)
        before = np.random.get_state()
        with quiet():
            call(fn, label, _data(10, 4, 3, 327), 4, rng_for(7, 321))
        after = np.random.get_state()
    finally:
        np.random.set_state(saved)
    if before[0] != after[0] or not np.array_equal(before[1], after[1]) or before[2:] != after[2:]:
        raise CheckFailure(f"[{label}] the call changed the global np.random state (np.random.seed, np.random.randint, "
                           "...): the batch comes from rng alone, and the global generator must not be touched")
    return passed("sample_worker_batch", count + 1)


# --- Lesson 19 -------------------------------------------------------------------------------------
def check_local_train_step(fn: Callable[..., Any]) -> str:
    """Forward, loss before the step, backward, the hp's optimizer; from fresh and mid-run states."""

    def case(i: int, sizes: list[int], n: int, optimizer: str, warm: int) -> Callable[[], Args]:
        params = init_model_params(sizes, rng_for(i, 330))
        shard = _data(20, sizes[0], sizes[-1], 331 + i)
        state = _trained_state(params, shard, warm, i) if warm else init_adamw_state(params)
        return _args(params, state, (shard[0][:n], shard[1][:n]), _hp(optimizer))

    cases = [("AdamW, fresh state", case(0, [4, 8, 3], 5, "adamw", 0)),
             ("AdamW, state after 3 steps", case(1, [3, 6, 6, 2], 6, "adamw", 3)),
             ("SGD, fresh state", case(2, [4, 8, 3], 4, "sgd", 0)), ("batch of 1", case(3, [2, 3], 1, "adamw", 2))]

    def compare(label: str, got: Any, expected: tuple) -> None:
        new_params, new_state, loss = assert_tuple(label, "the result (new_params, new_opt_state, loss)", got, 3)
        # one step from the same float32 inputs: the harness's float32 default (rtol 2e-5, atol 2e-6: 2·γ_170) covers
        # the forward, backward and update summed in another order (a few eps = 1.2e-7 per entry)
        assert_array_dict(label, "new_params", new_params, expected[0])
        # the loss is a mean of ≤ 6 log-sum-exps of float32 logits of size O(1): a float32 evaluation in another
        # order differs by a few eps (1.2e-7) relative, so rtol 1e-5 keeps a factor of ~30; atol 1e-7 for a loss
        # near 0
        assert_scalar(label, "loss", loss, expected[2], rtol=1e-5, atol=1e-7)
        _exact_type(label, "loss", loss, float)
        if not isinstance(new_state, Mapping) or new_state.get("step") != expected[1]["step"]:
            raise CheckFailure(f"[{label}] new_opt_state['step'] must be {expected[1]['step']}")
        assert_array_dict(label, "new_opt_state['m']", new_state["m"], expected[1]["m"])
        assert_array_dict(label, "new_opt_state['v']", new_state["v"], expected[1]["v"])

    p = init_model_params([3, 4, 2], rng_for(0, 1))
    s, batch = init_adamw_state(p), _data(4, 3, 2, 4)
    invalid = [("hp['optimizer'] = 'adam'", BAD, "optimizer", _args(p, s, batch, _hp("adam"))),
               ("hp['lr'] = 0", BAD, "lr", _args(p, s, batch, _hp(lr=0.0))),
               ("hp with an extra key 'momentum'", BAD, "momentum", _args(p, s, batch, _hp(momentum=0.9))),
               ("a label out of range", BAD, "batch", _args(p, s, (batch[0], np.array([0, 1, 2, 0])), _hp())),
               ("a label -1", BAD, "batch", _args(p, s, (batch[0], np.array([0, 1, -1, 0])), _hp()))]
    # every key is validated whatever the optimizer: SGD does not use the betas or eps, but they are refused
    invalid += [(f"SGD with hp[{key!r}] = {value!r}", BAD, key, _args(p, s, batch, _hp("sgd", **{key: value})))
                for key, value in (("beta1", 1.0), ("eps", 0.0), ("weight_decay", -0.1), ("batch_size", 0))]
    no_eps = {key: value for key, value in _hp().items() if key != "eps"}
    misshaped = {"step": 0, "m": {**s["m"], "W0": np.zeros((1, 4), np.float32)},
                 "v": {**s["v"], "W0": np.zeros((1, 4), np.float32)}}
    invalid += [("hp is a list of the keys", BAD, "hp", _args(p, s, batch, list(_hp()))),
                ("hp without 'eps'", BAD, "eps", _args(p, s, batch, no_eps)),
                ("opt_state without 'v'", BAD, "opt_state", _args(p, {"step": 0, "m": s["m"]}, batch, _hp())),
                ("opt_state['m'] and ['v'] with W0 of shape (1, 4) for (3, 4) (it would broadcast)", BAD, "opt_state",
                 _args(p, misshaped, batch, _hp())),
                ("batch is X_b alone, not a pair", BAD, "batch", _args(p, s, batch[0], _hp()))]
    count = run_cases("local_train_step", fn, ref_shard.local_train_step, cases, compare, invalid,
                      unchanged=assert_unchanged, count_only=True)
    # a batch of the wrong width: the contract says the error names batch, but model_forward (the step's first
    # call) already refuses it naming X, so either is accepted; an anonymous matmul error is not
    with quiet():
        expect_raises_naming_any(fn, "batch with 4 features for W0's 3", BAD, ("batch", "X"), p, s,
                                 (np.ones((4, 4), np.float32), batch[1]), _hp())
    return passed("local_train_step", count + 1)


# --- Lesson 20 -------------------------------------------------------------------------------------
def check_run_inner_steps(fn: Callable[..., Any]) -> str:
    """H steps, a fresh batch each (``sample_worker_batch`` with this worker's rng), state carried through."""

    def case(i: int, H: int, optimizer: str, warm: int) -> Callable[[], Args]:
        params = init_model_params([4, 8, 3], rng_for(i, 340))
        shard = _data(30, 4, 3, 341 + i)
        state = _trained_state(params, shard, warm, i) if warm else init_adamw_state(params)
        return _args(params, state, shard, H, _hp(optimizer), rng_for(i, 342))

    cases = [("H = 1", case(0, 1, "adamw", 0)), ("H = 4", case(1, 4, "adamw", 0)),
             ("H = 6 from a state after 2 steps", case(2, 6, "adamw", 2)), ("H = 5, SGD", case(3, 5, "sgd", 0)),
             ("batch_size 12 for a shard of 8 rows (B > n_k is allowed)", lambda: (
                 lambda params: ((params, init_adamw_state(params), _data(8, 4, 3, 345), 3, _hp(batch_size=12),
                                  rng_for(4, 342)), {}))(init_model_params([4, 8, 3], rng_for(4, 340))))]

    def compare(label: str, got: Any, expected: tuple, inputs: Args) -> None:
        (ref_params, ref_state, ref_losses), rng_state = expected
        params, state, losses = assert_tuple(label, "the result (params_H, opt_state_H, losses)", got, 3)
        assert_array_dict(label, "params_H", params, ref_params, **TOL)
        assert_array(label, "losses (an (H,) float64 array)", losses, ref_losses, **TOL)
        if not isinstance(state, Mapping) or state.get("step") != ref_state["step"]:
            raise CheckFailure(f"[{label}] opt_state_H['step'] must be {ref_state['step']} (one per inner step)")
        assert_array_dict(label, "opt_state_H['m']", state["m"], ref_state["m"], **TOL)
        assert_array_dict(label, "opt_state_H['v']", state["v"], ref_state["v"], **TOL)
        _check_rng(label, inputs[0][5], rng_state, "H draws of hp['batch_size'] indices")

    p = init_model_params([3, 4, 2], rng_for(0, 1))
    s, shard = init_adamw_state(p), _data(8, 3, 2, 5)
    # the contract names the types for H: TypeError when not an integer, ValueError below 1
    invalid = [("H = 0", VE, "H", _args(p, s, shard, 0, _hp(), rng_for(0, 1))),
               ("H = 2.5", TE, "H", _args(p, s, shard, 2.5, _hp(), rng_for(0, 1))),
               ("H = True", TE, "H", _args(p, s, shard, True, _hp(), rng_for(0, 1))),
               ("rng = None", BAD, "rng", _args(p, s, shard, 2, _hp(), None)),
               ("hp without 'batch_size'", BAD, "batch_size",
                _args(p, s, shard, 2, {k: v for k, v in _hp().items() if k != "batch_size"}, rng_for(0, 1))),
               ("shard labels outside the model's 2 classes", BAD, "shard",
                _args(p, s, (shard[0], np.full(8, 2)), 2, _hp(), rng_for(0, 1)))]
    return run_cases("run_inner_steps", fn, _rng_after(ref_shard.run_inner_steps, 5), cases, compare, invalid,
                     mutable=(5,), compare_with_inputs=True, unchanged=assert_unchanged)


# --- Lesson 25 -------------------------------------------------------------------------------------
def _round_args(i: int, k: int, H: int, optimizer: str = "adamw", outer_lr: float = 0.7, outer_momentum: float = 0.9,
                noniid: bool = False) -> Callable[[], Args]:
    X, y = _data(24 * k, 4, 3, 350 + i)
    shards = (ref_shard.noniid_shard_dataset(X, y, k, rng_for(i, 351), 0.3) if noniid
              else ref_shard.iid_shard_dataset(X, y, k, rng_for(i, 351)))
    params = init_model_params([4, 8, 3], rng_for(i, 352))
    states = [_trained_state(params, s, j + 1, 10 * i + j) for j, s in enumerate(shards)]  # all different
    outer = init_outer_optimizer(params)
    outer = {"step": 2, "momentum_buffer": {key: v + 0.01 for key, v in outer["momentum_buffer"].items()}}
    rngs = [rng_for(100 * i + j, 353) for j in range(k)]
    return _args(params, outer, states, shards, rngs, H=H, inner_hp=_hp(optimizer), outer_lr=outer_lr,
                 outer_momentum=outer_momentum)


def check_diloco_round(fn: Callable[..., Any]) -> str:
    """New global params, outer state, per-worker states (not averaged, not reset), losses, bytes per worker."""
    cases = [("3 workers, H = 3, outer lr 0.7, momentum 0.9", _round_args(0, 3, 3)),
             ("1 worker, H = 2", _round_args(1, 1, 2)),
             ("2 workers, inner SGD, outer lr 1, momentum 0 (FedAvg)", _round_args(2, 2, 2, "sgd", 1.0, 0.0)),
             ("4 non-IID workers, H = 1", _round_args(3, 4, 1, noniid=True))]

    def reference(*args: Any, **kwargs: Any) -> tuple[tuple, list[dict]]:
        """The reference round, and the state of each worker's generator after it."""
        return ref_loop.diloco_round(*args, **kwargs), [copy.deepcopy(rng.bit_generator.state) for rng in args[4]]

    def compare(label: str, got: Any, expected_and_rngs: tuple, inputs: Args) -> None:
        expected, rng_states = expected_and_rngs
        new_global, outer, states, info = assert_tuple(label, "the result (new_global, outer_state, worker_states, info)",
                                                       got, 4)
        assert_array_dict(label, "new global params", new_global, expected[0], **TOL)
        if not isinstance(outer, Mapping) or outer.get("step") != expected[1]["step"]:
            raise CheckFailure(f"[{label}] outer_state['step'] must be {expected[1]['step']}")
        assert_array_dict(label, "outer_state['momentum_buffer']", outer["momentum_buffer"],
                          expected[1]["momentum_buffer"], **TOL)
        if not isinstance(states, list) or len(states) != len(expected[2]):
            raise CheckFailure(f"[{label}] worker_states must be a list of {len(expected[2])} AdamW states")
        for j, (s, e) in enumerate(zip(states, expected[2])):
            if not isinstance(s, Mapping) or s.get("step") != e["step"]:
                raise CheckFailure(f"[{label}] worker_states[{j}]['step'] must be {e['step']}: each worker keeps its "
                                   "own optimizer state across rounds (never averaged, never reset)")
            assert_array_dict(label, f"worker_states[{j}]['m']", s["m"], e["m"], **TOL)
            assert_array_dict(label, f"worker_states[{j}]['v']", s["v"], e["v"], **TOL)
        if not isinstance(info, Mapping) or set(info) != set(expected[3]):
            raise CheckFailure(f"[{label}] info must be a dict with keys {sorted(expected[3])}")
        assert_scalar(label, "info['train_loss']", info["train_loss"], expected[3]["train_loss"], **TOL)
        _exact_type(label, "info['train_loss']", info["train_loss"], float)
        assert_array(label, "info['worker_losses']", info["worker_losses"], expected[3]["worker_losses"], **TOL)
        if info["bytes_communicated"] != expected[3]["bytes_communicated"]:
            raise CheckFailure(f"[{label}] info['bytes_communicated'] is {info['bytes_communicated']!r}, expected "
                               f"{expected[3]['bytes_communicated']} (every worker's parameters, counted per worker)")
        _exact_type(label, "info['bytes_communicated']", info["bytes_communicated"], int)
        for j, (rng, state) in enumerate(zip(inputs[0][4], rng_states)):
            _check_rng(label, rng, state, f"worker {j}'s H minibatch draws (rngs[{j}] is worker {j}'s own generator, "
                       "used in place)")

    def bad(where: int | str, change: Callable[[Any], Any]) -> Callable[[], Args]:
        """Valid round arguments with one positional (index) or keyword (name) argument changed."""
        def make() -> Args:
            args, kwargs = _round_args(0, 2, 2)()
            args = list(args)
            if isinstance(where, str):
                kwargs[where] = change(kwargs[where])
            else:
                args[where] = change(args[where])
            return tuple(args), kwargs
        return make

    def no_workers() -> Args:
        args, kwargs = _round_args(0, 2, 2)()
        return (args[0], args[1], [], [], []), kwargs

    # the contract names the types: TypeError for shards that are not a non-empty list, ValueError for
    # worker_states or rngs of the wrong length; the scalars' errors only have to name them
    invalid = [("H = 0", BAD, "H", bad("H", lambda _: 0)),
               ("shards = [] (no worker)", TE, "shards", no_workers),
               ("one rng for two workers", VE, "rngs", bad(4, lambda rngs: rngs[:1])),
               ("three worker states for two shards", VE, "worker_states", bad(2, lambda s: [s[0], s[1], s[0]])),
               ("outer_momentum = 1", BAD, "momentum", bad("outer_momentum", lambda _: 1.0))]
    # worker_states (a list) must come back as it was: the new states are returned, not written into it
    message = run_cases("diloco_round", fn, reference, cases, compare, invalid, mutable=(4,),
                        compare_with_inputs=True, unchanged=assert_unchanged)
    for name, value in (("outer_lr", 0.0), ("outer_momentum", 1.0)):
        label = f"{name} = {value} is refused before any worker trains"
        args, kwargs = bad(name, lambda _, v=value: v)()
        before = [rng.bit_generator.state for rng in args[4]]
        with quiet():
            expect_raises(fn, label, BAD, name.removeprefix("outer_") if name == "outer_momentum" else name,
                          *args, **kwargs)
        if [rng.bit_generator.state for rng in args[4]] != before:
            raise CheckFailure(f"[{label}] the workers' generators were advanced: validate outer_lr and "
                               "outer_momentum before any worker trains (a bad value must not cost a round of compute)")
    return message


# --- Lessons 26 and 27 -----------------------------------------------------------------------------
SMALL = {"n_examples": 120, "d_in": 4, "n_classes": 3, "hidden_sizes": (8,), "num_workers": 3, "inner_steps": 3,
         "rounds": 3, "batch_size": 8, "progress": False}
RUN_CONFIGS = [
    ("3 IID workers, H = 3, 3 rounds", SMALL),
    ("2 non-IID workers (alpha 0.3)", {**SMALL, "sharding": "noniid", "dirichlet_alpha": 0.3, "num_workers": 2}),
    ("1 worker, H = 2, 2 rounds", {**SMALL, "num_workers": 1, "inner_steps": 2, "rounds": 2}),
    ("inner SGD, outer lr 1, momentum 0", {**SMALL, "inner_optimizer": "sgd", "inner_lr": 0.1, "outer_lr": 1.0,
                                           "outer_momentum": 0.0, "seed": 5}),
    ("a DiLoCoConfig, two hidden layers", ref_loop.DiLoCoConfig(**{**SMALL, "hidden_sizes": (6, 5), "data_seed": 3})),
]
# the contract names the types of two refusals: ValueError for an unknown key, TypeError for a config of the
# wrong type; the field checks only have to name the field
BAD_CONFIGS = [
    ("inner_steps (H) = 0", BAD, "inner_steps", {**SMALL, "inner_steps": 0}),
    ("num_workers = 0", BAD, "num_workers", {**SMALL, "num_workers": 0}),
    ("num_workers = 500, more than the examples", BAD, "num_workers", {**SMALL, "num_workers": 500}),
    ("non-IID with dirichlet_alpha = 0", BAD, "dirichlet_alpha",
     {**SMALL, "sharding": "noniid", "dirichlet_alpha": 0.0}),
    ("an unknown key 'H'", VE, "H", {**SMALL, "H": 4}),
    ("config = 5", TE, "config", 5),
]


def _compare_record(label: str, got: Any, expected: dict) -> None:
    if not isinstance(got, Mapping) or set(got) != set(expected):
        raise CheckFailure(f"[{label}] the run record must be a dict with keys {sorted(expected)}, got "
                           f"{sorted(map(str, got)) if isinstance(got, Mapping) else type(got).__name__}")
    for key in ("algorithm", "config", "seeds", "shard_sizes", "examples_processed"):
        if got[key] != expected[key]:
            raise CheckFailure(f"[{label}] record[{key!r}] is {got[key]!r}, expected {expected[key]!r}")
    if type(got["shard_sizes"]) is not list or any(type(n) is not int for n in got["shard_sizes"]):
        raise CheckFailure(f"[{label}] record['shard_sizes'] must be a list of Python ints, got "
                           f"{[type(n).__name__ for n in got['shard_sizes']]} in a {type(got['shard_sizes']).__name__}")
    _exact_type(label, "record['examples_processed']", got["examples_processed"], int)
    for key in ("heldout_loss", "heldout_accuracy"):
        assert_scalar(label, f"record['initial'][{key!r}]", got["initial"][key], expected["initial"][key], **TOL)
    hist, want = got["history"], expected["history"]
    if not isinstance(hist, list) or len(hist) != len(want):
        raise CheckFailure(f"[{label}] record['history'] must be a list of {len(want)} rounds")
    for r, (h, e) in enumerate(zip(hist, want)):
        if not isinstance(h, Mapping) or set(h) != set(e):
            raise CheckFailure(f"[{label}] history[{r}] must have the keys {sorted(e)}")
        for key in ("round", "steps", "bytes_communicated", "cumulative_bytes"):
            if h[key] != e[key]:
                raise CheckFailure(f"[{label}] history[{r}][{key!r}] is {h[key]!r}, expected {e[key]!r}")
        for key in ("train_loss", "heldout_loss", "heldout_accuracy"):
            assert_scalar(label, f"history[{r}][{key!r}]", h[key], e[key], **TOL)
    assert_array_dict(label, "record['final_params']", got["final_params"], expected["final_params"], **TOL)
    w = got["wall_time_s"]
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
        raise CheckFailure(f"[{label}] record['wall_time_s'] must be the run's seconds (a number >= 0), got {w!r}")


def _check_trainer(name: str, fn: Callable[..., Any], reference: Callable[..., Any], extra: list = ()) -> str:
    cases = [(label, _args(config)) for label, config in [*RUN_CONFIGS, *extra]]
    invalid = [(label, errors, arg, _args(config)) for label, errors, arg, config in BAD_CONFIGS]
    # a dict config is only read: filling the defaults into it is a mutation
    return run_cases(name, fn, reference, cases, _compare_record, invalid, unchanged=assert_unchanged)


def check_train_diloco(fn: Callable[..., Any]) -> str:
    """The whole run record of small DiLoCo runs: config, seeds, every round's metrics and bytes, final params."""
    return _check_trainer("train_diloco", fn, ref_loop.train_diloco)


def check_train_synchronous_baseline(fn: Callable[..., Any]) -> str:
    """The baseline's run record on the same configs: same batches, one all-reduce per step, AdamW on the mean."""
    # inner SGD is not scale-invariant as AdamW is: an outer lr wrongly applied to the gradient shows
    unused = ("inner SGD, outer lr 0.5 and momentum 0.3 (unused by the baseline)",
              {**SMALL, "inner_optimizer": "sgd", "inner_lr": 0.1, "outer_lr": 0.5, "outer_momentum": 0.3})
    return _check_trainer("train_synchronous_baseline", fn, ref_loop.train_synchronous_baseline, [unused])


# --- Lessons 28 and 29 -----------------------------------------------------------------------------
def _eval_cases() -> list[tuple[str, Callable[[], Args]]]:
    def case(i: int, sizes: list[int], n: int, scale: float = 1.0, dtype: type = np.float32) -> Callable[[], Args]:
        params = {k: (v * scale).astype(dtype) for k, v in init_model_params(sizes, rng_for(i, 360)).items()}
        X, y = _data(n, sizes[0], sizes[-1], 361 + i)
        return _args(params, X.astype(dtype), y)

    zero = {k: np.zeros_like(v) for k, v in init_model_params([4, 5, 3], rng_for(0, 362)).items()}
    offset = init_model_params([4, 6, 3], rng_for(4, 360))
    offset["b1"] = offset["b1"] + np.float32(1e5)
    return [("8 examples, 3 classes", case(0, [4, 8, 3], 8)), ("one example", case(1, [3, 5, 2], 1)),
            ("weights x300: logits near 1e5", case(2, [4, 6, 3], 10, 300.0)),
            ("two hidden layers, float64", case(3, [3, 6, 6, 4], 12, dtype=np.float64)),
            ("all-zero parameters (every logit tied), unbalanced labels",
             _args(zero, _data(9, 4, 3, 363)[0], np.array([0, 0, 0, 0, 1, 2, 1, 0, 2]))),
            ("50 examples (more than one training batch: every example counts)", case(5, [4, 8, 3], 50)),
            # every logit is 1e5 + O(1): a loss of O(1) computed as (1e5 + log s) - z_y in float32 loses
            # ulp(1e5) ≈ 0.008 per example; shifted logits and a float64 mean keep it exact to ~1e-7
            ("a bias of 1e5 on every class: logits 1e5 + O(1), losses O(1)", _args(offset, *_data(12, 4, 3, 364)))]


def _eval_invalid() -> list:
    p = init_model_params([3, 4, 2], rng_for(0, 1))
    X, y = _data(5, 3, 2, 6)
    return [("a label equal to the number of classes", (ValueError,), "y", _args(p, X, np.array([0, 1, 2, 0, 1]))),
            ("a label -1 (NumPy would read it as the last class)", (ValueError,), "y",
             _args(p, X, np.array([0, 1, -1, 0, 1]))),
            ("float labels", BAD, "y", _args(p, X, y.astype(np.float64))),
            ("X with 4 features for W0's 3", BAD, "X", _args(p, np.ones((5, 4), np.float32), y)),
            ("an empty X (0 examples)", BAD, "X", _args(p, X[:0].copy(), y[:0].copy())),
            ("integer X", BAD, "X", _args(p, X.astype(np.int64), y)),
            ("4 labels for 5 examples", BAD, "y", _args(p, X, y[:4]))]


def check_evaluate_heldout_loss(fn: Callable[..., Any]) -> str:
    """Mean cross-entropy of the model on given data, finite for logits near 1e5."""
    def compare(label: str, got: Any, expected: float) -> None:
        # the logits are model_forward's (float32, or float64 for float64 parameters) whatever the solution;
        # what differs is the log-sum-exp and the mean of ≤ 50 terms: in float64 they agree to ~1e-14, and a
        # float32 log-sum-exp of *shifted* logits (each term O(1), a few eps = 1.2e-7 relative) to ~1e-6, so
        # rtol 1e-5 accepts both; atol 1e-6 for a loss near 0. It still refuses the unshifted float32 form,
        # which loses ulp(1e5) ≈ 0.008 per example on the 1e5-bias case.
        assert_scalar(label, "held-out loss", got, expected, rtol=1e-5, atol=1e-6)
        _exact_type(label, "the held-out loss", got, float)

    return run_cases("evaluate_heldout_loss", fn, ref_eval.evaluate_heldout_loss, _eval_cases(), compare, _eval_invalid())


def check_classification_accuracy(fn: Callable[..., Any]) -> str:
    """Fraction whose largest logit is the label (ties to the lowest index), a float in [0, 1]."""
    def compare(label: str, got: Any, expected: float) -> None:
        # a fraction k/n with n ≤ 50: one float64 division of integers (count / n, np.mean of booleans, a
        # pairwise sum of 0/1) gives the same correctly rounded double; atol 1e-12 is ~1e4 ulp of slack and still
        # refuses a float32 quotient (off by up to 3e-8)
        assert_scalar(label, "accuracy", got, expected, rtol=0.0, atol=1e-12)
        _exact_type(label, "the accuracy", got, float)

    return run_cases("classification_accuracy", fn, ref_eval.classification_accuracy, _eval_cases(), compare,
                     _eval_invalid())


# --- Lesson 30 -------------------------------------------------------------------------------------
def _history(losses: list[float], accs: list[float], steps_per_round: int, bytes_per_round: int) -> list[dict]:
    """A run record's history, with Python floats and ints as the trainers write them."""
    return [{"round": r + 1, "steps": (r + 1) * steps_per_round, "train_loss": float(l) + 0.1, "heldout_loss": float(l),
             "heldout_accuracy": float(a), "bytes_communicated": bytes_per_round,
             "cumulative_bytes": (r + 1) * bytes_per_round}
            for r, (l, a) in enumerate(zip(losses, accs))]


def check_communication_savings(fn: Callable[..., Any]) -> str:
    """Target = the worse of the two bests; first round reaching it; bytes ratio there; bytes per step ratio = H."""
    P = 4 * 1000 * 4  # 4 workers, 1000 float32 parameters
    diloco = _history([2.0, 1.1, 0.7, 0.55, 0.5, 0.52], [0.3, 0.6, 0.75, 0.8, 0.82, 0.81], 10, P)
    sync = _history(list(np.linspace(2.0, 0.45, 30)), list(np.linspace(0.3, 0.85, 30)), 2, 2 * P)
    better = _history([1.5, 0.6, 0.4, 0.3, 0.35, 0.38], [0.4, 0.8, 0.9, 0.92, 0.91, 0.9], 10, P)
    bumpy = _history([1.0, 0.6, 0.9, 0.58, 0.5, 0.7], [0.5, 0.8, 0.6, 0.79, 0.83, 0.7], 5, P)
    # H = 15 with both runs logged every 15 steps: (bytes / steps) / (bytes / steps) as two quotients gives
    # 14.999999999999998; one division of integer products gives exactly 15.0
    h15 = _history([2.0, 1.0, 0.6, 0.5, 0.45, 0.44], [0.3, 0.6, 0.7, 0.8, 0.82, 0.83], 15, P)
    s15 = _history([1.9, 0.9, 0.55, 0.47, 0.46, 0.42], [0.35, 0.62, 0.72, 0.8, 0.81, 0.85], 15, 15 * P)
    # DiLoCo's workers double after round 3 (bytes per round 16000 -> 32000) and it matches at round 5: the bytes
    # there are its cumulative_bytes (not round × bytes_communicated, nor rebuilt from steps), and the bytes per
    # step come from the last entries (the first ones give 10, the last 6.67)
    grown = _history([2.0, 1.2, 0.9, 0.7, 0.5, 0.52], [0.3, 0.5, 0.6, 0.7, 0.82, 0.8], 10, P)
    for r, e in enumerate(grown):
        e["bytes_communicated"] = P if r < 3 else 2 * P
        e["cumulative_bytes"] = sum(P if j < 3 else 2 * P for j in range(r + 1))
    cases = [("DiLoCo H = 10 vs a baseline logged every 2 steps", _args(diloco, sync)),
             ("the same, matched on accuracy", _args(diloco, sync, "heldout_accuracy")),
             ("DiLoCo better than the baseline", _args(better, sync)),
             ("a curve that goes back up", _args(bumpy, sync)), ("a curve that goes back up, accuracy",
                                                               _args(bumpy, sync, "heldout_accuracy")),
             ("histories as tuples", _args(tuple(diloco), tuple(sync))),
             ("H = 15: the bytes-per-step ratio is exactly 15.0", _args(h15, s15)),
             ("DiLoCo's worker count doubles after round 3 (bytes per round change)", _args(grown, sync))]
    types = {"metric": str, "target": float, "diloco_round": int, "sync_round": int, "diloco_bytes": int,
             "sync_bytes": int, "ratio": float, "bytes_per_step_ratio": float}

    def compare(label: str, got: Any, expected: dict) -> None:
        if not isinstance(got, Mapping) or set(got) != set(expected):
            raise CheckFailure(f"[{label}] must return a dict with keys {sorted(expected)}")
        for key, value in expected.items():
            if isinstance(value, str):
                if got[key] != value:
                    raise CheckFailure(f"[{label}] {key} is {got[key]!r}, expected {value!r}")
            else:
                # exact: the target is a history value, the ratios one correctly rounded division of integers
                assert_scalar(label, key, got[key], float(value), rtol=0.0, atol=0.0)
            _exact_type(label, key, got[key], types.get(key, type(value)))

    missing = [dict(e) for e in sync]
    del missing[17]["cumulative_bytes"]
    opening = [{**diloco[0], "round": 0, "steps": 0, "heldout_loss": 0.4, "bytes_communicated": 0,
                "cumulative_bytes": 0}, *diloco]
    # the contract names the types of the history refusals: TypeError for a history that is not a non-empty
    # list of dicts, ValueError for an entry without a key; the others only have to name the argument
    invalid = [("metric = 'accuracy'", BAD, "metric", _args(diloco, sync, "accuracy")),
               ("metric = 'train_loss' (a history key, but not a held-out metric)", BAD, "metric",
                _args(diloco, sync, "train_loss")),
               ("an empty DiLoCo history", TE, "diloco_history", _args([], sync)),
               ("a baseline history that is a dict (one entry, not a list of them)", TE, "sync_history",
                _args(diloco, dict(sync[0]))),
               ("a baseline round without 'cumulative_bytes'", VE, "sync_history",
                _args(diloco, [{k: v for k, v in e.items() if k != "cumulative_bytes"} for e in sync])),
               ("DiLoCo reaches the target at a logged round 0 with 0 steps and 0 bytes", BAD, "diloco_history",
                _args(opening, sync))]
    # the histories are only read: an entry given a new key or a new value is a mutation
    count = run_cases("communication_savings", fn, ref_eval.communication_savings, cases, compare, invalid,
                      count_only=True, unchanged=assert_unchanged)
    label = "sync_history[17] without 'cumulative_bytes'"
    with quiet():
        message = _raised(fn, label, VE, diloco, missing)
    if not ("sync_history" in message and re.search(r"(?<!\d)17(?!\d)", message)):
        raise CheckFailure(f"[{label}] raised as it should, but its message {message!r} must name the history "
                           "(sync_history) and the entry's index (17)")
    return passed("communication_savings", count + 1)


def _raised(fn: Callable[..., Any], label: str, errors: tuple[type[BaseException], ...], *args: Any) -> str:
    """The message of the error (one of ``errors``) that ``fn(*args)`` must raise."""
    names = " or ".join(e.__name__ for e in errors)
    try:
        fn(*copy.deepcopy(args))
    except NotImplementedError:
        raise CheckFailure(f"[{label}] the function is not implemented yet (it raised NotImplementedError)") from None
    except errors as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001
        raise CheckFailure(f"[{label}] must raise {names}, but raised {type(exc).__name__}: {exc}") from None
    raise CheckFailure(f"[{label}] must raise {names} for this invalid input, but returned normally")
