r"""DiLoCo's headline on a language model: the course's GPT on Shakespeare, against synchronous data parallelism.

Douillard et al. (2023, abstract and Table 2): 8 workers with ``H = 500`` "perform as well as fully
synchronous optimization while communicating 500 times less". Here, at equal compute (every run takes
the same ``S`` inner steps of ``B`` windows per worker), for ``N`` workers and each ``H``:

* **DiLoCo** — AdamW inner, Nesterov outer (lr 0.7, momentum 0.9, the paper's), ``S / H`` rounds;
* **(b) synchronous** — data parallelism with the ``N×`` batch: an all-reduce of the ``N`` gradients every step;
* **(a) one worker** — the same batch ``B`` and ``S`` steps, all the training text, no communication.

Data (:mod:`trainsys.data.shakespeare`): the 34 training plays; the held-out text is the 4 plays no worker
ever trains on (:data:`~trainsys.data.shakespeare.HELD_OUT_PLAYS`), evaluated on :data:`EVAL_WINDOWS` fixed
windows. Shards: ``"iid"`` — the training text cut into 2,048-character chunks dealt at random;
``"genre"`` — whole plays, in (genre, title) order, cut into ``N`` contiguous groups of about equal size, so a
worker reads mostly one genre (comedies, histories, tragedies, …). Two budgets: :data:`BUDGETS`.

``python -m trainsys.reproduce --section diloco-gpt`` runs :func:`diloco_gpt_section` and writes the record
``diloco-gpt``; lessons 26–30 and ``make bench`` read it.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import time
from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import require_int
from trainsys.diloco.evaluation import communication_savings
from trainsys.diloco.language_model import LanguageModelTask, LMConfig
from trainsys.diloco.loop import train_diloco, train_synchronous_baseline
from trainsys.models.gpt import parameter_count

MODEL = {"context": 64, "n_layer": 2, "n_head": 4, "n_embd": 64}
"""The GPT of the experiment (:func:`~trainsys.models.gpt.small_config`'s shape)."""
BATCH_SIZE = 4
CHUNK_CHARS = 2048
EVAL_WINDOWS = 128
DATA_SEED = 0
SEEDS: tuple[int, ...] = (0, 1, 2)
BUDGETS: dict[str, dict[str, object]] = {
    "large": {"steps": 500, "eval_every": 50, "H": {"genre": (10, 100, 500), "iid": (100, 500)}, "workers": (4,)},
    "small": {"steps": 100, "eval_every": 10, "H": {"genre": (10, 100)}, "workers": (4,)},
}
"""Per budget: inner steps per worker ``S`` (``S·B·64`` characters each), the evaluation interval, the ``H``
values per sharding and ``N``. The grid is what 2 shared CPU cores allowed on 2026-12-05 (each run's wall time
is in the record); :func:`jobs_for` builds any other grid, e.g. ``H`` in ``{1, 10, 50, 100, 250, 500}``."""


# --- data ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def corpus() -> dict[str, object]:
    """The encoded plays: ``{"vocab", "train": [(name, genre, ids)], "heldout": ids}`` (NumPy int64)."""
    from trainsys.data import shakespeare as sh

    train, held = sh.split_plays()
    vocab = sh.build_vocabulary(p.text for p in train)
    encode = lambda text: sh.Vocabulary.encode(vocab, text).numpy()  # noqa: E731
    return {"vocab": vocab, "train": [(p.name, p.genre, encode(p.text)) for p in train],
            "heldout": encode("\n".join(p.text for p in held)), "heldout_plays": [p.name for p in held]}


def make_shards(sharding: str, num_workers: int, data_seed: int = DATA_SEED) -> tuple[list[np.ndarray], list[list[str]]]:
    """``(shards, contents)``: one token stream per worker and what it holds (chunk count or play names).

    ``"iid"``: all training text cut into :data:`CHUNK_CHARS`-character chunks dealt at random
    (:func:`~trainsys.data.shakespeare.deal_iid`); ``"genre"``: whole plays in (genre, title) order, play
    ``i`` to worker ``floor(N · m_i / total)`` with ``m_i`` the character offset of its middle.
    Raises ``ValueError`` for another sharding or a worker left without text.
    """
    from trainsys.data.shakespeare import deal_iid

    num_workers = require_int("num_workers", num_workers, minimum=1)
    plays = corpus()["train"]
    if sharding == "iid":
        ids = np.concatenate([p[2] for p in plays])
        chunks = ids[: len(ids) // CHUNK_CHARS * CHUNK_CHARS].reshape(-1, CHUNK_CHARS)  # (n_chunks, CHUNK_CHARS)
        parts = deal_iid(len(chunks), num_workers, data_seed)
        return [chunks[p.numpy()].reshape(-1) for p in parts], [[f"{len(p)} chunks"] for p in parts]
    if sharding != "genre":
        raise ValueError(f"sharding must be 'iid' or 'genre', got {sharding!r}")
    sizes = np.array([len(p[2]) for p in plays])
    middles = np.cumsum(sizes) - sizes / 2
    owner = np.floor(num_workers * middles / sizes.sum()).astype(int)
    shards = [np.concatenate([p[2] for p, o in zip(plays, owner) if o == k] or [np.empty(0, np.int64)])
              for k in range(num_workers)]
    if any(len(s) == 0 for s in shards):
        raise ValueError(f"num_workers = {num_workers} leaves a worker without a play ({len(plays)} plays)")
    return shards, [[f"{p[1]}/{p[0]}" for p, o in zip(plays, owner) if o == k] for k in range(num_workers)]


@functools.lru_cache(maxsize=8)
def task(sharding: str, num_workers: int) -> LanguageModelTask:
    """The :class:`LanguageModelTask` for a sharding and ``N`` (one shard of all training text when ``N = 1``)."""
    c = corpus()
    shards, contents = make_shards(sharding, num_workers)
    return LanguageModelTask(shards, c["heldout"], len(c["vocab"]), eval_windows=EVAL_WINDOWS,
                             data={"sharding": sharding, "contents": contents})


# --- runs ------------------------------------------------------------------------------------------
def run_config(kind: str, num_workers: int, H: int, steps: int, eval_every: int, seed: int) -> LMConfig:
    """The :class:`LMConfig` of one run; ``kind`` ``"diloco"`` (``S/H`` rounds of ``H``) or ``"sync"`` (every step)."""
    H = H if kind == "diloco" else 1
    return LMConfig(num_workers=num_workers, inner_steps=H, rounds=steps // H, batch_size=BATCH_SIZE,
                    eval_every=max(eval_every, H) if kind == "diloco" else eval_every, seed=seed,
                    progress=False, **MODEL)


def run_job(job: Mapping[str, object]) -> dict[str, object]:
    """One run: ``job = {"kind", "sharding", "N", "H", "steps", "eval_every", "seed"}`` → its curve and bytes."""
    import torch

    torch.set_num_threads(1)
    t = task(job["sharding"], job["N"])
    cfg = run_config(job["kind"], job["N"], job["H"], job["steps"], job["eval_every"], job["seed"])
    train = train_diloco if job["kind"] == "diloco" else train_synchronous_baseline
    record = train(cfg, t)
    hist = record["history"]
    return {**job, "initial_loss": record["initial"]["heldout_loss"],
            "steps_curve": [e["steps"] for e in hist], "loss_curve": [e["heldout_loss"] for e in hist],
            "accuracy_curve": [e["heldout_accuracy"] for e in hist],
            "bytes_curve": [e["cumulative_bytes"] for e in hist], "history": hist,
            "wall_s": record["wall_time_s"]}


def jobs_for(budget: str, seeds: Sequence[int] = SEEDS) -> list[dict]:
    """Every run of a budget: per seed, one worker (a), then per (N, sharding) the baseline (b) and each ``H``."""
    b = BUDGETS[budget]
    base = {"budget": budget, "steps": b["steps"], "eval_every": b["eval_every"]}
    jobs = []
    for seed in seeds:
        jobs.append({**base, "kind": "sync", "sharding": "iid", "N": 1, "H": 1, "seed": seed})
        for N in b["workers"]:
            for sharding in b["H"]:
                jobs.append({**base, "kind": "sync", "sharding": sharding, "N": N, "H": 1, "seed": seed})
                jobs += [{**base, "kind": "diloco", "sharding": sharding, "N": N, "H": H, "seed": seed}
                         for H in b["H"][sharding]]
    return jobs


def run_jobs(jobs: Sequence[Mapping], workers: int) -> list[dict]:
    """The jobs with ``workers`` processes (one torch thread each), results in job order."""
    for job in jobs:  # build the data once before forking: every process then shares it
        task(job["sharding"], job["N"])
    if workers <= 1:
        return [run_job(j) for j in jobs]
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i]["N"] * (jobs[i]["kind"] != "sync" or jobs[i]["N"] > 1))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        done = pool.map(run_job, [jobs[i] for i in order], chunksize=1)
    out: list[dict] = [{}] * len(jobs)
    for i, result in zip(order, done):
        out[i] = result
    return out


# --- summary ---------------------------------------------------------------------------------------
def _ms(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def summarise(results: Sequence[Mapping], budget: str, N: int, sharding: str) -> dict[str, object]:
    """The table of one (budget, N, sharding): per ``H`` the final held-out loss (mean ± std over seeds), the
    paired gap to (b), bytes per worker, the per-step saving ``H`` and the saving at matched loss."""
    pick = lambda kind, n, sh, H: sorted((r for r in results if r["budget"] == budget and r["kind"] == kind  # noqa: E731
                                          and r["N"] == n and r["sharding"] == sh and r["H"] == H), key=lambda r: r["seed"])
    sync, single = pick("sync", N, sharding, 1), pick("sync", 1, "iid", 1)
    final = lambda runs: [r["loss_curve"][-1] for r in runs]  # noqa: E731
    bytes_worker = lambda r: r["bytes_curve"][-1] // r["N"]  # noqa: E731
    s_mean, s_std = _ms(final(sync))
    a_mean, a_std = _ms(final(single))
    rows = [["(a) one worker", "—", a_mean, a_std, a_mean - s_mean, None, 0, None, None],
            ["(b) synchronous", 1, s_mean, s_std, 0.0, 0.0, bytes_worker(sync[0]), 1.0, 1.0]]
    per_H = {}
    for H in BUDGETS[budget]["H"][sharding]:
        runs = pick("diloco", N, sharding, H)
        d = final(runs)
        gap_mean, gap_std = _ms(np.subtract(d, final(sync)))
        saved = [communication_savings(r["history"], s["history"])["ratio"] for r, s in zip(runs, sync)]
        m, sd = _ms(d)
        rows.append([f"DiLoCo H = {H}", H, m, sd, gap_mean, gap_std, bytes_worker(runs[0]), float(H), _ms(saved)[0]])
        per_H[H] = {"loss_mean": m, "loss_std": sd, "gap_mean": gap_mean, "gap_std": gap_std,
                    "matched_saving_mean": _ms(saved)[0], "matched_saving_std": _ms(saved)[1],
                    "bytes_per_worker": bytes_worker(runs[0]), "rounds": runs[0]["steps"] // H}
    S = BUDGETS[budget]["steps"]
    table = {"columns": ["run", "H", "held-out loss", "± std", "gap to (b)", "gap ± std", "bytes per worker",
                         "bytes saved per step", "saved at matched loss"],
             "rows": rows,
             "formats": {"held-out loss": "{:.3f}", "± std": "{:.3f}", "gap to (b)": "{:+.3f}", "gap ± std": "{:.3f}",
                         "bytes per worker": "{:,}", "bytes saved per step": "{:.0f}×", "saved at matched loss": "{:.1f}×"},
             "caption": (f"{N} workers, {sharding} shards, {S} inner steps of {BATCH_SIZE}×{MODEL['context']} "
                         f"characters per worker ({budget} budget); final held-out loss (nats per character) "
                         f"on 4 unseen plays, mean ± std over seeds {list(SEEDS)}; gap = DiLoCo − (b), paired by seed.")}
    return {"table": table, "sync": {"loss_mean": s_mean, "loss_std": s_std}, "single": {"loss_mean": a_mean,
            "loss_std": a_std}, "per_H": per_H}


def headline(summary: Mapping, N: int, sharding: str, H: int) -> str:
    """One line: DiLoCo at ``H`` against (b), from a summary of :func:`summarise`."""
    row, s = summary["per_H"][H], summary["sync"]
    return (f"DiLoCo GPT on Shakespeare, {N} workers, {sharding} shards, H = {H}: held-out loss "
            f"{row['loss_mean']:.3f} ± {row['loss_std']:.3f} vs synchronous {s['loss_mean']:.3f} ± {s['loss_std']:.3f} "
            f"(gap {row['gap_mean']:+.3f} ± {row['gap_std']:.3f}) with {H}× fewer bytes per step")


def diloco_gpt_section(quick: bool = False, workers: int = 2) -> dict:
    """``make reproduce`` section ``diloco-gpt``: both budgets, every run, the record; ``quick`` re-checks two runs."""
    from trainsys.data.shakespeare import shakespeare_entry
    from trainsys.evidence import load_record, write_record

    if quick:
        record = load_record("diloco-gpt")
        checks = {}
        for job in [j for j in jobs_for("small", seeds=SEEDS[:1]) if j["N"] > 1][:2]:
            mine = run_job(job)
            kept = next(r for r in record["extra"]["runs"] if all(r[k] == job[k] for k in job))
            # same code, data and seed: bit for bit on the recording machine; another CPU's BLAS sums in another
            # order and Adam carries the rounding through 100 steps, so allow 0.02 nats, under a third of the
            # seed-to-seed spread of these runs in the record (std 0.057 and 0.298 nats)
            checks[f"{job['kind']} N={job['N']} H={job['H']}"] = abs(mine["loss_curve"][-1] - kept["loss_curve"][-1])
        if max(checks.values()) > 0.02:
            raise AssertionError(f"diloco-gpt quick re-run differs from the record: {checks}")
        return {"name": "diloco-gpt", "figures": {}, "checks": checks}
    start = time.perf_counter()
    jobs = [j for b in BUDGETS for j in jobs_for(b)]
    results = run_jobs(jobs, workers)
    summaries, figures = {}, {}
    for budget, b in BUDGETS.items():
        for N in b["workers"]:
            for sharding in b["H"]:
                key = f"{budget}-n{N}-{sharding}"
                summaries[key] = summarise(results, budget, N, sharding)
                figures[key] = summaries[key]["table"]
    c = corpus()
    n_params = parameter_count(task("iid", 1).gpt_config(run_config("sync", 1, 1, 1, 1, 0)))
    figures["headline"] = headline(summaries["large-n4-genre"], 4, "genre", max(BUDGETS["large"]["H"]["genre"]))
    figures["summary"] = {k: {"sync": v["sync"], "single": v["single"], "per_H": {str(h): r for h, r in v["per_H"].items()}}
                          for k, v in summaries.items()}
    figures["parameters"] = n_params
    config = {"model": MODEL, "batch_size": BATCH_SIZE, "chunk_chars": CHUNK_CHARS, "eval_windows": EVAL_WINDOWS,
              "budgets": {k: {**v, "H": {sh: list(h) for sh, h in v["H"].items()}, "workers": list(v["workers"])}
                          for k, v in BUDGETS.items()}, "lm_config_defaults": dataclasses.asdict(LMConfig()),
              "heldout_plays": c["heldout_plays"], "vocabulary_size": len(c["vocab"])}
    runs = [{k: v for k, v in r.items() if k != "history"} for r in results]
    return write_record("diloco-gpt", datasets=[shakespeare_entry()], config=config, seeds=list(SEEDS),
                        figures=figures, wall_s=time.perf_counter() - start, extra={"runs": runs},
                        notes=("Equal compute: every run takes the same inner steps of the same batch per worker; "
                               "(b) all-reduces N gradients every step, DiLoCo N parameter trees every H steps. "
                               "Held-out loss: mean next-character cross-entropy on 128 fixed windows of 65 "
                               "characters spread over the 4 held-out plays."))


def mean_curves(record: Mapping, budget: str, N: int, sharding: str) -> dict[str, dict[str, list[float]]]:
    """Held-out loss curves of a record's runs, mean and std over seeds, keyed ``"(a) one worker"``,
    ``"(b) synchronous"``, ``"DiLoCo H = …"``: ``{"steps", "bytes_per_worker", "mean", "std"}`` per key."""
    runs = record["extra"]["runs"]
    groups: dict[str, list[Mapping]] = {}
    for r in runs:
        if r["budget"] != budget:
            continue
        if r["N"] == 1:
            label = "(a) one worker"
        elif r["N"] == N and r["sharding"] == sharding:
            label = "(b) synchronous" if r["kind"] == "sync" else f"DiLoCo H = {r['H']}"
        else:
            continue
        groups.setdefault(label, []).append(r)
    out = {}
    for label, rs in sorted(groups.items(), key=lambda kv: (kv[0][0] != "(", len(kv[0]), kv[0])):
        losses = np.array([r["loss_curve"] for r in rs])  # (seeds, points)
        out[label] = {"steps": rs[0]["steps_curve"], "bytes_per_worker": [b // rs[0]["N"] for b in rs[0]["bytes_curve"]],
                      "mean": losses.mean(0).tolist(),
                      "std": (losses.std(0, ddof=1) if len(rs) > 1 else np.zeros(losses.shape[1])).tolist()}
    return out
