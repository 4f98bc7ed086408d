"""Module 3 on Flower 1.42's Deployment Runtime (SuperLink + 2 SuperNodes on 127.0.0.1) against the simulation.

Three launches of :func:`trainsys.distributed.federate.federate`. A launch costs ~10 s of start-up and
stop, and a round ~7 s — a SuperNode polls its SuperLink every 3 s and starts a fresh ClientApp process
per message — mostly spent waiting, so the full run and the run that loses a SuperNode are started
together (two federations on their own ports; ~45 s instead of ~80 s). After each launch no process of
that run may be left (found by its marker environment variable), and ``ps`` must show no Flower process
once the launches are over.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainsys.distributed.federate import FLOWER_PROCESSES, federate, run_processes
from trainsys.distributed.launch import free_port
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.server import (evaluate_accuracy, make_partition, prepare_run, run_communication_round, run_fedavg,
                                    run_seeds, select_clients, validate_fedavg_config)
from trainsys.fedavg.state import aggregate_weighted_average, clone_model_state, load_model_state

import flwr  # noqa: F401,E402 - pinned in requirements.txt: a missing Flower must fail here, not skip
pytestmark = pytest.mark.slow

TEST_SIZE = 800  # the default config's held-out examples: one example is 1/800 of accuracy


def flower_processes() -> list[str]:
    """``ps`` lines of live (not zombie) Flower processes on this machine."""
    table = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    found = []
    for line in table.splitlines():
        pid_stat_args = line.split(None, 2)
        if len(pid_stat_args) == 3 and not pid_stat_args[1].startswith("Z") \
                and any(name in pid_stat_args[2] for name in FLOWER_PROCESSES):
            found.append(line.strip())
    return found


KILL_ROUND_TIMEOUT = 25.0  # > a healthy round: ~7 s alone, up to ~10 s with two federations on 2 busy cores,
# more while the rest of the suite runs beside them


def _launch(out: Path, **options: object) -> tuple[dict[str, Any], list[int]]:
    """``federate(out, **options)`` and, right after it returns, the pids of that run still alive."""
    record = federate(out, timeout=150, **options)
    left = run_processes(record["deployment"]["marker"])
    assert json.loads(out.read_text())["history"] == record["history"]  # the record on disk is the one returned
    return record, left


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], list[int]]]:
    """The full run (seed 0, 3 rounds) and the run that loses SuperNode 0 after round 1 (seed 1, 2 rounds)."""
    folder = tmp_path_factory.mktemp("federate")
    with ThreadPoolExecutor(2) as pool:
        full = pool.submit(_launch, folder / "full.json", supernodes=2, rounds=3, fraction=0.1, round_timeout=40)
        # seed 1: round 2 selects [5, 14, 15, 21]; SuperNode 0 hosts 14, and dies once round 1 is recorded.
        killed = pool.submit(_launch, folder / "killed.json", supernodes=2, rounds=2, fraction=0.1, seed=1,
                             round_timeout=KILL_ROUND_TIMEOUT, kill_supernode=0, kill_after_round=1)
        return {"full": full.result(), "killed": killed.result()}


def test_federate_on_two_supernodes_follows_the_simulation(runs) -> None:
    record, left = runs["full"]
    assert left == [] and flower_processes() == []
    assert record["finished"] is True and "error" not in record
    assert sorted(record["node_ids"]) == ["0", "1"] and len(set(record["node_ids"].values())) == 2

    sim = run_fedavg({"rounds": 3, "fraction": 0.1})
    assert record["client_sizes"] == sim["client_sizes"]
    assert record["initial_test_accuracy"] == sim["initial_test_accuracy"]
    rng = np.random.default_rng(run_seeds(0)["rounds"])  # the draws run_communication_round makes, in order
    for real, simulated in zip(record["history"], sim["history"], strict=True):
        selected = select_clients(40, 0.1, rng)
        assert real["selected"] == simulated["selected"] == selected
        assert real["client_seeds"] == [int(s) for s in rng.integers(0, 2**31 - 1, size=len(selected))]
        assert real["reported"] == selected and real["missing"] == [] and real["errors"] == []
        assert real["local_steps"] == simulated["local_steps"]
        assert abs(real["test_accuracy"] - simulated["test_accuracy"]) <= 1 / TEST_SIZE
        assert real["train_loss"] == pytest.approx(simulated["train_loss"], rel=1e-5)


def test_federate_round_completes_without_a_killed_supernode(runs) -> None:
    record, left = runs["killed"]
    assert left == [] and flower_processes() == []
    assert record["finished"] is True and record["deployment"]["killed_supernode"] == 0

    # The reference: round 1 is run_communication_round's; round 2 trains and averages the reporters only.
    config = validate_fedavg_config({"rounds": 2, "fraction": 0.1, "seed": 1})
    train, test, model, seeds = prepare_run(config)
    partition = make_partition(config, train, seeds["partition"])
    rng = np.random.default_rng(seeds["rounds"])
    first = run_communication_round(model, train, partition, config.fraction, config.epochs, config.batch_size,
                                    config.lr, rng, config.momentum)
    accuracy_1 = evaluate_accuracy(model, test)
    selected = select_clients(len(partition), config.fraction, rng)
    client_seeds = rng.integers(0, 2**31 - 1, size=len(selected))
    reporters = [k for k in selected if k % 2 == 1]
    assert reporters and len(reporters) < len(selected)  # the scenario has both kinds of client
    states, counts, losses = [], [], []
    for k, seed in zip(selected, client_seeds):
        if k in reporters:
            local = copy.deepcopy(model)
            result = train_client_locally(local, train, partition[k], config.epochs, config.batch_size, config.lr,
                                          int(seed), config.momentum)
            states.append(clone_model_state(local))
            counts.append(result["num_samples"])
            losses.append(result["epoch_losses"][-1])
    load_model_state(model, aggregate_weighted_average(states, counts))  # renormalised over the reporters
    accuracy_2 = evaluate_accuracy(model, test)

    round_1, round_2 = record["history"]
    assert round_1["selected"] == round_1["reported"] == first["selected"] and round_1["missing"] == []
    assert abs(round_1["test_accuracy"] - accuracy_1) <= 1 / TEST_SIZE
    assert round_2["selected"] == selected
    assert round_2["reported"] == reporters and round_2["missing"] == [k for k in selected if k % 2 == 0]
    assert round_2["kept_global_model"] is False and round_2["errors"] == []
    assert round_2["round_time_s"] >= KILL_ROUND_TIMEOUT  # the server waited its per-round timeout for SuperNode 0
    assert abs(round_2["test_accuracy"] - accuracy_2) <= 1 / TEST_SIZE
    assert round_2["train_loss"] == pytest.approx(sum(n * l for n, l in zip(counts, losses)) / sum(counts), rel=1e-5)


def test_federate_fails_fast_on_a_bad_config(tmp_path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:  # an explicit port that is taken
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match=rf"port must be free on 127\.0\.0\.1 .* {port} is in use"):
            federate(tmp_path / "a.json", port=port)
    assert flower_processes() == []

    dead = free_port()  # nothing listens there: the SuperNodes cannot reach a SuperLink
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"SuperNode [01] exited .* reach the SuperLink at 127\.0\.0\.1:{dead}\?"
                       ) as error:
        federate(tmp_path / "b.json", superlink_address=f"127.0.0.1:{dead}", connect_timeout=3, timeout=60)
    elapsed = time.monotonic() - start
    assert "Exit Code: 305" in str(error.value)  # Flower's code for "could not connect to the SuperLink"
    assert "could not establish a connection to the SuperLink" in str(error.value)
    assert elapsed < 30
    assert flower_processes() == []
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "b.json").exists()
