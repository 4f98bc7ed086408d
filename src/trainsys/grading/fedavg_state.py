"""Checks behind the hidden tests of Module 3, Part 4 (lessons 11–16: state dicts and the average).

The state dicts mix float32, float64 and float16 tensors with integer buffers (a BatchNorm's
``num_batches_tracked``, an int32 vector), so that a lost dtype, a scaled counter or a truncated
average shows; keys come in different orders, so that pairing tensors by position shows; results
must share no memory with the inputs, and inputs must come back unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainsys.fedavg import model as ref_model
from trainsys.fedavg import state as ref
from trainsys.grading._harness import CheckFailure
from trainsys.grading._torch_harness import (
    BAD,
    assert_state,
    fixed,
    model_state,
    run_torch_cases,
    shares_memory,
)

__all__ = [
    "check_clone_model_state",
    "check_load_model_state",
    "check_zeros_like_state",
    "check_add_state_dicts",
    "check_scale_state_dict",
    "check_aggregate_weighted_average",
]


def mixed_state(seed: int) -> dict[str, torch.Tensor]:
    """A state dict with every kind of entry: float32/64/16 tensors, an int64 counter, an int32 vector."""
    g = torch.Generator().manual_seed(seed)
    return {
        "layer.weight": torch.randn(3, 4, generator=g),
        "layer.bias": torch.randn(4, generator=g).double(),
        "half": torch.randn(2, 2, generator=g).half(),
        "bn.num_batches_tracked": torch.randint(0, 50, (), generator=g),
        "counts": torch.randint(0, 9, (5,), generator=g).to(torch.int32),
    }


def reordered(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return dict(reversed(list(state.items())))


def bn_model(seed: int, steps: int = 2) -> torch.nn.Module:
    """A BatchNorm MLP whose running statistics and counter have moved (forward passes in train mode)."""
    model = ref_model.build_mlp_classifier(4, 5, 3, seed, batch_norm=True).train()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _ in range(steps):
            model(torch.randn(6, 4, generator=g))
    return model


def _fresh(label: str, got: dict, inputs: list[dict]) -> None:
    for key, tensor in got.items():
        for i, source in enumerate(inputs):
            if key in source and isinstance(tensor, torch.Tensor) and shares_memory(tensor, source[key]):
                raise CheckFailure(f"[{label}] result[{key!r}] shares memory with input {i + 1}'s tensor: "
                                   "return new tensors")


# --- Lesson 11 -------------------------------------------------------------------------------------
def check_clone_model_state(fn: Callable[..., Any]) -> str:
    """Parameters and buffers, in order, same dtypes, detached, and no memory shared with the model."""
    cases = [
        ("MLP", fixed(ref_model.build_mlp_classifier(4, 6, 3, 0))),
        ("BatchNorm MLP after two training forwards", fixed(bn_model(1))),
        ("float64 MLP", fixed(ref_model.build_mlp_classifier(3, 2, 2, 2).double())),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        model = inputs[0][0]
        assert_state(label, "the snapshot", got, expected, exact=True)
        if list(got) != list(expected):
            raise CheckFailure(f"[{label}] keys must come in state_dict() order {list(expected)}, got {list(got)}")
        live = model.state_dict()
        for key, tensor in got.items():
            if shares_memory(tensor, live[key]):
                raise CheckFailure(f"[{label}] snapshot[{key!r}] shares memory with the model: it would change "
                                   "as soon as the model trains; clone it")
            if tensor.requires_grad:
                raise CheckFailure(f"[{label}] snapshot[{key!r}] requires grad: detach it")

    invalid = [("model is a dict", BAD, "model", fixed({"w": torch.ones(2)}))]
    return run_torch_cases("clone_model_state", fn, ref.clone_model_state, cases, compare, invalid,
                           compare_with_inputs=True)


# --- Lesson 12 -------------------------------------------------------------------------------------
def check_load_model_state(fn: Callable[..., Any]) -> str:
    """Copies (never aliases) every tensor in place, returns the model, rejects any mismatch up front."""
    def case(seed: int, batch_norm: bool = False) -> Callable[[], Any]:
        make = bn_model if batch_norm else (lambda s: ref_model.build_mlp_classifier(4, 5, 3, s))
        return lambda: ((make(seed), ref.clone_model_state(make(seed + 10))), {})

    cases = [("MLP", case(0)), ("BatchNorm MLP (buffers and an int64 counter)", case(1, True)),
             ("a state whose keys come in another order", lambda: (
                 (ref_model.build_mlp_classifier(4, 5, 3, 2),
                  reordered(ref.clone_model_state(ref_model.build_mlp_classifier(4, 5, 3, 3)))), {}))]

    def compare(label: str, got: Any, expected: Any, inputs: Any) -> None:
        model, state = inputs[0]
        if got is not model:
            raise CheckFailure(f"[{label}] must return the model it loaded into (the same object)")
        assert_state(label, "the model's state after loading", model_state(model), dict(state), exact=True)
        for key, tensor in model.state_dict().items():
            if shares_memory(tensor, state[key]):
                raise CheckFailure(f"[{label}] model.state_dict()[{key!r}] is the same memory as state[{key!r}]: "
                                   "changing the state later would change the model; copy the values")

    model = ref_model.build_mlp_classifier(4, 5, 3, 0)
    good = ref.clone_model_state(model)
    missing = {k: v for k, v in good.items() if k != "2.bias"}
    invalid = [
        ("state without '2.bias'", BAD, "state", fixed(model, missing)),
        ("state with an extra key", BAD, "state", fixed(model, {**good, "extra": torch.zeros(1)})),
        ("state['0.weight'] of the wrong shape", BAD, "state", fixed(model, {**good, "0.weight": torch.zeros(4, 5)})),
        ("state['2.bias'] in float64", BAD, "state", fixed(model, {**good, "2.bias": good["2.bias"].double()})),
        ("state is a list", BAD, "state", fixed(model, list(good.values()))),
    ]
    return run_torch_cases("load_model_state", fn, ref.load_model_state, cases, compare, invalid,
                           mutable=(0,), compare_with_inputs=True)


# --- Lesson 13 -------------------------------------------------------------------------------------
def check_zeros_like_state(fn: Callable[..., Any]) -> str:
    """Zeros of the same keys, shapes, dtypes and devices — even where the input holds inf or NaN."""
    inf = mixed_state(3)
    inf["layer.weight"][0, 0], inf["layer.bias"][1] = float("inf"), float("nan")
    cases = [
        ("mixed dtypes with integer buffers", fixed(mixed_state(0))),
        ("a BatchNorm model's state", fixed(ref.clone_model_state(bn_model(2)))),
        ("a state holding inf and NaN", fixed(inf)),
        ("tensors on the meta device", fixed({"w": torch.empty(3, 2, device="meta"),
                                              "n": torch.empty((), dtype=torch.int64, device="meta")})),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        assert_state(label, "the zeros", got, expected, exact=True)
        _fresh(label, got, [inputs[0][0]])

    invalid = [
        ("state is a list", BAD, "state", fixed([torch.ones(2)])),
        ("state holds a list, not a tensor", BAD, "state", fixed({"w": [1.0, 2.0]})),
    ]
    return run_torch_cases("zeros_like_state", fn, ref.zeros_like_state, cases, compare, invalid,
                           compare_with_inputs=True)


def _self_pair() -> Any:
    state = mixed_state(6)
    return (state, state), {}


# --- Lesson 14 -------------------------------------------------------------------------------------
def check_add_state_dicts(fn: Callable[..., Any]) -> str:
    """Key-by-key sums matched by name, dtypes kept, integers exact, inputs untouched."""
    cases = [
        ("mixed dtypes", fixed(mixed_state(0), mixed_state(1))),
        ("b's keys in another order", fixed(mixed_state(2), reordered(mixed_state(3)))),
        ("two BatchNorm model states", fixed(ref.clone_model_state(bn_model(4)), ref.clone_model_state(bn_model(5)))),
        ("a state added to itself", _self_pair),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        assert_state(label, "a + b", got, expected)
        _fresh(label, got, list(inputs[0]))

    a = mixed_state(7)
    invalid = [
        ("b without 'half'", BAD, "b", fixed(a, {k: v for k, v in mixed_state(8).items() if k != "half"})),
        ("b with an extra key", BAD, "b", fixed(a, {**mixed_state(8), "extra": torch.zeros(1)})),
        ("b['layer.weight'] of shape (4, 3)", BAD, "b", fixed(a, {**mixed_state(8), "layer.weight": torch.ones(4, 3)})),
        ("b['counts'] in float32", BAD, "b", fixed(a, {**mixed_state(8), "counts": torch.ones(5)})),
    ]
    return run_torch_cases("add_state_dicts", fn, ref.add_state_dicts, cases, compare, invalid,
                           compare_with_inputs=True)


# --- Lesson 15 -------------------------------------------------------------------------------------
def check_scale_state_dict(fn: Callable[..., Any]) -> str:
    """Floating tensors times c in their own dtype; integer counters copied unchanged; a new dict."""
    cases = [(f"mixed dtypes, c = {c}", fixed(mixed_state(i), c)) for i, c in enumerate([0.5, -1.0, 0.0, 3])]
    cases.append(("a BatchNorm model's state, c = 0.25", fixed(ref.clone_model_state(bn_model(9)), 0.25)))

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        assert_state(label, "c * state", got, expected)
        _fresh(label, got, [inputs[0][0]])

    invalid = [
        ("c = nan", BAD, "c", fixed(mixed_state(0), float("nan"))),
        ("c = '2'", BAD, "c", fixed(mixed_state(0), "2")),
        ("state = None", BAD, "state", fixed(None, 2.0)),
    ]
    return run_torch_cases("scale_state_dict", fn, ref.scale_state_dict, cases, compare, invalid,
                           compare_with_inputs=True)


# --- Lesson 16 -------------------------------------------------------------------------------------
def check_aggregate_weighted_average(fn: Callable[..., Any]) -> str:
    """Weights n_k / sum(n_k), float tensors to tolerance, integer buffers rounded (not truncated)."""
    def counters(values: list[int]) -> list[dict[str, torch.Tensor]]:
        return [{"w": torch.full((2,), float(v)), "n": torch.tensor(v)} for v in values]

    cases = [
        ("three clients, n = [10, 30, 60]", fixed([mixed_state(i) for i in range(3)], [10, 30, 60])),
        ("one client", fixed([mixed_state(5)], [7])),
        ("two clients of equal size", fixed([mixed_state(6), mixed_state(7)], [4, 4])),
        ("keys in different orders", fixed([mixed_state(8), reordered(mixed_state(9))], [3, 1])),
        ("BatchNorm states, n = [5, 2, 9]", fixed([ref.clone_model_state(bn_model(i, i + 1)) for i in range(3)],
                                                 [5, 2, 9])),
        ("int64 counters 3 and 4 with n = [2, 3]: 3.6 rounds to 4", fixed(counters([3, 4]), [2, 3])),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        assert_state(label, "the average", got, expected)
        _fresh(label, got, list(inputs[0][0]))

    states = [mixed_state(0), mixed_state(1)]
    invalid = [
        ("2 states, 3 counts", BAD, "num_samples", fixed(states, [1, 2, 3])),
        ("a count of 0", BAD, "num_samples", fixed(states, [0, 4])),
        ("a count of 2.5", BAD, "num_samples", fixed(states, [2.5, 4])),
        ("no states", BAD, "states", fixed([], [])),
        ("states with different keys", BAD, "states",
         fixed([states[0], {k: v for k, v in states[1].items() if k != "half"}], [1, 1])),
    ]
    return run_torch_cases("aggregate_weighted_average", fn, ref.aggregate_weighted_average, cases, compare,
                           invalid, compare_with_inputs=True)

