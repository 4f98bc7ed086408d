"""Start a ``torchrun`` job — one node, or several nodes' agents on this machine — and read back rank 0's result.

**Two machines.** :func:`run_nodes` starts ``nnodes`` torchrun *agents* here, exactly as ``nnodes``
machines would start them; only the addresses differ. On each of two real machines run::

    torchrun --nnodes 2 --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST_A:29400 \
             --rdzv-id my-job -m trainsys.distributed.ddp_train --out result.json --optimizer zero-adam

with ``HOST_A`` an address of the first machine that the second can reach (its rendezvous store
listens there), the same ``--rdzv-id`` on both, and the port open between them. The processes
then find each other through the store; gloo (CPU) and NCCL (GPU) pick a network interface from the
machine's host name, which on a machine with several interfaces can be the wrong one — name it with
``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` (e.g. ``eth0``). Global rank 0 writes the result, on
whichever machine it landed (torch's documentation: "torchrun (Elastic Launch)", and the c10d
rendezvous of ``torch.distributed.elastic``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainsys._validation import require_int


def run(module: str, nproc: int, *args: str, timeout: float = 300) -> dict[str, Any]:
    """``torchrun --standalone --nproc_per_node=nproc -m module --out FILE args…``; return FILE's JSON.

    Raises ``RuntimeError`` with the job's output when it fails. Every rank is one CPU process (gloo).
    """
    nproc = require_int("nproc", nproc, minimum=1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                   "-m", module, "--out", str(out), *args]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        if result.returncode != 0 or not out.is_file():
            raise RuntimeError(f"torchrun {module} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                               f"{result.stderr[-3000:]}")
        return json.loads(out.read_text())


WORKER_FAILED = "ChildFailedError"
"""What a torchrun agent prints when one of its worker processes failed (``torch.distributed.elastic``)."""
FAILED_AGENT_GRACE_S = 5.0
"""Seconds an agent that reported a failed worker may take to exit before the job is stopped."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def require_free_port(name: str, port: object, user: str, host: str = "127.0.0.1") -> int:
    """``port`` as an int once nothing listens on it on ``host``; ``ValueError`` naming ``name`` and ``user`` if
    something does (``user``: what the port is for, e.g. "the rendezvous store")."""
    port = require_int(name, port, minimum=1, maximum=65535)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            raise ValueError(f"{name} must be free on {host} for {user}, but {port} is in use "
                             f"({error.strerror}); pass another port or none (a free one is chosen)") from None
    return port


def run_nodes(module: str, nnodes: int, nproc_per_node: int, *args: str, timeout: float = 300,
              port: int | None = None, join_timeout: float = 60) -> dict[str, Any]:
    """Start ``nnodes`` torchrun agents here, as ``nnodes`` machines would, and return global rank 0's JSON.

    Each agent runs ``torchrun --nnodes N --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint
    127.0.0.1:PORT --rdzv-id ID -m module --out FILE args…`` in its own process group (``PORT``: a free
    port unless given; ``ID``: fresh). The agents meet at the c10d rendezvous (the first to arrive hosts
    its store), the ``N·K`` processes form one gloo group, and global rank 0 writes ``FILE``. Raises
    ``ValueError`` at once when a given ``port`` is in use, and ``RuntimeError`` with every agent's output
    when an agent fails (e.g. the agents have not met within ``join_timeout`` seconds) or the job outlasts
    ``timeout``; every agent and its workers are killed before it returns or raises.
    """
    nnodes = require_int("nnodes", nnodes, minimum=1)
    nproc_per_node = require_int("nproc_per_node", nproc_per_node, minimum=1)
    # a foreign listener on a given port would leave the agents waiting for a rendezvous: refuse it at once
    port = free_port() if port is None else require_free_port("port", port, "the rendezvous store")
    run_id = f"trainsys-{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        logs = [Path(tmp) / f"node{i}.log" for i in range(nnodes)]
        command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
                   f"--nproc-per-node={nproc_per_node}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                   f"--rdzv-id={run_id}", f"--rdzv-conf=join_timeout={join_timeout}", "--max-restarts=0",
                   "-m", module, "--out", str(out), *args]
        agents = []
        try:
            for log in logs:
                with log.open("w") as handle:
                    agents.append(subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env,
                                                   start_new_session=True))
            deadline, worker_failed = time.monotonic() + timeout, None
            while any(a.poll() is None for a in agents) and time.monotonic() < deadline:
                if any(a.poll() not in (None, 0) for a in agents):
                    break  # one agent failed: the others would wait for it until their own time-outs
                if worker_failed is None and any(WORKER_FAILED in log.read_text() for log in logs):
                    worker_failed = time.monotonic()  # an agent reported a failed worker ...
                elif worker_failed is not None and time.monotonic() - worker_failed > FAILED_AGENT_GRACE_S:
                    break  # ... and has not exited since (an agent can hang on the rendezvous store at shutdown)
                time.sleep(0.2)
            codes = [a.poll() for a in agents]
        finally:
            for agent in agents:  # each agent leads its own process group: its workers go with it
                if agent.poll() is None:
                    os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        if codes != [0] * nnodes or not out.is_file():
            if worker_failed is not None:
                reason = f"a worker failed; agent exit codes {codes}, None: still running, stopped"
            else:
                reason = "timed out" if None in codes else f"exit codes {codes}"
            tails = "\n".join(f"--- agent {i} ---\n{log.read_text()[-6000:]}" for i, log in enumerate(logs))
            raise RuntimeError(f"{nnodes}-node torchrun of {module} on 127.0.0.1:{port} failed ({reason}; time "
                               f"limit {timeout} s):\n{tails}")
        return json.loads(out.read_text())


def init_process_group() -> tuple[int, int]:
    """Join the job torchrun started (gloo on CPU, nccl when CUDA is there); return ``(rank, world_size)``."""
    backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ["WORLD_SIZE"]) \
        else "gloo"
    dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size()


def write_result(path: str, result: dict[str, Any]) -> None:
    """Rank 0 writes the job's result (other ranks call it too; only rank 0 writes)."""
    if dist.get_rank() == 0:
        Path(path).write_text(json.dumps(result))


def finish() -> None:
    """Leave the job together: a barrier first, so that no rank tears the group down under another."""
    dist.barrier()
    dist.destroy_process_group()
