"""Issue 17: the Module 1 and Module 2 capstones as two torchrun nodes (two agents, c10d rendezvous on 127.0.0.1).

Two agents with one process each form the same two-rank gloo group as ``torchrun --standalone
--nproc_per_node=2``; the runs must agree exactly (the same collectives on the same data in the same
order). A taken port is refused before anything starts, and a failing job is reported with every
agent's output and leaves no process behind.
"""

from __future__ import annotations

import socket
import time

import pytest

from trainsys.distributed.launch import run, run_nodes

pytestmark = pytest.mark.slow


def _agents_alive() -> int:
    import subprocess

    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return sum("torch.distributed.run --nnodes=2" in line for line in ps.splitlines())


def test_m1_capstone_ddp_with_zero_on_two_nodes_equals_one_node() -> None:
    args = ("--optimizer", "zero-adam", "--steps", "8")
    two = run_nodes("trainsys.distributed.ddp_train", 2, 1, *args, timeout=240)
    one = run("trainsys.distributed.ddp_train", 2, *args, timeout=240)
    assert two["world_size"] == one["world_size"] == 2
    assert two["losses"] == one["losses"] and two["params"] == one["params"]  # bit for bit
    assert two["optimizer_state_numel_per_rank"] == one["optimizer_state_numel_per_rank"] == [256, 100]


def test_m2_diloco_on_two_nodes_equals_one_node() -> None:
    args = ("--rounds", "3", "--inner-steps", "5")
    two = run_nodes("trainsys.distributed.diloco", 2, 1, *args, timeout=240)
    one = run("trainsys.distributed.diloco", 2, *args, timeout=240)
    assert [h["heldout_loss"] for h in two["history"]] == [h["heldout_loss"] for h in one["history"]]
    assert [h["arrived"] for h in two["history"]] == [[0, 1]] * 3 and two["detections"] == []


def test_m2_diloco_gpt_on_two_nodes_equals_one_node() -> None:
    args = ("--model", "gpt", "--sharding", "genre", "--rounds", "1", "--inner-steps", "2")
    two = run_nodes("trainsys.distributed.diloco", 2, 1, *args, timeout=240)
    one = run("trainsys.distributed.diloco", 2, *args, timeout=240)
    assert two["model"] == "gpt" and two["history"] == one["history"]  # bit for bit


def test_a_taken_port_is_refused_before_anything_starts() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(ValueError, match=rf"port must be free on 127.0.0.1 .* {port} is in use"):
            run_nodes("trainsys.distributed.ddp_train", 2, 1, port=port)
        assert time.monotonic() - start < 5 and _agents_alive() == 0


def test_a_failing_job_reports_every_agent_and_leaves_no_process() -> None:
    # 63 examples cannot be split evenly over two ranks: ddp_train refuses on every rank, both agents fail
    start = time.monotonic()
    # (an agent that reported its failed worker but hangs on the rendezvous store is stopped, not waited for)
    with pytest.raises(RuntimeError, match=r"(?s)2-node torchrun of trainsys.distributed.ddp_train .* failed "
                                           r"\((a worker failed; agent )?exit codes .*--- agent 0 ---.*"
                                           r"--examples must be divisible.*--- agent 1 ---"):
        run_nodes("trainsys.distributed.ddp_train", 2, 1, "--examples", "63", timeout=120)
    assert time.monotonic() - start < 60 and _agents_alive() == 0
