"""The transformer explorer held to the measured GPT on a grid: the evidence record ``memory-gpt``.

``make reproduce REPRODUCE_ARGS="--section memory-gpt"`` (:func:`memory_gpt_section`) measures
:data:`GRID` (4 shapes × 2 precisions × 3 recomputations = 24 single-process configurations), :data:`SHARDED`
(per rank under ZeRO-1 and FSDP2, 2 and 4 gloo processes) and the peak of a whole step of the small GPT, and
writes the record with :func:`trainsys.evidence.write_record`. ``make bench`` re-measures the grid and prints
the largest relative error per category (:func:`grid_errors`).
"""

from __future__ import annotations

import itertools
import os
import time
import warnings

from trainsys.memtrain.measured_memory import (
    CATEGORIES, PRECISIONS, RECOMPUTE, compare_sharded, compare_step, explorer_config, measure_step_peak)
from trainsys.memtrain.transformer_memory import transformer_memory
from trainsys.models.gpt import GPTConfig, small_config

DROPOUT = 0.1  # dropout on, as GPT-2 trains and the explorer's GPT-2 style assumes
SMALL = GPTConfig(**{**small_config(65).__dict__, "dropout": DROPOUT})  # the course's character GPT, 65 symbols
SHAPES: dict[str, tuple[GPTConfig, int]] = {
    "small GPT (L2 h64 a4 s64)": (SMALL, 8),
    "L4 h128 a4 s128": (GPTConfig(65, 128, 4, 4, 128, DROPOUT), 4),
    "GPT-2 vocab, 12 heads (L2 h192 s128)": (GPTConfig(50257, 128, 2, 12, 192, DROPOUT), 2),
    "one head, one sequence (L3 h48 s32)": (GPTConfig(65, 32, 3, 1, 48, DROPOUT), 1),
}
"""Shape name → (model configuration, micro-batch)."""
GRID = list(itertools.product(SHAPES, PRECISIONS, RECOMPUTE))
SHARDED = [("small GPT (L2 h64 a4 s64)", n, stage) for n in (2, 4) for stage in (1, 3)] + \
    [("L4 h128 a4 s128", 3, stage) for stage in (1, 3)]
QUICK = [("small GPT (L2 h64 a4 s64)", "fp32", "none"), ("L4 h128 a4 s128", "autocast_bf16", "selective"),
         ("one head, one sequence (L3 h48 s32)", "fp32", "full")]
"""The configurations CI re-measures (``tests/test_measured_memory.py``)."""


def _pct(x: float) -> float:
    return round(100.0 * x, 3)


def grid_errors(configs: list[tuple[str, str, str]] = GRID) -> list[dict]:
    """Measure and predict each ``(shape, precision, recompute)``; one dict per configuration with
    ``measured``, ``predicted`` and ``error`` (relative, per category of :data:`CATEGORIES`)."""
    out = []
    for name, precision, recompute in configs:
        config, batch = SHAPES[name]
        out.append({"shape": name, "precision": precision, "recompute": recompute,
                    **compare_step(config, batch, precision, recompute)})
    return out


def largest_errors(rows: list[dict], categories=CATEGORIES) -> dict[str, float]:
    """The largest absolute relative error per category over ``rows`` (signed, as measured)."""
    return {c: max((r["error"][c] for r in rows if c in r["error"]), key=abs) for c in categories}


def _peak_rows() -> list[list]:
    rows = []
    for precision, recompute in itertools.product(PRECISIONS, RECOMPUTE):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # export_memory_timeline's deprecation notice
            peak = measure_step_peak(SMALL, SHAPES["small GPT (L2 h64 a4 s64)"][1], precision, recompute)
        total = transformer_memory(explorer_config(SMALL, 8, precision, recompute), dropout_masks="dtype")["total"]
        at = peak["at_peak"]
        rows.append([precision, recompute, peak["peak"], total, _pct((total - peak["peak"]) / peak["peak"]),
                     at["parameter"], at["optimizer_state"], at["gradient"], at["activation"],
                     at["autograd_detail"] + at["temporary"], at["input"] + at["unknown"]])
    return rows


def memory_gpt_section(quick: bool = False, workers: int = 1) -> dict:
    """``make reproduce`` section ``memory-gpt``: measure, compare and write the record (``quick``: the
    :data:`QUICK` subset, nothing written). ``workers`` is unused: the sharded runs start their own ranks."""
    from trainsys.evidence import write_record

    start = time.perf_counter()
    rows = grid_errors(QUICK if quick else GRID)
    sharded = [] if quick else [(name, n, stage, compare_sharded(SHAPES[name][0], n, stage))
                                for name, n, stage in SHARDED]
    worst = largest_errors(rows)
    worst_sharded = largest_errors([s for *_, s in sharded], CATEGORIES[:3]) if sharded else {}
    small = next(r for r in rows if r["shape"].startswith("small") and r["precision"] == "fp32"
                 and r["recompute"] == "none")
    figures = {
        "grid": {"columns": ["shape", "precision", "recompute", "parameters %", "gradients %", "optimizer %",
                             "activations %", "measured activations (bytes)"],
                 "rows": [[r["shape"], r["precision"], r["recompute"], *(_pct(r["error"][c]) for c in CATEGORIES),
                           r["measured"]["activations"]] for r in rows],
                 "caption": "Explorer minus measurement, relative to the measurement, per category."},
        "largest_error": {"columns": ["category", "largest error %", "configurations"],
                          "rows": [[c, _pct(worst[c]), len(rows)] for c in CATEGORIES]
                          + [[f"{c} per rank (ZeRO-1, FSDP2)", _pct(worst_sharded[c]), len(sharded)]
                             for c in worst_sharded],
                          "caption": "Largest relative error of the explorer against the measured GPT (target 5 %)."},
        "small_gpt": {"columns": ["category", "predicted (bytes)", "measured (bytes)", "error %"],
                      "rows": [[c, small["predicted"][c], small["measured"][c], _pct(small["error"][c])]
                               for c in CATEGORIES],
                      "formats": {"predicted (bytes)": "{:,.0f}", "measured (bytes)": "{:,}", "error %": "{:+.2f}"},
                      "caption": "The small GPT (2 layers, width 64, 4 heads, context 64, batch 8, dropout 0.1), "
                                 "fp32, one Adam step."},
    }
    if not quick:
        figures["sharded"] = {
            "columns": ["shape", "workers", "ZeRO stage", "parameters (fullest rank)", "gradients", "optimizer",
                        "parameters %", "gradients %", "optimizer %"],
            "rows": [[name, n, stage, *(s["measured"][c] for c in CATEGORIES[:3]),
                      *(_pct(s["error"][c]) for c in CATEGORIES[:3])] for name, n, stage, s in sharded],
            "caption": "Stage 1: ZeroRedundancyOptimizer (whole tensors per rank: its fullest rank is what "
                       "zero1_partition predicts, byte for byte, see the record's extra); stage 3: FSDP2 fully_shard."}
        figures["peak"] = {
            "columns": ["precision", "recompute", "measured peak", "explorer total", "explorer vs peak %",
                        "at peak: parameters", "optimizer", "gradients", "activations",
                        "activation gradients and temporaries", "inputs and other"],
            "rows": _peak_rows(),
            "caption": "Small GPT, batch 8: the peak of live CPU bytes over one steady-state step (torch.profiler "
                       "memory timeline) and what was alive at that instant, by the profiler's categories."}
    config = {"shapes": {k: [v[0].__dict__, v[1]] for k, v in SHAPES.items()}, "precisions": list(PRECISIONS),
              "recompute": list(RECOMPUTE), "sharded": SHARDED, "optimizer": "Adam", "dropout_masks": "dtype (CPU)",
              "checkpoint": "torch.utils.checkpoint, use_reentrant=True"}
    extra = {"rows": rows, "sharded": [{"shape": name, "workers": n, "stage": stage, **s} for name, n, stage, s in sharded]}
    record = {"figures": figures, "config": config, "extra": extra}
    if not quick:
        record = write_record("memory-gpt", datasets=[], config=config, seeds=[0], figures=figures,
                              wall_s=time.perf_counter() - start,
                              notes="Synthetic token ids (bytes do not depend on the data). Errors are "
                                    "(explorer - measured) / measured. Load average at the end: "
                                    f"{os.getloadavg()}.", extra=extra)
    return record


def measured_errors(record: dict | None = None) -> dict[str, float]:
    """The record's largest error in percent per category (:data:`CATEGORIES`, and ``"<category> per rank"``
    for ZeRO-1/FSDP2) plus ``configurations`` and ``sharded_runs``: what the explorer shows beside its numbers."""
    from trainsys.evidence import load_record

    rows = (record or load_record("memory-gpt"))["figures"]["largest_error"]["rows"]
    out = {name.replace(" (ZeRO-1, FSDP2)", ""): error for name, error, _ in rows}
    out["configurations"] = rows[0][2]
    out["sharded_runs"] = rows[-1][2]
    return out


def measured_error_note(record: dict | None = None) -> str:
    """One sentence for the explorer: the largest measured error per category (the JavaScript twin prints the
    same figures, held equal by ``tests/test_transformer_explorer.py``)."""
    e = measured_errors(record)
    return (f"Measured on the course's GPT ({e['configurations']} configurations, record memory-gpt), largest error: "
            f"parameters {e['parameters']:+.1f}%, gradients {e['gradients']:+.1f}%, optimizer state "
            f"{e['optimizer_states']:+.1f}%, activations {e['activations']:+.1f}%; per rank under ZeRO-1/FSDP2 "
            f"({e['sharded_runs']} runs) optimizer state {e['optimizer_states per rank']:+.1f}%.")
