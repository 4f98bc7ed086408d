"""Module 3, Parts 1–2: the classifier, the synthetic data, the split and the partitions, against oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trainsys.fedavg import data, model, partition


def test_m3_01_classifier_is_pytorch_default_init_from_its_own_generator() -> None:
    before = torch.get_rng_state()
    nets = [model.build_mlp_classifier(16, 64, 10, seed) for seed in range(20)]
    assert torch.equal(before, torch.get_rng_state()), "the global generator must not be touched"
    assert list(nets[0].state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    w1 = torch.stack([n[0].weight for n in nets]).detach()  # (20, 64, 16)
    # nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)); its standard deviation is bound/sqrt(3)
    bound = 1 / math.sqrt(16)
    assert float(w1.abs().max()) <= bound
    assert float(w1.std()) == pytest.approx(bound / math.sqrt(3), rel=0.03)
    torch.manual_seed(0)
    reference = torch.stack([torch.nn.Linear(16, 64).weight for _ in range(20)]).detach()
    assert float(w1.std()) == pytest.approx(float(reference.std()), rel=0.05)
    again = model.build_mlp_classifier(16, 64, 10, 3)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), nets[3].state_dict().values()))


def test_m3_01_forward_is_relu_mlp() -> None:
    net = model.build_mlp_classifier(5, 7, 3, 0)
    X = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    W1, b1, W2, b2 = (t.detach() for t in net.state_dict().values())
    expected = F.relu(X @ W1.T + b1) @ W2.T + b2
    torch.testing.assert_close(net(X), expected)
    assert model.count_parameters(net) == 5 * 7 + 7 + 7 * 3 + 3


def test_m3_01_batch_norm_brings_an_integer_buffer() -> None:
    state = model.build_mlp_classifier(5, 7, 3, 0, batch_norm=True).state_dict()
    assert state["1.num_batches_tracked"].dtype == torch.int64
    assert {"1.running_mean", "1.running_var", "3.weight"} <= set(state)


def test_m3_02_labels_are_the_orthonormal_teachers_argmax() -> None:
    d = data.build_synthetic_dataset(2000, 12, 5, seed=7)
    assert d.features.dtype == torch.float32 and d.labels.dtype == torch.int64 and d.n_classes == 5
    g = torch.Generator().manual_seed(7)
    G = torch.randn(12, 5, generator=g).double().numpy()
    X = torch.randn(2000, 12, generator=g).double().numpy()
    np.testing.assert_array_equal(d.features.double().numpy(), X)
    Q, _ = np.linalg.qr(G)  # NumPy as the oracle for the teacher
    # Householder QR is backward stable: ||Q^T Q - I|| is a small multiple of m n u (Higham §19.3, Thm 19.4);
    # 12 x 5 in float64: 60 u = 6.7e-15, and 1e-12 leaves a factor of 150 for the constant
    np.testing.assert_allclose(Q.T @ Q, np.eye(5), atol=1e-12)
    agree = np.mean(np.argmax(X @ Q, axis=1) == d.labels.numpy())
    assert agree >= 0.999  # float32 vs float64 may flip an exact tie, nothing more


def test_m3_02_classes_are_balanced_and_learnable() -> None:
    d = data.build_synthetic_dataset(20000, 20, 10, seed=0)
    freq = torch.bincount(d.labels, minlength=10).double() / 20000
    assert float((freq - 0.1).abs().max()) < 0.015
    # a linear classifier (multinomial logistic regression, full batch) separates most of it: the task is
    # learnable, yet not trivial after a few steps
    W = torch.zeros(20, 10, requires_grad=True)
    opt = torch.optim.SGD([W], lr=1.0)
    for _ in range(50):
        opt.zero_grad()
        F.cross_entropy(d.features @ W, d.labels).backward()
        opt.step()
    accuracy = float(((d.features @ W).argmax(1) == d.labels).double().mean())
    assert 0.7 < accuracy < 0.99


@pytest.mark.parametrize(("n", "classes", "fraction"), [(100, 3, 0.25), (37, 4, 0.3), (1000, 10, 0.2), (9, 2, 0.5)])
def test_m3_03_split_is_disjoint_covering_and_stratified(n: int, classes: int, fraction: float) -> None:
    d = data.build_synthetic_dataset(n, 4, classes, seed=n)
    train, test = data.train_test_split_dataset(d, fraction, seed=1)
    rows = {r.numpy().tobytes(): i for i, r in enumerate(d.features)}
    tr = [rows[r.numpy().tobytes()] for r in train.features]
    te = [rows[r.numpy().tobytes()] for r in test.features]
    assert not set(tr) & set(te) and sorted(tr + te) == list(range(n))
    assert tr == sorted(tr) and te == sorted(te)
    per_class = torch.bincount(d.labels, minlength=classes).tolist()
    want = [math.floor(fraction * c + 0.5) for c in per_class]
    assert torch.bincount(test.labels, minlength=classes).tolist() == want
    assert not test.features.untyped_storage().data_ptr() == d.features.untyped_storage().data_ptr()


def test_m3_04_iid_clients_see_the_global_label_distribution() -> None:
    d = data.build_synthetic_dataset(6000, 10, 10, seed=0)
    parts = partition.partition_data_iid(d, 20, seed=0)
    assert sorted(torch.cat(parts).tolist()) == list(range(6000))
    assert {len(p) for p in parts} == {300}
    counts = partition.count_client_samples(parts, d).double()  # (20, 10)
    shares = counts / counts.sum(1, keepdim=True)
    overall = torch.bincount(d.labels, minlength=10).double() / 6000
    # 300 draws per client: binomial standard deviation of a share of 0.1 is about 0.017
    assert float((shares - overall).abs().max()) < 0.09


def test_m3_05_pathological_shards_give_about_two_labels_per_client() -> None:
    d = data.build_synthetic_dataset(6000, 10, 10, seed=1)
    parts = partition.partition_data_non_iid(d, 100, shards_per_client=2, seed=0)  # 200 shards of 30
    assert sorted(torch.cat(parts).tolist()) == list(range(6000))
    labels_per_client = (partition.count_client_samples(parts, d) > 0).sum(1).double()
    assert float(labels_per_client.mean()) <= 2.3 and int(labels_per_client.max()) <= 4
    iid = partition.partition_data_iid(d, 100, seed=0)
    assert float((partition.count_client_samples(iid, d) > 0).sum(1).double().mean()) > 9


def test_m3_05_dirichlet_alpha_controls_the_skew() -> None:
    d = data.build_synthetic_dataset(3000, 10, 10, seed=2)

    def mean_top_share(alpha: float) -> float:
        parts = partition.partition_data_non_iid(d, 10, seed=0, alpha=alpha)
        assert sorted(torch.cat(parts).tolist()) == list(range(3000))
        counts = partition.count_client_samples(parts, d).double()
        return float((counts.max(1).values / counts.sum(1)).mean())

    shares = [mean_top_share(a) for a in (0.05, 0.5, 100.0)]
    assert shares[0] > shares[1] > shares[2]
    assert shares[0] > 0.6 and shares[2] < 0.2


def test_m3_06_counts_equal_numpy_histograms() -> None:
    d = data.build_synthetic_dataset(500, 6, 7, seed=3)
    parts = partition.partition_data_non_iid(d, 9, shards_per_client=3, seed=4)
    counts = partition.count_client_samples(parts, d)
    assert counts.dtype == torch.int64 and counts.shape == (9, 7)
    for k, idx in enumerate(parts):
        np.testing.assert_array_equal(counts[k].numpy(), np.histogram(d.labels[idx].numpy(), bins=np.arange(8))[0])
    assert counts.sum(1).tolist() == [len(p) for p in parts]
    assert counts.sum(0).tolist() == torch.bincount(d.labels, minlength=7).tolist()


D = data.build_synthetic_dataset(10, 3, 3, seed=0)
BAD = [
    (model.build_mlp_classifier, (0, 4, 3, 0), ValueError, "d_in"),
    (model.build_mlp_classifier, (3, 4, 1, 0), ValueError, "n_classes"),
    (model.build_mlp_classifier, (3, 4, 3, -1), ValueError, "seed"),
    (data.build_synthetic_dataset, (0, 3, 3, 0), ValueError, "n"),
    (data.train_test_split_dataset, (D, 1.0, 0), ValueError, "test_fraction"),
    (data.train_test_split_dataset, ((D.features, D.labels), 0.2, 0), TypeError, "dataset"),
    (partition.partition_data_iid, (D, 0, 0), ValueError, "num_clients"),
    (partition.partition_data_iid, (D, 11, 0), ValueError, "num_clients"),
    (partition.partition_data_non_iid, (D, 6, 2, 0), ValueError, "shards_per_client"),
    (partition.partition_data_non_iid, (D, 0, 2, 0), ValueError, "num_clients"),
    (partition.count_client_samples, ([torch.tensor([0, 10])], D), ValueError, "partition"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m3_part1_2_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)


def test_m3_05_dirichlet_bad_alpha() -> None:
    with pytest.raises(ValueError, match="alpha"):
        partition.partition_data_non_iid(D, 2, seed=0, alpha=0.0)
