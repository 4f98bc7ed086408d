"""Checks behind the hidden tests of Module 3, Part 5 (lessons 17–20: the server and the loop).

Clients of unequal sizes (4, 7, 10 and 19 examples), so that an unweighted mean differs from
FedAvg's; partial participation, so that weights over all clients differ from weights over the
selected ones; products ``C · K`` that are not integers or carry float noise; a BatchNorm model in
training mode for evaluation; and tiny configs for the whole loop, fast enough for a hidden test.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from trainsys.fedavg import data as ref_data
from trainsys.fedavg import model as ref_model
from trainsys.fedavg import server as ref
from trainsys.grading._harness import CheckFailure, passed
from trainsys.grading._torch_harness import (
    BAD,
    assert_equal,
    assert_real,
    assert_state,
    fixed,
    guarded,
    model_state,
    run_torch_cases,
)

__all__ = [
    "check_select_clients",
    "check_run_communication_round",
    "check_evaluate_accuracy",
    "check_run_fedavg",
]

DATA = ref_data.build_synthetic_dataset(40, 4, 3, 1)
SIZES = [4, 7, 10, 19]
PARTITION = [torch.sort(p).values for p in
             torch.split(torch.randperm(40, generator=torch.Generator().manual_seed(3)), SIZES)]
TINY = {"num_examples": 120, "d_in": 4, "n_classes": 3, "d_hidden": 8, "num_clients": 6, "fraction": 0.5,
        "epochs": 1, "batch_size": 5, "rounds": 3}


# --- Lesson 17 -------------------------------------------------------------------------------------
def check_select_clients(fn: Callable[..., Any]) -> str:
    """max(⌈C·K⌉, 1) distinct sorted ids in [0, K), from the generator, every client reachable."""
    setups = [(10, 0.3), (10, 0.05), (7, 1.0), (100, 0.07), (1, 0.5), (100, 0.01), (9, 0.25), (40, 0.1)]
    cases = [(f"num_clients={k}, fraction={c}", lambda k=k, c=c, i=i: ((k, c, np.random.default_rng(i)), {}))
             for i, (k, c) in enumerate(setups)]

    def compare(label: str, got: Any, expected: list, inputs: Any) -> None:
        k = inputs[0][0]
        if not isinstance(got, list) or not all(isinstance(x, (int, np.integer)) for x in got):
            raise CheckFailure(f"[{label}] must return a list of client ids (ints), got {type(got).__name__}")
        if len(got) != len(expected):
            raise CheckFailure(f"[{label}] selected {len(got)} clients, expected max(ceil(C*K), 1) = {len(expected)}")
        if len(set(got)) != len(got) or any(not 0 <= x < k for x in got):
            raise CheckFailure(f"[{label}] the ids must be distinct and in [0, {k}), got {got}")
        if list(got) != sorted(got):
            raise CheckFailure(f"[{label}] return the ids sorted ascending, got {got}")
        again = guarded(fn, label, k, inputs[0][1], np.random.default_rng(setups.index((k, inputs[0][1]))))
        if list(again) != list(got):
            raise CheckFailure(f"[{label}] a generator with the same seed must give the same clients")

    count = run_torch_cases("select_clients", fn, ref.select_clients, cases, compare, mutable=(2,),
                            compare_with_inputs=True, count_only=True)
    label = "400 rounds of num_clients=10, fraction=0.3"
    rng, hits = np.random.default_rng(123), np.zeros(10)
    for _ in range(400):
        hits[list(guarded(fn, label, 10, 0.3, rng))] += 1
    if hits.min() < 0.3 * 400 * 0.6 or hits.max() > 0.3 * 400 * 1.4:
        raise CheckFailure(f"[{label}] clients were selected {hits.astype(int).tolist()} times; each should be "
                           "selected about 120 times (uniformly, from the generator, every round anew)")
    invalid = [
        ("num_clients = 0", BAD, "num_clients", fixed(0, 0.5, np.random.default_rng(0))),
        ("fraction = 0", BAD, "fraction", fixed(10, 0.0, np.random.default_rng(0))),
        ("fraction = 1.5", BAD, "fraction", fixed(10, 1.5, np.random.default_rng(0))),
        ("fraction = -0.1", BAD, "fraction", fixed(10, -0.1, np.random.default_rng(0))),
        ("rng = 42", BAD, "rng", fixed(10, 0.5, 42)),
    ]
    count += 1 + run_torch_cases("select_clients", fn, ref.select_clients, [], None, invalid, count_only=True)
    return passed("select_clients", count)


# --- Lesson 18 -------------------------------------------------------------------------------------
def _round_with_state(round_fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0):
        info = round_fn(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum)
        return info, model_state(global_model), rng.bit_generator.state
    return run


def check_run_communication_round(fn: Callable[..., Any]) -> str:
    """The reference's round: same clients and seeds from rng, fresh copies, n_k/m_t weights, bytes."""
    setups = [  # (fraction, epochs, batch_size, lr, rng seed, momentum, batch_norm)
        (0.5, 1, 3, 0.1, 0, 0.0, False), (1.0, 2, None, 0.5, 1, 0.0, False), (0.25, 1, 4, 0.2, 2, 0.0, False),
        (0.75, 2, 5, 0.1, 3, 0.9, False), (1.0, 1, 5, 0.1, 4, 0.0, True),
    ]
    cases = [(f"fraction={c}, epochs={e}, batch_size={b}, lr={lr}, momentum={mo}{', BatchNorm' if bn else ''}",
              lambda c=c, e=e, b=b, lr=lr, s=s, mo=mo, bn=bn: (
                  (ref_model.build_mlp_classifier(4, 6, 3, s, bn), DATA, copy.deepcopy(PARTITION), c, e, b, lr,
                   np.random.default_rng(s), mo), {}))
             for c, e, b, lr, s, mo, bn in setups]
    keys = {"selected", "num_samples", "client_losses", "train_loss", "local_steps", "bytes_down", "bytes_up"}

    def compare(label: str, got: Any, expected: tuple) -> None:
        info, state, rng_state = got
        want, want_state, want_rng = expected
        if not isinstance(info, dict) or set(info) != keys:
            raise CheckFailure(f"[{label}] must return a dict with keys {sorted(keys)}, got "
                               f"{sorted(info) if isinstance(info, dict) else type(info).__name__}")
        assert_equal(label, "selected", [int(k) for k in info["selected"]], want["selected"])
        for key in ("num_samples", "local_steps", "bytes_down", "bytes_up"):
            assert_equal(label, key, info[key], want[key])
        if rng_state != want_rng:
            raise CheckFailure(f"[{label}] rng ends in another state than the reference's: draw the clients "
                               "(select_clients), then one seed per selected client, and nothing else")
        if not isinstance(info["client_losses"], list) or len(info["client_losses"]) != len(want["client_losses"]):
            raise CheckFailure(f"[{label}] client_losses must be a list with one loss per selected client")
        for i, (l, w) in enumerate(zip(info["client_losses"], want["client_losses"])):
            assert_real(label, f"client_losses[{i}]", l, w, rtol=1e-4, atol=1e-6)
        assert_real(label, "train_loss", info["train_loss"], want["train_loss"], rtol=1e-4, atol=1e-6)
        assert_state(label, "the global model after the round", state, want_state, rtol=1e-4, atol=1e-6)

    count = run_torch_cases("run_communication_round", _round_with_state(fn),
                            _round_with_state(ref.run_communication_round), cases, compare, mutable=(0, 7),
                            count_only=True)

    def bad(**change: Any) -> Callable[[], Any]:
        args = {"fraction": 0.5, "epochs": 1, "batch_size": 3, "lr": 0.1, **change}
        return lambda: ((ref_model.build_mlp_classifier(4, 6, 3, 0), DATA, change.get("partition", PARTITION),
                         args["fraction"], args["epochs"], args["batch_size"], args["lr"],
                         np.random.default_rng(0)), {})

    invalid = [
        ("fraction = 0", BAD, "fraction", bad(fraction=0.0)),
        ("epochs = 0", BAD, "epochs", bad(epochs=0)),
        ("batch_size = 0", BAD, "batch_size", bad(batch_size=0)),
        ("lr = 0", BAD, "lr", bad(lr=0.0)),
        ("a partition index out of range", BAD, "partition", bad(partition=[torch.tensor([0, 1, 40])])),
    ]
    count += run_torch_cases("run_communication_round", fn, ref.run_communication_round, [], None, invalid,
                             count_only=True)
    return passed("run_communication_round", count)


# --- Lesson 19 -------------------------------------------------------------------------------------
def check_evaluate_accuracy(fn: Callable[..., Any]) -> str:
    """Arg-max accuracy in eval mode, without gradients, the model's mode and buffers left as found."""
    def bn_model(training: bool) -> torch.nn.Module:
        model = ref_model.build_mlp_classifier(4, 6, 3, 5, batch_norm=True).train()
        with torch.no_grad():
            model(DATA.features[:20] * 3 + 1)  # running statistics far from the batch's own
        return model.train(training)

    one = ref_data.LabelledDataset(DATA.features[:1], DATA.labels[:1], 3)
    cases = [
        ("MLP on 40 examples", fixed(ref_model.build_mlp_classifier(4, 6, 3, 0), DATA)),
        ("BatchNorm model left in training mode", fixed(bn_model(True), DATA)),
        ("BatchNorm model in eval mode", fixed(bn_model(False), DATA)),
        ("one example", fixed(ref_model.build_mlp_classifier(4, 6, 3, 1), one)),
        ("MLP on 40 examples, another seed", fixed(ref_model.build_mlp_classifier(4, 16, 3, 2), DATA)),
    ]

    def compare(label: str, got: Any, expected: float) -> None:
        if isinstance(got, (torch.Tensor, bool, int, np.integer)):
            raise CheckFailure(f"[{label}] must return the accuracy as a float in [0, 1], got {got!r}")
        assert_real(label, "the accuracy", got, expected, rtol=0, atol=1e-9)

    invalid = [
        ("dataset is a tuple", BAD, "dataset", fixed(ref_model.build_mlp_classifier(4, 6, 3, 0),
                                                      (DATA.features, DATA.labels))),
        ("model is a dict", BAD, "model", fixed({"w": torch.ones(2)}, DATA)),
    ]
    return run_torch_cases("evaluate_accuracy", fn, ref.evaluate_accuracy, cases, compare, invalid)


# --- Lesson 20 -------------------------------------------------------------------------------------
def compare_records(label: str, got: Any, expected: dict, history_keys: tuple[str, ...]) -> None:
    """A run record against the reference's: config, seeds, every round's metrics, bytes; wall time > 0."""
    if not isinstance(got, dict):
        raise CheckFailure(f"[{label}] must return a run record (a dict), got {type(got).__name__}")
    missing = sorted(set(expected) - set(got))
    if missing:
        raise CheckFailure(f"[{label}] the run record lacks {missing}")
    for key in ("kind", "config", "seeds", "bytes_communicated", "client_sizes"):
        if key in expected:
            assert_equal(label, key, got[key], expected[key])
    assert_real(label, "initial_test_accuracy", got["initial_test_accuracy"], expected["initial_test_accuracy"],
                rtol=0, atol=1e-6)
    history = got["history"]
    if not isinstance(history, list) or len(history) != len(expected["history"]):
        raise CheckFailure(f"[{label}] history must be a list of {len(expected['history'])} rounds")
    for t, (h, w) in enumerate(zip(history, expected["history"])):
        if not isinstance(h, dict):
            raise CheckFailure(f"[{label}] history[{t}] must be a dict, got {type(h).__name__}")
        assert_equal(label, f"history[{t}]['round']", h.get("round"), w["round"])
        assert_real(label, f"history[{t}]['test_accuracy']", h.get("test_accuracy"), w["test_accuracy"],
                    rtol=0, atol=1e-6)
        assert_real(label, f"history[{t}]['train_loss']", h.get("train_loss"), w["train_loss"],
                    rtol=1e-4, atol=1e-6)
        for key in history_keys:
            assert_equal(label, f"history[{t}][{key!r}]", h.get(key), w[key])
    assert_real(label, "final_test_accuracy", got["final_test_accuracy"], expected["final_test_accuracy"],
                rtol=0, atol=1e-6)
    wall = got["wall_time_s"]
    if isinstance(wall, bool) or not isinstance(wall, float) or not wall > 0:
        raise CheckFailure(f"[{label}] wall_time_s must be the run's duration in seconds (a float > 0), got {wall!r}")


def check_run_fedavg(fn: Callable[..., Any]) -> str:
    """The reference's run record on tiny configs (IID, shards, Dirichlet, B = ∞); bad configs refused."""
    configs = [
        ("IID, dict config", TINY),
        ("pathological non-IID shards", {**TINY, "partition": "shards", "seed": 1}),
        ("Dirichlet alpha=0.5, B = None", {**TINY, "partition": "dirichlet", "batch_size": None, "seed": 2}),
        ("FedAvgConfig, fraction 0.2 (one client), E=2", ref.FedAvgConfig(**{**TINY, "fraction": 0.2, "epochs": 2})),
    ]
    cases = [(label, fixed(config)) for label, config in configs]
    history_keys = ("selected", "local_steps", "bytes_up", "bytes_down")

    def compare(label: str, got: Any, expected: dict) -> None:
        compare_records(label, got, expected, history_keys)

    invalid = [(f"config {change}", BAD, name, fixed({**TINY, **change})) for name, change in [
        ("num_clients", {"num_clients": 0}), ("num_clients", {"num_clients": 10**6}),
        ("fraction", {"fraction": 0.0}), ("fraction", {"fraction": 1.5}), ("epochs", {"epochs": 0}),
        ("batch_size", {"batch_size": 0}), ("partition", {"partition": "random"}), ("colour", {"colour": 1}),
    ]]
    return run_torch_cases("run_fedavg", fn, ref.run_fedavg, cases, compare, invalid)
