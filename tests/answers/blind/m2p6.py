"""Red team, Module 2 Part 6 (DiLoCo training loop & baseline): wrong answers and correct alternatives written
from the release notebooks only.

The mutants of the two trainers are full trainers built on the pieces the lessons' setup cells import
(`setup_run`, `diloco_round`, `run_inner_steps`, `inner_optimizer_step`, ...); each is wrong in one way and
costs no more work than the correct trainer.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from trainsys.diloco.adamw import init_adamw_state
from trainsys.diloco.model import cross_entropy_loss, model_backward, model_forward
from trainsys.diloco.params import average_params, clone_params, params_nbytes


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x):
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


# ==========================================================================================================
# Lesson 25: diloco_round
# ==========================================================================================================
def _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum, *, outer=True):
    if not isinstance(shards, (list, tuple)) or len(shards) == 0:
        raise TypeError("shards must be a non-empty list of (X_i, y_i) pairs")
    k = len(shards)
    if not isinstance(worker_states, (list, tuple)) or len(worker_states) != k:
        raise ValueError(f"worker_states must be a list of {k} AdamW states")
    if not isinstance(rngs, (list, tuple)) or len(rngs) != k:
        raise ValueError(f"rngs must be a list of {k} generators")
    if not _is_int(H):
        raise TypeError(f"H must be an int, got {H!r}")
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    if outer:
        if not _is_real(outer_lr) or not math.isfinite(outer_lr) or outer_lr <= 0:
            raise ValueError(f"outer_lr must be a finite real > 0, got {outer_lr!r}")
        if not _is_real(outer_momentum) or not math.isfinite(outer_momentum) or not 0 <= outer_momentum < 1:
            raise ValueError(f"outer_momentum must be in [0, 1), got {outer_momentum!r}")
    return k


def _train_workers(global_params, worker_states, shards, rngs, H, inner_hp, *, rng_for=None, reset=False):
    from trainsys.diloco.sharding import run_inner_steps

    thetas, states, losses = [], [], []
    for i in range(len(shards)):
        state = init_adamw_state(global_params) if reset else worker_states[i]
        rng = rngs[i] if rng_for is None else rng_for(i)
        theta, s, l = run_inner_steps(clone_params(global_params), state, shards[i], H, inner_hp, rng)
        thetas.append(theta)
        states.append(s)
        losses.append(l)
    return thetas, states, losses


def _outer(global_params, outer_state, thetas, outer_lr, outer_momentum):
    from trainsys.diloco.outer import compute_outer_gradient, nesterov_outer_step

    delta = compute_outer_gradient(global_params, thetas)
    return nesterov_outer_step(global_params, outer_state, delta, outer_lr, outer_momentum)


def _info(thetas, losses, *, train_loss=None):
    worker_losses = np.stack(losses)
    return {"train_loss": float(worker_losses.mean()) if train_loss is None else train_loss,
            "worker_losses": worker_losses,
            "bytes_communicated": int(sum(params_nbytes(t) for t in thetas))}


def _dr_reversed(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr, outer_momentum):
    from trainsys.diloco.outer import nesterov_outer_step

    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    mean = average_params(thetas)
    delta = {k: (mean[k] - g).astype(g.dtype) for k, g in global_params.items()}  # local minus original
    new_global, new_outer = nesterov_outer_step(global_params, outer_state, delta, outer_lr, outer_momentum)
    return new_global, new_outer, states, _info(thetas, losses)


def _dr_average_states(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                       outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    new_global, new_outer = _outer(global_params, outer_state, thetas, outer_lr, outer_momentum)
    m, v = average_params([s["m"] for s in states]), average_params([s["v"] for s in states])
    synced = [{"step": s["step"], "m": clone_params(m), "v": clone_params(v)} for s in states]
    return new_global, new_outer, synced, _info(thetas, losses)


def _dr_reset_states(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                     outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp, reset=True)
    new_global, new_outer = _outer(global_params, outer_state, thetas, outer_lr, outer_momentum)
    return new_global, new_outer, states, _info(thetas, losses)


def _dr_bytes_once(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                   outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    new_global, new_outer = _outer(global_params, outer_state, thetas, outer_lr, outer_momentum)
    info = _info(thetas, losses)
    info["bytes_communicated"] = params_nbytes(thetas[0])  # "one all-reduce"
    return new_global, new_outer, states, info


def _dr_shared_rng(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                   outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp,
                                            rng_for=lambda i: rngs[0])
    new_global, new_outer = _outer(global_params, outer_state, thetas, outer_lr, outer_momentum)
    return new_global, new_outer, states, _info(thetas, losses)


def _dr_plain_average(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                      outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    new_outer = {"step": outer_state["step"] + 1, "momentum_buffer": clone_params(outer_state["momentum_buffer"])}
    return average_params(thetas), new_outer, states, _info(thetas, losses)


def _dr_last_step_loss(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                       outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    new_global, new_outer = _outer(global_params, outer_state, thetas, outer_lr, outer_momentum)
    return new_global, new_outer, states, _info(thetas, losses, train_loss=float(np.mean([l[-1] for l in losses])))


def _dr_numpy_loss(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                   outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    new_global, new_outer = _outer(global_params, outer_state, thetas, outer_lr, outer_momentum)
    info = _info(thetas, losses)
    info["train_loss"] = np.mean(info["worker_losses"])  # numpy.float64, not a Python float
    info["bytes_communicated"] = np.int64(info["bytes_communicated"])
    return new_global, new_outer, states, info


def _dr_late_outer_checks(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                          outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum, outer=False)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    # outer_lr / outer_momentum are only refused here, by nesterov_outer_step: every rng has already advanced
    new_global, new_outer = _outer(global_params, outer_state, thetas, outer_lr, outer_momentum)
    return new_global, new_outer, states, _info(thetas, losses)


def _dr_mutates_state_list(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                           outer_momentum):
    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    new_global, new_outer = _outer(global_params, outer_state, thetas, outer_lr, outer_momentum)
    worker_states[:] = states  # the caller's list now holds the new states
    return new_global, new_outer, worker_states, _info(thetas, losses)


def _dr_size_weighted(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                      outer_momentum):
    from trainsys.diloco.outer import nesterov_outer_step

    _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, losses = _train_workers(global_params, worker_states, shards, rngs, H, inner_hp)
    mean = average_params(thetas, [len(s[1]) for s in shards])  # FedAvg's n_i / n weights
    delta = {k: (g - mean[k]).astype(g.dtype) for k, g in global_params.items()}
    new_global, new_outer = nesterov_outer_step(global_params, outer_state, delta, outer_lr, outer_momentum)
    return new_global, new_outer, states, _info(thetas, losses)


def _dr_alt(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr, outer_momentum):
    from trainsys.diloco.outer import compute_outer_gradient, nesterov_outer_step
    from trainsys.diloco.sharding import run_inner_steps

    # validation in another order (scalars first), all before any worker trains
    if isinstance(H, bool) or not isinstance(H, (int, np.integer)):
        raise TypeError("H must be an integer")
    if H < 1:
        raise ValueError("H must be at least 1")
    if not _is_real(outer_lr) or not (0 < outer_lr < math.inf):
        raise ValueError("outer_lr must be finite and > 0")
    if not _is_real(outer_momentum) or not (0 <= outer_momentum < 1):
        raise ValueError("outer_momentum must lie in [0, 1)")
    if not isinstance(shards, (list, tuple)) or not shards:
        raise TypeError("shards must be a non-empty list")
    for name, seq in (("worker_states", worker_states), ("rngs", rngs)):
        if not isinstance(seq, (list, tuple)) or len(seq) != len(shards):
            raise ValueError(f"{name} must have one entry per shard ({len(shards)})")
    results = [run_inner_steps(clone_params(global_params), worker_states[i], shards[i], H, inner_hp, rngs[i])
               for i in range(len(shards))]
    thetas = [r[0] for r in results]
    delta = compute_outer_gradient(global_params, thetas)
    new_global, new_outer = nesterov_outer_step(global_params, outer_state, delta, outer_lr, outer_momentum)
    table = np.array([r[2] for r in results], dtype=np.float64)  # (k, H)
    info = {"worker_losses": table, "train_loss": float(np.mean(table)),
            "bytes_communicated": len(thetas) * params_nbytes(global_params)}
    return new_global, new_outer, [r[1] for r in results], info


# ==========================================================================================================
# Lessons 26-27: shared pieces of a trainer
# ==========================================================================================================
def _hp(cfg):
    return {"optimizer": cfg.inner_optimizer, "lr": cfg.inner_lr, "beta1": cfg.beta1, "beta2": cfg.beta2,
            "eps": cfg.eps, "weight_decay": cfg.weight_decay, "batch_size": cfg.batch_size}


def _metrics(params, X, y, *, percent=False):
    logits, _ = model_forward(params, X)
    acc = float(np.mean(np.argmax(logits, axis=1) == y))
    return {"heldout_loss": float(cross_entropy_loss(logits, y)), "heldout_accuracy": 100 * acc if percent else acc}


def _bar(cfg):
    from tqdm import tqdm

    return tqdm(total=cfg.rounds, disable=None if cfg.progress is None else not cfg.progress)


def _record(algorithm, cfg, run, initial, history, params, start, *, sizes=None):
    return {"algorithm": algorithm, "config": dataclasses.asdict(cfg), "seeds": run["seeds"], "initial": initial,
            "history": history, "final_params": params, "wall_time_s": time.perf_counter() - start,
            "shard_sizes": [int(len(s[1])) for s in run["shards"]] if sizes is None else sizes,
            "examples_processed": cfg.num_workers * cfg.rounds * cfg.inner_steps * cfg.batch_size}


def _diloco(config, *, round_fn=None, eval_split="heldout", bytes_once=False, reset_states=False,
            average_states=False, fresh_rngs=False, last_step_loss=False, percent=False, numpy_sizes=False):
    from trainsys.diloco.loop import diloco_round, setup_run
    from trainsys.diloco.outer import init_outer_optimizer

    start = time.perf_counter()
    run = setup_run(config)
    cfg = run["config"]
    hp = _hp(cfg)
    X_eval, y_eval = (run["X_heldout"], run["y_heldout"]) if eval_split == "heldout" else (run["X_train"], run["y_train"])
    params = run["params"]
    outer = init_outer_optimizer(params)
    states = [init_adamw_state(params) for _ in range(cfg.num_workers)]
    rngs = run["worker_rngs"]
    initial = _metrics(params, X_eval, y_eval, percent=percent)
    history, total = [], 0
    bar = _bar(cfg)
    for r in range(1, cfg.rounds + 1):
        if reset_states:
            states = [init_adamw_state(params) for _ in range(cfg.num_workers)]
        if fresh_rngs:
            rngs = [np.random.default_rng(s) for s in run["seeds"]["worker_seeds"]]
        params, outer, states, info = (round_fn or diloco_round)(
            params, outer, states, run["shards"], rngs, H=cfg.inner_steps, inner_hp=hp, outer_lr=cfg.outer_lr,
            outer_momentum=cfg.outer_momentum)
        if average_states:
            m, v = average_params([s["m"] for s in states]), average_params([s["v"] for s in states])
            states = [{"step": s["step"], "m": clone_params(m), "v": clone_params(v)} for s in states]
        sent = params_nbytes(params) if bytes_once else info["bytes_communicated"]
        total += sent
        train_loss = float(np.mean(info["worker_losses"][:, -1])) if last_step_loss else info["train_loss"]
        history.append({"round": r, "steps": r * cfg.inner_steps, "train_loss": train_loss,
                        **_metrics(params, X_eval, y_eval, percent=percent), "bytes_communicated": sent,
                        "cumulative_bytes": total})
        bar.update(1)
    bar.close()
    sizes = list(np.array([len(s[1]) for s in run["shards"]])) if numpy_sizes else None
    return _record("diloco", cfg, run, initial, history, params, start, sizes=sizes)


def _td_reversed(config):
    return _diloco(config, round_fn=_dr_reversed)


def _td_average_states(config):
    return _diloco(config, average_states=True)


def _td_reset_states(config):
    return _diloco(config, reset_states=True)


def _td_bytes_once(config):
    return _diloco(config, bytes_once=True)


def _td_on_train(config):
    return _diloco(config, eval_split="train")


def _td_fresh_rngs(config):
    return _diloco(config, fresh_rngs=True)


def _td_last_step_loss(config):
    return _diloco(config, last_step_loss=True)


def _td_percent(config):
    return _diloco(config, percent=True)


def _td_numpy_sizes(config):
    return _diloco(config, numpy_sizes=True)


def _fill_defaults(config):
    from trainsys.diloco.loop import DiLoCoConfig

    if isinstance(config, dict):
        for f in dataclasses.fields(DiLoCoConfig):  # normalises the caller's dict in place
            config.setdefault(f.name, f.default)
    return config


def _td_mutates_config(config):
    return _diloco(_fill_defaults(config))


def _td_alt(config):
    """Alternative: one flat loop written without the helper, history entries built with dict()."""
    from tqdm import tqdm

    from trainsys.diloco.loop import diloco_round, setup_run
    from trainsys.diloco.outer import init_outer_optimizer

    t0 = time.perf_counter()
    run = setup_run(config)
    cfg = run["config"]
    inner = dict(optimizer=cfg.inner_optimizer, lr=cfg.inner_lr, beta1=cfg.beta1, beta2=cfg.beta2, eps=cfg.eps,
                 weight_decay=cfg.weight_decay, batch_size=cfg.batch_size)
    Xh, yh = run["X_heldout"], run["y_heldout"]

    def evaluate(p):
        z = model_forward(p, Xh)[0]
        return cross_entropy_loss(z, yh), float((z.argmax(axis=1) == yh).mean())

    theta = run["params"]
    outer_state = init_outer_optimizer(theta)
    worker_states = [init_adamw_state(theta) for _ in run["shards"]]
    loss0, acc0 = evaluate(theta)
    history, cumulative = [], 0
    with tqdm(total=cfg.rounds, disable=None if cfg.progress is None else not cfg.progress) as bar:
        for r in range(cfg.rounds):
            theta, outer_state, worker_states, info = diloco_round(
                theta, outer_state, worker_states, run["shards"], run["worker_rngs"], H=cfg.inner_steps,
                inner_hp=inner, outer_lr=cfg.outer_lr, outer_momentum=cfg.outer_momentum)
            cumulative += info["bytes_communicated"]
            loss, acc = evaluate(theta)
            history.append(dict(round=r + 1, steps=(r + 1) * cfg.inner_steps, train_loss=info["train_loss"],
                                heldout_loss=float(loss), heldout_accuracy=acc,
                                bytes_communicated=info["bytes_communicated"], cumulative_bytes=cumulative))
            bar.update()
    k = len(run["shards"])
    return dict(algorithm="diloco", config=dataclasses.asdict(cfg), seeds=run["seeds"],
                initial=dict(heldout_loss=float(loss0), heldout_accuracy=acc0), history=history, final_params=theta,
                wall_time_s=time.perf_counter() - t0, shard_sizes=[len(y) for _, y in run["shards"]],
                examples_processed=k * cfg.rounds * cfg.inner_steps * cfg.batch_size)


# ==========================================================================================================
# Lesson 27: train_synchronous_baseline
# ==========================================================================================================
def _sync(config, *, combine="mean", bytes_one_tree=False, reset_each_round=False, last_step_loss=False,
          eval_split="heldout", grad_scale=None):
    from trainsys.diloco.loop import setup_run
    from trainsys.diloco.sharding import inner_optimizer_step, sample_worker_batch

    start = time.perf_counter()
    run = setup_run(config)
    cfg = run["config"]
    hp = _hp(cfg)
    X_eval, y_eval = (run["X_heldout"], run["y_heldout"]) if eval_split == "heldout" else (run["X_train"], run["y_train"])
    params = run["params"]
    state = init_adamw_state(params)
    initial = _metrics(params, X_eval, y_eval)
    history, total = [], 0
    bar = _bar(cfg)
    for r in range(1, cfg.rounds + 1):
        if reset_each_round:
            state = init_adamw_state(params)
        round_losses, round_bytes, last = [], 0, []
        for _ in range(cfg.inner_steps):
            grads, step_losses = [], []
            for shard, rng in zip(run["shards"], run["worker_rngs"]):
                X_b, y_b = sample_worker_batch(shard, cfg.batch_size, rng)
                logits, cache = model_forward(params, X_b)
                step_losses.append(cross_entropy_loss(logits, y_b))
                grads.append(model_backward(params, cache, y_b))
            round_bytes += params_nbytes(grads[0]) if bytes_one_tree else sum(params_nbytes(g) for g in grads)
            if combine == "mean":
                g_bar = average_params(grads)
            elif combine == "sum":
                g_bar = {k: sum(g[k] for g in grads).astype(params[k].dtype) for k in params}
            elif combine == "first":
                g_bar = grads[0]
            elif combine == "size":
                g_bar = average_params(grads, [len(s[1]) for s in run["shards"]])
            if grad_scale is not None:
                g_bar = {k: (grad_scale(cfg) * g).astype(g.dtype) for k, g in g_bar.items()}
            params, state = inner_optimizer_step(params, g_bar, state, hp)
            round_losses.extend(step_losses)
            last = step_losses
        total += round_bytes
        train_loss = float(np.mean(last)) if last_step_loss else float(np.mean(round_losses))
        history.append({"round": r, "steps": r * cfg.inner_steps, "train_loss": train_loss,
                        **_metrics(params, X_eval, y_eval), "bytes_communicated": round_bytes,
                        "cumulative_bytes": total})
        bar.update(1)
    bar.close()
    return _record("synchronous", cfg, run, initial, history, params, start)


def _tsb_sum(config):
    return _sync(config, combine="sum")


def _tsb_worker0(config):
    return _sync(config, combine="first")


def _tsb_bytes_one_tree(config):
    return _sync(config, bytes_one_tree=True)


def _tsb_reset_each_round(config):
    return _sync(config, reset_each_round=True)


def _tsb_last_step_loss(config):
    return _sync(config, last_step_loss=True)


def _tsb_size_weighted(config):
    return _sync(config, combine="size")


def _tsb_outer_lr_scaled(config):
    return _sync(config, grad_scale=lambda cfg: cfg.outer_lr)


def _tsb_on_train(config):
    return _sync(config, eval_split="train")


def _tsb_mutates_config(config):
    return _sync(_fill_defaults(config))


def _tsb_alt(config):
    """Alternative: one flat loop over all T*H steps, logging when (s + 1) % H == 0; gradients summed into one
    running list per worker order."""
    from tqdm import tqdm

    from trainsys.diloco.loop import setup_run
    from trainsys.diloco.sharding import inner_optimizer_step, sample_worker_batch

    t0 = time.perf_counter()
    run = setup_run(config)
    cfg = run["config"]
    hp = dict(optimizer=cfg.inner_optimizer, lr=cfg.inner_lr, beta1=cfg.beta1, beta2=cfg.beta2, eps=cfg.eps,
              weight_decay=cfg.weight_decay, batch_size=cfg.batch_size)
    Xh, yh = run["X_heldout"], run["y_heldout"]

    def evaluate(p):
        z = model_forward(p, Xh)[0]
        return float(cross_entropy_loss(z, yh)), float(np.mean(np.argmax(z, axis=1) == yh))

    theta = run["params"]
    opt_state = init_adamw_state(theta)
    l0, a0 = evaluate(theta)
    H, k = cfg.inner_steps, len(run["shards"])
    history, cumulative, window_losses, window_bytes = [], 0, [], 0
    bar = tqdm(total=cfg.rounds, disable=None if cfg.progress is None else not cfg.progress)
    for s in range(cfg.rounds * H):
        grads = []
        for i in range(k):
            X_b, y_b = sample_worker_batch(run["shards"][i], cfg.batch_size, run["worker_rngs"][i])
            logits, cache = model_forward(theta, X_b)
            window_losses.append(cross_entropy_loss(logits, y_b))
            grads.append(model_backward(theta, cache, y_b))
            window_bytes += params_nbytes(grads[-1])
        theta, opt_state = inner_optimizer_step(theta, average_params(grads), opt_state, hp)
        if (s + 1) % H == 0:
            cumulative += window_bytes
            loss, acc = evaluate(theta)
            history.append(dict(round=(s + 1) // H, steps=s + 1, train_loss=float(np.mean(window_losses)),
                                heldout_loss=loss, heldout_accuracy=acc, bytes_communicated=window_bytes,
                                cumulative_bytes=cumulative))
            window_losses, window_bytes = [], 0
            bar.update(1)
    bar.close()
    return dict(algorithm="synchronous", config=dataclasses.asdict(cfg), seeds=run["seeds"],
                initial=dict(heldout_loss=l0, heldout_accuracy=a0), history=history, final_params=theta,
                wall_time_s=time.perf_counter() - t0, shard_sizes=[len(y) for _, y in run["shards"]],
                examples_processed=k * cfg.rounds * H * cfg.batch_size)


MUTANTS = {
    "diloco_round": [
        ("pseudo-gradient reversed: mean(theta_i) - theta (contract: 'original minus local')", _dr_reversed),
        ("AdamW states averaged across workers (contract: 'carried to the next round as they are')",
         _dr_average_states),
        ("inner states reset every round (contract: each state step + H)", _dr_reset_states),
        ("bytes counted once per round (contract: 'sum_i params_nbytes(theta_i) = kP')", _dr_bytes_once),
        ("every worker draws from rngs[0] (contract: 'worker i ... rngs[i]')", _dr_shared_rng),
        ("outer step replaced by plain averaging (contract: Nesterov with outer_lr, outer_momentum)",
         _dr_plain_average),
        ("train_loss = mean of the last inner step only (contract: 'their mean' over the (k, H) table)",
         _dr_last_step_loss),
        ("train_loss numpy.float64 and bytes numpy.int64 (contract: 'train_loss a Python float, "
         "bytes_communicated an int')", _dr_numpy_loss),
        ("outer_lr / outer_momentum refused only after every worker trained (contract: 'all refused before any "
         "worker trains')", _dr_late_outer_checks),
        ("writes the new states into the caller's worker_states list (contract: 'worker_states ... left "
         "untouched')", _dr_mutates_state_list),
        ("workers averaged with shard-size weights n_i (contract: Delta = theta - (1/k) sum theta_i)",
         _dr_size_weighted),
    ],
    "train_diloco": [
        ("round with the pseudo-gradient reversed", _td_reversed),
        ("AdamW states averaged at the end of every round", _td_average_states),
        ("AdamW states re-initialised at the start of every round", _td_reset_states),
        ("one tree per round in bytes_communicated (contract: cumulative_bytes = rkP)", _td_bytes_once),
        ("'held-out' metrics evaluated on the training set", _td_on_train),
        ("worker generators re-created from their seeds every round: the same batches each round (contract: "
         "rng_i carried)", _td_fresh_rngs),
        ("history train_loss = the last inner step's mean only (contract: 'train_loss (the round's info)')",
         _td_last_step_loss),
        ("heldout_accuracy as a percentage (contract: 'the accuracy 1/n sum 1[...]', a fraction)", _td_percent),
        ("shard_sizes as numpy.int64 (contract: 'list of k ints')", _td_numpy_sizes),
        ("fills the defaults into the caller's config dict (contract: 'a dict config is only read')",
         _td_mutates_config),
    ],
    "train_synchronous_baseline": [
        ("gradients summed, not averaged (contract: 'the mean of the k gradient trees')", _tsb_sum),
        ("steps on worker 0's gradient only (the red team's own, written blind)", _tsb_worker0),
        ("one gradient tree per step in the bytes (contract: 'kP per step')", _tsb_bytes_one_tree),
        ("AdamW re-initialised at each logged round (contract: 'One init_adamw_state for the whole run')",
         _tsb_reset_each_round),
        ("train_loss = the round's last step only (contract: 'mean of the round's Hk minibatch losses')",
         _tsb_last_step_loss),
        ("gradients weighted by shard size n_i (contract: the plain mean; every worker draws exactly B)",
         _tsb_size_weighted),
        ("all-reduced gradient scaled by outer_lr (contract: 'outer_lr and outer_momentum are accepted and "
         "unused')", _tsb_outer_lr_scaled),
        ("'held-out' metrics evaluated on the training set", _tsb_on_train),
        ("fills the defaults into the caller's config dict (contract: 'Mutation: none')", _tsb_mutates_config),
    ],
}

ALTERNATIVES = {
    "diloco_round": [("scalars validated first; list comprehension of run_inner_steps; bytes as k * "
                      "params_nbytes(global)", _dr_alt)],
    "train_diloco": [("flat loop without helpers, tqdm as a context manager", _td_alt)],
    "train_synchronous_baseline": [("one flat loop over T*H steps, logging every H steps", _tsb_alt)],
}


# The package reference (trainsys.diloco.loop.diloco_round) itself checks outer_lr and outer_momentum only inside
# nesterov_outer_step, after the workers trained; through the grading sandbox the generators are not carried back
# when the call raises, so nothing observable separates the two. Needs the reference fixed (src/, not a check).


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _dr_alt_checks_first_fsum(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                              outer_momentum):
    """The red team's validation, then the recipe; train_loss with math.fsum, worker_losses with np.vstack."""
    from trainsys.diloco.outer import compute_outer_gradient, nesterov_outer_step
    from trainsys.diloco.sharding import run_inner_steps

    n = _round_checks(worker_states, shards, rngs, H, outer_lr, outer_momentum)
    thetas, states, rows, sent = [], [], [], 0
    for i in range(n):
        theta, state, losses = run_inner_steps(clone_params(global_params), worker_states[i], shards[i], H, inner_hp,
                                               rngs[i])
        thetas.append(theta)
        states.append(state)
        rows.append(losses)
        sent += params_nbytes(theta)
    new_global, new_outer = nesterov_outer_step(global_params, outer_state,
                                                compute_outer_gradient(global_params, thetas), outer_lr, outer_momentum)
    table = np.vstack(rows).astype(np.float64)  # (N, H)
    info = {"train_loss": math.fsum(table.ravel().tolist()) / table.size, "worker_losses": table,
            "bytes_communicated": int(sent)}
    return new_global, new_outer, states, info


def _td_alt_count_accuracy(config):
    """diloco_round per round; accuracy as a count over the held-out size, bytes summed after the loop."""
    from itertools import accumulate

    from tqdm import tqdm

    from trainsys.diloco.loop import diloco_round, setup_run
    from trainsys.diloco.outer import init_outer_optimizer

    start = time.perf_counter()
    run = setup_run(config)
    cfg = run["config"]
    hp = _hp(cfg)
    X_h, y_h = run["X_heldout"], run["y_heldout"]

    def measure(p):
        logits, _ = model_forward(p, X_h)
        right = int(np.count_nonzero(np.argmax(logits, axis=1) == y_h))
        return {"heldout_loss": float(cross_entropy_loss(logits, y_h)), "heldout_accuracy": right / len(y_h)}

    theta = run["params"]
    outer = init_outer_optimizer(theta)
    states = [init_adamw_state(theta) for _ in range(len(run["shards"]))]
    initial = measure(theta)
    entries, sent = [], []
    bar = tqdm(total=cfg.rounds, disable=None if cfg.progress is None else not cfg.progress)
    for r in range(1, cfg.rounds + 1):
        theta, outer, states, info = diloco_round(theta, outer, states, run["shards"], run["worker_rngs"],
                                                  H=cfg.inner_steps, inner_hp=hp, outer_lr=cfg.outer_lr,
                                                  outer_momentum=cfg.outer_momentum)
        sent.append(int(info["bytes_communicated"]))
        entries.append({"round": r, "steps": r * cfg.inner_steps, "train_loss": float(info["train_loss"]),
                        **measure(theta), "bytes_communicated": sent[-1]})
        bar.update(1)
    bar.close()
    for entry, total in zip(entries, accumulate(sent)):
        entry["cumulative_bytes"] = total
    return {"algorithm": "diloco", "config": dataclasses.asdict(cfg), "seeds": run["seeds"], "initial": initial,
            "history": entries, "final_params": theta, "wall_time_s": time.perf_counter() - start,
            "shard_sizes": [int(X.shape[0]) for X, _ in run["shards"]],
            "examples_processed": cfg.num_workers * cfg.rounds * cfg.inner_steps * cfg.batch_size}


def _tsb_alt_rounds_and_float64_mean(config):
    """Nested rounds and steps; the N gradients averaged with np.mean over a float64 stack, cast once (another
    summation order than average_params)."""
    from tqdm import tqdm

    from trainsys.diloco.loop import setup_run
    from trainsys.diloco.sharding import inner_optimizer_step, sample_worker_batch

    start = time.perf_counter()
    run = setup_run(config)
    cfg = run["config"]
    hp = _hp(cfg)
    theta = run["params"]
    state = init_adamw_state(theta)
    initial = _metrics(theta, run["X_heldout"], run["y_heldout"])
    history, total = [], 0
    bar = tqdm(total=cfg.rounds, disable=None if cfg.progress is None else not cfg.progress)
    for r in range(1, cfg.rounds + 1):
        losses, sent = [], 0
        for _ in range(cfg.inner_steps):
            grads = []
            for shard, rng in zip(run["shards"], run["worker_rngs"]):
                X_b, y_b = sample_worker_batch(shard, cfg.batch_size, rng)
                logits, cache = model_forward(theta, X_b)
                losses.append(float(cross_entropy_loss(logits, y_b)))
                grads.append(model_backward(theta, cache, y_b))
                sent += params_nbytes(grads[-1])
            mean = {k: np.mean(np.stack([g[k].astype(np.float64) for g in grads]), axis=0).astype(theta[k].dtype)
                    for k in theta}
            theta, state = inner_optimizer_step(theta, mean, state, hp)
        total += sent
        history.append({"round": r, "steps": r * cfg.inner_steps, "train_loss": float(np.mean(losses)),
                        **_metrics(theta, run["X_heldout"], run["y_heldout"]), "bytes_communicated": sent,
                        "cumulative_bytes": total})
        bar.update(1)
    bar.close()
    return _record("synchronous", cfg, run, initial, history, theta, start)


for _name, _entry in [
    ("diloco_round", ("validation first, math.fsum train loss, np.vstack loss table", _dr_alt_checks_first_fsum)),
    ("train_diloco", ("accuracy as a count, cumulative bytes by itertools.accumulate", _td_alt_count_accuracy)),
    ("train_synchronous_baseline", ("nested rounds/steps, gradient mean over a float64 stack",
                                    _tsb_alt_rounds_and_float64_mean)),
]:
    ALTERNATIVES.setdefault(_name, []).append(_entry)
