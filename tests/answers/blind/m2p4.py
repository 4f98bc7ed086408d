"""Red team, Module 2 Part 4 (data sharding & local worker training): wrong answers and correct alternatives
written from the release notebooks only."""

from __future__ import annotations

import math

import numpy as np

from trainsys.diloco.adamw import adamw_step, init_adamw_state
from trainsys.diloco.model import cross_entropy_loss, model_backward, model_forward


# ----------------------------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------------------------
def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x):
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _check_xy(X, y):
    if not isinstance(X, np.ndarray) or not np.issubdtype(X.dtype, np.floating):
        raise TypeError("X must be a floating-point numpy array")
    if X.ndim != 2:
        raise ValueError(f"X must have 2 axes, got shape {X.shape}")
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
        raise TypeError("y must be a 1-D integer numpy array")
    if len(y) != X.shape[0]:
        raise ValueError(f"y has {len(y)} labels for {X.shape[0]} rows of X")
    if X.shape[0] < 1:
        raise ValueError("X must hold at least one row")
    return X.shape[0]


def _check_workers(num_workers, n):
    if not _is_int(num_workers):
        raise TypeError(f"num_workers must be an int, got {num_workers!r}")
    if not 1 <= num_workers <= n:
        raise ValueError(f"num_workers must be in [1, {n}], got {num_workers}")
    return int(num_workers)


def _check_rng(rng):
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _check_alpha(alpha):
    if not _is_real(alpha) or not math.isfinite(float(alpha)) or float(alpha) <= 0:
        raise ValueError(f"alpha must be a finite real number > 0, got {alpha!r}")
    return float(alpha)


# ==========================================================================================================
# Lesson 16: iid_shard_dataset
# ==========================================================================================================
def _iid_no_shuffle(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    return [(X[p], y[p]) for p in np.array_split(np.arange(n), k)]


def _iid_drop_remainder(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    perm = rng.permutation(n)
    size = n // k
    return [(X[np.sort(perm[i * size:(i + 1) * size])], y[np.sort(perm[i * size:(i + 1) * size])]) for i in range(k)]


def _iid_two_perms(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    px, py = rng.permutation(n), rng.permutation(n)
    return [(X[np.sort(a)], y[np.sort(b)]) for a, b in zip(np.array_split(px, k), np.array_split(py, k))]


def _iid_unsorted(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    return [(X[p], y[p]) for p in np.array_split(rng.permutation(n), k)]


def _iid_choice(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    perm = rng.choice(n, size=n, replace=False)  # a permutation, but not the contract's stream
    return [(X[np.sort(p)], y[np.sort(p)]) for p in np.array_split(perm, k)]


def _iid_one_worker_no_draw(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    if k == 1:
        return [(X.copy(), y.copy())]  # same shard, but rng is not advanced
    return [(X[np.sort(p)], y[np.sort(p)]) for p in np.array_split(rng.permutation(n), k)]


def _iid_bool_workers(X, y, num_workers, rng):
    n = _check_xy(X, y)
    if not isinstance(num_workers, int):  # True passes as 1
        raise TypeError("num_workers must be an int")
    if not 1 <= num_workers <= n:
        raise ValueError("num_workers out of range")
    _check_rng(rng)
    return [(X[np.sort(p)], y[np.sort(p)]) for p in np.array_split(rng.permutation(n), num_workers)]


def _iid_loose_types(X, y, num_workers, rng):
    X, y = np.asarray(X), np.asarray(y)  # integer X, float y, 1-D X, 2-D y all slip through
    n = len(X)
    if len(y) != n:
        raise ValueError("y must have one label per row of X")
    if n < 1:
        raise ValueError("X is empty")
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    return [(X[np.sort(p)], y[np.sort(p)]) for p in np.array_split(rng.permutation(n), k)]


def _iid_cast_dtypes(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    Xf, yi = X.astype(np.float32), y.astype(np.int64)  # "normalise the dtypes for the model"
    return [(Xf[np.sort(p)], yi[np.sort(p)]) for p in np.array_split(rng.permutation(n), k)]


def _iid_remainder_last(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    perm = rng.permutation(n)
    q, r = divmod(n, k)
    sizes = [q] * (k - r) + [q + 1] * r  # the larger shards last
    cuts = np.cumsum(sizes)[:-1]
    return [(X[np.sort(p)], y[np.sort(p)]) for p in np.split(perm, cuts)]


def _iid_alt_shuffle(X, y, num_workers, rng):
    _check_rng(rng)
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    order = np.arange(n)
    rng.shuffle(order)  # the same Fisher-Yates stream as rng.permutation(n)
    q, r = divmod(n, k)
    shards, start = [], 0
    for i in range(k):
        stop = start + q + (1 if i < r else 0)
        idx = np.sort(order[start:stop])
        shards.append((np.take(X, idx, axis=0), np.take(y, idx)))
        start = stop
    return shards


def _iid_alt_mask(X, y, num_workers, rng):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    owner = np.empty(n, dtype=np.int64)
    for i, part in enumerate(np.array_split(rng.permutation(n), k)):
        owner[part] = i
    return [(X[owner == i], y[owner == i]) for i in range(k)]  # boolean masks keep X's order


# ==========================================================================================================
# Lesson 17: noniid_shard_dataset
# ==========================================================================================================
def _deal(X, y, k, rng, alpha, *, classes=None, shares=None, cut=None, redraw=True, per_class_draw=True,
          sort_rows=True, perm_first=True, max_deals=100):
    classes = np.unique(y) if classes is None else classes
    for _ in range(max_deals):
        pieces = [[] for _ in range(k)]
        p_once = rng.dirichlet(np.full(k, alpha)) if not per_class_draw else None
        for c in classes:
            if perm_first:
                idx = rng.permutation(np.flatnonzero(y == c))
                p = rng.dirichlet(np.full(k, alpha if shares is None else shares)) if per_class_draw else p_once
            else:
                p = rng.dirichlet(np.full(k, alpha if shares is None else shares))
                idx = rng.permutation(np.flatnonzero(y == c))
            cuts = (cut or (lambda p, n: np.floor(np.cumsum(p)[:-1] * n).astype(int)))(p, len(idx))
            for i, piece in enumerate(np.split(idx, cuts)):
                pieces[i].append(piece)
        rows = [np.concatenate(ps) if ps else np.empty(0, np.int64) for ps in pieces]
        if sort_rows:
            rows = [np.sort(r) for r in rows]
        if not redraw or all(len(r) > 0 for r in rows):
            return [(X[r], y[r]) for r in rows]
    raise ValueError(f"alpha = {alpha}: 100 deals all left a worker without data; use a larger alpha or fewer workers")


def _noniid_checks(X, y, num_workers, rng, alpha):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    return k, _check_alpha(alpha)


def _noniid_ignore_alpha(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    return _deal(X, y, k, rng, a, shares=1.0)


def _noniid_one_draw(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    return _deal(X, y, k, rng, a, per_class_draw=False)


def _noniid_rounded_cuts(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    return _deal(X, y, k, rng, a, cut=lambda p, n: np.round(np.cumsum(p)[:-1] * n).astype(int))


def _noniid_keeps_empty(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    return _deal(X, y, k, rng, a, redraw=False)


def _noniid_dirichlet_first(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    return _deal(X, y, k, rng, a, perm_first=False)


def _noniid_first_appearance(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    _, first = np.unique(y, return_index=True)
    classes = y[np.sort(first)]  # classes in the order they first appear in y, not increasing
    return _deal(X, y, k, rng, a, classes=classes)


def _noniid_per_worker_floor(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)

    def cut(p, n):
        counts = np.floor(p * n).astype(int)  # each worker floors its own share; the last takes the rest
        return np.cumsum(counts)[:-1]

    return _deal(X, y, k, rng, a, cut=cut)


def _noniid_unsorted(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    return _deal(X, y, k, rng, a, sort_rows=False)


def _noniid_one_worker_no_draw(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    if k == 1:
        return [(X.copy(), y.copy())]  # rng not advanced by the 2C draws of the deal
    return _deal(X, y, k, rng, a)


def _noniid_bool_alpha(X, y, num_workers, rng, alpha):
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:  # True passes as 1.0
        raise ValueError("alpha must be a finite number > 0")
    return _deal(X, y, k, rng, float(alpha))


def _noniid_ten_deals(X, y, num_workers, rng, alpha):
    k, a = _noniid_checks(X, y, num_workers, rng, alpha)
    return _deal(X, y, k, rng, a, max_deals=10)


def _noniid_alt_loop(X, y, num_workers, rng, alpha):
    _check_rng(rng)
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    alpha = _check_alpha(alpha)
    conc = np.full(k, alpha)
    for _attempt in range(100):
        owner = np.full(n, -1, dtype=np.int64)
        for c in np.unique(y):
            members = rng.permutation(np.flatnonzero(y == c))
            shares = rng.dirichlet(conc)
            bounds = (np.cumsum(shares)[:-1] * len(members)).astype(int)  # truncation == floor (>= 0)
            start = 0
            for i, stop in enumerate(list(bounds) + [len(members)]):
                owner[members[start:stop]] = i
                start = stop
        counts = np.bincount(owner, minlength=k)
        if np.all(counts > 0):
            return [(X[owner == i], y[owner == i]) for i in range(k)]
    raise ValueError(f"could not give every worker data in 100 deals at alpha = {alpha}; increase alpha")


# ==========================================================================================================
# Lesson 18: sample_worker_batch
# ==========================================================================================================
def _check_shard(shard):
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise TypeError("shard must be a pair (X_k, y_k)")
    X_k, y_k = shard
    if not isinstance(X_k, np.ndarray) or not np.issubdtype(X_k.dtype, np.floating) or X_k.ndim != 2:
        raise ValueError("shard: X_k must be a 2-D floating-point array")
    if not isinstance(y_k, np.ndarray) or not np.issubdtype(y_k.dtype, np.integer) or y_k.ndim != 1:
        raise ValueError("shard: y_k must be a 1-D integer array")
    if len(y_k) != len(X_k):
        raise ValueError("shard: X_k and y_k have different lengths")
    if len(y_k) < 1:
        raise ValueError("shard is empty")
    return X_k, y_k


def _check_batch_size(batch_size):
    if not _is_int(batch_size):
        raise TypeError(f"batch_size must be an int, got {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return int(batch_size)


def _swb_first_rows(shard, batch_size, rng):
    X_k, y_k = _check_shard(shard)
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    idx = np.arange(B) % len(y_k)
    return X_k[idx], y_k[idx]


def _swb_two_draws(shard, batch_size, rng):
    X_k, y_k = _check_shard(shard)
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    return X_k[rng.integers(0, len(y_k), size=B)], y_k[rng.integers(0, len(y_k), size=B)]


def _swb_global_rng(shard, batch_size, rng):
    X_k, y_k = _check_shard(shard)
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    idx = np.random.randint(0, len(y_k), B)
    return X_k[idx], y_k[idx]


def _swb_without_replacement(shard, batch_size, rng):
    X_k, y_k = _check_shard(shard)
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    idx = rng.choice(len(y_k), size=B, replace=B > len(y_k))
    return X_k[idx], y_k[idx]


def _swb_one_row_no_draw(shard, batch_size, rng):
    X_k, y_k = _check_shard(shard)
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    if len(y_k) == 1:
        return np.repeat(X_k, B, axis=0), np.repeat(y_k, B)  # nothing to choose from: no draw
    idx = rng.integers(0, len(y_k), size=B)
    return X_k[idx], y_k[idx]


def _swb_bool_batch(shard, batch_size, rng):
    X_k, y_k = _check_shard(shard)
    if not isinstance(batch_size, int):  # True is accepted as 1
        raise TypeError("batch_size must be an int")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    _check_rng(rng)
    idx = rng.integers(0, len(y_k), size=batch_size)
    return X_k[idx], y_k[idx]


def _swb_tuple_only(shard, batch_size, rng):
    if not isinstance(shard, tuple):  # a [X, y] list refused
        raise TypeError("shard must be a tuple (X_k, y_k)")
    X_k, y_k = _check_shard(shard)
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    idx = rng.integers(0, len(y_k), size=B)
    return X_k[idx], y_k[idx]


def _swb_loose_shard(shard, batch_size, rng):
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise TypeError("shard must be a pair")
    X_k, y_k = np.asarray(shard[0]), np.asarray(shard[1])  # float labels, 1-D features accepted
    if len(X_k) != len(y_k):
        raise ValueError("shard: lengths differ")
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    idx = rng.integers(0, len(y_k), size=B)  # an empty shard fails inside NumPy ("high <= 0")
    return X_k[idx], y_k[idx]


def _swb_cast(shard, batch_size, rng):
    X_k, y_k = _check_shard(shard)
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    idx = rng.integers(0, len(y_k), size=B)
    return X_k[idx].astype(np.float32), y_k[idx].astype(np.int64)  # dtypes of the shard not kept


def _swb_alt_choice(shard, batch_size, rng):
    _check_rng(rng)
    B = _check_batch_size(batch_size)
    X_k, y_k = _check_shard(shard)
    idx = rng.choice(X_k.shape[0], size=B)  # with replacement: the same integers draw
    return np.take(X_k, idx, axis=0), np.take(y_k, idx)


def _swb_alt_integers_high(shard, batch_size, rng):
    X_k, y_k = _check_shard(shard)
    B = _check_batch_size(batch_size)
    _check_rng(rng)
    idx = rng.integers(len(y_k), size=B)
    return X_k[idx, :], y_k[idx]


# ==========================================================================================================
# Lesson 19: local_train_step
# ==========================================================================================================
HP_KEYS = {"optimizer", "lr", "beta1", "beta2", "eps", "weight_decay", "batch_size"}


def _check_hp(hp, exact=True):
    if not isinstance(hp, dict):
        raise TypeError("hp must be a dict")
    missing, extra = HP_KEYS - set(hp), set(hp) - HP_KEYS
    if missing or (exact and extra):
        raise ValueError(f"hp: missing keys {sorted(missing)}, unexpected keys {sorted(extra)}")
    if hp["optimizer"] not in ("adamw", "sgd"):
        raise ValueError(f"hp['optimizer'] must be 'adamw' or 'sgd', got {hp['optimizer']!r}")
    for key in ("lr", "eps"):
        if not _is_real(hp[key]) or not math.isfinite(hp[key]) or hp[key] <= 0:
            raise ValueError(f"hp['{key}'] must be a finite real > 0")
    for key in ("beta1", "beta2"):
        if not _is_real(hp[key]) or not 0 <= hp[key] < 1:
            raise ValueError(f"hp['{key}'] must be in [0, 1)")
    if not _is_real(hp["weight_decay"]) or not math.isfinite(hp["weight_decay"]) or hp["weight_decay"] < 0:
        raise ValueError("hp['weight_decay'] must be a finite real >= 0")
    if not _is_int(hp["batch_size"]) or hp["batch_size"] < 1:
        raise ValueError("hp['batch_size'] must be an integer >= 1")


def _check_opt_state(opt_state, params):
    if not isinstance(opt_state, dict) or set(opt_state) != {"step", "m", "v"}:
        raise ValueError("opt_state must be a dict with keys 'step', 'm', 'v'")
    for tree in ("m", "v"):
        t = opt_state[tree]
        if not isinstance(t, dict) or set(t) != set(params) or any(t[k].shape != params[k].shape for k in params):
            raise ValueError(f"opt_state['{tree}'] must have the keys and shapes of params")


def _check_batch(batch, params):
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ValueError("batch must be a pair (X_b, y_b)")
    X_b, y_b = batch
    if not isinstance(X_b, np.ndarray) or X_b.ndim != 2 or X_b.shape[1] != params["W0"].shape[0]:
        raise ValueError("batch: X_b must be (B, d_in)")
    C = params[f"b{sum(k.startswith('W') for k in params) - 1}"].shape[0]
    if (not isinstance(y_b, np.ndarray) or not np.issubdtype(y_b.dtype, np.integer) or y_b.ndim != 1
            or len(y_b) != len(X_b)):
        raise ValueError("batch: y_b must be 1-D integer labels, one per row")
    if len(y_b) and (y_b.min() < 0 or y_b.max() >= C):
        raise ValueError(f"batch: labels must lie in [0, {C})")
    return X_b, y_b


def _grads_and_loss(params, X_b, y_b):
    logits, cache = model_forward(params, X_b)
    loss = cross_entropy_loss(logits, y_b)
    return model_backward(params, cache, y_b), loss


def _sgd(params, grads, lr, wd):
    return {k: (p * (1 - lr * wd) - lr * grads[k]).astype(p.dtype, copy=False) for k, p in params.items()}


def _lts_checks(params, opt_state, batch, hp):
    _check_hp(hp)
    _check_opt_state(opt_state, params)
    return _check_batch(batch, params)


def _lts_update(params, grads, opt_state, hp):
    if hp["optimizer"] == "adamw":
        return adamw_step(params, grads, opt_state, hp["lr"], hp["beta1"], hp["beta2"], hp["eps"],
                          hp["weight_decay"])
    return (_sgd(params, grads, hp["lr"], hp["weight_decay"]),
            {"step": opt_state["step"] + 1, "m": opt_state["m"], "v": opt_state["v"]})


def _lts_loss_after(params, opt_state, batch, hp):
    X_b, y_b = _lts_checks(params, opt_state, batch, hp)
    grads, _ = _grads_and_loss(params, X_b, y_b)
    new, state = _lts_update(params, grads, opt_state, hp)
    return new, state, float(cross_entropy_loss(model_forward(new, X_b)[0], y_b))


def _lts_always_sgd(params, opt_state, batch, hp):
    X_b, y_b = _lts_checks(params, opt_state, batch, hp)
    grads, loss = _grads_and_loss(params, X_b, y_b)
    new = _sgd(params, grads, hp["lr"], hp["weight_decay"])
    return new, {"step": opt_state["step"] + 1, "m": opt_state["m"], "v": opt_state["v"]}, float(loss)


def _lts_reinit_state(params, opt_state, batch, hp):
    X_b, y_b = _lts_checks(params, opt_state, batch, hp)
    grads, loss = _grads_and_loss(params, X_b, y_b)
    new, state = _lts_update(params, grads, init_adamw_state(params), hp)
    return new, state, float(loss)


def _lts_sgd_no_decay(params, opt_state, batch, hp):
    X_b, y_b = _lts_checks(params, opt_state, batch, hp)
    grads, loss = _grads_and_loss(params, X_b, y_b)
    if hp["optimizer"] == "adamw":
        new, state = _lts_update(params, grads, opt_state, hp)
    else:
        new = {k: (p - hp["lr"] * grads[k]).astype(p.dtype) for k, p in params.items()}
        state = {"step": opt_state["step"] + 1, "m": opt_state["m"], "v": opt_state["v"]}
    return new, state, float(loss)


def _lts_sgd_decay_after(params, opt_state, batch, hp):
    X_b, y_b = _lts_checks(params, opt_state, batch, hp)
    grads, loss = _grads_and_loss(params, X_b, y_b)
    if hp["optimizer"] == "adamw":
        new, state = _lts_update(params, grads, opt_state, hp)
    else:
        lr, wd = hp["lr"], hp["weight_decay"]
        new = {k: ((p - lr * grads[k]) * (1 - lr * wd)).astype(p.dtype) for k, p in params.items()}
        state = {"step": opt_state["step"] + 1, "m": opt_state["m"], "v": opt_state["v"]}
    return new, state, float(loss)


def _lts_truncates_batch(params, opt_state, batch, hp):
    X_b, y_b = _lts_checks(params, opt_state, batch, hp)
    B = hp["batch_size"]
    X_b, y_b = X_b[:B], y_b[:B]  # "the batch has batch_size rows"
    grads, loss = _grads_and_loss(params, X_b, y_b)
    new, state = _lts_update(params, grads, opt_state, hp)
    return new, state, float(loss)


def _lts_extra_hp_ok(params, opt_state, batch, hp):
    _check_hp(hp, exact=False)
    _check_opt_state(opt_state, params)
    X_b, y_b = _check_batch(batch, params)
    grads, loss = _grads_and_loss(params, X_b, y_b)
    new, state = _lts_update(params, grads, opt_state, hp)
    return new, state, float(loss)


def _lts_sgd_unvalidated(params, opt_state, batch, hp):
    if not isinstance(hp, dict):
        raise TypeError("hp must be a dict")
    for key in HP_KEYS:
        if key not in hp:
            raise ValueError(f"hp is missing {key!r}")
    if hp["optimizer"] not in ("adamw", "sgd"):
        raise ValueError("hp['optimizer'] must be 'adamw' or 'sgd'")
    if hp["lr"] <= 0:
        raise ValueError("hp['lr'] must be > 0")
    # betas, eps, weight_decay, batch_size are left to adamw_step -- never checked on the SGD path
    _check_opt_state(opt_state, params)
    X_b, y_b = _check_batch(batch, params)
    grads, loss = _grads_and_loss(params, X_b, y_b)
    new, state = _lts_update(params, grads, opt_state, hp)
    return new, state, float(loss)


def _lts_numpy_loss(params, opt_state, batch, hp):
    X_b, y_b = _lts_checks(params, opt_state, batch, hp)
    grads, loss = _grads_and_loss(params, X_b, y_b)
    new, state = _lts_update(params, grads, opt_state, hp)
    return new, state, np.float64(loss)  # NumPy scalar where a Python float is promised


def _lts_sgd_mutates_state(params, opt_state, batch, hp):
    X_b, y_b = _lts_checks(params, opt_state, batch, hp)
    grads, loss = _grads_and_loss(params, X_b, y_b)
    if hp["optimizer"] == "adamw":
        new, state = _lts_update(params, grads, opt_state, hp)
    else:
        new = _sgd(params, grads, hp["lr"], hp["weight_decay"])
        opt_state["step"] += 1  # the caller's state dict is bumped and handed back
        state = opt_state
    return new, state, float(loss)


def _lts_no_label_check(params, opt_state, batch, hp):
    _check_hp(hp)
    _check_opt_state(opt_state, params)
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ValueError("batch must be a pair")
    X_b, y_b = batch
    C = params[f"b{sum(k.startswith('W') for k in params) - 1}"].shape[0]
    if np.any(np.asarray(y_b) >= C):  # negative labels not refused
        raise ValueError("batch: label out of range")
    grads, loss = _grads_and_loss(params, X_b, y_b)
    new, state = _lts_update(params, grads, opt_state, hp)
    return new, state, float(loss)


def _lts_alt_torch_free(params, opt_state, batch, hp):
    # batch and state checked before hp; SGD written as theta - lr * (g + wd * theta) in float32 arithmetic
    # is NOT bit-identical, so the SGD branch keeps the contract's form
    X_b, y_b = _check_batch(batch, params)
    _check_opt_state(opt_state, params)
    _check_hp(hp)
    logits, cache = model_forward(params, X_b)
    loss = float(cross_entropy_loss(logits, y_b))
    grads = model_backward(params, cache, y_b)
    if hp["optimizer"] == "sgd":
        lr, wd = float(hp["lr"]), float(hp["weight_decay"])
        factor = 1.0 - lr * wd
        new_params = {}
        for k, p in params.items():
            new_params[k] = (p * factor - lr * grads[k]).astype(p.dtype, copy=False)
        new_state = {"step": opt_state["step"] + 1, "m": dict(opt_state["m"]), "v": dict(opt_state["v"])}
        return new_params, new_state, loss
    new_params, new_state = adamw_step(params, grads, opt_state, lr=hp["lr"], beta1=hp["beta1"],
                                       beta2=hp["beta2"], eps=hp["eps"], weight_decay=hp["weight_decay"])
    return new_params, new_state, loss


# ==========================================================================================================
# Lesson 20: run_inner_steps
# ==========================================================================================================
def _ris_checks(params, shard, H, hp, rng):
    if not _is_int(H):
        raise TypeError(f"H must be an int, got {H!r}")
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    if not isinstance(hp, dict) or "batch_size" not in hp:
        raise ValueError("hp must be a dict with 'batch_size'")
    if not _is_int(hp["batch_size"]) or hp["batch_size"] < 1:
        raise ValueError("hp['batch_size'] must be an integer >= 1")
    _check_rng(rng)
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise ValueError("shard must be a pair (X_k, y_k)")
    y_k = shard[1]
    C = params[f"b{sum(k.startswith('W') for k in params) - 1}"].shape[0]
    if (not isinstance(y_k, np.ndarray) or not np.issubdtype(y_k.dtype, np.integer) or y_k.ndim != 1
            or (len(y_k) and (y_k.min() < 0 or y_k.max() >= C))):
        raise ValueError(f"shard: labels must be 1-D integers in [0, {C})")
    return int(H), hp["batch_size"]


def _ris_loop(params, opt_state, shard, H, hp, rng, *, steps=None, batch=None, reset=False, B=None):
    from trainsys.diloco.sharding import local_train_step, sample_worker_batch

    steps = H if steps is None else steps
    losses = np.empty(steps, dtype=np.float64)
    if reset:
        opt_state = init_adamw_state(params)
    for t in range(steps):
        b = batch if batch is not None else sample_worker_batch(shard, B or hp["batch_size"], rng)
        params, opt_state, losses[t] = local_train_step(params, opt_state, b, hp)
    return params, opt_state, losses


def _ris_one_batch(params, opt_state, shard, H, hp, rng):
    from trainsys.diloco.sharding import sample_worker_batch

    H, B = _ris_checks(params, shard, H, hp, rng)
    batch = sample_worker_batch(shard, B, rng)
    return _ris_loop(params, opt_state, shard, H, hp, rng, batch=batch)


def _ris_h_minus_one(params, opt_state, shard, H, hp, rng):
    H, B = _ris_checks(params, shard, H, hp, rng)
    return _ris_loop(params, opt_state, shard, H, hp, rng, steps=max(H - 1, 1))


def _ris_reset_state(params, opt_state, shard, H, hp, rng):
    H, B = _ris_checks(params, shard, H, hp, rng)
    return _ris_loop(params, opt_state, shard, H, hp, rng, reset=True)


def _ris_bool_H(params, opt_state, shard, H, hp, rng):
    if not isinstance(H, int):  # True accepted as one step
        raise TypeError("H must be an int")
    if H < 1:
        raise ValueError("H must be >= 1")
    _ris_checks(params, shard, int(H), hp, rng)
    return _ris_loop(params, opt_state, shard, int(H), hp, rng)


def _ris_clamped_batch(params, opt_state, shard, H, hp, rng):
    H, B = _ris_checks(params, shard, H, hp, rng)
    return _ris_loop(params, opt_state, shard, H, hp, rng, B=min(B, len(shard[1])))  # "B > n_k makes no sense"


def _ris_no_shard_check(params, opt_state, shard, H, hp, rng):
    if not _is_int(H):
        raise TypeError("H must be an int")
    if H < 1:
        raise ValueError("H must be >= 1")
    if not isinstance(hp, dict) or "batch_size" not in hp:
        raise ValueError("hp needs batch_size")
    _check_rng(rng)
    # labels out of range are only refused by local_train_step, naming `batch`, after the first draw
    return _ris_loop(params, opt_state, shard, int(H), hp, rng)


def _ris_rng_copy(params, opt_state, shard, H, hp, rng):
    import copy

    H, B = _ris_checks(params, shard, H, hp, rng)
    return _ris_loop(params, opt_state, shard, H, hp, copy.deepcopy(rng))  # caller's generator not advanced


def _ris_loss_list(params, opt_state, shard, H, hp, rng):
    H, B = _ris_checks(params, shard, H, hp, rng)
    p, s, losses = _ris_loop(params, opt_state, shard, H, hp, rng)
    return p, s, losses.astype(np.float32)  # (H,) but float32


def _ris_alt_batches_first(params, opt_state, shard, H, hp, rng):
    from trainsys.diloco.sharding import local_train_step, sample_worker_batch

    H, B = _ris_checks(params, shard, H, hp, rng)
    batches = [sample_worker_batch(shard, B, rng) for _ in range(H)]  # training never touches rng
    losses = []
    for batch in batches:
        params, opt_state, loss = local_train_step(params, opt_state, batch, hp)
        losses.append(loss)
    return params, opt_state, np.asarray(losses, dtype=np.float64)


MUTANTS = {
    "iid_shard_dataset": [
        ("no shuffle: contiguous blocks (contract: 'perm = rng.permutation(n)')", _iid_no_shuffle),
        ("drops the remainder n mod k (contract: sizes ceil/floor, 'cover all n examples')", _iid_drop_remainder),
        ("two permutations for X and y (contract: 'row j of X_i and entry j of y_i come from the same example')",
         _iid_two_perms),
        ("rows left in permutation order (contract: 'np.sort(parts[i])', rows keep X's order)", _iid_unsorted),
        ("rng.choice(n, n, replace=False) instead of rng.permutation(n) (contract: 'one permutation')",
         _iid_choice),
        ("k = 1 shortcut copies without drawing: rng not advanced (contract: 'advanced by one permutation')",
         _iid_one_worker_no_draw),
        ("num_workers=True accepted (contract: 'an int (not a bool)')", _iid_bool_workers),
        ("np.asarray on X, y: integer X, float or 2-D y, 1-D X accepted (contract: TypeError/ValueError naming "
         "them)", _iid_loose_types),
        ("X cast to float32 and y to int64 (contract: shards 'as X, y')", _iid_cast_dtypes),
        ("the larger shards last (contract: 'ceil(n/k) for the first n mod k shards')", _iid_remainder_last),
    ],
    "noniid_shard_dataset": [
        ("alpha ignored: Dirichlet(1) (contract: 'rng.dirichlet(np.full(k, alpha))')", _noniid_ignore_alpha),
        ("one Dirichlet draw for all classes (contract: a draw per class)", _noniid_one_draw),
        ("cuts rounded instead of floored (contract: 'floor(cumsum(p)[:-1] * n_c)')", _noniid_rounded_cuts),
        ("keeps a deal with an empty worker (contract: 'Redraw ... up to 100 deals')", _noniid_keeps_empty),
        ("Dirichlet drawn before the class permutation (contract: permutation, then p)", _noniid_dirichlet_first),
        ("classes in order of first appearance, not np.unique order (contract: 'in increasing order')",
         _noniid_first_appearance),
        ("per-worker floor(p_i n_c), remainder to the last worker (contract: cuts at floor(cumsum(p) n_c))",
         _noniid_per_worker_floor),
        ("worker rows not sorted (contract: 'the union of its pieces, sorted')", _noniid_unsorted),
        ("k = 1 shortcut without the deal's draws: rng not advanced (contract: '2C draws per deal')",
         _noniid_one_worker_no_draw),
        ("alpha=True accepted as 1.0 (contract: 'alpha a real number (not bool)')", _noniid_bool_alpha),
        ("gives up after 10 deals (contract: 'up to 100 deals')", _noniid_ten_deals),
    ],
    "sample_worker_batch": [
        ("the first B rows, cycling (contract: 'idx = rng.integers(0, n_k, size=B)')", _swb_first_rows),
        ("separate draws for X and y (contract: 'with the same idx')", _swb_two_draws),
        ("global np.random.randint (contract: 'the global np.random state is not touched')", _swb_global_rng),
        ("without replacement when B <= n_k (contract: 'uniformly with replacement')", _swb_without_replacement),
        ("batch_size=True accepted (contract: 'an integer, not bool')", _swb_bool_batch),
        ("a [X, y] list refused as shard (contract: 'a tuple or list of two items')", _swb_tuple_only),
        ("np.asarray on the shard: float labels, 1-D features, empty shard fail late or not at all (contract: "
         "errors naming shard)", _swb_loose_shard),
        ("batch cast to float32/int64 (contract: 'as X_k', 'as y_k')", _swb_cast),
    ],
    "local_train_step": [
        ("loss reported after the update (contract: 'loss ... at theta_{t-1}')", _lts_loss_after),
        ("plain SGD whatever hp['optimizer'] says (the red team's own, written blind)", _lts_always_sgd),
        ("optimizer state re-initialised inside the step (contract: opt_state carried, step = t)",
         _lts_reinit_state),
        ("SGD without the decoupled decay (contract: theta(1 - lr wd) - lr g)", _lts_sgd_no_decay),
        ("SGD decays after the gradient step: (theta - lr g)(1 - lr wd)", _lts_sgd_decay_after),
        ("truncates the batch to hp['batch_size'] rows (contract: 'batch_size is not used here')",
         _lts_truncates_batch),
        ("extra hp keys accepted (contract: 'hp ... with exactly those keys')", _lts_extra_hp_ok),
        ("beta/eps/weight_decay/batch_size never validated on the SGD path (contract: each refused, naming its "
         "key)", _lts_sgd_unvalidated),
        ("loss returned as numpy.float64 (contract: 'Python float')", _lts_numpy_loss),
        ("SGD branch bumps opt_state['step'] in place and returns the caller's dict (contract: 'opt_state ... "
         "read only')", _lts_sgd_mutates_state),
        ("labels only checked against C from above: -1 reads class C-1 (contract: 'a label outside [0, C) "
         "(naming batch)')", _lts_no_label_check),
    ],
    "run_inner_steps": [
        ("one batch reused H times (contract: a new batch every step)", _ris_one_batch),
        ("H - 1 steps (contract: 'for t = 1, ..., H')", _ris_h_minus_one),
        ("optimizer state reset at the start of the round (contract: step = s + H)", _ris_reset_state),
        ("H=True accepted (contract: 'H an integer (not bool)')", _ris_bool_H),
        ("batch size clamped to the shard size (contract: 'B > n_k is allowed' via sample_worker_batch)",
         _ris_clamped_batch),
        ("shard labels not checked up front: the error names batch, after a draw (contract: naming shard)",
         _ris_no_shard_check),
        ("draws from a deep copy of rng: the caller's generator is not advanced (contract: 'rng is advanced by H "
         "draws')", _ris_rng_copy),
        ("losses returned as float32 (contract: '(H,) float64')", _ris_loss_list),
    ],
}

ALTERNATIVES = {
    "iid_shard_dataset": [
        ("np.arange + rng.shuffle (the same stream as permutation), manual cut points, np.take", _iid_alt_shuffle),
        ("owner array and boolean masks", _iid_alt_mask),
    ],
    "noniid_shard_dataset": [("owner array per deal, astype(int) truncation for the cuts, bincount emptiness test",
                              _noniid_alt_loop)],
    "sample_worker_batch": [
        ("rng.choice(n_k, size=B) (the same integers draw), np.take", _swb_alt_choice),
        ("rng.integers(n_k, size=B)", _swb_alt_integers_high),
        # moved from MUTANTS: rng.integers(0, 1, size=B) consumes nothing from the generator, so skipping the
        # draw on a one-row shard gives the same batch and leaves rng in the same state as the recipe
        ("one-row shard shortcut: np.repeat without a draw (rng.integers(0, 1, size=B) draws nothing either)",
         _swb_one_row_no_draw),
    ],
    "local_train_step": [("batch and state validated before hp; keyword call of adamw_step", _lts_alt_torch_free)],
    "run_inner_steps": [("all H batches drawn first, then the H steps", _ris_alt_batches_first)],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _noniid_alt_np_split(X, y, num_workers, rng, alpha):
    """The contract's recipe literally: np.split of each shuffled class, pieces gathered per worker, sorted."""
    n = _check_xy(X, y)
    k = _check_workers(num_workers, n)
    _check_rng(rng)
    alpha = _check_alpha(alpha)
    for _deal_no in range(100):
        rows = [[] for _ in range(k)]
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            p = rng.dirichlet(np.full(k, alpha))
            cuts = np.floor(np.cumsum(p)[:-1] * len(idx)).astype(int)
            for i, piece in enumerate(np.split(idx, cuts)):
                rows[i].append(piece)
        mine = [np.sort(np.concatenate(r)) for r in rows]
        if all(len(m) for m in mine):
            return [(X[m], y[m]) for m in mine]
    raise ValueError(f"alpha = {alpha}: 100 deals left a worker without data")


ALTERNATIVES.setdefault("noniid_shard_dataset", []).append(
    ("np.split of each shuffled class, per-worker pieces concatenated and sorted", _noniid_alt_np_split))


def _lts_alt_torch_sgd_form(params, opt_state, batch, hp):
    """SGD as torch.optim.SGD computes it, theta - lr (g + wd theta), in float64 and cast once; AdamW by the
    lesson's adamw_step."""
    _check_hp(hp)
    _check_opt_state(opt_state, params)
    X_b, y_b = _check_batch(batch, params)
    logits, cache = model_forward(params, X_b)
    loss = float(cross_entropy_loss(logits, y_b))
    grads = model_backward(params, cache, y_b)
    if hp["optimizer"] == "adamw":
        new_params, new_state = adamw_step(params, grads, opt_state, lr=hp["lr"], beta1=hp["beta1"],
                                           beta2=hp["beta2"], eps=hp["eps"], weight_decay=hp["weight_decay"])
        return new_params, new_state, loss
    lr, wd = float(hp["lr"]), float(hp["weight_decay"])
    new_params = {k: (p.astype(np.float64) - lr * (grads[k].astype(np.float64) + wd * p.astype(np.float64)))
                  .astype(p.dtype) for k, p in params.items()}
    return new_params, {"step": opt_state["step"] + 1, "m": opt_state["m"], "v": opt_state["v"]}, loss


def _ris_alt_list_of_losses(params, opt_state, shard, H, hp, rng):
    from trainsys.diloco.sharding import local_train_step, sample_worker_batch  # Lessons 18 and 19

    _ris_checks(params, shard, H, hp, rng)
    losses = []
    for _ in range(H):
        params, opt_state, loss = local_train_step(params, opt_state, sample_worker_batch(shard, hp["batch_size"], rng),
                                                   hp)
        losses.append(loss)
    return params, opt_state, np.asarray(losses, dtype=np.float64)


ALTERNATIVES.setdefault("local_train_step", []).append(
    ("SGD in torch's form theta - lr (g + wd theta), float64, cast once", _lts_alt_torch_sgd_form))
ALTERNATIVES.setdefault("run_inner_steps", []).append(
    ("the lessons' functions in a loop, losses gathered in a list", _ris_alt_list_of_losses))
