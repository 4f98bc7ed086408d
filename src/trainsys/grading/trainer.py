"""Checks behind the hidden tests of Module 1, Part 7, lesson 40 (the full training loop)."""

from __future__ import annotations

import re
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
                          "num_micro_batches = 8", "lr_backoff = 1"),
        "data and order": ("baseline",),
        "history": ("baseline", "4 workers, uneven shards", "mixed precision, lr = 1 on 3 workers"),
        "skip": ("mixed precision, lr = 1 on 3 workers",),
        "metric that proves it correct": ("4 workers, uneven shards", "ZeRO-1 on 3 workers", "ZeRO-2 on 4 workers",
                                          "ZeRO-3 on 3 workers", "ZeRO-2, float16 overflows"),
        "rollback": ("rollback: lr = 50", "rollback: lr = 1 recovers", "rollback: a loss that creeps up",
                     "rollback: non-finite losses", "mixed precision, lr = 1 on 3 workers"),
        "metrics": ("metrics: 4 workers", "metrics: a stopped run"),
    },
}
"""The case labels that enforce each clause of each lesson's contract (see ``trainsys.grading.clauses``)."""

SMALL = {"layer_widths": [6, 16, 16, 16, 2], "n": 96, "batch": 30, "steps": 6, "lr": 5e-3}

# The sentences of lesson 40's contract (Concepts, and the Implementation's exchange bullet) each failure enforces,
# quoted with the lesson's backticks and emphasis dropped; tests/test_m1p7_trainer.py holds them to the lesson text.
SAYS = {
    "record": ("Concepts", "The run record holds config (validated), seeds (data, order, init), history, losses (the "
               "history's), bytes_communicated_per_worker (an int: the history's bytes summed), memory_report "
               "(Lesson 39's of the config's keys)"),
    "mutation": ("Mutation", "config and TRAIN_DEFAULTS are never written, and the record shares no list with either "
                 "(copy layer_widths)"),
    "failure": ("Failure modes", "checked before anything is drawn, each error naming config['<key>']: an unknown key "
                "(ValueError listing it); an integer field (n, batch, steps, num_workers, num_micro_batches, "
                "segment_size, seed, max_retries) that is not an int — True and 30.0 are not — is a TypeError, outside "
                "its range a ValueError; a real field (lr, lr_backoff, explode_factor) that is not a real number "
                "(True, \"10\") a TypeError, non-finite or outside its range a ValueError; progress not a bool a "
                "TypeError; any other precision or zero_stage a ValueError"),
    "order": ("Data and order", "One default_rng(seed + 1) draws permutation(n) at every step $t$ with $t \\bmod "
              "\\lfloor n/B\\rfloor = 0$; step $t$ takes rows perm[i*B:(i+1)*B]"),
    "entries": ("History", "one dict per step run with exactly step; loss"),
    "loss": ("History", "loss: $\\frac1B\\sum_e \\ell_e$ before the update, on skipped and rolled-back steps too"),
    "skipped": ("History", "skipped: a Python bool"),
    "scale": ("History", "scale: a float, 1.0 in float32, else the scale the next step starts from (after a rollback, "
              "the restored one) or the one the step ran with — the same choice every step"),
    "skip": ("Skip", "an inf or NaN in any worker's unscaled gradient skips the update on every worker; the scaler "
             "(init_scale=2**6, growth_interval=50) updates once per step, and a rollback restores it"),
    "losses": ("Metric that proves it correct", "float32 losses equal train({})'s to $10^{-5}$ (themselves "
               "torch.optim.Adam's), final_params to rtol $10^{-4}$; \"mixed\" within float16's resolution"),
    "bytes": ("Implementation, Exchange by stage", "billing the busiest worker's bytes per step "
              "with $\\Psi_N = \\lceil\\Psi/N\\rceil$ floats of 4 bytes: stages 0–1, the ring's "
              "max(ring_bytes_per_worker(Ψ, N, 4)), skipped or not; stage 2, $(M+1)(N-1)\\Psi_N$ ($M(N-1)\\Psi_N$ "
              "if skipped: no all-gather); stage 3, $3M(N-1)\\Psi_N$, skipped or not"),
    "good": ("Rollback", "step $t$ is good if $L_t$ is finite and $\\le \\kappa\\, m_t$ ($\\kappa$ = explode_factor, "
             "$m_t$ the smallest earlier good loss, $m_0 = \\infty$); the state it started from (weights, Adam "
             "state, scaler) becomes the last good state"),
    "undo": ("Rollback", "A bad step goes back to that state — which also undoes the update of the good step that made "
             "the bad state —, multiplies lr by lr_backoff and appends {\"step\", \"reason\", \"lr\"} to rollbacks "
             "(reason \"non-finite loss\" or \"exploding loss\", lr the new one)"),
    "stop": ("Rollback", "With max_retries rollbacks made, a bad step is undone and ends the run; stopped (else None) "
             "is one line naming its step"),
    "final": ("Rollback", "final_params: the float32 master weights W0, b0, … in that order, after the last step (the "
              "last good state when stopped)"),
    "metrics": ("Metrics", "seconds (a real > 0, from time.perf_counter) per step; examples_per_second = batch × steps "
                "run / Σ seconds; measured_peak_bytes_per_worker: a list of $N$ ints > 0"),
}


def _says(key: str) -> str:
    """`` (contract, <bullet>: "<sentence>")``: the contract sentence a failure enforces, to end its message."""
    bullet, sentence = SAYS[key]
    return f' (contract, {bullet}: "{sentence}")'


HISTORY_KEYS = ("step", "loss", "skipped", "bytes", "scale")
METRIC_KEYS = ("examples_per_second", "measured_peak_bytes_per_worker")  # checked by the "metrics: ..." cases
INIT_SCALE = 2.0**6


def _bad(loss: Any, threshold: float) -> bool:
    """The contract's rollback rule: a loss is bad when it is not finite or above ``threshold`` (κ × smallest)."""
    return isinstance(loss, (int, float, np.floating)) and not isinstance(loss, bool) and \
        (not np.isfinite(loss) or float(loss) > threshold)


def _history(label: str, got: Any, expected: list, tol: float, rolled_back: dict[int, float],
             metrics: bool) -> None:
    """The per-step record: step numbers, skip flags (Python bools), bytes and loss scales exactly; losses to tol.

    ``rolled_back`` maps the steps the reference rolled back or stopped at to the threshold their loss broke:
    their losses (an explosion, amplified by any rounding) must only be bad as well. ``seconds`` is held to its
    sanity (a positive real) in the metrics cases only, so that a wrong metric fails there.
    """
    if not isinstance(got, list) or len(got) != len(expected):
        raise CheckFailure(f"[{label}] history must be a list of {len(expected)} dicts, one per step run"
                           + _says("entries"))
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
    keys = set(HISTORY_KEYS) | {"seconds"}
    for t, (h, want) in enumerate(zip(got, expected)):
        if not isinstance(h, dict) or not set(HISTORY_KEYS) <= set(h) <= keys or (metrics and set(h) != keys):
            raise CheckFailure(f"[{label}] history[{t}] must be a dict with exactly the keys {sorted(keys)}, "
                               f"got {sorted(h) if isinstance(h, dict) else type(h).__name__}" + _says("entries"))
        if type(h["skipped"]) is not bool:
            kind = type(h["skipped"])
            raise CheckFailure(f"[{label}] history[{t}]['skipped'] must be a Python bool (True or False), got "
                               f"{kind.__module__}.{kind.__name__}" + _says("skipped"))
        if h["skipped"] != want["skipped"]:
            raise CheckFailure(f"[{label}] history[{t}]['skipped'] is {h['skipped']}, expected {want['skipped']}"
                               + _says("skip"))
        if h["step"] != want["step"]:
            raise CheckFailure(f"[{label}] history[{t}]['step'] is {h['step']!r}, expected {want['step']}"
                               + _says("entries"))
        if h["scale"] not in scales[t] or not isinstance(h["scale"], float):
            raise CheckFailure(f"[{label}] history[{t}]['scale'] is {h['scale']!r}, expected "
                               f"{' or '.join(map(repr, sorted(set(scales[t]))))} (2^6 at first, halved after an "
                               "overflow, doubled after 50 clean steps in a row)" + _says("scale") + _says("skip"))
        if h["bytes"] != want["bytes"]:
            raise CheckFailure(f"[{label}] history[{t}]['bytes'] is {h['bytes']!r}, expected {want['bytes']} "
                               "(on every step run, rolled-back ones too)" + _says("bytes"))
        loss = h["loss"]
        if t in rolled_back:
            if not _bad(loss, rolled_back[t]) or np.isfinite(want["loss"]) != np.isfinite(float(loss)):
                raise CheckFailure(f"[{label}] history[{t}]['loss'] is {loss!r}, expected a loss that is bad as the "
                                   f"reference's {want['loss']!r} (non-finite, or above {rolled_back[t]:.6g} = "
                                   "explode_factor x the smallest loss so far)" + _says("good"))
        elif isinstance(loss, bool) or not isinstance(loss, (int, float, np.floating)) or \
                not abs(float(loss) - want["loss"]) <= tol * abs(want["loss"]):
            raise CheckFailure(f"[{label}] history[{t}]['loss'] is {loss!r}, expected {want['loss']!r} (the batch's "
                               "mean loss)" + _says("loss"))
        seconds = h.get("seconds")
        if metrics and (isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.floating))
                        or not np.isfinite(seconds) or not seconds > 0):
            raise CheckFailure(f"[{label}] history[{t}]['seconds'] is {seconds!r}, expected the step's wall time"
                               + _says("metrics"))


def _bad_steps(expected: dict) -> dict[int, float]:
    """The reference's rolled-back and stopping steps, each with the threshold κ × (smallest good loss before it)."""
    kappa = expected["config"]["explode_factor"]
    bad = {r["step"] for r in expected["rollbacks"]}
    if expected["stopped"] is not None:
        bad.add(expected["history"][-1]["step"])
    out, smallest = {}, np.inf
    for h in expected["history"]:
        if h["step"] in bad:
            out[h["step"]] = kappa * smallest
        else:
            smallest = min(smallest, h["loss"])
    return out


def _rollbacks(label: str, got: dict, expected: dict) -> None:
    """``rollbacks`` entry by entry (steps and reasons exactly, learning rates to 1e-12) and ``stopped``."""
    want = expected["rollbacks"]
    entries = got["rollbacks"]
    if not isinstance(entries, list):
        raise CheckFailure(f"[{label}] rollbacks must be a list of dicts, got {type(entries).__name__}" + _says("undo"))
    summary = [(r["step"], r["reason"]) for r in want]
    if len(entries) != len(want) or not all(isinstance(r, dict) and set(r) == {"step", "reason", "lr"}
                                            for r in entries):
        raise CheckFailure(f"[{label}] rollbacks is {entries!r}, expected {len(want)} dicts "
                           f"{{'step', 'reason', 'lr'}} at (step, reason) {summary}" + _says("good") + _says("undo"))
    for i, (r, w) in enumerate(zip(entries, want)):
        if r["step"] != w["step"] or r["reason"] != w["reason"]:
            raise CheckFailure(f"[{label}] rollbacks[{i}] is at step {r['step']!r} for {r['reason']!r}, expected "
                               f"step {w['step']} for {w['reason']!r} (all: {summary})" + _says("good") + _says("undo"))
        lr = r["lr"]
        # lr_backoff^k x lr: k float multiplications, each exact to half an ulp; 1e-12 accepts any order
        if isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating)) or \
                not abs(float(lr) - w["lr"]) <= 1e-12 * w["lr"]:
            raise CheckFailure(f"[{label}] rollbacks[{i}]['lr'] is {lr!r}, expected {w['lr']!r}" + _says("undo"))
    stopped = got["stopped"]
    if expected["stopped"] is None:
        if stopped is not None:
            raise CheckFailure(f"[{label}] stopped is {stopped!r}, expected None (the run did not exhaust "
                               "max_retries)" + _says("stop"))
        return
    step = expected["history"][-1]["step"]
    if not isinstance(stopped, str) or "\n" in stopped or \
            re.search(rf"(?<![0-9]){step}(?![0-9])", stopped) is None:
        raise CheckFailure(f"[{label}] stopped is {stopped!r}, expected a one-line reason naming step {step} "
                           f"(max_retries = {expected['config']['max_retries']})" + _says("stop"))


def _metrics(label: str, got: dict, batch: int, num_workers: int) -> None:
    """The stage metrics' types and sanity; never their values against the reference (they depend on the machine)."""
    missing = [key for key in METRIC_KEYS if key not in got]
    if missing:
        raise CheckFailure(f"[{label}] the run record misses {missing}" + _says("metrics"))
    # No relation between the peaks is required: a first call in a process allocates caches (a worker's peak in
    # a fresh process was measured above the whole step's that followed it: 33,804 against 28,944 bytes)
    peaks = got["measured_peak_bytes_per_worker"]
    if not isinstance(peaks, list) or len(peaks) != num_workers or \
            not all(isinstance(p, (int, np.integer)) and not isinstance(p, bool) and p > 0 for p in peaks):
        raise CheckFailure(f"[{label}] measured_peak_bytes_per_worker is {peaks!r}, expected a list of "
                           f"{num_workers} ints > 0" + _says("metrics"))
    seconds = sum(float(h["seconds"]) for h in got["history"])
    throughput = got["examples_per_second"]
    want = batch * len(got["history"]) / seconds
    # the same quotient of the same step times: only the order of the sum may differ (~1e-15 relative)
    if isinstance(throughput, bool) or not isinstance(throughput, (int, float, np.floating)) or \
            not abs(float(throughput) - want) <= 1e-9 * want:
        raise CheckFailure(f"[{label}] examples_per_second is {throughput!r}, expected {want!r} = batch x "
                           f"{len(got['history'])} steps run / {seconds:.6g} s" + _says("metrics"))


def check_train(fn: Callable[..., Any]) -> str:
    """Loss curves, history, final weights, bytes and record fields for configurations that switch each technique
    on; rollbacks and stops (steps, reasons, learning rates, restored state) under absurd learning rates; the stage
    metrics' types and consistency (never their machine-dependent values)."""
    # Relative tolerances on the losses. float32 compute: the contract's 1e-5 (sums reordered across workers and
    # micro-batches move a loss by a few eps32 = 1.2e-7 per step; 6 Adam steps leave it near 1e-7). float16
    # compute: 2e-3, two float16 epsilons (2^-10 = 9.8e-4), "within float16's resolution".
    configs = [
        ("baseline", {}, 1e-5),
        ("4 workers, uneven shards (30 = 8+8+7+7)", {"num_workers": 4}, 1e-5),
        ("3 workers x 2 micro-batches", {"num_workers": 3, "num_micro_batches": 2}, 1e-5),
        ("checkpointing, segments of 2", {"segment_size": 2}, 1e-5),
        ("ZeRO-1 on 3 workers", {"num_workers": 3, "zero_stage": 1}, 1e-5),
        # ZeRO-2 and -3 compute what ZeRO-1 computes (to rounding: with M = 2 they reduce after every micro-batch);
        # their bytes differ (Implementation): Ψ = 690 here, so s = ceil(690 / 4) = 173 and stage 2 sends
        # (M + 1) x 3 x 173 floats a step where the ring sends 1,036
        ("ZeRO-2 on 4 workers x 2 micro-batches", {"num_workers": 4, "num_micro_batches": 2, "zero_stage": 2}, 1e-5),
        ("ZeRO-3 on 3 workers x 2 micro-batches, checkpointed (gathers before every micro-batch's forward and "
         "backward)", {"num_workers": 3, "num_micro_batches": 2, "segment_size": 2, "zero_stage": 3}, 1e-5),
        ("everything, float32", {"num_workers": 2, "num_micro_batches": 3, "segment_size": 3, "zero_stage": 2}, 1e-5),
        ("everything, mixed precision", {"num_workers": 2, "num_micro_batches": 2, "segment_size": 2,
                                         "zero_stage": 1, "precision": "mixed"}, 2e-3),
        # lr = 1 blows the weights up at step 0; from step 1 on float16 overflows on some workers (at step 3 not
        # on worker 0), every step is skipped and the scale halves: the losses stay finite and are still recorded.
        # (The pattern survives a 1e-6 relative change of the weights: float16 rounding absorbs it.) The losses
        # (3.4, then 338-763) stay below explode_factor = 1000 x 3.4: overflows that are skips, not rollbacks.
        ("mixed precision, lr = 1 on 3 workers: every step after the first overflows and is skipped, none "
         "rolled back", {"num_workers": 3, "precision": "mixed", "lr": 1.0, "seed": 3, "steps": 5,
                         "explode_factor": 1e3}, 2e-3),
        # 50 clean steps in a row double the scale (step 50 runs with 128); 51 float16 steps drift further from
        # another correct summation order than 6 do, hence the looser loss tolerance
        ("ZeRO-2, float16 overflows skip steps 1-4: their reduce-scatter is sent, no all-gather",
         {"num_workers": 3, "precision": "mixed", "lr": 1.0, "seed": 3, "steps": 5, "explode_factor": 1e3,
          "zero_stage": 2}, 2e-3),
        ("mixed precision, 51 steps (the scale grows after 50 clean steps)",
         {"precision": "mixed", "steps": 51}, 1e-2),
        # Rollback. Every accepted loss is at least 0.76% away from explode_factor x the smallest loss (the
        # closest: 2.76 against 3 x 0.914 = 2.74 in the creep case), and other summation orders (3 or 4 workers,
        # micro-batches, ZeRO) move the accepted losses by < 1e-6 relative: the rollbacks are the same for every
        # correct answer. The losses of rolled-back steps are explosions (up to 1e17) that rounding changes
        # freely; they are only required to be bad as well.
        # lr = 50: step 0 is fine (1.62), every update explodes the next loss; restored to the initial weights
        # each time with lr 25, 12.5, 6.25, and the bad loss at step 7 stops the run (final weights: initial).
        ("rollback: lr = 50, every update explodes: 3 rollbacks, then the run stops at step 7",
         {"lr": 50.0, "steps": 12}, 1e-5),
        # lr = 1: rollbacks at steps 1 and 3 (lr 0.5, 0.25), then the run trains on (0.64 at step 7)
        ("rollback: lr = 1 recovers after 2 rollbacks", {"lr": 1.0, "steps": 12}, 1e-5),
        # lr = 0.3, explode_factor = 3: losses 1.62, 7.76 (rolled back), 0.914, 2.25, 2.76, 2.87, ...: steps 4 and
        # 5 are within 3x the loss before them but above 3 x 0.914, the smallest; step 4 restores the state that
        # step 3 started from (the last good state), not the one before.
        ("rollback: a loss that creeps up is judged against the smallest loss (lr = 0.3, explode_factor = 3)",
         {"lr": 0.3, "explode_factor": 3.0, "steps": 12}, 1e-5),
        # float16 forward passes overflow to NaN losses; restored weights, Adam state and loss scale (64), lr 100;
        # the second NaN (step 3) stops the run
        ("rollback: non-finite losses in float16 (lr = 1000, max_retries = 1, lr_backoff = 0.1)",
         {"precision": "mixed", "lr": 1e3, "steps": 8, "max_retries": 1, "lr_backoff": 0.1}, 2e-3),
        # Metrics: types and sanity only (seconds and bytes depend on the machine and the allocator)
        ("metrics: 4 workers (30 = 8+8+7+7), 2 micro-batches", {"num_workers": 4, "num_micro_batches": 2}, 1e-5),
        ("metrics: a stopped run counts the steps it ran (2 workers, lr = 50)",
         {"num_workers": 2, "lr": 50.0, "steps": 12}, 1e-5),
    ]
    tolerance = {name: tol for name, _, tol in configs}
    mixed = {name for name, cfg, _ in configs if cfg.get("precision") == "mixed"}
    cases = [(name, _fixed({**SMALL, **cfg})) for name, cfg, _ in configs]
    unchanged = against_fresh_inputs(cases)

    def compare(label: str, got: Any, expected: dict, inputs: Args) -> None:
        unchanged(label, inputs)
        if not isinstance(got, dict):
            raise CheckFailure(f"[{label}] must return the run record (a dict), got {type(got).__name__}"
                               + _says("record"))
        metrics = label.startswith("metrics:")
        missing = sorted(set(expected) - set(got) - (set() if metrics else set(METRIC_KEYS)))
        if missing:
            raise CheckFailure(f"[{label}] the run record misses {missing}" + _says("record"))
        _rollbacks(label, got, expected)
        bad = _bad_steps(expected)
        good = [t for t in range(len(expected["losses"])) if t not in bad]
        losses, want = np.asarray(got["losses"], dtype=float), np.asarray(expected["losses"])
        if losses.shape != want.shape:
            raise CheckFailure(f"[{label}] {losses.size} losses recorded, expected one per step run ({want.size})"
                               + _says("record"))
        gap = np.abs(losses[good] - want[good]) / np.abs(want[good])
        worst = float(np.max(gap))
        if not worst <= tolerance[label]:
            step = good[int(np.nanargmax(np.where(np.isnan(gap), np.inf, gap)))]
            hint = _says("order") if step > 0 and label == "baseline" else ""  # step 0 right, later ones wrong
            raise CheckFailure(f"[{label}] loss at step {step} is {float(losses[step])!r}, expected "
                               f"{float(want[step])!r} (relative difference {worst:.3g}, allowed {tolerance[label]:g})"
                               + _says("loss") + _says("losses") + hint)
        _history(label, got["history"], expected["history"], tolerance[label], bad, metrics)
        if metrics:
            _metrics(label, got, expected["config"]["batch"], expected["config"]["num_workers"])
        report = got["memory_report"]
        for key, value in expected["memory_report"].items():
            # byte counts: integer products and exact quotients in float64 (~1e-16 relative); 1e-9 accepts
            # another order of the same operations, not a wrong term
            if not isinstance(report, dict) or not np.isclose(float(report.get(key, np.nan)), value, rtol=1e-9):
                shown = report.get(key) if isinstance(report, dict) else report
                raise CheckFailure(f"[{label}] memory_report[{key!r}] is {shown!r}, expected {value!r} "
                                   "(trainsys.memtrain.memory.memory_report of the config)" + _says("record"))
        sent = got["bytes_communicated_per_worker"]
        if type(sent) is not int or sent != expected["bytes_communicated_per_worker"]:
            raise CheckFailure(f"[{label}] bytes_communicated_per_worker is {sent!r}, "
                               f"expected the int {expected['bytes_communicated_per_worker']!r}" + _says("record")
                               + _says("bytes"))
        # float32 master weights (entries of size ~0.01-1): the gradients of another correct summation order
        # differ by a few eps32 (1.2e-7) relative, and Adam's step lr * m / (sqrt(v) + eps) carries that into the
        # weights over up to 51 steps: rtol 1e-4, atol 1e-6 leave a factor of ~100. With float16 forward and
        # backward passes the gradients differ by up to eps16 = 9.8e-4 relative: rtol 1e-2, atol 1e-3.
        rtol, atol = (1e-2, 1e-3) if label in mixed else (1e-4, 1e-6)
        final = got["final_params"]
        if not isinstance(final, dict) or list(final) != list(expected["final_params"]):
            raise CheckFailure(f"[{label}] final_params must be a dict with the keys "
                               f"{list(expected['final_params'])} in this order, got "
                               f"{list(final) if isinstance(final, dict) else type(final).__name__}" + _says("final"))
        try:
            assert_array_dict(label, "final_params (the float32 master weights)", final, expected["final_params"],
                              rtol=rtol, atol=atol)
        except CheckFailure as failure:
            raise CheckFailure(f"{failure}{_says('final')}{_says('losses')}") from None
        caller = inputs[0][0]["layer_widths"]
        record_widths = got["config"].get("layer_widths") if isinstance(got["config"], dict) else None
        if record_widths is caller:
            raise CheckFailure(f"[{label}] record['config']['layer_widths'] is the caller's own list"
                               + _says("mutation"))

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
        ("max_retries = -1", (ValueError,), key("max_retries"), _fixed({**SMALL, "max_retries": -1})),
        ("max_retries = 1.0", (TypeError,), key("max_retries"), _fixed({**SMALL, "max_retries": 1.0})),
        ("lr_backoff = 1 (the learning rate would never fall)", (ValueError,), key("lr_backoff"),
         _fixed({**SMALL, "lr_backoff": 1})),
        ("lr_backoff = 0", (ValueError,), key("lr_backoff"), _fixed({**SMALL, "lr_backoff": 0.0})),
        ("explode_factor = 1 (must be > 1)", (ValueError,), key("explode_factor"),
         _fixed({**SMALL, "explode_factor": 1.0})),
        ("explode_factor = nan", (ValueError,), key("explode_factor"), _fixed({**SMALL, "explode_factor": np.nan})),
        ("explode_factor = '10'", (TypeError,), key("explode_factor"), _fixed({**SMALL, "explode_factor": "10"})),
    ]
    refusals = {label for label, *_ in invalid}
    try:
        count = run_cases("train", fn, ref.train, cases, compare, invalid, compare_with_inputs=True, count_only=True)
    except CheckFailure as failure:  # the harness's own messages: a refusal, a changed config, a crash
        message = str(failure)
        if "(contract, " in message:
            raise
        label = message[1:message.index("]")] if message.startswith("[") and "]" in message else ""
        key = "failure" if label in refusals else "mutation" if " changed " in message or "modified" in message \
            else "record"
        raise CheckFailure(message + _says(key)) from None
    # A config without layer_widths takes TRAIN_DEFAULTS' list: two runs must not hand out one shared list.
    label = "two runs with the default widths: the records share no list"
    with quiet():
        first = call(fn, label, {"n": 40, "batch": 20, "steps": 1})
        second = call(fn, label, {"n": 40, "batch": 20, "steps": 1})
    widths = [r.get("config", {}).get("layer_widths") if isinstance(r, dict) and isinstance(r.get("config"), dict)
              else None for r in (first, second)]
    if widths[0] is not None and widths[0] is widths[1]:
        raise CheckFailure(f"[{label}] both records' config['layer_widths'] are one list object (TRAIN_DEFAULTS' "
                           "own?)" + _says("mutation"))
    return passed("train", count + 1)
