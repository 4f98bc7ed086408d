r"""What FedAvg trains on: the synthetic task of the lessons, Fashion-MNIST, or Shakespeare by speaking role.

:class:`~trainsys.fedavg.server.FedAvgConfig` names a ``task``; :func:`load_task` gives its data, model and
natural partition, and :func:`~trainsys.fedavg.server.run_fedavg` runs on it with the same round, client and
aggregation code for every task.

* ``"synthetic"`` — :func:`~trainsys.fedavg.data.build_synthetic_dataset` split by
  :func:`~trainsys.fedavg.data.train_test_split_dataset`, the one-hidden-layer MLP (the lessons' task);
* ``"fashion-mnist"`` — the official 60,000/10,000 split (:mod:`trainsys.data.fashion_mnist`), the paper's
  2NN (``d_in = 784``, ``hidden_layers = 2`` of ``d_hidden = 200``, 10 classes: 199,210 parameters);
* ``"shakespeare"`` — one client per (play, role) with ``>= min_chars`` characters
  (:mod:`trainsys.data.shakespeare`); each client's training text cut into non-overlapping sequences of
  ``context + 1`` characters (features: the first ``context`` ids, labels: the next ``context`` ids — every
  training character is a target once); the held-out set: ``test_sequences`` sequences drawn once (generator
  seeded :data:`TEST_SAMPLE_SEED`, the same for every run) from the clients' held-out text; the model: the
  course's small GPT (:class:`~trainsys.fedavg.model.NextCharacterModel`, ``hidden_layers`` blocks of width
  ``d_hidden``); partition ``"natural"`` is the roles, ``"iid"`` the same sequences dealt at random.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from trainsys.fedavg.data import LabelledDataset, build_synthetic_dataset, train_test_split_dataset
from trainsys.fedavg.model import build_deep_mlp, build_mlp_classifier

TASKS = ("synthetic", "fashion-mnist", "shakespeare")
TEST_SAMPLE_SEED = 20170217
"""Seed of the one draw of Shakespeare's held-out sequences (McMahan et al.'s arXiv v1 date), fixed for all runs."""


@dataclass(frozen=True)
class Task:
    """``train``, ``test`` (held out before anything is fitted), the ``natural`` partition or ``None``, and ``facts``
    about the data (sizes, vocabulary) for a record."""

    train: LabelledDataset
    test: LabelledDataset
    natural: list[torch.Tensor] | None
    facts: dict


def load_task(config) -> Task:
    """The data of ``config.task`` (``config`` a validated FedAvgConfig); raises ``ValueError`` naming a
    field whose value disagrees with the data (``num_examples``, ``d_in``, ``n_classes``)."""
    if config.task == "synthetic":
        seeds = {"data": config.seed, "split": config.seed + 1}
        data = build_synthetic_dataset(config.num_examples, config.d_in, config.n_classes, seeds["data"])
        train, test = train_test_split_dataset(data, config.test_fraction, seeds["split"])
        return Task(train, test, None, {})
    if config.task == "fashion-mnist":
        from trainsys.data.fashion_mnist import load_fashion_mnist
        train, test = load_fashion_mnist()
        task = Task(train, test, None, {"train_examples": len(train), "test_examples": len(test)})
    else:
        task = _shakespeare(config.context, config.min_chars, config.test_sequences)
    _require_match("num_examples", config.num_examples, len(task.train), config.task)
    _require_match("d_in", config.d_in, int(task.train.features.shape[1]), config.task)
    _require_match("n_classes", config.n_classes, task.train.n_classes, config.task)
    return task


def _require_match(field: str, value: int, actual: int, task: str) -> None:
    if value != actual:
        raise ValueError(f"{field} must be {actual} for task {task!r} (the data's), got {value}")


def task_datasets(config) -> list[dict]:
    """Evidence entries (name, version, SHA-256 of the files) of ``config.task``'s data; ``[]`` for synthetic."""
    if config.task == "fashion-mnist":
        from trainsys.data.fashion_mnist import fashion_mnist_entry
        return [fashion_mnist_entry()]
    if config.task == "shakespeare":
        from trainsys.data.shakespeare import shakespeare_entry
        return [shakespeare_entry()]
    return []


def build_task_model(config, seed: int) -> nn.Module:
    """The model of ``config.task``, initialised from ``seed`` (the global generator is untouched)."""
    if config.task == "shakespeare":
        from trainsys.fedavg.model import NextCharacterModel
        return NextCharacterModel(config.n_classes, config.context, config.hidden_layers, config.d_hidden, seed)
    if config.hidden_layers == 1:
        return build_mlp_classifier(config.d_in, config.d_hidden, config.n_classes, seed)
    return build_deep_mlp([config.d_in] + [config.d_hidden] * config.hidden_layers + [config.n_classes], seed)


@functools.lru_cache(maxsize=4)
def _shakespeare(context: int, min_chars: int, test_sequences: int) -> Task:
    from trainsys.data import shakespeare as sh
    clients = sh.role_clients(min_chars=min_chars)
    vocab = sh.build_vocabulary(c.train_text for c in clients)  # fixed from the training text only
    xs, ys, natural, test_x, test_y, start = [], [], [], [], [], 0
    for client in clients:
        x, y = sh.next_char_sequences(vocab.encode(client.train_text), context)  # (m_k, context) each
        xs.append(x)
        ys.append(y)
        natural.append(torch.arange(start, start + x.shape[0]))
        start += x.shape[0]
        tx, ty = sh.next_char_sequences(vocab.encode(client.test_text), context)
        test_x.append(tx)
        test_y.append(ty)
    test_x, test_y = torch.cat(test_x), torch.cat(test_y)  # (n_test_all, context)
    pick = torch.randperm(test_x.shape[0], generator=torch.Generator().manual_seed(TEST_SAMPLE_SEED))
    pick = torch.sort(pick[:min(test_sequences, test_x.shape[0])]).values
    train = LabelledDataset(torch.cat(xs), torch.cat(ys), len(vocab))
    test = LabelledDataset(test_x[pick].clone(), test_y[pick].clone(), len(vocab))
    facts = {**sh.role_statistics(clients), "vocabulary": vocab.chars, "vocabulary_size": len(vocab),
             "train_sequences": len(train), "test_sequences_available": int(test_x.shape[0]),
             "test_sequences_used": len(test)}
    return Task(train, test, natural, facts)
