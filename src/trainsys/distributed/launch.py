"""Start a ``torchrun`` job on this machine and read back rank 0's result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
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
