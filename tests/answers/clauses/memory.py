"""Witnesses for ``trainsys.grading.memory`` (lessons 36–39): per clause, wrong answers that break it."""

from __future__ import annotations

import math

import numpy as np

from tests.answers.clauses import existing
from trainsys.memtrain import memory as ref


# --- Lesson 36 -------------------------------------------------------------------------------------
def _param_bytes_allocating_shapes(params_or_shapes, dtype=np.float32):
    """Right count, but each shape tuple in the caller's tree is replaced by np.empty(shape, dtype) (to read
    its nbytes)."""
    result = ref.compute_param_memory_bytes(params_or_shapes, dtype)

    def walk(node):
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(value, tuple) and all(isinstance(d, int) for d in value):
                node[key] = np.empty(value, dtype)
            else:
                walk(value)

    walk(params_or_shapes)
    return result


def _param_bytes_casting_arrays(params_or_shapes, dtype=np.float32):
    """Right count, but the caller's arrays are replaced by copies cast to ``dtype`` ("stored in dtype")."""
    result = ref.compute_param_memory_bytes(params_or_shapes, dtype)

    def walk(node):
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(value, np.ndarray):
                node[key] = value.astype(dtype)
            else:
                walk(value)

    walk(params_or_shapes)
    return result


def _param_bytes_accepting_int_dtype(params_or_shapes, dtype=np.float32):
    """Refuses booleans but any numeric dtype passes: int64 parameters are priced at 8 bytes."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return ref.count_parameters(params_or_shapes) * dt.itemsize
    return ref.compute_param_memory_bytes(params_or_shapes, dtype)


def _param_bytes_float_leaf_is_scalar(params_or_shapes, dtype=np.float32):
    """A bare number where a leaf belongs is counted as one scalar parameter (as if it were the shape ())."""
    def fix(node):
        if isinstance(node, float):
            return ()
        if isinstance(node, dict):
            return {k: fix(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    return ref.compute_param_memory_bytes(fix(params_or_shapes), dtype)


def _param_bytes_abs_axis(params_or_shapes, dtype=np.float32):
    """A negative axis is taken by its absolute value instead of being refused."""
    def fix(node):
        if isinstance(node, tuple) and all(isinstance(d, int) for d in node):
            return tuple(abs(d) for d in node)
        if isinstance(node, dict):
            return {k: fix(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    return ref.compute_param_memory_bytes(fix(params_or_shapes), dtype)


# --- Lesson 37 -------------------------------------------------------------------------------------
def _optimizer_allocating(num_params, precision="mixed", num_workers=1, zero_stage=0):
    """Right numbers, but the parameter bytes are read off an allocated float32 array of Ψ entries."""
    out = ref.compute_optimizer_memory_bytes(num_params, precision, num_workers, zero_stage)
    np.zeros(num_params, np.float32).nbytes  # noqa: B018 - the allocation is the mistake
    return out


def _optimizer_accepting_zero_params(num_params, precision="mixed", num_workers=1, zero_stage=0):
    """Refuses negative parameter counts only: a model with 0 parameters costs 0 bytes."""
    if num_params == 0 and not isinstance(num_params, bool):
        out = ref.compute_optimizer_memory_bytes(1, precision, num_workers, zero_stage)
        return {k: 0.0 for k in out}
    return ref.compute_optimizer_memory_bytes(num_params, precision, num_workers, zero_stage)


def _optimizer_clamping_workers(num_params, precision="mixed", num_workers=1, zero_stage=0):
    """num_workers below 1 is taken as 1 (max(num_workers, 1)) instead of refused."""
    if isinstance(num_workers, int) and not isinstance(num_workers, bool):
        num_workers = max(num_workers, 1)
    return ref.compute_optimizer_memory_bytes(num_params, precision, num_workers, zero_stage)


def _optimizer_clamping_stage(num_params, precision="mixed", num_workers=1, zero_stage=0):
    """A stage above 3 is taken as 3 (min(zero_stage, 3)) instead of refused."""
    if isinstance(zero_stage, int) and not isinstance(zero_stage, bool):
        zero_stage = min(zero_stage, 3)
    return ref.compute_optimizer_memory_bytes(num_params, precision, num_workers, zero_stage)


# --- Lesson 38 -------------------------------------------------------------------------------------
def _peak_allocating(layer_widths, batch, dtype=np.float32, num_micro_batches=1, segment_size=None):
    """Right number, but the bytes of an activation are read off np.empty((rows, width), dtype).nbytes."""
    result = ref.compute_peak_activation_memory_bytes(layer_widths, batch, dtype, num_micro_batches, segment_size)
    rows = math.ceil(batch / num_micro_batches)
    np.empty((rows, max(layer_widths)), dtype).nbytes  # noqa: B018 - the allocation is the mistake
    return result


def _peak_reversing_widths(layer_widths, batch, dtype=np.float32, num_micro_batches=1, segment_size=None):
    """Right number, but the caller's list is reversed in place to walk the backward pass, and left so."""
    result = ref.compute_peak_activation_memory_bytes(layer_widths, batch, dtype, num_micro_batches, segment_size)
    if isinstance(layer_widths, list):
        layer_widths.reverse()
    return result


def _peak_clamping_segment(layer_widths, batch, dtype=np.float32, num_micro_batches=1, segment_size=None):
    """A segment longer than the network is taken as the whole network (min(s, L)) instead of refused."""
    L = len(layer_widths) - 1
    if isinstance(segment_size, int) and not isinstance(segment_size, bool) and segment_size > L:
        segment_size = L
    return ref.compute_peak_activation_memory_bytes(layer_widths, batch, dtype, num_micro_batches, segment_size)


WITNESSES = {
    "compute_param_memory_bytes": {
        "counting rule": [
            existing("compute_param_memory_bytes", "counts arrays by their own dtype"),
            existing("compute_param_memory_bytes", "counts a shape by its length"),
            existing("compute_param_memory_bytes", "the empty shape () counts 0"),
        ],
        "mutation": [
            ("shape tuples in the caller's tree replaced by np.empty arrays", _param_bytes_allocating_shapes),
            ("the caller's arrays replaced by copies cast to dtype", _param_bytes_casting_arrays),
        ],
        "failure modes": [
            ("an integer dtype accepted", _param_bytes_accepting_int_dtype),
            existing("compute_param_memory_bytes", "accepts a boolean dtype"),
            existing("compute_param_memory_bytes", "an empty list costs 0 bytes"),
            existing("compute_param_memory_bytes", "a nested empty dict/list is accepted"),
            existing("compute_param_memory_bytes", "a None leaf counts 0"),
            ("a float leaf counted as one scalar", _param_bytes_float_leaf_is_scalar),
            ("a negative axis taken by its absolute value", _param_bytes_abs_axis),
        ],
        "metric that proves it correct": [
            existing("compute_param_memory_bytes", "assumes 4 bytes per parameter"),
            existing("compute_param_memory_bytes", "four bytes per parameter always"),
        ],
    },
    "compute_optimizer_memory_bytes": {
        "mutation": [("allocates a float32 array of Ψ entries", _optimizer_allocating)],
        "failure modes": [
            ("num_params = 0 costs 0 bytes", _optimizer_accepting_zero_params),
            ("num_workers < 1 taken as 1", _optimizer_clamping_workers),
            ("zero_stage > 3 taken as 3", _optimizer_clamping_stage),
            existing("compute_optimizer_memory_bytes", "booleans accepted for num_params"),
            existing("compute_optimizer_memory_bytes", "integral floats such as 7.5e9 accepted"),
            existing("compute_optimizer_memory_bytes", "precision case-insensitive"),
        ],
        "metric that proves it correct": [
            existing("compute_optimizer_memory_bytes", "K = 8 in mixed precision: forgets"),
            existing("compute_optimizer_memory_bytes", "stage 2 still keeps every gradient"),
            existing("compute_optimizer_memory_bytes", "stage 3 shards only the parameters (contract"),
        ],
    },
    "compute_peak_activation_memory_bytes": {
        "mutation": [
            ("an activation allocated to read its nbytes", _peak_allocating),
            ("layer_widths reversed in place", _peak_reversing_widths),
        ],
        "failure modes": [
            existing("compute_peak_activation_memory_bytes", "num_micro_batches clamped to [1, n]"),
            ("segment_size > L taken as L", _peak_clamping_segment),
            existing("compute_peak_activation_memory_bytes", "segment_size=0 treated as None"),
            existing("compute_peak_activation_memory_bytes", "booleans accepted"),
            existing("compute_peak_activation_memory_bytes", "an integer dtype accepted"),
        ],
        "metric that proves it correct": [
            existing("compute_peak_activation_memory_bytes", "stored activations only, no backward working set"),
            existing("compute_peak_activation_memory_bytes", "include_gradients=True"),
            existing("compute_peak_activation_memory_bytes", "micro-batch of floor(batch/M) rows"),
        ],
    },
    "compare_memory": {
        "mutation": [existing("compare_memory", "writes the baseline into the caller's config")],
        "failure modes": [
            existing("compare_memory", "key errors do not list missing/unexpected keys"),
            existing("compare_memory", "errors name the bare key"),
            existing("compare_memory", "num_workers > batch accepted"),
            existing("compare_memory", "booleans accepted as integers"),
        ],
        "metric that proves it correct": [
            existing("compare_memory", "leaves out the baseline row"),
            existing("compare_memory", "adds up the savings of each technique"),
            existing("compare_memory", "workers do not split the batch"),
            existing("compare_memory", "mixed-precision rows keep float32 activations"),
            existing("compare_memory", "accumulation row on the workers' batch"),
        ],
    },
}
