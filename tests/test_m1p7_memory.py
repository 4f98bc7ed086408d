"""Module 1, Part 7: the memory accounting against the ZeRO paper and against tracemalloc."""

from __future__ import annotations

import numpy as np
import pytest

from trainsys.memtrain import checkpointing as ck
from trainsys.memtrain import memory
from trainsys.memtrain.measure import peak_memory_bytes


def test_m1_37_reproduces_the_zero_paper_worked_example() -> None:
    # Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, N_d = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB
    totals = [memory.compute_optimizer_memory_bytes(7_500_000_000, "mixed", 64, s)["total"] / 1e9 for s in range(4)]
    assert [round(t, 1) for t in totals] == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.parametrize("N", [1, 2, 8, 64])
def test_m1_37_stage_formulas(N: int) -> None:
    psi = 1000
    got = [memory.compute_optimizer_memory_bytes(psi, "mixed", N, s)["total"] for s in range(4)]
    assert got == pytest.approx([16 * psi, 4 * psi + 12 * psi / N, 2 * psi + 14 * psi / N, 16 * psi / N])
    fp32 = memory.compute_optimizer_memory_bytes(psi, "fp32", N, 0)
    assert fp32 == {"parameters": 4000, "gradients": 4000, "optimizer_states": 8000, "total": 16000}


def test_m1_36_param_bytes_from_arrays_shapes_and_layer_lists() -> None:
    params = ck.init_deep_mlp_params([3, 5, 2], np.random.default_rng(0))
    assert memory.compute_param_memory_bytes(params) == sum(a.nbytes for layer in params for a in layer.values())
    assert memory.compute_param_memory_bytes({"W": (3, 5), "b": (5,)}, np.float16) == 2 * 20
    with pytest.raises(TypeError, match="dtype"):
        memory.compute_param_memory_bytes({"W": (3, 5)}, np.int32)


@pytest.mark.parametrize(("M", "s"), [(1, None), (4, None), (1, 4), (2, 3)])
def test_m1_38_activation_peak_agrees_with_tracemalloc(M: int, s: int | None) -> None:
    # Wide batches and narrow layers: parameter gradients are < 2% of the pass, activations dominate.
    widths, batch = [32] + [64] * 15 + [4], 4096
    params = ck.init_deep_mlp_params(widths, np.random.default_rng(1))
    rows = -(-batch // M)
    X = np.random.default_rng(2).standard_normal((rows, 32)).astype(np.float32)
    _, measured = peak_memory_bytes(ck.checkpointed_forward_backward, params, X, np.zeros((rows, 4), np.float32), s)
    estimate = memory.compute_peak_activation_memory_bytes(widths, batch, np.float32, M, s)
    assert abs(estimate - measured) <= 0.05 * measured, (estimate, measured)


def test_m1_39_compare_memory_orders_the_techniques() -> None:
    config = dict(layer_widths=[64] + [256] * 8 + [10], batch=512, num_micro_batches=4, segment_size=3,
                  precision="mixed", num_workers=4, zero_stage=2)
    rows = {r["setup"]: r for r in memory.compare_memory(config)}
    base, together = rows["baseline"], rows["all together"]
    assert together["total"] < min(r["total"] for name, r in rows.items() if name != "all together")
    assert rows["accumulation (M=4)"]["activations"] < base["activations"]
    assert rows["checkpointing (s=3)"]["activations"] < base["activations"]
    assert rows["mixed precision"]["parameters"] == base["parameters"] / 2
    assert rows["4 workers, ZeRO-2"]["optimizer_states"] == base["optimizer_states"] / 4
    for row in rows.values():
        assert row["total"] == pytest.approx(sum(row[k] for k in ("parameters", "gradients", "optimizer_states",
                                                                  "activations")))


BAD = [
    (memory.compute_optimizer_memory_bytes, (100, "bf8", 1, 0), ValueError, "precision"),
    (memory.compute_optimizer_memory_bytes, (100, "mixed", 0, 0), ValueError, "num_workers"),
    (memory.compute_optimizer_memory_bytes, (100, "mixed", 2, 4), ValueError, "zero_stage"),
    (memory.compute_optimizer_memory_bytes, (0, "mixed", 2, 1), ValueError, "num_params"),
    (memory.compute_peak_activation_memory_bytes, ([4, 8, 2], 16, np.float32, 17, None), ValueError, "num_micro_batches"),
    (memory.compare_memory, ({"batch": 8},), ValueError, "config"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m1_part7_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
