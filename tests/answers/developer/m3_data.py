"""Mutants for Module 3, Part 1, lessons 2–3 (dataset and held-out split): the mistakes the notebooks name."""

from __future__ import annotations

import math

import torch

from trainsys.fedavg import data as ref

REFERENCE = "trainsys.fedavg.data"


def _no_qr(n, d_in, n_classes, seed):
    ref.build_synthetic_dataset(n, d_in, n_classes, seed)
    g = torch.Generator().manual_seed(seed)
    G = torch.randn(d_in, n_classes, generator=g)
    X = torch.randn(n, d_in, generator=g)
    return ref.LabelledDataset(X, torch.argmax(X @ G, dim=1), n_classes)  # unbalanced classes


def _x_first(n, d_in, n_classes, seed):
    ref.build_synthetic_dataset(n, d_in, n_classes, seed)
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d_in, generator=g)
    G = torch.randn(d_in, n_classes, generator=g)
    W = torch.linalg.qr(G).Q if d_in >= n_classes else G / math.sqrt(d_in)
    return ref.LabelledDataset(X, torch.argmax(X @ W, dim=1), n_classes)


def _int32_labels(n, d_in, n_classes, seed):
    d = ref.build_synthetic_dataset(n, d_in, n_classes, seed)
    return ref.LabelledDataset(d.features, d.labels.to(torch.int32), n_classes)


def _split(variant: str):
    def wrong(dataset, test_fraction, seed):
        ref.train_test_split_dataset(dataset, test_fraction, seed)  # validation
        n = len(dataset)
        g = torch.Generator().manual_seed(seed)
        if variant == "unstratified":
            perm = torch.randperm(n, generator=g)
            test = perm[:math.floor(test_fraction * n + 0.5)]
        else:
            parts = []
            for c in range(dataset.n_classes):
                members = torch.nonzero(dataset.labels == c).flatten()
                if variant == "floor":
                    k = int(test_fraction * members.numel())
                    parts.append(members[torch.randperm(members.numel(), generator=g)[:k]])
                else:  # "no_shuffle": the first examples of each class
                    parts.append(members[:math.floor(test_fraction * members.numel() + 0.5)])
            test = torch.cat(parts)
        test = torch.sort(test).values
        mask = torch.ones(n, dtype=torch.bool)
        mask[test] = False
        train = torch.arange(n) if variant == "leak" else torch.nonzero(mask).flatten()
        return dataset.subset(train), dataset.subset(test)

    return wrong


def _leak(dataset, test_fraction, seed):
    train, test = ref.train_test_split_dataset(dataset, test_fraction, seed)
    return dataset.subset(torch.arange(len(dataset))), test  # trains on the held-out examples too


MUTANTS = {
    "build_synthetic_dataset": [
        ("labels from the raw Gaussian teacher, not its orthonormal columns", _no_qr),
        ("draws X before the teacher (the contract's order is G, then X)", _x_first),
        ("int32 labels (cross-entropy wants int64)", _int32_labels),
    ],
    "train_test_split_dataset": [
        ("not stratified: one random permutation of all examples", _split("unstratified")),
        ("int(f * n_c) (floor) instead of rounding half up", _split("floor")),
        ("no shuffle: the first examples of each class go to the test set", _split("no_shuffle")),
        ("the training part still contains the test examples", _leak),
    ],
}
