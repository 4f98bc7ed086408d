"""Checks behind the hidden tests of Module 3, Parts 1–2 (lessons 1–6: model, data, partitions).

Deterministic constructions (the model, the dataset) must equal the reference bit for bit, since
their draw order is the contract. Random splits and partitions are checked first by their properties —
disjoint, covering, sizes, stratification or shard structure, the same result for the same seed and
a different one for another seed — for messages a student can act on, then against the reference's
draw, since each lesson's contract spells out which generator is called, in which order. Whether the
global generators (torch's, NumPy's) are left as the reference leaves them — untouched — is a case of
its own, run first (:func:`keeps_global_generators`); error types are the ones the contract names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from trainsys.fedavg import data as ref_data
from trainsys.fedavg import model as ref_model
from trainsys.fedavg import partition as ref_part
from trainsys.grading._harness import CheckFailure, assert_tuple, call, passed, quiet
from trainsys.grading._torch_harness import (
    BAD,
    assert_equal,
    assert_tensor,
    fixed,
    guarded,
    row_index,
    rows_to_indices,
    run_torch_cases,
    shares_memory,
)

__all__ = [
    "check_build_mlp_classifier",
    "check_build_synthetic_dataset",
    "check_train_test_split_dataset",
    "check_partition_data_iid",
    "check_partition_data_non_iid",
    "check_count_client_samples",
]

CLAUSES = {
    "build_mlp_classifier": {
        "randomness": ("global generators",),
        "output": ("d_in, d_hidden, n_classes, seed = (4, 8, 3, 0)",),
        "failure modes": ("n_classes = 1", "d_hidden = 2.5", "seed = -1", "d_hidden = 0", "seed = 2**63",
                          "seed = True", "batch_norm = 1", "d_in = 4.0"),
        "metric that proves it correct": ("d_in, d_hidden, n_classes, seed = (4, 8, 3, 0)",
                                          "d_in, d_hidden, n_classes, seed = (6, 6, 6, 7)",
                                          "d_in, d_hidden, n_classes, seed = (5, 7, 3, 1), batch_norm=True"),
    },
    "build_synthetic_dataset": {
        "mutation": ("global generators",),
        "failure modes": ("n = 0", "n_classes = 1", "d_in = -1", "seed = '0'", "seed = 2**63", "n = True"),
        "metric that proves it correct": ("n, d_in, n_classes, seed = (50, 4, 3, 0)",
                                          "n, d_in, n_classes, seed = (1, 2, 2, 1)"),
    },
    "train_test_split_dataset": {
        "mutation": ("n=60, n_classes=3, test_fraction=0.25, seed=0", "4 examples, test part of one example"),
        "failure modes": ("test_fraction = NaN", "test_fraction = 0.95 on 10 examples", "dataset is a tuple",
                          "seed = -1"),
        "metric that proves it correct": ("n=60, n_classes=3, test_fraction=0.25, seed=0",
                                          "n=37, n_classes=4, test_fraction=0.3, seed=1"),
    },
    "partition_data_iid": {
        "mutation": ("global generators",),
        "failure modes": ("num_clients = 7 > 6 examples", "num_clients = 2.0", "seed = -3", "num_clients = True",
                          "dataset is a list of 6 numbers"),
        "metric that proves it correct": ("n=20, num_clients=4, seed=0", "n=23, num_clients=5, seed=1"),
    },
    "partition_data_non_iid": {
        "mutation": ("global generators, shards", "global generators, Dirichlet"),
        "failure modes": ("num_clients * shards_per_client = 14 > 12 examples", "alpha = inf, one client",
                          "alpha = True", "Dirichlet alpha=2, shards_per_client=500"),
        "metric that proves it correct": ("n=60, n_classes=3, num_clients=6, shards_per_client=2, seed=0",
                                          "n=40, n_classes=4, num_clients=4, shards_per_client=3, seed=2",
                                          "Dirichlet alpha=1000", "Dirichlet alpha=0.1"),
    },
    "count_client_samples": {
        "mutation": ("IID, 4 clients, 3 classes",),
        "failure modes": ("2 of 5 clients", "partition of float tensors", "partition[1] is int32",
                          "partition[1] repeats index 2", "partition[1] is an empty tensor",
                          "partition[1] holds the negative index -1", "partition[1] is 2-D",
                          "a tuple of 3 clients"),
        "metric that proves it correct": ("IID, 4 clients, 3 classes", "shards, 5 clients, 5 classes"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

TE = (TypeError,)
"""The contract says TypeError (a wrong type: a float or a bool for an integer, not a list, a wrong dtype)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value: below a minimum, out of range)."""


def dataset(n: int, d_in: int = 3, n_classes: int = 3, seed: int = 0) -> ref_data.LabelledDataset:
    return ref_data.build_synthetic_dataset(n, d_in, n_classes, seed)


UNTOUCHED = "(torch's and NumPy's global generators must be left as they were)"


def _same_numpy_state(a: tuple, b: tuple) -> bool:
    """Two ``np.random.get_state()`` tuples: (name, key array, position, has_gauss, cached_gaussian)."""
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and tuple(a[2:]) == tuple(b[2:])


def keeps_global_generators(fn: Callable[..., Any], reference: Callable[..., Any], label: str,
                            make: Callable[[], Any]) -> None:
    """The clause "torch's global generator is left untouched", as its own case.

    The student's call and the reference's start from the same global states of torch's and NumPy's
    generators (seeded with an unrelated number and advanced, so that re-seeding with the case's seed
    cannot land on the starting state); the states each call leaves must be equal. The caller's
    global states are restored afterwards. Run before the other cases, so that an answer whose only
    fault is a global draw or a re-seed fails here, with this message.
    """
    if not callable(fn):
        return  # run_torch_cases, next, says so
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    try:
        torch.manual_seed(20_260_601)
        torch.rand(3)
        np.random.seed(20_260_601)
        np.random.rand(3)
        start = torch.get_rng_state(), np.random.get_state()
        args, kwargs = make()
        with quiet():
            call(fn, label, *args, **kwargs)
        got = torch.get_rng_state(), np.random.get_state()
        torch.set_rng_state(start[0])
        np.random.set_state(start[1])
        args, kwargs = make()
        with quiet():
            reference(*args, **kwargs)
        want = torch.get_rng_state(), np.random.get_state()
    finally:
        torch.set_rng_state(torch_state)
        np.random.set_state(numpy_state)
    if not torch.equal(got[0], want[0]):
        raise CheckFailure(f"[{label}] torch's global random generator is not left as the contract leaves it "
                           "(untouched): the function re-seeded it (torch.manual_seed) or drew from it (torch.rand*, "
                           "nn.Linear's own initialisation, ... without generator=); draw only from the private "
                           "torch.Generator().manual_seed(seed)")
    if not _same_numpy_state(got[1], want[1]):
        raise CheckFailure(f"[{label}] NumPy's global random generator is not left as the contract leaves it "
                           "(untouched): the function called np.random.seed or drew from np.random.*; use the "
                           "generator the contract names (np.random.default_rng(seed) for Dirichlet)")


# --- Lesson 1 --------------------------------------------------------------------------------------
def check_build_mlp_classifier(fn: Callable[..., Any]) -> str:
    """Same state dict (keys, order, values) and the same logits as the reference; global RNG untouched."""
    configs = [((4, 8, 3, 0), {}), ((1, 1, 2, 5), {}), ((20, 32, 10, 123), {}), ((6, 6, 6, 7), {}),
               ((5, 7, 3, 1), {"batch_norm": True})]
    cases = [(f"d_in, d_hidden, n_classes, seed = {a}{', batch_norm=True' if k else ''}", fixed(*a, **k))
             for a, k in configs]

    def compare(label: str, got: Any, expected: torch.nn.Module) -> None:
        if not isinstance(got, torch.nn.Module):
            raise CheckFailure(f"[{label}] must return a torch.nn.Module, got {type(got).__name__}")
        modes = [m.training for m in got.modules()]
        if not all(modes):
            raise CheckFailure(f"[{label}] the model must come back in training mode, as nn.Sequential builds it; "
                               f"{modes.count(False)} of its modules are in eval mode")
        got_keys, want_keys = list(got.state_dict()), list(expected.state_dict())
        if got_keys != want_keys:
            raise CheckFailure(f"[{label}] state-dict keys are {got_keys}, expected {want_keys} "
                               "(an nn.Sequential of Linear, [BatchNorm1d,] ReLU, Linear)")
        for key, tensor in expected.state_dict().items():
            # exact: the contract fixes the four draws bit for bit (uniform_ on float32 from one seeded generator)
            assert_tensor(label, f"state_dict()[{key!r}]", got.state_dict()[key], tensor, exact=True)
        X = torch.randn(5, expected[0].in_features, generator=torch.Generator().manual_seed(1))
        got.eval(), expected.eval()
        with torch.no_grad():
            # float32 default (rtol 2e-5, atol 2e-6: 2·γ_170): equal weights, so only a reordered matmul may differ
            # (sums of at most 32 products: ~32 eps = 4e-6 relative)
            assert_tensor(label, "the logits model(X) for X of shape (5, d_in)", got(X), expected(X))

    invalid = [
        ("d_in = 0", VE, "d_in", fixed(0, 4, 3, 0)),
        ("n_classes = 1", VE, "n_classes", fixed(3, 4, 1, 0)),
        ("d_hidden = 2.5", TE, "d_hidden", fixed(3, 2.5, 3, 0)),
        ("seed = -1", VE, "seed", fixed(3, 4, 3, -1)),
        ("d_hidden = 0", VE, "d_hidden", fixed(3, 0, 3, 0)),
        ("seed = 2**63 (above 2**63 - 1)", VE, "seed", fixed(3, 4, 3, 2**63)),
        ("seed = True (a bool is not an integer here)", TE, "seed", fixed(3, 4, 3, True)),
        ("batch_norm = 1 (not a bool)", TE, "batch_norm", fixed(3, 4, 3, 0, batch_norm=1)),
        ("d_in = 4.0 (a float, not an integer)", TE, "d_in", fixed(4.0, 4, 3, 0)),
    ]
    keeps_global_generators(fn, ref_model.build_mlp_classifier, f"global generators: d_in, d_hidden, n_classes, "
                            f"seed = (4, 8, 3, 0) {UNTOUCHED}", fixed(4, 8, 3, 0))
    count = run_torch_cases("build_mlp_classifier", fn, ref_model.build_mlp_classifier, cases, compare, invalid,
                            count_only=True)
    return passed("build_mlp_classifier", count + 1)


# --- Lesson 2 --------------------------------------------------------------------------------------
def check_build_synthetic_dataset(fn: Callable[..., Any]) -> str:
    """Bit-identical features and labels (the draw order G, then X is the contract), float32/int64."""
    sizes = [(50, 4, 3, 0), (1, 2, 2, 1), (40, 3, 5, 2), (64, 10, 10, 3), (30, 8, 2, 4)]
    cases = [(f"n, d_in, n_classes, seed = {s}", fixed(*s)) for s in sizes]

    def compare(label: str, got: Any, expected: ref_data.LabelledDataset) -> None:
        if not isinstance(got, ref_data.LabelledDataset):
            raise CheckFailure(f"[{label}] must return a LabelledDataset, got {type(got).__name__}")
        # exact: the draw order is the contract, so the features are the generator's float32 numbers bit for bit
        assert_tensor(label, "features", got.features, expected.features, exact=True)
        # exact: int64 labels (integers always compare exactly)
        assert_tensor(label, "labels", got.labels, expected.labels, exact=True)
        assert_equal(label, "n_classes", got.n_classes, expected.n_classes)

    invalid = [
        ("n = 0", VE, "n", fixed(0, 3, 3, 0)),
        ("n_classes = 1", VE, "n_classes", fixed(10, 3, 1, 0)),
        ("d_in = -1", VE, "d_in", fixed(10, -1, 3, 0)),
        ("seed = '0'", TE, "seed", fixed(10, 3, 3, "0")),
        ("seed = 2**63 (above 2**63 - 1)", VE, "seed", fixed(10, 3, 3, 2**63)),
        ("n = True (a bool is not an integer here)", TE, "n", fixed(True, 3, 3, 0)),
    ]
    keeps_global_generators(fn, ref_data.build_synthetic_dataset, f"global generators: n, d_in, n_classes, seed = "
                            f"(50, 4, 3, 0) {UNTOUCHED}", fixed(50, 4, 3, 0))
    count = run_torch_cases("build_synthetic_dataset", fn, ref_data.build_synthetic_dataset, cases, compare, invalid,
                            count_only=True)
    return passed("build_synthetic_dataset", count + 1)


# --- Lesson 3 --------------------------------------------------------------------------------------
def check_train_test_split_dataset(fn: Callable[..., Any]) -> str:
    """Disjoint and covering, per-class test counts ⌊f·n_c + ½⌋, original order kept, seeded."""
    absent = dataset(30, 3, 2, 9)
    absent = ref_data.LabelledDataset(absent.features, absent.labels, 3)  # class 2 has no example
    setups = [(dataset(60, 3, 3, 0), 0.25, 0), (dataset(37, 3, 4, 1), 0.3, 1), (dataset(10, 2, 2, 2), 0.5, 2),
              (dataset(100, 10, 10, 3), 0.2, 3), (dataset(45, 4, 3, 4), 0.1, 4), (absent, 0.4, 5)]
    cases = [(f"n={len(d)}, n_classes={d.n_classes}, test_fraction={f}, seed={s}", fixed(d, f, s))
             for d, f, s in setups]

    def parts(label: str, got: Any, data: ref_data.LabelledDataset) -> tuple[list[int], list[int]]:
        train, test = assert_tuple(label, "the result (train, test)", got, 2)
        lookup = row_index(data)
        out = []
        for what, part in (("train", train), ("test", test)):
            if not isinstance(part, ref_data.LabelledDataset):
                raise CheckFailure(f"[{label}] {what} must be a LabelledDataset, got {type(part).__name__}")
            for field in ("features", "labels"):
                mine = getattr(part, field)
                others = [(f"the input's {field}", getattr(data, field))]
                if what == "test":
                    others.append((f"train.{field}", getattr(train, field)))
                for name, other in others:
                    if isinstance(mine, torch.Tensor) and isinstance(other, torch.Tensor) \
                            and shares_memory(mine, other):
                        raise CheckFailure(f"[{label}] {what}.{field} shares storage with {name}: both parts "
                                           "must be new tensors (gather with an index tensor, e.g. X[idx], "
                                           "never a slice X[a:b], which is a view)")
            assert_equal(label, f"{what}.n_classes", part.n_classes, data.n_classes)
            idx = rows_to_indices(label, what, lookup, part.features)
            # exact: int64 labels, gathered, never computed
            assert_tensor(label, f"{what}.labels", part.labels, data.labels[idx], exact=True)
            if idx != sorted(set(idx)):
                raise CheckFailure(f"[{label}] {what} must keep the original order, each example once")
            out.append(idx)
        return out[0], out[1]

    def compare(label: str, got: Any, expected: tuple, inputs: Any) -> None:
        data, fraction, seed = inputs[0]
        train, test = parts(label, got, data)
        if set(train) & set(test) or len(train) + len(test) != len(data):
            raise CheckFailure(f"[{label}] train and test must be disjoint and cover the dataset: "
                               f"{len(set(train) & set(test))} shared, {len(train) + len(test)} of {len(data)} used")
        want = torch.bincount(expected[1].labels, minlength=data.n_classes).tolist()
        have = torch.bincount(data.labels[test], minlength=data.n_classes).tolist()
        if have != want:
            raise CheckFailure(f"[{label}] test examples per class are {have}, expected {want} "
                               "(stratified: round(test_fraction * n_c) of each class, halves up)")
        want_test = parts(label, expected, data)[1]
        if test != want_test:
            first = next(i for i, (a, b) in enumerate(zip(test + [None] * len(want_test), want_test)) if a != b)
            raise CheckFailure(f"[{label}] the test set is not the contract's draw: sorted test indices differ "
                               f"first at position {first} (got {test[first:first + 5]}, expected "
                               f"{want_test[first:first + 5]}); use one g = torch.Generator().manual_seed(seed) "
                               "for all classes in ascending class order, permute each class's ascending indices "
                               "with torch.randperm(n_c, generator=g), and send the first t_c to the test set")
        again = parts(label, guarded(fn, label, copy.deepcopy(data), fraction, seed), data)
        if again != (train, test):
            raise CheckFailure(f"[{label}] the same seed must give the same split")
        other = parts(label, guarded(fn, label, copy.deepcopy(data), fraction, seed + 100), data)
        if len(data) >= 30 and other[1] == test:
            raise CheckFailure(f"[{label}] seed {seed + 100} gives the same test set as seed {seed}: "
                               "the split must be random, drawn from the seed")

    one_test = dataset(4, 3, 2, 6)  # labels 0, 0, 0, 1: t = (1, 0), so the test part is one example
    one_test = ref_data.LabelledDataset(one_test.features, torch.tensor([0, 0, 0, 1]), 2)
    setups.append((one_test, 0.3, 7))
    cases.append(("4 examples, test part of one example (a one-row slice would be a view)",
                  fixed(one_test, 0.3, 7)))
    d = dataset(20)
    small = dataset(10, 3, 3, 8)  # every class has at most 9 examples: f = 0.95 sends all of them to test
    invalid = [
        ("test_fraction = NaN", BAD, "test_fraction", fixed(d, float("nan"), 0)),
        ("test_fraction = 0.95 on 10 examples leaves the training part empty", BAD, "test_fraction",
         fixed(small, 0.95, 0)),
        ("test_fraction = 0", BAD, "test_fraction", fixed(d, 0.0, 0)),
        ("test_fraction = 1", BAD, "test_fraction", fixed(d, 1.0, 0)),
        ("test_fraction = 1.5", BAD, "test_fraction", fixed(d, 1.5, 0)),
        ("dataset is a tuple", TE, "dataset", fixed((d.features, d.labels), 0.2, 0)),
        ("seed = -1", BAD, "seed", fixed(d, 0.2, -1)),
    ]
    return run_torch_cases("train_test_split_dataset", fn, ref_data.train_test_split_dataset, cases, compare,
                           invalid, compare_with_inputs=True)


# --- Lessons 4–5: shared partition checks ----------------------------------------------------------
def _as_partition(label: str, got: Any, num_clients: int, n: int) -> list[list[int]]:
    if not isinstance(got, list) or len(got) != num_clients:
        kind = f"a list of {len(got)}" if isinstance(got, list) else type(got).__name__
        raise CheckFailure(f"[{label}] must return a list of {num_clients} index tensors, got {kind}")
    out = []
    for k, part in enumerate(got):
        if not isinstance(part, torch.Tensor) or part.dtype != torch.int64 or part.ndim != 1:
            raise CheckFailure(f"[{label}] client {k}'s indices must be a 1-D int64 tensor, got "
                               f"{getattr(part, 'dtype', type(part).__name__)}")
        idx = part.tolist()
        if idx != sorted(idx):
            raise CheckFailure(f"[{label}] client {k}'s indices must be sorted ascending")
        if not idx:
            raise CheckFailure(f"[{label}] client {k} has no examples")
        out.append(idx)
    flat = [i for idx in out for i in idx]
    if sorted(flat) != list(range(n)):
        raise CheckFailure(f"[{label}] the clients' indices must be disjoint and cover range({n}): "
                           f"{len(flat)} indices, {len(set(flat))} distinct")
    return out


def _same_draw(label: str, parts: list[list[int]], expected: list, rule: str) -> None:
    """The contract fixes the draw, so the clients must be the reference's, client by client."""
    want = [p.tolist() for p in expected]
    for k, (mine, theirs) in enumerate(zip(parts, want)):
        if mine != theirs:
            raise CheckFailure(f"[{label}] client {k} holds {mine[:8]}{'...' if len(mine) > 8 else ''}, the contract's "
                               f"draw gives it {theirs[:8]}{'...' if len(theirs) > 8 else ''} ({rule})")


def _seeded(label: str, fn: Callable[..., Any], args: tuple, seed_at: int, first: list, n: int, k: int) -> None:
    """Same seed → same partition; another seed → another one."""
    again = _as_partition(label, guarded(fn, label, *copy.deepcopy(args)), k, n)
    if again != first:
        raise CheckFailure(f"[{label}] the same seed must give the same partition")
    if k > 1:
        other_args = list(copy.deepcopy(args))
        other_args[seed_at] += 100
        if _as_partition(label, guarded(fn, label, *other_args), k, n) == first:
            raise CheckFailure(f"[{label}] seed +100 gives the same partition: it must be drawn from the seed")


# --- Lesson 4 --------------------------------------------------------------------------------------
def check_partition_data_iid(fn: Callable[..., Any]) -> str:
    """Disjoint, covering, sizes ⌈n/K⌉ for the first n mod K clients, shuffled, seeded."""
    setups = [(20, 4, 0), (23, 5, 1), (7, 7, 2), (9, 1, 3), (50, 3, 4)]
    cases = [(f"n={n}, num_clients={k}, seed={s}", fixed(dataset(n, seed=s), k, s)) for n, k, s in setups]

    def compare(label: str, got: Any, expected: list, inputs: Any) -> None:
        data, k, seed = inputs[0]
        parts = _as_partition(label, got, k, len(data))
        sizes, want = [len(p) for p in parts], [len(p) for p in expected]
        if sizes != want:
            raise CheckFailure(f"[{label}] client sizes are {sizes}, expected {want} "
                               "(near-equal; the first n mod K clients take one extra example)")
        contiguous = [list(range(sum(want[:i]), sum(want[:i + 1]))) for i in range(k)]
        if k > 1 and len(data) >= 10 and parts == contiguous:
            raise CheckFailure(f"[{label}] the clients hold consecutive blocks: shuffle before cutting")
        _same_draw(label, parts, expected, "perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)), "
                   "cut into consecutive pieces of the sizes above with torch.split, each piece sorted")
        _seeded(label, fn, (data, k, seed), 2, parts, len(data), k)

    d = dataset(6)
    invalid = [
        ("num_clients = 0", VE, "num_clients", fixed(d, 0, 0)),
        ("num_clients = 7 > 6 examples", VE, "num_clients", fixed(d, 7, 0)),
        ("num_clients = 2.0", TE, "num_clients", fixed(d, 2.0, 0)),
        ("seed = -3", BAD, "seed", fixed(d, 2, -3)),
        ("num_clients = True (a bool is not an integer here)", TE, "num_clients", fixed(d, True, 0)),
        ("dataset is a list of 6 numbers, not a LabelledDataset", BAD, "dataset", fixed(list(range(6)), 2, 0)),
    ]
    keeps_global_generators(fn, ref_part.partition_data_iid, f"global generators: n=20, num_clients=4, seed=0 "
                            f"{UNTOUCHED}", fixed(dataset(20), 4, 0))
    count = run_torch_cases("partition_data_iid", fn, ref_part.partition_data_iid, cases, compare, invalid,
                            compare_with_inputs=True, count_only=True)
    return passed("partition_data_iid", count + 1)


# --- Lesson 5 --------------------------------------------------------------------------------------
def check_partition_data_non_iid(fn: Callable[..., Any]) -> str:
    """Shards of the label-sorted order dealt ``s`` per client at random; Dirichlet skew that follows alpha."""
    setups = [(60, 3, 6, 2, 0), (50, 5, 5, 2, 1), (40, 4, 4, 3, 2), (30, 3, 3, 1, 3), (43, 4, 4, 2, 4)]
    cases = [(f"n={n}, n_classes={c}, num_clients={k}, shards_per_client={s}, seed={sd}",
              fixed(dataset(n, 3, c, sd), k, s, sd)) for n, c, k, s, sd in setups]

    def compare(label: str, got: Any, expected: list, inputs: Any) -> None:
        data, k, s, seed = inputs[0]
        parts = _as_partition(label, got, k, len(data))
        order = torch.sort(data.labels, stable=True).indices
        shards = [sorted(x.tolist()) for x in torch.split(order, ref_part.split_sizes(len(data), k * s))]
        owner = {i: j for j, shard in enumerate(shards) for i in shard}
        for c, idx in enumerate(parts):
            mine = {owner[i] for i in idx}
            if len(mine) != s or sorted(idx) != sorted(i for j in mine for i in shards[j]):
                raise CheckFailure(f"[{label}] client {c} does not hold exactly {s} whole shards of the "
                                   "label-sorted order (sort by label, stable, then cut into K*s shards)")
        _same_draw(label, parts, expected, "deal = torch.randperm(K*s, generator=torch.Generator().manual_seed(seed)); "
                   "client k gets shards deal[k*s : (k+1)*s]")
        _seeded(label, fn, (data, k, s, seed), 3, parts, len(data), k)

    keeps_global_generators(fn, ref_part.partition_data_non_iid, f"global generators, shards: n=60, num_clients=6, "
                            f"shards_per_client=2, seed=0 {UNTOUCHED}",
                            fixed(dataset(60, 3, 3, 0), 6, 2, 0))
    keeps_global_generators(fn, ref_part.partition_data_non_iid, f"global generators, Dirichlet: n=400, num_clients=4, "
                            f"alpha=1, seed=5 {UNTOUCHED}",
                            fixed(dataset(400, 4, 4, 11), 4, 2, 5, alpha=1.0))
    count = 2 + run_torch_cases("partition_data_non_iid", fn, ref_part.partition_data_non_iid, cases, compare,
                                compare_with_inputs=True, count_only=True)
    big = dataset(400, 4, 4, 11)
    retry = dataset(60, 3, 3, 11)  # seed 5, alpha 0.2, 6 clients: the first 3 draws leave a client empty
    dirichlet = [("Dirichlet alpha=1000 (close to IID)", fixed(big, 4, 2, 5, alpha=1000.0)),
                 ("Dirichlet alpha=0.1 (strong skew)", fixed(big, 4, 2, 6, alpha=0.1)),
                 ("Dirichlet alpha=2, shards_per_client=500 (K*s > n, but s is ignored when alpha is given)",
                  fixed(big, 4, 500, 7, alpha=2.0)),
                 ("Dirichlet alpha=0.2, 6 clients on 60 examples (the first 3 draws leave a client empty)",
                  fixed(retry, 6, 2, 5, alpha=0.2))]

    def compare_dirichlet(label: str, got: Any, expected: list, inputs: Any) -> None:
        data, k, s, seed = inputs[0]
        alpha = inputs[1]["alpha"]
        parts = _as_partition(label, got, k, len(data))
        shares = torch.stack([torch.bincount(data.labels[p], minlength=4).double() / len(p)
                              for p in map(torch.tensor, parts)])  # (K, C)
        overall = torch.bincount(data.labels, minlength=4).double() / len(data)
        spread = float((shares - overall).abs().max())
        if alpha > 100 and spread > 0.15:
            raise CheckFailure(f"[{label}] a client's label share differs from the overall share by {spread:.2f}; "
                               "with alpha=1000 every client should look like the whole dataset")
        if alpha < 1 and float(shares.max(dim=1).values.mean()) < 0.6:
            raise CheckFailure(f"[{label}] clients' largest label share averages "
                               f"{float(shares.max(dim=1).values.mean()):.2f}; alpha=0.1 must concentrate labels")
        _same_draw(label, parts, expected, "rng = np.random.default_rng(seed) made once; for each class c ascending: "
                   "rng.permutation of its indices, then rng.dirichlet(alpha * ones(K)), cut at "
                   "floor(n_c * cumsum(p)[:-1]); the whole draw repeated with the same rng while a client is empty")

    count += run_torch_cases("partition_data_non_iid", fn, ref_part.partition_data_non_iid, dirichlet,
                                      compare_dirichlet, compare_with_inputs=True, count_only=True)
    d = dataset(12)
    invalid = [
        ("num_clients = 0", BAD, "num_clients", fixed(d, 0, 2, 0)),
        ("num_clients * shards_per_client = 14 > 12 examples", BAD, "shards_per_client", fixed(d, 7, 2, 0)),
        ("shards_per_client = 0", BAD, "shards_per_client", fixed(d, 3, 0, 0)),
        ("alpha = 0", BAD, "alpha", fixed(d, 3, 2, 0, alpha=0.0)),
        ("alpha = -1", BAD, "alpha", fixed(d, 3, 2, 0, alpha=-1.0)),
        ("alpha = inf", BAD, "alpha", fixed(d, 3, 2, 0, alpha=float("inf"))),
        ("alpha = inf, one client", BAD, "alpha", fixed(d, 1, 2, 0, alpha=float("inf"))),
        ("alpha = True (a bool is not a real number here)", BAD, "alpha", fixed(d, 3, 2, 0, alpha=True)),
    ]
    count += run_torch_cases("partition_data_non_iid", fn, ref_part.partition_data_non_iid, [], None, invalid,
                             count_only=True)
    return passed("partition_data_non_iid", count)


# --- Lesson 6 --------------------------------------------------------------------------------------
def check_count_client_samples(fn: Callable[..., Any]) -> str:
    """The (num_clients, n_classes) int64 count matrix, zero columns kept, exactly."""
    d1, d2, d3 = dataset(60, 3, 3, 0), dataset(50, 3, 5, 1), dataset(20, 2, 4, 2)
    setups = [
        ("IID, 4 clients, 3 classes", ref_part.partition_data_iid(d1, 4, 0), d1),
        ("shards, 5 clients, 5 classes (clients miss classes)", ref_part.partition_data_non_iid(d2, 5, 1, 1), d2),
        ("one client", ref_part.partition_data_iid(d3, 1, 2), d3),
        ("shards, 10 clients, 4 classes", ref_part.partition_data_non_iid(d3, 10, 2, 3), d3),
    ]
    setups.append(("a tuple of 3 clients (a list or a tuple is accepted)",
                   tuple(ref_part.partition_data_iid(d1, 3, 4)), d1))
    some = ref_part.partition_data_non_iid(d2, 5, 2, 5)
    setups.append(("2 of 5 clients, indices unsorted (a partition need not cover the dataset: the clients of a round)",
                   [torch.flip(some[3], [0]), some[1][torch.randperm(len(some[1]), generator=torch.Generator()
                                                                     .manual_seed(5))]], d2))
    cases = [(label, fixed(p, d)) for label, p, d in setups]

    def compare(label: str, got: Any, expected: torch.Tensor) -> None:
        # exact: counts are int64, and the contract says "exact integer equality"
        assert_tensor(label, "the counts", got, expected, exact=True)

    ok0, ok2 = torch.tensor([0, 5, 7]), torch.tensor([3, 4])

    def bad_client(bad: torch.Tensor) -> Callable[[], Any]:
        """Client 1 is the bad one: the message must name partition[1], not just partition."""
        return fixed([ok0, bad, ok2], d3)

    invalid = [
        # TypeError or ValueError: "an empty list, or anything that is not a list or tuple (TypeError)" can be
        # read with the TypeError for the second kind only (the red team's correct answers raise ValueError)
        ("partition = []", BAD, "partition", fixed([], d3)),
        ("an index out of range", VE, "partition", fixed([torch.tensor([0, 1, 99])], d3)),
        ("partition of float tensors", TE, "partition", fixed([torch.tensor([0.0, 1.0])], d3)),
        ("partition[1] is int32, not int64", TE, "partition[1]", bad_client(torch.tensor([1, 2], dtype=torch.int32))),
        ("partition[1] repeats index 2", VE, "partition[1]", bad_client(torch.tensor([1, 2, 2]))),
        ("partition[1] is an empty tensor", VE, "partition[1]", bad_client(torch.tensor([], dtype=torch.int64))),
        ("partition[1] holds the negative index -1", VE, "partition[1]", bad_client(torch.tensor([1, -1]))),
        ("partition[1] is 2-D, shape (2, 1)", TE, "partition[1]", bad_client(torch.tensor([[1], [2]]))),
        ("partition[1] out of range (index 20 of 20 examples)", VE, "partition[1]", bad_client(torch.tensor([1, 20]))),
        ("partition is a dict, not a list or tuple", TE, "partition", fixed({0: ok0}, d3)),
        ("dataset is a (features, labels) tuple, not a LabelledDataset", BAD, "dataset",
         fixed([ok0], (d3.features, d3.labels))),
    ]
    return run_torch_cases("count_client_samples", fn, ref_part.count_client_samples, cases, compare, invalid)
