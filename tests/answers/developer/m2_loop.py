"""Mutants for Module 2, Part 6 (lessons 25–27): the DiLoCo-loop mistakes the notebooks name."""

from __future__ import annotations

import time

import numpy as np

from trainsys.diloco import loop as ref
from trainsys.diloco.adamw import init_adamw_state
from trainsys.diloco.evaluation import classification_accuracy, evaluate_heldout_loss
from trainsys.diloco.model import cross_entropy_loss, model_backward, model_forward
from trainsys.diloco.outer import compute_outer_gradient, init_outer_optimizer, nesterov_outer_step
from trainsys.diloco.params import average_params, clone_params, params_nbytes, subtract_params
from trainsys.diloco.sharding import inner_optimizer_step, run_inner_steps, sample_worker_batch

REFERENCE = "trainsys.diloco.loop"


def _average_states(states):
    avg = {key: average_params([s[key] for s in states]) for key in ("m", "v")}
    return [{"step": s["step"], "m": clone_params(avg["m"]), "v": clone_params(avg["v"])} for s in states]


def _round(variant: str):
    """One DiLoCo round with one deliberate mistake."""

    def wrong(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr, outer_momentum):
        ref.diloco_round(global_params, outer_state, [dict(s) for s in worker_states], shards,
                         [np.random.default_rng(0) for _ in rngs], H=H, inner_hp=inner_hp, outer_lr=outer_lr,
                         outer_momentum=outer_momentum)  # validation only
        thetas, states, losses = [], [], []
        for i, shard in enumerate(shards):
            rng = rngs[0] if variant == "shared rng" else rngs[i]
            state = init_adamw_state(global_params) if variant == "reset states" else worker_states[i]
            theta, state, worker_losses = run_inner_steps(clone_params(global_params), state, shard, H, inner_hp, rng)
            thetas.append(theta)
            states.append(state)
            losses.append(worker_losses)
        if variant == "average states":
            states = _average_states(states)
        sent = params_nbytes(thetas[0]) if variant == "bytes once" else sum(params_nbytes(t) for t in thetas)
        delta = compute_outer_gradient(global_params, thetas)
        if variant == "reversed sign":
            delta = subtract_params(average_params(thetas), global_params)
        if variant == "fedavg":
            new_global, new_outer = average_params(thetas), outer_state
        else:
            new_global, new_outer = nesterov_outer_step(global_params, outer_state, delta, outer_lr, outer_momentum)
        worker_losses = np.stack(losses)
        return new_global, new_outer, states, {"train_loss": float(worker_losses.mean()), "worker_losses": worker_losses,
                                               "bytes_communicated": int(sent)}

    return wrong


def _train_diloco(variant: str):
    """train_diloco built from a wrong round, or evaluating on the wrong data."""
    round_fn = _round(variant) if variant in ("reversed sign", "average states", "reset states", "bytes once") \
        else ref.diloco_round

    def wrong(config):
        start = time.perf_counter()
        run = ref.setup_run(config)
        cfg = run["config"]
        params, outer = run["params"], init_outer_optimizer(run["params"])
        states = [init_adamw_state(params) for _ in range(cfg.num_workers)]
        X_eval, y_eval = (run["X_train"], run["y_train"]) if variant == "evaluates on train" else \
            (run["X_heldout"], run["y_heldout"])
        history, total = [], 0
        for r in range(1, cfg.rounds + 1):
            params, outer, states, info = round_fn(params, outer, states, run["shards"], run["worker_rngs"],
                                                   H=cfg.inner_steps, inner_hp=ref.inner_hp(cfg),
                                                   outer_lr=cfg.outer_lr, outer_momentum=cfg.outer_momentum)
            total += info["bytes_communicated"]
            history.append({"round": r, "steps": r * cfg.inner_steps, "train_loss": info["train_loss"],
                            "heldout_loss": evaluate_heldout_loss(params, X_eval, y_eval),
                            "heldout_accuracy": classification_accuracy(params, X_eval, y_eval),
                            "bytes_communicated": info["bytes_communicated"], "cumulative_bytes": total})
        return ref._record("diloco", run, params, history, ref._initial(run), start)

    return wrong


def _train_sync(variant: str):
    """The synchronous baseline with one deliberate mistake."""

    def wrong(config):
        start = time.perf_counter()
        run = ref.setup_run(config)
        cfg, params, hp = run["config"], run["params"], ref.inner_hp(run["config"])
        state, history, total = init_adamw_state(params), [], 0
        for r in range(1, cfg.rounds + 1):
            losses, sent = [], 0
            if variant == "reset state":
                state = init_adamw_state(params)
            for _ in range(cfg.inner_steps):
                grads = []
                for shard, rng in zip(run["shards"], run["worker_rngs"]):
                    X_b, y_b = sample_worker_batch(shard, cfg.batch_size, rng)
                    logits, cache = model_forward(params, X_b)
                    losses.append(cross_entropy_loss(logits, y_b))
                    grads.append(model_backward(params, cache, y_b))
                sent += params_nbytes(grads[0]) if variant == "bytes once" else sum(params_nbytes(g) for g in grads)
                if variant == "sum":
                    mean = {k: sum(g[k] for g in grads) for k in grads[0]}
                elif variant == "worker 0":
                    mean = grads[0]
                else:
                    mean = average_params(grads)
                params, state = inner_optimizer_step(params, mean, state, hp)
            total += sent
            history.append(ref._entry(run, params, r, r * cfg.inner_steps, float(np.mean(losses)), sent, total))
        return ref._record("synchronous", run, params, history, ref._initial(run), start)

    return wrong


MUTANTS = {
    "diloco_round": [
        ("reversed pseudo-gradient sign (local - original)", _round("reversed sign")),
        ("averages the workers' inner optimizer states", _round("average states")),
        ("resets the inner optimizer states every round", _round("reset states")),
        ("bytes counted once per round instead of per worker", _round("bytes once")),
        ("every worker draws its batches from rngs[0]", _round("shared rng")),
        ("replaces the outer step by plain averaging (FedAvg)", _round("fedavg")),
    ],
    "train_diloco": [
        ("reversed pseudo-gradient sign", _train_diloco("reversed sign")),
        ("averages the inner optimizer states each round", _train_diloco("average states")),
        ("resets the inner optimizer states each round", _train_diloco("reset states")),
        ("bytes counted once per round instead of per worker", _train_diloco("bytes once")),
        ("evaluates on the training set, not the held-out set", _train_diloco("evaluates on train")),
    ],
    "train_synchronous_baseline": [
        ("sums the gradients (all-reduce SUM) instead of averaging", _train_sync("sum")),
        ("steps on worker 0's gradient only", _train_sync("worker 0")),
        ("bytes counted once per step instead of per worker", _train_sync("bytes once")),
        ("re-initialises AdamW every round", _train_sync("reset state")),
    ],
}
