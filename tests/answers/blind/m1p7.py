"""Red team, Module 1 Part 7 (memory accounting and full training loop): wrong answers and correct alternatives
written from the release notebooks only."""

from __future__ import annotations

import copy
import math
import numbers
import time

import numpy as np
from tqdm.auto import tqdm

# Given in the lessons' setup cells (earlier lessons' pieces); never the function under test.
from trainsys.memtrain.accumulation import micro_batch_bounds
from trainsys.memtrain.checkpointing import (
    checkpointing_memory_timeline,
    deep_mlp_backward,
    deep_mlp_forward,
    init_deep_mlp_params,
    mlp_backward_checkpointed,
    mlp_forward_checkpointed,
    validate_layer_widths,
)
from trainsys.memtrain.data_parallel import flatten_params, shard_dataset_across_workers, unflatten_params
from trainsys.memtrain.measure import peak_memory_bytes
from trainsys.memtrain.memory import compute_optimizer_memory_bytes as _given_opt_bytes  # lesson 39's setup
from trainsys.memtrain.memory import compute_peak_activation_memory_bytes as _given_peak  # lesson 39's setup
from trainsys.memtrain.memory import memory_report
from trainsys.memtrain.mixed_precision import init_loss_scaler, update_loss_scale
from trainsys.memtrain.mlp import make_synthetic_regression_batch
from trainsys.memtrain.ring_allreduce import ring_all_reduce_mean, ring_bytes_per_worker
from trainsys.memtrain.zero import adam_step, init_adam_state, init_sharded_adam_states, zero_optimizer_step


# ======================================================================================================
# Lesson 36 · compute_param_memory_bytes
# ======================================================================================================

def _cpm_core(params_or_shapes, dtype=np.float32, *, dtype_rule="floating", count="size", itemsize="dtype",
              empty_list_ok=False, nested_empty_ok=False, leaf_none=False, zero_axis_ok=True,
              tuple_of_dicts=True, wrap_dtype_error=True, scalar_shape_counts=1):
    if wrap_dtype_error:
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"dtype {dtype!r} is not a NumPy dtype") from exc
    else:
        dt = np.dtype(dtype)
    if dtype_rule == "floating":
        ok = np.issubdtype(dt, np.floating)
    elif dtype_rule == "not_int":
        ok = not np.issubdtype(dt, np.integer)
    elif dtype_rule == "inexact":
        ok = np.issubdtype(dt, np.inexact)
    else:
        raise AssertionError(dtype_rule)
    if not ok:
        raise TypeError(f"dtype must be floating point, got {dt}")

    def numel(node, top):
        if isinstance(node, np.ndarray):
            if count == "size":
                return node.size
            if count == "nbytes":
                return node.nbytes
            raise AssertionError(count)
        if isinstance(node, tuple) and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                           for d in node):
            for d in node:
                if d < 0 or (d == 0 and not zero_axis_ok):
                    raise ValueError(f"params_or_shapes: negative or empty axis in shape {node}")
            if not node:
                return scalar_shape_counts
            return math.prod(int(d) for d in node) if count == "size" else math.prod(node) * 4
        if isinstance(node, dict) or isinstance(node, list) or (tuple_of_dicts and isinstance(node, tuple)):
            items = list(node.values()) if isinstance(node, dict) else list(node)
            if not items:
                if (isinstance(node, list) and empty_list_ok and top) or (not top and nested_empty_ok):
                    return 0
                raise ValueError("params_or_shapes must not be empty")
            return sum(numel(item, False) for item in items)
        if node is None and leaf_none:
            return 0
        raise TypeError(f"params_or_shapes has an unsupported leaf {node!r}")

    total = numel(params_or_shapes, True)
    if count == "nbytes":
        return int(total)
    size = 4 if itemsize == "four" else dt.itemsize
    return int(total * size)


def _cpm_sums_nbytes(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, count="nbytes")


def _cpm_always_four_bytes(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, itemsize="four")


def _cpm_shape_by_length(params_or_shapes, dtype=np.float32):
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.floating):
        raise TypeError("dtype must be floating")

    def count(node):
        if isinstance(node, np.ndarray):
            return node.size
        if isinstance(node, tuple):
            if any(isinstance(d, int) and d < 0 for d in node):
                raise ValueError("params_or_shapes: negative axis")
            return len(node)
        if isinstance(node, (dict, list)):
            items = list(node.values()) if isinstance(node, dict) else node
            if not items:
                raise ValueError("params_or_shapes is empty")
            return sum(count(i) for i in items)
        raise TypeError("params_or_shapes: bad leaf")

    return int(count(params_or_shapes) * dt.itemsize)


def _cpm_accepts_bool_dtype(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, dtype_rule="not_int")


def _cpm_accepts_complex_dtype(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, dtype_rule="inexact")


def _cpm_empty_list_is_zero(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, empty_list_ok=True)


def _cpm_nested_empty_ok(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, nested_empty_ok=True)


def _cpm_none_leaf_zero(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, leaf_none=True)


def _cpm_rejects_zero_axis(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, zero_axis_ok=False)


def _cpm_rejects_tuple_of_layers(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, tuple_of_dicts=False)


def _cpm_raw_dtype_error(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, wrap_dtype_error=False)


def _cpm_scalar_shape_zero(params_or_shapes, dtype=np.float32):
    return _cpm_core(params_or_shapes, dtype, scalar_shape_counts=0)


def _cpm_alt_stack_walk(params_or_shapes, dtype=np.float32):
    try:
        dt = np.dtype(dtype)
    except Exception as exc:  # noqa: BLE001
        raise TypeError(f"dtype: cannot interpret {dtype!r}") from exc
    if dt.kind != "f":
        raise TypeError(f"dtype must be a floating format, got {dt}")
    stack, psi = [params_or_shapes], 0
    while stack:
        node = stack.pop()
        if isinstance(node, np.ndarray):
            psi += int(node.size)
        elif isinstance(node, tuple) and all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                                             for d in node):
            if any(d < 0 for d in node):
                raise ValueError(f"params_or_shapes: negative axis in {node}")
            n = 1
            for d in node:
                n *= int(d)
            psi += n
        elif isinstance(node, (dict, list, tuple)):
            children = list(node.values()) if isinstance(node, dict) else list(node)
            if not children:
                raise ValueError("params_or_shapes: empty container")
            stack.extend(children)
        else:
            raise TypeError(f"params_or_shapes: unsupported leaf of type {type(node).__name__}")
    return psi * dt.itemsize


# ======================================================================================================
# Lesson 37 · compute_optimizer_memory_bytes
# ======================================================================================================

_PRECISIONS = {"mixed": (2, 2, 12), "fp32": (4, 4, 8)}


def _com_core(num_params, precision="mixed", num_workers=1, zero_stage=0, *, K_mixed=12, shard_rule="zero",
              division="true", bool_check=("num_params", "num_workers", "zero_stage"), accept_float=False,
              order=("num_params", "precision", "num_workers", "zero_stage"), lower_precision=False,
              max_workers_psi=False):
    values = {"num_params": num_params, "num_workers": num_workers, "zero_stage": zero_stage}

    def check(name):
        if name == "precision":
            p = precision.lower() if (lower_precision and isinstance(precision, str)) else precision
            if p not in _PRECISIONS:
                raise ValueError(f"precision must be 'mixed' or 'fp32', got {precision!r}")
            return
        v = values[name]
        if isinstance(v, bool):
            if name in bool_check:
                raise TypeError(f"{name} must be an int, not a bool")
        elif accept_float and isinstance(v, float) and v.is_integer():
            values[name] = v = int(v)
        elif not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {v!r}")
        if name == "zero_stage":
            if not 0 <= v <= 3:
                raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {v}")
        elif v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")

    for name in order:
        check(name)
    psi, N, stage = values["num_params"], values["num_workers"], values["zero_stage"]
    if max_workers_psi and N > psi:
        raise ValueError("num_workers must not exceed num_params")
    p = precision.lower() if lower_precision else precision
    b_p, b_g, K = _PRECISIONS[p]
    if p == "mixed":
        K = K_mixed
    if shard_rule == "zero":
        div = {"parameters": stage >= 3, "gradients": stage >= 2, "optimizer_states": stage >= 1}
    elif shard_rule == "stage2_keeps_grads":
        div = {"parameters": stage >= 3, "gradients": stage >= 3, "optimizer_states": stage >= 1}
    elif shard_rule == "stage3_params_only":
        div = {"parameters": stage >= 3, "gradients": stage == 2, "optimizer_states": stage in (1, 2)}
    else:
        raise AssertionError(shard_rule)
    out = {}
    for key, per in (("parameters", b_p), ("gradients", b_g), ("optimizer_states", K)):
        total = per * psi
        if div[key]:
            total = total / N if division == "true" else total // N
        out[key] = total
    out["total"] = out["parameters"] + out["gradients"] + out["optimizer_states"]
    return out


def _com_k8_mixed(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage, K_mixed=8)


def _com_stage2_keeps_grads(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage, shard_rule="stage2_keeps_grads")


def _com_stage3_params_only(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage, shard_rule="stage3_params_only")


def _com_floor_division(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage, division="floor")


def _com_bool_only_stage(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage, bool_check=("zero_stage",))


def _com_accepts_float(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage, accept_float=True)


def _com_validates_stage_first(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage,
                     order=("zero_stage", "num_workers", "precision", "num_params"))


def _com_case_insensitive(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage, lower_precision=True)


def _com_workers_capped(num_params, precision="mixed", num_workers=1, zero_stage=0):
    return _com_core(num_params, precision, num_workers, zero_stage, max_workers_psi=True)


def _com_alt_divisors(num_params, precision="mixed", num_workers=1, zero_stage=0):
    for name, value in (("num_params", num_params),):
        if type(value) is bool or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer")
        if value < 1:
            raise ValueError(f"{name} must be at least 1")
    if precision not in ("mixed", "fp32"):
        raise ValueError(f"precision must be one of 'mixed', 'fp32' (got {precision!r})")
    if type(num_workers) is bool or not isinstance(num_workers, numbers.Integral):
        raise TypeError("num_workers must be an integer")
    if num_workers < 1:
        raise ValueError("num_workers must be at least 1")
    if type(zero_stage) is bool or not isinstance(zero_stage, numbers.Integral):
        raise TypeError("zero_stage must be an integer")
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError("zero_stage must be in 0..3")
    per = {"parameters": 2, "gradients": 2, "optimizer_states": 12} if precision == "mixed" else \
        {"parameters": 4, "gradients": 4, "optimizer_states": 8}
    first_stage = {"optimizer_states": 1, "gradients": 2, "parameters": 3}
    out = {}
    for key in ("parameters", "gradients", "optimizer_states"):
        out[key] = per[key] * num_params / (num_workers if zero_stage >= first_stage[key] else 1)
    out["total"] = out["parameters"] + out["gradients"] + out["optimizer_states"]
    return out


# ======================================================================================================
# Lesson 38 · compute_peak_activation_memory_bytes
# ======================================================================================================

def _pam_core(layer_widths, batch, dtype=np.float32, num_micro_batches=1, segment_size=None, *, rows="ceil",
              include_gradients=False, reject_bool=True, check_dtype=True, check_widths_min=True,
              allow_tuple=True, clamp_M=False, falsy_segment=False, result="int"):
    kinds = (list, tuple) if allow_tuple else (list,)
    if not isinstance(layer_widths, kinds) or len(layer_widths) < 2:
        raise ValueError("layer_widths must be a list of at least two widths")
    for w in layer_widths:
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
            raise TypeError("layer_widths must hold integers")
        if check_widths_min and w < 1:
            raise ValueError("layer_widths must be >= 1")
    L = len(layer_widths) - 1

    def int_check(value, name):
        if isinstance(value, bool):
            if reject_bool:
                raise TypeError(f"{name} must be an int, not a bool")
        elif not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int")

    int_check(batch, "batch")
    if batch < 1:
        raise ValueError("batch must be >= 1")
    int_check(num_micro_batches, "num_micro_batches")
    if clamp_M:
        num_micro_batches = max(1, min(num_micro_batches, batch))
    if not 1 <= num_micro_batches <= batch:
        raise ValueError(f"num_micro_batches must be in [1, {batch}]")
    if check_dtype:
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError("dtype must be a NumPy dtype") from exc
        if not np.issubdtype(dt, np.floating):
            raise TypeError(f"dtype must be floating, got {dt}")
    else:
        dt = np.dtype(dtype)
    if segment_size is not None and not (falsy_segment and not segment_size):
        int_check(segment_size, "segment_size")
        if not 1 <= segment_size <= L:
            raise ValueError(f"segment_size must be in [1, {L}]")
    elif falsy_segment:
        segment_size = None
    if rows == "ceil":
        r = -(-batch // num_micro_batches)
    elif rows == "floor":
        r = batch // num_micro_batches
    else:
        raise AssertionError(rows)
    timeline = checkpointing_memory_timeline(list(layer_widths), r, segment_size, dt.itemsize,
                                             include_gradients=include_gradients)
    peak = max(b for _, b in timeline)
    return int(peak) if result == "int" else float(peak)


def _pam_floor_rows(*a, **k):
    return _pam_core(*a, **k, rows="floor")


def _pam_counts_gradients(*a, **k):
    return _pam_core(*a, **k, include_gradients=True)


def _pam_accepts_bool(*a, **k):
    return _pam_core(*a, **k, reject_bool=False)


def _pam_accepts_int_dtype(*a, **k):
    return _pam_core(*a, **k, check_dtype=False)


def _pam_accepts_zero_width(*a, **k):
    return _pam_core(*a, **k, check_widths_min=False)


def _pam_rejects_tuple_widths(*a, **k):
    return _pam_core(*a, **k, allow_tuple=False)


def _pam_clamps_micro_batches(*a, **k):
    return _pam_core(*a, **k, clamp_M=True)


def _pam_zero_segment_is_off(*a, **k):
    return _pam_core(*a, **k, falsy_segment=True)


def _pam_returns_float(*a, **k):
    return _pam_core(*a, **k, result="float")


def _pam_stored_only(layer_widths, batch, dtype=np.float32, num_micro_batches=1, segment_size=None):
    """'Activation memory' as what the forward pass keeps for backward only."""
    if not isinstance(layer_widths, (list, tuple)) or len(layer_widths) < 2:
        raise ValueError("layer_widths must hold at least two widths")
    L = len(layer_widths) - 1
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError("batch must be an int >= 1")
    if not 1 <= num_micro_batches <= batch:
        raise ValueError("num_micro_batches out of range")
    if segment_size is not None and not 1 <= segment_size <= L:
        raise ValueError("segment_size out of range")
    r = -(-batch // num_micro_batches)
    beta = np.dtype(dtype).itemsize
    hidden = list(layer_widths[1:-1])
    if segment_size is None:
        kept = sum(hidden)
    else:
        bounds = [layer_widths[i] for i in range(segment_size, L, segment_size)]
        kept = sum(bounds) + max(sum(layer_widths[i + 1:i + segment_size]) for i in range(0, L, segment_size))
    return int(beta * r * kept)


def _pam_alt_finfo(layer_widths, batch, dtype=np.float32, num_micro_batches=1, segment_size=None):
    widths = list(layer_widths) if isinstance(layer_widths, (list, tuple)) else None
    if widths is None or len(widths) < 2 or any(type(w) is bool or not isinstance(w, numbers.Integral) or w < 1
                                                for w in widths):
        raise ValueError(f"layer_widths must be a list of >= 2 positive integers, got {layer_widths!r}")
    for name, value in (("batch", batch), ("num_micro_batches", num_micro_batches)):
        if type(value) is bool or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer")
    if batch < 1:
        raise ValueError("batch must be >= 1")
    if num_micro_batches < 1 or num_micro_batches > batch:
        raise ValueError(f"num_micro_batches must be between 1 and batch={batch}")
    try:
        bits = np.finfo(dtype).bits
        real = np.dtype(dtype).kind == "f"
    except (TypeError, ValueError) as exc:
        raise TypeError(f"dtype must be a floating NumPy dtype, got {dtype!r}") from exc
    if not real:  # np.finfo also answers for complex dtypes
        raise TypeError(f"dtype must be a real floating NumPy dtype, got {dtype!r}")
    if segment_size is not None:
        if type(segment_size) is bool or not isinstance(segment_size, numbers.Integral):
            raise TypeError("segment_size must be None or an integer")
        if not 1 <= segment_size <= len(widths) - 1:
            raise ValueError(f"segment_size must be in [1, {len(widths) - 1}]")
    rows = (batch + num_micro_batches - 1) // num_micro_batches
    moments = checkpointing_memory_timeline(widths, rows, segment_size, bits // 8, include_gradients=False)
    best = 0
    for _, nbytes in moments:
        best = nbytes if nbytes > best else best
    return int(best)


# ======================================================================================================
# Lesson 39 · compare_memory
# ======================================================================================================

_KEYS = ("layer_widths", "batch", "num_micro_batches", "segment_size", "precision", "num_workers", "zero_stage")


def _cm_core(config, *, baseline=True, summed_all=False, split_batch=True, dp_row_rule="n_or_stage",
             dp_name="full", key_fmt="config", list_keys=True, reject_bool=True, check_N_le_n=True,
             copy_config=True, mixed_acts="fp16", accum_uses_N=False):
    if not isinstance(config, dict):
        raise TypeError("config must be a dict")
    missing, extra = set(_KEYS) - set(config), set(config) - set(_KEYS)
    if missing or extra:
        if list_keys:
            raise ValueError(f"config: missing {sorted(missing)}, unexpected {sorted(extra)}")
        raise ValueError("config has the wrong keys")
    c = dict(config) if copy_config else config

    def name(key):
        return f"config[{key!r}]" if key_fmt == "config" else key

    def int_in(key, low, high):
        v = c[key]
        if (isinstance(v, bool) and reject_bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name(key)} must be an int")
        if not low <= v <= high:
            raise ValueError(f"{name(key)} must be in [{low}, {high}], got {v}")

    w = c["layer_widths"]
    if not isinstance(w, (list, tuple)) or len(w) < 2 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1
                                                             for x in w):
        raise ValueError(f"{name('layer_widths')} must be >= 2 positive ints")
    L = len(w) - 1
    int_in("batch", 1, float("inf"))
    n = c["batch"]
    int_in("num_workers", 1, n if check_N_le_n else float("inf"))
    N = c["num_workers"]
    int_in("num_micro_batches", 1, -(-n // N))
    if c["segment_size"] is not None:
        int_in("segment_size", 1, L)
    if c["precision"] not in ("fp32", "mixed"):
        raise ValueError(f"{name('precision')} must be 'fp32' or 'mixed'")
    int_in("zero_stage", 0, 3)
    psi = sum(a * b + b for a, b in zip(w[:-1], w[1:]))

    def report(cfg):
        states = _given_opt_bytes(psi, cfg["precision"], cfg["num_workers"], cfg["zero_stage"])
        dt = np.float16 if (cfg["precision"] == "mixed" and mixed_acts == "fp16") else np.float32
        rows = -(-n // cfg["num_workers"]) if split_batch else n
        acts = _given_peak(list(w), rows, dt, cfg["num_micro_batches"], cfg["segment_size"])
        row = {"parameters": states["parameters"], "gradients": states["gradients"],
               "optimizer_states": states["optimizer_states"], "activations": acts}
        row["total"] = row["parameters"] + row["gradients"] + row["optimizer_states"] + row["activations"]
        return row

    base = dict(c, num_micro_batches=1, segment_size=None, precision="fp32", num_workers=1, zero_stage=0)
    variants = []
    if baseline:
        variants.append(("baseline", base))
    if c["num_micro_batches"] > 1:
        acc = dict(base, num_micro_batches=c["num_micro_batches"])
        if accum_uses_N:
            acc["num_workers"] = N
        variants.append((f"accumulation (M={c['num_micro_batches']})", acc))
    if c["segment_size"] is not None:
        variants.append((f"checkpointing (s={c['segment_size']})", dict(base, segment_size=c["segment_size"])))
    if c["precision"] == "mixed":
        variants.append(("mixed precision", dict(base, precision="mixed")))
    show_dp = (N > 1 or c["zero_stage"] > 0) if dp_row_rule == "n_or_stage" else N > 1
    if show_dp:
        label = f"{N} workers, ZeRO-{c['zero_stage']}"
        if dp_name == "short" and c["zero_stage"] == 0:
            label = f"{N} workers"
        variants.append((label, dict(base, num_workers=N, zero_stage=c["zero_stage"])))
    rows = [dict({"setup": s}, **report(cfg)) for s, cfg in variants]
    if summed_all:
        b = report(base)
        together = {k: b[k] - sum(b[k] - r[k] for r in rows[1:]) for k in b}
        rows.append(dict({"setup": "all together"}, **together))
    else:
        rows.append(dict({"setup": "all together"}, **report(c)))
    if not copy_config:  # "reuse" the caller's dict for the last variant: leaves it pointing at the baseline
        config.update(base)
    return rows


def _cm_no_baseline(config):
    return _cm_core(config, baseline=False)


def _cm_sums_savings(config):
    return _cm_core(config, summed_all=True)


def _cm_workers_keep_batch(config):
    return _cm_core(config, split_batch=False)


def _cm_dp_row_needs_workers(config):
    return _cm_core(config, dp_row_rule="n_only")


def _cm_dp_name_without_stage0(config):
    return _cm_core(config, dp_name="short")


def _cm_bare_key_names(config):
    return _cm_core(config, key_fmt="bare")


def _cm_unlisted_keys(config):
    return _cm_core(config, list_keys=False)


def _cm_accepts_bool(config):
    return _cm_core(config, reject_bool=False)


def _cm_no_workers_upper_bound(config):
    return _cm_core(config, check_N_le_n=False)


def _cm_writes_into_config(config):
    return _cm_core(config, copy_config=False)


def _cm_mixed_keeps_fp32_activations(config):
    return _cm_core(config, mixed_acts="fp32")


def _cm_accumulation_row_on_worker_batch(config):
    return _cm_core(config, accum_uses_N=True)


def _cm_alt_table(config):
    if not isinstance(config, dict):
        raise TypeError("config must be a dict")
    keys = set(config)
    if keys != set(_KEYS):
        raise ValueError(f"config keys: missing {sorted(set(_KEYS) - keys)}, unexpected {sorted(keys - set(_KEYS))}")
    widths = config["layer_widths"]
    if not isinstance(widths, (list, tuple)) or len(widths) < 2 or \
            any(type(x) is bool or not isinstance(x, numbers.Integral) or x < 1 for x in widths):
        raise ValueError("config['layer_widths'] must be a list of at least two positive integers")

    def integer(key, lo, hi):
        v = config[key]
        if type(v) is bool or not isinstance(v, numbers.Integral):
            raise TypeError(f"config[{key!r}] must be an integer")
        if v < lo or v > hi:
            raise ValueError(f"config[{key!r}]={v} is outside [{lo}, {hi}]")
        return int(v)

    n = integer("batch", 1, math.inf)
    N = integer("num_workers", 1, n)
    M = integer("num_micro_batches", 1, math.ceil(n / N))
    s = config["segment_size"]
    if s is not None:
        s = integer("segment_size", 1, len(widths) - 1)
    if config["precision"] not in ("fp32", "mixed"):
        raise ValueError(f"config['precision'] must be 'fp32' or 'mixed', got {config['precision']!r}")
    stage = integer("zero_stage", 0, 3)
    psi = sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:]))
    plan = [("baseline", {})]
    if M > 1:
        plan.append((f"accumulation (M={M})", {"M": M}))
    if s is not None:
        plan.append((f"checkpointing (s={s})", {"s": s}))
    if config["precision"] == "mixed":
        plan.append(("mixed precision", {"precision": "mixed"}))
    if N > 1 or stage > 0:
        plan.append((f"{N} workers, ZeRO-{stage}", {"N": N, "stage": stage}))
    plan.append(("all together", {"M": M, "s": s, "precision": config["precision"], "N": N, "stage": stage}))
    rows = []
    for label, o in plan:
        prec, NN, st = o.get("precision", "fp32"), o.get("N", 1), o.get("stage", 0)
        ms = _given_opt_bytes(psi, prec, NN, st)
        acts = _given_peak(list(widths), -(-n // NN), np.dtype("float16" if prec == "mixed" else "float32"),
                           o.get("M", 1), o.get("s"))
        parts = [ms["parameters"], ms["gradients"], ms["optimizer_states"], acts]
        rows.append({"setup": label, "parameters": parts[0], "gradients": parts[1], "optimizer_states": parts[2],
                     "activations": parts[3], "total": sum(parts)})
    return rows


# ======================================================================================================
# Lesson 40 · train
# ======================================================================================================

TRAIN_DEFAULTS = {
    "layer_widths": [16, 64, 64, 64, 64, 4], "n": 512, "batch": 64, "steps": 40, "lr": 3e-3,
    "num_workers": 1, "num_micro_batches": 1, "segment_size": None, "precision": "fp32", "zero_stage": 0,
    "seed": 0, "progress": False, "max_retries": 3, "lr_backoff": 0.5, "explode_factor": 10.0,
}


def _train_validate(config, *, m_bound="floor", reject_bool=True, check_progress=True, check_seed_sign=True,
                    check_lr_finite=True, deep=True, check_backoff_below_one=True):
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise TypeError("config must be a dict or None")
    unknown = sorted(set(config) - set(TRAIN_DEFAULTS))
    if unknown:
        raise ValueError(f"config has unknown keys {unknown}")
    merged = copy.deepcopy(TRAIN_DEFAULTS) if deep else dict(TRAIN_DEFAULTS)
    merged.update(copy.deepcopy(config) if deep else config)
    c = merged

    def integer(key, lo, hi=math.inf):
        v = c[key]
        if (isinstance(v, bool) and reject_bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"config[{key!r}] must be an int, got {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"config[{key!r}] must be in [{lo}, {hi}], got {v}")

    try:
        widths = validate_layer_widths(c["layer_widths"])
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"config['layer_widths']: {exc}") from exc
    if deep:
        c["layer_widths"] = list(widths)
    integer("n", 1)
    integer("batch", 1, c["n"])
    integer("steps", 1)
    lr = c["lr"]
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("config['lr'] must be a real number")
    if (check_lr_finite and not math.isfinite(lr)) or not lr > 0:
        raise ValueError(f"config['lr'] must be finite and > 0, got {lr}")
    integer("num_workers", 1, c["batch"])
    bound = c["batch"] // c["num_workers"] if m_bound == "floor" else -(-c["batch"] // c["num_workers"])
    integer("num_micro_batches", 1, bound)
    L = len(widths) - 1
    if c["segment_size"] is not None:
        integer("segment_size", 1, L)
    if c["precision"] not in ("fp32", "mixed"):
        raise ValueError(f"config['precision'] must be 'fp32' or 'mixed', got {c['precision']!r}")
    integer("zero_stage", 0, 3)
    integer("seed", 0 if check_seed_sign else -math.inf)
    if check_progress and not isinstance(c["progress"], bool):
        raise TypeError("config['progress'] must be a bool")
    integer("max_retries", 0)
    for key, lo, hi in (("lr_backoff", 0.0, 1.0 if check_backoff_below_one else math.inf),
                        ("explode_factor", 1.0, math.inf)):
        v = c[key]
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"config[{key!r}] must be a real number, got {v!r}")
        if not (math.isfinite(v) and lo < v < hi):
            raise ValueError(f"config[{key!r}] must be finite and in ({lo}, {hi}), got {v}")
    return c


def _train_core(config=None, *, weighting="sums", bytes_rule="ring_max", exchange=True, report_stage=True,
                report_batch="total", count_skipped_bytes=True, skip_rule="any", loss_on_skip="record",
                scale_record="before", growth_interval=50, init_scale=2.0 ** 6, update_scaler=True,
                epoch_rule="per_epoch", final_dtype="master", key_base=0, fp32_scale=1.0, skipped_type=bool,
                loss_rule="union", rollback_keeps_update=False, reason_words=("non-finite loss", "exploding loss"),
                finite_only=False, stop_keeps_bad=False, stopped_text="step", throughput_clock="steps",
                **validate):
    t0 = time.perf_counter()
    c = _train_validate(config, **validate)
    widths, n_data, batch, steps = c["layer_widths"], c["n"], c["batch"], c["steps"]
    N, M, s, precision, stage, seed = (c["num_workers"], c["num_micro_batches"], c["segment_size"], c["precision"],
                                       c["zero_stage"], c["seed"])
    d_in, d_out, L = widths[0], widths[-1], len(widths) - 1
    X, Y = make_synthetic_regression_batch(n_data, d_in, d_out, np.random.default_rng(seed))
    layers = init_deep_mlp_params(widths, np.random.default_rng(seed + 2))
    params = {}
    for l, layer in enumerate(layers):
        params[f"W{l}"] = layer["W"]
        params[f"b{l}"] = layer["b"]
    psi = sum(v.size for v in params.values())
    state = init_adam_state(params) if stage == 0 else init_sharded_adam_states(params, N)
    scaler = init_loss_scaler(init_scale=init_scale, growth_interval=growth_interval)
    order = np.random.default_rng(seed + 1)
    dtype = np.float16 if precision == "mixed" else np.float32
    mixed = precision == "mixed"

    def worker_gradient(master, X_k, Y_k, scale):
        compute = [{"W": master[f"W{l}"].astype(dtype), "b": master[f"b{l}"].astype(dtype)} for l in range(L)]
        acc = {k: np.zeros_like(v, dtype=np.float32) for k, v in master.items()}
        loss_sum = 0.0
        for a, b in micro_batch_bounds(X_k.shape[0], M):
            x, y = X_k[a:b].astype(dtype), Y_k[a:b]
            if s is None:
                Y_hat, cache = deep_mlp_forward(compute, x)
            else:
                Y_hat, cache = mlp_forward_checkpointed(compute, x, s)
            diff = Y_hat.astype(np.float32) - y
            loss_sum += float(np.sum(diff.astype(np.float64) ** 2) / d_out)
            dY = (diff * (2 * scale / d_out)).astype(dtype)
            grads = deep_mlp_backward(compute, cache, dY) if s is None else \
                mlp_backward_checkpointed(compute, cache, dY)[0]
            for l, g in enumerate(grads):
                acc[f"W{l}"] += g["W"].astype(np.float32) / np.float32(scale)
                acc[f"b{l}"] += g["b"].astype(np.float32) / np.float32(scale)
        return acc, loss_sum, X_k.shape[0]

    def one_step(params, state, scaler, Xb, Yb, lr):
        hp = {"lr": lr, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
        scale = float(scaler["scale"]) if mixed else 1.0
        shards = shard_dataset_across_workers(Xb, Yb, N)
        sums = [worker_gradient(params, X_k, Y_k, scale) for X_k, Y_k in shards]
        if loss_rule == "union":
            loss = sum(l for _, l, _ in sums) / batch
        else:
            loss = sum(l / n_k for _, l, n_k in sums) / N
        if weighting == "sums":
            worker_grads = [{k: g * np.float32(N / batch) for k, g in S.items()} for S, _, _ in sums]
        else:
            worker_grads = [{k: g / np.float32(n_k) for k, g in S.items()} for S, _, n_k in sums]
        if skip_rule == "any":
            finite = all(np.all(np.isfinite(g)) for wg in worker_grads for g in wg.values())
        else:
            finite = all(np.all(np.isfinite(g)) for g in worker_grads[0].values())
        if finite:
            if not exchange:
                params, state = (adam_step(params, worker_grads[0], state, hp) if stage == 0 else
                                 zero_optimizer_step(params, [worker_grads[0]] * N, state, hp))
            elif stage == 0:
                results, _ = ring_all_reduce_mean([flatten_params(g) for g in worker_grads])
                params, state = adam_step(params, unflatten_params(results[0], params), state, hp)
            else:
                params, state = zero_optimizer_step(params, worker_grads, state, hp)
        new_scaler = update_loss_scale(scaler, not finite) if (mixed and update_scaler) else scaler
        if bytes_rule == "ring_max":  # the lesson's rule by stage (s = ceil(psi / N) floats of 4 bytes)
            shard = -(-psi // N)
            if stage == 3:  # every micro-batch: forward gathers, backward gathers, reduce-scatter
                nbytes = 3 * M * (N - 1) * shard * 4
            elif stage == 2:  # a reduce-scatter per micro-batch, the all-gather if the step is taken
                nbytes = (M + (1 if finite else 0)) * (N - 1) * shard * 4
            else:
                nbytes = max(ring_bytes_per_worker(psi, N, 4))
        elif bytes_rule == "whole":
            nbytes = 4 * psi if N > 1 else 0
        else:
            raise AssertionError(bytes_rule)
        if not finite and not count_skipped_bytes:
            nbytes = 0
        recorded_scale = scale if scale_record == "before" else (float(new_scaler["scale"]) if mixed else fp32_scale)
        if not mixed:
            recorded_scale = fp32_scale
        if not finite and loss_on_skip == "nan":
            loss = float("nan")
        entry = {"loss": float(loss), "skipped": skipped_type(not finite), "bytes": int(nbytes),
                 "scale": recorded_scale}
        return params, state, new_scaler, entry

    per_epoch = n_data // batch if epoch_rule == "per_epoch" else -(-n_data // batch)
    history, losses, total_bytes, peak = [], [], 0, 0
    perm = None
    # The rollback guard: a deep copy of the state whose loss was last accepted, the best loss, the lr.
    lr, best, rollbacks, stopped = float(c["lr"]), math.inf, [], None
    saved = copy.deepcopy((params, state, scaler))
    worker_peaks = []
    step_times = []
    for t in tqdm(range(steps), disable=not c["progress"], desc="train"):
        if epoch_rule == "once":
            if perm is None:
                perm = order.permutation(n_data)
            i = t % (n_data // batch)
        else:
            if t % per_epoch == 0:
                perm = order.permutation(n_data)
            i = t % per_epoch
        rows = perm[i * batch:(i + 1) * batch]
        Xb, Yb = X[rows], Y[rows]
        if t == 0:
            scale0 = float(scaler["scale"]) if mixed else 1.0
            for X_k, Y_k in shard_dataset_across_workers(Xb, Yb, N):
                with np.errstate(all="ignore"):
                    worker_peaks.append(int(peak_memory_bytes(worker_gradient, params, X_k, Y_k, scale0)[1]))
        began = time.perf_counter()
        candidate = copy.deepcopy((params, state, scaler))  # what the step starts from
        if t == 0:
            (params, state, scaler, entry), peak = peak_memory_bytes(one_step, params, state, scaler, Xb, Yb, lr)
        else:
            params, state, scaler, entry = one_step(params, state, scaler, Xb, Yb, lr)
        loss_t = entry["loss"]
        if math.isfinite(loss_t) and (finite_only or loss_t <= c["explode_factor"] * best):
            saved, best = candidate, min(best, loss_t)
        else:
            why = reason_words[0] if not math.isfinite(loss_t) else reason_words[1]
            giving_up = len(rollbacks) >= c["max_retries"]
            if not rollback_keeps_update and not (giving_up and stop_keeps_bad):
                params, state, scaler = copy.deepcopy(saved)
            if giving_up:
                stopped = (f"{why} at step {t} ({loss_t}); gave up after {len(rollbacks)} rollbacks"
                           if stopped_text == "step" else f"{why}; gave up after {len(rollbacks)} rollbacks")
            else:
                lr = lr * c["lr_backoff"]
                rollbacks.append({"step": t, "reason": why, "lr": lr})
        if mixed and scale_record == "after":  # after a rollback: the restored scaler's scale
            entry["scale"] = float(scaler["scale"])
        step_times.append(time.perf_counter() - began)
        history.append({"step": t, **entry, "seconds": step_times[-1]})
        losses.append(entry["loss"])
        total_bytes += entry["bytes"]
        if stopped is not None:
            break
    mem_cfg = {k: c[k] for k in ("layer_widths", "batch", "num_micro_batches", "segment_size", "precision",
                                 "num_workers", "zero_stage")}
    if not report_stage:
        mem_cfg["zero_stage"] = 0
    if report_batch == "per_worker":
        mem_cfg["batch"] = -(-batch // N)
    final = {k: v.copy() for k, v in params.items()}
    if final_dtype == "compute":
        final = {k: v.astype(dtype) for k, v in final.items()}
    if key_base != 0:
        final = {f"{k[0]}{int(k[1:]) + key_base}": v for k, v in final.items()}
    return {
        "config": c,
        "seeds": {"data": seed, "order": seed + 1, "init": seed + 2},
        "history": history,
        "losses": losses,
        "bytes_communicated_per_worker": int(total_bytes),
        "memory_report": memory_report(mem_cfg),
        "measured_first_step_peak_bytes_all_workers": int(peak),
        "measured_peak_bytes_per_worker": worker_peaks,
        "examples_per_second": batch * len(history) / (sum(step_times) if throughput_clock == "steps"
                                                       else time.perf_counter() - t0),
        "rollbacks": rollbacks,
        "stopped": stopped,
        "final_params": final,
        "wall_time_s": time.perf_counter() - t0,
    }


def _train_alt_reference_recipe(config=None):
    return _train_core(config)


def _train_mean_gradients(config=None):
    return _train_core(config, weighting="means")


def _train_whole_gradient_bytes(config=None):
    return _train_core(config, bytes_rule="whole")


def _train_no_exchange(config=None):
    return _train_core(config, exchange=False)


def _train_report_without_stage(config=None):
    return _train_core(config, report_stage=False)


def _train_report_on_worker_batch(config=None):
    return _train_core(config, report_batch="per_worker")


def _train_skipped_steps_send_nothing(config=None):
    return _train_core(config, count_skipped_bytes=False)


def _train_skip_checks_worker0(config=None):
    return _train_core(config, skip_rule="worker0")


def _train_nan_loss_on_skip(config=None):
    return _train_core(config, loss_on_skip="nan")


def _train_scale_recorded_after_update(config=None):
    return _train_core(config, scale_record="after")


def _train_growth_interval_2000(config=None):
    return _train_core(config, growth_interval=2000)


def _train_init_scale_65536(config=None):
    return _train_core(config, init_scale=65536.0)


def _train_scaler_never_updated(config=None):
    return _train_core(config, update_scaler=False)


def _train_one_permutation(config=None):
    return _train_core(config, epoch_rule="once")


def _train_partial_last_batch_epoch(config=None):
    return _train_core(config, epoch_rule="ceil")


def _train_final_params_fp16(config=None):
    return _train_core(config, final_dtype="compute")


def _train_one_based_keys(config=None):
    return _train_core(config, key_base=1)


def _train_fp32_scale_none(config=None):
    return _train_core(config, fp32_scale=None)


def _train_numpy_bool_skipped(config=None):
    return _train_core(config, skipped_type=np.bool_)


def _train_loss_mean_of_worker_means(config=None):
    return _train_core(config, loss_rule="worker_means")


def _train_ceil_micro_bound(config=None):
    return _train_core(config, m_bound="ceil")


def _train_accepts_bool(config=None):
    return _train_core(config, reject_bool=False)


def _train_progress_unchecked(config=None):
    return _train_core(config, check_progress=False)


def _train_negative_seed(config=None):
    return _train_core(config, check_seed_sign=False)


def _train_accepts_inf_lr(config=None):
    return _train_core(config, check_lr_finite=False)


def _train_shallow_config(config=None):
    return _train_core(config, deep=False)


def _train_rollback_keeps_update(config=None):
    return _train_core(config, rollback_keeps_update=True)


def _train_nan_only_guard(config=None):
    return _train_core(config, finite_only=True)


def _train_reason_words(config=None):
    return _train_core(config, reason_words=("nan", "spike"))


def _train_stop_keeps_bad_weights(config=None):
    return _train_core(config, stop_keeps_bad=True)


def _train_stopped_without_step(config=None):
    return _train_core(config, stopped_text="no step")


def _train_throughput_over_wall_time(config=None):
    return _train_core(config, throughput_clock="wall")


def _train_backoff_one_accepted(config=None):
    return _train_core(config, check_backoff_below_one=False)


# ======================================================================================================

MUTANTS = {
    "compute_param_memory_bytes": [
        ("sums nbytes, ignores dtype (contract: 'arrays are counted by shape, not by their own dtype')",
         _cpm_sums_nbytes),
        ("four bytes per parameter always (contract: 'itemsize β = 2, 4 or 8')", _cpm_always_four_bytes),
        ("counts a shape by its length (contract: 'a shape tuple contributes the product of its axes')",
         _cpm_shape_by_length),
        ("accepts a boolean dtype (contract: 'an integer or boolean dtype → TypeError')", _cpm_accepts_bool_dtype),
        ("accepts a complex dtype (contract: 'a NumPy floating dtype')", _cpm_accepts_complex_dtype),
        ("an empty list costs 0 bytes (contract: 'an empty dict or list → ValueError')", _cpm_empty_list_is_zero),
        ("a nested empty dict/list is accepted (contract: 'either one empty is a ValueError')",
         _cpm_nested_empty_ok),
        ("a None leaf counts 0 (contract: 'any other leaf (a string, None, a float) → TypeError')",
         _cpm_none_leaf_zero),
        ("a zero-length axis rejected (contract: 'shape tuples of non-negative ints')", _cpm_rejects_zero_axis),
        ("a tuple of layer dicts rejected (contract: 'a list (or a tuple of non-integers) over its items')",
         _cpm_rejects_tuple_of_layers),
        ("np.dtype's own error for an unknown dtype string (contract: 'TypeError with a message naming dtype')",
         _cpm_raw_dtype_error),
        ("the empty shape () counts 0 (contract: 'the empty tuple () is a scalar parameter and counts 1')",
         _cpm_scalar_shape_zero),
    ],
    "compute_optimizer_memory_bytes": [
        ("K = 8 in mixed precision (contract: '(b_p, b_g, K) = (2, 2, 12) for mixed')", _com_k8_mixed),
        ("stage 2 keeps every gradient (contract: 'gradients ÷ N at stages 2–3')", _com_stage2_keeps_grads),
        ("stage 3 shards only the parameters (contract: 'stage 3 is stage 0 divided by N')",
         _com_stage3_params_only),
        ("floor division for sharded terms (contract: 'Sharded terms are exact quotients (floats)')",
         _com_floor_division),
        ("booleans accepted for num_params / num_workers (contract: 'non-integers or booleans (TypeError)')",
         _com_bool_only_stage),
        ("integral floats such as 7.5e9 accepted (contract: 'non-integers ... (TypeError)')", _com_accepts_float),
        ("validates zero_stage first (contract: 'Validate in this order: num_params, precision, num_workers, "
         "zero_stage')", _com_validates_stage_first),
        ("precision case-insensitive, 'FP32' accepted (contract: 'precision not one of the two names')",
         _com_case_insensitive),
        ("refuses num_workers > num_params (contract: 'num_workers int N >= 1', no upper bound)",
         _com_workers_capped),
    ],
    "compute_peak_activation_memory_bytes": [
        ("rows = n // M (contract: 'r = ceil(n / M)')", _pam_floor_rows),
        ("include_gradients=True (contract: 'include_gradients=False')", _pam_counts_gradients),
        ("stored activations only (contract: 'the maximum over the moments of checkpointing_memory_timeline')",
         _pam_stored_only),
        ("booleans accepted (contract: 'non-integers or booleans — each raises')", _pam_accepts_bool),
        ("an integer dtype accepted (contract: 'a non-floating dtype ... raises')", _pam_accepts_int_dtype),
        ("a tuple of widths refused (contract: 'a list or tuple of at least two integers')",
         _pam_rejects_tuple_widths),
        ("num_micro_batches clamped to [1, n] (contract: 'outside [1, n] ... raises')", _pam_clamps_micro_batches),
        ("segment_size=0 treated as None (contract: 'segment_size outside [1, L] ... raises')",
         _pam_zero_segment_is_off),
        ("returns a float (contract: 'result int')", _pam_returns_float),
    ],
    "compare_memory": [
        ("no baseline row (contract: '\"baseline\" ... always')", _cm_no_baseline),
        ("'all together' = baseline minus the summed savings (contract: 'the config itself')", _cm_sums_savings),
        ("workers do not split the batch (contract: 'each with ceil(n/N) examples')", _cm_workers_keep_batch),
        ("workers row only when N > 1 (contract: 'present when N > 1 or stage > 0')", _cm_dp_row_needs_workers),
        ("workers row named '4 workers' at stage 0 (contract: exact name 'N workers, ZeRO-k')",
         _cm_dp_name_without_stage0),
        ("errors name the bare key (contract: 'naming the key as config[\\'<key>\\']')", _cm_bare_key_names),
        ("key errors do not list missing/unexpected keys (contract: 'listing what is missing or unexpected')",
         _cm_unlisted_keys),
        ("booleans accepted as integers (contract: 'any value out of its range ... error naming that key')",
         _cm_accepts_bool),
        ("num_workers > batch accepted (contract: 'num_workers int N in [1, n]')", _cm_no_workers_upper_bound),
        ("writes the baseline into the caller's config (contract: 'config is read only')", _cm_writes_into_config),
        ("mixed-precision rows keep float32 activations (contract: 'activations are float16 under mixed')",
         _cm_mixed_keeps_fp32_activations),
        ("accumulation row on the workers' batch (contract: 'baseline with the config's M', N = 1)",
         _cm_accumulation_row_on_worker_batch),
    ],
    "train": [
        ("averages the workers' mean gradients (contract: 'multiplies by N/n ... for any shard sizes')",
         _train_mean_gradients),
        ("counts the whole gradient 4Ψ as sent (contract: bytes = max_k of the ring's b(2Ψ - c - c))",
         _train_whole_gradient_bytes),
        ("no exchange: steps on worker 0's gradient (contract: 'The exchange returns the mean over workers')",
         _train_no_exchange),
        ("memory report without the ZeRO stage (contract: 'the memory report equals Lesson 39's')",
         _train_report_without_stage),
        ("memory report given the per-worker batch (contract: Lesson 39's row for the configuration)",
         _train_report_on_worker_batch),
        ("skipped steps count 0 bytes (contract: 'counted on skipped steps too')", _train_skipped_steps_send_nothing),
        ("skips only on worker 0's overflow (contract: 'If any worker's unscaled gradient holds an inf or a NaN, "
         "every worker skips')", _train_skip_checks_worker0),
        ("loss recorded as NaN on a skipped step (contract: 'the loss is still recorded')", _train_nan_loss_on_skip),
        ("growth interval 2000 (contract: 'after 50 clean steps in a row, s <- 2s')", _train_growth_interval_2000),
        ("initial scale 65536 (contract: 's starts at 2^6')", _train_init_scale_65536),
        ("loss scaler never updated (contract: 'the loss scale halves' on overflow)", _train_scaler_never_updated),
        ("one permutation for the whole run (contract: 'a permutation drawn fresh at every epoch start')",
         _train_one_permutation),
        ("epoch of ceil(n/batch) batches (contract: 'E = floor(n_data / n) batches')",
         _train_partial_last_batch_epoch),
        ("final_params in the compute dtype (contract: 'the float32 master weights')", _train_final_params_fp16),
        ("final_params keys W1, b1, ... (contract: 'W0, b0, …, W{L-1}, b{L-1}')", _train_one_based_keys),
        ("history scale None in float32 (contract: 'scale = 1.0 in float32')", _train_fp32_scale_none),
        ("'skipped' as np.bool_ (contract: '\"skipped\": True')", _train_numpy_bool_skipped),
        ("loss = mean of the workers' mean losses (contract: 'the batch's mean loss')",
         _train_loss_mean_of_worker_means),
        ("num_micro_batches bound ceil(batch/N) (contract: '[1, floor(batch/N)]')", _train_ceil_micro_bound),
        ("booleans accepted for integer fields (contract: 'of the wrong type (... TypeError ...)')",
         _train_accepts_bool),
        ("progress not checked (contract: 'progress ... bool')", _train_progress_unchecked),
        ("negative seed accepted (contract: 'seed int >= 0')", _train_negative_seed),
        ("lr = inf accepted (contract: 'lr finite real > 0')", _train_accepts_inf_lr),
        ("shallow config merge: the record shares layer_widths with the caller / TRAIN_DEFAULTS (contract: "
         "'everything in the record is new')", _train_shallow_config),
        ("rollback lowers lr but keeps the exploded weights (contract: 'A bad step is undone (that state back')",
         _train_rollback_keeps_update),
        ("only non-finite losses roll back (contract: 'finite and <= kappa m_t')",
         _train_nan_only_guard),
        ("rollback reasons 'nan' / 'spike' (contract: '\"non-finite loss\" or \"exploding loss\"')",
         _train_reason_words),
        ("a stopped run returns the exploded weights (contract: 'a bad step is undone and ends the run')",
         _train_stop_keeps_bad_weights),
        ("stopped reason without the step (contract: 'stopped ... names it in one line')",
         _train_stopped_without_step),
        ("examples_per_second over the run's wall time (contract: 'batch x steps run / sum of seconds')",
         _train_throughput_over_wall_time),
        ("lr_backoff = 1 accepted (contract: 'lr_backoff ... (0, 1)')", _train_backoff_one_accepted),
    ],
}

ALTERNATIVES = {
    "compute_param_memory_bytes": [("explicit stack walk instead of recursion", _cpm_alt_stack_walk)],
    "compute_optimizer_memory_bytes": [("per-class table of the first stage that shards it", _com_alt_divisors)],
    "compute_peak_activation_memory_bytes": [
        ("np.finfo for the itemsize, rows by (n + M - 1) // M", _pam_alt_finfo),
        # was a mutant: its own check lets 0 through, but checkpointing_memory_timeline (given) refuses it
        # naming layer_widths[k], as the contract asks
        ("checks widths only for type; the given checkpointing_memory_timeline refuses a zero width",
         _pam_accepts_zero_width),
    ],
    "compare_memory": [("a plan of (name, overrides) evaluated by one loop", _cm_alt_table)],
    "train": [
        ("the lesson's recipe written out by the red team (the last good state kept as a deep copy)",
         _train_alt_reference_recipe),
        # was a mutant: the contract does not say which scale a step records (the one it ran with, or the one
        # after its update); the reference records this one, and the check accepts either, consistently
        ("history records the scale after the step's update (the reference's convention)",
         _train_scale_recorded_after_update),
    ],
}


# --------------------------------------------------------------------------------------------------------------
# Second correct alternatives (issue 27), written blind from the release notebooks.
# --------------------------------------------------------------------------------------------------------------
def _cpm_alt_recursive_prod(params_or_shapes, dtype=np.float32):
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a floating NumPy dtype, got {dtype!r}") from None
    if dt.kind != "f":
        raise TypeError(f"dtype must be a floating NumPy dtype, got {dt}")

    def count(node) -> int:
        if isinstance(node, np.ndarray):
            return int(node.size)
        if isinstance(node, tuple) and all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                                           for a in node):
            if any(a < 0 for a in node):
                raise ValueError(f"params_or_shapes: a shape has a negative axis: {node}")
            return math.prod(int(a) for a in node)  # () -> 1
        if isinstance(node, (dict, list, tuple)):
            children = list(node.values()) if isinstance(node, dict) else list(node)
            if not children:
                raise ValueError("params_or_shapes holds an empty dict or list")
            return sum(count(c) for c in children)
        raise TypeError(f"params_or_shapes: unsupported leaf {node!r}")

    return count(params_or_shapes) * dt.itemsize


_COM_BYTES = {"mixed": {"parameters": 2, "gradients": 2, "optimizer_states": 12},
              "fp32": {"parameters": 4, "gradients": 4, "optimizer_states": 8}}
_COM_FIRST_SHARDED = {"optimizer_states": 1, "gradients": 2, "parameters": 3}


def _com_alt_lookup(num_params, precision="mixed", num_workers=1, zero_stage=0):
    def integer(name, value, low, high=None):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if value < low or (high is not None and value > high):
            raise ValueError(f"{name} must be in [{low}, {high if high is not None else 'inf'}], got {value}")
        return int(value)

    psi = integer("num_params", num_params, 1)
    if precision not in _COM_BYTES:
        raise ValueError(f"precision must be 'mixed' or 'fp32', got {precision!r}")
    N = integer("num_workers", num_workers, 1)
    stage = integer("zero_stage", zero_stage, 0, 3)
    out = {cls: b * psi / (N if stage >= _COM_FIRST_SHARDED[cls] else 1)
           for cls, b in _COM_BYTES[precision].items()}
    out = {"parameters": out["parameters"], "gradients": out["gradients"],
           "optimizer_states": out["optimizer_states"]}
    out["total"] = out["parameters"] + out["gradients"] + out["optimizer_states"]
    return out


def _cm_alt_if_chain(config):
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    if set(config) != set(_KEYS):
        raise ValueError(f"config must have exactly the keys {sorted(_KEYS)}, got {sorted(config)}")

    def count(key, low, high):
        v = config[key]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"config[{key!r}] must be an integer, got {v!r}")
        if not low <= v <= high:
            raise ValueError(f"config[{key!r}] must be in [{low}, {high}], got {v}")
        return int(v)

    widths = config["layer_widths"]
    if not isinstance(widths, (list, tuple)) or len(widths) < 2 or \
            any(isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1 for w in widths):
        raise ValueError(f"config['layer_widths'] must list at least two ints >= 1, got {widths!r}")
    n = count("batch", 1, math.inf)
    N = count("num_workers", 1, n)
    M = count("num_micro_batches", 1, -(-n // N))
    s = config["segment_size"]
    if s is not None:
        s = count("segment_size", 1, len(widths) - 1)
    if config["precision"] not in ("fp32", "mixed"):
        raise ValueError(f"config['precision'] must be 'fp32' or 'mixed', got {config['precision']!r}")
    stage = count("zero_stage", 0, 3)
    psi = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))

    def row(setup, *, M=1, s=None, precision="fp32", N=1, stage=0):
        states = _given_opt_bytes(psi, precision, N, stage)
        acts = _given_peak(list(widths), -(-n // N), np.float16 if precision == "mixed" else np.float32, M, s)
        parts = [states["parameters"], states["gradients"], states["optimizer_states"], acts]
        return {"setup": setup, "parameters": parts[0], "gradients": parts[1], "optimizer_states": parts[2],
                "activations": parts[3], "total": sum(parts)}

    rows = [row("baseline")]
    if M > 1:
        rows.append(row(f"accumulation (M={M})", M=M))
    if s is not None:
        rows.append(row(f"checkpointing (s={s})", s=s))
    if config["precision"] == "mixed":
        rows.append(row("mixed precision", precision="mixed"))
    if N > 1 or stage > 0:
        rows.append(row(f"{N} workers, ZeRO-{stage}", N=N, stage=stage))
    rows.append(row("all together", M=M, s=s, precision=config["precision"], N=N, stage=stage))
    return rows


for _name, _entry in [
    ("compute_param_memory_bytes", ("recursive count with math.prod for shapes", _cpm_alt_recursive_prod)),
    ("compute_optimizer_memory_bytes", ("bytes per class looked up, sharded from a stage table", _com_alt_lookup)),
    ("compare_memory", ("one row helper called from an if-chain in the table's order", _cm_alt_if_chain)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)

from tests.answers.blind._blind_m1p7_train import train as _train_blind_student  # noqa: E402 - the blind answer, verbatim

ALTERNATIVES.setdefault("train", []).append(
    ("a blind student's train from lesson 40's text alone (scale recorded after the rollback restores it)",
     _train_blind_student))
