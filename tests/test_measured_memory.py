"""The transformer explorer against the measured GPT (issue 26): the saved-tensor ledger on hand-countable
graphs, a subset of the grid re-measured against the committed record ``memory-gpt``, one sharded run, the
peak of a step, and bad input.

Bytes are exact integers (storage sizes), so a re-measurement must equal the record; the explorer's target
is 5 % per category.
"""

from __future__ import annotations

import pytest
import torch

from trainsys.evidence import load_record
from trainsys.memtrain import measured_memory as mm
from trainsys.memtrain.memory_grid import QUICK, SHAPES, SMALL, grid_errors
from trainsys.models import gpt as gpt_module
from trainsys.models.gpt import GPT, GPTConfig

TARGET = 0.05


def test_m1_39_ledger_counts_each_storage_once_and_skips_parameters() -> None:
    w = torch.nn.Parameter(torch.randn(3, 4))  # 48 bytes, never counted
    module = torch.nn.Module()
    module.w = w
    x = torch.randn(5, 4, requires_grad=True)
    with mm.SavedTensorLedger(module) as ledger:
        y = x @ w.T  # saves x (80 bytes) and a view of w (a parameter)
        z = y.exp()  # saves its result: 60 bytes
        u = z[1:].sin()  # saves a view of z: z's storage again
        ledger.start_backward()
        u.sum().backward()
    assert ledger.stored == {"activations": 80 + 60, "weight_copies": 0}
    assert ledger.transient == 0


def test_m1_39_ledger_sees_autocast_weight_copies_and_recomputation() -> None:
    config = GPTConfig(vocab_size=11, context=8, n_layer=1, n_head=2, n_embd=8, dropout=0.1)
    bf16 = mm.measure_step(config, 2, "autocast_bf16", "none")
    # the bf16 copies of q, k, v, proj (4·8·8), fc, proj (2·8·32) and the tied head (11·8), 2 bytes each
    assert bf16["weight_copies"] == 2 * (4 * 64 + 2 * 256 + 88)
    full = mm.measure_step(config, 2, "fp32", "full")
    none = mm.measure_step(config, 2, "fp32", "none")
    t, h = 16, 8
    # full recomputation stores the block's input only and rebuilds the rest of the layer during backward
    assert none["activations_stored"] - full["activations_stored"] == full["activations_transient"]
    assert full["activations_transient"] > 0 and none["activations_transient"] == 0
    assert full["activations_stored"] > 4 * t * h


def test_m1_39_recomputation_leaves_the_model_as_it_was() -> None:
    model = GPT(SMALL)
    original = gpt_module.causal_attention
    for mode in mm.RECOMPUTE:
        with mm.recomputation(model, mode):
            pass
        assert gpt_module.causal_attention is original
        assert all("forward" not in block.__dict__ for block in model.blocks)


def test_m1_39_a_subset_of_the_grid_equals_the_record_and_is_within_target() -> None:
    record = load_record("memory-gpt")
    committed = {(r["shape"], r["precision"], r["recompute"]): r for r in record["extra"]["rows"]}
    assert len(committed) >= 24
    for row in grid_errors(QUICK):
        key = (row["shape"], row["precision"], row["recompute"])
        assert row["measured"] == committed[key]["measured"], key
        assert all(abs(e) <= TARGET for e in row["error"].values()), (key, row["error"])
    worst = {r[0]: r[1] for r in record["figures"]["largest_error"]["rows"]}
    for category in mm.CATEGORIES:
        assert abs(worst[category]) <= 100 * TARGET, category


def test_m1_39_fsdp2_shards_per_rank_as_the_explorer_says() -> None:
    result = mm.compare_sharded(SMALL, 2, 3)
    committed = next(r for r in load_record("memory-gpt")["figures"]["sharded"]["rows"] if r[1:3] == [2, 3])
    assert [result["measured"][c] for c in mm.CATEGORIES[:3]] == committed[3:6]
    assert all(abs(e) <= TARGET for e in result["error"].values())
    assert sum(r["parameters"] for r in result["ranks"]) >= mm.measure_step(SMALL, 1)["parameters"]


def test_m1_39_the_peak_of_a_step_holds_parameters_and_adam_state() -> None:
    config, batch = SHAPES["small GPT (L2 h64 a4 s64)"]
    with pytest.warns(FutureWarning):
        peak = mm.measure_step_peak(config, batch)
    step = mm.measure_step(config, batch)
    assert peak["at_peak"]["parameter"] == step["parameters"]
    assert peak["at_peak"]["optimizer_state"] == step["optimizer_states"]
    assert peak["peak"] == sum(peak["at_peak"].values())
    assert peak["peak"] > step["parameters"] + step["optimizer_states"] + step["activations_stored"] // 2


@pytest.mark.parametrize("call, name", [
    (lambda: mm.measure_step("small", 2), "config"),
    (lambda: mm.measure_step(SMALL, 0), "batch_size"),
    (lambda: mm.measure_step(SMALL, 2, "fp16"), "precision"),
    (lambda: mm.measure_step(SMALL, 2, "fp32", "partial"), "recompute"),
    (lambda: mm.measure_sharded(SMALL, 5, 3), "world_size"),
    (lambda: mm.measure_sharded(SMALL, 2, 2), "stage"),
    (lambda: mm.relative_error(1.0, 0), "measured"),
])
def test_m1_39_bad_input_names_the_argument(call, name) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert name in str(info.value)


def test_m1_39_gpu_check_says_no_gpu_and_succeeds_without_one(capsys, monkeypatch) -> None:
    from trainsys.memtrain import gpu_check

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main() == 0
    assert capsys.readouterr().out.startswith("no GPU")


def test_m1_39_zero1_misses_1_over_n_exactly_as_its_whole_tensor_partition_says() -> None:
    """ZeroRedundancyOptimizer's fullest rank holds more than 8Ψ/N of Adam's state: largest tensors first, each to
    the least-loaded rank. The partition, replayed without processes, gives every recorded rank's bytes."""
    assert mm.zero1_partition([5, 4, 3, 3, 1], 2) == [[5, 3], [4, 3, 1]]
    runs = [s for s in load_record("memory-gpt")["extra"]["sharded"] if s["stage"] == 1]
    assert runs
    for run in runs:
        config, _ = SHAPES[run["shape"]]
        numels = [p.numel() for p in GPT(config).parameters()]
        predicted = [8 * sum(r) + 4 * len(r) for r in mm.zero1_partition(numels, run["workers"])]
        assert [r["optimizer_states"] for r in run["ranks"]] == predicted == run["partition_optimizer_states"]
