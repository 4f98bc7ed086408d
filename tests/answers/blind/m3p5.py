"""Red team, Module 3 Part 5 (communication rounds and the FedAvg loop): wrong answers and correct alternatives written
from the release notebooks only."""
from __future__ import annotations

import copy
import math
import numbers
import time
from dataclasses import asdict

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.data import LabelledDataset, build_synthetic_dataset, train_test_split_dataset
from trainsys.fedavg.model import build_mlp_classifier
from trainsys.fedavg.partition import partition_data_iid, partition_data_non_iid
from trainsys.fedavg.server import evaluate_accuracy as _given_evaluate            # Lesson 20 setup imports it
from trainsys.fedavg.server import run_communication_round as _given_round         # Lesson 20 setup imports it
from trainsys.fedavg.server import select_clients as _given_select                 # Lesson 18 setup imports it
from trainsys.fedavg.server import validate_fedavg_config
from trainsys.fedavg.state import aggregate_weighted_average, clone_model_state, load_model_state


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x):
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 17: select_clients
# ----------------------------------------------------------------------------------------------------------------------

def _select(num_clients, fraction, rng, *, flaw=None):
    ok = isinstance(num_clients, (int, np.integer)) if flaw == "bool_clients" else _is_int(num_clients)
    if not ok:
        raise TypeError(f"num_clients must be an integer, got {type(num_clients).__name__}")
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    ok = isinstance(fraction, numbers.Real) if flaw == "bool_fraction" else _is_real(fraction)
    if not ok:
        raise TypeError(f"fraction must be a real number, got {type(fraction).__name__}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if flaw == "random_state_ok":
        if not isinstance(rng, (np.random.Generator, np.random.RandomState)):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    elif flaw == "seed_ok" and _is_int(rng):
        rng = np.random.default_rng(rng)
    elif not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    K = int(num_clients)
    product = float(fraction) * K
    if flaw == "raw_ceil":
        m = max(math.ceil(product), 1)
    elif flaw == "floor":
        m = max(int(product), 1)
    elif flaw == "round6":
        m = max(math.ceil(round(product, 6)), 1)
    elif flaw == "epsilon":
        m = max(math.ceil(product - 1e-9), 1)
    else:
        m = max(math.ceil(round(product, 12)), 1)
    if flaw == "full_shortcut" and m == K:
        return list(range(K))
    if flaw == "with_replacement":
        ids = rng.choice(K, size=m)
    elif flaw == "no_shuffle":
        ids = rng.choice(K, size=m, replace=False, shuffle=False)
    elif flaw == "permutation":
        ids = rng.permutation(K)[:m]
    elif flaw == "first_m":
        ids = np.arange(m)
    else:
        ids = rng.choice(K, size=m, replace=False)
    if flaw == "numpy_ints":
        return sorted(ids)
    return sorted(int(i) for i in ids)


def _mksel(flaw, doc):
    def select_clients(num_clients, fraction, rng):
        return _select(num_clients, fraction, rng, flaw=flaw)
    select_clients.__name__ = f"_select_{flaw}"
    select_clients.__doc__ = doc
    return select_clients


_select_with_replacement = _mksel("with_replacement", "rng.choice(K, size=m)")
_select_floor = _mksel("floor", "max(int(C*K), 1)")
_select_raw_ceil = _mksel("raw_ceil", "ceil of the raw product")
_select_first_m = _mksel("first_m", "clients 0..m-1")
_select_numpy_ints = _mksel("numpy_ints", "np.int64 ids")
_select_permutation = _mksel("permutation", "rng.permutation(K)[:m]")
_select_seed_ok = _mksel("seed_ok", "an int seed turned into a generator")
_select_random_state_ok = _mksel("random_state_ok", "legacy RandomState accepted")
_select_bool_clients = _mksel("bool_clients", "num_clients=True accepted")
_select_bool_fraction = _mksel("bool_fraction", "fraction=True accepted")
_select_round6 = _mksel("round6", "C*K rounded to 6 decimals")
_select_epsilon = _mksel("epsilon", "ceil(C*K - 1e-9)")
_select_full_shortcut = _mksel("full_shortcut", "m == K answered without a draw")
_select_no_shuffle = _mksel("no_shuffle", "rng.choice(..., shuffle=False)")


def _select_alt_floordiv(num_clients, fraction, rng):
    """Ceiling by negated floor division; np.sort(...).tolist() gives Python ints."""
    if isinstance(num_clients, bool) or not isinstance(num_clients, numbers.Integral):
        raise TypeError(f"num_clients: expected an int, got {num_clients!r}")
    if num_clients < 1:
        raise ValueError(f"num_clients: must be >= 1, got {num_clients}")
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
        raise TypeError(f"fraction: expected a real number, got {fraction!r}")
    if not (fraction > 0 and fraction <= 1):
        raise ValueError(f"fraction: must be in (0, 1], got {fraction}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
    product = round(fraction * num_clients, 12)
    m = max(int(-(-product // 1)), 1)
    return np.sort(rng.choice(int(num_clients), size=m, replace=False)).tolist()


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 18: run_communication_round
# ----------------------------------------------------------------------------------------------------------------------

def _validate_round(global_model, dataset, partition, epochs, batch_size, lr, momentum, *, flaw=None):
    if not isinstance(global_model, nn.Module):
        raise TypeError(f"global_model must be an nn.Module, got {type(global_model).__name__}")
    if not isinstance(dataset, LabelledDataset):
        raise TypeError(f"dataset must be a LabelledDataset, got {type(dataset).__name__}")
    if not isinstance(partition, (list, tuple)) or len(partition) == 0:
        raise ValueError("partition must be a non-empty list of index tensors")
    n = len(dataset)
    for k, idx in enumerate(partition):
        if not isinstance(idx, torch.Tensor) or idx.dtype != torch.int64 or idx.ndim != 1:
            raise TypeError(f"partition[{k}] must be a 1-D int64 tensor")
        if idx.numel() == 0:
            raise ValueError(f"partition[{k}] is empty")
        if int(idx.min()) < 0 or int(idx.max()) >= n:
            raise ValueError(f"partition[{k}] holds an index outside [0, {n})")
        if flaw != "no_duplicate_check" and torch.unique(idx).numel() != idx.numel():
            raise ValueError(f"partition[{k}] repeats an index")
    if not _is_int(epochs):
        raise TypeError("epochs must be an integer")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if batch_size is not None:
        if not _is_int(batch_size):
            raise TypeError("batch_size must be an integer or None")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not _is_real(lr):
        raise TypeError("lr must be a real number")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be finite and > 0, got {lr}")
    if not _is_real(momentum):
        raise TypeError("momentum must be a real number")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")


def _round(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0, *, flaw=None):
    if flaw == "select_first":
        selected = _given_select(len(partition), fraction, rng)
        _validate_round(global_model, dataset, partition, epochs, batch_size, lr, momentum)
    else:
        _validate_round(global_model, dataset, partition, epochs, batch_size, lr, momentum, flaw=flaw)
        if flaw == "seeds_first":
            early = rng.integers(0, 2**31 - 1, size=max(math.ceil(round(fraction * len(partition), 12)), 1))
        selected = _given_select(len(partition), fraction, rng)
    if flaw == "seeds_first":
        seeds = early
    else:
        seeds = rng.integers(0, 2**31 - 1, size=len(selected))
    if flaw == "train_global":
        global_model.train()
    shared = copy.deepcopy(global_model) if flaw == "one_copy" else None
    states, counts, losses, steps = [], [], [], []
    for k, seed in zip(selected, seeds):
        local = shared if shared is not None else copy.deepcopy(global_model)
        out = train_client_locally(local, dataset, partition[k], epochs, batch_size, lr, int(seed),
                                   0.0 if flaw == "no_momentum" else momentum)
        states.append(clone_model_state(local))
        counts.append(out["num_samples"])
        losses.append(out["epoch_losses"][0 if flaw == "first_epoch_loss" else -1])
        steps.append(out["num_steps"])
    if flaw == "unweighted":
        average = aggregate_weighted_average(states, [1] * len(states))
    else:
        average = aggregate_weighted_average(states, counts)
    if flaw == "global_share":
        n = sum(len(p) for p in partition)
        share = sum(counts) / n
        average = {k: v * share if v.is_floating_point() else v for k, v in average.items()}
    if flaw == "assign":
        load_model_state(global_model, average)          # validation as usual ...
        global_model.load_state_dict(average, assign=True)   # ... then the tensors themselves are installed
    else:
        load_model_state(global_model, average)
    live = global_model.state_dict()
    if flaw == "parameters_only_bytes":
        S = sum(p.numel() * p.element_size() for p in global_model.parameters())
    elif flaw == "four_bytes":
        S = sum(t.numel() * 4 for t in live.values())
    else:
        S = sum(t.numel() * t.element_size() for t in live.values())
    m = len(selected)
    if flaw == "unweighted_loss":
        train_loss = sum(losses) / len(losses)
    elif flaw == "numpy_loss":
        train_loss = np.average(losses, weights=counts)
    else:
        train_loss = float(sum(n * l for n, l in zip(counts, losses)) / sum(counts))
    return {"selected": list(selected), "num_samples": counts, "client_losses": losses, "train_loss": train_loss,
            "local_steps": steps, "bytes_down": m * S, "bytes_up": S if flaw == "one_upload" else m * S}


def _mkr(flaw, doc):
    def run_communication_round(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng,
                                momentum=0.0):
        return _round(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum, flaw=flaw)
    run_communication_round.__name__ = f"_round_{flaw}"
    run_communication_round.__doc__ = doc
    return run_communication_round


_round_unweighted = _mkr("unweighted", "aggregate_weighted_average(states, [1] * m)")
_round_global_share = _mkr("global_share", "weights n_k / n over the whole federation")
_round_one_copy = _mkr("one_copy", "one deep copy shared by every client")
_round_one_upload = _mkr("one_upload", "bytes_up = S")
_round_seeds_first = _mkr("seeds_first", "seeds drawn before the selection")
_round_train_global = _mkr("train_global", "global_model.train() at the start")
_round_assign = _mkr("assign", "the average installed with load_state_dict(assign=True)")
_round_parameters_only_bytes = _mkr("parameters_only_bytes", "S from parameters() only")
_round_four_bytes = _mkr("four_bytes", "S = 4 bytes per number")
_round_unweighted_loss = _mkr("unweighted_loss", "train_loss = plain mean of client losses")
_round_first_epoch_loss = _mkr("first_epoch_loss", "client loss of the first epoch")
_round_select_first = _mkr("select_first", "clients drawn before the other arguments are validated")
_round_no_duplicate_check = _mkr("no_duplicate_check", "repeated indices in a partition entry not refused")
_round_no_momentum = _mkr("no_momentum", "momentum not passed to the clients")
_round_numpy_loss = _mkr("numpy_loss", "train_loss is np.float64")


def _round_alt_reused_client(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0):
    """One client model object, re-loaded with the broadcast snapshot w_t before each client; a stacked float64
    average is not used: the lesson's aggregate is, but the counts come from len(partition[k])."""
    _validate_round(global_model, dataset, partition, epochs, batch_size, lr, momentum)
    selected = _given_select(len(partition), fraction, rng)
    seeds = [int(rng.integers(0, 2**31 - 1)) for _ in selected]          # m scalar draws = one draw of size m
    broadcast = clone_model_state(global_model)
    client = copy.deepcopy(global_model)
    uploads, sizes, last_losses, steps = [], [], [], []
    for k, seed in zip(selected, seeds):
        load_model_state(client, broadcast)
        out = train_client_locally(client, dataset, partition[k], epochs, batch_size, lr, seed, momentum)
        uploads.append(clone_model_state(client))
        sizes.append(len(partition[k]))
        last_losses.append(out["epoch_losses"][-1])
        steps.append(out["num_steps"])
    global_model.load_state_dict(aggregate_weighted_average(uploads, sizes))        # strict, copies in place
    S = sum(t.numel() * t.element_size() for t in global_model.state_dict().values())
    m_t = sum(sizes)
    return {
        "selected": selected,
        "num_samples": sizes,
        "client_losses": last_losses,
        "train_loss": sum(n * l for n, l in zip(sizes, last_losses)) / m_t,
        "local_steps": steps,
        "bytes_down": len(selected) * S,
        "bytes_up": len(selected) * S,
    }


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 19: evaluate_accuracy
# ----------------------------------------------------------------------------------------------------------------------

def _evaluate(model, dataset, *, flaw=None):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(dataset, LabelledDataset):
        raise TypeError(f"dataset must be a LabelledDataset, got {type(dataset).__name__}")
    n = len(dataset)
    if n == 0 and flaw != "empty_ok":
        raise ValueError("dataset has no examples")
    was = model.training
    if flaw != "train_mode":
        model.eval()

    def forward():
        if flaw == "no_no_grad":
            return model(dataset.features)
        with torch.no_grad():
            return model(dataset.features)

    if flaw == "no_finally":
        logits = forward()
        model.train(was)
    else:
        try:
            logits = forward()
        finally:
            if flaw == "no_restore":
                pass
            elif flaw == "train_always":
                model.train()
            elif flaw == "root_flag":
                model.training = was
            else:
                model.train(was)
    if flaw == "ties_last":
        pred = logits.shape[1] - 1 - torch.flip(logits, dims=[1]).argmax(dim=1)
    else:
        pred = logits.argmax(dim=1)
    hits = pred == dataset.labels
    if flaw == "count":
        return int(hits.sum())
    if flaw == "float32_mean":
        return hits.float().mean().item()
    if flaw == "empty_ok":
        return float(hits.double().mean()) if n else float("nan")
    return int(hits.sum()) / n


def _mke(flaw, doc):
    def evaluate_accuracy(model, dataset):
        return _evaluate(model, dataset, flaw=flaw)
    evaluate_accuracy.__name__ = f"_evaluate_{flaw}"
    evaluate_accuracy.__doc__ = doc
    return evaluate_accuracy


_evaluate_train_mode = _mke("train_mode", "forward in training mode")
_evaluate_no_restore = _mke("no_restore", "left in eval mode")
_evaluate_count = _mke("count", "returns the count")
_evaluate_float32_mean = _mke("float32_mean", "hits.float().mean().item()")
_evaluate_no_finally = _mke("no_finally", "mode not restored when the forward raises")
_evaluate_no_no_grad = _mke("no_no_grad", "an autograd graph is built")
_evaluate_empty_ok = _mke("empty_ok", "an empty dataset gives NaN")
_evaluate_ties_last = _mke("ties_last", "ties go to the last maximal logit")
_evaluate_train_always = _mke("train_always", "model.train() afterwards, whatever the caller had")
_evaluate_root_flag = _mke("root_flag", "model.training = was: submodules stay in eval")


def _evaluate_alt_chunked(model, dataset):
    """inference_mode, 64 examples at a time (eval mode: no cross-example coupling), torch.eq + counts."""
    if not isinstance(model, nn.Module):
        raise TypeError("model: expected an nn.Module")
    if not isinstance(dataset, LabelledDataset):
        raise TypeError("dataset: expected a LabelledDataset")
    n = dataset.labels.numel()
    if n == 0:
        raise ValueError("dataset: no examples")
    previous = model.training
    model.train(False)
    correct = 0
    try:
        with torch.inference_mode():
            for start in range(0, n, 64):
                logits = model(dataset.features[start:start + 64])
                correct += int(torch.eq(torch.argmax(logits, dim=1), dataset.labels[start:start + 64]).sum())
    finally:
        model.train(previous)
    return correct / n


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 20: run_fedavg
# ----------------------------------------------------------------------------------------------------------------------

def _fedavg(config, *, flaw=None):
    config = validate_fedavg_config(config)
    start = time.perf_counter()
    if flaw == "global_seed":
        torch.manual_seed(config.seed)
    s = config.seed
    seeds = {"data": s, "split": s + 1, "partition": s + 2, "model": s + 3, "rounds": s + 4}
    used = dict(seeds)
    if flaw == "swap_model_partition":
        used["partition"], used["model"] = used["model"], used["partition"]
    data = build_synthetic_dataset(config.num_examples, config.d_in, config.n_classes, used["data"])
    fraction_test = 0.2 if flaw == "fixed_test_fraction" else config.test_fraction
    if flaw == "partition_before_split":
        train = data
        _, test = train_test_split_dataset(data, fraction_test, used["split"])
    else:
        train, test = train_test_split_dataset(data, fraction_test, used["split"])
    K = config.num_clients
    if config.partition == "iid":
        parts = partition_data_iid(train, K, used["partition"])
    else:
        alpha = config.alpha if (config.partition == "dirichlet" and flaw != "dirichlet_as_shards") else None
        spc = 2 if flaw == "default_shards" else config.shards_per_client
        parts = partition_data_non_iid(train, K, spc, used["partition"], alpha=alpha)
    model = build_mlp_classifier(config.d_in, config.d_hidden, config.n_classes, used["model"])
    rng = np.random.default_rng(used["rounds"])
    initial = _given_evaluate(model, test)
    history = []
    for t in tqdm(range(1, config.rounds + 1), desc=f"FedAvg {config.partition}", disable=not config.progress):
        if flaw == "rng_per_round":
            rng = np.random.default_rng(used["rounds"])
        before = _given_evaluate(model, test) if flaw == "accuracy_before" else None
        info = _given_round(model, train, parts, config.fraction, config.epochs, config.batch_size, config.lr, rng,
                            0.0 if flaw == "no_momentum" else config.momentum)
        if flaw == "accuracy_before":
            acc = before
        elif flaw == "train_accuracy":
            acc = _given_evaluate(model, train)
        else:
            acc = _given_evaluate(model, test)
        loss = info["train_loss"]
        if flaw == "unweighted_loss":
            loss = sum(info["client_losses"]) / len(info["client_losses"])
        history.append({"round": t, "test_accuracy": acc, "train_loss": loss, "selected": info["selected"],
                        "local_steps": info["local_steps"], "bytes_up": info["bytes_up"],
                        "bytes_down": info["bytes_down"]})
    up = sum(h["bytes_up"] for h in history)
    down = sum(h["bytes_down"] for h in history)
    final = max(h["test_accuracy"] for h in history) if flaw == "best_final" else history[-1]["test_accuracy"]
    return {
        "kind": "fedavg",
        "config": asdict(config),
        "seeds": seeds,
        "client_sizes": [len(p) for p in parts],
        "initial_test_accuracy": initial,
        "history": history,
        "final_test_accuracy": final,
        "bytes_communicated": {"up": up, "down": down, "total": up if flaw == "uploads_only" else up + down},
        "wall_time_s": float(time.perf_counter() - start),
    }


def _mkf(flaw, doc):
    def run_fedavg(config):
        return _fedavg(config, flaw=flaw)
    run_fedavg.__name__ = f"_fedavg_{flaw}"
    run_fedavg.__doc__ = doc
    return run_fedavg


_fedavg_accuracy_before = _mkf("accuracy_before", "accuracy recorded before each round")
_fedavg_train_accuracy = _mkf("train_accuracy", "accuracy on the training set")
_fedavg_partition_before_split = _mkf("partition_before_split", "clients dealt the whole dataset")
_fedavg_rng_per_round = _mkf("rng_per_round", "a new round generator every round")
_fedavg_uploads_only = _mkf("uploads_only", "total = uploads")
_fedavg_swap_model_partition = _mkf("swap_model_partition", "model seeded s+2, partition s+3")
_fedavg_dirichlet_as_shards = _mkf("dirichlet_as_shards", "alpha not passed for 'dirichlet'")
_fedavg_default_shards = _mkf("default_shards", "shards_per_client not passed")
_fedavg_no_momentum = _mkf("no_momentum", "momentum not passed to the rounds")
_fedavg_global_seed = _mkf("global_seed", "torch.manual_seed(config.seed) at the start")
_fedavg_unweighted_loss = _mkf("unweighted_loss", "round loss = plain mean of client losses")
_fedavg_best_final = _mkf("best_final", "final accuracy = best round")
_fedavg_fixed_test_fraction = _mkf("fixed_test_fraction", "test_fraction hard-coded to 0.2")


def _fedavg_alt_dispatch(config):
    """The same pipeline written with a partition dispatch table, totals accumulated in the loop."""
    cfg = validate_fedavg_config(config)
    t0 = time.perf_counter()
    base = cfg.seed
    seeds = dict(zip(("data", "split", "partition", "model", "rounds"), range(base, base + 5)))
    full = build_synthetic_dataset(cfg.num_examples, cfg.d_in, cfg.n_classes, seeds["data"])
    train, test = train_test_split_dataset(full, cfg.test_fraction, seeds["split"])
    deal = {
        "iid": lambda: partition_data_iid(train, cfg.num_clients, seeds["partition"]),
        "shards": lambda: partition_data_non_iid(train, cfg.num_clients, cfg.shards_per_client, seeds["partition"]),
        "dirichlet": lambda: partition_data_non_iid(train, cfg.num_clients, cfg.shards_per_client, seeds["partition"],
                                                    alpha=cfg.alpha),
    }
    clients = deal[cfg.partition]()
    model = build_mlp_classifier(cfg.d_in, cfg.d_hidden, cfg.n_classes, seeds["model"])
    round_rng = np.random.default_rng(seeds["rounds"])
    record = {"kind": "fedavg", "config": asdict(cfg), "seeds": seeds, "client_sizes": [int(c.numel()) for c in clients],
              "initial_test_accuracy": _given_evaluate(model, test), "history": []}
    up = down = 0
    rounds = range(1, cfg.rounds + 1)
    for t in (tqdm(rounds, desc=f"FedAvg {cfg.partition}") if cfg.progress else rounds):
        info = _given_round(model, train, clients, cfg.fraction, cfg.epochs, cfg.batch_size, cfg.lr, round_rng,
                            cfg.momentum)
        up += info["bytes_up"]
        down += info["bytes_down"]
        record["history"].append({"round": t, "test_accuracy": _given_evaluate(model, test),
                                  "train_loss": info["train_loss"], "selected": info["selected"],
                                  "local_steps": info["local_steps"], "bytes_up": info["bytes_up"],
                                  "bytes_down": info["bytes_down"]})
    record["final_test_accuracy"] = record["history"][-1]["test_accuracy"]
    record["bytes_communicated"] = {"up": up, "down": down, "total": up + down}
    record["wall_time_s"] = time.perf_counter() - t0
    return record


MUTANTS = {
    "select_clients": [
        ("with replacement ('distinct')", _select_with_replacement),
        ("max(int(C*K), 1) ('m = max(ceil(C K), 1)')", _select_floor),
        ("ceil of the raw product: 0.07*100 -> 8 ('C K is first rounded to 12 decimals')", _select_raw_ceil),
        ("clients 0..m-1 ('uniform')", _select_first_m),
        ("np.int64 ids ('Python ints')", _select_numpy_ints),
        ("rng.permutation(K)[:m] ('one call rng.choice(K, size=m, replace=False)')", _select_permutation),
        ("an int seed accepted ('a seed such as 42 is refused with a TypeError')", _select_seed_ok),
        ("np.random.RandomState accepted ('rng not a numpy.random.Generator')", _select_random_state_ok),
        ("num_clients=True accepted ('bool excluded')", _select_bool_clients),
        ("fraction=True accepted ('bool excluded')", _select_bool_fraction),
        ("C*K rounded to 6 decimals ('rounded to 12 decimals')", _select_round6),
        ("ceil(C*K - 1e-9) ('round(C K, 12)')", _select_epsilon),
        ("C = 1 answered without a draw ('advanced by exactly one draw')", _select_full_shortcut),
        ("rng.choice(..., shuffle=False): same set, different generator state ('one call rng.choice(K, size=m, "
         "replace=False)')", _select_no_shuffle),
    ],
    "run_communication_round": [
        ("unweighted mean of the client models ('n_k / m_t')", _round_unweighted),
        ("weights n_k / n over the whole federation ('normalises over the clients that actually took part')",
         _round_global_share),
        ("one deep copy for all clients ('Every selected client starts from the same w_t')", _round_one_copy),
        ("bytes_up = S ('m S each')", _round_one_upload),
        ("seeds drawn before the selection ('advanced by the selection, then by one integers draw')",
         _round_seeds_first),
        ("global_model.train() ('its training mode is left as it was')", _round_train_global),
        ("average installed with load_state_dict(assign=True) ('replaced ... in place')", _round_assign),
        ("S from parameters() only ('S = bytes of the global state dict (parameters and buffers)')",
         _round_parameters_only_bytes),
        ("S assumes 4 bytes per number (an int64 counter has 8) ('numel * element_size')", _round_four_bytes),
        ("train_loss = plain mean ('sum_k n_k L_k / m_t')", _round_unweighted_loss),
        ("first epoch's loss ('each client's last-epoch mean loss')", _round_first_epoch_loss),
        ("clients drawn before epochs/lr/batch_size are validated ('raised before the global model or rng is "
         "touched')", _round_select_first),
        ("a partition entry with repeated indices not refused unless selected ('distinct ... index tensors')",
         _round_no_duplicate_check),
        ("momentum not passed to the clients ('passed to Lessons 17 and 10')", _round_no_momentum),
        ("train_loss is np.float64 ('plain Python ints and floats')", _round_numpy_loss),
    ],
    "evaluate_accuracy": [
        ("forward in training mode ('put in eval mode for the forward pass')", _evaluate_train_mode),
        ("left in eval mode ('returned to its previous mode')", _evaluate_no_restore),
        ("returns the count ('Python float in [0, 1]')", _evaluate_count),
        ("mode not restored when the forward raises ('even if the forward pass raises')", _evaluate_no_finally),
        ("no torch.no_grad(): a graph is built ('computes without building an autograd graph')", _evaluate_no_no_grad),
        ("ties go to the last maximal logit ('argmax returns the first maximal logit')", _evaluate_ties_last),
        ("model.train() afterwards ('returned to its previous mode')", _evaluate_train_always),
        ("model.training = was: submodules stay in eval ('returned to its previous mode')", _evaluate_root_flag),
    ],
    "run_fedavg": [
        ("accuracy recorded before the round ('test_accuracy (of w_t)')", _fedavg_accuracy_before),
        ("accuracy on the training set ('on the held-out set')", _fedavg_train_accuracy),
        ("partition before the split ('Partition the training set only')", _fedavg_partition_before_split),
        ("new generator every round ('the rounds share one numpy.random.default_rng(s + 4)')", _fedavg_rng_per_round),
        ("total = uploads ('up + down')", _fedavg_uploads_only),
        ("model and partition seeds swapped ('partition s+2, model s+3')", _fedavg_swap_model_partition),
        ("'dirichlet' runs the shards deal ('alpha=config.alpha for \"dirichlet\"')", _fedavg_dirichlet_as_shards),
        ("shards_per_client not passed ('partition_data_non_iid(train, num_clients, shards_per_client, ...)')",
         _fedavg_default_shards),
        ("momentum not passed to the rounds ('... lr, rng, momentum')", _fedavg_no_momentum),
        ("torch.manual_seed(config.seed): global generator re-seeded ('Mutation: none')", _fedavg_global_seed),
        ("round loss = plain mean of client losses ('train_loss' of the round)", _fedavg_unweighted_loss),
        ("final accuracy = best round ('history[-1][\"test_accuracy\"]')", _fedavg_best_final),
        ("test_fraction hard-coded to 0.2 ('split train_test_split_dataset(data, test_fraction, ...)')",
         _fedavg_fixed_test_fraction),
    ],
}

ALTERNATIVES = {
    "select_clients": [("ceil via negated floor division, np.sort(...).tolist()", _select_alt_floordiv)],
    "run_communication_round": [
        ("one client object re-loaded with w_t per client; m scalar seed draws; strict load_state_dict",
         _round_alt_reused_client),
    ],
    "evaluate_accuracy": [
        ("inference_mode, chunks of 64, int counts", _evaluate_alt_chunked),
        ("float32 mean .item(): 17/24 gives 0.7083333134 (the exact ratio rounded to float32, within 2**-24 of it)",
         _evaluate_float32_mean),
    ],
    "run_fedavg": [("partition dispatch table, totals accumulated in the loop", _fedavg_alt_dispatch)],
}

DISPUTED = {
    "evaluate_accuracy": [
        ("empty dataset gives NaN ('refuses it with a ValueError naming dataset')",
         "the contract presents the refusal as the solution's choice ('the solution below refuses it'), and the "
         "package reference trainsys.fedavg.server.evaluate_accuracy itself returns NaN for an empty dataset"),
    ],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _select_alt_sorted_ints(num_clients, fraction, rng):
    if isinstance(num_clients, (bool, np.bool_)) or not isinstance(num_clients, (int, np.integer)):
        raise TypeError(f"num_clients must be an integer, got {num_clients!r}")
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if isinstance(fraction, (bool, np.bool_)) or not isinstance(fraction, numbers.Real):
        raise TypeError(f"fraction must be a real number, got {fraction!r}")
    if not 0 < fraction <= 1:  # NaN fails both comparisons
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    m = max(math.ceil(round(float(fraction) * int(num_clients), 12)), 1)
    return sorted(int(k) for k in rng.choice(int(num_clients), size=m, replace=False))


def _round_alt_reverse_aggregate(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng,
                                momentum=0.0):
    """The clients' states aggregated in reverse order (another summation order); train loss by math.fsum;
    S from the state dict's bytes."""
    _validate_round(global_model, dataset, partition, epochs, batch_size, lr, momentum)
    selected = _given_select(len(partition), fraction, rng)
    seeds = rng.integers(0, 2**31 - 1, size=len(selected))
    results = []
    for k, seed in zip(selected, seeds):
        local = copy.deepcopy(global_model)
        out = train_client_locally(local, dataset, partition[k], epochs, batch_size, lr, int(seed), momentum)
        results.append((out, clone_model_state(local)))
    counts = [int(out["num_samples"]) for out, _ in results]
    m_t = sum(counts)
    load_model_state(global_model, aggregate_weighted_average([s for _, s in results][::-1], counts[::-1]))
    losses = [float(out["epoch_losses"][-1]) for out, _ in results]
    S = sum(t.nbytes for t in clone_model_state(global_model).values())
    return {"selected": [int(k) for k in selected], "num_samples": counts, "client_losses": losses,
            "train_loss": math.fsum(n * l for n, l in zip(counts, losses)) / m_t,
            "local_steps": [int(out["num_steps"]) for out, _ in results],
            "bytes_down": len(selected) * S, "bytes_up": len(selected) * S}


def _fedavg_alt_record_at_end(config):
    """The pipeline with per-round lists, the history zipped together at the end."""
    config = validate_fedavg_config(config)
    t0 = time.perf_counter()
    s = config.seed
    seeds = dict(data=s, split=s + 1, partition=s + 2, model=s + 3, rounds=s + 4)
    train, test = train_test_split_dataset(
        build_synthetic_dataset(config.num_examples, config.d_in, config.n_classes, seeds["data"]),
        config.test_fraction, seeds["split"])
    if config.partition == "iid":
        clients = partition_data_iid(train, config.num_clients, seeds["partition"])
    else:
        clients = partition_data_non_iid(train, config.num_clients, config.shards_per_client, seeds["partition"],
                                         alpha=config.alpha if config.partition == "dirichlet" else None)
    model = build_mlp_classifier(config.d_in, config.d_hidden, config.n_classes, seeds["model"])
    rng = np.random.default_rng(seeds["rounds"])
    first = _given_evaluate(model, test)
    infos, accuracies = [], []
    for _ in tqdm(range(config.rounds), disable=not config.progress):
        infos.append(_given_round(model, train, clients, config.fraction, config.epochs, config.batch_size, config.lr,
                                  rng, config.momentum))
        accuracies.append(_given_evaluate(model, test))
    history = [{"round": t, "test_accuracy": acc, "train_loss": info["train_loss"], "selected": info["selected"],
                "local_steps": info["local_steps"], "bytes_up": info["bytes_up"], "bytes_down": info["bytes_down"]}
               for t, (info, acc) in enumerate(zip(infos, accuracies), start=1)]
    up, down = sum(i["bytes_up"] for i in infos), sum(i["bytes_down"] for i in infos)
    return {"kind": "fedavg", "config": asdict(config), "seeds": seeds, "client_sizes": [int(c.numel()) for c in clients],
            "initial_test_accuracy": first, "history": history, "final_test_accuracy": accuracies[-1],
            "bytes_communicated": {"up": up, "down": down, "total": up + down},
            "wall_time_s": time.perf_counter() - t0}


for _name, _entry in [
    ("select_clients", ("sorted(int(k) for k in rng.choice(...)), numbers.Real check", _select_alt_sorted_ints)),
    ("run_communication_round", ("clients aggregated in reverse order, math.fsum train loss",
                                 _round_alt_reverse_aggregate)),
    ("run_fedavg", ("per-round lists zipped into the history at the end", _fedavg_alt_record_at_end)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
