"""Witnesses for ``trainsys.grading.diloco_model`` (Module 2, lessons 1–6): per clause, wrong answers that
break it."""

from __future__ import annotations

import numpy as np

from tests.answers.clauses import existing
from trainsys.diloco import model as ref


# --- Lesson 1 --------------------------------------------------------------------------------------
def _init_one_layer_is_hidden(sizes, rng):
    """A one-layer model ([d_in, C]) gets He's gain 2, as if its layer were hidden, not the output layer's 1."""
    if isinstance(sizes, (list, tuple)) and len(sizes) == 2:
        ref.init_model_params(sizes, np.random.default_rng(0))  # the reference's validation
        if not isinstance(rng, np.random.Generator):
            return ref.init_model_params(sizes, rng)
        d_in, C = int(sizes[0]), int(sizes[1])
        W = rng.standard_normal((d_in, C)) * np.sqrt(2.0 / d_in)
        return {"W0": W.astype(np.float32), "b0": np.zeros(C, np.float32)}
    return ref.init_model_params(sizes, rng)


def _init_popping_sizes(sizes, rng):
    """Right parameters, but the class count is popped off the caller's list (``C = sizes.pop()``)."""
    params = ref.init_model_params(sizes, rng)
    if isinstance(sizes, list):
        sizes.pop()
    return params


def _init_single_width_is_empty(sizes, rng):
    """Fewer than two widths give a model with no layers ({}) instead of an error."""
    if isinstance(sizes, list) and len(sizes) == 1 and isinstance(rng, np.random.Generator):
        return {}
    return ref.init_model_params(sizes, rng)


def _init_zero_width_accepted(sizes, rng):
    """A width of 0 gives empty arrays instead of an error (only negative widths are refused)."""
    if isinstance(sizes, list) and 0 in sizes and isinstance(rng, np.random.Generator) \
            and not any(isinstance(w, bool) for w in sizes):
        params = {}
        for l, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            gain = 2.0 if l < len(sizes) - 2 else 1.0
            params[f"W{l}"] = (rng.standard_normal((a, b)) * np.sqrt(gain / max(a, 1))).astype(np.float32)
            params[f"b{l}"] = np.zeros(b, np.float32)
        return params
    return ref.init_model_params(sizes, rng)


# --- Lesson 2 --------------------------------------------------------------------------------------
def _relu_accepting_lists(x):
    """np.asarray(x) first: a Python list of floats is accepted (and a float64 array returned)."""
    if isinstance(x, list):
        x = np.asarray(x, dtype=np.float64)
    return ref.relu(x)


def _relu_value_error_for_integers(x):
    """An integer array refused with ValueError, not the TypeError the contract names."""
    if isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"x must be floating point, got {x.dtype}")
    return ref.relu(x)


def _relu_flushing_tiny(x):
    """Activations below 1e-20 are flushed to zero ("numerical noise"): a unit that was on reads as off."""
    out = ref.relu(x)
    out[np.abs(out) < out.dtype.type(1e-20)] = 0
    return out


# --- Lesson 3 --------------------------------------------------------------------------------------
def _forward_caching_logits_as_a_layer(params, X):
    """Right logits, but the cache also holds them under ``A{L}`` (every layer's output cached): L + 2 keys."""
    logits, cache = ref.model_forward(params, X)
    cache[f"A{ref.num_layers(params)}"] = logits
    return logits, cache


def _forward_reshaping_biases(params, X):
    """Right results, but the caller's biases are reshaped in place to rows (``b.shape = (1, -1)``)."""
    logits, cache = ref.model_forward(params, X)
    for key, value in params.items():
        if key.startswith("b") and value.ndim == 1:
            value.shape = (1, -1)
    return logits, cache


def _forward_unchecked_features(params, X):
    """X's feature count is not checked: matmul's own error, which names neither X nor W0."""
    if isinstance(X, np.ndarray) and X.ndim == 2 and isinstance(params, dict) and "W0" in params \
            and X.shape[1] != params["W0"].shape[0]:
        X @ params["W0"]  # raises ValueError: matmul: Input operand 1 has a mismatch ...
    return ref.model_forward(params, X)


def _forward_key_error(params, X):
    """No check of the keys: a missing bias surfaces as KeyError: 'b1'."""
    if isinstance(params, dict):
        L = ref.num_layers(params)
        for l in range(L):
            params[f"W{l}"], params[f"b{l}"]  # noqa: B018 - KeyError on a missing key
    return ref.model_forward(params, X)


# --- Lesson 4 --------------------------------------------------------------------------------------
def _softmax_accepting_integers(logits):
    """Integer logits accepted: converted to float64 instead of refused."""
    if isinstance(logits, np.ndarray) and np.issubdtype(logits.dtype, np.integer):
        logits = logits.astype(np.float64)
    return ref.softmax(logits)


# --- Lesson 5 --------------------------------------------------------------------------------------
def _ce_shifting_in_place(logits, y):
    """Right loss, but the row maxima are subtracted in place from the caller's logits."""
    loss = ref.cross_entropy_loss(logits, y)
    logits -= logits.max(axis=1, keepdims=True)
    return loss


def _ce_index_error_above_range(logits, y):
    """Negative labels refused, labels >= C not checked: NumPy's IndexError, which does not name y."""
    if isinstance(logits, np.ndarray) and logits.ndim == 2 and isinstance(y, np.ndarray) and y.ndim == 1 \
            and np.issubdtype(y.dtype, np.integer) and len(y) == len(logits) and len(y) and y.min() >= 0 \
            and y.max() >= logits.shape[1]:
        raise IndexError(f"index {int(y.max())} is out of bounds for axis 1 with size {logits.shape[1]}")
    return ref.cross_entropy_loss(logits, y)


def _ce_one_row_from_1d(logits, y):
    """1-D logits taken as one example's row instead of refused."""
    if isinstance(logits, np.ndarray) and logits.ndim == 1:
        logits = logits[None, :]
    return ref.cross_entropy_loss(logits, y)


# --- Lesson 6 --------------------------------------------------------------------------------------
def _backward(params, cache, y, *, to_x=False, recompute=False, mask_from_z=False):
    ref.model_backward(params, cache, y)  # the reference's validation
    L = ref.num_layers(params)
    A = [cache[f"A{l}"] for l in range(L)]
    logits = cache["logits"]
    if recompute:  # the forward pass run again from X instead of reading the cache
        logits, again = ref.model_forward(params, cache["A0"])
        A = [again[f"A{l}"] for l in range(L)]
    n = len(y)
    G = ref.softmax(logits)
    G[np.arange(n), y] -= 1.0
    G /= G.dtype.type(n)
    grads = {}
    for l in range(L - 1, -1, -1):
        grads[f"W{l}"] = A[l].T @ G
        grads[f"b{l}"] = G.sum(axis=0)
        if l > 0 or to_x:
            if mask_from_z:  # the pre-activation rebuilt from the layer below, and the derivative at 0 taken as 1
                Z = A[l - 1] @ params[f"W{l - 1}"] + params[f"b{l - 1}"]
                mask = Z >= 0
            else:
                mask = A[l] > 0
            G = (G @ params[f"W{l}"].T) * mask
    return {key: grads[key] for key in params}


def _backward_to_x(params, cache, y):
    """The loop runs down to layer 0 and sends the gradient through W0 to X too (nothing uses it)."""
    return _backward(params, cache, y, to_x=True)


def _backward_recomputing(params, cache, y):
    """The forward pass is run again from cache['A0'] (reading W0) instead of reading the cached activations."""
    return _backward(params, cache, y, recompute=True)


def _backward_mask_from_z(params, cache, y):
    """The ReLU mask from the recomputed pre-activation with Z >= 0: derivative 1 at exactly 0."""
    return _backward(params, cache, y, mask_from_z=True)


def _backward_index_error_above_range(params, cache, y):
    """Negative labels refused, labels >= C not checked: NumPy's IndexError, which does not name y."""
    logits = cache.get("logits") if isinstance(cache, dict) else None
    if isinstance(logits, np.ndarray) and isinstance(y, np.ndarray) and y.ndim == 1 and len(y) == len(logits) \
            and np.issubdtype(y.dtype, np.integer) and y.min() >= 0 and y.max() >= logits.shape[1]:
        raise IndexError(f"index {int(y.max())} is out of bounds for axis 1 with size {logits.shape[1]}")
    return ref.model_backward(params, cache, y)


WITNESSES = {
    "init_model_params": {
        "depth is a knob": [("a one-layer model gets He's gain", _init_one_layer_is_hidden)],
        "keys, in order": [existing("init_model_params", "keys W0, W1, ..., b0, b1")],
        "draw order": [
            existing("init_model_params", "draws from a copy of the generator"),
            existing("init_model_params", "draws float32 normals directly"),
            existing("init_model_params", "draws (fan_out, fan_in) and transposes"),
        ],
        "mutation": [("the class count popped off the caller's sizes", _init_popping_sizes)],
        "failure modes": [
            ("a single width gives an empty model", _init_single_width_is_empty),
            ("a zero width gives empty arrays", _init_zero_width_accepted),
            existing("init_model_params", "accepts True as a width"),
            existing("init_model_params", "accepts integral float widths"),
            existing("init_model_params", "accepts a NumPy array of sizes"),
            existing("init_model_params", "rng=None falls back"),
            existing("init_model_params", "duck-typed rng"),
        ],
        "size": [existing("init_model_params", "float64 biases")],
        "metric that proves it correct": [
            existing("init_model_params", "He gain 2 on the output layer too"),
            existing("init_model_params", "variance used as the standard deviation (2/fan_in"),
            existing("init_model_params", "Xavier-like gain 1 on the ReLU layers"),
            existing("init_model_params", "fan-out instead of fan-in"),
        ],
    },
    "relu": {
        "special values": [
            existing("relu", "np.where(x > 0, x, 0) turns NaN into 0"),
            existing("relu", "x * (x > 0): -inf becomes NaN"),
            existing("relu", "np.fmax: NaN becomes 0"),
        ],
        "mutation": [
            existing("relu", "clips in place and returns the input"),
            existing("relu", "returns x itself when nothing is negative"),
        ],
        "failure modes": [
            existing("relu", "no validation"),
            ("an integer array refused with ValueError", _relu_value_error_for_integers),
            ("a Python list accepted", _relu_accepting_lists),
        ],
        "what the forward pass will rely on": [("tiny activations flushed to zero", _relu_flushing_tiny)],
        "metric that proves it correct": [
            existing("relu", "returns float64"),
            existing("relu", "computes in float32"),
            existing("relu", "(|x| + x) / 2"),
        ],
    },
    "model_forward": {
        "keys": [("the logits cached under A{L} as well", _forward_caching_logits_as_a_layer)],
        "mutation": [("the caller's biases reshaped in place to rows", _forward_reshaping_biases)],
        "failure modes": [
            ("X's feature count not checked: matmul's error", _forward_unchecked_features),
            existing("model_forward", "1-D X reshaped to one row"),
            existing("model_forward", "integer X accepted"),
            ("a missing key raises KeyError", _forward_key_error),
            existing("model_forward", "extra keys ignored"),
            existing("model_forward", "no chaining check"),
            existing("model_forward", "no bias shape check"),
        ],
        "memory": [
            existing("model_forward", "copies X into the cache (contract"),
            existing("model_forward", "cache['logits'] is a copy of logits"),
        ],
        "metric that proves it correct": [
            existing("model_forward", "ReLU after the output layer too"),
            existing("model_forward", "forgets the biases (contract"),
            existing("model_forward", "computes in float64"),
            existing("model_forward", "np.where ReLU: NaN pre-activations become 0"),
        ],
    },
    "softmax": {
        "range": [
            existing("softmax", "no max-subtraction (overflow at 1e4)"),
            existing("softmax", "subtracts the global maximum"),
            existing("softmax", "subtracts the row mean"),
        ],
        "mutation": [
            existing("softmax", "computes in place in logits and returns it"),
            existing("softmax", "subtracts the row maxima in place"),
        ],
        "failure modes": [
            existing("softmax", "treats a 1-D vector as one row"),
            ("integer logits converted to float64", _softmax_accepting_integers),
            existing("softmax", "accepts a Python list"),
        ],
        "metric that proves it correct": [
            existing("softmax", "normalises the columns instead of the rows"),
            existing("softmax", "computes and returns float64"),
            existing("softmax", "one maximum for the whole batch"),
        ],
    },
    "cross_entropy_loss": {
        "range": [
            existing("cross_entropy_loss", "log of the softmax (log 0"),
            existing("cross_entropy_loss", "log-sum-exp without the maximum (overflow)"),
            existing("cross_entropy_loss", "one maximum for the whole batch"),
        ],
        "precision": [existing("cross_entropy_loss", "mean accumulated in the logits' dtype")],
        "mutation": [("the row maxima subtracted in place from the caller's logits", _ce_shifting_in_place)],
        "failure modes": [
            ("labels >= C not checked: IndexError", _ce_index_error_above_range),
            existing("cross_entropy_loss", "negative labels wrap around"),
            existing("cross_entropy_loss", "integral float labels cast to int"),
            existing("cross_entropy_loss", "label count not checked"),
            existing("cross_entropy_loss", "empty batch gives NaN"),
            ("1-D logits taken as one row", _ce_one_row_from_1d),
        ],
        "metric that proves it correct": [
            existing("cross_entropy_loss", "sum over the batch instead of the mean"),
            existing("cross_entropy_loss", "indexes log_p[:, y]"),
        ],
    },
    "model_backward": {
        "keys": [existing("model_backward", "grads keys in backward order")],
        "what is read": [
            ("the forward pass recomputed from cache['A0']", _backward_recomputing),
            ("the gradient sent down to X through W0", _backward_to_x),
        ],
        "convention at 0": [
            existing("model_backward", "ReLU mask A >= 0"),
            ("mask Z >= 0 from the recomputed pre-activation", _backward_mask_from_z),
        ],
        "mutation": [existing("model_backward", "softmax computed in place in cache['logits']")],
        "failure modes": [
            ("labels >= C not checked: IndexError", _backward_index_error_above_range),
            existing("model_backward", "negative labels wrap around"),
            existing("model_backward", "label count not checked"),
            existing("model_backward", "extra cache keys accepted"),
            existing("model_backward", "params not validated"),
        ],
        "metric that proves it correct": [
            existing("model_backward", "forgets the 1/n of the mean"),
            existing("model_backward", "softmax without subtracting the one-hot"),
            existing("model_backward", "ReLU mask of the layer above"),
            existing("model_backward", "bias gradient as a batch mean"),
            existing("model_backward", "divides by np.float64(n)"),
        ],
    },
}
