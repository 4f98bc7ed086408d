"""Mutants for Module 3, Part 2 (lessons 4–6: client partitions): the mistakes the notebooks name."""

from __future__ import annotations

import torch

from trainsys.fedavg import partition as ref

REFERENCE = "trainsys.fedavg.partition"


def _iid(variant: str):
    def wrong(dataset, num_clients, seed):
        ref.partition_data_iid(dataset, num_clients, seed)  # validation
        n = len(dataset)
        order = torch.arange(n) if variant == "contiguous" else torch.randperm(
            n, generator=torch.Generator().manual_seed(seed))
        size = n // num_clients
        if variant == "remainder_last":
            sizes = [size] * (num_clients - 1) + [n - size * (num_clients - 1)]
        elif variant == "drop_remainder":
            sizes, order = [size] * num_clients, order[:size * num_clients]
        else:
            sizes = ref.split_sizes(n, num_clients)
        return [torch.sort(p).values for p in torch.split(order, sizes)]

    return wrong


def _shards(variant: str):
    def wrong(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
        if alpha is not None:
            return ref.partition_data_non_iid(dataset, num_clients, shards_per_client, seed,
                                              alpha=1.0 if variant == "ignore_alpha" else alpha)
        ref.partition_data_non_iid(dataset, num_clients, shards_per_client, seed)  # validation
        n, S, s = len(dataset), num_clients * shards_per_client, shards_per_client
        g = torch.Generator().manual_seed(seed)
        order = torch.sort(dataset.labels, stable=True).indices
        if variant == "shuffled":  # the shuffle comes after the sort and undoes it
            order = order[torch.randperm(n, generator=g)]
        sizes = [n // S] * S if variant == "drop_remainder" else ref.split_sizes(n, S)
        shards = torch.split(order[:sum(sizes)], sizes)
        deal = torch.arange(S) if variant == "consecutive" else torch.randperm(S, generator=g)
        return [torch.sort(torch.cat([shards[int(j)] for j in deal[k * s:(k + 1) * s]])).values
                for k in range(num_clients)]

    return wrong


def _counts(variant: str):
    def wrong(partition, dataset):
        ref.count_client_samples(partition, dataset)  # validation
        if variant == "no_minlength":
            return torch.stack([torch.bincount(dataset.labels[idx]) for idx in partition])
        if variant == "first_labels":
            return torch.stack([torch.bincount(dataset.labels[:len(idx)], minlength=dataset.n_classes)
                                for idx in partition])
        if variant == "transposed":
            return ref.count_client_samples(partition, dataset).T.contiguous()
        return ref.count_client_samples(partition, dataset).to(torch.float32)

    return wrong


MUTANTS = {
    "partition_data_iid": [
        ("consecutive blocks, no shuffle", _iid("contiguous")),
        ("the whole remainder goes to the last client", _iid("remainder_last")),
        ("drops the n mod K leftover examples", _iid("drop_remainder")),
    ],
    "partition_data_non_iid": [
        ("shuffles the label-sorted order before cutting shards (IID in disguise)", _shards("shuffled")),
        ("client k takes shards k*s … k*s+s-1 (no random deal)", _shards("consecutive")),
        ("drops the leftover examples when n is not a multiple of the shard count", _shards("drop_remainder")),
        ("Dirichlet option ignores alpha (always 1)", _shards("ignore_alpha")),
    ],
    "count_client_samples": [
        ("bincount without minlength (missing top classes shrink the row)", _counts("no_minlength")),
        ("counts the first n_k labels of the dataset, not the client's", _counts("first_labels")),
        ("returns (n_classes, num_clients)", _counts("transposed")),
        ("float counts", _counts("float")),
    ],
}
