"""Witnesses for Module 1, Part 6 (ZeRO-style optimizer sharding): one wrong answer per broken clause and case."""

from __future__ import annotations

import numpy as np

from tests.answers.clauses import existing
from trainsys.memtrain import zero as ref


# --- Lesson 31 -------------------------------------------------------------------------------------
def _init_upcasts_params(params):
    """Casts float16 parameters to float32 in the caller's dict, then takes zeros like them."""
    if isinstance(params, dict):
        for key, p in list(params.items()):
            if isinstance(p, np.ndarray) and p.dtype == np.float16:
                params[key] = p.astype(np.float32)
    return ref.init_adam_state(params)


def _init_accepts_a_list(params):
    """Takes a list of arrays too, keyed by position."""
    if isinstance(params, list):
        params = dict(enumerate(params))
    return ref.init_adam_state(params)


# --- Lesson 32 -------------------------------------------------------------------------------------
_CACHE: dict = {}


def _partition_memoised(flat_numel, num_workers):
    """Caches its answer: the same list object comes back for the same arguments, so a caller that edits it
    changes every later answer."""
    key = (type(flat_numel), flat_numel, type(num_workers), num_workers)
    if key not in _CACHE:
        _CACHE[key] = ref.partition_optimizer_state(flat_numel, num_workers)
    return _CACHE[key]


def _partition_core(flat_numel, num_workers, *, check_workers=True, check_numel=True):
    for name, value in (("flat_numel", flat_numel), ("num_workers", num_workers)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if check_numel and flat_numel < 1:
        raise ValueError(f"flat_numel must be >= 1, got {flat_numel}")
    if check_workers and num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    s = -(-int(flat_numel) // int(num_workers))
    return [(k * s, (k + 1) * s) for k in range(int(num_workers))]


def _partition_no_worker_bound(flat_numel, num_workers):
    """No lower bound on num_workers: 0 divides by zero."""
    return _partition_core(flat_numel, num_workers, check_workers=False)


def _partition_no_numel_bound(flat_numel, num_workers):
    """No lower bound on flat_numel: 0 gives N empty ranges."""
    return _partition_core(flat_numel, num_workers, check_numel=False)


# --- Lesson 33 -------------------------------------------------------------------------------------
def _adam_accepts_integer_params(param_shard, grad_shard, state_shard, hp):
    """Converts an integer param_shard to float64 instead of refusing it."""
    if isinstance(param_shard, np.ndarray) and param_shard.dtype.kind in "iu":
        param_shard = param_shard.astype(np.float64)
    return ref.local_shard_adam_update(param_shard, grad_shard, state_shard, hp)


# --- Lesson 34 -------------------------------------------------------------------------------------
def _gather_one_worker_returns_its_shard(shards, flat_numel):
    """One worker and no padding: returns that worker's shard itself."""
    out = ref.all_gather_param_shards(shards, flat_numel)
    if len(shards) == 1 and shards[0].size == flat_numel:
        return shards[0]
    return out


def _gather_no_shards_empty(shards, flat_numel):
    """No shard: an empty vector."""
    if isinstance(shards, list) and not shards:
        return np.zeros(0)
    return ref.all_gather_param_shards(shards, flat_numel)


# --- Lesson 35 -------------------------------------------------------------------------------------
def _zero_with(params, worker_grads, worker_states, hp, *, keys=list, order="C"):
    """ZeRO's step from the reference's pieces, flattening the dicts in ``keys(params)`` order, each array
    raveled in ``order``."""
    ref.zero_optimizer_step(params, worker_grads, worker_states, hp)  # validation
    names = keys(params)

    def flat(tree):
        return np.concatenate([tree[k].ravel(order=order) for k in names])

    N = len(worker_grads)
    theta = flat(params)
    numel = theta.size
    ranges = ref.partition_optimizer_state(numel, N)
    padded = ranges[-1][1]

    def pad(vector):
        return np.concatenate([vector, np.zeros(padded - numel, vector.dtype)])

    theta = pad(theta)
    grads = ref.reduce_scatter_mean([pad(flat(g)) for g in worker_grads], N)
    shards, states = [], []
    for k, (a, b) in enumerate(ranges):
        p_k, s_k = ref.local_shard_adam_update(theta[a:b], grads[k], worker_states[k], hp)
        shards.append(p_k)
        states.append(s_k)
    gathered = ref.all_gather_param_shards(shards, numel)
    out, offset = {}, 0
    for k in names:
        size = params[k].size
        out[k] = gathered[offset:offset + size].reshape(params[k].shape, order=order).copy()
        offset += size
    return {k: out[k] for k in params}, states


def _zero_sorted_keys(params, worker_grads, worker_states, hp):
    """Flattens the dicts in sorted key order (W1, W2, b1, b2), not the dict's own order."""
    return _zero_with(params, worker_grads, worker_states, hp, keys=sorted)


def _zero_fortran_ravel(params, worker_grads, worker_states, hp):
    """Ravels every array in column-major (Fortran) order."""
    return _zero_with(params, worker_grads, worker_states, hp, order="F")


def _zero_updates_params_in_place(params, worker_grads, worker_states, hp):
    """The right numbers, but the caller's parameter arrays are overwritten and returned."""
    new, states = ref.zero_optimizer_step(params, worker_grads, worker_states, hp)
    for key in params:
        params[key][...] = new[key]
    return params, states


def _zero_accepts_no_gradients(params, worker_grads, worker_states, hp):
    """No worker, no step: copies of the parameters and no state."""
    if isinstance(worker_grads, list) and not worker_grads:
        return {k: v.copy() for k, v in params.items()}, []
    return ref.zero_optimizer_step(params, worker_grads, worker_states, hp)


def _zero_zips_grads_and_states(params, worker_grads, worker_states, hp):
    """Pairs gradients with states by zip: a gradient without a state is silently dropped."""
    if isinstance(worker_grads, list) and isinstance(worker_states, list) and len(worker_grads) > len(worker_states):
        worker_grads = worker_grads[:len(worker_states)]
    return ref.zero_optimizer_step(params, worker_grads, worker_states, hp)


WITNESSES = {
    "init_adam_state": {
        "dtype rule": [existing("init_adam_state", "state in the parameters' dtype"),
                       existing("init_adam_state", "np.zeros_like(p): float16 moments"),
                       existing("init_adam_state", "always float32, also for float64")],
        "mutation": [("float16 parameters upcast in the caller's dict", _init_upcasts_params),
                     existing("init_adam_state", "read-only broadcast zeros")],
        "aliasing": [existing("init_adam_state", "m and v are the same zeros arrays"),
                     existing("init_adam_state", "one zeros tree for both moments")],
        "failure modes": [("a list of arrays accepted", _init_accepts_a_list),
                          existing("init_adam_state", "integer-array error names 'params' without the key"),
                          existing("init_adam_state", "accepts Python lists/floats"),
                          existing("init_adam_state", "accepts boolean and complex arrays")],
        "metric that proves it correct": [existing("init_adam_state", "step starts at 1 (contract")],
    },
    "partition_optimizer_state": {
        "padding rule": [existing("partition_optimizer_state", "s = Ψ // N"),
                         existing("partition_optimizer_state", "the last worker takes the remainder"),
                         existing("partition_optimizer_state", "math.ceil(Ψ / N) through float64")],
        "mutation": [("memoised: the same list object for the same arguments", _partition_memoised)],
        "failure modes": [("num_workers = 0 divides by zero", _partition_no_worker_bound),
                          existing("partition_optimizer_state", "accepts True"),
                          existing("partition_optimizer_state", "accepts the string '4'"),
                          ("flat_numel = 0 gives empty ranges", _partition_no_numel_bound),
                          existing("partition_optimizer_state", "accepts flat_numel=10.0")],
        "metric that proves it correct": [existing("partition_optimizer_state", "shard = floor(Ψ/N)"),
                                          existing("partition_optimizer_state", "last worker takes the remainder")],
    },
    "local_shard_adam_update": {
        "mutation": [existing("local_shard_adam_update", "updates the state's m and v in place"),
                     existing("local_shard_adam_update", "moments updated in place"),
                     existing("local_shard_adam_update", "writes t into the caller's"),
                     existing("local_shard_adam_update", "zero gradient and zero moments")],
        "failure modes": [existing("local_shard_adam_update", "β1 = 0 rejected"),
                          existing("local_shard_adam_update", "lr / eps = nan or inf accepted"),
                          existing("local_shard_adam_update", "hp with extra keys accepted"),
                          existing("local_shard_adam_update", "moment shapes not checked"),
                          existing("local_shard_adam_update", "step=True accepted"),
                          existing("local_shard_adam_update", "step=2.0 accepted"),
                          ("an integer param_shard converted, not refused", _adam_accepts_integer_params)],
        "metric that proves it correct": [existing("local_shard_adam_update", "forgets Adam's bias correction"),
                                          existing("local_shard_adam_update", "puts eps inside the square root"),
                                          existing("local_shard_adam_update", "does not advance the step counter"),
                                          existing("local_shard_adam_update", "no bias correction"),
                                          existing("local_shard_adam_update", "ε inside the square root"),
                                          existing("local_shard_adam_update", "ε added before dividing"),
                                          existing("local_shard_adam_update", "step not advanced")],
    },
    "all_gather_param_shards": {
        "mutation": [("one worker: its shard returned itself", _gather_one_worker_returns_its_shard),
                     existing("all_gather_param_shards", "zeroes the padding slots")],
        "failure modes": [("no shards: an empty vector", _gather_no_shards_empty),
                          existing("all_gather_param_shards", "shard errors name 'shards' without the index"),
                          existing("all_gather_param_shards", "accepts shards of different dtypes"),
                          existing("all_gather_param_shards", "accepts integer shards"),
                          existing("all_gather_param_shards", "accepts 2-D shards"),
                          existing("all_gather_param_shards", "only checks Ψ <= N s"),
                          existing("all_gather_param_shards", "accepts flat_numel=True")],
        "metric that proves it correct": [existing("all_gather_param_shards", "keeps the padding (contract"),
                                          existing("all_gather_param_shards", "strips trailing zeros instead"),
                                          existing("all_gather_param_shards", "strips trailing zeros (contract"),
                                          existing("all_gather_param_shards", "takes floor(Ψ/N) values from every "
                                                                               "shard (contract")],
    },
    "zero_optimizer_step": {
        "flat order": [("dicts flattened in sorted key order", _zero_sorted_keys),
                       ("arrays raveled in Fortran order", _zero_fortran_ravel)],
        "mutation": [existing("zero_optimizer_step", "updates the state shards in place"),
                     ("params updated in place and returned", _zero_updates_params_in_place)],
        "failure modes": [("no gradients accepted", _zero_accepts_no_gradients),
                          ("gradients zipped with states: a third gradient dropped", _zero_zips_grads_and_states),
                          existing("zero_optimizer_step", "ignores extra keys in a gradient"),
                          existing("zero_optimizer_step", "checks only each gradient's size"),
                          existing("zero_optimizer_step", "checks m's shape but not v's")],
        "metrics that prove it correct": [
            existing("zero_optimizer_step", "Adam state replicated, not sharded"),
            existing("zero_optimizer_step", "reduce-scatter sums the gradients"),
            existing("zero_optimizer_step", "no reduce-scatter: each worker"),
            existing("zero_optimizer_step", "forgets Adam's bias correction"),
            existing("zero_optimizer_step", "replicates the full state"),
            existing("zero_optimizer_step", "sums instead of averaging"),
            existing("zero_optimizer_step", "each worker uses its own gradient slice"),
            existing("zero_optimizer_step", "no bias correction in the local step"),
            existing("zero_optimizer_step", "padding-only workers return their old state"),
        ],
    },
}
