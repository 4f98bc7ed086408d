"""Checks behind the hidden tests of Module 1, Part 7, lesson 40 (the full training loop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trainsys.grading._harness import (
    fixed as _fixed,
    BAD,
    Args,
    CheckFailure,
    assert_array_dict,
    call,
    passed,
    quiet,
    run_cases,
)
from trainsys.grading._harness import against_fresh_inputs
from trainsys.memtrain import trainer as ref

__all__ = ["check_train"]

CLAUSES = {
    "train": {
        "mutation": ("baseline",),
        "failure modes": ("an unknown key 'momentum'", "steps = True", "progress = 'yes'", "seed = -1", "lr = inf",
                          "num_micro_batches = 8", "mixed precision, lr = 1 on 3 workers"),
        "metric that proves it correct": ("4 workers, uneven shards", "ZeRO-1 on 3 workers"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

SMALL = {"layer_widths": [6, 16, 16, 16, 2], "n": 96, "batch": 30, "steps": 6, "lr": 5e-3}


HISTORY_KEYS = ("step", "loss", "skipped", "bytes", "scale")
INIT_SCALE = 2.0**6


def _history(label: str, got: Any, expected: list, tol: float) -> None:
    """The per-step record: step numbers, skip flags (Python bools), bytes and loss scales exactly; losses to tol."""
    if not isinstance(got, list) or len(got) != len(expected):
        raise CheckFailure(f"[{label}] history must be a list of {len(expected)} dicts, one per step")
    # The contract does not say whether a step records the scale it ran with or the scale after its update
    # (the reference's): either is accepted, the same one at every step.
    after = [want["scale"] for want in expected]
    before = [INIT_SCALE if after[0] != 1.0 else 1.0] + after[:-1]
    got_scales = [h.get("scale") if isinstance(h, dict) else None for h in got]
    scales = [(b, a) for b, a in zip(before, after)]
    if got_scales != after and got_scales != before:  # hold it to the convention it follows more often
        follows_after = sum(map(lambda a, g: a == g, after, got_scales)) >= \
            sum(map(lambda b, g: b == g, before, got_scales))
        scales = [(a,) if follows_after else (b,) for b, a in zip(before, after)]
    for t, (h, want) in enumerate(zip(got, expected)):
        if not isinstance(h, dict) or set(h) != set(HISTORY_KEYS):
            raise CheckFailure(f"[{label}] history[{t}] must be a dict with exactly the keys {list(HISTORY_KEYS)}, "
                               f"got {sorted(h) if isinstance(h, dict) else type(h).__name__}")
        if type(h["skipped"]) is not bool:
            kind = type(h["skipped"])
            raise CheckFailure(f"[{label}] history[{t}]['skipped'] must be a Python bool (True or False), got "
                               f"{kind.__module__}.{kind.__name__}")
        if h["skipped"] != want["skipped"]:
            raise CheckFailure(f"[{label}] history[{t}]['skipped'] is {h['skipped']}, expected {want['skipped']} "
                               "(a step is skipped when any worker's unscaled gradient holds an inf or a NaN)")
        if h["step"] != want["step"]:
            raise CheckFailure(f"[{label}] history[{t}]['step'] is {h['step']!r}, expected {want['step']}")
        if h["scale"] not in scales[t] or not isinstance(h["scale"], float):
            raise CheckFailure(f"[{label}] history[{t}]['scale'] is {h['scale']!r}, expected "
                               f"{' or '.join(map(repr, sorted(set(scales[t]))))} (the loss scale: 2^6 at first, "
                               "halved after an overflow, doubled after 50 clean steps in a row; 1.0 in float32)")
        if h["bytes"] != want["bytes"]:
            raise CheckFailure(f"[{label}] history[{t}]['bytes'] is {h['bytes']!r}, expected {want['bytes']} (the "
                               "ring's bytes for the busiest worker, counted on skipped steps too)")
        loss = h["loss"]
        if isinstance(loss, bool) or not isinstance(loss, (int, float, np.floating)) or \
                not abs(float(loss) - want["loss"]) <= tol * abs(want["loss"]):
            raise CheckFailure(f"[{label}] history[{t}]['loss'] is {loss!r}, expected {want['loss']!r} (the batch's "
                               "mean loss before the step, recorded on skipped steps too)")


def check_train(fn: Callable[..., Any]) -> str:
    """Loss curves, history, final weights, bytes and record fields for configurations that switch each technique on."""
    # Relative tolerances on the losses. float32 compute: the contract's 1e-5 (sums reordered across workers and
    # micro-batches move a loss by a few eps32 = 1.2e-7 per step; 6 Adam steps leave it near 1e-7). float16
    # compute: 2e-3, two float16 epsilons (2^-10 = 9.8e-4), "within float16's resolution".
    configs = [
        ("baseline", {}, 1e-5),
        ("4 workers, uneven shards (30 = 8+8+7+7)", {"num_workers": 4}, 1e-5),
        ("3 workers x 2 micro-batches", {"num_workers": 3, "num_micro_batches": 2}, 1e-5),
        ("checkpointing, segments of 2", {"segment_size": 2}, 1e-5),
        ("ZeRO-1 on 3 workers", {"num_workers": 3, "zero_stage": 1}, 1e-5),
        ("everything, float32", {"num_workers": 2, "num_micro_batches": 3, "segment_size": 3, "zero_stage": 2}, 1e-5),
        ("everything, mixed precision", {"num_workers": 2, "num_micro_batches": 2, "segment_size": 2,
                                         "zero_stage": 1, "precision": "mixed"}, 2e-3),
        # lr = 1 blows the weights up at step 0; from step 1 on float16 overflows on some workers (at step 3 not
        # on worker 0), every step is skipped and the scale halves: the losses stay finite and are still recorded.
        # (The pattern survives a 1e-6 relative change of the weights: float16 rounding absorbs it.)
        ("mixed precision, lr = 1 on 3 workers: every step after the first overflows and is skipped",
         {"num_workers": 3, "precision": "mixed", "lr": 1.0, "seed": 3, "steps": 5}, 2e-3),
        # 50 clean steps in a row double the scale (step 50 runs with 128); 51 float16 steps drift further from
        # another correct summation order than 6 do, hence the looser loss tolerance
        ("mixed precision, 51 steps (the scale grows after 50 clean steps)",
         {"precision": "mixed", "steps": 51}, 1e-2),
    ]
    tolerance = {name: tol for name, _, tol in configs}
    mixed = {name for name, cfg, _ in configs if cfg.get("precision") == "mixed"}
    cases = [(name, _fixed({**SMALL, **cfg})) for name, cfg, _ in configs]
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        unchanged(label, inputs)
        if not isinstance(got, dict):
            raise CheckFailure(f"[{label}] must return the run record (a dict), got {type(got).__name__}")
        missing = sorted(set(expected) - set(got))
        if missing:
            raise CheckFailure(f"[{label}] the run record misses {missing}")
        losses, want = np.asarray(got["losses"], dtype=float), np.asarray(expected["losses"])
        if losses.shape != want.shape:
            raise CheckFailure(f"[{label}] {losses.size} losses recorded, expected one per step ({want.size})")
        worst = float(np.max(np.abs(losses - want) / np.abs(want)))
        if not worst <= tolerance[label]:
            step = int(np.nanargmax(np.where(np.isnan(losses), np.inf, np.abs(losses - want) / np.abs(want))))
            raise CheckFailure(f"[{label}] loss at step {step} is {float(losses[step])!r}, expected "
                               f"{float(want[step])!r} (relative difference {worst:.3g}, allowed {tolerance[label]:g})")
        _history(label, got["history"], expected["history"], tolerance[label])
        report = got["memory_report"]
        for key, value in expected["memory_report"].items():
            # byte counts: integer products and exact quotients in float64 (~1e-16 relative); 1e-9 accepts
            # another order of the same operations, not a wrong term
            if not isinstance(report, dict) or not np.isclose(float(report.get(key, np.nan)), value, rtol=1e-9):
                shown = report.get(key) if isinstance(report, dict) else report
                raise CheckFailure(f"[{label}] memory_report[{key!r}] is {shown!r}, expected {value!r} "
                                   "(trainsys.memtrain.memory.memory_report of the config)")
        sent = got["bytes_communicated_per_worker"]
        if type(sent) is not int or sent != expected["bytes_communicated_per_worker"]:
            raise CheckFailure(f"[{label}] bytes_communicated_per_worker is {sent!r}, "
                               f"expected the int {expected['bytes_communicated_per_worker']!r} (ring: 2(N-1)/N of the "
                               "float32 gradient per step, per worker, skipped steps included)")
        # float32 master weights (entries of size ~0.01-1): the gradients of another correct summation order
        # differ by a few eps32 (1.2e-7) relative, and Adam's step lr * m / (sqrt(v) + eps) carries that into the
        # weights over up to 51 steps: rtol 1e-4, atol 1e-6 leave a factor of ~100. With float16 forward and
        # backward passes the gradients differ by up to eps16 = 9.8e-4 relative: rtol 1e-2, atol 1e-3.
        rtol, atol = (1e-2, 1e-3) if label in mixed else (1e-4, 1e-6)
        final = got["final_params"]
        if not isinstance(final, dict) or list(final) != list(expected["final_params"]):
            raise CheckFailure(f"[{label}] final_params must be a dict with the keys "
                               f"{list(expected['final_params'])} in this order, got "
                               f"{list(final) if isinstance(final, dict) else type(final).__name__}")
        assert_array_dict(label, "final_params (the float32 master weights)", final, expected["final_params"],
                          rtol=rtol, atol=atol)
        caller = inputs[0][0]["layer_widths"]
        record_widths = got["config"].get("layer_widths") if isinstance(got["config"], dict) else None
        if record_widths is caller:
            raise CheckFailure(f"[{label}] record['config']['layer_widths'] is the caller's own list; everything in "
                               "the record is new (copy the config when merging it with TRAIN_DEFAULTS)")

    key = lambda name: ("config[", name)  # noqa: E731 - named as config['<key>'] (either quote)
    invalid = [
        ("zero_stage = 4", BAD, "zero_stage", _fixed({**SMALL, "zero_stage": 4})),
        ("progress = 'yes' (must be True or False)", BAD, "progress", _fixed({**SMALL, "progress": "yes"})),
        ("precision = 'bf16'", BAD, "precision", _fixed({**SMALL, "precision": "bf16"})),
        ("num_workers = 0", BAD, "num_workers", _fixed({**SMALL, "num_workers": 0})),
        ("an unknown key 'momentum'", (ValueError,), "momentum", _fixed({**SMALL, "momentum": 0.9})),
        ("num_micro_batches = 8 > floor(30 / 4) = 7", BAD, key("num_micro_batches"),
         _fixed({**SMALL, "num_workers": 4, "num_micro_batches": 8})),
        ("steps = True", (TypeError,), key("steps"), _fixed({**SMALL, "steps": True})),
        ("num_workers = True", (TypeError,), key("num_workers"), _fixed({**SMALL, "num_workers": True})),
        ("batch = 30.0", (TypeError,), key("batch"), _fixed({**SMALL, "batch": 30.0})),
        ("seed = -1", (ValueError,), key("seed"), _fixed({**SMALL, "seed": -1})),
        ("lr = inf", (ValueError,), key("lr"), _fixed({**SMALL, "lr": float("inf")})),
        ("lr = nan", (ValueError,), key("lr"), _fixed({**SMALL, "lr": float("nan")})),
        ("n = 0", BAD, key("n"), _fixed({**SMALL, "n": 0})),
        ("batch = 97 > n = 96", BAD, key("batch"), _fixed({**SMALL, "batch": 97})),
        ("segment_size = 5 > L = 4", BAD, key("segment_size"), _fixed({**SMALL, "segment_size": 5})),
    ]
    count = run_cases("train", fn, ref.train, cases, compare, invalid, compare_with_inputs=True, count_only=True)
    # A config without layer_widths takes TRAIN_DEFAULTS' list: two runs must not hand out one shared list.
    label = "two runs with the default widths: the records share no list"
    with quiet():
        first = call(fn, label, {"n": 40, "batch": 20, "steps": 1})
        second = call(fn, label, {"n": 40, "batch": 20, "steps": 1})
    widths = [r.get("config", {}).get("layer_widths") if isinstance(r, dict) and isinstance(r.get("config"), dict)
              else None for r in (first, second)]
    if widths[0] is not None and widths[0] is widths[1]:
        raise CheckFailure(f"[{label}] both records' config['layer_widths'] are one list object (TRAIN_DEFAULTS' "
                           "own?); everything in the record is new — copy the defaults when merging")
    return passed("train", count + 1)
