"""Mutants for Module 1, Part 7, lessons 36–39: the accounting mistakes the notebooks name."""

from __future__ import annotations

import numpy as np

from trainsys.memtrain import memory as ref
from trainsys.memtrain.checkpointing import checkpointing_memory_timeline

REFERENCE = "trainsys.memtrain.memory"


def _param_bytes_own_dtype(params_or_shapes, dtype=np.float32):
    ref.compute_param_memory_bytes(params_or_shapes, dtype)
    leaves = params_or_shapes if isinstance(params_or_shapes, list) else [params_or_shapes]
    total = 0
    for tree in leaves:
        for v in tree.values():
            total += v.nbytes if isinstance(v, np.ndarray) else int(np.prod(v)) * np.dtype(dtype).itemsize
    return total


def _param_bytes_4(params_or_shapes, dtype=np.float32):
    return ref.count_parameters(params_or_shapes) * 4 if ref.compute_param_memory_bytes(params_or_shapes, dtype) else 0


def _optimizer(variant: str):
    def wrong(num_params, precision="mixed", num_workers=1, zero_stage=0):
        out = ref.compute_optimizer_memory_bytes(num_params, precision, num_workers, zero_stage)
        psi, N = num_params, num_workers
        if variant == "k8_for_mixed" and precision == "mixed":  # forgets the float32 master copy
            states = 8 * psi / (N if zero_stage >= 1 else 1)
            out = {**out, "optimizer_states": states}
        elif variant == "stage2_keeps_grads":  # stage 2 shards only the states
            grads = (2 if precision == "mixed" else 4) * psi / (N if zero_stage >= 3 else 1)
            out = {**out, "gradients": grads}
        elif variant == "stage3_params_only":
            if zero_stage == 3:
                out = {**out, "gradients": out["gradients"] * N, "optimizer_states": out["optimizer_states"] * N}
        out["total"] = out["parameters"] + out["gradients"] + out["optimizer_states"]
        return out

    return wrong


def _activations(variant: str):
    def wrong(layer_widths, batch, dtype=np.float32, num_micro_batches=1, segment_size=None):
        ref.compute_peak_activation_memory_bytes(layer_widths, batch, dtype, num_micro_batches, segment_size)
        itemsize = np.dtype(dtype).itemsize
        if variant == "floor_rows":
            rows = batch // num_micro_batches
        else:
            rows = -(-batch // num_micro_batches)
        if variant == "stored_only":  # stored activations only, no backward working set
            L = len(layer_widths) - 1
            s = segment_size or L
            starts = range(s, L, s)
            rebuilt = max(sum(layer_widths[k + 1:min(k + s, L)]) for k in range(0, L, s)) if segment_size else 0
            kept = sum(layer_widths[1:L]) if segment_size is None else sum(layer_widths[k] for k in starts) + rebuilt
            return rows * itemsize * kept
        timeline = checkpointing_memory_timeline(layer_widths, rows, segment_size, itemsize,
                                                 include_gradients=(variant == "with_gradients"))
        return max(b for _, b in timeline)

    return wrong


def _compare(variant: str):
    def wrong(config):
        rows = ref.compare_memory(config)
        if variant == "no_baseline":
            return rows[1:]
        if variant == "together_is_sum_of_savings":
            base = rows[0]
            together = dict(rows[-1])
            saved = sum(base["total"] - r["total"] for r in rows[1:-1])
            together["total"] = base["total"] - saved
            return rows[:-1] + [together]
        return rows

    return wrong


MUTANTS = {
    "compute_param_memory_bytes": [
        ("counts arrays by their own dtype, ignoring the dtype asked for", _param_bytes_own_dtype),
        ("assumes 4 bytes per parameter whatever the dtype", _param_bytes_4),
    ],
    "compute_optimizer_memory_bytes": [
        ("K = 8 in mixed precision: forgets the float32 master copy", _optimizer("k8_for_mixed")),
        ("stage 2 still keeps every gradient", _optimizer("stage2_keeps_grads")),
        ("stage 3 shards only the parameters", _optimizer("stage3_params_only")),
    ],
    "compute_peak_activation_memory_bytes": [
        ("micro-batch of floor(batch/M) rows instead of the largest one", _activations("floor_rows")),
        ("counts the parameter gradients as activations", _activations("with_gradients")),
        ("stored activations only, no backward working set", _activations("stored_only")),
    ],
    "compare_memory": [
        ("leaves out the baseline row", _compare("no_baseline")),
        ("adds up the savings of each technique for 'all together'", _compare("together_is_sum_of_savings")),
    ],
}
