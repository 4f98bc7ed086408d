"""Witnesses for Module 3, Part 5 (the server and the loop): one wrong answer per broken clause."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import torch

from tests.answers.clauses import existing
from trainsys.fedavg import server as ref
from trainsys.fedavg.data import LabelledDataset
from trainsys.fedavg.client import require_momentum


# --- select_clients ----------------------------------------------------------------------------------
def _select_zero_clients(num_clients, fraction, rng):
    """Checks that num_clients is not negative, so 0 passes (and NumPy's own error names nothing)."""
    if isinstance(num_clients, int) and not isinstance(num_clients, bool) and num_clients < 0:
        raise ValueError(f"num_clients must be >= 0, got {num_clients}")
    if num_clients == 0:
        m = ref.clients_per_round(1, fraction)
        return sorted(int(k) for k in rng.choice(0, size=m, replace=False))
    return ref.select_clients(num_clients, fraction, rng)


def _select_zero_fraction(num_clients, fraction, rng):
    """Refuses a negative fraction but lets 0 through (max(ceil(0), 1) = 1 client)."""
    if fraction == 0:
        return ref.select_clients(num_clients, 1 / num_clients, rng)
    return ref.select_clients(num_clients, fraction, rng)


def _select_nan_fraction(num_clients, fraction, rng):
    """Checks 'fraction <= 0 or fraction > 1': NaN slips through and ceil(NaN) fails without naming fraction."""
    if isinstance(fraction, float) and math.isnan(fraction):
        return sorted(int(k) for k in rng.choice(num_clients, size=max(math.ceil(fraction * num_clients), 1),
                                                 replace=False))
    return ref.select_clients(num_clients, fraction, rng)


def _select_float_clients(num_clients, fraction, rng):
    """num_clients converted with int(): 2.5 is taken as 2."""
    if isinstance(num_clients, float):
        num_clients = int(num_clients)
    return ref.select_clients(num_clients, fraction, rng)


# --- run_communication_round ----------------------------------------------------------------------------
def _round_eval_global(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0):
    """Puts the global model in eval mode 'because it is not trained here' and leaves it there."""
    info = ref.run_communication_round(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng,
                                       momentum)
    global_model.eval()
    return info


def _round_momentum_late(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0):
    """Every argument validated up front except momentum, which the clients refuse after rng has been drawn."""
    try:
        require_momentum("momentum", momentum)
    except (TypeError, ValueError):
        selected = ref.select_clients(len(partition), fraction, rng)
        rng.integers(0, 2**31 - 1, size=len(selected))
        raise
    return ref.run_communication_round(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng,
                                       momentum)


def _round_select_before_epochs(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng,
                                momentum=0.0):
    """Checks the model, the data and the partition, draws the clients, and only then checks epochs, B, lr, mu."""
    ref.require_module("global_model", global_model)
    ref.require_dataset("dataset", dataset)
    ref.require_partition("partition", partition, len(dataset))
    before = rng.bit_generator.state
    ref.select_clients(len(partition), fraction, rng)
    ref.require_int("epochs", epochs, minimum=1)
    ref.require_batch_size("batch_size", batch_size)
    ref.require_lr("lr", lr)
    require_momentum("momentum", momentum)
    rng.bit_generator.state = before  # valid arguments: the reference's round, draws included
    return ref.run_communication_round(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng,
                                       momentum)


def _round_accepting_a_tuple(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0):
    """A (features, labels) tuple is wrapped into a LabelledDataset instead of being refused."""
    if isinstance(dataset, tuple):
        features, labels = dataset
        dataset = LabelledDataset(features, labels, int(labels.max()) + 1)
    return ref.run_communication_round(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng,
                                       momentum)


def _round_model_unchecked(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0):
    """Measures S from global_model.state_dict() before any check: a dict fails with AttributeError."""
    size = sum(t.numel() * t.element_size() for t in global_model.state_dict().values())
    info = ref.run_communication_round(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng,
                                       momentum)
    return {**info, "bytes_up": len(info["selected"]) * size}


# --- evaluate_accuracy ----------------------------------------------------------------------------------
def _evaluate_zero_grad(model, dataset):
    """Clears the gradients first, out of a training loop's habit."""
    if isinstance(model, torch.nn.Module):
        model.zero_grad()
    return ref.evaluate_accuracy(model, dataset)


def _evaluate_accepting_a_tuple(model, dataset):
    """A (features, labels) tuple is wrapped into a LabelledDataset instead of being refused."""
    if isinstance(dataset, tuple):
        features, labels = dataset
        dataset = LabelledDataset(features, labels, int(labels.max()) + 1)
    return ref.evaluate_accuracy(model, dataset)


def _evaluate_model_unchecked(model, dataset):
    """No check that model is a module: a dict fails with AttributeError on .training."""
    was = model.training
    accuracy = ref.evaluate_accuracy(model, dataset)
    model.train(was)
    return accuracy


# --- run_fedavg -----------------------------------------------------------------------------------------
def _fedavg_filling_the_callers_dict(config):
    """Writes the validated fields back into the caller's dict (handy, but the caller's object changes)."""
    validated = ref.validate_fedavg_config(config)
    if isinstance(config, dict):
        config.update(asdict(validated))
    return ref.run_fedavg(validated)


def _fedavg_unknown_partition_as_iid(config):
    """An unknown partition name falls back to the IID deal instead of raising."""
    if isinstance(config, dict) and config.get("partition", "iid") not in ref.PARTITIONS:
        config = {**config, "partition": "iid"}
    return ref.run_fedavg(config)


def _fedavg_dropping_unknown_keys(config):
    """Keys that are not FedAvgConfig fields are silently dropped."""
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k in ref.FedAvgConfig.__dataclass_fields__}
    return ref.run_fedavg(config)


WITNESSES = {
    "select_clients": {
        "mutation": [existing("select_clients", "rng.permutation(K)[:m]"),
                     existing("select_clients", "rng.choice(..., shuffle=False)"),
                     existing("select_clients", "C = 1 answered without a draw")],
        "failure modes": [("num_clients = 0 passes a sign check", _select_zero_clients),
                          ("fraction = 0 passes a sign check", _select_zero_fraction),
                          ("NaN slips past 'fraction <= 0 or fraction > 1'", _select_nan_fraction),
                          ("num_clients = 2.5 truncated by int()", _select_float_clients),
                          existing("select_clients", "an int seed accepted"),
                          existing("select_clients", "np.random.RandomState accepted"),
                          existing("select_clients", "num_clients=True accepted"),
                          existing("select_clients", "fraction=True accepted")],
        "metric that proves it correct": [existing("select_clients", "draws with replacement"),
                                          existing("select_clients", "always the first m clients"),
                                          existing("select_clients", "max(int(C * K), 1): rounds down"),
                                          existing("select_clients", "ceil(C * K) on the raw float product"),
                                          existing("select_clients", "np.int64 ids"),
                                          existing("select_clients", "C*K rounded to 6 decimals"),
                                          existing("select_clients", "ceil(C*K - 1e-9)")],
    },
    "run_communication_round": {
        "mutation": [existing("run_communication_round", "global_model.train()"),
                     existing("run_communication_round", "average installed with load_state_dict(assign=True)"),
                     ("the global model left in eval mode", _round_eval_global)],
        "failure modes": [existing("run_communication_round", "clients drawn before epochs/lr/batch_size"),
                          existing("run_communication_round", "a partition entry with repeated indices"),
                          ("the clients drawn before epochs, B, lr and mu are checked", _round_select_before_epochs),
                          ("momentum refused only by the clients, after the draws", _round_momentum_late),
                          ("a (features, labels) tuple wrapped, not refused", _round_accepting_a_tuple),
                          ("global_model read before it is checked", _round_model_unchecked)],
        "metric that proves it correct": [
            existing("run_communication_round", "unweighted mean of the client models (the issue's first"),
            existing("run_communication_round", "weights n_k / n over all clients"),
            existing("run_communication_round", "aggregates the deltas with the wrong sign"),
            existing("run_communication_round", "each client starts from the previous client's model"),
            existing("run_communication_round", "counts one state dict of bytes per round"),
            existing("run_communication_round", "S from parameters() only"),
            existing("run_communication_round", "first epoch's loss"),
            existing("run_communication_round", "momentum not passed to the clients"),
        ],
    },
    "evaluate_accuracy": {
        "mutation": [existing("evaluate_accuracy", "leaves the model in eval mode"),
                     existing("evaluate_accuracy", "model.training = was"),
                     existing("evaluate_accuracy", "model.train() afterwards"),
                     existing("evaluate_accuracy", "mode not restored when the forward raises"),
                     ("zero_grad() before measuring", _evaluate_zero_grad)],
        "ties": [existing("evaluate_accuracy", "ties go to the last maximal logit")],
        "failure modes": [("a (features, labels) tuple wrapped, not refused", _evaluate_accepting_a_tuple),
                          ("model not checked: a dict fails with AttributeError", _evaluate_model_unchecked)],
        "metric that proves it correct": [existing("evaluate_accuracy", "returns the number of correct predictions"),
                                          existing("evaluate_accuracy", "evaluates in training mode"),
                                          existing("evaluate_accuracy", "forward in training mode")],
    },
    "run_fedavg": {
        "mutation": [existing("run_fedavg", "torch.manual_seed(config.seed)"),
                     ("the validated fields written back into the caller's dict", _fedavg_filling_the_callers_dict)],
        "failure modes": [("an unknown partition name runs IID", _fedavg_unknown_partition_as_iid),
                          ("unknown keys dropped", _fedavg_dropping_unknown_keys)],
        "metric that proves it correct": [
            existing("run_fedavg", "records the test accuracy before each round"),
            existing("run_fedavg", "reports accuracy on the training data"),
            existing("run_fedavg", "partitions the whole dataset"),
            existing("run_fedavg", "a new generator every round"),
            existing("run_fedavg", "bytes_communicated counts the uploads only"),
            existing("run_fedavg", "final accuracy = best round"),
            existing("run_fedavg", "'dirichlet' runs the shards deal"),
            existing("run_fedavg", "shards_per_client not passed"),
        ],
    },
}
