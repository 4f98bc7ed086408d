"""Checks behind the hidden tests of Module 3, Part 6 (lessons 21–26: experiments and analysis).

Every experiment runs on a tiny config (90 examples, 5 clients, 3–4 rounds) so that a check takes
a fraction of a second; the records must equal the reference's, round by round and seed by seed.
The gap check needs no training at all: it works on hand-made histories.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainsys.fedavg import experiments as ref
from trainsys.fedavg.server import FedAvgConfig
from trainsys.grading._harness import CheckFailure, passed, quiet
from trainsys.grading._torch_harness import BAD, assert_equal, assert_real, fixed, run_torch_cases
from trainsys.grading.fedavg_server import compare_records, inputs_kept, unseeded_global_rng

__all__ = [
    "check_train_centralized_baseline",
    "check_run_fedavg_iid",
    "check_run_fedavg_non_iid",
    "check_compute_non_iid_gap",
    "check_rounds_to_target_vs_local_epochs",
    "check_accuracy_vs_client_fraction",
]

CLAUSES = {
    "train_centralized_baseline": {
        "mutation": ("tiny config",),
        "failure modes": ("config {'batch_size': 0}", "config {'colour': 2}"),
        "metric that proves it correct": ("tiny config", "momentum 0.5, seed 3", "config epochs=3"),
    },
    "run_fedavg_iid": {
        "mutation": ("a shards config made IID",),
        "failure modes": ("config {'colour': 2}",),
        "metric that proves it correct": ("a shards config made IID", "Dirichlet, shards_per_client=3"),
    },
    "run_fedavg_non_iid": {
        "mutation": ("an IID config made non-IID",),
        "failure modes": ("config {'colour': 2}",),
        "metric that proves it correct": ("an IID config made non-IID", "Dirichlet alpha=0.3 kept",
                                          "IID made shards with shards_per_client=3"),
    },
    "compute_non_iid_gap": {
        "sign": ("one history each",),
        "mutation": ("one history each",),
        "failure modes": ("3 rounds vs 2 rounds", "iid_history's round 2 has no test_accuracy",
                          "iid_history holds runs of 2 and 3 rounds", "iid_history = [] (empty)",
                          "iid_history = [{'history': []}]"),
        "metric that proves it correct": ("one history each", "three seeds of four rounds"),
    },
    "rounds_to_target_vs_local_epochs": {
        "mutation": ("E in [1, 3]",),
        "failure modes": ("epochs_list = [1, 1]", "epochs_list = [True]", "target = True", "target = NaN",
                          "seeds = [-1]", "seeds = [1, 1]", "epochs_list as a tuple"),
        "metric that proves it correct": ("E in [1, 3]", "non-IID shards, E in [2, 1]"),
    },
    "accuracy_vs_client_fraction": {
        "mutation": ("fractions [0.2, 1]",),
        "failure modes": ("fractions = [0.5, 0.5]", "fractions = [True]", "fractions = [NaN]", "seeds = [-1]"),
        "metric that proves it correct": ("fractions [0.2, 1]", "non-IID, fractions [0.6, 0.1, 0.4]",
                                          "25 clients, fraction 0.28"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

TINY = {"num_examples": 90, "d_in": 3, "n_classes": 3, "d_hidden": 6, "num_clients": 5, "fraction": 0.4,
        "epochs": 1, "batch_size": 5, "rounds": 3, "lr": 0.2}
FEDAVG_KEYS = ("selected", "local_steps", "bytes_up", "bytes_down")


def _record_compare(history_keys: tuple[str, ...], cases: list) -> Callable[[str, Any, dict, Any], None]:
    kept = inputs_kept(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        kept(label, inputs)
        compare_records(label, got, expected, history_keys)
    return compare


def _bad_configs(*names: str) -> list:
    changes = {"lr": {"lr": -1.0}, "batch_size": {"batch_size": 0}, "fraction": {"fraction": 0.0},
               "epochs": {"epochs": 0}, "num_clients": {"num_clients": 0}, "colour": {"colour": 2}}
    return [(f"config {changes[n]}", BAD, n, fixed({**TINY, **changes[n]})) for n in names]


# --- Lesson 21 -------------------------------------------------------------------------------------
def check_train_centralized_baseline(fn: Callable[..., Any]) -> str:
    """One epoch over the whole training set per round, the same seeds as FedAvg, nothing communicated."""
    cases = [("tiny config", fixed(TINY)), ("momentum 0.5, seed 3", fixed({**TINY, "momentum": 0.5, "seed": 3})),
             ("B = None (full batch), FedAvgConfig", fixed(FedAvgConfig(**{**TINY, "batch_size": None}))),
             ("config epochs=3 (a federation field: ignored, one epoch per round)", fixed({**TINY, "epochs": 3}))]
    with unseeded_global_rng():
        return run_torch_cases("train_centralized_baseline", fn, ref.train_centralized_baseline, cases,
                               _record_compare((), cases), _bad_configs("lr", "batch_size", "colour"),
                               compare_with_inputs=True)


# --- Lesson 22 -------------------------------------------------------------------------------------
def check_run_fedavg_iid(fn: Callable[..., Any]) -> str:
    """run_fedavg with partition="iid" and every other field of the given config kept."""
    cases = [("a shards config made IID", fixed({**TINY, "partition": "shards"})),
             ("IID config, seed 2, E=2", fixed({**TINY, "seed": 2, "epochs": 2})),
             ("a Dirichlet FedAvgConfig made IID", fixed(FedAvgConfig(**{**TINY, "partition": "dirichlet"}))),
             ("Dirichlet, shards_per_client=3, alpha=0.7, progress=True: all kept in the record's config",
              fixed({**TINY, "partition": "dirichlet", "shards_per_client": 3, "alpha": 0.7, "progress": True,
                     "rounds": 2}))]
    with unseeded_global_rng():
        return run_torch_cases("run_fedavg_iid", fn, ref.run_fedavg_iid, cases, _record_compare(FEDAVG_KEYS, cases),
                               _bad_configs("fraction", "num_clients", "colour"), compare_with_inputs=True)


# --- Lesson 23 -------------------------------------------------------------------------------------
def check_run_fedavg_non_iid(fn: Callable[..., Any]) -> str:
    """IID becomes the paper's shards; a shards or Dirichlet config is kept as it is."""
    cases = [("an IID config made non-IID", fixed(TINY)),
             ("shards with 1 shard per client, seed 1", fixed({**TINY, "partition": "shards", "shards_per_client": 1,
                                                              "seed": 1})),
             ("Dirichlet alpha=0.3 kept", fixed({**TINY, "partition": "dirichlet", "alpha": 0.3, "seed": 2})),
             ("IID made shards with shards_per_client=3, alpha=0.3 and progress=True kept",
              fixed({**TINY, "shards_per_client": 3, "alpha": 0.3, "progress": True, "rounds": 2})),
             ("shards, alpha=0.3 kept in the record's config", fixed({**TINY, "partition": "shards", "alpha": 0.3,
                                                                      "rounds": 2}))]
    with unseeded_global_rng():
        return run_torch_cases("run_fedavg_non_iid", fn, ref.run_fedavg_non_iid, cases,
                               _record_compare(FEDAVG_KEYS, cases), _bad_configs("epochs", "colour"),
                               compare_with_inputs=True)


# --- Lesson 24 -------------------------------------------------------------------------------------
def _history(accuracies: list[float]) -> list[dict[str, float]]:
    return [{"round": t, "test_accuracy": a, "train_loss": 1.0} for t, a in enumerate(accuracies, start=1)]


def check_compute_non_iid_gap(fn: Callable[..., Any]) -> str:
    """IID minus non-IID per round, mean and sample spread over paired seeds; mismatches refused."""
    iid3 = [{"history": _history(a)} for a in ([0.5, 0.7, 0.8, 0.85], [0.4, 0.6, 0.9, 0.8], [0.45, 0.75, 0.8, 0.9])]
    non3 = [{"history": _history(a)} for a in ([0.3, 0.5, 0.4, 0.6], [0.45, 0.5, 0.7, 0.65], [0.2, 0.4, 0.6, 0.8])]
    cases = [
        ("one history each", fixed(_history([0.5, 0.7, 0.9]), _history([0.3, 0.6, 0.4]))),
        ("run records", fixed({"history": _history([0.2, 0.8])}, {"history": _history([0.25, 0.5])})),
        ("three seeds of four rounds", fixed(iid3, non3)),
        ("one round", fixed(_history([0.6]), _history([0.6]))),
    ]

    kept = inputs_kept(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        kept(label, inputs)
        if not isinstance(got, dict) or set(got) != set(expected):
            raise CheckFailure(f"[{label}] must return a dict with keys {sorted(expected)}, got "
                               f"{sorted(got) if isinstance(got, dict) else type(got).__name__}")
        assert_equal(label, "rounds", got["rounds"], expected["rounds"])
        assert_equal(label, "num_seeds", got["num_seeds"], expected["num_seeds"])
        for key in ("gap_mean", "gap_std"):
            if not isinstance(got[key], list) or len(got[key]) != len(expected[key]):
                raise CheckFailure(f"[{label}] {key} must be a list of {len(expected[key])} floats")
            # float64 (eps = 2.2e-16) means and spreads of <= 12 numbers in [-1, 1]: another summation order or
            # formula (statistics.stdev, NumPy's ddof=1) differs by ~1e-15; rtol 1e-9 leaves a wide margin and
            # still sees ddof = 0 (a factor sqrt(2/3) here); atol 1e-12 for gaps of exactly 0
            for t, (g, e) in enumerate(zip(got[key], expected[key])):
                assert_real(label, f"{key}[{t}]", g, e, rtol=1e-9, atol=1e-12)
        for key in ("final_gap_mean", "final_gap_std", "mean_gap"):
            assert_real(label, key, got[key], expected[key], rtol=1e-9, atol=1e-12)  # as above

        for key in ("final_gap_mean", "final_gap_std", "mean_gap"):
            if type(got[key]) is not float:
                raise CheckFailure(f"[{label}] {key} must be a plain Python float, got {type(got[key]).__name__}")

    invalid = [
        ("3 rounds vs 2 rounds", BAD, "non_iid_history", fixed(_history([0.5, 0.6, 0.7]), _history([0.5, 0.6]))),
        ("3 seeds vs 2 seeds", BAD, "non_iid_history", fixed(iid3, non3[:2])),
        ("an empty history", BAD, "iid_history", fixed([], _history([0.5]))),
    ]
    count = run_torch_cases("compute_non_iid_gap", fn, ref.compute_non_iid_gap, cases, compare, invalid,
                            compare_with_inputs=True, count_only=True)
    no_accuracy = _history([0.5, 0.6])
    del no_accuracy[1]["test_accuracy"]
    blamed = [  # each names iid_history itself, not only as part of "non_iid_history"
        ("iid_history = [] (empty)", ([], _history([0.5]))),
        ("iid_history's round 2 has no test_accuracy", (no_accuracy, _history([0.5, 0.6]))),
        ("iid_history holds runs of 2 and 3 rounds", ([_history([0.5, 0.6]), _history([0.5, 0.6, 0.7])],
                                                      [_history([0.4, 0.5]), _history([0.4, 0.5])])),
        ("iid_history = [{'history': []}] (a run with an empty history)",
         ([{"history": []}], [{"history": []}])),
    ]
    for label, args in blamed:
        _names_iid_history(fn, label, *args)
    return passed("compute_non_iid_gap", count + len(blamed))


def _names_iid_history(fn: Callable[..., Any], label: str, *args: Any) -> None:
    """A ValueError/TypeError whose message names ``iid_history`` (``non_iid_history`` alone does not count)."""
    with quiet():
        try:
            fn(*args)
        except NotImplementedError:
            raise CheckFailure(f"[{label}] the function is not implemented yet (it raised NotImplementedError)") from None
        except BAD as exc:
            if "iid_history" not in str(exc).replace("non_iid_history", ""):
                raise CheckFailure(f"[{label}] raised {type(exc).__name__} as it should, but its message {str(exc)!r} "
                                   "does not name the argument 'iid_history'") from None
            return
        except Exception as exc:  # noqa: BLE001
            raise CheckFailure(f"[{label}] must raise ValueError naming iid_history, but raised "
                               f"{type(exc).__name__}: {exc}") from None
    raise CheckFailure(f"[{label}] must raise ValueError naming iid_history for this input, but returned normally")


# --- Lessons 25–26 ---------------------------------------------------------------------------------
def _compare_sweep(keys: tuple[str, ...], per_value: tuple[str, ...],
                   cases: list) -> Callable[[str, Any, dict, Any], None]:
    kept = inputs_kept(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        kept(label, inputs)
        if not isinstance(got, dict):
            raise CheckFailure(f"[{label}] must return a record (a dict), got {type(got).__name__}")
        missing = sorted(set(expected) - set(got))
        if missing:
            raise CheckFailure(f"[{label}] the record lacks {missing}")
        for key in keys:
            assert_equal(label, key, got[key], expected[key])
            if key in ("fractions", "target") or key == "epochs_list":
                _same_types(label, key, got[key], expected[key])
        for key in per_value:
            want = expected[key]
            if not isinstance(got[key], dict) or set(got[key]) != set(want):
                raise CheckFailure(f"[{label}] {key} must map each of {sorted(want)} to its value, got {got[key]!r}")
            if [type(v) for v in got[key]] != [type(v) for v in want]:
                raise CheckFailure(f"[{label}] {key} must be keyed by {[type(v).__name__ for v in want]} values, "
                                   f"got keys of type {[type(v).__name__ for v in got[key]]}")
            for v, w in want.items():
                _value(label, f"{key}[{v}]", got[key][v], w)
        wall = got["wall_time_s"]
        if isinstance(wall, bool) or not isinstance(wall, float) or not wall > 0:
            raise CheckFailure(f"[{label}] wall_time_s must be a float > 0, got {wall!r}")
    return compare


def _same_types(label: str, what: str, got: Any, want: Any) -> None:
    """``epochs_list`` a list of ints, ``fractions`` a list of floats, ``target`` a float, whatever was passed."""
    if type(got) is not type(want) or (isinstance(want, list) and [type(g) for g in got] != [type(w) for w in want]):
        kind = f"a list of {type(want[0]).__name__}s" if isinstance(want, list) and want else type(want).__name__
        raise CheckFailure(f"[{label}] {what} must be {kind} in the record, got {got!r}")


def _value(label: str, what: str, got: Any, want: Any) -> None:
    """Lists element by element, ints and None exactly, floats to 1e-6."""
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            raise CheckFailure(f"[{label}] {what} must be a list of {len(want)} entries, got {got!r}")
        for i, (g, w) in enumerate(zip(got, want)):
            _value(label, f"{what}[{i}]", g, w)
    elif want is None or got is None or isinstance(want, int):
        assert_equal(label, what, got, want)
    else:
        if type(got) is not float:
            raise CheckFailure(f"[{label}] {what} must be a plain Python float (the record is plain data), "
                               f"got {type(got).__name__}")
        # accuracies (counts over n_test = 18) and their float64 means and spreads, from the same run_fedavg
        # curves as the reference: only the summation order differs (~1e-16), and a float32 accuracy is within
        # 6e-8 of the count over n; 1e-6 admits both, while one example is 1/18 and ddof = 0 a factor sqrt(2/3)
        assert_real(label, what, got, want, rtol=1e-6, atol=1e-6)


def check_rounds_to_target_vs_local_epochs(fn: Callable[..., Any]) -> str:
    """First round at or above the target per E and seed; means over the seeds that got there."""
    cases = [
        ("E in [1, 3], target 0.6, seeds (0, 1)", fixed({**TINY, "rounds": 4}, [1, 3], 0.6, (0, 1))),
        ("non-IID shards, E in [2, 1], target 0.5, seeds (4, 5, 6)",
         fixed({**TINY, "partition": "shards"}, [2, 1], 0.5, (4, 5, 6))),
        ("a target nobody reaches (target = 1, an int)", fixed(TINY, [1], 1, (0,))),
        ("epochs_list as a tuple (2, 1), config seed 5 (overridden by the seeds (0, 1))",
         fixed({**TINY, "seed": 5, "rounds": 2}, (2, 1), 0.5, (0, 1))),
    ]
    keys = ("kind", "config", "epochs_list", "target", "seeds", "bytes_communicated")
    per_value = ("rounds_to_target", "num_reached", "mean_rounds", "std_rounds", "final_accuracy_mean",
                 "final_accuracy_std", "accuracy_curves")
    invalid = [
        ("epochs_list = []", BAD, "epochs_list", fixed(TINY, [], 0.5)),
        ("epochs_list = [0]", BAD, "epochs_list", fixed(TINY, [0], 0.5)),
        ("epochs_list = [1, 1] (a repeated value)", BAD, "epochs_list", fixed(TINY, [1, 1], 0.5)),
        ("target = 0", BAD, "target", fixed(TINY, [1], 0.0)),
        ("target = 1.5", BAD, "target", fixed(TINY, [1], 1.5)),
        ("seeds = []", BAD, "seeds", fixed(TINY, [1], 0.5, [])),
        ("seeds = [-1]", BAD, "seeds", fixed(TINY, [1], 0.5, [-1])),
        ("seeds = [1, 1] (repeated)", BAD, "seeds", fixed(TINY, [1], 0.5, [1, 1])),
        ("epochs_list = [True] (a bool is not an integer here)", BAD, "epochs_list", fixed(TINY, [True], 0.5)),
        ("target = True (a bool is not a real number here)", BAD, "target", fixed(TINY, [1], True)),
        ("target = NaN", BAD, "target", fixed(TINY, [1], float("nan"))),
    ]
    with unseeded_global_rng():
        return run_torch_cases("rounds_to_target_vs_local_epochs", fn, ref.rounds_to_target_vs_local_epochs,
                               cases, _compare_sweep(keys, per_value, cases), invalid, compare_with_inputs=True)


def check_accuracy_vs_client_fraction(fn: Callable[..., Any]) -> str:
    """Final accuracy per C and seed, mean ± sample spread, clients and bytes per round."""
    cases = [
        ("fractions [0.2, 1] (1 an int: recorded as the float 1.0), seeds (0, 1, 2)", fixed(TINY, [0.2, 1], (0, 1, 2))),
        ("non-IID, fractions [0.6, 0.1, 0.4], seeds (3, 4)", fixed({**TINY, "partition": "shards"}, [0.6, 0.1, 0.4],
                                                                  (3, 4))),
        ("25 clients, fraction 0.28 (0.28 * 25 = 7.000000000000001: 7 clients), config seed 7 (overridden by seed 0)",
         fixed({**TINY, "num_clients": 25, "rounds": 1, "seed": 7}, [0.28], (0,))),
    ]
    keys = ("kind", "config", "fractions", "seeds", "bytes_communicated")
    per_value = ("clients_per_round", "final_accuracy", "mean", "std", "bytes_per_round", "accuracy_curves")
    invalid = [
        ("fractions = []", BAD, "fractions", fixed(TINY, [])),
        ("fractions = [0]", BAD, "fractions", fixed(TINY, [0.0])),
        ("fractions = [1.2]", BAD, "fractions", fixed(TINY, [1.2])),
        ("seeds = [1, 1]", BAD, "seeds", fixed(TINY, [0.5], [1, 1])),
        ("seeds = [-1]", BAD, "seeds", fixed(TINY, [0.5], [-1])),
        ("fractions = [0.5, 0.5] (repeated)", BAD, "fractions", fixed(TINY, [0.5, 0.5])),
        ("fractions = [True] (a bool is not a real number here)", BAD, "fractions", fixed(TINY, [True])),
        ("fractions = [NaN]", BAD, "fractions", fixed(TINY, [float("nan")])),
    ]
    with unseeded_global_rng():
        return run_torch_cases("accuracy_vs_client_fraction", fn, ref.accuracy_vs_client_fraction, cases,
                               _compare_sweep(keys, per_value, cases), invalid, compare_with_inputs=True)

