"""Mutants for Module 1, Part 6 (lessons 31–35): the ZeRO and Adam mistakes the notebooks name."""

from __future__ import annotations

import math

import numpy as np

from trainsys.memtrain import zero as ref

REFERENCE = "trainsys.memtrain.zero"


def _init(variant: str):
    def wrong(params):
        ref.init_adam_state(params)  # validation
        if variant == "shared":  # one zeros tree used for both moments
            zeros = {k: np.zeros(p.shape, np.result_type(p.dtype, np.float32)) for k, p in params.items()}
            return {"m": zeros, "v": zeros, "step": 0}
        if variant == "param_dtype":  # np.zeros_like keeps float16 for float16 parameters
            return {"m": {k: np.zeros_like(p) for k, p in params.items()},
                    "v": {k: np.zeros_like(p) for k, p in params.items()}, "step": 0}
        state = ref.init_adam_state(params)
        state["step"] = 1  # "the first step is step 1"
        return state

    return wrong


def _partition(variant: str):
    def wrong(flat_numel, num_workers):
        ref.partition_optimizer_state(flat_numel, num_workers)  # validation
        s = flat_numel // num_workers
        if variant == "floor":  # the last flat_numel mod N elements belong to nobody
            return [(k * s, (k + 1) * s) for k in range(num_workers)]
        return [(k * s, (k + 1) * s if k < num_workers - 1 else flat_numel) for k in range(num_workers)]

    return wrong


def _adam(variant: str):
    def wrong(param_shard, grad_shard, state_shard, hp):
        ref.local_shard_adam_update(param_shard, grad_shard, state_shard, hp)  # validation
        b1, b2, lr, eps = hp["beta1"], hp["beta2"], hp["lr"], hp["eps"]
        m, v, t = state_shard["m"], state_shard["v"], state_shard["step"] + 1
        if variant == "in_place":  # updates the caller's moments in place
            m *= b1
            m += (1 - b1) * grad_shard
            v *= b2
            v += (1 - b2) * grad_shard**2
        else:
            m = b1 * m + (1 - b1) * grad_shard
            v = b2 * v + (1 - b2) * grad_shard**2
        if variant == "no_bias_correction":
            update = lr * m / (np.sqrt(v) + eps)
        elif variant == "eps_inside_sqrt":
            update = lr / (1 - b1**t) * m / np.sqrt(v / (1 - b2**t) + eps)
        else:
            update = lr / (1 - b1**t) * m / (np.sqrt(v) / math.sqrt(1 - b2**t) + eps)
        step = t - 1 if variant == "no_increment" else t
        new_p = (param_shard - update).astype(param_shard.dtype)
        return new_p, {"m": m.copy(), "v": v.copy(), "step": step}

    return wrong


def _gather(variant: str):
    def wrong(shards, flat_numel):
        ref.all_gather_param_shards(shards, flat_numel)  # validation
        if variant == "keep_padding":
            return np.concatenate(shards)
        if variant == "trim_zeros":  # "padding is zeros, so strip the trailing zeros"
            return np.trim_zeros(np.concatenate(shards), "b")
        per = flat_numel // len(shards)  # assumes every shard holds flat_numel // N real values
        return np.concatenate([s[:per] for s in shards] + [shards[-1][per:per + flat_numel % len(shards)]])

    return wrong


def _zero(variant: str):
    def wrong(params, worker_grads, worker_states, hp):
        ref.zero_optimizer_step(params, worker_grads, worker_states, hp)  # validation
        N = len(worker_grads)
        flat = ref.flatten_params(params)
        ranges = ref.partition_optimizer_state(flat.size, N)
        padded = ranges[-1][1]
        pad = lambda x: np.concatenate([x, np.zeros(padded - x.size, x.dtype)])  # noqa: E731
        theta = pad(flat)
        grads = [pad(ref.flatten_params(g)) for g in worker_grads]
        if variant == "replicated":  # every worker keeps and updates the whole state
            m = np.concatenate([s["m"] for s in worker_states])
            v = np.concatenate([s["v"] for s in worker_states])
            full = {"m": m, "v": v, "step": worker_states[0]["step"]}
            p_new, state = ref.local_shard_adam_update(theta, sum(grads) / N, full, hp)
            return ref.unflatten_params(p_new[:flat.size], params), [
                {"m": state["m"].copy(), "v": state["v"].copy(), "step": state["step"]} for _ in range(N)]
        if variant == "sum":  # reduce-scatter sums, never divides by N
            mean = sum(grads)
        elif variant == "own_grad":  # no reduce-scatter: each worker uses its own gradient on its shard
            mean = np.concatenate([grads[k][a:b] for k, (a, b) in enumerate(ranges)])
        else:
            mean = sum(grads) / N
        shards, states = [], []
        for k, (a, b) in enumerate(ranges):
            st = worker_states[k]
            if variant == "no_bias_correction":
                m = hp["beta1"] * st["m"] + (1 - hp["beta1"]) * mean[a:b]
                v = hp["beta2"] * st["v"] + (1 - hp["beta2"]) * mean[a:b] ** 2
                p, s = theta[a:b] - hp["lr"] * m / (np.sqrt(v) + hp["eps"]), {"m": m, "v": v, "step": st["step"] + 1}
            else:
                p, s = ref.local_shard_adam_update(theta[a:b], mean[a:b], st, hp)
            shards.append(p)
            states.append(s)
        return ref.unflatten_params(ref.all_gather_param_shards(shards, flat.size), params), states

    return wrong


MUTANTS = {
    "init_adam_state": [
        ("m and v are the same zeros arrays", _init("shared")),
        ("state in the parameters' dtype (float16 moments)", _init("param_dtype")),
        ("step starts at 1", _init("step_one")),
    ],
    "partition_optimizer_state": [
        ("shard = floor(Ψ/N): the last elements are owned by nobody", _partition("floor")),
        ("the last worker takes the remainder (unequal shards, no padding)", _partition("remainder_last")),
    ],
    "local_shard_adam_update": [
        ("forgets Adam's bias correction", _adam("no_bias_correction")),
        ("puts eps inside the square root", _adam("eps_inside_sqrt")),
        ("updates the state's m and v in place", _adam("in_place")),
        ("does not advance the step counter", _adam("no_increment")),
    ],
    "all_gather_param_shards": [
        ("keeps the padding", _gather("keep_padding")),
        ("strips trailing zeros instead of the padding", _gather("trim_zeros")),
        ("takes floor(Ψ/N) values from every shard", _gather("floor")),
    ],
    "zero_optimizer_step": [
        ("Adam state replicated, not sharded (each worker keeps all of m and v)", _zero("replicated")),
        ("reduce-scatter sums the gradients instead of averaging", _zero("sum")),
        ("no reduce-scatter: each worker updates its shard with its own gradient", _zero("own_grad")),
        ("forgets Adam's bias correction", _zero("no_bias_correction")),
    ],
}
