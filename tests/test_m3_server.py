"""Module 3, Part 5: client selection, the round (FedSGD equivalence), evaluation and the run record."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from trainsys.fedavg import data, model, partition, server, state
from trainsys.tolerance import assert_within_rounding, cross_entropy_gradient_bound, rounding_bound

DATA = data.build_synthetic_dataset(60, 5, 3, seed=0)
UNEQUAL = [torch.sort(p).values for p in torch.split(torch.randperm(60, generator=torch.Generator().manual_seed(1)),
                                                     [5, 9, 16, 30])]
SMALL = {"num_examples": 400, "d_in": 8, "n_classes": 4, "d_hidden": 16, "num_clients": 8, "fraction": 0.5,
         "rounds": 8, "batch_size": 10, "lr": 0.1}


@pytest.mark.parametrize(("K", "C", "m"), [(100, 0.1, 10), (100, 0.01, 1), (100, 0.001, 1), (100, 1.0, 100),
                                           (10, 0.25, 3), (100, 0.07, 7), (30, 0.1, 3), (1, 0.5, 1)])
def test_m3_17_number_of_clients_is_max_ceil_ck_1(K: int, C: float, m: int) -> None:
    chosen = server.select_clients(K, C, np.random.default_rng(0))
    assert len(chosen) == m == max(math.ceil(round(C * K, 12)), 1)
    assert chosen == sorted(set(chosen)) and all(0 <= k < K for k in chosen)


def test_m3_17_selection_is_uniform() -> None:
    rng, hits = np.random.default_rng(0), np.zeros(20)
    for _ in range(2000):
        hits[server.select_clients(20, 0.2, rng)] += 1
    expected = 2000 * 4 / 20  # 400 per client
    chi2 = float(((hits - expected) ** 2 / expected).sum())
    assert chi2 < 43.8  # the 0.999 quantile of chi-square with 19 degrees of freedom


def _fedsgd_oracle(net: torch.nn.Module, union: torch.Tensor, lr: float) -> torch.Tensor:
    """One full-batch gradient step on the union of the clients' data, in plain torch."""
    twin = copy.deepcopy(net)
    loss = F.cross_entropy(twin(DATA.features[union]), DATA.labels[union])
    grads = torch.autograd.grad(loss, list(twin.parameters()))
    return parameters_to_vector(twin.parameters()).detach() - lr * parameters_to_vector(grads)


def _fedsgd_bound(net: torch.nn.Module, parts: list[torch.Tensor], lr: float, want: torch.Tensor) -> np.ndarray:
    """How far one FedAvg round (C = 1, E = 1, full batches) may be from the FedSGD oracle in float32, derived
    (trainsys.tolerance): each client's gradient and the union's are within cross_entropy_gradient_bound of
    two correct computations (weighted by n_k / n, plus the union's), times lr; the updates round 3 times
    (theta - lr g, the weighted sum cast once; the oracle's subtraction) relative to |theta| + lr |g|."""
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    Ws = [m.weight.detach().double().numpy().T for m in linears]  # (d_in, d_out): the course's layout
    bs = [m.bias.detach().double().numpy() for m in linears]
    n = sum(len(p) for p in parts)
    pieces = [(len(p) / n, p) for p in parts] + [(1.0, torch.cat(parts))]
    grad = 0.0
    for weight, idx in pieces:
        b = cross_entropy_gradient_bound(Ws, bs, DATA.features[idx].numpy(), DATA.labels[idx].numpy(), np.float32)
        grad = grad + weight * np.concatenate([np.concatenate([l["W"].T.ravel(), l["b"]]) for l in b])
    theta = parameters_to_vector(net.parameters()).detach().double().numpy()
    step = np.abs(theta - want.double().numpy())
    return lr * grad + rounding_bound(np.abs(theta) + step + lr * grad, 3, np.float32)


@pytest.mark.parametrize("batch_size", [None, 30, 1000])
def test_m3_18_one_round_with_c1_e1_full_batch_is_one_fedsgd_step(batch_size) -> None:
    net = model.build_mlp_classifier(5, 8, 3, 2)
    want = _fedsgd_oracle(net, torch.cat(UNEQUAL), lr=0.5)
    bound = _fedsgd_bound(net, UNEQUAL, 0.5, want)
    info = server.run_communication_round(net, DATA, UNEQUAL, 1.0, 1, batch_size, 0.5, np.random.default_rng(0))
    assert info["selected"] == [0, 1, 2, 3] and info["local_steps"] == [1, 1, 1, 1]
    got = parameters_to_vector(net.parameters()).detach().double().numpy()
    excess = np.abs(got - want.double().numpy()) - bound
    assert np.all(excess <= 0), f"beyond the derived bound by up to {excess.max():.3g}"


def test_m3_18_the_equivalence_needs_the_sample_weights() -> None:
    net = model.build_mlp_classifier(5, 8, 3, 2)
    want = _fedsgd_oracle(net, torch.cat(UNEQUAL), lr=0.5)
    states = []
    for idx in UNEQUAL:
        local = copy.deepcopy(net)
        loss = F.cross_entropy(local(DATA.features[idx]), DATA.labels[idx])
        grads = torch.autograd.grad(loss, list(local.parameters()))
        vector_to_parameters(parameters_to_vector(local.parameters()).detach() - 0.5 * parameters_to_vector(grads),
                             local.parameters())
        states.append(state.clone_model_state(local))
    unweighted = state.aggregate_weighted_average(states, [1] * 4)
    merged = state.load_model_state(copy.deepcopy(net), unweighted)
    assert float((parameters_to_vector(merged.parameters()).detach() - want).abs().max()) > 1e-3


def test_m3_18_round_equals_a_hand_written_fedavg_round() -> None:
    net = model.build_mlp_classifier(5, 8, 3, 3)
    reference = copy.deepcopy(net)
    info = server.run_communication_round(net, DATA, UNEQUAL, 0.5, 2, 4, 0.2, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    chosen = sorted(rng.choice(4, size=2, replace=False).tolist())
    seeds = rng.integers(0, 2**31 - 1, size=2)
    vectors, counts = [], []
    for k, seed in zip(chosen, seeds):
        local = copy.deepcopy(reference)
        opt = torch.optim.SGD(local.parameters(), lr=0.2)
        for epoch in range(2):
            shuffle = torch.Generator().manual_seed(int(seed) + epoch)
            order = UNEQUAL[k][torch.randperm(len(UNEQUAL[k]), generator=shuffle)]
            for batch in torch.split(order, 4):
                opt.zero_grad()
                F.cross_entropy(local(DATA.features[batch]), DATA.labels[batch]).backward()
                opt.step()
        vectors.append(parameters_to_vector(local.parameters()).detach())
        counts.append(len(UNEQUAL[k]))
    want = sum(n * v for n, v in zip(counts, vectors)) / sum(counts)  # n_k / m_t over the selected clients
    assert info["selected"] == chosen and info["num_samples"] == counts
    # the clients' training is the same torch loop on both sides (bit for bit); only the average differs: a
    # float32 weighted sum of m terms and a division here (m + 2 roundings), float64 cast once there (1)
    magnitude = sum(n * v.abs() for n, v in zip(counts, vectors)).double().numpy() / sum(counts)
    assert_within_rounding(parameters_to_vector(net.parameters()).detach().numpy(), want.numpy(), magnitude,
                           len(counts) + 2, np.float32, "the aggregated parameters")
    size = sum(p.numel() * 4 for p in net.state_dict().values())
    assert info["bytes_up"] == info["bytes_down"] == 2 * size


def test_m3_19_accuracy_matches_a_manual_count_and_restores_the_mode() -> None:
    net = model.build_mlp_classifier(5, 8, 3, 4, batch_norm=True).train()
    with torch.no_grad():
        net(DATA.features * 2 + 1)  # move the running statistics
    before = state.clone_model_state(net)
    acc = server.evaluate_accuracy(net, DATA)
    net.eval()
    with torch.no_grad():
        manual = (net(DATA.features).argmax(1) == DATA.labels).sum().item() / 60
    assert acc == manual and isinstance(acc, float)
    net.train()
    assert all(torch.equal(net.state_dict()[k], v) for k, v in before.items())


def test_m3_20_run_fedavg_record_is_complete_deterministic_and_learns() -> None:
    record = server.run_fedavg(SMALL)
    again = server.run_fedavg(server.FedAvgConfig(**SMALL))
    assert [h["test_accuracy"] for h in record["history"]] == [h["test_accuracy"] for h in again["history"]]
    assert record["config"] == again["config"] and record["config"]["num_clients"] == 8
    assert record["seeds"] == server.run_seeds(0)
    assert [h["round"] for h in record["history"]] == list(range(1, 9))
    assert record["final_test_accuracy"] > record["initial_test_accuracy"] + 0.2
    size = state.state_dict_bytes(model.build_mlp_classifier(8, 16, 4, 0).state_dict())
    assert record["bytes_communicated"] == {"up": 8 * 4 * size, "down": 8 * 4 * size, "total": 2 * 8 * 4 * size}
    assert all(len(h["selected"]) == 4 for h in record["history"])
    assert record["wall_time_s"] > 0 and sum(record["client_sizes"]) == 320


def test_m3_20_progress_bar_goes_to_stderr_only_when_asked(capsys) -> None:
    server.run_fedavg({**SMALL, "rounds": 2})
    assert capsys.readouterr().err == ""
    server.run_fedavg({**SMALL, "rounds": 2, "progress": True})
    assert "FedAvg iid" in capsys.readouterr().err


def test_m3_20_held_out_set_is_split_before_partitioning() -> None:
    config = server.validate_fedavg_config(SMALL)
    train, test, _, seeds = server.prepare_run(config)
    parts = server.make_partition(config, train, seeds["partition"])
    assert sorted(torch.cat(parts).tolist()) == list(range(len(train)))
    train_rows = {r.numpy().tobytes() for r in train.features}
    assert not any(r.numpy().tobytes() in train_rows for r in test.features)


BAD = [
    (server.select_clients, (0, 0.5, np.random.default_rng(0)), ValueError, "num_clients"),
    (server.select_clients, (10, 0.0, np.random.default_rng(0)), ValueError, "fraction"),
    (server.select_clients, (10, 1.01, np.random.default_rng(0)), ValueError, "fraction"),
    (server.select_clients, (10, 0.5, 0), TypeError, "rng"),
    (server.run_fedavg, ({**SMALL, "num_clients": 0},), ValueError, "num_clients"),
    (server.run_fedavg, ({**SMALL, "num_clients": 401},), ValueError, "num_clients"),
    (server.run_fedavg, ({**SMALL, "num_clients": 390},), ValueError, "num_clients"),  # > the 320 training examples
    (server.run_fedavg, ({**SMALL, "fraction": 0.0},), ValueError, "fraction"),
    (server.run_fedavg, ({**SMALL, "fraction": 2.0},), ValueError, "fraction"),
    (server.run_fedavg, ({**SMALL, "epochs": 0},), ValueError, "epochs"),
    (server.run_fedavg, ({**SMALL, "batch_size": 0},), ValueError, "batch_size"),
    (server.run_fedavg, ({**SMALL, "partition": "random"},), ValueError, "partition"),
    (server.run_fedavg, ({**SMALL, "learning_rate": 0.1},), ValueError, "learning_rate"),
    (server.evaluate_accuracy, (model.build_mlp_classifier(5, 3, 3, 0), (DATA.features, DATA.labels)), TypeError,
     "dataset"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m3_part5_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)


def test_m3_18_partition_helpers_agree_with_the_config() -> None:
    config = server.validate_fedavg_config({**SMALL, "partition": "shards"})
    train, _, _, seeds = server.prepare_run(config)
    parts = server.make_partition(config, train, seeds["partition"])
    assert parts[0].tolist() == partition.partition_data_non_iid(train, 8, 2, seeds["partition"])[0].tolist()
