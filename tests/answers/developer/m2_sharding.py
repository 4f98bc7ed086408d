"""Mutants for Module 2, Part 4 (lessons 16–20): sharding and local-training mistakes the notebooks name."""

from __future__ import annotations

import numpy as np

from trainsys.diloco import sharding as ref
from trainsys.diloco.adamw import init_adamw_state
from trainsys.diloco.model import cross_entropy_loss, model_backward, model_forward

REFERENCE = "trainsys.diloco.sharding"


def _iid(variant: str):
    def wrong(X, y, num_workers, rng):
        ref.iid_shard_dataset(X, y, num_workers, np.random.default_rng(0))  # validation only
        n = len(y)
        if variant == "no shuffle":
            return [(X[i], y[i]) for i in np.array_split(np.arange(n), num_workers)]
        if variant == "drop remainder":
            perm, size = rng.permutation(n), n // num_workers
            return [(X[np.sort(perm[i * size:(i + 1) * size])], y[np.sort(perm[i * size:(i + 1) * size])])
                    for i in range(num_workers)]
        px, py = rng.permutation(n), rng.permutation(n)  # X and y shuffled separately: pairs broken
        return [(X[np.sort(a)], y[np.sort(b)]) for a, b in zip(np.array_split(px, num_workers),
                                                                 np.array_split(py, num_workers))]

    return wrong


def _noniid(variant: str):
    def wrong(X, y, num_workers, rng, alpha):
        ref.noniid_shard_dataset(X, y, num_workers, np.random.default_rng(0), alpha)  # validation only
        k = num_workers
        shared = None
        while True:
            pieces = [[] for _ in range(k)]
            for c in np.unique(y):
                idx = rng.permutation(np.flatnonzero(y == c))
                if variant == "ignores alpha":
                    p = rng.dirichlet(np.ones(k))
                elif variant == "one draw for all classes":
                    shared = rng.dirichlet(np.full(k, alpha)) if shared is None else shared
                    p = shared
                else:
                    p = rng.dirichlet(np.full(k, alpha))
                cut = np.round if variant == "rounded cuts" else np.floor
                cuts = cut(np.cumsum(p)[:-1] * len(idx)).astype(int)
                for i, part in enumerate(np.split(idx, cuts)):
                    pieces[i].append(part)
            owned = [np.sort(np.concatenate(parts)) for parts in pieces]
            if variant == "empty shards allowed" or min(map(len, owned)) > 0:
                return [(X[o], y[o]) for o in owned]
            shared = None

    return wrong


def _sample(variant: str):
    def wrong(shard, batch_size, rng):
        ref.sample_worker_batch(shard, batch_size, np.random.default_rng(0))
        X, y = shard
        if variant == "first rows":
            idx = np.arange(batch_size) % len(y)
            return X[idx], y[idx]
        if variant == "separate draws":
            return X[rng.integers(0, len(y), batch_size)], y[rng.integers(0, len(y), batch_size)]
        idx = np.random.randint(0, len(y), batch_size)  # the global generator, not rng
        return X[idx], y[idx]

    return wrong


def _local(variant: str):
    def wrong(params, opt_state, batch, hp):
        ref.local_train_step(params, opt_state, batch, hp)
        X_b, y_b = batch
        if variant == "fresh state":
            opt_state = init_adamw_state(params)
        logits, cache = model_forward(params, X_b)
        loss = cross_entropy_loss(logits, y_b)
        grads = model_backward(params, cache, y_b)
        if variant == "always sgd":
            hp = {**hp, "optimizer": "sgd"}
        new_params, new_state = ref.inner_optimizer_step(params, grads, opt_state, hp)
        if variant == "loss after":
            loss = cross_entropy_loss(model_forward(new_params, X_b)[0], y_b)
        return new_params, new_state, loss

    return wrong


def _inner(variant: str):
    def wrong(params, opt_state, shard, H, hp, rng):
        ref.run_inner_steps(params, opt_state, shard, H, hp, np.random.default_rng(0))
        losses = []
        if variant == "reset state":
            opt_state = init_adamw_state(params)
        batch = ref.sample_worker_batch(shard, hp["batch_size"], rng)
        steps = H - 1 if variant == "off by one" else H
        for t in range(steps):
            if variant != "one batch" and t > 0:
                batch = ref.sample_worker_batch(shard, hp["batch_size"], rng)
            params, opt_state, loss = ref.local_train_step(params, opt_state, batch, hp)
            losses.append(loss)
        return params, opt_state, np.array(losses)

    return wrong


MUTANTS = {
    "iid_shard_dataset": [
        ("no shuffle: contiguous blocks of X", _iid("no shuffle")),
        ("drops the remainder (n mod k examples never trained on)", _iid("drop remainder")),
        ("shuffles X and y with different permutations", _iid("separate")),
    ],
    "noniid_shard_dataset": [
        ("Dirichlet shards that ignore alpha (always Dir(1))", _noniid("ignores alpha")),
        ("one Dirichlet draw shared by every class", _noniid("one draw for all classes")),
        ("rounds the cut points instead of flooring", _noniid("rounded cuts")),
        ("keeps shards that came out empty", _noniid("empty shards allowed")),
    ],
    "sample_worker_batch": [
        ("always the first batch_size rows", _sample("first rows")),
        ("separate index draws for X and y (pairs broken)", _sample("separate draws")),
        ("np.random.randint: the global generator instead of rng", _sample("global")),
    ],
    "local_train_step": [
        ("reports the loss after the update", _local("loss after")),
        ("plain SGD whatever hp['optimizer'] says", _local("always sgd")),
        ("re-initialises the optimizer state every step", _local("fresh state")),
    ],
    "run_inner_steps": [
        ("samples one batch and reuses it H times", _inner("one batch")),
        ("runs H - 1 steps", _inner("off by one")),
        ("resets the optimizer state at the start of every round", _inner("reset state")),
    ],
}
