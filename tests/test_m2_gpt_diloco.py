"""DiLoCo on the course's GPT (trainsys.diloco.language_model, gpt_experiment) against torch oracles.

Oracles: torch's own training loop (``torch.optim.SGD``/``AdamW`` on ``GPT`` with ``.backward()``) for the
vmapped simulation; the gradient of the concatenated ``N·B`` batch for the baseline's all-reduce; counting for
bytes; set arithmetic for the Shakespeare shards; the torchrun job for the simulation.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from trainsys.diloco.language_model import LanguageModelTask, LMConfig, sample_windows, validate_lm_config
from trainsys.diloco.loop import train_diloco, train_synchronous_baseline
from trainsys.diloco.params import average_params
from trainsys.models.gpt import GPT

U32 = 2.0**-24  # float32 unit roundoff
V, CONTEXT = 11, 16
SMALL = {"context": CONTEXT, "n_layer": 1, "n_head": 2, "n_embd": 16, "batch_size": 4, "progress": False}


def _task(N: int, seed: int = 0) -> LanguageModelTask:
    rng = np.random.default_rng(seed)
    pattern = rng.integers(0, V, size=37)
    text = np.where(rng.random(37 * 60) < 0.1, rng.integers(0, V, 37 * 60), np.tile(pattern, 60))  # 10 % noise
    return LanguageModelTask([text[i * 400:(i + 1) * 400] for i in range(N)], text[-300:], V, eval_windows=8)


def _torch_model(task: LanguageModelTask, cfg: LMConfig, params: dict) -> GPT:
    model = GPT(task.gpt_config(cfg))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(params[name]))
    return model


def test_m2_26_gpt_diloco_one_worker_is_torch_sgd_step_for_step() -> None:
    # N = 1, outer lr 1, no momentum: each round restarts from the worker's own parameters, so 3 rounds of
    # H = 2 are 6 steps of the inner optimizer; SGD with decoupled decay is torch's SGD(weight_decay).
    cfg = validate_lm_config({**SMALL, "num_workers": 1, "inner_steps": 2, "rounds": 3, "inner_optimizer": "sgd",
                              "inner_lr": 0.1, "outer_lr": 1.0, "outer_momentum": 0.0})
    task = _task(1)
    record = train_diloco(cfg, task)
    run = task.setup_run(cfg)
    model = _torch_model(task, cfg, run["params"])
    opt = torch.optim.SGD(model.parameters(), lr=cfg.inner_lr, weight_decay=cfg.weight_decay)
    g_max = 0.0
    for _ in range(6):
        x, y = sample_windows(task.shards[0], cfg.batch_size, cfg.context, run["worker_rngs"][0])
        opt.zero_grad()
        model(torch.from_numpy(x), torch.from_numpy(y))[1].backward()
        g_max = max(g_max, max(float(p.grad.abs().max()) for p in model.parameters()))
        opt.step()
    # A gradient entry sums B·T = 64 per-position terms (and C = 16-long dot products before that): the two
    # engines' summation orders differ by <= (64 + 16) u g_max per step; lr times that, over 6 steps, plus the
    # outer step's two roundings per round (θ - (θ - θ_1)) of <= 2 u |θ|.
    theta_max = max(float(p.detach().abs().max()) for p in model.parameters())
    atol = 6 * cfg.inner_lr * (64 + 16) * U32 * g_max + 3 * 2 * U32 * theta_max
    for name, p in model.named_parameters():
        np.testing.assert_allclose(record["final_params"][name], p.detach().numpy(), rtol=0, atol=atol, err_msg=name)


def test_m2_27_gpt_baseline_all_reduce_is_the_gradient_of_the_n_times_batch() -> None:
    cfg = validate_lm_config({**SMALL, "num_workers": 3, "inner_steps": 1, "rounds": 1})
    task = _task(3)
    run = task.setup_run(cfg)
    grads, losses = task.gradients(run, run["params"])
    mean = average_params(grads)
    run = task.setup_run(cfg)  # the same draws again, for the oracle
    xs, ys = zip(*(sample_windows(task.shards[k], cfg.batch_size, cfg.context, run["worker_rngs"][k]) for k in range(3)))
    model = _torch_model(task, cfg, run["params"])
    loss = model(torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys)))[1]  # (3B, T) batch
    loss.backward()
    assert np.mean(losses) == pytest.approx(float(loss), rel=1e-6)  # mean of 3 means of 64 = mean of 192
    # mean over 192 positions either way, summed in another order: <= 192 u times the size of the summed terms.
    # The terms are bounded by the largest gradient entry of the model, not of each tensor: the key bias's
    # gradient is exactly 0 in exact arithmetic (softmax ignores a constant added to a row of scores) and is
    # pure rounding of terms of the size of the others.
    g_max = max(float(p.grad.abs().max()) for p in model.parameters())
    atol = 192 * U32 * g_max
    for name, p in model.named_parameters():
        np.testing.assert_allclose(mean[name], p.grad.numpy(), rtol=0, atol=atol, err_msg=name)


def test_m2_30_gpt_runs_log_every_eval_every_steps_and_send_h_times_fewer_bytes() -> None:
    task = _task(2)
    base = {**SMALL, "num_workers": 2}
    d = train_diloco({**base, "inner_steps": 5, "rounds": 4, "eval_every": 10}, task)
    s = train_synchronous_baseline({**base, "inner_steps": 1, "rounds": 20, "eval_every": 10}, task)
    assert [e["steps"] for e in d["history"]] == [10, 20] == [e["steps"] for e in s["history"]]
    assert s["history"][-1]["cumulative_bytes"] == 5 * d["history"][-1]["cumulative_bytes"]
    assert d["history"][-1]["heldout_perplexity"] == pytest.approx(np.exp(d["history"][-1]["heldout_loss"]))
    assert d["history"][-1]["heldout_loss"] < d["initial"]["heldout_loss"] - 0.1  # it learns (0.26 nats in 20 steps)


def test_m2_26_gpt_config_errors_name_the_field() -> None:
    task = _task(2)
    with pytest.raises(ValueError, match="num_workers"):
        train_diloco({**SMALL, "num_workers": 3}, task)
    with pytest.raises(ValueError, match="eval_every"):
        validate_lm_config({"inner_steps": 4, "eval_every": 6})
    with pytest.raises(ValueError, match="unknown keys"):
        validate_lm_config({"H": 4})
    with pytest.raises(ValueError, match="outside"):
        LanguageModelTask([np.array([0, 1, 2, 99])], np.arange(5), 5)


@pytest.fixture(scope="module")
def shakespeare():
    from trainsys.diloco import gpt_experiment
    return gpt_experiment


def test_m2_16_shakespeare_shards_iid_chunks_and_genre_plays(shakespeare) -> None:
    plays = shakespeare.corpus()["train"]
    total = sum(len(p[2]) for p in plays)
    iid, _ = shakespeare.make_shards("iid", 4)
    assert sum(len(s) for s in iid) == total // shakespeare.CHUNK_CHARS * shakespeare.CHUNK_CHARS
    genre, contents = shakespeare.make_shards("genre", 4)
    assert sum(len(s) for s in genre) == total
    names = [n.split("/")[1] for c in contents for n in c]
    assert sorted(names) == sorted(p[0] for p in plays)  # every training play on exactly one worker
    assert not set(names) & set(shakespeare.corpus()["heldout_plays"])  # no worker reads a held-out play
    assert contents[0][0].startswith("comedies/") and contents[-1][-1].startswith("tragedies/")


@pytest.mark.slow
def test_m2_26_gpt_diloco_on_torch_distributed_follows_the_simulation(shakespeare) -> None:
    # Real: 2 processes, torch.optim.AdamW on GPT with .backward(), one all_reduce of θ_k a round, torch's
    # SGD(nesterov) outside; simulated: vmapped gradients, the package's AdamW and outer step.
    from trainsys.distributed.launch import run

    job = run("trainsys.distributed.diloco", 2, "--model", "gpt", "--sharding", "genre", "--rounds", "2",
              "--inner-steps", "3", timeout=300)
    cfg = dataclasses.replace(shakespeare.run_config("diloco", 2, 3, 6, 0, 0), eval_every=0)
    sim = train_diloco(cfg, shakespeare.task("genre", 2))
    # float32 both ways, different summation orders: a gradient entry sums B·T = 256 terms, so engines differ
    # by <= 256 u ≈ 1.5e-5 relative per step; AdamW's normalised step carries that relative error, the loss
    # moves by less than the step it is computed from: 6 steps, rtol 1e-4.
    real = [h["heldout_loss"] for h in job["history"]]
    np.testing.assert_allclose(real, [h["heldout_loss"] for h in sim["history"]], rtol=1e-4)
    assert real[-1] < sim["initial"]["heldout_loss"]


def test_m2_30_diloco_gpt_record_holds_what_its_tables_say(shakespeare) -> None:
    from trainsys.evidence import load_record

    record = load_record("diloco-gpt")
    runs = record["extra"]["runs"]
    assert record["seeds"] == [0, 1, 2] and record["datasets"][0]["version"] == "3.0.0"
    model_bytes = 4 * record["figures"]["parameters"]  # float32
    for key, summary in record["figures"]["summary"].items():
        budget, n, sharding = key.split("-")
        N, S = int(n[1:]), record["config"]["budgets"][budget]["steps"]
        sync = [r for r in runs if (r["budget"], r["kind"], r["N"], r["sharding"]) == (budget, "sync", N, sharding)]
        assert len(sync) == 3 and summary["sync"]["loss_mean"] == pytest.approx(np.mean([r["loss_curve"][-1] for r in sync]))
        assert all(r["bytes_curve"][-1] == S * N * model_bytes for r in sync)  # N gradients every step
        for H, row in summary["per_H"].items():
            H = int(H)
            d = sorted((r for r in runs if (r["budget"], r["kind"], r["N"], r["sharding"], r["H"])
                        == (budget, "diloco", N, sharding, H)), key=lambda r: r["seed"])
            assert [r["seed"] for r in d] == [0, 1, 2]
            assert row["bytes_per_worker"] * H == S * model_bytes  # one tree per worker every H steps
            gaps = [a["loss_curve"][-1] - b["loss_curve"][-1] for a, b in zip(d, sorted(sync, key=lambda r: r["seed"]))]
            assert row["gap_mean"] == pytest.approx(np.mean(gaps)) and row["gap_std"] == pytest.approx(np.std(gaps, ddof=1))


@pytest.mark.slow
def test_m2_30_diloco_gpt_quick_rerun_matches_the_record(shakespeare) -> None:
    result = shakespeare.diloco_gpt_section(quick=True)  # raises when a re-run differs from the record
    assert len(result["checks"]) == 2 and result["figures"] == {}
