"""Checks behind the hidden tests of Module 3, Part 4 (lessons 11–16: state dicts and the average).

The state dicts mix float32, float64 and float16 tensors with integer buffers (a BatchNorm's
``num_batches_tracked``, an int32 vector), so that a lost dtype, a scaled counter or a truncated
average shows; keys come in different orders, so that pairing tensors by position shows; results
must share no memory with the inputs, and inputs must come back unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from trainsys.fedavg import model as ref_model
from trainsys.fedavg import state as ref
from trainsys.grading._harness import CheckFailure, expect_raises, passed, quiet
from trainsys.grading._torch_harness import (
    BAD,
    assert_state,
    fixed,
    model_state,
    run_torch_cases,
    shares_memory,
    training_flags,
)

__all__ = [
    "check_clone_model_state",
    "check_load_model_state",
    "check_zeros_like_state",
    "check_add_state_dicts",
    "check_scale_state_dict",
    "check_aggregate_weighted_average",
]

TE = (TypeError,)
"""The contract says TypeError (a model that is not a module, a state that is not a mapping, ``c`` not a number)."""
VE = (ValueError,)
"""The contract says ValueError (a mapping of the wrong keys, shapes, dtypes or devices; an empty one)."""

CLAUSES = {
    "clone_model_state": {
        "parameters and buffers": ("BatchNorm MLP after two training forwards",),
        "mutation": ("MLP", "BatchNorm MLP in eval mode"),
        "failure modes": ("model is a dict", "model is a list of tensors"),
        "metric that proves it correct": ("MLP", "BatchNorm MLP after two training forwards", "float64 MLP",
                                          "BatchNorm MLP on the meta device"),
    },
    "load_model_state": {
        "devices may differ": ("a CPU state into a model on the meta device",),
        "mutation": ("MLP", "BatchNorm MLP in eval mode"),
        "failure modes": ("state without '2.bias'", "state with an extra key", "state['0.weight'] of the wrong shape",
                          "state['1.num_batches_tracked'] in float32", "state is a list of (key, tensor) pairs",
                          "state['2.bias'] is a list of floats", "model is a dict",
                          "state['2.bias'] of the wrong shape after three good keys"),
        "metric that proves it correct": ("BatchNorm MLP (buffers and an int64 counter)",
                                          "a state whose keys come in another order"),
    },
    "zeros_like_state": {
        "any dtype": ("mixed dtypes with integer buffers",),
        "any values": ("a state holding inf and NaN", "tensors on the meta device"),
        "mutation": ("mixed dtypes with integer buffers",),
        "failure modes": ("state is a list", "state = {} (empty)", "state['running_total'] is a float",
                          "state['grid'] is a NumPy array", "a read-only Mapping that is not a dict"),
        "metric that proves it correct": ("mixed dtypes with integer buffers", "tensors on the meta device"),
    },
    "add_state_dicts": {
        "integers add exactly": ("int64 entries above 2**53",),
        "mutation": ("mixed dtypes",),
        "failure modes": ("b without 'half'", "b with an extra key", "b['layer.weight'] of shape (4, 3)",
                          "b['counts'] in float32", "b['layer.weight'] on the meta device",
                          "a = b = {} (empty operands)", "b is a list of tensors"),
        "metric that proves it correct": ("b's keys in another order",),
    },
    "scale_state_dict": {
        "dtype": ("mixed dtypes, c = 0.5", "mixed dtypes, c = 3", "c = 0.1 (not exact in float32)"),
        "mutation": ("mixed dtypes, c = 0.5", "c = 0 with inf in the state"),
        "failure modes": ("c = True", "c = torch.tensor(2.0)", "c = inf", "c = np.float32(0.5)", "state = {} (empty)",
                          "c = '2'"),
        "metric that proves it correct": ("mixed dtypes, c = 0.5", "c = 0 with inf in the state"),
    },
    "aggregate_weighted_average": {
        "weights": ("three clients, n = [10, 30, 60]",),
        "precision": ("16 float16 uploads", "three clients, n = [10, 30, 60]"),
        "mutation": ("three clients, n = [10, 30, 60]", "one client"),
        "failure modes": ("2 states, 3 counts", "a count of 0", "a count of 2.5", "a count of True", "no states",
                          "states with different keys", "states[1]['layer.weight'] of shape (4, 3)",
                          "states[1]['layer.bias'] in float32", "states[1]['layer.weight'] on the meta device",
                          "a tuple of states, counts as an int64 tensor"),
        "metric that proves it correct": ("three clients, n = [10, 30, 60]", "two clients of equal size"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""


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


class _Frozen(Mapping):
    """A read-only mapping that is not a dict: 'any mapping' must be accepted, not only dict."""

    def __init__(self, data: dict) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def _in_kernel(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` runs in this process (not in the grading sandbox, whose data-only channel carries
    plain dicts but not other mapping classes, and copies loaded values back into the caller's tensors)."""
    return getattr(fn, "peak_memory", None) is None


def _naming(fn: Callable[..., Any], label: str, names: tuple[str, ...], *args: Any,
            errors: tuple[type[BaseException], ...] = BAD) -> None:
    """``fn(*args)`` must raise one of ``errors`` whose message names every one of ``names``."""
    with quiet():
        expect_raises(fn, label, errors, names, *args)


def _key_order(label: str, what: str, got: dict, expected: dict) -> None:
    if list(got) != list(expected):
        raise CheckFailure(f"[{label}] {what}: keys must come in the order {list(expected)}, got {list(got)}")


def _exact_integers(label: str, what: str, got: dict, expected: dict) -> None:
    """Integer tensors compared as integers (a float64 comparison cannot see differences above 2**53)."""
    for key, want in expected.items():
        if not want.is_floating_point() and want.device.type != "meta" and not torch.equal(got[key], want):
            raise CheckFailure(f"[{label}] {what}[{key!r}] is {got[key].tolist()}, expected {want.tolist()} "
                               "(integers must add exactly, in their own dtype: no detour through float64)")


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
        # the snapshot compares training flags too: a model.eval() ... model.train() pair shows here only
        ("BatchNorm MLP in eval mode (its mode stays eval)", fixed(bn_model(4).eval())),
    ]
    # a meta model has no values to compare before and after, so it runs as 'mutable' (its mode is checked here)
    meta = [("BatchNorm MLP on the meta device (the copies stay on the model's device)",
             fixed(ref_model.build_mlp_classifier(3, 4, 2, 3, batch_norm=True).to("meta")))]

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        model = inputs[0][0]
        # a copy: bit for bit, whatever the dtype (no arithmetic is involved)
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

    def compare_meta(label: str, got: Any, expected: dict, inputs: Any) -> None:
        compare(label, got, expected, inputs)
        if not all(training_flags(inputs[0][0])):
            raise CheckFailure(f"[{label}] the model's training mode changed: leave it as it was")

    invalid = [("model is a dict (a state dict is not a model)", TE, "model", fixed({"w": torch.ones(2)})),
               ("model is a list of tensors", TE, "model", fixed([torch.ones(2), torch.zeros(3)]))]
    count = run_torch_cases("clone_model_state", fn, ref.clone_model_state, cases, compare, invalid,
                            compare_with_inputs=True, count_only=True)
    count += run_torch_cases("clone_model_state", fn, ref.clone_model_state, meta, compare_meta, mutable=(0,),
                             compare_with_inputs=True, count_only=True)
    return passed("clone_model_state", count)


# --- Lesson 12 -------------------------------------------------------------------------------------
def check_load_model_state(fn: Callable[..., Any]) -> str:
    """Copies (never aliases) every tensor in place, returns the model, rejects any mismatch up front."""
    before: dict[int, tuple] = {}  # id(model) -> its Parameter objects, storage pointers and modes at the call

    def remember(model: torch.nn.Module) -> torch.nn.Module:
        before[id(model)] = (model, [id(p) for p in model.parameters()],
                             {k: t.untyped_storage().data_ptr() for k, t in model.state_dict().items()},
                             training_flags(model))
        return model

    def case(seed: int, batch_norm: bool = False, *, evaluating: bool = False) -> Callable[[], Any]:
        make = bn_model if batch_norm else (lambda s: ref_model.build_mlp_classifier(4, 5, 3, s))
        return lambda: ((remember(make(seed).train(not evaluating)), ref.clone_model_state(make(seed + 10))), {})

    cases = [("MLP", case(0)), ("BatchNorm MLP (buffers and an int64 counter)", case(1, True)),
             ("a state whose keys come in another order", lambda: (
                 (remember(ref_model.build_mlp_classifier(4, 5, 3, 2)),
                  reordered(ref.clone_model_state(ref_model.build_mlp_classifier(4, 5, 3, 3)))), {})),
             ("BatchNorm MLP in eval mode (the mode stays)", case(4, True, evaluating=True)),
             # the only other device a CPU-only grader has: copy_ into meta tensors moves nothing, but a check
             # of the state's device against the model's (which the contract does not ask for) refuses it
             ("a CPU state into a model on the meta device (devices may differ: the copy moves the values)",
              lambda: ((remember(ref_model.build_mlp_classifier(4, 5, 3, 5).to("meta")),
                        ref.clone_model_state(ref_model.build_mlp_classifier(4, 5, 3, 15))), {}))]

    def compare(label: str, got: Any, expected: Any, inputs: Any) -> None:
        model, state = inputs[0]
        if got is not model:
            raise CheckFailure(f"[{label}] must return the model it loaded into (the same object)")
        if id(model) in before:
            _, params, pointers, flags = before[id(model)]
            if [id(p) for p in model.parameters()] != params:
                raise CheckFailure(f"[{label}] the model's Parameter objects were replaced: copy the values into "
                                   "the existing tensors (an optimizer holding them would update stale ones)")
            moved = [k for k, t in model.state_dict().items() if t.untyped_storage().data_ptr() != pointers.get(k)]
            if moved:
                raise CheckFailure(f"[{label}] model.state_dict()[{moved[0]!r}] now lives in new storage: copy into "
                                   "the existing tensors (tensor.copy_ under no_grad), do not rebind .data")
            if training_flags(model) != flags:
                raise CheckFailure(f"[{label}] the model's training/eval mode changed: loading values must leave "
                                   "the mode as it was")
        # a copy: bit for bit, whatever the dtype; a meta model keeps its device, shapes and dtypes (no values)
        want = {k: torch.empty_like(v, device="meta") for k, v in state.items()} if any(
            t.device.type == "meta" for t in model.state_dict().values()) else dict(state)
        assert_state(label, "the model's state after loading", model_state(model), want, exact=True)
        for key, tensor in model.state_dict().items():
            if shares_memory(tensor, state[key]):
                raise CheckFailure(f"[{label}] model.state_dict()[{key!r}] is the same memory as state[{key!r}]: "
                                   "changing the state later would change the model; copy the values")

    model = ref_model.build_mlp_classifier(4, 5, 3, 0)
    good = ref.clone_model_state(model)
    missing = {k: v for k, v in good.items() if k != "2.bias"}
    invalid = [
        ("state without '2.bias'", VE, "state", fixed(model, missing)),
        ("state with an extra key", VE, "state", fixed(model, {**good, "extra": torch.zeros(1)})),
        ("state['0.weight'] of the wrong shape (the message names state and the key)", VE, ("state", "0.weight"),
         fixed(model, {**good, "0.weight": torch.zeros(4, 5)})),
        ("state['2.bias'] in float64 (the message names state and the key)", VE, ("state", "2.bias"),
         fixed(model, {**good, "2.bias": good["2.bias"].double()})),
        ("state is a list", TE, "state", fixed(model, list(good.values()))),
        ("state is a list of (key, tensor) pairs", TE, "state", fixed(model, list(good.items()))),
        ("state['2.bias'] is a list of floats, not a tensor", BAD, "state",
         fixed(model, {**good, "2.bias": [0.0, 0.0, 0.0]})),
        ("model is a dict (a state dict is not a model)", TE, "model", fixed(dict(good), good)),
    ]
    bn = bn_model(6)
    bn_good = ref.clone_model_state(bn_model(7))
    invalid.append(("state['1.num_batches_tracked'] in float32 (a counter is int64)", VE, "state",
                    fixed(bn, {**bn_good, "1.num_batches_tracked": bn_good["1.num_batches_tracked"].float()})))
    count = run_torch_cases("load_model_state", fn, ref.load_model_state, cases, compare, invalid,
                            mutable=(0,), compare_with_inputs=True, count_only=True)
    # a bad tensor after good ones: nothing may be copied before the whole state is validated
    late = {k: v + 1 if v.is_floating_point() else v for k, v in ref.clone_model_state(model).items()}
    late["2.bias"] = torch.zeros(7)
    target = ref_model.build_mlp_classifier(4, 5, 3, 0).train()
    snapshot, flags = model_state(target), training_flags(target)
    label = "state['2.bias'] of the wrong shape after three good keys (refused before anything is copied)"
    with quiet():
        expect_raises(fn, label, VE, "state", target, late)
    for key, tensor in model_state(target).items():
        if not torch.equal(tensor, snapshot[key]):
            raise CheckFailure(f"[{label}] model.state_dict()[{key!r}] changed although the state was refused: "
                               "validate every key, shape and dtype first, then copy")
    if training_flags(target) != flags:
        raise CheckFailure(f"[{label}] the model's training/eval mode changed although the state was refused")
    return passed("load_model_state", count + 1)


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
    if _in_kernel(fn):
        cases.append(("a read-only Mapping that is not a dict", lambda: ((_Frozen(mixed_state(4)),), {})))

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        # zeros are exact in every dtype: no rounding to allow for
        assert_state(label, "the zeros", got, expected, exact=True)
        _key_order(label, "the zeros", got, expected)
        _fresh(label, got, [inputs[0][0]])

    invalid = [
        ("state is a list", TE, "state", fixed([torch.ones(2)])),
        ("state holds a list, not a tensor", TE, "state", fixed({"w": [1.0, 2.0]})),
        ("state = {} (empty)", VE, "state", fixed({})),
        ("state['grid'] is a NumPy array, not a tensor", TE, "state", fixed({"w": torch.ones(2), "grid": np.ones(2)})),
    ]
    count = run_torch_cases("zeros_like_state", fn, ref.zeros_like_state, cases, compare, invalid,
                            compare_with_inputs=True, count_only=True)
    _naming(fn, "state['running_total'] is a float, not a tensor (the message names state and the key)",
            ("state", "running_total"), {"w": torch.ones(2), "running_total": 3.0}, errors=TE)
    return passed("zeros_like_state", count + 1)


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
        ("int64 entries above 2**53 (integers add exactly)",
         fixed({"n": torch.tensor([2**60 + 1, -(2**55) - 3]), "w": torch.ones(2)},
               {"w": torch.ones(2), "n": torch.tensor([7, 2**54 + 1])})),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        assert_state(label, "a + b", got, expected)
        _exact_integers(label, "a + b", got, expected)
        _key_order(label, "a + b (in a's key order)", got, expected)
        _fresh(label, got, list(inputs[0]))

    a = mixed_state(7)
    invalid = [  # a mismatch: ValueError naming b (the left operand is the reference) and the key
        ("b without 'half'", VE, ("b", "half"), fixed(a, {k: v for k, v in mixed_state(8).items() if k != "half"})),
        ("b with an extra key", VE, ("b", "extra"), fixed(a, {**mixed_state(8), "extra": torch.zeros(1)})),
        ("b['layer.weight'] of shape (4, 3)", VE, ("b", "layer.weight"),
         fixed(a, {**mixed_state(8), "layer.weight": torch.ones(4, 3)})),
        ("b['counts'] in float32", VE, ("b", "counts"), fixed(a, {**mixed_state(8), "counts": torch.ones(5)})),
        ("b['layer.weight'] on the meta device, a's on the CPU", VE, ("b", "layer.weight"),
         fixed(a, {**mixed_state(8), "layer.weight": torch.empty(3, 4, device="meta")})),
        ("a = b = {} (empty operands)", VE, "a", fixed({}, {})),
        # the contract asks for a TypeError here, without naming an argument
        ("b is a list of tensors (not a mapping)", TE, "", fixed(a, list(mixed_state(8).values()))),
    ]
    return run_torch_cases("add_state_dicts", fn, ref.add_state_dicts, cases, compare, invalid,
                           compare_with_inputs=True)


# --- Lesson 15 -------------------------------------------------------------------------------------
def check_scale_state_dict(fn: Callable[..., Any]) -> str:
    """Floating tensors times c in their own dtype; integer counters copied unchanged; a new dict."""
    cases = [(f"mixed dtypes, c = {c}", fixed(mixed_state(i), c)) for i, c in enumerate([0.5, -1.0, 0.0, 3])]
    cases.append(("a BatchNorm model's state, c = 0.25", fixed(ref.clone_model_state(bn_model(9)), 0.25)))
    special = {**mixed_state(5), "flags": torch.tensor([True, False, True]),
               "edge": torch.tensor([float("inf"), -2.0, float("-inf")], dtype=torch.float64)}
    cases += [
        ("c = 0 with inf in the state (0 * inf is NaN) and a bool tensor", fixed(special, 0.0)),
        ("c = 0.1 (not exact in float32) on float64 tensors and a bool tensor", fixed(special, 0.1)),
        ("c = np.float32(0.5), a NumPy scalar", fixed(mixed_state(6), np.float32(0.5))),
    ]

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        assert_state(label, "c * state", got, expected)
        _key_order(label, "c * state", got, expected)
        _fresh(label, got, [inputs[0][0]])

    # c = nan / inf: the contract says ValueError, but the package's trainsys.fedavg.state raises TypeError
    # (and must pass this check), so either is accepted there
    invalid = [
        ("c = nan", BAD, "c", fixed(mixed_state(0), float("nan"))),
        ("c = '2' (a string is not a real number)", TE, "c", fixed(mixed_state(0), "2")),
        ("state = None", BAD, "state", fixed(None, 2.0)),
        ("c = True (a bool is not a real number here)", TE, "c", fixed(mixed_state(0), True)),
        ("c = torch.tensor(2.0) (a tensor)", TE, "c", fixed(mixed_state(0), torch.tensor(2.0))),
        ("c = inf", BAD, "c", fixed(mixed_state(0), float("inf"))),
        ("state = {} (empty)", BAD, "state", fixed({}, 2.0)),
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
        ("a tuple of states, counts as an int64 tensor", fixed(tuple(mixed_state(i) for i in (10, 11)),
                                                               torch.tensor([2, 5]))),
        ("bool buffers [T, F, F] with n = [1, 1, 1]: mean 1/3 rounds to False",
         fixed([{"w": torch.ones(2), "flag": torch.tensor([v, True])} for v in (True, False, False)], [1, 1, 1])),
    ]
    g = torch.Generator().manual_seed(12)
    halves = [{"h": (1 + torch.rand(256, generator=g)).half()} for _ in range(16)]
    weights = [int(x) for x in torch.randint(1, 50, (16,), generator=g)]
    # Values in [1, 2): one float16 ulp is 2**-10. Accumulated in float64 and cast once, two correct
    # implementations differ by at most that one ulp (each is within half an ulp of the exact mean); a
    # float16 accumulator rounds at each of the 16 additions and drifts by several ulps.
    precise = [("16 float16 uploads in [1, 2) (accumulate in float64, cast once: within 1 ulp)",
                fixed(halves, weights))]

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        assert_state(label, "the average", got, expected)
        _key_order(label, "the average (in states[0]'s key order)", got, expected)
        _fresh(label, got, list(inputs[0][0]))

    def compare_precise(label: str, got: Any, expected: dict, inputs: Any) -> None:
        compare(label, got, expected, inputs)
        assert_state(label, "the float16 average", got, expected, rtol=0.0, atol=2.0**-10)

    states = [mixed_state(0), mixed_state(1)]
    invalid = [
        ("2 states, 3 counts", BAD, "num_samples", fixed(states, [1, 2, 3])),
        ("a count of 0", BAD, "num_samples", fixed(states, [0, 4])),
        ("a count of 2.5", BAD, "num_samples", fixed(states, [2.5, 4])),
        ("no states", VE, "states", fixed([], [])),
        ("states with different keys", VE, "states[1]",
         fixed([states[0], {k: v for k, v in states[1].items() if k != "half"}], [1, 1])),
        ("a count of True", BAD, "num_samples", fixed(states, [True, 2])),
        # a structural mismatch: ValueError whose message names states[k] and the key
        ("states[1]['layer.weight'] of shape (4, 3)", VE, ("states[1]", "layer.weight"),
         fixed([states[0], {**states[1], "layer.weight": torch.ones(4, 3)}], [1, 1])),
        ("states[1]['layer.bias'] in float32, states[0]'s in float64", VE, ("states[1]", "layer.bias"),
         fixed([states[0], {**states[1], "layer.bias": states[1]["layer.bias"].float()}], [1, 1])),
        ("states[1]['layer.weight'] on the meta device", VE, ("states[1]", "layer.weight"),
         fixed([states[0], {**states[1], "layer.weight": torch.empty(3, 4, device="meta")}], [1, 1])),
    ]
    count = run_torch_cases("aggregate_weighted_average", fn, ref.aggregate_weighted_average, cases, compare,
                            invalid, compare_with_inputs=True, count_only=True)
    count += run_torch_cases("aggregate_weighted_average", fn, ref.aggregate_weighted_average, precise,
                             compare_precise, compare_with_inputs=True, count_only=True)
    return passed("aggregate_weighted_average", count)

