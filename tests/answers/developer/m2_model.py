"""Mutants for Module 2, Part 1 (lessons 1–6): the classifier mistakes the notebooks name."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trainsys.diloco import model as ref

REFERENCE = "trainsys.diloco.model"


def validated(reference: Callable, wrong: Callable) -> Callable:
    """Validate like the reference (same errors on bad input), then compute ``wrong``."""

    def mutant(*args, **kwargs):
        reference(*args, **kwargs)
        return wrong(*args, **kwargs)

    return mutant


def _init(gain_last: float = 1.0, gain_hidden: float = 2.0, variance_not_std: bool = False, random_bias: bool = False):
    def wrong(sizes, rng):
        sizes = list(sizes)
        p = {}
        for l, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            gain = gain_hidden if l < len(sizes) - 2 else gain_last
            scale = gain / a if variance_not_std else np.sqrt(gain / a)
            p[f"W{l}"] = (rng.standard_normal((a, b)) * scale).astype(np.float32)
            p[f"b{l}"] = (rng.standard_normal(b) * 0.01).astype(np.float32) if random_bias else np.zeros(b, np.float32)
        return p

    return validated(lambda sizes, rng: ref.init_model_params(sizes, np.random.default_rng(0)), wrong)


def _relu_in_place(x):
    ref.relu(x)
    x[x < 0] = 0
    return x


def _relu_where(x):
    ref.relu(x)
    return np.where(x > 0, x, 0).astype(x.dtype)  # NaN > 0 is False: a NaN becomes 0


def _relu_float64(x):
    ref.relu(x)
    return np.maximum(x.astype(np.float64), 0.0)


def _forward(relu_on_output: bool = False, cache_z: bool = False, no_bias: bool = False, copy_x: bool = False):
    def wrong(params, X):
        ref.model_forward(params, X)
        L = ref.num_layers(params)
        cache, A = {"A0": X.copy() if copy_x else X}, X
        for l in range(L):
            Z = A @ params[f"W{l}"] + (0 if no_bias else params[f"b{l}"])
            if l < L - 1 or relu_on_output:
                A = ref.relu(Z)
            if l < L - 1:
                cache[f"A{l + 1}"] = Z if cache_z else A
        out = A if relu_on_output else Z
        cache["logits"] = out
        return out, cache

    return wrong


def _softmax_no_max(logits):
    ref.softmax(logits)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def _softmax_global_max(logits):
    ref.softmax(logits)
    e = np.exp(logits - logits.max())
    return e / e.sum(axis=1, keepdims=True)


def _softmax_columns(logits):
    ref.softmax(logits)
    e = np.exp(logits - logits.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def _ce_log_of_softmax(logits, y):
    ref.cross_entropy_loss(logits, y)
    return float(-np.mean(np.log(ref.softmax(logits)[np.arange(len(y)), y])))


def _ce_sum(logits, y):
    ref.cross_entropy_loss(logits, y)
    return float(-np.sum(ref.log_softmax(logits)[np.arange(len(y)), y]))


def _ce_no_max(logits, y):
    ref.cross_entropy_loss(logits, y)
    lse = np.log(np.exp(logits).sum(axis=1))
    return float(np.mean(lse - logits[np.arange(len(y)), y]))


def _ce_broadcast_index(logits, y):
    ref.cross_entropy_loss(logits, y)
    return float(-np.mean(ref.log_softmax(logits)[:, y]))  # (n, n): every row at every label


def _backward(no_mean: bool = False, mask_ge: bool = False, no_onehot: bool = False, mask_next: bool = False):
    def wrong(params, cache, y):
        ref.model_backward(params, cache, y)
        L = ref.num_layers(params)
        n = len(y)
        G = ref.softmax(cache["logits"])
        if not no_onehot:
            G[np.arange(n), y] -= 1
        if not no_mean:
            G = G / n
        grads = {}
        for l in range(L - 1, -1, -1):
            A = cache[f"A{l}"]
            grads[f"W{l}"], grads[f"b{l}"] = A.T @ G, G.sum(axis=0)
            if l > 0:
                mask_from = cache[f"A{l + 1}"] if (mask_next and l + 1 < L) else A
                if mask_next and l + 1 >= L:
                    mask_from = np.ones_like(A)
                G = (G @ params[f"W{l}"].T) * ((mask_from >= 0) if mask_ge else (mask_from > 0))
        return {k: grads[k].astype(params[k].dtype) for k in params}

    return wrong


MUTANTS = {
    "init_model_params": [
        ("He gain 2 on the output layer too", _init(gain_last=2.0)),
        ("variance used as the standard deviation (2/fan_in, not its root)", _init(variance_not_std=True)),
        ("small random biases instead of zeros", _init(random_bias=True)),
        ("Xavier-like gain 1 on the ReLU layers", _init(gain_hidden=1.0)),
    ],
    "relu": [
        ("clips in place and returns the input", _relu_in_place),
        ("np.where(x > 0, x, 0) turns NaN into 0", _relu_where),
        ("returns float64", _relu_float64),
    ],
    "model_forward": [
        ("ReLU after the output layer too", _forward(relu_on_output=True)),
        ("caches the pre-activations Z instead of the activations", _forward(cache_z=True)),
        ("forgets the biases", _forward(no_bias=True)),
        ("copies X into the cache", _forward(copy_x=True)),
    ],
    "softmax": [
        ("no max-subtraction (overflow at 1e4)", _softmax_no_max),
        ("subtracts the global maximum instead of each row's", _softmax_global_max),
        ("normalises the columns instead of the rows", _softmax_columns),
    ],
    "cross_entropy_loss": [
        ("log of the softmax (log 0 = -inf at ±1e4)", _ce_log_of_softmax),
        ("sum over the batch instead of the mean", _ce_sum),
        ("log-sum-exp without the maximum (overflow)", _ce_no_max),
        ("indexes log_p[:, y], an (n, n) matrix", _ce_broadcast_index),
    ],
    "model_backward": [
        ("forgets the 1/n of the mean", _backward(no_mean=True)),
        ("ReLU mask A >= 0: always true for an activation, so no mask at all", _backward(mask_ge=True)),
        ("softmax without subtracting the one-hot", _backward(no_onehot=True)),
        ("ReLU mask of the layer above (none at the top)", _backward(mask_next=True)),
    ],
}
