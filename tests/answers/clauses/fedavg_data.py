"""Witnesses for Module 3, Parts 1–2 (the model, the data, the split, the partitions): one wrong answer per
broken clause and case.

Most new witnesses are the reference with one behaviour changed: a validation that misses one input,
an error of the wrong type, a global generator re-seeded "for reproducibility" next to the right
private draws, a result built in a way the contract rules out.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from tests.answers.clauses import existing
from trainsys.fedavg import data as ref_data
from trainsys.fedavg import model as ref_model
from trainsys.fedavg import partition as ref_part
from trainsys.fedavg.data import LabelledDataset


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


# --- Lesson 1 --------------------------------------------------------------------------------------
def _mlp_unchecked(d_in, d_hidden, n_classes, seed, batch_norm=False):
    """The contract's construction without any validation."""
    first = nn.utils.skip_init(nn.Linear, int(d_in), int(d_hidden))
    last = nn.utils.skip_init(nn.Linear, int(d_hidden), int(n_classes))
    g = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for layer in (first, last):
            bound = float(1.0 / np.sqrt(layer.in_features))
            layer.weight.uniform_(-bound, bound, generator=g)
            layer.bias.uniform_(-bound, bound, generator=g)
    middle = [nn.BatchNorm1d(int(d_hidden))] if batch_norm else []
    return nn.Sequential(first, *middle, nn.ReLU(), last)


def _mlp_private_and_global_seed(d_in, d_hidden, n_classes, seed, batch_norm=False):
    """The right private draws, plus torch.manual_seed(seed) 'for reproducibility': the global generator is re-seeded."""
    model = ref_model.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)
    torch.manual_seed(seed)
    return model


def _mlp_log_softmax_head(d_in, d_hidden, n_classes, seed, batch_norm=False):
    """Ends with nn.LogSoftmax: log-probabilities, not the raw logits."""
    model = ref_model.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)
    return nn.Sequential(*model, nn.LogSoftmax(dim=1))


def _mlp_one_class(d_in, d_hidden, n_classes, seed, batch_norm=False):
    """Checks n_classes >= 1 like the other sizes: a one-logit 'classifier' is built."""
    if _is_int(n_classes) and n_classes == 1:
        return _mlp_unchecked(d_in, d_hidden, n_classes, seed, batch_norm)
    return ref_model.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)


def _mlp_value_error_for_floats(d_in, d_hidden, n_classes, seed, batch_norm=False):
    """One ValueError 'must be an integer >= 1' for every bad size, a float included (the contract: TypeError)."""
    for name, value in (("d_in", d_in), ("d_hidden", d_hidden), ("n_classes", n_classes)):
        if isinstance(value, float):
            raise ValueError(f"{name} must be an integer >= 1, got {value}")
    return ref_model.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)


def _mlp_negative_seed(d_in, d_hidden, n_classes, seed, batch_norm=False):
    """Checks only the upper end of the seed's range: torch accepts -1 and the model is built."""
    if _is_int(seed) and seed < 0:
        return _mlp_unchecked(d_in, d_hidden, n_classes, seed, batch_norm)
    return ref_model.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)


# --- Lesson 2 --------------------------------------------------------------------------------------
def _synth_unchecked(n, d_in, n_classes, seed):
    g = torch.Generator().manual_seed(int(seed))
    G = torch.randn(d_in, n_classes, generator=g)
    X = torch.randn(n, d_in, generator=g)
    W = torch.linalg.qr(G).Q if d_in >= n_classes else G / float(np.sqrt(d_in))
    return LabelledDataset(X, torch.argmax(X @ W, dim=1), n_classes)


def _synth_private_and_global_seed(n, d_in, n_classes, seed):
    """The right private draws, plus torch.manual_seed(seed) 'for reproducibility'."""
    result = ref_data.build_synthetic_dataset(n, d_in, n_classes, seed)
    torch.manual_seed(seed)
    return result


def _synth_one_class(n, d_in, n_classes, seed):
    """Checks n_classes >= 1: a one-class dataset (every label 0) is returned."""
    if _is_int(n_classes) and n_classes == 1:
        return _synth_unchecked(n, d_in, n_classes, seed)
    return ref_data.build_synthetic_dataset(n, d_in, n_classes, seed)


def _synth_torch_refuses_d_in(n, d_in, n_classes, seed):
    """No check on d_in: torch.randn(-1, C) refuses it with a RuntimeError that does not name d_in."""
    if _is_int(d_in) and d_in < 1:
        return _synth_unchecked(n, d_in, n_classes, seed)
    return ref_data.build_synthetic_dataset(n, d_in, n_classes, seed)


def _synth_int_coerced_seed(n, d_in, n_classes, seed):
    """seed = int(seed): the string '0' is accepted as 0."""
    if isinstance(seed, str):
        seed = int(seed)
    return ref_data.build_synthetic_dataset(n, d_in, n_classes, seed)


# --- Lesson 3 --------------------------------------------------------------------------------------
def _split_indices(dataset, test_fraction, seed):
    """The contract's draw (no validation): sorted train and test indices."""
    g = torch.Generator().manual_seed(int(seed))
    is_test = torch.zeros(len(dataset.labels), dtype=torch.bool)
    for c in range(dataset.n_classes):
        members = torch.nonzero(dataset.labels == c).flatten()
        t_c = math.floor(test_fraction * members.numel() + 0.5)
        is_test[members[torch.randperm(members.numel(), generator=g)[:t_c]]] = True
    return torch.nonzero(~is_test).flatten(), torch.nonzero(is_test).flatten()


def _split_one_buffer(dataset, test_fraction, seed):
    """Gathers train and test rows with one index op, then slices the result: the two parts share one buffer."""
    ref_data.train_test_split_dataset(dataset, test_fraction, seed)  # validation
    train_idx, test_idx = _split_indices(dataset, test_fraction, seed)
    both = torch.cat([train_idx, test_idx])
    X, y, cut = dataset.features[both], dataset.labels[both], train_idx.numel()
    return (LabelledDataset(X[:cut], y[:cut], dataset.n_classes),
            LabelledDataset(X[cut:], y[cut:], dataset.n_classes))


def _split_no_dataset_check(dataset, test_fraction, seed):
    """Reads dataset.n_classes before any type check: a (features, labels) tuple raises AttributeError."""
    dataset.n_classes  # noqa: B018
    return ref_data.train_test_split_dataset(dataset, test_fraction, seed)


def _split_negative_seed(dataset, test_fraction, seed):
    """No range check on seed: torch.Generator().manual_seed(-1) works, so -1 gives a split."""
    if _is_int(seed) and seed < 0 and isinstance(dataset, LabelledDataset):
        train_idx, test_idx = _split_indices(dataset, test_fraction, seed)
        return dataset.subset(train_idx), dataset.subset(test_idx)
    return ref_data.train_test_split_dataset(dataset, test_fraction, seed)


def _split_fixed_seed(dataset, test_fraction, seed):
    """Validates seed but always draws from manual_seed(0): every seed gives the same split."""
    ref_data.train_test_split_dataset(dataset, test_fraction, seed)  # validation
    return ref_data.train_test_split_dataset(dataset, test_fraction, 0)


# --- Lesson 4 --------------------------------------------------------------------------------------
def _iid_numpy_global_seed(dataset, num_clients, seed):
    """The right private draw, plus np.random.seed(seed) 'for reproducibility': NumPy's global generator re-seeded."""
    parts = ref_part.partition_data_iid(dataset, num_clients, seed)
    np.random.seed(seed % 2**32)
    return parts


def _iid_more_clients_than_examples(dataset, num_clients, seed):
    """Checks num_clients >= 1 only: K > n gives clients with no example."""
    if isinstance(dataset, LabelledDataset) and _is_int(num_clients) and num_clients > len(dataset):
        n = len(dataset)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        return [torch.sort(p).values for p in torch.split(perm, ref_part.split_sizes(n, num_clients))]
    return ref_part.partition_data_iid(dataset, num_clients, seed)


def _iid_value_error_for_float(dataset, num_clients, seed):
    """ValueError 'num_clients must be an integer in [1, n]' for a float too (the contract: TypeError)."""
    if isinstance(num_clients, float):
        raise ValueError(f"num_clients must be an integer in [1, n], got {num_clients}")
    return ref_part.partition_data_iid(dataset, num_clients, seed)


def _iid_negative_seed(dataset, num_clients, seed):
    """No range check on seed: -3 seeds a generator and gives a partition."""
    if _is_int(seed) and seed < 0 and isinstance(dataset, LabelledDataset):
        n = len(dataset)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        return [torch.sort(p).values for p in torch.split(perm, ref_part.split_sizes(n, num_clients))]
    return ref_part.partition_data_iid(dataset, num_clients, seed)


def _iid_fixed_seed(dataset, num_clients, seed):
    """Validates seed but always draws from manual_seed(0): every seed gives the same partition."""
    ref_part.partition_data_iid(dataset, num_clients, seed)  # validation
    return ref_part.partition_data_iid(dataset, num_clients, 0)


# --- Lesson 5 --------------------------------------------------------------------------------------
def _non_iid_torch_global_seed(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
    """The right private deal, plus torch.manual_seed(seed) 'for reproducibility' in the shard branch."""
    parts = ref_part.partition_data_non_iid(dataset, num_clients, shards_per_client, seed, alpha=alpha)
    if alpha is None:
        torch.manual_seed(seed)
    return parts


def _non_iid_numpy_global_seed(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
    """The right default_rng(seed) draws, plus np.random.seed(seed) 'for reproducibility' in the Dirichlet branch."""
    parts = ref_part.partition_data_non_iid(dataset, num_clients, shards_per_client, seed, alpha=alpha)
    if alpha is not None:
        np.random.seed(seed % 2**32)
    return parts


def _non_iid_too_many_shards(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
    """No K*s <= n check: with 14 shards of 12 examples some shards (and maybe a client) are empty."""
    if (alpha is None and isinstance(dataset, LabelledDataset) and _is_int(num_clients) and _is_int(shards_per_client)
            and 1 <= num_clients <= len(dataset) and shards_per_client >= 1
            and num_clients * shards_per_client > len(dataset)):
        n, S, s = len(dataset), num_clients * shards_per_client, shards_per_client
        order = torch.sort(dataset.labels, stable=True).indices
        shards = torch.split(order, ref_part.split_sizes(n, S))
        deal = torch.randperm(S, generator=torch.Generator().manual_seed(seed))
        return [torch.sort(torch.cat([shards[int(j)] for j in deal[k * s:(k + 1) * s]])).values
                for k in range(num_clients)]
    return ref_part.partition_data_non_iid(dataset, num_clients, shards_per_client, seed, alpha=alpha)


def _non_iid_alpha_at_least_one(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
    """alpha = max(alpha, 1) 'so that no client ends up empty': small alpha no longer concentrates the labels."""
    if isinstance(alpha, float) and 0 < alpha < 1:
        alpha = 1.0
    return ref_part.partition_data_non_iid(dataset, num_clients, shards_per_client, seed, alpha=alpha)


# --- Lesson 6 --------------------------------------------------------------------------------------
def _count_consumes_list(partition, dataset):
    """Pops the clients off the caller's list as it counts them (while partition: idx = partition.pop(0))."""
    ref_part.count_client_samples(partition, dataset)  # validation
    parts = partition if isinstance(partition, list) else list(partition)
    rows = []
    while parts:
        idx = parts.pop(0)
        rows.append(torch.bincount(dataset.labels[idx], minlength=dataset.n_classes))
    return torch.stack(rows)


def _count_requires_cover(partition, dataset):
    """Refuses a partition that does not cover range(n) (the contract: a subset of clients is valid)."""
    counts = ref_part.count_client_samples(partition, dataset)
    if int(counts.sum()) != len(dataset):
        raise ValueError(f"partition must cover all {len(dataset)} examples, it holds {int(counts.sum())}")
    return counts


WITNESSES = {
    "build_mlp_classifier": {
        "randomness": [
            existing("build_mlp_classifier", "torch.manual_seed + nn.Linear: global generator re-seeded"),
            existing("build_mlp_classifier", "plain nn.Linear then overwritten from the private generator"),
            existing("build_mlp_classifier", "seeds the global generator with torch.manual_seed"),
            ("the right private draws plus torch.manual_seed(seed)", _mlp_private_and_global_seed),
        ],
        "output": [
            existing("build_mlp_classifier", "ends with a Softmax layer"),
            ("ends with nn.LogSoftmax", _mlp_log_softmax_head),
        ],
        "failure modes": [
            ("n_classes = 1 accepted", _mlp_one_class),
            ("ValueError for a float size", _mlp_value_error_for_floats),
            ("seed = -1 accepted", _mlp_negative_seed),
            existing("build_mlp_classifier", "d_hidden = 0 accepted"),
            existing("build_mlp_classifier", "seed 2**63 accepted"),
            existing("build_mlp_classifier", "seed=True accepted as 1"),
            existing("build_mlp_classifier", "batch_norm=1 accepted"),
            existing("build_mlp_classifier", "d_in=4.0 accepted as 4"),
        ],
        "metric that proves it correct": [
            existing("build_mlp_classifier", "draw order W1, W2, b1, b2"),
            existing("build_mlp_classifier", "initialises the biases to zero"),
            existing("build_mlp_classifier", "He-normal weights"),
            existing("build_mlp_classifier", "bound 1/sqrt(fan_in) computed in float32"),
            existing("build_mlp_classifier", "second layer bounded by 1/sqrt(d_in)"),
            existing("build_mlp_classifier", "generic loop over affine modules also draws BatchNorm"),
        ],
    },
    "build_synthetic_dataset": {
        "mutation": [
            existing("build_synthetic_dataset", "torch.manual_seed + global randn"),
            ("the right private draws plus torch.manual_seed(seed)", _synth_private_and_global_seed),
        ],
        "failure modes": [
            existing("build_synthetic_dataset", "n = 0 accepted"),
            ("n_classes = 1 accepted", _synth_one_class),
            ("d_in = -1 left to torch (RuntimeError)", _synth_torch_refuses_d_in),
            ("seed = int(seed) accepts the string '0'", _synth_int_coerced_seed),
            existing("build_synthetic_dataset", "seed 2**63 accepted"),
            existing("build_synthetic_dataset", "n=True accepted"),
        ],
        "metric that proves it correct": [
            existing("build_synthetic_dataset", "X drawn before G"),
            existing("build_synthetic_dataset", "draws X before the teacher"),
            existing("build_synthetic_dataset", "X drawn as (d_in, n) and transposed"),
            existing("build_synthetic_dataset", "raw Gaussian teacher G without QR"),
            existing("build_synthetic_dataset", "labels from the raw Gaussian teacher"),
            existing("build_synthetic_dataset", "QR only when d_in > C"),
            existing("build_synthetic_dataset", "int32 labels ('labels (n,) int64')"),
            existing("build_synthetic_dataset", "n_classes = number of classes observed"),
        ],
    },
    "train_test_split_dataset": {
        "mutation": [
            existing("train_test_split_dataset", "a part whose indices are one contiguous run is a slice"),
            ("train and test sliced from one gathered buffer", _split_one_buffer),
        ],
        "failure modes": [
            existing("train_test_split_dataset", "NaN test_fraction passes"),
            existing("train_test_split_dataset", "an empty training part is not refused"),
            ("a tuple dataset raises AttributeError", _split_no_dataset_check),
            ("seed = -1 accepted", _split_negative_seed),
        ],
        "metric that proves it correct": [
            existing("train_test_split_dataset", "not stratified: one random permutation"),
            existing("train_test_split_dataset", "int(f * n_c) (floor) instead of rounding half up"),
            existing("train_test_split_dataset", "round(f * n_c): ties to even"),
            existing("train_test_split_dataset", "the training part still contains the test examples"),
            existing("train_test_split_dataset", "no shuffle: the first examples of each class"),
            ("every seed draws from manual_seed(0)", _split_fixed_seed),
        ],
    },
    "partition_data_iid": {
        "mutation": [
            existing("partition_data_iid", "torch.manual_seed + global randperm"),
            ("the right private draw plus np.random.seed(seed)", _iid_numpy_global_seed),
        ],
        "failure modes": [
            ("num_clients > n accepted", _iid_more_clients_than_examples),
            ("ValueError for num_clients = 2.0", _iid_value_error_for_float),
            ("seed = -3 accepted", _iid_negative_seed),
            existing("partition_data_iid", "num_clients=True accepted as 1"),
            existing("partition_data_iid", "no dataset type check"),
        ],
        "metric that proves it correct": [
            existing("partition_data_iid", "the whole remainder goes to the last client"),
            existing("partition_data_iid", "whole remainder to the last client"),
            existing("partition_data_iid", "drops the n mod K leftover examples"),
            ("every seed draws from manual_seed(0)", _iid_fixed_seed),
        ],
    },
    "partition_data_non_iid": {
        "mutation": [
            ("the right private deal plus torch.manual_seed(seed)", _non_iid_torch_global_seed),
            ("the right default_rng draws plus np.random.seed(seed)", _non_iid_numpy_global_seed),
        ],
        "failure modes": [
            ("K*s > n accepted", _non_iid_too_many_shards),
            existing("partition_data_non_iid", "alpha = inf accepted"),
            existing("partition_data_non_iid", "alpha = True accepted as 1.0"),
            existing("partition_data_non_iid", "K*s <= n enforced even when alpha is given"),
        ],
        "metric that proves it correct": [
            existing("partition_data_non_iid", "shuffles the label-sorted order before cutting shards"),
            existing("partition_data_non_iid", "client k takes shards k*s"),
            existing("partition_data_non_iid", "drops the leftover examples"),
            existing("partition_data_non_iid", "Dirichlet option ignores alpha"),
            ("alpha raised to at least 1", _non_iid_alpha_at_least_one),
        ],
    },
    "count_client_samples": {
        "mutation": [("pops the clients off the caller's list", _count_consumes_list)],
        "failure modes": [
            ("a partition that does not cover the dataset refused", _count_requires_cover),
            existing("count_client_samples", "float index tensors cast to long"),
            existing("count_client_samples", "int32 index tensors accepted"),
            existing("count_client_samples", "repeated index not refused"),
            existing("count_client_samples", "empty client tensor gives a zero row"),
            existing("count_client_samples", "negative index wraps around"),
            existing("count_client_samples", "2-D index tensor flattened"),
            existing("count_client_samples", "tuple partition refused"),
            existing("count_client_samples", "messages say 'partition' but not which client"),
        ],
        "metric that proves it correct": [
            existing("count_client_samples", "bincount without minlength (missing"),
            existing("count_client_samples", "counts the first n_k labels"),
            existing("count_client_samples", "returns (n_classes, num_clients)"),
            existing("count_client_samples", "float counts"),
        ],
    },
}
