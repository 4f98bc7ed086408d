"""Witnesses for ``trainsys.grading.trainer`` (lesson 40): per clause, wrong answers that break it."""

from __future__ import annotations

from tests.answers.clauses import existing
from trainsys.memtrain import trainer as ref


def _train_filling_callers_config(config=None):
    """Right run, but the defaults are merged into the caller's own dict (config.update(...))."""
    run = ref.train(config)
    if config is not None:
        config.update({k: v for k, v in ref.DEFAULTS.items() if k not in config})
    return run


def _train_ignoring_unknown_keys(config=None):
    """Unknown keys are dropped silently instead of refused: a misspelt option is never noticed."""
    known = {k: v for k, v in (config or {}).items() if k in ref.DEFAULTS}
    return ref.train(known)


def _train_raising_on_overflow(config=None):
    """A non-finite gradient raises FloatingPointError ("training diverged") instead of skipping the step."""
    run = ref.train(config)
    skipped = [h["step"] for h in run["history"] if h["skipped"]]
    if skipped:
        raise FloatingPointError(f"float16 gradient overflow at step {skipped[0]}: training diverged")
    return run


WITNESSES = {
    "train": {
        "mutation": [
            existing("train", "shallow config merge"),
            ("the defaults merged into the caller's config", _train_filling_callers_config),
        ],
        "failure modes": [
            ("unknown keys dropped silently", _train_ignoring_unknown_keys),
            existing("train", "booleans accepted for integer fields"),
            existing("train", "progress not checked"),
            existing("train", "negative seed accepted"),
            existing("train", "lr = inf accepted"),
            existing("train", "num_micro_batches bound ceil(batch/N)"),
            existing("train", "lr_backoff = 1 accepted"),
        ],
        "data and order": [
            existing("train", "one permutation for the whole run"),
            existing("train", "epoch of ceil(n/batch) batches"),
        ],
        "history": [
            existing("train", "'skipped' as np.bool_"),
            existing("train", "history scale None in float32"),
            existing("train", "loss = mean of the workers' mean losses"),
            existing("train", "loss recorded as NaN on a skipped step"),
        ],
        "skip": [
            ("a float16 overflow raises FloatingPointError", _train_raising_on_overflow),
            existing("train", "loss scaler never updated"),
            existing("train", "skips only on worker 0's overflow"),
        ],
        "metric that proves it correct": [
            existing("train", "averages the workers' mean gradients equally"),
            existing("train", "counts the whole gradient as sent by each worker"),
            existing("train", "bills ZeRO-2 and -3 as the ring"),
            existing("train", "ZeRO-3 gathers once per step"),
            existing("train", "ZeRO-2/3 reduce-scatter once per step"),
            existing("train", "ZeRO-2 bills the all-gather on a skipped step"),
            existing("train", "steps on worker 0's gradient only"),
            existing("train", "memory report that ignores the ZeRO stage"),
        ],
        "rollback": [
            existing("train", "rolls back but does not lower the learning rate"),
            existing("train", "lowers the learning rate without restoring"),
            existing("train", "never stops"),
            existing("train", "judges a loss against the last loss"),
            existing("train", "restores the state from before the last good step"),
            existing("train", "counts a float16 skip as a rollback"),
            existing("train", "restores the weights but keeps the bad step's Adam state"),
            existing("train", "restores weights and Adam state but keeps the halved loss scale"),
            existing("train", "only non-finite losses roll back"),
            existing("train", "a stopped run returns the exploded weights"),
            existing("train", "stopped reason without the step"),
        ],
        "metrics": [
            existing("train", "history entries without seconds"),
            existing("train", "one peak for all workers"),
            existing("train", "throughput over the configured steps"),
            existing("train", "examples_per_second over the run's wall time"),
        ],
    },
}
