"""``make bench``: the figures the course promises, measured and printed (never asserted).

Run ``python -m tests.bench`` from the repository root for every section, or name sections:
``python -m tests.bench mutants nbval``. Each section prints ``name: value`` lines.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import yaml

import trainsys.grading as grading
from trainsys.course import BIN, REPO, assignments, make_course_copy, run_nbgrader, solved_answers, submit

def _lessons() -> list[Path]:
    return sorted(REPO.glob("solutions/*/*.ipynb"))


def bench_mutants() -> None:
    """How many realistic wrong implementations the hidden checks reject (the developers' and the blind red
    team's), how many correct alternatives they accept, how many contract clauses are enforced, and the check time:
    every record of the one registry (``tests/answers``) checked once."""
    sys.path.insert(0, str(REPO))
    from tests.answers import check, clause_problems, problems, records
    from trainsys.grading.clauses import declared_clauses, stated_clauses

    answers = records()
    declared = declared_clauses()
    start = time.perf_counter()
    outcomes = {answer: check(answer) for answer in answers}
    elapsed = time.perf_counter() - start
    tally = {(origin, verdict): [0, 0] for origin in ("developer", "blind") for verdict in ("wrong", "right")}
    for answer, outcome in outcomes.items():  # [as its verdict says, total]
        tally[answer.origin, answer.verdict][0] += not problems(answer, outcome, declared.get(answer.function, {}))
        tally[answer.origin, answer.verdict][1] += 1
    (dev, dev_total), (red, red_total) = tally["developer", "wrong"], tally["blind", "wrong"]
    right, right_total = (sum(tally[o, "right"][i] for o in ("developer", "blind")) for i in (0, 1))
    in_place = sum(1 for a in answers if a.module.startswith("tests.answers.clauses."))
    print(f"records: {len(answers)} ({sum(len(a.clauses) for a in answers)} clause witnesses among them); "
          f"mutants rejected: developers' {dev} / {dev_total} ({in_place} of them clause witnesses written in place), "
          f"red team's {red} / {red_total}, "
          f"all {dev + red} / {dev_total + red_total}; correct alternatives accepted: {right} / {right_total}")
    alternatives = Counter(a.function for a in answers if a.verdict == "right")
    print(f"graded functions with at least two correct alternatives: {sum(n >= 2 for n in alternatives.values())} / "
          f"{len([n for n in grading.__all__ if n.startswith('check_')])}")
    stated = enforced = cases = 0
    for lesson in _lessons():
        function, keys = stated_clauses(lesson)
        mine = {a: o for a, o in outcomes.items() if a.function == function}
        for key in keys:
            labels = declared.get(function, {}).get(key, ())
            stated, cases = stated + 1, cases + len(labels)
            witnesses = {a: o for a, o in mine.items() if key in a.clauses}
            enforced += bool(labels) and not clause_problems(function, key, labels, witnesses)
    print(f"contract clauses enforced / stated: {enforced} / {stated} ({cases} declared cases, "
          f"{sum(len(a.clauses) for a in answers)} witnesses)")
    print(f"mean check time per answer: {elapsed / max(len(answers), 1) * 1000:.1f} ms")


def bench_lessons() -> None:
    """How long the lessons are: markdown words per lesson (median, largest) and in all, per module."""
    import statistics

    from trainsys.course import lesson_words

    words = {path: lesson_words(path) for path in _lessons()}
    for module in ("m1", "m2", "m3", ""):
        counts = [n for path, n in words.items() if path.parent.name.startswith(module)]
        print(f"lesson words, {'module ' + module[1] if module else 'all 96 lessons'}: median "
              f"{statistics.median(counts):.0f}, largest {max(counts)}, total {sum(counts)}")


def bench_nbval() -> None:
    """Seconds per notebook for ``pytest --nbval-lax`` over every lesson (kernel start included)."""
    lessons = _lessons()
    start = time.perf_counter()
    subprocess.run([str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                    *map(str, lessons)], cwd=REPO, check=True, capture_output=True)
    elapsed = time.perf_counter() - start
    print(f"nbval: {len(lessons)} notebooks in {elapsed:.1f} s = {elapsed / len(lessons):.2f} s per notebook")


def bench_autograde() -> None:
    """Seconds per notebook for ``nbgrader autograde`` of one student who solved everything."""
    with tempfile.TemporaryDirectory() as tmp:
        course = make_course_copy(Path(tmp))
        count = 0
        start = time.perf_counter()
        for assignment in assignments(course):
            submit(course, "bench_student", assignment, solved_answers(course, assignment))
            run_nbgrader(course, "autograde", assignment, "--create")
            count += len(list((course / "solutions" / assignment).glob("*.ipynb")))
        elapsed = time.perf_counter() - start
    print(f"autograde: {count} notebooks in {elapsed:.1f} s = {elapsed / count:.2f} s per notebook")


def bench_book() -> None:
    """Wall time of a full book build, every notebook executed afresh (no execution cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = yaml.safe_load((REPO / "_config.yml").read_text())
        config["execute"]["cache"] = str(Path(tmp) / "cache")
        extensions = config["sphinx"]["local_extensions"]  # resolved next to the config file: make them absolute
        config["sphinx"]["local_extensions"] = {name: str(REPO / path) for name, path in extensions.items()}
        config_path = Path(tmp) / "_config.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))  # nb_ipywidgets_js: require.js first
        start = time.perf_counter()
        subprocess.run([str(BIN / "jupyter-book"), "build", str(REPO), "--config", str(config_path),
                        "--path-output", str(Path(tmp) / "out"), "--warningiserror", "--keep-going"],
                       cwd=REPO, check=True, capture_output=True)
        elapsed = time.perf_counter() - start
        print(f"book build (fresh execution of {len(_lessons())} lessons): {elapsed:.1f} s")
        for page, frames, png, size in _widget_frames(Path(tmp) / "out" / "_build" / "html"):
            print(f"widget frames, {page}: {frames} frames, {png / 1024:.0f} KiB of PNG, page {size / 1024:.0f} KiB")
        shutil.rmtree(Path(tmp) / "out", ignore_errors=True)


def _widget_frames(html: Path) -> list[tuple[str, int, int, int]]:
    """``(page, frames, PNG bytes, page bytes)`` of every built page that keeps explorer frames."""
    import base64
    import json
    import re

    rows = []
    for page in sorted(html.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        state = re.search(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', text, re.S)
        if state is None:
            continue
        models = json.loads(state.group(1))["state"].values()
        frames = [m for m in models if m["model_name"] == "ImageModel"
                  and any(c.startswith("tsx-frame-") for c in m["state"].get("_dom_classes", []))]
        if frames:
            png = sum(len(base64.b64decode(b["data"])) for m in frames for b in m.get("buffers", []))
            rows.append((page.stem, len(frames), png, len(text.encode())))
    return rows


def bench_accumulation() -> None:
    """Gradient accumulation: estimated vs tracemalloc peak per micro-batch count."""
    import numpy as np

    from trainsys.memtrain import accumulation, mlp
    from trainsys.memtrain.measure import peak_memory_bytes

    n, d_in, h, o = 4096, 32, 256, 2
    X, Y = mlp.make_synthetic_regression_batch(n, d_in, o, np.random.default_rng(0))
    params = mlp.init_mlp_params(d_in, h, o, np.random.default_rng(1))
    print(f"accumulation, n={n}, {d_in}->{h}->{o}, float32")
    full = None
    for M in (1, 2, 4, 8, 16, 32):
        _, measured = peak_memory_bytes(accumulation.grad_accumulation_step, params, X, Y, M, 0.01)
        estimate = accumulation.estimate_accumulation_peak_bytes(n, d_in, h, o, M)
        full = full or measured
        print(f"  M={M:3d}: measured {measured / 2**20:7.2f} MiB, estimate {estimate / 2**20:7.2f} MiB, "
              f"error {100 * (estimate - measured) / measured:+5.1f}%, measured/full = {measured / full:.3f} (1/M = {1 / M:.3f})")


def bench_checkpointing() -> None:
    """Checkpointing: estimated vs tracemalloc peak per segment size, and the recompute overhead in time."""
    import math

    import numpy as np

    from trainsys.memtrain import checkpointing as ck
    from trainsys.memtrain.measure import peak_memory_bytes

    L, w, n = 16, 256, 1024
    widths = [64] + [w] * (L - 1) + [8]
    params = ck.init_deep_mlp_params(widths, np.random.default_rng(0))
    X = np.random.default_rng(1).standard_normal((n, 64)).astype(np.float32)
    Y = np.zeros((n, 8), np.float32)

    def seconds(s: int | None) -> float:
        ck.checkpointed_forward_backward(params, X, Y, s)  # warm-up
        best = math.inf
        for _ in range(10):
            start = time.perf_counter()
            ck.checkpointed_forward_backward(params, X, Y, s)
            best = min(best, time.perf_counter() - start)
        return best

    plain_time = seconds(None)
    _, plain = peak_memory_bytes(ck.checkpointed_forward_backward, params, X, Y, None)
    print(f"checkpointing, L={L}, width {w}, batch {n}: plain peak {plain / 2**20:.1f} MiB, {plain_time * 1e3:.0f} ms")
    for s in (1, 2, 3, 4, 6, 8, 16):
        est = ck.estimate_checkpointing_memory_savings(widths, n, s)
        _, measured = peak_memory_bytes(ck.checkpointed_forward_backward, params, X, Y, s)
        ratio = seconds(s) / plain_time
        print(f"  s={s:2d}: measured {measured / 2**20:6.1f} MiB, estimate {est['checkpointed_peak_bytes'] / 2**20:6.1f} MiB, "
              f"error {100 * (est['checkpointed_peak_bytes'] - measured) / measured:+5.2f}%, "
              f"recomputed {est['recomputed_layers']:2d} layers, FLOP overhead {100 * est['extra_compute_fraction']:4.1f}%, "
              f"time overhead ratio {ratio:.2f}")
    print(f"  optimal segment size: {est['optimal_segment_size']} (sqrt(L) = {math.sqrt(L):.1f})")


def bench_mixed_precision() -> None:
    """Mixed precision: final-loss gap between float16 with dynamic loss scaling and float32."""
    import numpy as np

    from trainsys.memtrain import mixed_precision as mp
    from trainsys.memtrain import mlp

    X, Y = mlp.make_synthetic_regression_batch(512, 16, 4, np.random.default_rng(0))
    fp32 = mlp.init_mlp_params(16, 64, 4, np.random.default_rng(1))
    master, scaler = mp.make_master_params(fp32), mp.init_loss_scaler(growth_interval=100)
    skipped = 0
    for _ in range(400):
        Y_hat, cache = mlp.mlp_forward(fp32, X)
        loss32, dY = mlp.mse_loss_and_grad(Y_hat, Y)
        fp32 = mlp.sgd_step(fp32, mlp.mlp_backward(fp32, cache, dY), 0.05)
        master, scaler, info = mp.mixed_precision_step(master, X, Y, scaler, 0.05)
        skipped += info["skipped"]
    final32 = mlp.mse_loss_and_grad(mlp.mlp_forward(fp32, X)[0], Y)[0]
    final16 = mlp.mse_loss_and_grad(mlp.mlp_forward(master, X)[0], Y)[0]
    print(f"mixed precision, 400 SGD steps: float32 final loss {final32:.5f}, float16+scaling {final16:.5f}, "
          f"gap {100 * (final16 - final32) / final32:+.2f}%, skipped steps {skipped}, final scale {scaler['scale']:g}")


def bench_formats() -> None:
    """Low-precision formats: final-loss gap vs float32 for bfloat16, float16 with loss scaling, FP8 with and without delayed scaling."""
    from trainsys.memtrain import formats as fm

    steps, seeds = 500, (0, 1, 2)
    base = {seed: fm.train_in_format("float32", "none", steps, seed) for seed in seeds}
    config = base[0]["config"]
    print(f"formats, {steps} gradient-descent steps, n={config['n']}, {config['d_in']}->{config['d_hidden']}->"
          f"{config['d_out']}, lr {config['lr']}, seeds {list(seeds)}: float32 final loss "
          + ", ".join(f"{base[s]['final_loss']:.5f}" for s in seeds))
    for label, fmt, scaling, grad_fmt in (("bfloat16, no scaling", "bfloat16", "none", None),
                                          (f"float16, static loss scale {config['loss_scale']:g}", "float16", "loss", None),
                                          ("float8_e4m3fn, no scaling", "float8_e4m3fn", "none", None),
                                          ("float8_e4m3fn, delayed scaling", "float8_e4m3fn", "delayed", None),
                                          ("e4m3 forward / e5m2 gradients, delayed", "float8_e4m3fn", "delayed", "float8_e5m2")):
        runs = {seed: fm.train_in_format(fmt, scaling, steps, seed, grad_fmt=grad_fmt) for seed in seeds}
        gaps = [100 * fm.loss_gap(runs[s], base[s]) for s in seeds]
        flushed = [100 * runs[s]["gradient_flush_fraction"] for s in seeds]
        print(f"  {label}: loss gap vs float32 " + ", ".join(f"{g:+.2f}%" for g in gaps)
              + "; gradient entries flushed to 0: " + ", ".join(f"{f:.1f}%" for f in flushed)
              + f"; non-finite steps {sum(runs[s]['non_finite_steps'] for s in seeds)}")


def bench_grading() -> None:
    """Class grading throughput: the same 8-student class graded with --jobs 1 and 2, with and without the sandbox."""
    sys.path.insert(0, str(REPO))
    from tests.synthetic_class import LESSONS, make_course, students, submit_class

    from trainsys.autograde.runner import Options, grade_class

    roster = [s for s in students() if s.name in {"solved", "partial", "blank", "warnings_on_stderr",
                                                 "import_reference", "edit_locked_cell", "mutant_relu_forward_0",
                                                 "mutant_linear_backward_1"}]
    notebooks = len(roster) * len(LESSONS)

    def grade(jobs: int, sandbox: bool) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            course = make_course(Path(tmp))
            submit_class(course, roster)
            start = time.perf_counter()
            grade_class(Options(course=course, jobs=jobs, timeout=30, sandbox=sandbox), progress=False)
            return time.perf_counter() - start

    seconds = {}
    for jobs, sandbox in ((1, True), (2, True), (2, False)):
        seconds[jobs, sandbox] = elapsed = grade(jobs, sandbox)
        print(f"grading {len(roster)} students x {len(LESSONS)} notebooks with --jobs {jobs}, "
              f"{'sandboxed' if sandbox else 'unsandboxed'}: {elapsed:.1f} s = {elapsed / notebooks:.2f} s per "
              f"notebook, {notebooks / elapsed * 60:.0f} notebooks/min")
    print(f"speed-up --jobs 2 vs --jobs 1 (sandboxed): {seconds[1, True] / seconds[2, True]:.2f}x")
    overhead = seconds[2, True] / seconds[2, False] - 1
    print(f"sandbox overhead, --jobs 2: {seconds[2, True] / notebooks:.2f} vs {seconds[2, False] / notebooks:.2f} s per "
          f"notebook = {100 * overhead:+.1f}% (target <= 15%)")


def bench_data_parallel() -> None:
    """Ring bytes per worker over the 2(N-1)/N·S bound, ZeRO state per worker, simulation vs torch.distributed."""
    import numpy as np

    from trainsys.memtrain import memory, zero
    from trainsys.memtrain.mlp import init_mlp_params
    from trainsys.memtrain.ring_allreduce import bytes_sent_per_worker, ring_all_reduce_mean

    for numel in (1024, 1000):
        ratios = []
        for N in range(2, 9):
            arrays = [np.ones(numel, np.float32) for _ in range(N)]
            _, log = ring_all_reduce_mean(arrays)
            ratios.append(max(bytes_sent_per_worker(log, N)) / (2 * (N - 1) / N * numel * 4))
        print(f"ring, S = {numel} float32: bytes per worker / (2(N-1)/N * S) for N=2..8: "
              + ", ".join(f"{r:.4f}" for r in ratios))
    params = init_mlp_params(784, 200, 10, np.random.default_rng(0))
    whole = zero.optimizer_state_bytes(zero.init_adam_state(params))
    for N in (2, 4, 8):
        per = zero.optimizer_state_bytes_per_worker(zero.init_sharded_adam_states(params, N))
        print(f"ZeRO-1, 784-200-10 MLP, N={N}: state per worker / unsharded = {max(per) / whole:.4f} (1/N = {1 / N:.4f})")
    zero_gb = [memory.compute_optimizer_memory_bytes(7_500_000_000, "mixed", 64, s)["total"] / 1e9 for s in range(4)]
    print("ZeRO paper example (7.5B parameters, 64 workers), GB per worker by stage: "
          + ", ".join(f"{g:.1f}" for g in zero_gb))
    sys.path.insert(0, str(REPO))
    import pytest  # the torch.distributed comparisons are the tests themselves; report their agreement here

    start = time.perf_counter()
    code = pytest.main(["-q", "-p", "no:cacheprovider", str(REPO / "tests" / "test_m1_distributed.py")])
    print(f"simulation vs torch.distributed (2 gloo processes): tests {'passed' if code == 0 else 'FAILED'} "
          f"in {time.perf_counter() - start:.1f} s (losses agree to rtol 1e-5 for DDP, 2e-5 for ZeroRedundancyOptimizer)")


def bench_zero_stages() -> None:
    """ZeRO stages 0-3 executed: per-worker bytes held (measured vs accounted) and bytes sent per step vs the bound."""
    import numpy as np

    from trainsys.memtrain import memory
    from trainsys.memtrain import zero_stages as zs
    from trainsys.memtrain.checkpointing import init_deep_mlp_params
    import numpy as np

    from trainsys.memtrain.mlp import make_synthetic_regression_batch

    widths, n, batch, steps = [30] + [256] * 8 + [7], 128, 64, 2  # Psi odd: every N > 1 pads
    params = init_deep_mlp_params(widths, np.random.default_rng(0))
    X, Y = make_synthetic_regression_batch(n, widths[0], widths[-1], np.random.default_rng(1))
    psi = zs.zero_layout(widths, 1).psi
    print(f"ZeRO stages executed, MLP {widths[0]}-256x8-{widths[-1]} (Psi = {psi:,} float32), batch {batch}, "
          f"{steps} Adam steps; bytes per worker (largest over workers and steps): measured / accounted "
          f"(memory.py fp32 + layer buffers) [memory.py alone]")
    for N in (2, 4, 8):
        base = None
        for stage in zs.STAGES:
            start = time.perf_counter()
            run = zs.train_zero(params, X, Y, stage=stage, num_workers=N, steps=steps, batch_size=batch)
            elapsed = time.perf_counter() - start
            base = base or run
            plain = memory.compute_optimizer_memory_bytes(psi, "fp32", N, stage)
            accounted = zs.accounted_bytes_per_worker(widths, N, stage)
            cells = []
            for cls, label in (("parameters", "params"), ("gradients", "grads"), ("optimizer_states", "Adam")):
                measured = max(peak[cls] for peak in run["peak_bytes"])
                cells.append(f"{label} {measured:,} / {accounted[cls]:,.1f} [{plain[cls]:,.1f}]")
            sent = max(max(row) for row in run["bytes_sent_per_step"])
            c = 3 if stage == 3 else 2
            loss_gap = max(abs(a - b) / b for a, b in zip(run["losses"], base["losses"]))
            print(f"  N={N} stage {stage}: " + "; ".join(cells)
                  + f"; sent/step {sent:,} vs {c}(N-1)/N*Psi*4 = {c * (N - 1) / N * psi * 4:,.1f} "
                  f"(exact on P = {run['layout'].padded:,}: {zs.expected_bytes_sent_per_step(psi, N, stage):,}); "
                  f"loss vs stage 0 {loss_gap:.1e}; {elapsed:.2f} s")


def bench_trainer() -> None:
    """Lesson 40: every technique on vs the plain baseline (loss-curve agreement, memory per worker, stage
    metrics), and the stop condition under an absurd learning rate (rollbacks, recovery or stop)."""
    from trainsys.memtrain.trainer import loss_curves_agree, train

    base = train({})
    for config in ({"num_workers": 4, "num_micro_batches": 2, "segment_size": 2, "zero_stage": 1},
                   {"num_workers": 4, "num_micro_batches": 2, "segment_size": 2, "zero_stage": 1, "precision": "mixed"}):
        run = train(config)
        worst = loss_curves_agree(run, base, rtol=1.0)
        median = sorted(h["seconds"] for h in run["history"])[len(run["history"]) // 2]
        print(f"train {config}: max relative loss difference to the baseline {worst:.2e}; memory per worker "
              f"{run['memory_report']['total'] / 2**20:.2f} MiB vs {base['memory_report']['total'] / 2**20:.2f} MiB; "
              f"{run['bytes_communicated_per_worker']:,} bytes sent per worker; {run['wall_time_s']:.2f} s")
        print(f"  metrics: {run['examples_per_second']:,.0f} examples/s; median step {median * 1e3:.2f} ms; "
              f"measured peak per worker (step 0, one at a time) {run['measured_peak_bytes_per_worker']} bytes vs "
              f"{run['measured_first_step_peak_bytes_all_workers']:,} for the whole simulated step")
    all_on = {"num_workers": 4, "num_micro_batches": 2, "segment_size": 2, "steps": 1}
    runs = [train({**all_on, "zero_stage": stage}) for stage in range(4)]
    peaks = [max(run["measured_peak_bytes_per_worker"]) for run in runs]
    print("train all-on (4 workers, M = 2, segments of 2), by ZeRO stage 0-3: busiest worker's measured peak "
          + " / ".join(f"{p:,}" for p in peaks) + " bytes vs Lesson 39's "
          + " / ".join(f"{run['memory_report']['total']:,.0f}" for run in runs)
          + f"; falls stage by stage: {all(a > b for a, b in zip(peaks, peaks[1:]))}; bytes sent per step "
          + " / ".join(f"{run['bytes_communicated_per_worker']:,}" for run in runs))
    small = {"layer_widths": [6, 16, 16, 16, 2], "n": 96, "batch": 30, "steps": 12}
    for lr in (1.0, 50.0):
        run = train({**small, "lr": lr})
        rollbacks = ", ".join(f"step {r['step']} ({r['reason']}, lr -> {r['lr']:g})" for r in run["rollbacks"])
        print(f"train lr = {lr:g}: rollbacks {rollbacks or 'none'}; {run['stopped'] or 'not stopped'}; "
              f"{len(run['losses'])} steps, last loss {run['losses'][-1]:.4g} (first {run['losses'][0]:.4g})")


def bench_diloco() -> None:
    """DiLoCo vs the synchronous baseline over H: bytes per step, held-out accuracy and loss gaps."""
    from trainsys.diloco.experiment import main as diloco_sweep

    start = time.perf_counter()
    diloco_sweep()
    print(f"DiLoCo sweep: {time.perf_counter() - start:.1f} s")
    from trainsys.evidence import load_record
    record = load_record("diloco-gpt")  # the GPT on Shakespeare (`make reproduce`), the paper's headline setting
    print(f"{record['figures']['headline']} [record diloco-gpt, {record['wall_s']:.0f} s wall, "
          f"load average {record['environment']['hardware'].get('load_average_1_5_15min')}]")
    for key, row in record["figures"]["summary"].items():  # every (budget, sharding) and H: gap to sync, bytes saved
        for H, r in row["per_H"].items():
            print(f"  {key} H = {H}: gap to synchronous {r['gap_mean']:+.3f} ± {r['gap_std']:.3f} nats, "
                  f"{H}× fewer bytes per step, {r['matched_saving_mean']:.1f}× at matched loss")


def bench_fedavg() -> None:
    """FedAvg: rounds to 80% accuracy per local-epoch count E (IID and non-IID), the non-IID gap, run times."""
    from trainsys.fedavg import experiments as ex

    for partition in ("iid", "shards"):
        record = ex.rounds_to_target_vs_local_epochs({"partition": partition}, [1, 2, 5, 10], 0.8, seeds=(0, 1, 2))
        cells = [f"E={E}: {record['mean_rounds'][E]:.1f} ± {record['std_rounds'][E]:.1f}"
                 if record["mean_rounds"][E] is not None else f"E={E}: not reached" for E in (1, 2, 5, 10)]
        print(f"FedAvg {partition:6s} rounds to 80% (3 seeds): " + "; ".join(cells)
              + f"  ({record['wall_time_s']:.1f} s)")
    start = time.perf_counter()
    iid = [ex.run_fedavg_iid({"seed": s}) for s in (0, 1, 2)]
    non_iid = [ex.run_fedavg_non_iid({"seed": s}) for s in (0, 1, 2)]
    gap = ex.compute_non_iid_gap(iid, non_iid)
    print(f"non-IID gap (IID − non-IID test accuracy): final {gap['final_gap_mean']:.3f} ± {gap['final_gap_std']:.3f}, "
          f"mean over rounds {gap['mean_gap']:.3f}  ({time.perf_counter() - start:.1f} s for 6 runs)")


def bench_records() -> None:
    """The evidence records behind the real-data tables: wall time against the 15-minute target per section,
    with the load average the run saw, and the time of the short re-run CI does against each record."""
    from trainsys.evidence import load_record, record_names
    from trainsys.fedavg import reproduce_real as rr

    for name in record_names():
        record = load_record(name)
        hw = record["environment"]["hardware"]
        runs = record["extra"]["runs"] if name.startswith("fedavg-") else {}  # {partition: {setting: row}}
        cpu = [row.get("cpu_s") for table in runs.values() for row in table.values()]
        cpu_text = f"; {sum(cpu):.0f} CPU s in its runs" if cpu and None not in cpu else ""
        print(f"{name}: {record['wall_s']:.0f} s wall for `make reproduce` (target 900 s on 2 cores; "
              f"{hw['usable_cores']} cores, load average {hw['load_average_1_5_15min']} when it ended{cpu_text})")
    for name, quick in (("fedavg-fashion-mnist", rr.fashion_mnist_section), ("fedavg-shakespeare", rr.shakespeare_section)):
        start = time.perf_counter()
        quick(quick=True)
        print(f"{name}: short re-run matched its record in {time.perf_counter() - start:.1f} s")


def bench_faults() -> None:
    """Workers that fail: DiLoCo with missed rounds and stale workers, FedAvg with drop-outs and stragglers,
    and the replica fingerprints' detection step and share of the gradient traffic."""
    from trainsys.diloco import faults as diloco_faults
    from trainsys.fedavg import faults as fedavg_faults
    from trainsys.memtrain import divergence
    import numpy as np

    from trainsys.memtrain.mlp import make_synthetic_regression_batch

    start = time.perf_counter()
    rows = diloco_faults.missed_rounds_experiment()
    print("DiLoCo, each worker misses a fraction f of T = 20 rounds (H = 10, N = 4, 3 seeds), final held-out loss:")
    for r in rows:
        print(f"  f = {r['fraction']:.2f}: DiLoCo {r['diloco']:.3f}, synchronous with the same {r['examples']:,} "
              f"examples {r['synchronous']:.3f}")
    print("DiLoCo, workers 0 and 1 of 4 report s rounds late, final held-out loss (uniform / 1/(1+s) weights):")
    for r in diloco_faults.staleness_experiment():
        print(f"  s = {r['staleness']}: {r['uniform']:.3f} / {r['inverse']:.3f}")
    print("FedAvg, pathological non-IID, K = 40, m = 4, 30 rounds (2 seeds): final accuracy, reporters per round")
    for r in fedavg_faults.dropout_experiment():
        print(f"  drop-out {r['dropout_rate']:.1f}, m' = {r['selected']:2d}: {r['accuracy']:.3f}, {r['reporters']:.2f}")
    print("FedAvg, IID, log-normal report times (median 1 s, sigma 0.5), to 70% test accuracy (2 seeds):")
    for r in fedavg_faults.deadline_experiment():
        d = "none" if r["deadline"] is None else f"{r['deadline']:.1f} s"
        seconds = ", ".join("never" if x is None else f"{x:.1f}" for x in r["seconds_to_target"])
        print(f"  deadline {d:>6s}, m' = {r['selected']}: rounds {r['rounds_to_target']}, simulated seconds "
              f"[{seconds}], reporters {r['reporters']:.2f}, mean round {r['round_seconds']:.2f} s")
    rng = np.random.default_rng(0)
    batches = [make_synthetic_regression_batch(64, 8, 2, rng) for _ in range(12)]
    for K in (1, 4):
        record = divergence.simulate_replicated_training(batches, 4, 16, 0, 0.05, K, on_mismatch="record",
                                                         flip_bit={"worker": 2, "step": 5, "key": "W1", "index": 0,
                                                                   "bit": 0})
        first = record["detections"][0]
        share = max(record["fingerprint_bytes_per_worker"]) / max(record["gradient_bytes_per_worker"])
        print(f"replica fingerprints, N = 4, K = {K}: a flipped lowest bit at step 5 detected after step "
              f"{first['detected_at']} naming workers {first['workers']}; fingerprints {share:.2%} of the gradient bytes")
    print(f"faults: {time.perf_counter() - start:.1f} s")


def bench_memory_gpt() -> None:
    """The transformer explorer against the measured GPT: the grid re-measured (largest relative error per
    category, target 5 %), the per-rank ZeRO-1/FSDP2 errors and the step peaks from the record ``memory-gpt``."""
    import os

    from trainsys.evidence import load_record
    from trainsys.memtrain.memory_grid import GRID, grid_errors, largest_errors

    start = time.perf_counter()
    rows = grid_errors(GRID)
    print(f"transformer explorer vs measured GPT, {len(rows)} configurations re-measured (target |error| <= 5%):")
    for category, error in largest_errors(rows).items():
        print(f"  {category}: largest error {error:+.2%}")
    record = load_record("memory-gpt")
    for row in record["figures"]["largest_error"]["rows"][4:]:
        print(f"  {row[0]}: largest error {row[1]:+.2f}% over {row[2]} runs (record memory-gpt)")
    for row in record["figures"]["peak"]["rows"]:
        print(f"  step peak, small GPT, {row[0]}, {row[1]}: measured {row[2]:,} B, explorer {row[3]:,.0f} B "
              f"({row[4]:+.1f}%)")
    print(f"memory_gpt: {time.perf_counter() - start:.1f} s (load average {os.getloadavg()[0]:.1f})")


SECTIONS: dict[str, Callable[[], None]] = {
    "memory_gpt": bench_memory_gpt,
    "data_parallel": bench_data_parallel,
    "zero_stages": bench_zero_stages,
    "trainer": bench_trainer,
    "diloco": bench_diloco,
    "fedavg": bench_fedavg,
    "records": bench_records,
    "faults": bench_faults,
    "grading": bench_grading,
    "accumulation": bench_accumulation,
    "checkpointing": bench_checkpointing,
    "mixed_precision": bench_mixed_precision,
    "formats": bench_formats,
    "mutants": bench_mutants,
    "lessons": bench_lessons,
    "nbval": bench_nbval,
    "autograde": bench_autograde,
    "book": bench_book,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", help=f"sections to run, from {list(SECTIONS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    for name in args.sections or SECTIONS:
        print(f"== {name}")
        SECTIONS[name]()


if __name__ == "__main__":
    main()
