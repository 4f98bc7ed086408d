"""Module 3, Part 4: state-dict arithmetic and the weighted average, against NumPy and parameters_to_vector."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch.nn.utils import parameters_to_vector

from trainsys.tolerance import assert_within_rounding
from trainsys.fedavg import client, data, model, state

DATA = data.build_synthetic_dataset(40, 4, 3, seed=0)


def _bn_model(seed: int) -> torch.nn.Module:
    net = model.build_mlp_classifier(4, 6, 3, seed, batch_norm=True)
    client.train_client_locally(net, DATA, torch.arange(seed, 20 + seed), 1, 4, 0.1, seed)
    return net


def test_m3_11_clone_survives_training_of_the_model() -> None:
    net = _bn_model(0)
    snapshot = state.clone_model_state(net)
    frozen = copy.deepcopy(snapshot)
    client.train_client_locally(net, DATA, torch.arange(40), 2, 5, 0.5, seed=1)
    assert all(torch.equal(snapshot[k], frozen[k]) for k in frozen)
    assert not torch.equal(snapshot["0.weight"], net.state_dict()["0.weight"])
    assert snapshot["1.num_batches_tracked"].dtype == torch.int64
    assert list(snapshot) == list(net.state_dict())


def test_m3_12_load_round_trip_and_strictness() -> None:
    a, b = _bn_model(1), _bn_model(2)
    snapshot = state.clone_model_state(b)
    assert state.load_model_state(a, snapshot) is a
    for key, tensor in a.state_dict().items():
        assert torch.equal(tensor, snapshot[key])
    snapshot["0.weight"] += 1.0  # the model holds copies, not the caller's tensors
    assert not torch.equal(a.state_dict()["0.weight"], snapshot["0.weight"])
    before = state.clone_model_state(a)
    with pytest.raises(ValueError, match="state"):
        state.load_model_state(a, {k: v for k, v in snapshot.items() if k != "1.running_var"})
    assert all(torch.equal(a.state_dict()[k], v) for k, v in before.items())  # nothing half-loaded


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_m3_13_15_dtypes_are_preserved(dtype: torch.dtype) -> None:
    s = {"t": (torch.arange(6).reshape(2, 3) - 2).to(dtype)}
    zeros = state.zeros_like_state(s)
    doubled = state.add_state_dicts(s, s)
    scaled = state.scale_state_dict(s, 0.5)
    assert zeros["t"].dtype == doubled["t"].dtype == scaled["t"].dtype == dtype
    assert torch.equal(zeros["t"], torch.zeros(2, 3, dtype=dtype))
    assert torch.equal(doubled["t"], 2 * s["t"])
    expected = s["t"] if dtype == torch.int64 else (s["t"].double() * 0.5).to(dtype)  # counters are not scaled
    assert torch.equal(scaled["t"], expected)


def test_m3_16_weighted_average_equals_numpy_oracle() -> None:
    states = [state.clone_model_state(_bn_model(k)) for k in range(3)]
    counts = [5, 12, 31]
    avg = state.aggregate_weighted_average(states, counts)
    weights = np.array(counts, dtype=np.float64) / sum(counts)
    for key, first in states[0].items():
        stacked = np.stack([s[key].double().numpy() for s in states])  # (3, ...)
        oracle = np.tensordot(weights, stacked, axes=1)
        if first.is_floating_point():
            # float64 accumulation (3 terms, ~3 u64) cast once to float32: within one float32 rounding of the
            # oracle, relative to sum w |s_k| (k = 1 for the cast, 1 to cover the float64 sum; trainsys.tolerance)
            magnitude = np.tensordot(weights, np.abs(stacked), axes=1)
            assert_within_rounding(avg[key].double().numpy(), oracle, magnitude, 2, np.float32, key)
        else:
            assert avg[key].dtype == torch.int64 and int(avg[key]) == int(np.rint(oracle))


def test_m3_16_average_of_models_is_the_average_of_their_parameter_vectors() -> None:
    nets = [model.build_mlp_classifier(4, 6, 3, seed) for seed in range(4)]
    counts = [1, 2, 3, 10]
    avg = state.aggregate_weighted_average([state.clone_model_state(n) for n in nets], counts)
    merged = model.build_mlp_classifier(4, 6, 3, 99)
    state.load_model_state(merged, avg)
    want = sum(c * parameters_to_vector(n.parameters()).double() for c, n in zip(counts, nets)) / sum(counts)
    magnitude = sum(c * parameters_to_vector(n.parameters()).double().abs() for c, n in zip(counts, nets)) / sum(counts)
    # as above: one float32 rounding of a float64 weighted sum (trainsys.tolerance)
    assert_within_rounding(parameters_to_vector(merged.parameters()).detach().double().numpy(), want.detach().numpy(),
                           magnitude.detach().numpy(), 2, np.float32, "the merged parameters")


def test_m3_16_integer_counters_are_rounded_not_truncated() -> None:
    states = [{"n": torch.tensor(3)}, {"n": torch.tensor(4)}]
    assert int(state.aggregate_weighted_average(states, [2, 3])["n"]) == 4  # 3.6 -> 4 (truncation: 3)
    assert int(state.aggregate_weighted_average(states, [3, 2])["n"]) == 3  # 3.4 -> 3


def test_m3_16_one_client_or_identical_clients_return_that_state() -> None:
    s = state.clone_model_state(_bn_model(3))
    for got in (state.aggregate_weighted_average([s], [7]), state.aggregate_weighted_average([s, s, s], [1, 5, 9])):
        assert all(torch.equal(got[k], s[k]) for k in s)
        assert all(got[k].untyped_storage().data_ptr() != s[k].untyped_storage().data_ptr() for k in s)


S = {"w": torch.ones(2, 3), "n": torch.tensor(1)}
BAD = [
    (state.add_state_dicts, (S, {"w": torch.ones(2, 3)}), ValueError, "b"),
    (state.add_state_dicts, (S, {"w": torch.ones(3, 2), "n": torch.tensor(1)}), ValueError, "b"),
    (state.add_state_dicts, (S, {"w": torch.ones(2, 3), "n": torch.tensor(1.0)}), ValueError, "dtype"),
    (state.scale_state_dict, (S, float("inf")), TypeError, "c"),
    (state.zeros_like_state, ([torch.ones(2)],), TypeError, "state"),
    (state.aggregate_weighted_average, ([S, {"w": torch.ones(2, 3)}], [1, 1]), ValueError, "states"),
    (state.aggregate_weighted_average, ([S, S], [1]), ValueError, "num_samples"),
    (state.aggregate_weighted_average, ([S, S], [1, 0]), ValueError, "num_samples"),
    (state.aggregate_weighted_average, ([], []), ValueError, "states"),
    (state.load_model_state, (model.build_mlp_classifier(2, 2, 2, 0), S), ValueError, "state"),
    (state.clone_model_state, (S,), TypeError, "model"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m3_part4_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
