"""Mutants for Module 1, Part 1 (lessons 1–10), the mistakes the notebooks' "Common mistakes" name."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trainsys.memtrain import mlp as ref

REFERENCE = "trainsys.memtrain.mlp"


def validated(reference: Callable, wrong: Callable) -> Callable:
    """Validate like the reference (same errors on bad input), then compute ``wrong``."""

    def mutant(*args, **kwargs):
        reference(*args, **kwargs) if not any(isinstance(a, np.random.Generator) for a in args) else None
        return wrong(*args, **kwargs)

    return mutant


def _synthetic(order: str = "teacher", teacher_scale: bool = True, noise_power: int = 1, cast: bool = True):
    def wrong(n, d_in, d_out, rng, noise_std=0.1):
        ref.make_synthetic_regression_batch(n, d_in, d_out, np.random.default_rng(0), noise_std)  # validation
        if order == "teacher":
            W = rng.standard_normal((d_in, d_out))
            X = rng.standard_normal((n, d_in))
        else:
            X = rng.standard_normal((n, d_in))
            W = rng.standard_normal((d_in, d_out))
        if teacher_scale:
            W = W / np.sqrt(d_in)
        Y = X @ W + noise_std**noise_power * rng.standard_normal((n, d_out))
        return (X.astype(np.float32), Y.astype(np.float32)) if cast else (X, Y)

    return wrong


def _init(w1_scale, w2_scale, transpose_w1: bool = False):
    def wrong(d_in, d_hidden, d_out, rng):
        ref.init_mlp_params(d_in, d_hidden, d_out, np.random.default_rng(0))  # validation
        shape1 = (d_hidden, d_in) if transpose_w1 else (d_in, d_hidden)
        W1 = rng.standard_normal(shape1) * w1_scale(d_in, d_hidden)
        W2 = rng.standard_normal((d_hidden, d_out)) * w2_scale(d_hidden, d_out)
        return {"W1": W1.astype(np.float32), "b1": np.zeros(d_hidden, np.float32),
                "W2": W2.astype(np.float32), "b2": np.zeros(d_out, np.float32)}

    return wrong


def _relu_in_place(Z):
    ref.relu_forward(Z)
    Z[Z < 0] = 0
    return Z


def _mlp_forward(relu_hidden: bool = True, relu_output: bool = False, cache_post_as_pre: bool = False):
    def wrong(params, X):
        ref.mlp_forward(params, X)
        Z1 = X @ params["W1"] + params["b1"]
        A1 = np.maximum(Z1, 0) if relu_hidden else Z1
        Y = A1 @ params["W2"] + params["b2"]
        if relu_output:
            Y = np.maximum(Y, 0)
        return Y, {"X": X, "Z1": A1 if cache_post_as_pre else Z1, "A1": A1}

    return wrong


def _mlp_backward(mask_ge: bool = False, skip_mask: bool = False, dW2_from_Z1: bool = False, db1_before_mask: bool = False):
    def wrong(params, cache, dY):
        ref.mlp_backward(params, cache, dY)
        X, Z1, A1 = cache["X"], cache["Z1"], cache["A1"]
        dW2 = (Z1 if dW2_from_Z1 else A1).T @ dY
        db2 = dY.sum(axis=0)
        dA1 = dY @ params["W2"].T
        if skip_mask:
            dZ1 = dA1
        else:
            dZ1 = dA1 * ((Z1 >= 0) if mask_ge else (Z1 > 0))
        db1 = (dA1 if db1_before_mask else dZ1).sum(axis=0)
        return {"W1": X.T @ dZ1, "b1": db1, "W2": dW2, "b2": db2}

    return wrong


MUTANTS: dict[str, list[tuple[str, Callable]]] = {
    "make_synthetic_regression_batch": [
        ("returns float64 arrays (forgot the float32 cast)", _synthetic(cast=False)),
        ("scales the noise by the variance noise_std² instead of the std", _synthetic(noise_power=2)),
        ("teacher not scaled by 1/√d_in", _synthetic(teacher_scale=False)),
        ("draws X before the teacher (breaks the seed contract)", _synthetic(order="X")),
    ],
    "init_mlp_params": [
        ("uses the variance 2/d_in as the standard deviation",
         _init(lambda i, h: 2.0 / i, lambda h, o: np.sqrt(1.0 / h))),
        ("He scale from fan-out (d_hidden) instead of fan-in",
         _init(lambda i, h: np.sqrt(2.0 / h), lambda h, o: np.sqrt(1.0 / h))),
        ("He gain √2 on the linear output layer too",
         _init(lambda i, h: np.sqrt(2.0 / i), lambda h, o: np.sqrt(2.0 / h))),
        ("W1 stored as (d_hidden, d_in), torch's nn.Linear layout",
         _init(lambda i, h: np.sqrt(2.0 / i), lambda h, o: np.sqrt(1.0 / h), transpose_w1=True)),
    ],
    "linear_forward": [
        ("forgets the bias", validated(ref.linear_forward, lambda X, W, b: X @ W)),
        ("bias broadcast along the batch axis", validated(ref.linear_forward, lambda X, W, b: X @ W + b[:, None])),
        ("uses Wᵀ (weights read as (d_out, d_in))", validated(ref.linear_forward, lambda X, W, b: X @ W.T + b)),
    ],
    "relu_forward": [
        ("clips Z in place and returns it (mutates the input)", _relu_in_place),
        ("leaky ReLU with slope 0.01", validated(ref.relu_forward, lambda Z: np.where(Z > 0, Z, 0.01 * Z))),
        ("returns float64 whatever the input dtype", validated(ref.relu_forward, lambda Z: Z.clip(min=0).astype(float))),
    ],
    "mlp_forward": [
        ("forgets the ReLU", _mlp_forward(relu_hidden=False)),
        ("applies a ReLU to the output too", _mlp_forward(relu_output=True)),
        ("caches the activation A1 under 'Z1'", _mlp_forward(cache_post_as_pre=True)),
    ],
    "mse_loss_and_grad": [
        ("gradient without the factor 2", validated(
            ref.mse_loss_and_grad, lambda P, Y: (float(np.mean((P - Y) ** 2)), (P - Y) / (P - Y).size))),
        ("divides by the batch size only, not batch × outputs", validated(
            ref.mse_loss_and_grad, lambda P, Y: (float(np.sum((P - Y) ** 2) / len(P)), 2 * (P - Y) / len(P)))),
        ("gradient with the sign reversed", validated(
            ref.mse_loss_and_grad, lambda P, Y: (float(np.mean((P - Y) ** 2)), 2 * (Y - P) / (P - Y).size))),
    ],
    "linear_backward": [
        ("db averaged over the batch instead of summed", validated(
            ref.linear_backward, lambda G, X, W: (G @ W.T, X.T @ G, G.mean(axis=0)))),
        ("dW transposed (dOutᵀ X)", validated(ref.linear_backward, lambda G, X, W: (G @ W.T, G.T @ X, G.sum(axis=0)))),
        ("dX = dOut W without the transpose", validated(
            ref.linear_backward, lambda G, X, W: (G @ W, X.T @ G, G.sum(axis=0)))),
    ],
    "relu_backward": [
        ("mask Z ≥ 0: gradient flows where Z is exactly 0", validated(ref.relu_backward, lambda dA, Z: dA * (Z >= 0))),
        ("mask from the incoming gradient dA > 0", validated(ref.relu_backward, lambda dA, Z: dA * (dA > 0))),
        ("returns the mask, forgetting to multiply by dA", validated(
            ref.relu_backward, lambda dA, Z: (Z > 0).astype(dA.dtype))),
    ],
    "first_linear_backward": [
        ("db averaged over the batch", validated(ref.first_linear_backward, lambda G, X: (X.T @ G, G.mean(axis=0)))),
        ("dW divided by the batch size a second time", validated(
            ref.first_linear_backward, lambda G, X: (X.T @ G / len(X), G.sum(axis=0)))),
        ("returns the unneeded dX as well", validated(
            ref.first_linear_backward, lambda G, X: (None, X.T @ G, G.sum(axis=0)))),
    ],
    "mlp_backward": [
        ("ReLU mask Z1 ≥ 0", _mlp_backward(mask_ge=True)),
        ("skips the ReLU backward", _mlp_backward(skip_mask=True)),
        ("dW2 from the pre-activation Z1 instead of A1", _mlp_backward(dW2_from_Z1=True)),
        ("db1 summed before the ReLU mask", _mlp_backward(db1_before_mask=True)),
    ],
}
