"""Checks behind the hidden tests of Module 3, Part 5 (lessons 17–20: the server and the loop).

Clients of unequal sizes (4, 7, 10 and 19 examples), so that an unweighted mean differs from
FedAvg's; partial participation, so that weights over all clients differ from weights over the
selected ones; products ``C · K`` that are not integers or carry float noise; a BatchNorm model in
training mode for evaluation; and tiny configs for the whole loop, fast enough for a hidden test.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from trainsys.fedavg import data as ref_data
from trainsys.fedavg import model as ref_model
from trainsys.fedavg import server as ref
from trainsys.grading._harness import CheckFailure, expect_raises, passed, quiet
from trainsys.grading._torch_harness import (
    BAD,
    assert_equal,
    assert_real,
    assert_state,
    fixed,
    guarded,
    model_state,
    run_torch_cases,
    training_flags,
)

__all__ = [
    "check_select_clients",
    "check_run_communication_round",
    "check_evaluate_accuracy",
    "check_run_fedavg",
]

TE = (TypeError,)
"""The contract says TypeError (an argument of the wrong type: a bool or a float for an integer, a seed for a
generator, a tuple for a dataset, a dict for a model)."""
VE = (ValueError,)
"""The contract says ValueError (a legal type with an illegal value: a count below 1, a fraction outside (0, 1])."""

CLAUSES = {
    "select_clients": {
        "mutation": ("num_clients=10, fraction=0.3:", "num_clients=7, fraction=1.0"),
        "failure modes": ("num_clients = 0", "fraction = 0", "fraction = NaN", "rng = 42", "num_clients = True",
                          "fraction = True", "rng = np.random.RandomState(0)", "num_clients = 2.5"),
        "metric that proves it correct": ("num_clients=10, fraction=0.3:", "num_clients=9, fraction=0.25",
                                          "num_clients=100, fraction=0.07", "num_clients=10, fraction=0.30000001:",
                                          "num_clients=10, fraction=0.30000000001"),
    },
    "run_communication_round": {
        "mutation": ("fraction=0.5, epochs=1, batch_size=3", "fraction=0.5, epochs=1, batch_size=5"),
        "failure modes": ("epochs = 0: refused before", "momentum = 1: refused before", "partition[0] repeats an index",
                          "partition = [] (no client)", "global_model is a dict",
                          "dataset is a (features, labels) tuple"),
        "metric that proves it correct": ("fraction=0.5, epochs=1, batch_size=3", "fraction=1.0, epochs=2",
                                          "fraction=0.75, epochs=2", "fraction=1.0, epochs=1, batch_size=5"),
    },
    "evaluate_accuracy": {
        "mutation": ("MLP on 40 examples", "BatchNorm model in eval mode", "a forward pass that raises",
                     "a model holding gradients"),
        "ties": ("all logits equal",),
        "failure modes": ("dataset is a tuple", "model is a dict"),
        "metric that proves it correct": ("MLP on 40 examples", "BatchNorm model left in training mode"),
    },
    "run_fedavg": {
        "mutation": ("IID, dict config",),
        "failure modes": ("config {'partition': 'random'}", "config {'colour': 1}"),
        "metric that proves it correct": ("IID, dict config", "pathological non-IID shards",
                                          "Dirichlet alpha=0.5, B = None", "shards, shards_per_client=3"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

DATA = ref_data.build_synthetic_dataset(40, 4, 3, 1)
SIZES = [4, 7, 10, 19]
PARTITION = [torch.sort(p).values for p in
             torch.split(torch.randperm(40, generator=torch.Generator().manual_seed(3)), SIZES)]
TINY = {"num_examples": 120, "d_in": 4, "n_classes": 3, "d_hidden": 8, "num_clients": 6, "fraction": 0.5,
        "epochs": 1, "batch_size": 5, "rounds": 3}


def _python_floats(label: str, what: str, values: list) -> None:
    for i, v in enumerate(values):
        if type(v) is not float:
            raise CheckFailure(f"[{label}] {what}[{i}] must be a plain Python float (it ends up in a JSON run "
                               f"record), got {type(v).__name__}")


# --- Lesson 17 -------------------------------------------------------------------------------------
def check_select_clients(fn: Callable[..., Any]) -> str:
    """max(⌈C·K⌉, 1) distinct sorted ids in [0, K), from the generator, every client reachable."""
    # C*K = 3.0000001 and 3.0000000001: rounded to 12 decimals they stay above 3, so m = 4 (not 3)
    setups = [(10, 0.3), (10, 0.05), (7, 1.0), (100, 0.07), (1, 0.5), (100, 0.01), (9, 0.25), (40, 0.1),
              (10, 0.30000001), (10, 0.30000000001)]
    cases = [(f"num_clients={k}, fraction={c}: m = {ref.clients_per_round(k, c)}",
              lambda k=k, c=c, i=i: ((k, c, np.random.default_rng(i)), {})) for i, (k, c) in enumerate(setups)]

    def reference(num_clients: Any, fraction: Any, rng: np.random.Generator) -> tuple[list, dict]:
        return ref.select_clients(num_clients, fraction, rng), rng.bit_generator.state

    def compare(label: str, got: Any, expected_and_state: tuple, inputs: Any) -> None:
        expected, rng_state = expected_and_state
        k = inputs[0][0]
        if not isinstance(got, list) or not all(isinstance(x, (int, np.integer)) for x in got):
            raise CheckFailure(f"[{label}] must return a list of client ids (ints), got {type(got).__name__}")
        if not all(type(x) is int for x in got):
            raise CheckFailure(f"[{label}] the ids must be plain Python ints (they end up in JSON run records), "
                               f"got {sorted({type(x).__name__ for x in got})}")
        if len(got) != len(expected):
            raise CheckFailure(f"[{label}] selected {len(got)} clients, expected max(ceil(C*K), 1) = {len(expected)}")
        if len(set(got)) != len(got) or any(not 0 <= x < k for x in got):
            raise CheckFailure(f"[{label}] the ids must be distinct and in [0, {k}), got {got}")
        if list(got) != sorted(got):
            raise CheckFailure(f"[{label}] return the ids sorted ascending, got {got}")
        again = guarded(fn, label, k, inputs[0][1], np.random.default_rng(setups.index((k, inputs[0][1]))))
        if list(again) != list(got):
            raise CheckFailure(f"[{label}] a generator with the same seed must give the same clients")
        if inputs[0][2].bit_generator.state != rng_state:
            raise CheckFailure(f"[{label}] rng ends in another state than after exactly one call "
                               "rng.choice(num_clients, size=m, replace=False) (no other draw, no shortcut for C = 1)")
        if list(got) != expected:
            raise CheckFailure(f"[{label}] selected {got}, the contract's draw rng.choice(num_clients, size=m, "
                               f"replace=False), sorted, gives {expected}")

    count = run_torch_cases("select_clients", fn, reference, cases, compare, mutable=(2,),
                            compare_with_inputs=True, count_only=True)
    label = "400 rounds of num_clients=10, fraction=0.3"
    rng, hits = np.random.default_rng(123), np.zeros(10)
    for _ in range(400):
        hits[list(guarded(fn, label, 10, 0.3, rng))] += 1
    if hits.min() < 0.3 * 400 * 0.6 or hits.max() > 0.3 * 400 * 1.4:
        raise CheckFailure(f"[{label}] clients were selected {hits.astype(int).tolist()} times; each should be "
                           "selected about 120 times (uniformly, from the generator, every round anew)")
    invalid = [
        ("num_clients = 0", VE, "num_clients", fixed(0, 0.5, np.random.default_rng(0))),
        ("fraction = 0", VE, "fraction", fixed(10, 0.0, np.random.default_rng(0))),
        ("fraction = 1.5", VE, "fraction", fixed(10, 1.5, np.random.default_rng(0))),
        ("fraction = -0.1", VE, "fraction", fixed(10, -0.1, np.random.default_rng(0))),
        ("fraction = NaN (outside (0, 1])", VE, "fraction", fixed(10, float("nan"), np.random.default_rng(0))),
        ("rng = 42 (a seed rebuilt every round gives the same clients every round)", TE, "rng", fixed(10, 0.5, 42)),
        ("num_clients = True (a bool is not an integer here)", TE, "num_clients",
         fixed(True, 0.5, np.random.default_rng(0))),
        ("num_clients = 2.5 (not an integer)", TE, "num_clients", fixed(2.5, 0.5, np.random.default_rng(0))),
        ("fraction = True (a bool is not a real number here)", TE, "fraction",
         fixed(10, True, np.random.default_rng(0))),
        ("fraction = '0.5' (a string is not a real number)", TE, "fraction", fixed(10, "0.5", np.random.default_rng(0))),
        ("rng = np.random.RandomState(0) (a legacy generator, not a numpy.random.Generator)", TE, "rng",
         fixed(10, 0.5, np.random.RandomState(0))),
    ]
    count += 1 + run_torch_cases("select_clients", fn, ref.select_clients, [], None, invalid, count_only=True)
    return passed("select_clients", count)


# --- Lesson 18 -------------------------------------------------------------------------------------
def _round_with_state(round_fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum=0.0):
        params = [id(p) for p in global_model.parameters()]
        pointers = {k: t.untyped_storage().data_ptr() for k, t in global_model.state_dict().items()}
        info = round_fn(global_model, dataset, partition, fraction, epochs, batch_size, lr, rng, momentum)
        same_storage = params == [id(p) for p in global_model.parameters()] and pointers == {
            k: t.untyped_storage().data_ptr() for k, t in global_model.state_dict().items()}
        return info, model_state(global_model), rng.bit_generator.state, training_flags(global_model), same_storage
    return run


def check_run_communication_round(fn: Callable[..., Any]) -> str:
    """The reference's round: same clients and seeds from rng, fresh copies, n_k/m_t weights, bytes."""
    setups = [  # (fraction, epochs, batch_size, lr, rng seed, momentum, batch_norm)
        (0.5, 1, 3, 0.1, 0, 0.0, False), (1.0, 2, None, 0.5, 1, 0.0, False), (0.25, 1, 4, 0.2, 2, 0.0, False),
        (0.75, 2, 5, 0.1, 3, 0.9, False), (1.0, 1, 5, 0.1, 4, 0.0, True), (0.5, 1, 5, 0.1, 5, 0.0, "eval"),
    ]
    cases = [(f"fraction={c}, epochs={e}, batch_size={b}, lr={lr}, momentum={mo}"
              f"{', BatchNorm' if bn else ''}{' in eval mode (the mode is left as it was)' if bn == 'eval' else ''}",
              lambda c=c, e=e, b=b, lr=lr, s=s, mo=mo, bn=bn: (
                  (ref_model.build_mlp_classifier(4, 6, 3, s, bool(bn)).train(bn != "eval"), DATA,
                   copy.deepcopy(PARTITION), c, e, b, lr, np.random.default_rng(s), mo), {}))
             for c, e, b, lr, s, mo, bn in setups]
    keys = {"selected", "num_samples", "client_losses", "train_loss", "local_steps", "bytes_down", "bytes_up"}

    def compare(label: str, got: Any, expected: tuple) -> None:
        info, state, rng_state, flags, same_storage = got
        want, want_state, want_rng, want_flags, _ = expected
        if flags != want_flags:
            raise CheckFailure(f"[{label}] the global model's training/eval mode changed: leave it as it was "
                               "(the clients' copies train, not the global model)")
        if not same_storage:
            raise CheckFailure(f"[{label}] the global model's parameters or buffers were replaced by new tensors: "
                               "copy w_{{t+1}} into them in place (load_model_state; not assign=True)")
        if not isinstance(info, dict) or set(info) != keys:
            raise CheckFailure(f"[{label}] must return a dict with keys {sorted(keys)}, got "
                               f"{sorted(info) if isinstance(info, dict) else type(info).__name__}")
        assert_equal(label, "selected", [int(k) for k in info["selected"]], want["selected"])
        for key in ("num_samples", "local_steps", "bytes_down", "bytes_up"):
            assert_equal(label, key, info[key], want[key])
        if rng_state != want_rng:
            raise CheckFailure(f"[{label}] rng ends in another state than the reference's: draw the clients "
                               "(select_clients), then one seed per selected client, and nothing else")
        if not isinstance(info["client_losses"], list) or len(info["client_losses"]) != len(want["client_losses"]):
            raise CheckFailure(f"[{label}] client_losses must be a list with one loss per selected client")
        # float32 training (eps = 1.2e-7): reordering a reduction changes each of the <= 2 x 7 local SGD steps by a
        # few ulps, ~1e-6 relative after compounding (the red team's alternative is bit-identical here); rtol 1e-4
        # is a 100x margin, while the smallest weighting mistake moves the weights by > 20 % and the loss visibly.
        # atol 1e-6 covers entries and losses near 0, where a relative bound means nothing.
        for i, (l, w) in enumerate(zip(info["client_losses"], want["client_losses"])):
            assert_real(label, f"client_losses[{i}]", l, w, rtol=1e-4, atol=1e-6)
        _python_floats(label, "client_losses", info["client_losses"])
        _python_floats(label, "[train_loss]", [info["train_loss"]])
        # the same float32 bound as the client losses above, for the weighted loss and the averaged weights
        assert_real(label, "train_loss", info["train_loss"], want["train_loss"], rtol=1e-4, atol=1e-6)
        assert_state(label, "the global model after the round", state, want_state, rtol=1e-4, atol=1e-6)

    count = run_torch_cases("run_communication_round", _round_with_state(fn),
                            _round_with_state(ref.run_communication_round), cases, compare, mutable=(0, 7),
                            count_only=True)

    def bad(**change: Any) -> Callable[[], Any]:
        args = {"fraction": 0.5, "epochs": 1, "batch_size": 3, "lr": 0.1, **change}
        return lambda: ((ref_model.build_mlp_classifier(4, 6, 3, 0), DATA, change.get("partition", PARTITION),
                         args["fraction"], args["epochs"], args["batch_size"], args["lr"],
                         np.random.default_rng(0)), {})

    invalid = [
        ("global_model is a dict (a state dict is not a module)", TE, "global_model",
         lambda: (({"w": torch.ones(2)}, DATA, PARTITION, 0.5, 1, 3, 0.1, np.random.default_rng(0)), {})),
        ("dataset is a (features, labels) tuple, not a LabelledDataset", TE, "dataset",
         lambda: ((ref_model.build_mlp_classifier(4, 6, 3, 0), (DATA.features, DATA.labels), PARTITION, 0.5, 1, 3,
                   0.1, np.random.default_rng(0)), {})),
        ("partition = [] (no client)", BAD, "partition", bad(partition=[])),
        ("partition[1] is empty", BAD, "partition",
         bad(partition=[PARTITION[0], torch.tensor([], dtype=torch.int64), *PARTITION[2:]])),
        ("partition[2] is a float tensor", BAD, "partition",
         bad(partition=[PARTITION[0], PARTITION[1], PARTITION[2].float(), PARTITION[3]])),
        ("fraction = 0", BAD, "fraction", bad(fraction=0.0)),
        ("epochs = 0", BAD, "epochs", bad(epochs=0)),
        ("batch_size = 0", BAD, "batch_size", bad(batch_size=0)),
        ("lr = 0", BAD, "lr", bad(lr=0.0)),
        ("a partition index out of range", BAD, "partition", bad(partition=[torch.tensor([0, 1, 40])])),
        ("partition[0] repeats an index; fraction 0.25 selects only client 3 (every entry is validated)", BAD,
         "partition", lambda: ((ref_model.build_mlp_classifier(4, 6, 3, 0), DATA,
                                [torch.cat([PARTITION[0], PARTITION[0][:1]]), *PARTITION[1:]], 0.25, 1, 3, 0.1,
                                np.random.default_rng(0)), {})),
    ]
    count += run_torch_cases("run_communication_round", fn, ref.run_communication_round, [], None, invalid,
                             count_only=True)
    refusals = [("epochs = 0", "epochs", {"epochs": 0}), ("lr = 0", "lr", {"lr": 0.0}),
                ("batch_size = 0", "batch_size", {"batch_size": 0}), ("momentum = 1", "momentum", {"momentum": 1.0})]
    for what, argument, change in refusals:
        label = f"{what}: refused before the global model or rng is touched"
        args = {"fraction": 0.5, "epochs": 1, "batch_size": 3, "lr": 0.1, "momentum": 0.0, **change}
        model, rng = ref_model.build_mlp_classifier(4, 6, 3, 0).eval(), np.random.default_rng(0)
        state, flags = model_state(model), training_flags(model)
        with quiet():
            expect_raises(fn, label, BAD, argument, model, DATA, PARTITION, args["fraction"], args["epochs"],
                          args["batch_size"], args["lr"], rng, args["momentum"])
        if rng.bit_generator.state != np.random.default_rng(0).bit_generator.state:
            raise CheckFailure(f"[{label}] rng was advanced although the call was refused: validate every "
                               "argument before drawing the clients")
        if training_flags(model) != flags or any(not torch.equal(t, state[k]) for k, t in model_state(model).items()):
            raise CheckFailure(f"[{label}] the global model changed although the call was refused")
    return passed("run_communication_round", count + len(refusals))


# --- Lesson 19 -------------------------------------------------------------------------------------
def check_evaluate_accuracy(fn: Callable[..., Any]) -> str:
    """Arg-max accuracy in eval mode, without gradients, the model's mode and buffers left as found."""
    def bn_model(training: bool) -> torch.nn.Module:
        model = ref_model.build_mlp_classifier(4, 6, 3, 5, batch_norm=True).train()
        with torch.no_grad():
            model(DATA.features[:20] * 3 + 1)  # running statistics far from the batch's own
        return model.train(training)

    one = ref_data.LabelledDataset(DATA.features[:1], DATA.labels[:1], 3)
    flat = ref_model.build_mlp_classifier(4, 6, 3, 3)
    with torch.no_grad():
        flat[2].weight.zero_(), flat[2].bias.zero_()  # every logit 0: argmax picks the first class, 0
    cases = [
        ("MLP on 40 examples", fixed(ref_model.build_mlp_classifier(4, 6, 3, 0), DATA)),
        ("BatchNorm model left in training mode", fixed(bn_model(True), DATA)),
        ("BatchNorm model in eval mode", fixed(bn_model(False), DATA)),
        ("one example", fixed(ref_model.build_mlp_classifier(4, 6, 3, 1), one)),
        ("MLP on 40 examples, another seed", fixed(ref_model.build_mlp_classifier(4, 16, 3, 2), DATA)),
        ("all logits equal (ties go to the first maximal logit, class 0)", fixed(flat, DATA)),
    ]

    def compare(label: str, got: Any, expected: float) -> None:
        if isinstance(got, (torch.Tensor, bool, int, np.integer)):
            raise CheckFailure(f"[{label}] must return the accuracy as a float in [0, 1], got {got!r}")
        # the exact count over n, or its float32 rounding (a float32 mean is within 2**-24 relative of it; 2**-22
        # leaves a factor 4), while one example more or less moves it by 1/n >= 1/40; atol 1e-12 only matters for
        # an accuracy of exactly 0, where float32 and float64 agree exactly
        assert_real(label, "the accuracy", got, expected, rtol=2.0**-22, atol=1e-12)

    invalid = [
        ("dataset is a tuple", TE, "dataset", fixed(ref_model.build_mlp_classifier(4, 6, 3, 0),
                                                     (DATA.features, DATA.labels))),
        ("model is a dict", TE, "model", fixed({"w": torch.ones(2)}, DATA)),
    ]
    count = run_torch_cases("evaluate_accuracy", fn, ref.evaluate_accuracy, cases, compare, invalid,
                            count_only=True)

    label = "a forward pass that raises (5 input features, the data has 4): the mode is restored anyway"
    broken = ref_model.build_mlp_classifier(5, 6, 3, 0, batch_norm=True).train()
    with quiet():
        try:
            fn(broken, DATA)
        except Exception:  # noqa: BLE001 - the forward's own error may propagate; only the mode matters here
            pass
    if not all(training_flags(broken)):
        raise CheckFailure(f"[{label}] the model was left in eval mode: restore its mode in a finally block")

    label = "a model holding gradients from a backward pass (its .grad is left as it was)"
    model = ref_model.build_mlp_classifier(4, 6, 3, 6)
    torch.nn.functional.cross_entropy(model(DATA.features), DATA.labels).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    guarded(fn, label, model, DATA)
    if any(p.grad is None or not torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads)):
        raise CheckFailure(f"[{label}] the parameters' .grad changed: measuring must not touch the gradients "
                           "(no zero_grad, no backward)")

    label = "the forward pass runs without building an autograd graph (torch.no_grad or inference_mode)"
    model, grad_enabled = ref_model.build_mlp_classifier(4, 6, 3, 4), []
    model.register_forward_hook(lambda module, inputs, output: grad_enabled.append(torch.is_grad_enabled()))
    guarded(fn, label, model, DATA)
    if any(grad_enabled):  # the hook does not cross into the grading sandbox: there it records nothing
        raise CheckFailure(f"[{label}] the model ran with gradients enabled: wrap the forward in torch.no_grad()")
    return passed("evaluate_accuracy", count + 3)


# --- Lesson 20 -------------------------------------------------------------------------------------
@contextlib.contextmanager
def unseeded_global_rng() -> Iterator[None]:
    """Run a check with torch's global generator moved off every freshly seeded state, then restore it.

    The harness fails a call that changes the global generator's state; but ``torch.manual_seed(s)`` changes
    nothing when the generator already sits in that seed's initial state (the caller, or an earlier check,
    seeded it with the same ``s``). A few draws after an unusual seed leave it in a state no
    ``torch.manual_seed`` gives, so re-seeding always shows.
    """
    saved = torch.get_rng_state()
    try:
        torch.manual_seed(0x5EED_F0A7)
        torch.rand(3)
        yield
    finally:
        torch.set_rng_state(saved)


def inputs_kept(cases: list[tuple[str, Callable[[], Any]]]) -> Callable[[str, Any], None]:
    """``check(label, inputs)``: fail when the student's call changed its plain-data arguments (a config dict,
    a list of numbers, a history) — the torch harness's snapshot sees keys added or removed and lengths
    changed, but not a number or a string overwritten (``config["epochs"] = E``). Each case's factory
    rebuilds the arguments as they were, to compare with."""
    factories = dict(cases)

    def check(label: str, inputs: Any) -> None:
        before, _ = factories[label]()
        for i, (was, now) in enumerate(zip(before, inputs[0])):
            try:
                same = bool(was == now)
            except Exception:  # noqa: BLE001 - an incomparable value is a changed value
                same = False
            if not same:
                raise CheckFailure(f"[{label}] the function modified its input argument {i + 1} in place (it was "
                                   f"{str(was)[:160]}, it is now {str(now)[:160]}): work on a copy, the caller's "
                                   "objects are read only")
    return check


def compare_records(label: str, got: Any, expected: dict, history_keys: tuple[str, ...]) -> None:
    """A run record against the reference's: config, seeds, every round's metrics, bytes; wall time > 0."""
    if not isinstance(got, dict):
        raise CheckFailure(f"[{label}] must return a run record (a dict), got {type(got).__name__}")
    missing = sorted(set(expected) - set(got))
    if missing:
        raise CheckFailure(f"[{label}] the run record lacks {missing}")
    for key in ("kind", "config", "seeds", "bytes_communicated", "client_sizes"):
        if key in expected:
            assert_equal(label, key, got[key], expected[key])
    # accuracies are counts over n_test <= 30 examples: one example is >= 1/30, a float32 rounding of the ratio
    # <= 6e-8, so atol 1e-6 admits the rounding and nothing else (rtol 0: the values are in [0, 1])
    assert_real(label, "initial_test_accuracy", got["initial_test_accuracy"], expected["initial_test_accuracy"],
                rtol=0, atol=1e-6)
    history = got["history"]
    if not isinstance(history, list) or len(history) != len(expected["history"]):
        raise CheckFailure(f"[{label}] history must be a list of {len(expected['history'])} rounds")
    for t, (h, w) in enumerate(zip(history, expected["history"])):
        if not isinstance(h, dict):
            raise CheckFailure(f"[{label}] history[{t}] must be a dict, got {type(h).__name__}")
        assert_equal(label, f"history[{t}]['round']", h.get("round"), w["round"])
        assert_real(label, f"history[{t}]['test_accuracy']", h.get("test_accuracy"), w["test_accuracy"],
                    rtol=0, atol=1e-6)  # a count over n_test, as initial_test_accuracy above
        # float32 losses after a few rounds of float32 SGD (eps = 1.2e-7): reordered reductions compound to ~1e-6
        # relative; rtol 1e-4 is a 100x margin (atol 1e-6 for losses near 0)
        assert_real(label, f"history[{t}]['train_loss']", h.get("train_loss"), w["train_loss"],
                    rtol=1e-4, atol=1e-6)
        for key in history_keys:
            assert_equal(label, f"history[{t}][{key!r}]", h.get(key), w[key])
    assert_real(label, "final_test_accuracy", got["final_test_accuracy"], expected["final_test_accuracy"],
                rtol=0, atol=1e-6)  # a count over n_test, as initial_test_accuracy above
    wall = got["wall_time_s"]
    if isinstance(wall, bool) or not isinstance(wall, float) or not wall > 0:
        raise CheckFailure(f"[{label}] wall_time_s must be the run's duration in seconds (a float > 0), got {wall!r}")


def check_run_fedavg(fn: Callable[..., Any]) -> str:
    """The reference's run record on tiny configs (IID, shards, Dirichlet, B = ∞); bad configs refused."""
    configs = [
        ("IID, dict config", TINY),
        ("pathological non-IID shards", {**TINY, "partition": "shards", "seed": 1}),
        ("Dirichlet alpha=0.5, B = None", {**TINY, "partition": "dirichlet", "batch_size": None, "seed": 2}),
        ("FedAvgConfig, fraction 0.2 (one client), E=2", ref.FedAvgConfig(**{**TINY, "fraction": 0.2, "epochs": 2})),
        ("shards, shards_per_client=3, momentum=0.5, test_fraction=0.25",
         {**TINY, "partition": "shards", "shards_per_client": 3, "momentum": 0.5, "test_fraction": 0.25, "seed": 3}),
    ]
    cases = [(label, fixed(config)) for label, config in configs]
    history_keys = ("selected", "local_steps", "bytes_up", "bytes_down")
    kept = inputs_kept(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Any) -> None:
        kept(label, inputs)
        compare_records(label, got, expected, history_keys)

    invalid = [(f"config {change}", BAD, name, fixed({**TINY, **change})) for name, change in [
        ("num_clients", {"num_clients": 0}), ("num_clients", {"num_clients": 10**6}),
        ("fraction", {"fraction": 0.0}), ("fraction", {"fraction": 1.5}), ("epochs", {"epochs": 0}),
        ("batch_size", {"batch_size": 0}), ("partition", {"partition": "random"}), ("colour", {"colour": 1}),
    ]]
    with unseeded_global_rng():
        return run_torch_cases("run_fedavg", fn, ref.run_fedavg, cases, compare, invalid, compare_with_inputs=True)
