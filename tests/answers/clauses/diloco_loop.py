"""Witnesses for Module 2, Parts 4, 6 and 7 (shards, local training, the DiLoCo loop, evaluation and the
communication analysis): one wrong answer per broken clause and case."""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np

from tests.answers.clauses import existing
from trainsys.diloco import evaluation as ref_eval
from trainsys.diloco import loop as ref_loop
from trainsys.diloco import sharding as ref
from trainsys.diloco.adamw import init_adamw_state
from trainsys._validation import require_generator, require_int, require_real
from trainsys.diloco.model import cross_entropy_loss, model_backward, model_forward
from trainsys.diloco.outer import compute_outer_gradient, nesterov_outer_step
from trainsys.diloco.params import clone_params, params_nbytes


# --- Lesson 16 -------------------------------------------------------------------------------------
def _iid_one_worker_returns_inputs(X, y, num_workers, rng):
    """Draws the permutation as it should, but one worker gets X and y themselves ("nothing to split")."""
    shards = ref.iid_shard_dataset(X, y, num_workers, rng)
    return [(X, y)] if num_workers == 1 else shards


def _iid_reorders_inputs(X, y, num_workers, rng):
    """The right shards, then X and y left in the shuffled order (``X[:] = X[perm]``) "to keep the shuffle"."""
    perm = copy.deepcopy(rng).permutation(len(y))  # the permutation the shards are cut from
    shards = ref.iid_shard_dataset(X, y, num_workers, rng)
    X[:], y[:] = X[perm], y[perm]
    return shards


def _iid_no_upper_bound(X, y, num_workers, rng):
    """Refuses num_workers < 1 but not num_workers > n: the extra workers get empty shards."""
    if isinstance(num_workers, int) and not isinstance(num_workers, bool) and num_workers > len(y) >= 1:
        ref._validate_dataset(X, y, 1)
        parts = np.array_split(rng.permutation(len(y)), num_workers)
        return [(X[np.sort(p)], y[np.sort(p)]) for p in parts]
    return ref.iid_shard_dataset(X, y, num_workers, rng)


def _iid_unchecked_rng(X, y, num_workers, rng):
    """Validates X, y and num_workers but uses rng as given: ``3.permutation`` raises AttributeError."""
    X, y, k = ref._validate_dataset(X, y, num_workers)
    parts = np.array_split(rng.permutation(X.shape[0]), k)
    return [(X[np.sort(p)], y[np.sort(p)]) for p in parts]


def _iid_unchecked_lengths(X, y, num_workers, rng):
    """Never compares len(y) with X's rows: y[idx] runs past the end (IndexError)."""
    if not isinstance(X, np.ndarray) or not np.issubdtype(X.dtype, np.floating):
        raise TypeError("X must be a floating-point array")
    if X.ndim != 2:
        raise ValueError("X must have 2 axes")
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
        raise TypeError("y must be a 1-D integer array")
    k = require_int("num_workers", num_workers, minimum=1, maximum=X.shape[0])
    require_generator("rng", rng)
    parts = np.array_split(rng.permutation(X.shape[0]), k)
    return [(X[np.sort(p)], y[np.sort(p)]) for p in parts]


def _iid_value_error_for_types(X, y, num_workers, rng):
    """Refuses an integer X, naming it, but with ValueError where the contract says TypeError."""
    if isinstance(X, np.ndarray) and not np.issubdtype(X.dtype, np.floating):
        raise ValueError(f"X must be floating-point, got {X.dtype}")
    return ref.iid_shard_dataset(X, y, num_workers, rng)


# --- Lesson 17 -------------------------------------------------------------------------------------
def _noniid_deal(X, y, k, rng, alpha, *, max_deals=ref.MAX_DIRICHLET_DRAWS, fresh_copy=False):
    start = copy.deepcopy(rng)
    for _ in range(max_deals):
        g = copy.deepcopy(start) if fresh_copy else rng
        pieces = [[] for _ in range(k)]
        for c in np.unique(y):
            idx = g.permutation(np.flatnonzero(y == c))
            p = g.dirichlet(np.full(k, alpha))
            for i, part in enumerate(np.split(idx, (np.cumsum(p)[:-1] * len(idx)).astype(int))):
                pieces[i].append(part)
        owned = [np.sort(np.concatenate(parts)) for parts in pieces]
        if min(len(o) for o in owned) > 0:
            if fresh_copy:
                rng.bit_generator.state = g.bit_generator.state
            return [(X[o], y[o]) for o in owned]
    raise ValueError(f"alpha = {alpha}: {max_deals} deals all left a worker without data")


def _noniid_checked(X, y, num_workers, rng, alpha):
    X, y, k = ref._validate_dataset(X, y, num_workers)
    require_generator("rng", rng)
    return X, y, k, require_real("alpha", alpha, strictly_positive=True)


def _noniid_unbounded(X, y, num_workers, rng, alpha):
    """Redraws until no worker is empty, however many deals that takes (no limit of 100)."""
    X, y, k, alpha = _noniid_checked(X, y, num_workers, rng, alpha)
    return _noniid_deal(X, y, k, rng, alpha, max_deals=10_000)


def _noniid_redraw_from_copy(X, y, num_workers, rng, alpha):
    """Each redraw restarts from a copy of the generator taken at the call: the same empty deal every time."""
    X, y, k, alpha = _noniid_checked(X, y, num_workers, rng, alpha)
    return _noniid_deal(X, y, k, rng, alpha, fresh_copy=True)


def _noniid_one_worker_returns_inputs(X, y, num_workers, rng, alpha):
    """Deals as it should (so rng advances), but one worker gets X and y themselves."""
    shards = ref.noniid_shard_dataset(X, y, num_workers, rng, alpha)
    return [(X, y)] if num_workers == 1 else shards


def _noniid_labels_in_deal_order(X, y, num_workers, rng, alpha):
    """X's rows sorted into X's order, but each y_i left in the order of the deal: rows lose their labels."""
    X, y, k, alpha = _noniid_checked(X, y, num_workers, rng, alpha)
    for _ in range(ref.MAX_DIRICHLET_DRAWS):
        pieces = [[] for _ in range(k)]
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            p = rng.dirichlet(np.full(k, alpha))
            for i, part in enumerate(np.split(idx, (np.cumsum(p)[:-1] * len(idx)).astype(int))):
                pieces[i].append(part)
        owned = [np.concatenate(parts) for parts in pieces]
        if min(len(o) for o in owned) > 0:
            return [(X[np.sort(o)], y[o]) for o in owned]
    raise ValueError(f"alpha = {alpha}: 100 deals all left a worker without data")


def _noniid_reverses_X(X, y, num_workers, rng, alpha):
    """The right shards, then X's rows reversed in place (a leftover of a debugging step)."""
    shards = ref.noniid_shard_dataset(X, y, num_workers, rng, alpha)
    X[:] = X[::-1].copy()
    return shards


def _noniid_no_upper_bound(X, y, num_workers, rng, alpha):
    """num_workers > n not checked: every deal leaves a worker empty and the error blames alpha."""
    X, y, _ = ref._validate_dataset(X, y, 1)
    k = require_int("num_workers", num_workers, minimum=1)
    require_generator("rng", rng)
    return _noniid_deal(X, y, k, rng, require_real("alpha", alpha, strictly_positive=True))


def _noniid_loose_types(X, y, num_workers, rng, alpha):
    """np.asarray on X and y: an integer X or float labels go through."""
    X, y = np.asarray(X), np.asarray(y)
    if len(X) != len(y) or len(y) == 0:
        raise ValueError("X and y must have the same number of rows, at least one")
    k = require_int("num_workers", num_workers, minimum=1, maximum=len(y))
    require_generator("rng", rng)
    return _noniid_deal(X, y, k, rng, require_real("alpha", alpha, strictly_positive=True))


def _noniid_unchecked_rng(X, y, num_workers, rng, alpha):
    """Validates everything but rng: ``3.permutation`` raises AttributeError."""
    X, y, k = ref._validate_dataset(X, y, num_workers)
    return _noniid_deal(X, y, k, rng, require_real("alpha", alpha, strictly_positive=True))


# --- Lesson 18 -------------------------------------------------------------------------------------
def _swb_seeds_global(shard, batch_size, rng):
    """The right batch from rng, after ``np.random.seed(0)`` "for reproducibility"."""
    np.random.seed(0)
    return ref.sample_worker_batch(shard, batch_size, rng)


def _swb_one_row_view(shard, batch_size, rng):
    """A one-row shard has nothing to choose from: the batch is a broadcast view of that row (no draw, as
    ``rng.integers(0, 1, size=B)`` draws nothing either)."""
    X_k, y_k = ref.validate_shard("shard", shard)
    require_int("batch_size", batch_size, minimum=1)
    require_generator("rng", rng)
    if len(y_k) == 1:
        return np.broadcast_to(X_k, (batch_size, X_k.shape[1])), np.broadcast_to(y_k, (batch_size,))
    return ref.sample_worker_batch(shard, batch_size, rng)


def _swb_copy_of_rng(shard, batch_size, rng):
    """Draws from a copy of rng: the same batch every call, and the caller's generator never advances."""
    return ref.sample_worker_batch(shard, batch_size, copy.deepcopy(rng))


def _swb_reverses_shard(shard, batch_size, rng):
    """The right batch, then the shard's rows reversed in place."""
    batch = ref.sample_worker_batch(shard, batch_size, rng)
    X_k, y_k = shard
    X_k[:], y_k[:] = X_k[::-1].copy(), y_k[::-1].copy()
    return batch


def _swb_zero_batch(shard, batch_size, rng):
    """batch_size checked to be an integer, not >= 1: batch_size 0 gives an empty batch."""
    X_k, y_k = ref.validate_shard("shard", shard)
    require_int("batch_size", batch_size, minimum=0)
    idx = require_generator("rng", rng).integers(0, len(y_k), size=batch_size)
    return X_k[idx], y_k[idx]


def _swb_unpacks_shard(shard, batch_size, rng):
    """``X_k, y_k = shard`` with no check: an array of 6 rows fails to unpack with a message that names nothing."""
    X_k, y_k = shard
    return ref.sample_worker_batch((X_k, y_k), batch_size, rng)


def _swb_unchecked_rng(shard, batch_size, rng):
    """Validates the shard and batch_size, then ``rng.integers``: None raises AttributeError."""
    X_k, y_k = ref.validate_shard("shard", shard)
    idx = rng.integers(0, len(y_k), size=require_int("batch_size", batch_size, minimum=1))
    return X_k[idx], y_k[idx]


def _swb_value_error_for_bool(shard, batch_size, rng):
    """Refuses batch_size=True, naming it, but with ValueError where the contract says TypeError."""
    if isinstance(batch_size, bool):
        raise ValueError("batch_size must be a positive integer, not a bool")
    return ref.sample_worker_batch(shard, batch_size, rng)


# --- Lesson 19 -------------------------------------------------------------------------------------
def _lts_params_in_place(params, opt_state, batch, hp):
    """The right step, written into the caller's parameter arrays and returned."""
    new_params, new_state, loss = ref.local_train_step(params, opt_state, batch, hp)
    for key in params:
        params[key][...] = new_params[key]
    return params, new_state, loss


def _lts_sgd_skips_adam_keys(params, opt_state, batch, hp):
    """Exactly the keys, but beta1, beta2 and eps are only validated when the optimizer is AdamW."""
    if isinstance(hp, Mapping) and set(hp) == set(ref.INNER_HP_KEYS) and hp["optimizer"] == "sgd":
        hp = {**hp, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8}
    return ref.local_train_step(params, opt_state, batch, hp)


def _lts_unchecked_state(params, opt_state, batch, hp):
    """opt_state never validated: a missing 'v' raises KeyError inside the optimizer, a misshaped moment broadcasts."""
    hp = ref.validate_inner_hp(hp)
    X_b, y_b = ref.validate_shard("batch", batch, params)
    logits, cache = model_forward(params, X_b)
    grads = model_backward(params, cache, y_b)
    new_params, new_state = ref.inner_optimizer_step(params, grads, opt_state, hp)
    return new_params, new_state, cross_entropy_loss(logits, y_b)


def _lts_unchecked_width(params, opt_state, batch, hp):
    """The forward written by hand (``relu(X_b @ W0 + b0) @ ...``), the batch's width never checked: a batch of the
    wrong width fails with NumPy's matmul message, which names nothing."""
    X_b = batch[0] if isinstance(batch, (tuple, list)) and len(batch) == 2 else None
    if isinstance(X_b, np.ndarray) and X_b.ndim == 2 and X_b.shape[1] != params["W0"].shape[0]:
        ref.validate_inner_hp(hp)
        return np.maximum(X_b @ params["W0"] + params["b0"], 0.0)
    return ref.local_train_step(params, opt_state, batch, hp)


# --- Lesson 20 -------------------------------------------------------------------------------------
def _ris_params_in_place(params, opt_state, shard, H, hp, rng):
    """The right H steps, then params_H written into the caller's arrays."""
    params_H, state_H, losses = ref.run_inner_steps(params, opt_state, shard, H, hp, rng)
    for key in params:
        params[key][...] = params_H[key]
    return params, state_H, losses


def _ris_zero_steps(params, opt_state, shard, H, hp, rng):
    """H = 0 accepted as 'no step': the state comes back unchanged, losses empty."""
    if H == 0 and not isinstance(H, bool):
        return clone_params(params), copy.deepcopy(opt_state), np.empty(0)
    return ref.run_inner_steps(params, opt_state, shard, H, hp, rng)


def _ris_value_error_for_float_H(params, opt_state, shard, H, hp, rng):
    """Refuses H = 2.5, naming H, but with ValueError where the contract says TypeError."""
    if isinstance(H, float):
        raise ValueError(f"H must be a whole number of steps, got {H}")
    return ref.run_inner_steps(params, opt_state, shard, H, hp, rng)


def _ris_unchecked_rng(params, opt_state, shard, H, hp, rng):
    """Draws the indices itself with ``rng.integers``, rng never validated: None raises AttributeError."""
    H = require_int("H", H, minimum=1)
    hp = ref.validate_inner_hp(hp)
    X_k, y_k = ref.validate_shard("shard", shard, params)
    losses = np.empty(H)
    for t in range(H):
        idx = rng.integers(0, len(y_k), size=hp["batch_size"])
        params, opt_state, losses[t] = ref.local_train_step(params, opt_state, (X_k[idx], y_k[idx]), hp)
    return params, opt_state, losses


# --- Lesson 25 -------------------------------------------------------------------------------------
def _round(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr, outer_momentum, *,
           start=None, state_of=None, rng_of=None, sent_type=int):
    """One DiLoCo round; ``start(i, thetas)``, ``state_of(i)``, ``rng_of(i)`` replace what worker i starts from."""
    thetas, states, losses = [], [], []
    for i in range(len(shards)):
        theta0 = clone_params(global_params) if start is None else start(i, thetas)
        state = worker_states[i] if state_of is None else state_of(i)
        rng = rngs[i] if rng_of is None else rng_of(i)
        theta, s, l = ref.run_inner_steps(theta0, state, shards[i], H, inner_hp, rng)
        thetas.append(theta)
        states.append(s)
        losses.append(l)
    delta = compute_outer_gradient(global_params, thetas)
    new_global, new_outer = nesterov_outer_step(global_params, outer_state, delta, outer_lr, outer_momentum)
    table = np.stack(losses)
    return new_global, new_outer, states, {"train_loss": float(table.mean()), "worker_losses": table,
                                           "bytes_communicated": sent_type(sum(params_nbytes(t) for t in thetas))}


def _validated(fn):
    """``fn`` behind the reference's validation (run on copies, so that nothing is trained twice)."""
    def wrapped(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr, outer_momentum):
        ref_loop.diloco_round(global_params, outer_state, worker_states, shards,
                              [copy.deepcopy(r) for r in rngs] if isinstance(rngs, list) else rngs,
                              H=H, inner_hp=inner_hp, outer_lr=outer_lr, outer_momentum=outer_momentum)
        return fn(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr, outer_momentum)
    wrapped.__doc__ = fn.__doc__
    return wrapped


@_validated
def _dr_chained_workers(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr,
                        outer_momentum):
    """Worker i starts from worker i - 1's parameters (one model passed along), not from a clone of the global."""
    return _round(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr, outer_momentum,
                  start=lambda i, thetas: clone_params(thetas[-1] if thetas else global_params))


@_validated
def _dr_first_state_for_all(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr,
                            outer_momentum):
    """Every worker trains from worker_states[0] (one optimizer state for the round)."""
    return _round(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr, outer_momentum,
                  state_of=lambda i: worker_states[0])


@_validated
def _dr_copies_rngs(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr, outer_momentum):
    """Every worker trains with a copy of its generator: the right round, but the caller's rngs never advance,
    so the next round draws the same batches again."""
    return _round(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr, outer_momentum,
                  rng_of=lambda i: copy.deepcopy(rngs[i]))


@_validated
def _dr_numpy_bytes(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr, outer_momentum):
    """bytes_communicated left a numpy.int64 (a sum of nbytes) where the contract says int."""
    return _round(global_params, outer_state, worker_states, shards, rngs, H, inner_hp, outer_lr, outer_momentum,
                  sent_type=np.int64)


def _dr_buffer_in_place(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                        outer_momentum):
    """The right round, with the new momentum buffer written into the caller's outer_state arrays."""
    out = ref_loop.diloco_round(global_params, outer_state, worker_states, shards, rngs, H=H, inner_hp=inner_hp,
                                outer_lr=outer_lr, outer_momentum=outer_momentum)
    for key, value in out[1]["momentum_buffer"].items():
        outer_state["momentum_buffer"][key][...] = value
    return out


def _dr_zips_workers(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                     outer_momentum):
    """``zip(worker_states, shards, rngs)`` with no length check: a short rngs list silently drops workers."""
    k = min(len(worker_states), len(shards), len(rngs))
    return ref_loop.diloco_round(global_params, outer_state, list(worker_states[:k]), list(shards[:k]),
                                 list(rngs[:k]), H=H, inner_hp=inner_hp, outer_lr=outer_lr,
                                 outer_momentum=outer_momentum)


def _dr_no_empty_check(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                       outer_momentum):
    """No worker at all is not refused up front: np.stack of no losses fails with a message naming nothing."""
    if isinstance(shards, list) and not shards:
        np.stack([])
    return ref_loop.diloco_round(global_params, outer_state, worker_states, shards, rngs, H=H, inner_hp=inner_hp,
                                 outer_lr=outer_lr, outer_momentum=outer_momentum)


def _dr_type_error_for_lengths(global_params, outer_state, worker_states, shards, rngs, *, H, inner_hp, outer_lr,
                               outer_momentum):
    """A rngs list of the wrong length refused, naming rngs, with TypeError where the contract says ValueError."""
    if isinstance(rngs, list) and isinstance(shards, list) and len(rngs) != len(shards):
        raise TypeError(f"rngs must hold one generator per shard ({len(shards)}), got {len(rngs)}")
    return ref_loop.diloco_round(global_params, outer_state, worker_states, shards, rngs, H=H, inner_hp=inner_hp,
                                 outer_lr=outer_lr, outer_momentum=outer_momentum)


# --- Lessons 26 and 27 -----------------------------------------------------------------------------
def _drops_unknown_keys(trainer):
    def wrong(config):
        if isinstance(config, Mapping):
            config = {key: value for key, value in config.items() if key in ref_loop.CONFIG_FIELDS}
        return trainer(config)
    wrong.__doc__ = "Unknown config keys silently dropped (a typo such as 'H' runs with the default)."
    return wrong


def _dict_of_config(trainer):
    def wrong(config):
        if config is not None and not isinstance(config, ref_loop.DiLoCoConfig):
            config = dict(config)  # dict(5): TypeError "'int' object is not iterable", naming nothing
        return trainer(config)
    wrong.__doc__ = "``dict(config)`` without a type check: config = 5 fails with a message that names nothing."
    return wrong


def _key_error_for_unknown(trainer):
    def wrong(config):
        if isinstance(config, Mapping):
            unknown = sorted(set(config) - set(ref_loop.CONFIG_FIELDS))
            if unknown:
                raise KeyError(f"config has unknown keys {unknown}")
        return trainer(config)
    wrong.__doc__ = "An unknown key refused, naming it, with KeyError where the contract says ValueError."
    return wrong


def _sync_worker0_only(config):
    """The synchronous baseline stepping on worker 0's gradient alone (the others' batches drawn and discarded)."""
    import time

    start = time.perf_counter()
    run = ref_loop.setup_run(config)
    cfg = run["config"]
    params, hp = run["params"], ref_loop.inner_hp(cfg)
    state, history, total = init_adamw_state(params), [], 0
    for r in range(1, cfg.rounds + 1):
        losses, sent = [], 0
        for _ in range(cfg.inner_steps):
            grads = []
            for shard, rng in zip(run["shards"], run["worker_rngs"]):
                X_b, y_b = ref.sample_worker_batch(shard, cfg.batch_size, rng)
                logits, cache = model_forward(params, X_b)
                losses.append(cross_entropy_loss(logits, y_b))
                grads.append(model_backward(params, cache, y_b))
            sent += sum(params_nbytes(g) for g in grads)
            params, state = ref.inner_optimizer_step(params, grads[0], state, hp)
        total += sent
        history.append(ref_loop._entry(run, params, r, r * cfg.inner_steps, float(np.mean(losses)), sent, total))
    return ref_loop._record("synchronous", run, params, history, ref_loop._initial(run), start)


# --- Lessons 28 and 29 -----------------------------------------------------------------------------
def _sorts_by_label(metric):
    def wrong(params, X, y):
        order = np.argsort(y, kind="stable")
        X[:], y[:] = X[order], y[order]  # "evaluate class by class": the caller's arrays are reordered
        return metric(params, X, y)
    wrong.__doc__ = ("Sorts X and y by label in place to evaluate class by class (a mean does not care; the "
                     "caller does).")
    return wrong


# --- Lesson 30 -------------------------------------------------------------------------------------
def _cs_annotates_entries(diloco_history, sync_history, metric="heldout_loss"):
    """The right result, after writing each entry's bytes per step into it (entry['bytes_per_step'])."""
    for history in (diloco_history, sync_history):
        if isinstance(history, (list, tuple)):
            for entry in history:
                if isinstance(entry, dict) and entry.get("steps"):
                    entry["bytes_per_step"] = entry.get("cumulative_bytes", 0) / entry["steps"]
    result = ref_eval.communication_savings(
        [{k: v for k, v in e.items() if k != "bytes_per_step"} if isinstance(e, dict) else e for e in diloco_history]
        if isinstance(diloco_history, (list, tuple)) else diloco_history,
        [{k: v for k, v in e.items() if k != "bytes_per_step"} if isinstance(e, dict) else e for e in sync_history]
        if isinstance(sync_history, (list, tuple)) else sync_history, metric)
    return result


def _cs_value_error_for_empty(diloco_history, sync_history, metric="heldout_loss"):
    """An empty history refused, naming it, with ValueError where the contract says TypeError."""
    for name, history in (("diloco_history", diloco_history), ("sync_history", sync_history)):
        if isinstance(history, list) and not history:
            raise ValueError(f"{name} is empty")
    return ref_eval.communication_savings(diloco_history, sync_history, metric)


def _cs_key_error_for_missing(diloco_history, sync_history, metric="heldout_loss"):
    """An entry without a key refused, naming the history and index, with KeyError where the contract says
    ValueError."""
    for name, history in (("diloco_history", diloco_history), ("sync_history", sync_history)):
        if isinstance(history, (list, tuple)):
            for i, entry in enumerate(history):
                if isinstance(entry, dict) and "cumulative_bytes" not in entry:
                    raise KeyError(f"{name}[{i}] has no 'cumulative_bytes'")
    return ref_eval.communication_savings(diloco_history, sync_history, metric)


WITNESSES = {
    "iid_shard_dataset": {
        "the recipe": [existing("iid_shard_dataset", "no shuffle: contiguous blocks (contract"),
                       existing("iid_shard_dataset", "rows left in permutation order"),
                       existing("iid_shard_dataset", "rng.choice(n, n, replace=False)"),
                       existing("iid_shard_dataset", "the larger shards last")],
        "invariants": [existing("iid_shard_dataset", "drops the remainder n mod k"),
                       existing("iid_shard_dataset", "two permutations for X and y"),
                       ("one worker gets X and y themselves", _iid_one_worker_returns_inputs)],
        "mutation": [existing("iid_shard_dataset", "k = 1 shortcut copies without drawing"),
                     ("X and y left in the shuffled order", _iid_reorders_inputs)],
        "failure modes": [existing("iid_shard_dataset", "num_workers=True accepted"),
                          existing("iid_shard_dataset", "np.asarray on X, y"),
                          ("num_workers > n accepted (empty shards)", _iid_no_upper_bound),
                          ("rng not validated", _iid_unchecked_rng),
                          ("len(y) never compared with X's rows", _iid_unchecked_lengths),
                          ("ValueError for an integer X", _iid_value_error_for_types)],
        "metric that proves it correct": [existing("iid_shard_dataset", "drops the remainder n mod k"),
                                          existing("iid_shard_dataset", "the larger shards last")],
    },
    "noniid_shard_dataset": {
        "the deal": [existing("noniid_shard_dataset", "alpha ignored: Dirichlet(1)"),
                     existing("noniid_shard_dataset", "one Dirichlet draw for all classes"),
                     existing("noniid_shard_dataset", "cuts rounded instead of floored"),
                     existing("noniid_shard_dataset", "Dirichlet drawn before the class permutation"),
                     existing("noniid_shard_dataset", "classes in order of first appearance"),
                     existing("noniid_shard_dataset", "per-worker floor(p_i n_c)"),
                     existing("noniid_shard_dataset", "worker rows not sorted")],
        "redraw": [existing("noniid_shard_dataset", "keeps a deal with an empty worker"),
                   existing("noniid_shard_dataset", "gives up after 10 deals"),
                   ("no limit on the deals", _noniid_unbounded),
                   ("each redraw restarts from a copy of rng", _noniid_redraw_from_copy)],
        "invariants": [("one worker gets X and y themselves", _noniid_one_worker_returns_inputs),
                       ("labels left in the deal's order while the rows are sorted", _noniid_labels_in_deal_order),
                       existing("noniid_shard_dataset", "keeps a deal with an empty worker")],
        "mutation": [existing("noniid_shard_dataset", "k = 1 shortcut without the deal's draws"),
                     ("X's rows reversed in place", _noniid_reverses_X)],
        "failure modes": [existing("noniid_shard_dataset", "alpha=True accepted as 1.0"),
                          ("num_workers > n not checked: the error blames alpha", _noniid_no_upper_bound),
                          ("np.asarray on X and y", _noniid_loose_types),
                          ("rng not validated", _noniid_unchecked_rng)],
        "metric that proves it correct": [existing("noniid_shard_dataset", "cuts rounded instead of floored"),
                                          existing("noniid_shard_dataset", "alpha ignored: Dirichlet(1)")],
    },
    "sample_worker_batch": {
        "the draw": [existing("sample_worker_batch", "the first B rows, cycling"),
                     existing("sample_worker_batch", "separate draws for X and y"),
                     existing("sample_worker_batch", "without replacement when B <= n_k")],
        "mutation": [existing("sample_worker_batch", "global np.random.randint (contract"),
                     ("np.random.seed(0) before the draw", _swb_seeds_global),
                     ("a broadcast view of a one-row shard", _swb_one_row_view),
                     ("draws from a copy of rng", _swb_copy_of_rng),
                     ("the shard reversed in place", _swb_reverses_shard)],
        "failure modes": [existing("sample_worker_batch", "batch_size=True accepted"),
                          existing("sample_worker_batch", "np.asarray on the shard"),
                          ("batch_size = 0 gives an empty batch", _swb_zero_batch),
                          ("the shard unpacked without a check", _swb_unpacks_shard),
                          ("rng not validated", _swb_unchecked_rng),
                          ("ValueError for batch_size = True", _swb_value_error_for_bool)],
        "metric that proves it correct": [existing("sample_worker_batch", "the first B rows, cycling"),
                                          existing("sample_worker_batch", "separate draws for X and y")],
    },
    "local_train_step": {
        "the step": [existing("local_train_step", "loss reported after the update"),
                     existing("local_train_step", "SGD without the decoupled decay"),
                     existing("local_train_step", "SGD decays after the gradient step"),
                     existing("local_train_step", "truncates the batch to hp['batch_size'] rows")],
        "mutation": [existing("local_train_step", "SGD branch bumps opt_state['step'] in place"),
                     ("params updated in place and returned", _lts_params_in_place)],
        "failure modes": [existing("local_train_step", "extra hp keys accepted"),
                          existing("local_train_step", "labels only checked against C from above"),
                          ("beta1, beta2, eps not validated for SGD", _lts_sgd_skips_adam_keys),
                          ("opt_state never validated", _lts_unchecked_state),
                          ("the batch's width never checked", _lts_unchecked_width)],
        "metric that proves it correct": [existing("local_train_step", "optimizer state re-initialised inside"),
                                          existing("local_train_step", "re-initialises the optimizer state every")],
    },
    "run_inner_steps": {
        "the loop": [existing("run_inner_steps", "one batch reused H times"),
                     existing("run_inner_steps", "H - 1 steps (contract"),
                     existing("run_inner_steps", "batch size clamped to the shard size")],
        "mutation": [existing("run_inner_steps", "draws from a deep copy of rng"),
                     ("params_H written into the caller's params", _ris_params_in_place)],
        "failure modes": [existing("run_inner_steps", "H=True accepted"),
                          existing("run_inner_steps", "shard labels not checked up front"),
                          ("H = 0 accepted as no step", _ris_zero_steps),
                          ("ValueError for H = 2.5", _ris_value_error_for_float_H),
                          ("rng not validated", _ris_unchecked_rng)],
        "metric that proves it correct": [existing("run_inner_steps", "optimizer state reset at the start"),
                                          existing("run_inner_steps", "runs H - 1 steps")],
    },
    "diloco_round": {
        "order and randomness": [existing("diloco_round", "every worker draws from rngs[0] (contract"),
                                 ("worker i starts from worker i - 1's parameters", _dr_chained_workers),
                                 ("every worker trains from worker_states[0]", _dr_first_state_for_all)],
        "bytes": [existing("diloco_round", "bytes counted once per round (contract"),
                  ("bytes_communicated a numpy.int64", _dr_numpy_bytes)],
        "mutation": [existing("diloco_round", "writes the new states into the caller's worker_states list"),
                     ("workers train on copies of their generators", _dr_copies_rngs),
                     ("the momentum buffer updated in place", _dr_buffer_in_place)],
        "failure modes": [existing("diloco_round", "outer_lr / outer_momentum refused only after"),
                          ("zip of the lists: a short rngs drops workers", _dr_zips_workers),
                          ("no worker at all not refused up front", _dr_no_empty_check),
                          ("TypeError for a short rngs list", _dr_type_error_for_lengths)],
        "metric that proves it correct": [existing("diloco_round", "pseudo-gradient reversed: mean(theta_i)"),
                                          existing("diloco_round", "outer step replaced by plain averaging (contract"),
                                          existing("diloco_round", "workers averaged with shard-size weights")],
    },
    "train_diloco": {
        "mutation": [existing("train_diloco", "fills the defaults into the caller's config dict")],
        "failure modes": [("unknown keys dropped", _drops_unknown_keys(ref_loop.train_diloco)),
                          ("dict(config) without a type check", _dict_of_config(ref_loop.train_diloco)),
                          ("KeyError for an unknown key", _key_error_for_unknown(ref_loop.train_diloco))],
        "metric that proves it correct": [existing("train_diloco", "round with the pseudo-gradient reversed"),
                                          existing("train_diloco", "AdamW states averaged at the end"),
                                          existing("train_diloco", "one tree per round in bytes_communicated")],
    },
    "train_synchronous_baseline": {
        "one step": [existing("train_synchronous_baseline", "gradients summed, not averaged"),
                     ("steps on worker 0's gradient alone", _sync_worker0_only),
                     existing("train_synchronous_baseline", "gradients weighted by shard size n_i")],
        "bytes": [existing("train_synchronous_baseline", "one gradient tree per step in the bytes")],
        "mutation": [existing("train_synchronous_baseline", "fills the defaults into the caller's config dict "
                              "(contract: 'Mutation: none')")],
        "failure modes": [("unknown keys dropped", _drops_unknown_keys(ref_loop.train_synchronous_baseline)),
                          ("dict(config) without a type check", _dict_of_config(ref_loop.train_synchronous_baseline)),
                          ("KeyError for an unknown key", _key_error_for_unknown(ref_loop.train_synchronous_baseline))],
        "metric that proves it correct": [
            existing("train_synchronous_baseline", "all-reduced gradient scaled by outer_lr"),
            existing("train_synchronous_baseline", "AdamW re-initialised at each logged round"),
            existing("train_synchronous_baseline", "train_loss = the round's last step only")],
    },
    "evaluate_heldout_loss": {
        "how": [existing("evaluate_heldout_loss", "-log(softmax) : inf"),
                existing("evaluate_heldout_loss", "float32 logits reduced in float32")],
        "mutation": [("X and y sorted by label in place", _sorts_by_label(ref_eval.evaluate_heldout_loss))],
        "failure modes": [existing("evaluate_heldout_loss", "labels checked only from above"),
                          existing("evaluate_heldout_loss", "float labels truncated to int"),
                          existing("evaluate_heldout_loss", "empty X returns nan"),
                          existing("evaluate_heldout_loss", "integer X converted")],
        "metric that proves it correct": [existing("evaluate_heldout_loss", "sum instead of mean"),
                                          existing("evaluate_heldout_loss", "only the first 32 examples"),
                                          existing("evaluate_heldout_loss", "class-balanced mean")],
    },
    "classification_accuracy": {
        "the prediction": [existing("classification_accuracy", "p_y > 0.5 counted as correct"),
                           existing("classification_accuracy", "argmax of a naive softmax")],
        "ties": [existing("classification_accuracy", "ties to the last class (contract")],
        "mutation": [("X and y sorted by label in place", _sorts_by_label(ref_eval.classification_accuracy))],
        "failure modes": [existing("classification_accuracy", "labels checked only from above"),
                          existing("classification_accuracy", "float labels accepted"),
                          existing("classification_accuracy", "empty X returns nan")],
        "metric that proves it correct": [existing("classification_accuracy", "the count, not the fraction"),
                                          existing("classification_accuracy", "counts p(true class) > 0.5")],
    },
    "communication_savings": {
        "mutation": [("each entry annotated with its bytes per step", _cs_annotates_entries)],
        "failure modes": [existing("communication_savings", "any history key accepted as metric"),
                          existing("communication_savings", "missing-key error without the entry's index"),
                          existing("communication_savings", "zero steps/bytes not refused"),
                          ("ValueError for an empty history", _cs_value_error_for_empty),
                          ("KeyError for an entry without a key", _cs_key_error_for_missing)],
        "metric that proves it correct": [existing("communication_savings", "bytes of the whole runs (contract"),
                                          existing("communication_savings", "the last entry at the target"),
                                          existing("communication_savings", "per-step ratio as a quotient"),
                                          existing("communication_savings", "bytes reconstructed as round")],
    },
}
