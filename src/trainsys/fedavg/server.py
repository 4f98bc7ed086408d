r"""Module 3, Part 5 — the server: pick clients, broadcast, train, average; and the whole loop.

One communication round ``t`` (McMahan et al. 2017, Algorithm 1 with its erratum):

.. math::

    m = \max(\lceil C K \rceil, 1),\quad S_t \subset \{0,\dots,K-1\},\ |S_t| = m,\quad
    w^k_{t+1} = \mathrm{ClientUpdate}(k, w_t),\quad
    w_{t+1} = \sum_{k \in S_t} \frac{n_k}{m_t} w^k_{t+1},\ m_t = \sum_{k \in S_t} n_k .

Communication per round: the server sends the state dict to each of the ``m`` clients and receives
one back from each — ``m · S`` bytes down and ``m · S`` up, ``S`` the state dict's bytes.
``run_fedavg`` returns a **run record**: the validated config, every seed, per-round
metrics, wall time and bytes communicated.
"""

from __future__ import annotations

import copy
import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from trainsys._validation import describe, require_generator, require_int
from trainsys.fedavg.client import require_batch_size, require_momentum, train_client_locally
from trainsys.fedavg.data import LabelledDataset, require_dataset
from trainsys.fedavg.model import require_lr, require_module, require_seed
from trainsys.fedavg.partition import Partition, partition_data_iid, partition_data_non_iid, require_partition
from trainsys.fedavg.state import aggregate_weighted_average, clone_model_state, load_model_state, state_dict_bytes
from trainsys.fedavg.tasks import TASKS, build_task_model, load_task

PARTITIONS = ("iid", "shards", "dirichlet", "natural")


def require_fraction(name: str, value: object) -> float:
    """The client fraction ``C``: a real number in ``(0, 1]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number in (0, 1], got {describe(value)}")
    value = float(value)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return value


# --- Lesson 17 -------------------------------------------------------------------------------------
def select_clients(num_clients: int, fraction: float, rng: np.random.Generator) -> list[int]:
    r"""The round's clients: :math:`m = \max(\lceil C K\rceil, 1)` distinct ids in ``[0, K)``, sorted.

    One draw, ``rng.choice(num_clients, size=m, replace=False)`` (uniform without replacement), then
    sorted ascending and returned as Python ints. ``m >= 1`` even for a tiny ``C`` (a round with no
    client would do nothing); ``C = 1`` selects everyone. ``C · K`` is computed in floats, so a product
    such as ``0.07 · 100 = 7.000000000000001`` is first rounded to 12 decimals (``m = 7``, not 8).
    Advances ``rng``. Raises for ``num_clients < 1``, ``fraction`` outside ``(0, 1]``, a non-Generator.
    """
    num_clients = require_int("num_clients", num_clients, minimum=1)
    fraction = require_fraction("fraction", fraction)
    rng = require_generator("rng", rng)
    m = clients_per_round(num_clients, fraction)
    return sorted(int(k) for k in rng.choice(num_clients, size=m, replace=False))


def clients_per_round(num_clients: int, fraction: float) -> int:
    """:math:`\\max(\\lceil C K \\rceil, 1)`, with ``C·K`` rounded to 12 decimals against float noise."""
    return max(math.ceil(round(fraction * num_clients, 12)), 1)


# --- Lesson 18 -------------------------------------------------------------------------------------
def run_communication_round(
    global_model: nn.Module,
    dataset: LabelledDataset,
    partition: Partition,
    fraction: float,
    epochs: int,
    batch_size: int | None,
    lr: float,
    rng: np.random.Generator,
    momentum: float = 0.0,
) -> dict[str, object]:
    """One FedAvg round, updating ``global_model`` **in place**; returns what happened.

    In this order (the order of the draws from ``rng`` is part of the contract):

    1. ``selected = select_clients(len(partition), fraction, rng)``;
    2. ``seeds = rng.integers(0, 2**31 - 1, size=m)`` — client ``selected[i]`` trains with ``seeds[i]``;
    3. each selected client ``k`` starts from a fresh copy of the **global** model (never from the
       previous client's result) and runs :func:`train_client_locally` on ``partition[k]``;
    4. the clients' :func:`clone_model_state` snapshots are averaged with weights ``n_k / m_t``
       (:func:`aggregate_weighted_average`) and loaded into ``global_model``.

    Returns ``{"selected": [ids], "num_samples": [n_k], "client_losses": [last-epoch loss per client],
    "train_loss": the n_k-weighted mean of those, "local_steps": [u_k], "bytes_down": m·S,
    "bytes_up": m·S}`` with ``S`` the global state dict's bytes. ``global_model``'s parameters and
    buffers are replaced (its training mode is left as it was); ``rng`` is advanced.
    """
    global_model = require_module("global_model", global_model)
    dataset = require_dataset("dataset", dataset)
    partition = require_partition("partition", partition, len(dataset))
    epochs = require_int("epochs", epochs, minimum=1)
    batch_size = require_batch_size("batch_size", batch_size)
    lr = require_lr("lr", lr)
    momentum = require_momentum("momentum", momentum)
    selected = select_clients(len(partition), fraction, rng)
    seeds = rng.integers(0, 2**31 - 1, size=len(selected))

    states, counts, losses, steps = [], [], [], []
    for k, seed in zip(selected, seeds):
        local = copy.deepcopy(global_model)  # the broadcast: every client starts from w_t
        result = train_client_locally(local, dataset, partition[k], epochs, batch_size, lr, int(seed), momentum)
        states.append(clone_model_state(local))  # the upload
        counts.append(result["num_samples"])
        losses.append(result["epoch_losses"][-1])
        steps.append(result["num_steps"])
    load_model_state(global_model, aggregate_weighted_average(states, counts))  # w_{t+1}
    size = state_dict_bytes(global_model.state_dict())
    return {
        "selected": selected,
        "num_samples": counts,
        "client_losses": losses,
        "train_loss": sum(n * l for n, l in zip(counts, losses)) / sum(counts),
        "local_steps": steps,
        "bytes_down": len(selected) * size,
        "bytes_up": len(selected) * size,
    }


# --- Lesson 19 -------------------------------------------------------------------------------------
def evaluate_accuracy(model: nn.Module, dataset: LabelledDataset) -> float:
    """Fraction of ``dataset`` whose arg-max logit equals the label, in ``[0, 1]``, a Python float.

    Evaluates in **eval mode** under ``torch.no_grad()`` — BatchNorm then uses its running statistics
    and updates nothing, dropout is off — and restores the model's previous mode afterwards. The model
    is not mutated. ``logits = model(features)``: ``(n, n_classes)``; prediction ``argmax(dim=1)``.
    An empty dataset is refused (``ValueError`` naming ``dataset``), as the lesson's solution does.
    """
    model = require_module("model", model)
    dataset = require_dataset("dataset", dataset)
    if len(dataset) == 0:
        raise ValueError("dataset must hold at least one example: the accuracy of no examples is undefined")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(dataset.features)  # (n, n_classes), or (n, T, V) for a character model
    finally:
        model.train(was_training)
    return float((logits.argmax(dim=-1) == dataset.labels).to(torch.float64).mean())


# --- Lesson 20 -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FedAvgConfig:
    """Everything one FedAvg run depends on; the defaults (E = 1) run in well under a second on one CPU core.

    ``task`` picks the data and model (:mod:`trainsys.fedavg.tasks`); for a real task ``num_examples``,
    ``d_in`` and ``n_classes`` must equal the data's (the configs of :mod:`trainsys.fedavg.real` set them),
    and ``test_fraction`` is unused (the source's own held-out set is used).
    """

    num_examples: int = 4000  # before the held-out split (800 test, 3200 train); real tasks: training examples
    d_in: int = 20
    n_classes: int = 10
    d_hidden: int = 32
    test_fraction: float = 0.2
    num_clients: int = 40  # K: 80 training examples each
    fraction: float = 0.1  # C: 4 clients per round
    epochs: int = 1  # E
    batch_size: int | None = 10  # B (None = the whole client: B = ∞)
    lr: float = 0.1
    momentum: float = 0.0
    rounds: int = 50
    partition: str = "iid"  # "iid", "shards" (pathological non-IID) or "dirichlet"
    shards_per_client: int = 2
    alpha: float = 0.5  # Dirichlet concentration (partition="dirichlet" only)
    seed: int = 0
    progress: bool = False  # a tqdm bar over rounds
    task: str = "synthetic"  # "synthetic", "fashion-mnist" or "shakespeare"
    hidden_layers: int = 1  # MLP hidden layers of d_hidden units (the 2NN: 2); GPT blocks for shakespeare
    context: int = 32  # shakespeare: characters per sequence
    min_chars: int = 2000  # shakespeare: a (play, role) with fewer characters is not a client
    test_sequences: int = 2000  # shakespeare: held-out sequences evaluated each round (a fixed draw)
    stop_at: float | None = None  # end the run at the first round whose test accuracy is >= stop_at


def validate_fedavg_config(config: FedAvgConfig | Mapping[str, object]) -> FedAvgConfig:
    """A :class:`FedAvgConfig` from a config or a dict of overrides, every field checked (named on error)."""
    if isinstance(config, Mapping):
        unknown = sorted(set(config) - {f.name for f in fields(FedAvgConfig)})
        if unknown:
            raise ValueError(f"config has unknown keys {unknown}; allowed: {[f.name for f in fields(FedAvgConfig)]}")
        config = FedAvgConfig(**config)
    if not isinstance(config, FedAvgConfig):
        raise TypeError(f"config must be a FedAvgConfig or a dict, got {describe(config)}")
    c = config
    for name in ("num_examples", "d_in", "d_hidden", "epochs", "rounds", "shards_per_client", "hidden_layers",
                 "context", "test_sequences"):
        require_int(name, getattr(c, name), minimum=1)
    require_int("n_classes", c.n_classes, minimum=2)
    require_seed("seed", c.seed)
    require_lr("lr", c.lr)
    require_batch_size("batch_size", c.batch_size)
    require_fraction("fraction", c.fraction)
    if isinstance(c.test_fraction, bool) or not isinstance(c.test_fraction, numbers.Real) \
            or not 0 < c.test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {describe(c.test_fraction)}")
    require_momentum("momentum", c.momentum)
    require_int("min_chars", c.min_chars, minimum=2)
    if c.task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {c.task!r}")
    if c.partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}, got {c.partition!r}")
    if c.partition == "natural" and c.task != "shakespeare":
        raise ValueError(f"partition 'natural' (one client per speaking role) needs task 'shakespeare', "
                         f"got task {c.task!r}")
    if c.task == "shakespeare" and c.partition in ("shards", "dirichlet"):
        raise ValueError(f"partition must be 'natural' or 'iid' for task 'shakespeare' (labels are sequences), "
                         f"got {c.partition!r}")
    if isinstance(c.alpha, bool) or not isinstance(c.alpha, numbers.Real) or not 0 < c.alpha < math.inf:
        raise ValueError(f"alpha must be a finite number > 0, got {describe(c.alpha)}")
    if c.stop_at is not None:
        require_fraction("stop_at", c.stop_at)
    if not isinstance(c.progress, bool):
        raise TypeError(f"progress must be a bool, got {describe(c.progress)}")
    require_int("num_clients", c.num_clients, minimum=1, maximum=c.num_examples)  # exact bound: the partition's
    return c


def run_seeds(seed: int) -> dict[str, int]:
    """The seeds of one run, all derived from ``config.seed``: data, split, partition, model, rounds."""
    return {"data": seed, "split": seed + 1, "partition": seed + 2, "model": seed + 3, "rounds": seed + 4}


def prepare_run(config: FedAvgConfig) -> tuple[LabelledDataset, LabelledDataset, nn.Module, dict[str, int]]:
    """``(train, test, model, seeds)``: the data split **before** anything is fitted, and the initial model.

    Synthetic task: ``build_synthetic_dataset(..., seeds["data"])`` split by ``train_test_split_dataset(...,
    seeds["split"])``; real tasks: the source's own train/test split (:func:`~trainsys.fedavg.tasks.load_task`).
    The model: :func:`~trainsys.fedavg.tasks.build_task_model` seeded ``seeds["model"]``.
    """
    seeds = run_seeds(config.seed)
    task = load_task(config)
    return task.train, task.test, build_task_model(config, seeds["model"]), seeds


def make_partition(config: FedAvgConfig, train: LabelledDataset, seed: int) -> Partition:
    """The partition ``config.partition`` names, of the training set only ("natural": Shakespeare's roles)."""
    if config.partition == "natural":
        return [part.clone() for part in load_task(config).natural]
    if config.partition == "iid":
        return partition_data_iid(train, config.num_clients, seed)
    alpha = config.alpha if config.partition == "dirichlet" else None
    return partition_data_non_iid(train, config.num_clients, config.shards_per_client, seed, alpha=alpha)


def run_fedavg(config: FedAvgConfig | Mapping[str, object]) -> dict[str, object]:
    """``config.rounds`` rounds of FedAvg on ``config.task`` (the synthetic task by default); returns the run record.

    With ``seeds = run_seeds(config.seed)``: data ``build_synthetic_dataset(num_examples, d_in,
    n_classes, seeds["data"])``, split ``train_test_split_dataset(data, test_fraction, seeds["split"])``,
    partition of the training set (:func:`make_partition`, ``seeds["partition"]``), model
    ``build_mlp_classifier(d_in, d_hidden, n_classes, seeds["model"])`` (real tasks: :func:`prepare_run`), and one
    ``rng = numpy.random.default_rng(seeds["rounds"])`` for every round's :func:`run_communication_round`.
    Test accuracy (:func:`evaluate_accuracy` on the held-out part) before training and after each round.

    The record: ``{"kind": "fedavg", "config": asdict(validated config), "seeds", "client_sizes",
    "initial_test_accuracy", "history": [{"round": t (1-based), "test_accuracy", "train_loss",
    "selected", "local_steps", "bytes_up", "bytes_down"}, ...], "final_test_accuracy",
    "bytes_communicated": {"up", "down", "total"}, "wall_time_s"}``. A tqdm bar over rounds when
    ``config.progress``. With ``config.stop_at`` the run ends after the first round whose test accuracy is
    ``>= stop_at`` (``len(history)`` is then the rounds to that target). Raises ``TypeError``/``ValueError`` naming the bad field.
    """
    config = validate_fedavg_config(config)
    start = time.perf_counter()
    train, test, model, seeds = prepare_run(config)
    partition = make_partition(config, train, seeds["partition"])
    rng = np.random.default_rng(seeds["rounds"])
    record: dict[str, object] = {"kind": "fedavg", "config": asdict(config), "seeds": seeds,
                                 "client_sizes": [int(p.numel()) for p in partition],
                                 "initial_test_accuracy": evaluate_accuracy(model, test)}
    history = []
    for t in tqdm(range(1, config.rounds + 1), desc=f"FedAvg {config.partition}", disable=not config.progress):
        info = run_communication_round(model, train, partition, config.fraction, config.epochs,
                                       config.batch_size, config.lr, rng, config.momentum)
        history.append({"round": t, "test_accuracy": evaluate_accuracy(model, test), "train_loss": info["train_loss"],
                        "selected": info["selected"], "local_steps": info["local_steps"],
                        "bytes_up": info["bytes_up"], "bytes_down": info["bytes_down"]})
        if config.stop_at is not None and history[-1]["test_accuracy"] >= config.stop_at:
            break  # rounds to target: the round that reached it is the last
    up, down = sum(h["bytes_up"] for h in history), sum(h["bytes_down"] for h in history)
    record.update(history=history, final_test_accuracy=history[-1]["test_accuracy"],
                  bytes_communicated={"up": up, "down": down, "total": up + down},
                  wall_time_s=time.perf_counter() - start)
    return record


def with_overrides(config: FedAvgConfig | Mapping[str, object], **overrides: object) -> FedAvgConfig:
    """``config`` validated, with some fields replaced and validated again."""
    return validate_fedavg_config(replace(validate_fedavg_config(config), **overrides))

