"""Modules 2 and 3 on torch.distributed (2 gloo processes) against the one-process simulations."""

from __future__ import annotations

import numpy as np
import pytest

from trainsys.diloco.loop import train_diloco
from trainsys.distributed.launch import run
from trainsys.fedavg.server import run_fedavg

pytestmark = pytest.mark.slow


def test_m2_26_diloco_on_torch_distributed_follows_the_numpy_simulation() -> None:
    # Real: torch.optim.AdamW inside each process, all_reduce of θ_k, torch SGD(nesterov) outside.
    job = run("trainsys.distributed.diloco", 2, "--rounds", "4", "--inner-steps", "10", timeout=240)
    sim = train_diloco({"num_workers": 2, "rounds": 4, "inner_steps": 10, "progress": False})
    real = [h["heldout_loss"] for h in job["history"]]
    simulated = [h["heldout_loss"] for h in sim["history"]]
    np.testing.assert_allclose(real, simulated, rtol=1e-5)  # float32 in both; ~1e-8 observed
    assert [h["heldout_accuracy"] for h in job["history"]] == pytest.approx(
        [h["heldout_accuracy"] for h in sim["history"]], abs=1 / 600)


def test_m3_18_fedavg_round_on_torch_distributed_follows_the_simulation() -> None:
    # Each process hosts half of the selected clients; the n_k-weighted aggregate is two all-reduces.
    job = run("trainsys.distributed.fedavg", 2, "--rounds", "4", "--fraction", "0.2", timeout=240)
    sim = run_fedavg({"rounds": 4, "fraction": 0.2})
    assert [h["selected"] for h in job["history"]] == [h["selected"] for h in sim["history"]]
    test_size = 800
    for real, simulated in zip(job["history"], sim["history"]):
        assert abs(real["test_accuracy"] - simulated["test_accuracy"]) <= 1 / test_size
