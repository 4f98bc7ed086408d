"""Checks behind the hidden tests of Module 1, Part 7, lesson 40 (the full training loop)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import fixed as _fixed, BAD, Args, CheckFailure, run_cases
from trainsys.memtrain import trainer as ref

__all__ = ["check_train"]

SMALL = {"layer_widths": [6, 16, 16, 16, 2], "n": 96, "batch": 30, "steps": 6, "lr": 5e-3}




def check_train(fn: Callable[..., Any]) -> str:
    """Loss curves, bytes and record fields for configurations that switch each technique on."""
    configs = [
        ("baseline", {}, 1e-5),
        ("4 workers, uneven shards (30 = 8+8+7+7)", {"num_workers": 4}, 1e-5),
        ("3 workers x 2 micro-batches", {"num_workers": 3, "num_micro_batches": 2}, 1e-5),
        ("checkpointing, segments of 2", {"segment_size": 2}, 1e-5),
        ("ZeRO-1 on 3 workers", {"num_workers": 3, "zero_stage": 1}, 1e-5),
        ("everything, float32", {"num_workers": 2, "num_micro_batches": 3, "segment_size": 3, "zero_stage": 2}, 1e-5),
        ("everything, mixed precision", {"num_workers": 2, "num_micro_batches": 2, "segment_size": 2,
                                         "zero_stage": 1, "precision": "mixed"}, 2e-3),
    ]
    tolerance = {name: tol for name, _, tol in configs}
    cases = [(name, _fixed({**SMALL, **cfg})) for name, cfg, _ in configs]

    def compare(label: str, got: Any, expected: dict) -> None:
        if not isinstance(got, dict):
            raise CheckFailure(f"[{label}] must return the run record (a dict), got {type(got).__name__}")
        missing = sorted(set(expected) - set(got))
        if missing:
            raise CheckFailure(f"[{label}] the run record misses {missing}")
        losses, want = np.asarray(got["losses"], dtype=float), np.asarray(expected["losses"])
        if losses.shape != want.shape:
            raise CheckFailure(f"[{label}] {losses.size} losses recorded, expected one per step ({want.size})")
        worst = float(np.max(np.abs(losses - want) / np.abs(want)))
        if worst > tolerance[label]:
            step = int(np.argmax(np.abs(losses - want) / np.abs(want)))
            raise CheckFailure(f"[{label}] loss at step {step} is {float(losses[step])!r}, expected {float(want[step])!r} "
                               f"(relative difference {worst:.3g}, allowed {tolerance[label]:g})")
        report = got["memory_report"]
        for key, value in expected["memory_report"].items():
            if not isinstance(report, dict) or not np.isclose(float(report.get(key, np.nan)), value, rtol=1e-9):
                raise CheckFailure(f"[{label}] memory_report[{key!r}] is {report.get(key) if isinstance(report, dict) else report!r}, "
                                   f"expected {value!r} (trainsys.memtrain.memory.memory_report of the config)")
        if got["bytes_communicated_per_worker"] != expected["bytes_communicated_per_worker"]:
            raise CheckFailure(f"[{label}] bytes_communicated_per_worker is {got['bytes_communicated_per_worker']!r}, "
                               f"expected {expected['bytes_communicated_per_worker']!r} (ring: 2(N-1)/N of the "
                               "float32 gradient per step, per worker)")

    invalid = [
        ("zero_stage = 4", BAD, "zero_stage", _fixed({**SMALL, "zero_stage": 4})),
        ("precision = 'bf16'", BAD, "precision", _fixed({**SMALL, "precision": "bf16"})),
        ("num_workers = 0", BAD, "num_workers", _fixed({**SMALL, "num_workers": 0})),
    ]
    return run_cases("train", fn, ref.train, cases, compare, invalid)
