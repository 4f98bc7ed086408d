"""Checks behind the hidden tests of Module 3, Part 3 (lessons 7–10: local client training).

Client sizes that ``B`` does not divide (a short last batch), stale ``.grad`` left on the model,
two steps in a row, a BatchNorm model, momentum, and two clients trained one after the other
(an optimizer that outlives its call shows there): the cases where the usual mistakes differ from
the reference.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from trainsys.fedavg import client as ref
from trainsys.fedavg import data as ref_data
from trainsys.fedavg import model as ref_model
from trainsys.grading._harness import CheckFailure, assert_tuple, expect_raises, passed, quiet
from trainsys.grading._torch_harness import (
    BAD,
    assert_equal,
    assert_real,
    assert_state,
    assert_tensor,
    fixed,
    guarded,
    model_state,
    row_index,
    rows_to_indices,
    run_torch_cases,
    shares_memory,
    training_flags,
)
from trainsys.grading.fedavg_data import TE, UNTOUCHED, VE, keeps_global_generators

__all__ = [
    "check_make_client_batches",
    "check_compute_batch_loss",
    "check_local_sgd_step",
    "check_train_client_locally",
]

CLAUSES = {
    "make_client_batches": {
        "mutation": ("global generators", "n_k=10, batch_size=3, seed=0", "n_k=1, batch_size=1, seed=4"),
        "failure modes": ("batch_size = 0", "int32 indices", "a negative index", "a repeated index",
                          "indices of shape (6, 1)", "batch_size = True", "batch_size = 3.0", "seed = -1",
                          "dataset is a (features, labels) tuple"),
        "metric that proves it correct": ("n_k=10, batch_size=3, seed=0", "n_k=7, batch_size=None, seed=2",
                                          "n_k=11 indices given unsorted"),
    },
    "compute_batch_loss": {
        "mutation": ("batch of 1", "BatchNorm model in training mode, batch of 8"),
        "failure modes": ("batch given as a list [X, y]", "model is a function", "a label equal to -1",
                          "int32 labels", "an empty batch", "batch = (X, y, extra)", "labels of shape (3, 1)"),
        "metric that proves it correct": ("batch of 1", "batch of 5", "logits of about +1000 and -1000"),
    },
    "local_sgd_step": {
        "mutation": ("batch of 5, lr=0.1", "model without BatchNorm in eval mode", "stale .grad left on the parameters",
                     "BatchNorm model in training mode, batch of 8", "0.bias frozen"),
        "failure modes": ("lr = 0.0 with stale .grad", "lr = True", "lr = inf", "model is a function"),
        "metric that proves it correct": ("batch of 5, lr=0.1", "stale .grad left on the parameters"),
    },
    "train_client_locally": {
        "mutation": ("global generators", "n_k=10, epochs=2, batch_size=3, lr=0.1, momentum=0.0",
                     "n_k=10, epochs=2, batch_size=3, lr=0.1, momentum=0.9", "BatchNorm model handed over in eval mode"),
        "failure modes": ("epochs = 0, eval-mode model", "epochs = True", "momentum = nan", "momentum = -0.5",
                          "lr = nan with momentum 0.9"),
        "metric that proves it correct": ("n_k=10, epochs=2, batch_size=3, lr=0.1, momentum=0.0",
                                          "n_k=10, epochs=2, batch_size=3, lr=0.1, momentum=0.9",
                                          "momentum=0.9 on a model that carries stale .grad"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

DATA = ref_data.build_synthetic_dataset(40, 4, 3, 0)
TRAIN_TOL = {"rtol": 1e-4, "atol": 1e-6}
"""Parameters and buffers after one to nine float32 SGD steps, compared with the reference's. Correct answers
differ only in rounding: a reordered loss or gradient (logsumexp vs F.cross_entropy, a throw-away
torch.optim.SGD vs p -= lr * grad, momentum by hand) is a few eps = 1.2e-7 apart per step, and a step
passes it on amplified by lr times the curvature; over 9 steps that stays below ~100 eps = 1.2e-5
relative, so rtol 1e-4 leaves a margin of 8; atol 1e-6 for entries that cancel to near zero (parameters
and statistics are O(0.1-1), so 1e-6 is ~10 eps of their scale)."""


def _model(seed: int, batch_norm: bool = False, d_hidden: int = 6) -> torch.nn.Module:
    return ref_model.build_mlp_classifier(4, d_hidden, 3, seed, batch_norm)


def _indices(count: int, seed: int) -> torch.Tensor:
    return torch.sort(torch.randperm(len(DATA), generator=torch.Generator().manual_seed(seed))[:count]).values


def _batch(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = _indices(count, seed)
    return DATA.features[idx], DATA.labels[idx]


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    """Copies of every parameter's ``.grad`` (``None`` kept)."""
    return {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}


def _assert_grads(label: str, got: dict, expected: dict) -> None:
    """Each ``.grad`` must be this batch's gradient; where the reference has none, None or zeros pass."""
    for name, want in expected.items():
        have = got.get(name)
        if want is None:
            if have is not None and bool(have.abs().max() > 0):
                raise CheckFailure(f"[{label}] {name}.grad should hold no gradient (the parameter receives none), "
                                   "but holds non-zero values")
            continue
        if have is None:
            raise CheckFailure(f"[{label}] {name}.grad is None after the call; each .grad must be replaced by "
                               "this batch's gradient (loss.backward() after clearing the stale one)")
        # float32 gradients of the same loss by backward: equal up to a reordered sum over <= 8 examples and the
        # softmax's rounding (a few eps = 1.2e-7, amplified by cancellation in entries that sum to ~0) → rtol 1e-4;
        # atol 1e-7 ~ eps for entries of order 1 that cancel to zero
        assert_tensor(label, f"{name}.grad after the call (this batch's gradient)", have, want, rtol=1e-4, atol=1e-7)


def _refused_untouched(fn: Callable[..., Any], label: str, argument: str, model: torch.nn.Module, *args: Any) -> None:
    """``fn(model, *args)`` must refuse its input, naming ``argument``, before the model changes at all."""
    state, flags, grads = model_state(model), training_flags(model), _grads(model)
    with quiet():
        expect_raises(fn, label, BAD, argument, model, *args)
    if training_flags(model) != flags:
        raise CheckFailure(f"[{label}] the model's training/eval mode changed although the input was refused: "
                           "validate every argument before touching the model")
    now = _grads(model)
    for name, g in grads.items():
        if (g is None) != (now[name] is None) or (g is not None and not torch.equal(g, now[name])):
            raise CheckFailure(f"[{label}] {name}.grad changed although the input was refused: validate every "
                               "argument before touching the model")
    for key, tensor in model_state(model).items():
        if not torch.equal(tensor, state[key]):
            raise CheckFailure(f"[{label}] state_dict()[{key!r}] changed although the input was refused")


# --- Lesson 7 --------------------------------------------------------------------------------------
def check_make_client_batches(fn: Callable[..., Any]) -> str:
    """Batch sizes B, …, B, n_k mod B; the client's examples once each; shuffled from the seed."""
    setups = [(10, 3, 0), (12, 4, 1), (7, None, 2), (5, 10, 3), (1, 1, 4), (9, 9, 5)]
    cases = [(f"n_k={n}, batch_size={b}, seed={s}", fixed(DATA, _indices(n, 10 + s), b, s)) for n, b, s in setups]
    unsorted = _indices(11, 16)[torch.randperm(11, generator=torch.Generator().manual_seed(3))]
    cases.append(("n_k=11 indices given unsorted, batch_size=4, seed=6", fixed(DATA, unsorted, 4, 6)))
    lookup = row_index(DATA)

    def order(label: str, got: Any, expected: list, idx: torch.Tensor, data: ref_data.LabelledDataset) -> list[int]:
        if not isinstance(got, list):
            raise CheckFailure(f"[{label}] must return a list of (X_b, y_b) pairs, got {type(got).__name__}")
        sizes = [len(pair[1]) if isinstance(pair, (tuple, list)) and len(pair) == 2 else None for pair in got]
        want = [len(y) for _, y in expected]
        if sizes != want:
            raise CheckFailure(f"[{label}] batch sizes are {sizes}, expected {want} "
                               "(full batches, then the remainder; B=None or B >= n_k: one batch)")
        seen = []
        for i, pair in enumerate(got):
            X, y = assert_tuple(label, f"batch {i}", pair, 2)
            # infinite tolerances: only type, shape, dtype and device here; the rows themselves are looked up
            # in the dataset just below (which row, not how close)
            assert_tensor(label, f"X of batch {i}", X, expected[i][0], rtol=float("inf"), atol=float("inf"))
            for name, mine, theirs in (("X", X, data.features), ("y", y, data.labels)):
                if isinstance(mine, torch.Tensor) and shares_memory(mine, theirs):
                    raise CheckFailure(f"[{label}] {name} of batch {i} is a view of the dataset's "
                                       f"{'features' if name == 'X' else 'labels'}: gather each batch with an index "
                                       "tensor (dataset.features[chunk]), a copy, so that writing into a batch "
                                       "cannot corrupt the dataset")
            rows = rows_to_indices(label, f"X of batch {i}", lookup, X)
            # exact: int64 labels, gathered, never computed
            assert_tensor(label, f"y of batch {i}", y, DATA.labels[rows], exact=True)
            seen += rows
        if sorted(seen) != sorted(idx.tolist()):
            raise CheckFailure(f"[{label}] the batches must hold each of the client's examples exactly once")
        return seen

    def compare(label: str, got: Any, expected: list, inputs: Any) -> None:
        data, idx, b, seed = inputs[0]
        seen = order(label, got, expected, idx, data)
        if len(seen) >= 6 and seen == idx.tolist():
            raise CheckFailure(f"[{label}] the batches follow the original order: shuffle each epoch")
        want = [i for X, _ in expected for i in rows_to_indices(label, "the reference", lookup, X)]
        if seen != want:
            raise CheckFailure(f"[{label}] the examples come in the order {seen[:8]}..., the contract's order is "
                               f"{want[:8]}...: order = indices[torch.randperm(n_k, generator=g)] on indices as "
                               "given (not sorted), with g = torch.Generator().manual_seed(seed)")
        if order(label, guarded(fn, label, data, idx.clone(), b, seed), expected, idx, data) != seen:
            raise CheckFailure(f"[{label}] the same seed must give the same batches")
        if len(seen) >= 6 and order(label, guarded(fn, label, data, idx.clone(), b, seed + 1), expected, idx,
                                    data) == seen:
            raise CheckFailure(f"[{label}] seed + 1 gives the same order: the shuffle must come from the seed")

    idx = _indices(6, 0)
    invalid = [
        ("batch_size = 0", BAD, "batch_size", fixed(DATA, idx, 0, 0)),
        ("an index out of range", VE, "indices", fixed(DATA, torch.tensor([0, 40]), 2, 0)),
        ("empty indices", VE, "indices", fixed(DATA, torch.tensor([], dtype=torch.int64), 2, 0)),
        ("float indices", TE, "indices", fixed(DATA, idx.float(), 2, 0)),
        ("int32 indices", TE, "indices", fixed(DATA, idx.to(torch.int32), 2, 0)),
        ("a negative index (-1)", VE, "indices", fixed(DATA, torch.tensor([0, -1]), 2, 0)),
        ("a repeated index (6 indices, 5 distinct)", VE, "indices",
         fixed(DATA, torch.cat([idx[:5], idx[2:3]]), 2, 0)),
        ("indices of shape (6, 1), not (6,)", TE, "indices", fixed(DATA, idx[:, None].clone(), 2, 0)),
        ("batch_size = True (a bool is not an integer here)", BAD, "batch_size", fixed(DATA, idx, True, 0)),
        ("batch_size = 3.0 (a float)", BAD, "batch_size", fixed(DATA, idx, 3.0, 0)),
        ("seed = -1", BAD, "seed", fixed(DATA, idx, 2, -1)),
        ("seed = 2**63 (above 2**63 - 1)", BAD, "seed", fixed(DATA, idx, 2, 2**63)),
        ("dataset is a (features, labels) tuple", BAD, "dataset", fixed((DATA.features, DATA.labels), idx, 2, 0)),
    ]
    keeps_global_generators(fn, ref.make_client_batches, f"global generators: n_k=10, batch_size=3, seed=0 {UNTOUCHED}",
                            fixed(DATA, _indices(10, 10), 3, 0))
    count = run_torch_cases("make_client_batches", fn, ref.make_client_batches, cases, compare, invalid,
                            compare_with_inputs=True, count_only=True)
    return passed("make_client_batches", count + 1)


# --- Lesson 8 --------------------------------------------------------------------------------------
def check_compute_batch_loss(fn: Callable[..., Any]) -> str:
    """The mean cross-entropy as a differentiable 0-d tensor, with the reference's gradient."""
    setups = [(1, 0), (5, 1), (16, 2), (40, 3)]
    cases = [(f"batch of {n}", fixed(_model(s), _batch(n, s))) for n, s in setups]
    bn = _model(7, batch_norm=True).eval()
    cases.append(("BatchNorm model in eval mode, batch of 6", fixed(bn, _batch(6, 7))))
    huge = _model(8)
    with torch.no_grad():
        huge[2].bias += torch.tensor([1000.0, -1000.0, 0.0])  # logits near +1000, -1000 and 0
    cases.append(("logits of about +1000 and -1000 (the loss must stay finite)", fixed(huge, _batch(6, 8))))
    cases.append(("batch given as a list [X, y]", fixed(_model(9), list(_batch(4, 9)))))

    def compare(label: str, got: Any, expected: torch.Tensor, inputs: Any) -> None:
        model, batch = inputs[0]
        if not isinstance(got, torch.Tensor) or got.ndim != 0:
            raise CheckFailure(f"[{label}] must return a 0-d tensor (keep the graph for backward), got "
                               f"{type(got).__name__}{'' if not isinstance(got, torch.Tensor) else tuple(got.shape)}")
        if got.grad_fn is None:
            raise CheckFailure(f"[{label}] the loss has no graph: do not call .item() or detach it")
        written = [name for name, p in model.named_parameters() if p.grad is not None]
        if written:  # every case hands over a model without .grad
            raise CheckFailure(f"[{label}] the call wrote .grad of {written[:3]}: the contract's mutation is none, "
                               "so return the loss and leave backward() to the caller")
        if got.dtype != expected.dtype:
            raise CheckFailure(f"[{label}] the loss has dtype {got.dtype}, expected {expected.dtype} (the logits' "
                               "dtype, as F.cross_entropy returns it)")
        # float32 mean of <= 40 cross-entropies: another correct formula (logsumexp + gather, nll_loss on
        # log_softmax) rounds each term within a few eps and the mean within ~40 eps = 5e-6 → rtol 1e-5;
        # the ±1000 case is ~1666, where rtol dominates; atol 1e-7 only for a loss near 0
        assert_real(label, "the loss", got.detach(), float(expected.detach()), rtol=1e-5, atol=1e-7)
        try:
            grads = torch.autograd.grad(got, list(model.parameters()), allow_unused=True)
        except RuntimeError as exc:
            raise CheckFailure(f"[{label}] cannot differentiate the loss with respect to the model's "
                               f"parameters: {exc}") from None
        twin = copy.deepcopy(model)
        want = torch.autograd.grad(ref.compute_batch_loss(twin, batch), list(twin.parameters()))
        for (name, _), g, w in zip(model.named_parameters(), grads, want):
            # float32 gradients of two correct formulas of the same loss: softmax - one_hot rounds within a few
            # eps per term, summed over <= 40 examples with cancellation → rtol 1e-4; atol 1e-7 ~ eps at scale 1
            assert_tensor(label, f"the gradient of the loss for {name}",
                          torch.zeros_like(w) if g is None else g, w, rtol=1e-4, atol=1e-7)

    invalid = [
        ("a label equal to n_classes", BAD, "batch", fixed(_model(0), (_batch(3, 0)[0], torch.tensor([0, 1, 3])))),
        ("batch is X alone", BAD, "batch", fixed(_model(0), _batch(3, 0)[0])),
        ("float labels", BAD, "batch", fixed(_model(0), (_batch(3, 0)[0], torch.tensor([0.0, 1.0, 2.0])))),
        ("3 rows of X, 2 labels", BAD, "batch", fixed(_model(0), (_batch(3, 0)[0], torch.tensor([0, 1])))),
        ("model is a function", TE, "model", fixed(lambda x: x, _batch(3, 0))),
        ("a label equal to -1", BAD, "batch", fixed(_model(0), (_batch(3, 0)[0], torch.tensor([0, -1, 2])))),
        ("int32 labels", BAD, "batch", fixed(_model(0), (_batch(3, 0)[0], torch.tensor([0, 1, 2], dtype=torch.int32)))),
        ("an empty batch (0 rows)", BAD, "batch", fixed(_model(0), (torch.zeros(0, 4), torch.zeros(0, dtype=torch.int64)))),
        ("batch = (X, y, extra), not a pair", BAD, "batch", fixed(_model(0), (*_batch(3, 0), torch.ones(3)))),
        ("labels of shape (3, 1), not (3,)", BAD, "batch", fixed(_model(0), (_batch(3, 0)[0], torch.tensor([[0], [1], [2]])))),
    ]
    count = run_torch_cases("compute_batch_loss", fn, ref.compute_batch_loss, cases, compare, invalid,
                            compare_with_inputs=True, count_only=True)

    def reference_with_state(model: torch.nn.Module, batch: Any) -> tuple:
        return ref.compute_batch_loss(model, batch), model_state(model)

    def compare_training(label: str, got: Any, expected: tuple, inputs: Any) -> None:
        compare(label, got, expected[0], inputs)
        # float32 running mean/var of one batch of 8, computed by the same BatchNorm layer: equal unless the
        # forward ran twice (then off by a whole momentum step, ~10%); rtol 1e-5 ~ 80 eps, atol 1e-7 ~ eps
        assert_state(label, "the model after the call (BatchNorm statistics updated by exactly one forward pass)",
                     model_state(inputs[0][0]), expected[1], rtol=1e-5, atol=1e-7)

    training = [("BatchNorm model in training mode, batch of 8",
                 fixed(_model(10, batch_norm=True).train(), _batch(8, 10)))]
    count += run_torch_cases("compute_batch_loss", fn, reference_with_state, training, compare_training,
                             mutable=(0,), compare_with_inputs=True, count_only=True)
    return passed("compute_batch_loss", count)


# --- Lesson 9 --------------------------------------------------------------------------------------
def _with_state(step: Callable[..., Any]) -> Callable[..., Any]:
    def run(model: torch.nn.Module, batch: Any, lr: float) -> tuple[Any, dict, dict, list]:
        return step(model, batch, lr), model_state(model), _grads(model), training_flags(model)
    return run


def _twice(step: Callable[..., Any]) -> Callable[..., Any]:
    def run(model: torch.nn.Module, batch: Any, lr: float) -> list:
        return [step(model, batch, lr), step(model, batch, lr)]
    return run


def _stale(model: torch.nn.Module) -> torch.nn.Module:
    g = torch.Generator().manual_seed(99)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    return model


def check_local_sgd_step(fn: Callable[..., Any]) -> str:
    """``w - lr * grad`` on every parameter, fresh gradients each call, loss before the step."""
    def stale_case() -> Any:
        return (_stale(_model(3)), _batch(8, 3), 0.5), {}

    def frozen_case() -> Any:
        model = _stale(_model(5))
        model[0].bias.requires_grad_(False)
        model[0].bias.grad = None  # a frozen parameter: it receives no gradient and must not move
        return (model, _batch(6, 5), 0.2), {}

    cases = [
        ("batch of 5, lr=0.1", fixed(_model(0), _batch(5, 0), 0.1)),
        # without BatchNorm the mode changes no number: only the mode check after the call can see it changed
        ("model without BatchNorm in eval mode (the mode is left as found), batch of 5",
         fixed(_model(15).eval(), _batch(5, 15), 0.1)),
        ("batch of 1, lr=1.0", fixed(_model(1), _batch(1, 1), 1.0)),
        ("BatchNorm model in training mode, batch of 8", fixed(_model(2, batch_norm=True).train(), _batch(8, 2), 0.3)),
        ("stale .grad left on the parameters", stale_case),
        ("BatchNorm model in eval mode (the mode is left as found), batch of 8",
         fixed(_model(6, batch_norm=True).eval(), _batch(8, 6), 0.3)),
        ("0.bias frozen (requires_grad=False), stale .grad on the others", frozen_case),
    ]

    def compare(label: str, got: Any, expected: tuple, inputs: Any) -> None:
        if type(got) is not float:
            raise CheckFailure(f"[{label}] must return a Python float (float(loss)), got {type(got).__name__}")
        # the same float32 loss as compute_batch_loss's check: ~40 eps for a reordered mean → rtol 1e-5
        assert_real(label, "the returned loss (before the step)", got, float(expected[0]), rtol=1e-5, atol=1e-7)
        model = inputs[0][0]
        assert_state(label, "the model's state after the step", model_state(model), expected[1], **TRAIN_TOL)
        if training_flags(model) != expected[3]:
            raise CheckFailure(f"[{label}] the model's training/eval mode changed: leave the mode as found "
                               f"(expected {expected[3]}, got {training_flags(model)} for model.modules())")
        _assert_grads(label, _grads(model), expected[2])

    count = run_torch_cases("local_sgd_step", fn, _with_state(ref.local_sgd_step), cases, compare,
                            mutable=(0,), compare_with_inputs=True, count_only=True)
    two = [("two steps in a row on the same batch", fixed(_model(4), _batch(6, 4), 0.5))]

    def compare_two(label: str, got: Any, expected: tuple, inputs: Any) -> None:
        (first, second), state = assert_tuple(label, "two returned losses", got[0], 2), expected[1]
        # float32 losses at the old and at the once-updated weights (TRAIN_TOL's reasoning, one step) → rtol 1e-5
        assert_real(label, "the first loss", first, expected[0][0], rtol=1e-5, atol=1e-7)
        assert_real(label, "the second loss", second, expected[0][1], rtol=1e-5, atol=1e-7)
        assert_state(label, "the model after two steps", model_state(inputs[0][0]), state, **TRAIN_TOL)

    count += run_torch_cases("local_sgd_step", _with_state(_twice(fn)), _with_state(_twice(ref.local_sgd_step)),
                             two, compare_two, mutable=(0,), compare_with_inputs=True, count_only=True)
    invalid = [
        ("lr = 0", VE, "lr", fixed(_model(0), _batch(3, 0), 0.0)),
        ("lr = -0.1", VE, "lr", fixed(_model(0), _batch(3, 0), -0.1)),
        ("lr = nan", VE, "lr", fixed(_model(0), _batch(3, 0), float("nan"))),
        ("batch labels out of range", BAD, "batch", fixed(_model(0), (_batch(2, 0)[0], torch.tensor([0, 5])), 0.1)),
        ("lr = True (a bool is not a real number here)", TE, "lr", fixed(_model(0), _batch(3, 0), True)),
        ("lr = inf", VE, "lr", fixed(_model(0), _batch(3, 0), float("inf"))),
        # the contract asks a TypeError and no particular name in its message: () requires none
        ("model is a function, not an nn.Module", TE, (), fixed(lambda x: x, _batch(3, 0), 0.1)),
    ]
    count += run_torch_cases("local_sgd_step", fn, ref.local_sgd_step, [], None, invalid, count_only=True)
    for bad_lr in (0.0, float("inf")):
        _refused_untouched(fn, f"lr = {bad_lr} with stale .grad on an eval-mode model (refused before anything "
                           "is touched)", "lr", _stale(_model(11)).eval(), _batch(4, 11), bad_lr)
    return passed("local_sgd_step", count + 2)


# --- Lesson 10 -------------------------------------------------------------------------------------
def _two_clients(train: Callable[..., Any]) -> Callable[..., Any]:
    """Train two fresh copies of the model one after the other; return both results and states."""
    def run(model, dataset, indices, epochs, batch_size, lr, seed, momentum=0.0):
        second = copy.deepcopy(model)
        r1 = train(model, dataset, indices, epochs, batch_size, lr, seed, momentum)
        r2 = train(second, dataset, indices, epochs, batch_size, lr, seed, momentum)
        return r1, r2, model_state(model), model_state(second)
    return run


def check_train_client_locally(fn: Callable[..., Any]) -> str:
    """E epochs reshuffled with seed + e, only the client's examples, stateless between calls."""
    setups = [  # (n_k, epochs, batch_size, lr, seed, momentum, batch_norm)
        (10, 2, 3, 0.1, 5, 0.0, False), (8, 1, None, 0.5, 6, 0.0, False), (9, 3, 4, 0.05, 7, 0.0, False),
        (10, 2, 3, 0.1, 8, 0.9, False), (10, 2, 4, 0.1, 9, 0.0, True), (1, 2, 1, 0.1, 10, 0.0, False),
    ]
    cases = [(f"n_k={n}, epochs={e}, batch_size={b}, lr={lr}, momentum={mo}{', BatchNorm' if bn else ''}",
              fixed(_model(s, bn), DATA, _indices(n, s), e, b, lr, s, mo)) for n, e, b, lr, s, mo, bn in setups]
    cases += [
        ("BatchNorm model handed over in eval mode (it must be trained, and left, in training mode)",
         fixed(_model(12, True).eval(), DATA, _indices(8, 12), 2, 4, 0.1, 12, 0.0)),
        ("momentum=0.9 on a model that carries stale .grad (zero_grad before each step)",  # deepcopy drops .grad
         lambda: ((_stale(_model(13)), DATA, _indices(10, 13), 2, 3, 0.1, 13, 0.9), {})),
    ]

    def compare(label: str, got: Any, expected: tuple, inputs: Any) -> None:
        for i in range(2):
            who = "the first client" if i == 0 else "the second client (trained after the first)"
            result, want = got[i], expected[i]
            if not isinstance(result, dict) or set(result) != set(want):
                raise CheckFailure(f"[{label}] {who}: must return a dict with keys {sorted(want)}, got "
                                   f"{sorted(result) if isinstance(result, dict) else type(result).__name__}")
            assert_equal(label, f"{who}: num_steps", result["num_steps"], want["num_steps"])
            assert_equal(label, f"{who}: num_samples", result["num_samples"], want["num_samples"])
            losses = result["epoch_losses"]
            if not isinstance(losses, list) or len(losses) != len(want["epoch_losses"]):
                raise CheckFailure(f"[{label}] {who}: epoch_losses must be a list of {len(want['epoch_losses'])} "
                                   f"floats, got {losses!r}")
            for e, (l, w) in enumerate(zip(losses, want["epoch_losses"])):
                if type(l) is not float:
                    raise CheckFailure(f"[{label}] {who}: epoch_losses[{e}] must be a Python float, got "
                                       f"{type(l).__name__}")
                # float32 batch losses along a trajectory whose weights agree to TRAIN_TOL, averaged in float64:
                # the loss inherits the weights' relative error (<= ~1e-5) → rtol 1e-4, atol 1e-6 as TRAIN_TOL
                assert_real(label, f"{who}: epoch_losses[{e}]", l, w, rtol=1e-4, atol=1e-6)
            assert_state(label, f"{who}: the model after training", got[2 + i], expected[2 + i], **TRAIN_TOL)
        if not all(training_flags(inputs[0][0])):
            raise CheckFailure(f"[{label}] the model must be put in training mode and left there "
                               "(model.train(), not restored afterwards)")

    keeps_global_generators(fn, ref.train_client_locally, "global generators: n_k=10, epochs=2, batch_size=3, "
                            f"momentum=0.9 {UNTOUCHED}", fixed(_model(16), DATA, _indices(10, 16), 2, 3, 0.1, 16, 0.9))
    count = 1 + run_torch_cases("train_client_locally", _two_clients(fn), _two_clients(ref.train_client_locally),
                                cases, compare, mutable=(0,), compare_with_inputs=True, count_only=True)
    idx = _indices(6, 0)
    invalid = [
        ("epochs = 0", BAD, "epochs", fixed(_model(0), DATA, idx, 0, 2, 0.1, 0)),
        ("batch_size = 0", BAD, "batch_size", fixed(_model(0), DATA, idx, 1, 0, 0.1, 0)),
        ("lr = -1", BAD, "lr", fixed(_model(0), DATA, idx, 1, 2, -1.0, 0)),
        ("momentum = 1", BAD, "momentum", fixed(_model(0), DATA, idx, 1, 2, 0.1, 0, 1.0)),
        ("empty indices", BAD, "indices", fixed(_model(0), DATA, torch.tensor([], dtype=torch.int64), 1, 2, 0.1, 0)),
        ("epochs = True (a bool is not an integer here)", BAD, "epochs", fixed(_model(0), DATA, idx, True, 2, 0.1, 0)),
        ("momentum = nan", BAD, "momentum", fixed(_model(0), DATA, idx, 1, 2, 0.1, 0, float("nan"))),
        ("momentum = -0.5", BAD, "momentum", fixed(_model(0), DATA, idx, 1, 2, 0.1, 0, -0.5)),
        ("lr = nan with momentum 0.9", BAD, "lr", fixed(_model(0), DATA, idx, 1, 2, float("nan"), 0, 0.9)),
    ]
    count += run_torch_cases("train_client_locally", fn, ref.train_client_locally, [], None, invalid,
                             count_only=True)
    refusals = [("epochs = 0", "epochs", (DATA, idx, 0, 2, 0.1, 0)),
                ("batch_size = 0", "batch_size", (DATA, idx, 1, 0, 0.1, 0)),
                ("an index out of range", "indices", (DATA, torch.tensor([0, 40]), 1, 2, 0.1, 0))]
    for what, argument, args in refusals:
        _refused_untouched(fn, f"{what}, eval-mode model with stale .grad (refused before the model is touched)",
                           argument, _stale(_model(14)).eval(), *args)
    return passed("train_client_locally", count + len(refusals))
