"""Module 3 on real data, on every engine: run_fedavg, the torchrun job and make federate agree round by round.

Fashion-MNIST, seed 0, 2 rounds of FedAvg (E = 1, B = 10, C = 0.1: 10 clients of 600 images per round).
The Flower run aggregates with the simulation's own function, so its accuracies are equal; the torchrun job
sums ``n_k w_k`` with two all-reduces in another order, so its weights differ by float rounding and a test
prediction may flip only where the simulation's top-two logits are closer than ``LOGIT_DELTA``
(:mod:`trainsys.fedavg.reproduce_real`): the tolerance per round is the fraction of such examples.
"""

from __future__ import annotations

import pytest

from trainsys.distributed.launch import run
from trainsys.fedavg.real import task_config
from trainsys.fedavg.reproduce_real import replay
from trainsys.fedavg.server import run_fedavg

pytestmark = pytest.mark.slow
ROUNDS = 2


@pytest.fixture(scope="module")
def simulation() -> dict:
    config = task_config("fashion-mnist", rounds=ROUNDS, seed=0)
    return {"record": run_fedavg(config), "replay": replay(config, ROUNDS)}


def test_m3_20_fashion_mnist_on_torchrun_follows_the_simulation(simulation: dict) -> None:
    job = run("trainsys.distributed.fedavg", 2, "--task", "fashion-mnist", "--rounds", str(ROUNDS), "--fraction", "0.1",
              timeout=240)
    sim = simulation["record"]["history"]
    assert [h["selected"] for h in job["history"]] == [h["selected"] for h in sim]
    for real, simulated, (accuracy, tolerance) in zip(job["history"], sim, simulation["replay"]):
        assert simulated["test_accuracy"] == accuracy  # replay is the same computation as run_fedavg
        assert abs(real["test_accuracy"] - simulated["test_accuracy"]) <= tolerance + 1e-12


def test_m3_20_make_federate_task_fashion_mnist_equals_the_simulation(simulation: dict, tmp_path) -> None:
    from trainsys.distributed.federate import federate, run_processes
    record = federate(tmp_path / "fm.json", supernodes=2, rounds=ROUNDS, task="fashion-mnist", timeout=300,
                      round_timeout=120)  # generous: the suite runs beside it on 2 busy cores
    assert run_processes(record["deployment"]["marker"]) == []
    assert record["config"]["task"] == "fashion-mnist" and record["config"]["hidden_layers"] == 2
    sim = simulation["record"]["history"]
    assert [h["selected"] for h in record["history"]] == [h["selected"] for h in sim]
    assert [h["test_accuracy"] for h in record["history"]] == [h["test_accuracy"] for h in sim]
