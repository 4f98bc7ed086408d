"""Faults on torch.distributed against the one-process simulations: FedAvg (Module 3) and DDP replicas (Module 1).

Three torchrun launches: (a) FedAvg with drop-outs, a deadline and over-selection on 2 ranks follows
``run_fedavg_with_faults`` client by client and round by round; (b) DDP on 3 ranks with a bit flipped on
rank 1 after step 2 and a check every 2 steps is caught at step 3 (not before) naming rank 1, as the
simulated replicas are; (c) DDP with rank 1 initialised from another seed: the DDP constructor broadcasts
rank 0's parameters, so the fault is repaired before the first step and never detected.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from trainsys.distributed.ddp_train import numpy_params, torch_mlp
from trainsys.distributed.fedavg import fault_options
from trainsys.distributed.launch import run
from trainsys.fedavg.faults import LogNormalLatency, run_fedavg_with_faults
from trainsys.memtrain import mlp
from trainsys.memtrain.divergence import minority_workers, simulate_replicated_training

pytestmark = pytest.mark.slow
FEDAVG = dict(rounds=4, fraction=0.1)  # K = 40 clients: m = 4 reports wanted, m' = 6 selected
FAULTS = dict(dropout_rate=0.3, overselect=0.5, deadline=1.2, straggler=LogNormalLatency(median_s=0.8, sigma=0.6))
DDP = dict(n=48, d_in=8, d_hidden=16, d_out=2, seed=0, lr=0.05, steps=6, every=2, world=3)  # 48 = 3 × 16


def _ddp_job(fault: str) -> dict:
    return run("trainsys.distributed.ddp_train", DDP["world"], "--optimizer", "sgd", "--steps", str(DDP["steps"]),
               "--lr", str(DDP["lr"]), "--examples", str(DDP["n"]), "--d-in", str(DDP["d_in"]),
               "--d-hidden", str(DDP["d_hidden"]), "--d-out", str(DDP["d_out"]), "--seed", str(DDP["seed"]),
               "--fingerprint-every", str(DDP["every"]), "--fault", fault, timeout=240)


def _simulated_replicas(**fault) -> dict:
    X, Y = mlp.make_synthetic_regression_batch(DDP["n"], DDP["d_in"], DDP["d_out"],
                                               np.random.default_rng(DDP["seed"] + 1))
    return simulate_replicated_training([(X, Y)] * DDP["steps"], DDP["world"], DDP["d_hidden"], DDP["seed"], DDP["lr"],
                                        DDP["every"], on_mismatch="record", **fault)


def _arrivals(detections: list[dict]) -> list[tuple[int, list[int]]]:
    return [(d["detected_at"], d["workers"]) for d in detections]


def test_fault_options_name_the_command_line_option() -> None:
    def namespace(**changes):
        return argparse.Namespace(**{"dropout_rate": 0.0, "deadline": None, "overselect": 0.0,
                                     "straggler_median_s": 1.0, "straggler_sigma": 0.5, **changes})

    assert fault_options(namespace(deadline=2.0)) == {"dropout_rate": 0.0, "deadline": 2.0, "overselect": 0.0,
                                                      "straggler": LogNormalLatency(1.0, 0.5)}
    for changes, option in (({"dropout_rate": 1.0}, "--dropout-rate"), ({"deadline": 0.0}, "--deadline"),
                            ({"overselect": -0.5}, "--overselect"),
                            ({"straggler_median_s": 0.0}, "--straggler-median-s"),
                            ({"straggler_sigma": -1.0}, "--straggler-sigma")):
        with pytest.raises(ValueError, match=option):
            fault_options(namespace(**changes))


def test_numpy_params_are_float32_arrays_in_the_simulation_layout() -> None:
    params = mlp.init_mlp_params(3, 5, 2, np.random.default_rng(0))
    out = numpy_params(torch_mlp(params))
    assert list(out) == list(mlp.PARAM_KEYS)
    for key, value in out.items():
        assert isinstance(value, np.ndarray) and value.dtype == np.float32 and value.flags.c_contiguous
        np.testing.assert_array_equal(value, params[key])


def test_m3_fedavg_with_faults_on_torch_distributed_follows_the_simulation() -> None:
    s = FAULTS["straggler"]
    job = run("trainsys.distributed.fedavg", 2, "--rounds", str(FEDAVG["rounds"]),
              "--fraction", str(FEDAVG["fraction"]),
              "--dropout-rate", str(FAULTS["dropout_rate"]), "--overselect", str(FAULTS["overselect"]),
              "--deadline", str(FAULTS["deadline"]), "--straggler-median-s", str(s.median_s),
              "--straggler-sigma", str(s.sigma), timeout=240)
    sim = run_fedavg_with_faults(FEDAVG, **FAULTS)
    assert job["faults"] == sim["faults"] and job["faults"]["selected_per_round"] == 6
    assert job["seeds"] == sim["seeds"]
    assert len(job["history"]) == len(sim["history"]) == FEDAVG["rounds"]
    for real, simulated in zip(job["history"], sim["history"]):
        for key in ("selected", "reported", "dropped", "late", "surplus", "kept_global_model"):
            assert real[key] == simulated[key], (key, real, simulated)
        assert real["round_time_s"] == pytest.approx(simulated["round_time_s"], rel=1e-12)  # the latency parameters
        assert abs(real["test_accuracy"] - simulated["test_accuracy"]) <= 1 / 800  # 800 test examples
    # The run exercises every fate, and rounds with fewer than m reporters (renormalised over them).
    history = sim["history"]
    assert all(sum(len(h[key]) for h in history) > 0 for key in ("dropped", "late", "surplus"))
    assert [len(h["reported"]) for h in history] == [4, 4, 2, 3]


def test_m1_ddp_flipped_bit_is_detected_at_the_next_check_naming_the_faulty_rank() -> None:
    t = 2  # checks after steps 1, 3, 5: none may fail before t, the first at or after t is step 3
    job = _ddp_job(f"flip:1:{t}")
    sim = _simulated_replicas(flip_bit={"worker": 1, "step": t, "key": "W1", "index": 0, "bit": 0})
    named = minority_workers([b"a", b"b", b"a"])  # what 3 ranks with rank 1 odd yield: exactly [1]
    assert named == [1]
    assert job["fault"] == {"kind": "flip", "rank": 1, "step": t}
    assert job["init_check"] == {"before_ddp": [], "after_ddp": []}
    assert _arrivals(job["detections"]) == [(3, named), (5, named)] == _arrivals(sim["detections"])
    np.testing.assert_allclose(job["losses"], sim["losses"], rtol=1e-5)  # a 1-ulp flip barely moves the loss


def test_m1_ddp_seed_fault_is_repaired_by_the_ddp_constructor_broadcast() -> None:
    # DistributedDataParallel.__init__ (init_sync=True) calls _sync_module_states(..., src=0): rank 0's
    # parameters overwrite rank 1's before the first step. The simulated replicas have no such broadcast.
    job = _ddp_job("seed:1:0")
    assert job["fault"] == {"kind": "seed", "rank": 1, "step": 0}
    assert job["init_check"] == {"before_ddp": [1], "after_ddp": []}  # injected, then repaired
    assert job["detections"] == []
    faulty = _simulated_replicas(seed_mismatch={"worker": 1})
    assert _arrivals(faulty["detections"]) == [(1, [1]), (3, [1]), (5, [1])]  # without the broadcast: caught
    clean = _simulated_replicas()
    assert clean["detections"] == []
    np.testing.assert_allclose(job["losses"], clean["losses"], rtol=1e-5)  # the fault-free run, as if never injected
    for key in mlp.PARAM_KEYS:
        np.testing.assert_allclose(np.array(job["params"][key], np.float32), clean["params"][0][key],
                                   rtol=1e-4, atol=1e-6)
