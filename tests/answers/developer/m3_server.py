"""Mutants for Module 3, Part 5 (lessons 17–20: the server): the mistakes the notebooks name.

Two of the issue's three aggregation mistakes live in the round: weights ``n_k / n`` over *all*
clients (the pre-erratum Algorithm 1), and aggregating deltas with the wrong sign.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict

import numpy as np

from trainsys.fedavg import server as ref
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.state import (
    add_state_dicts,
    aggregate_weighted_average,
    clone_model_state,
    load_model_state,
    scale_state_dict,
    state_dict_bytes,
)

REFERENCE = "trainsys.fedavg.server"


def _select(variant: str):
    def wrong(num_clients, fraction, rng):
        ref.select_clients(num_clients, fraction, np.random.default_rng(0))  # validation only
        if variant == "floor_no_max":
            m = math.floor(fraction * num_clients)
        elif variant == "floor_with_max":
            m = max(int(fraction * num_clients), 1)
        elif variant == "ceil_float_noise":
            m = max(math.ceil(fraction * num_clients), 1)  # float noise: 0.07 * 100 -> 8
        else:
            m = ref.clients_per_round(num_clients, fraction)
        if variant == "with_replacement":
            return sorted(int(k) for k in rng.choice(num_clients, size=m, replace=True))
        if variant == "first_m":
            return list(range(m))
        return sorted(int(k) for k in rng.choice(num_clients, size=m, replace=False))

    return wrong


def _round(variant: str):
    def wrong(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0):
        ref.require_fraction("fraction", fraction)
        ref.require_int("epochs", epochs, minimum=1)
        ref.require_batch_size("batch_size", batch_size)
        ref.require_lr("lr", lr)
        ref.require_partition("partition", partition, len(dataset))
        if variant == "seeds_first":
            seeds = rng.integers(0, 2**31 - 1, size=ref.clients_per_round(len(partition), fraction))
            selected = ref.select_clients(len(partition), fraction, rng)
        else:
            selected = ref.select_clients(len(partition), fraction, rng)
            seeds = rng.integers(0, 2**31 - 1, size=len(selected))
        global_state = clone_model_state(global_model)
        states, counts, losses, steps = [], [], [], []
        local = copy.deepcopy(global_model)
        for k, seed in zip(selected, seeds):
            if variant != "sequential":
                local = copy.deepcopy(global_model)
            result = train_client_locally(local, dataset, partition[k], epochs, batch_size, lr, int(seed), momentum)
            states.append(clone_model_state(local))
            counts.append(result["num_samples"])
            losses.append(result["epoch_losses"][-1])
            steps.append(result["num_steps"])
        if variant == "unweighted":
            new = aggregate_weighted_average(states, [1] * len(states))
        elif variant == "all_clients":  # n_k / n with n over every client, selected or not
            n = sum(int(p.numel()) for p in partition)
            new = scale_state_dict(states[0], counts[0] / n)
            for s, c in zip(states[1:], counts[1:]):
                new = add_state_dicts(new, scale_state_dict(s, c / n))
        elif variant == "delta_sign":  # w + sum p_k (w - w_k) instead of w - sum p_k (w - w_k)
            avg = aggregate_weighted_average(states, counts)
            delta = add_state_dicts(global_state, scale_state_dict(avg, -1.0))
            new = add_state_dicts(global_state, delta)
        else:
            new = aggregate_weighted_average(states, counts)
        load_model_state(global_model, new)
        size = state_dict_bytes(global_model.state_dict())
        per_round = size if variant == "bytes_once" else len(selected) * size
        return {"selected": selected, "num_samples": counts, "client_losses": losses,
                "train_loss": sum(n * l for n, l in zip(counts, losses)) / sum(counts), "local_steps": steps,
                "bytes_down": per_round, "bytes_up": per_round}

    return wrong


def _evaluate(variant: str):
    def wrong(model, dataset):
        ref.evaluate_accuracy(model, dataset)  # validation
        was_training = model.training
        if variant != "train_mode":
            model.eval()
        with ref.torch.no_grad():
            logits = model(dataset.features)
        if variant != "no_restore":
            model.train(was_training)
        correct = (logits.argmax(dim=1) == dataset.labels).sum()
        if variant == "count":
            return int(correct)
        return float(correct) / len(dataset)

    return wrong


def _fedavg(variant: str):
    def wrong(config):
        config = ref.validate_fedavg_config(config)
        record = ref.run_fedavg(config)
        train, test, model, seeds = ref.prepare_run(config)
        if variant == "split_after_partition":  # clients may hold held-out examples
            data = ref.build_synthetic_dataset(config.num_examples, config.d_in, config.n_classes, seeds["data"])
            train = data
        partition = ref.make_partition(config, train, seeds["partition"])
        history = []
        rng = np.random.default_rng(seeds["rounds"])
        for t in range(1, config.rounds + 1):
            if variant == "rng_per_round":
                rng = np.random.default_rng(seeds["rounds"])
            before = ref.evaluate_accuracy(model, test)
            info = ref.run_communication_round(model, train, partition, config.fraction, config.epochs,
                                               config.batch_size, config.lr, rng, config.momentum)
            acc = ref.evaluate_accuracy(model, train if variant == "train_accuracy" else test)
            history.append({"round": t, "test_accuracy": before if variant == "accuracy_before" else acc,
                            "train_loss": info["train_loss"], "selected": info["selected"],
                            "local_steps": info["local_steps"], "bytes_up": info["bytes_up"],
                            "bytes_down": info["bytes_down"]})
        up = sum(h["bytes_up"] for h in history)
        total = up if variant == "bytes_up_only" else 2 * up
        record.update(history=history, final_test_accuracy=history[-1]["test_accuracy"], config=asdict(config),
                      client_sizes=[int(p.numel()) for p in partition],
                      bytes_communicated={"up": up, "down": up, "total": total})
        return record

    return wrong


MUTANTS = {
    "select_clients": [
        ("draws with replacement (a client can be picked twice)", _select("with_replacement")),
        ("floor(C * K) without max(., 1): no client at all for small C", _select("floor_no_max")),
        ("max(int(C * K), 1): rounds down instead of up", _select("floor_with_max")),
        ("ceil(C * K) on the raw float product (0.07 * 100 selects 8)", _select("ceil_float_noise")),
        ("always the first m clients", _select("first_m")),
    ],
    "run_communication_round": [
        ("unweighted mean of the client models (the issue's first mutant)", _round("unweighted")),
        ("weights n_k / n over all clients, not the selected ones (the issue's second)", _round("all_clients")),
        ("aggregates the deltas with the wrong sign (the issue's third)", _round("delta_sign")),
        ("each client starts from the previous client's model, not the global one", _round("sequential")),
        ("counts one state dict of bytes per round instead of one per client", _round("bytes_once")),
        ("draws the client seeds before selecting the clients", _round("seeds_first")),
    ],
    "evaluate_accuracy": [
        ("evaluates in training mode (BatchNorm uses and updates batch statistics)", _evaluate("train_mode")),
        ("leaves the model in eval mode", _evaluate("no_restore")),
        ("returns the number of correct predictions", _evaluate("count")),
    ],
    "run_fedavg": [
        ("records the test accuracy before each round instead of after", _fedavg("accuracy_before")),
        ("reports accuracy on the training data", _fedavg("train_accuracy")),
        ("partitions the whole dataset, held-out examples included", _fedavg("split_after_partition")),
        ("a new generator every round: the same clients every round", _fedavg("rng_per_round")),
        ("bytes_communicated counts the uploads only", _fedavg("bytes_up_only")),
    ],
}
