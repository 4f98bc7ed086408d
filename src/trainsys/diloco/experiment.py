r"""The ``H`` sweep: DiLoCo against the synchronous baseline at equal compute, over several seeds.

For a fixed budget of ``S`` inner steps per worker (``config.rounds · config.inner_steps``), each
``H`` in ``H_values`` runs DiLoCo for ``S / H`` rounds; the baseline all-reduces after every one of
the same ``S`` steps. Its trajectory does not depend on ``H`` (same data, seeds, batches), so it is run
once per seed and logged every ``gcd(H_values)`` steps. Per ``H``, over the seeds (mean ± sample
standard deviation): the bytes-per-step ratio (``H`` by construction), the final held-out accuracy
and loss of both, their gaps, and the communication saved at matched held-out loss
(:func:`~trainsys.diloco.evaluation.communication_savings`). Used by lessons 26–30 and ``make bench``;
``python -m trainsys.diloco.experiment`` prints the table for :data:`SWEEP_CONFIG`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence

import numpy as np
from tqdm import tqdm

from trainsys._validation import describe, require_int
from trainsys.diloco.evaluation import communication_savings
from trainsys.diloco.loop import DiLoCoConfig, train_diloco, train_synchronous_baseline, validate_config

SWEEP_CONFIG = DiLoCoConfig(n_examples=4800, inner_steps=10, rounds=50, sharding="noniid", dirichlet_alpha=0.5,
                            progress=False)
"""The default sweep: 4 workers, S = 500 inner steps each, non-IID shards (Dirichlet 0.5); ~15 s on one core."""

SWEEP_H_VALUES: tuple[int, ...] = (1, 5, 10, 25, 50, 100)
SWEEP_SEEDS: tuple[int, ...] = (0, 1, 2)


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def run_h_sweep(
    config: DiLoCoConfig | Mapping | None, H_values: Sequence[int], seeds: Sequence[int], *,
    progress: bool | None = None,
) -> dict[str, object]:
    """Run the baseline once per seed and DiLoCo once per ``(H, seed)``; summarise per ``H``.

    ``config`` fixes everything but ``inner_steps``, ``rounds`` and ``seed``; its ``rounds ·
    inner_steps`` is the step budget ``S``, which every ``H`` must divide. ``seeds``: training seeds
    (initialisation and batches; the data set is ``config.data_seed``'s). Returns ``{"config",
    "total_steps", "H_values", "seeds", "baseline": [record per seed], "diloco": {H: [record per seed]},
    "summary": [one dict per H]}``; each summary row holds ``H``, ``bytes_per_step_ratio``,
    ``<run>_<metric>_mean`` / ``_std`` for ``run`` in ``diloco``, ``sync`` and ``metric`` in
    ``accuracy``, ``loss``, the per-seed gaps ``accuracy_gap_*`` and ``loss_gap_*`` (DiLoCo − sync),
    and ``matched_ratio_*`` (bytes saved at matched held-out loss). ``progress`` as in the config.
    """
    cfg = validate_config(config)
    if isinstance(H_values, (str, bytes)) or not isinstance(H_values, Sequence) or len(H_values) == 0:
        raise TypeError(f"H_values must be a non-empty list of positive integers, got {describe(H_values)}")
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or len(seeds) == 0:
        raise TypeError(f"seeds must be a non-empty list of integers, got {describe(seeds)}")
    Hs = [require_int(f"H_values[{i}]", H, minimum=1) for i, H in enumerate(H_values)]
    seeds = [require_int(f"seeds[{i}]", s, minimum=0) for i, s in enumerate(seeds)]
    S = cfg.rounds * cfg.inner_steps
    for H in Hs:
        if S % H:
            raise ValueError(f"H_values must divide the step budget S = rounds * inner_steps = {S}, got H = {H}")
    grain = math.gcd(*Hs)
    quiet = dataclasses.replace(cfg, progress=False)
    baseline, diloco = [], {H: [] for H in Hs}
    start = time.perf_counter()
    with tqdm(total=len(seeds) * (1 + len(Hs)), desc="H sweep", unit="run", leave=False,
              disable=None if progress is None else not progress) as bar:
        for seed in seeds:
            baseline.append(train_synchronous_baseline(
                dataclasses.replace(quiet, seed=seed, inner_steps=grain, rounds=S // grain)))
            bar.update()
            for H in Hs:
                diloco[H].append(train_diloco(dataclasses.replace(quiet, seed=seed, inner_steps=H, rounds=S // H)))
                bar.update()
    summary = []
    for H in Hs:
        row: dict[str, float] = {"H": H}
        pairs = list(zip(diloco[H], baseline))
        savings = [communication_savings(d["history"], b["history"], "heldout_loss") for d, b in pairs]
        row["bytes_per_step_ratio"] = savings[0]["bytes_per_step_ratio"]
        for metric, key in (("accuracy", "heldout_accuracy"), ("loss", "heldout_loss")):
            d_final = [d["history"][-1][key] for d, _ in pairs]
            s_final = [b["history"][-1][key] for _, b in pairs]
            row[f"diloco_{metric}_mean"], row[f"diloco_{metric}_std"] = _mean_std(d_final)
            row[f"sync_{metric}_mean"], row[f"sync_{metric}_std"] = _mean_std(s_final)
            row[f"{metric}_gap_mean"], row[f"{metric}_gap_std"] = _mean_std(np.subtract(d_final, s_final))
        row["matched_ratio_mean"], row["matched_ratio_std"] = _mean_std([s["ratio"] for s in savings])
        summary.append(row)
    return {"config": dataclasses.asdict(cfg), "total_steps": S, "H_values": Hs, "seeds": seeds,
            "baseline": baseline, "diloco": diloco, "summary": summary, "wall_time_s": time.perf_counter() - start}


def format_h_sweep(result: Mapping) -> str:
    """The sweep's summary as a plain-text table (one line per ``H``)."""
    c = result["config"]
    lines = [f"DiLoCo H sweep: {c['num_workers']} workers, {result['total_steps']} inner steps each, "
             f"{c['sharding']} shards, seeds {result['seeds']}, {result['wall_time_s']:.1f} s",
             f"{'H':>5} {'bytes/step':>10} {'DiLoCo acc':>15} {'sync acc':>15} {'acc gap':>15} "
             f"{'loss gap':>15} {'saved @ loss':>15}"]
    for r in result["summary"]:
        lines.append(
            f"{r['H']:>5} {r['bytes_per_step_ratio']:>9.1f}x "
            f"{r['diloco_accuracy_mean']:>8.3f}±{r['diloco_accuracy_std']:.3f} "
            f"{r['sync_accuracy_mean']:>8.3f}±{r['sync_accuracy_std']:.3f} "
            f"{r['accuracy_gap_mean']:>+8.3f}±{r['accuracy_gap_std']:.3f} "
            f"{r['loss_gap_mean']:>+8.3f}±{r['loss_gap_std']:.3f} "
            f"{r['matched_ratio_mean']:>8.1f}±{r['matched_ratio_std']:.1f}x")
    return "\n".join(lines)


def main() -> None:
    """Print the default sweep (``make bench``'s DiLoCo section)."""
    print(format_h_sweep(run_h_sweep(SWEEP_CONFIG, SWEEP_H_VALUES, SWEEP_SEEDS, progress=False)))


if __name__ == "__main__":
    main()
