"""ZeRO stages 0–3 executed (``trainsys.memtrain.zero_stages``): numerics, bytes sent, bytes held, and FSDP2.

The references are independent of the simulation: the course's own single-process Adam loop (Part 3's
``deep_mlp_forward``/``deep_mlp_backward`` and ``zero.adam_step``), ``zero.zero_optimizer_step`` (Part 6's
ZeRO-1), ``ring_all_reduce_mean`` (Part 5), memory.py's formulas, and torch's FSDP2 (``fully_shard``) on
two gloo processes.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np
import pytest

from trainsys.memtrain import memory, zero
from trainsys.memtrain import zero_stages as zs
from trainsys.memtrain.accumulation import micro_batch_bounds
from trainsys.memtrain.checkpointing import deep_mlp_backward, deep_mlp_forward, init_deep_mlp_params
from trainsys.memtrain.mlp import make_synthetic_regression_batch
from trainsys.memtrain.ring_allreduce import ring_all_reduce_mean, ring_bytes_per_worker

WIDTHS = [6, 16, 16, 3]  # Ψ = 435 = 3 · 5 · 29: N = 2 and 4 pad to 436, N = 3 divides
N_EXAMPLES, BATCH, STEPS = 40, 10, 6  # batches of 10: uneven worker shards for N = 3 (4, 3, 3) and N = 4
HP = {**zero.TORCH_ADAM_DEFAULTS, "lr": 1e-2}
U = 2.0**-24  # float32 unit roundoff


def _problem(widths=WIDTHS, n=N_EXAMPLES, seed=0):
    params = init_deep_mlp_params(widths, np.random.default_rng(seed))
    X, Y = make_synthetic_regression_batch(n, widths[0], widths[-1], np.random.default_rng(seed + 1))
    return params, X, Y


def _flat_dict(layers):
    return {f"{key}{l}": layer[key] for l, layer in enumerate(layers) for key in ("W", "b")}


def _layers(flat_dict, L):
    return [{"W": flat_dict[f"W{l}"], "b": flat_dict[f"b{l}"]} for l in range(L)]


def _loss(Y_hat, Y):  # the simulation's loss: float32 difference, squares summed in float64
    diff = (Y_hat - Y).astype(np.float64)
    return float(np.sum(diff**2)) / Y.shape[1] / Y.shape[0]


@pytest.fixture(scope="module")
def runs():
    params, X, Y = _problem()
    return {(N, stage): zs.train_zero(params, X, Y, stage=stage, num_workers=N, steps=STEPS, batch_size=BATCH, hp=HP)
            for N in (1, 2, 3, 4) for stage in zs.STAGES}


def _drift_bound(steps: int, delta: float, lr: float, theta: np.ndarray) -> np.ndarray:
    """First-order bound on |θ_a − θ_b| after ``steps`` Adam steps whose gradients differ by a relative ``delta``.

    Adam's step lr·m̂/(√v̂ + ε) is scale-free in g, so a relative gradient change δ moves the update by
    ≲ lr·δ; each run rounds θ − update once per step (≤ u|θ| each). Summed over the steps.
    """
    return steps * (lr * delta + 2 * U * np.abs(theta))


def _assert_params_equal(a, b):
    for la, lb in zip(a, b, strict=True):
        for key in ("W", "b"):
            np.testing.assert_array_equal(la[key], lb[key])


# --- the building blocks --------------------------------------------------------------------------------
def test_send_message_copies_the_payload_and_logs_it() -> None:
    log: list[dict] = []
    payload = np.arange(5, dtype=np.float32)
    arrived = zs.send_message(log, payload, step=3, phase="p", layer=1, sender=0, receiver=2)
    np.testing.assert_array_equal(arrived, payload)
    assert not np.shares_memory(arrived, payload)
    assert log == [{"step": 3, "phase": "p", "layer": 1, "sender": 0, "receiver": 2, "bytes": 20}]
    with pytest.raises(ValueError, match="sender and receiver must differ"):
        zs.send_message(log, payload, step=0, phase="p", layer=None, sender=1, receiver=1)


@pytest.mark.parametrize("N", [1, 2, 3, 4, 7])
def test_layout_ranges_and_shards_partition_the_padded_vector(N: int) -> None:
    lay = zs.zero_layout(WIDTHS, N)
    assert lay.psi == sum(a * b + b for a, b in zip(WIDTHS[:-1], WIDTHS[1:])) == 435
    assert lay.shard == -(-435 // N) and lay.padded == N * lay.shard
    assert [lay.shard_range(k) for k in range(N)] == zero.partition_optimizer_state(435, N)
    edges = [lo for lo, _, _, _ in lay.layers] + [lay.layers[-1][3]]
    assert edges[0] == 0 and edges[-1] == lay.padded and all(x < y for x, y in zip(edges, edges[1:]))
    assert all(hi == b for _, _, b, hi in lay.layers[:-1])  # only the last range holds padding
    for lo, _, _, hi in lay.layers:
        pieces = lay.pieces(lo, hi)
        assert sum(b - a for _, a, b in pieces) == hi - lo
        assert all(lay.shard_range(k)[0] <= a < b <= lay.shard_range(k)[1] for k, a, b in pieces)


@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_ring_through_send_message_equals_the_course_ring(N: int) -> None:
    rng = np.random.default_rng(N)
    P = N * 7
    arrays = [rng.standard_normal(P).astype(np.float32) for _ in range(N)]
    workers = [zs.ZeroWorker(k) for k in range(N)]
    for w, a in zip(workers, arrays):
        w.hold("gradients", "full", a.copy())
    log: list[dict] = []
    zs.ring_all_reduce_mean_(workers, lambda w: (w.get("gradients", "full"), 0), log, step=0)
    expected, ring_log = ring_all_reduce_mean(arrays)
    for w, e in zip(workers, expected):
        np.testing.assert_array_equal(w.get("gradients", "full"), e)  # same sums in the same order
    assert [(m["sender"], m["receiver"], m["bytes"]) for m in log] == \
        [(m["sender"], m["receiver"], m["bytes"]) for m in ring_log]
    assert zs.bytes_sent_per_worker_per_step(log, N, 1)[0] == ring_bytes_per_worker(P, N, 4)


def test_in_place_adam_is_bit_identical_to_the_lesson_update() -> None:
    rng = np.random.default_rng(0)
    p = rng.standard_normal(33).astype(np.float32)
    m, v = np.zeros(33, np.float32), np.zeros(33, np.float32)
    ref_p, state = p.copy(), {"m": m.copy(), "v": v.copy(), "step": 0}
    hp = {"lr": 0.03, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}
    for t in range(1, 8):
        g = rng.standard_normal(33).astype(np.float32)
        zs.adam_update_(p, g, m, v, t, hp)
        ref_p, state = zero.local_shard_adam_update(ref_p, g, state, hp)
        np.testing.assert_array_equal(p, ref_p)
        np.testing.assert_array_equal(m, state["m"])
        np.testing.assert_array_equal(v, state["v"])


def test_worker_refuses_views_and_double_holds() -> None:
    w = zs.ZeroWorker(0)
    base = w.hold("parameters", "full", np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="owning their memory"):
        w.hold("gradients", "view", base[:4])
    with pytest.raises(ValueError, match="already holds"):
        w.hold("parameters", "full", np.zeros(8, np.float32))
    assert w.held_bytes("parameters") == 32 and w.peak["parameters"] == 32


# --- numerics -----------------------------------------------------------------------------------------
def test_one_worker_equals_the_course_single_process_adam_loop(runs) -> None:
    params, X, Y = _problem()
    layers, state, losses = [dict(layer) for layer in params], zero.init_adam_state(_flat_dict(params)), []
    for t in range(STEPS):
        Xb, Yb = zs.step_batch(X, Y, BATCH, t)
        Y_hat, cache = deep_mlp_forward(layers, Xb)
        losses.append(_loss(Y_hat, Yb))
        grads = deep_mlp_backward(layers, cache, (Y_hat - Yb) * (2.0 / Yb.size))
        new, state = zero.adam_step(_flat_dict(layers), _flat_dict(grads), state, HP)
        layers = _layers(new, len(layers))
    for stage in zs.STAGES:
        assert runs[1, stage]["losses"] == losses
        _assert_params_equal(runs[1, stage]["final_params"], layers)


@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_stage_1_equals_the_lessons_zero_optimizer_step_bit_for_bit(runs, N: int) -> None:
    params, X, Y = _problem()
    layers, states = [dict(layer) for layer in params], zero.init_sharded_adam_states(_flat_dict(params), N)
    for t in range(STEPS):
        Xb, Yb = zs.step_batch(X, Y, BATCH, t)
        worker_grads = []
        for a, b in micro_batch_bounds(BATCH, N):  # worker k: gradient of (N / B) · its summed loss
            Y_hat, cache = deep_mlp_forward(layers, Xb[a:b])
            dY = (Y_hat - Yb[a:b]) * (2.0 * N / (BATCH * Yb.shape[1]))
            worker_grads.append(_flat_dict(deep_mlp_backward(layers, cache, dY)))
        new, states = zero.zero_optimizer_step(_flat_dict(layers), worker_grads, states, HP)
        layers = _layers(new, len(layers))
    _assert_params_equal(runs[N, 1]["final_params"], layers)


@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_stages_agree_with_stage_0(runs, N: int) -> None:
    base = runs[N, 0]
    for stage in (1, 2, 3):
        run = runs[N, stage]
        # Stages 1-3 do the same float32 operations in the same order: identical bits.
        assert run["losses"] == runs[N, 1]["losses"]
        _assert_params_equal(run["final_params"], runs[N, 1]["final_params"])
        # Stage 0's ring sums the N gradients in another order (module docstring): the first loss is
        # computed before any reduction, so it is identical; the rest agree to T · 2(N-1) u relative,
        # the parameters to T · (lr · 2(N-1) u + 2u|θ|).
        assert run["losses"][0] == base["losses"][0]
        np.testing.assert_allclose(run["losses"], base["losses"], rtol=STEPS * 2 * (N - 1) * U, atol=0)
        for la, lb in zip(run["final_params"], base["final_params"]):
            for key in ("W", "b"):
                assert np.all(np.abs(la[key] - lb[key]) <= _drift_bound(STEPS, 2 * (N - 1) * U, HP["lr"], lb[key]))
                if N <= 2:  # a sum of two terms does not depend on their order
                    np.testing.assert_array_equal(la[key], lb[key])
    assert base["losses"][-1] < 0.7 * base["losses"][0]  # it trains


@pytest.mark.parametrize(("N", "stage"), [(N, s) for N in (2, 3, 4) for s in (0, 1, 2)])
def test_replicated_parameters_stay_identical_on_every_worker(runs, N: int, stage: int) -> None:
    workers = runs[N, stage]["workers"]
    for w in workers[1:]:
        np.testing.assert_array_equal(w.get("parameters", "full"), workers[0].get("parameters", "full"))


# --- bytes sent -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("N", [1, 2, 3, 4])
@pytest.mark.parametrize("stage", zs.STAGES)
def test_every_worker_sends_exactly_the_padded_bound_every_step(runs, N: int, stage: int) -> None:
    run = runs[N, stage]
    lay = run["layout"]
    s = -(-435 // N)
    exact = (3 if stage == 3 else 2) * (N - 1) * s * 4
    assert zs.expected_bytes_sent_per_step(435, N, stage) == exact
    assert memory.communication_bytes_per_step(lay.padded, "fp32", N, stage) == exact  # memory.py on P = N s
    assert run["bytes_sent_per_step"] == [[exact] * N for _ in range(STEPS)]
    for phase in zs.PHASES[stage]:  # each phase: (N - 1) s elements per worker per step
        sent = [sum(m["bytes"] for m in run["log"] if m["phase"] == phase and m["sender"] == k and m["step"] == 0)
                for k in range(N)]
        assert sent == [(N - 1) * s * 4] * N
    assert {m["phase"] for m in run["log"]} == (set(zs.PHASES[stage]) if N > 1 else set())
    assert all(m["sender"] != m["receiver"] and m["bytes"] > 0 for m in run["log"])


@pytest.mark.parametrize("stage", [2, 3])
def test_stages_2_and_3_communicate_layer_by_layer_in_backward_order(runs, stage: int) -> None:
    # the workers run their passes one after the other: each worker's own messages (the layers it receives,
    # what it sends otherwise) follow the schedule; a layer inside the worker's own shard sends nothing
    L, lay = len(WIDTHS) - 1, runs[4, stage]["layout"]
    for k in range(4):
        events = []
        for m in runs[4, stage]["log"]:
            gathered = m["phase"] in ("forward all-gather", "backward all-gather")
            if m["step"] == 1 and (m["receiver"] if gathered else m["sender"]) == k and \
                    (not events or events[-1] != (m["phase"], m["layer"])):
                events.append((m["phase"], m["layer"]))
        travels = {l for l in range(L) if any(j != k for j, _, _ in lay.pieces(lay.layers[l][0], lay.layers[l][3]))}
        backward = [("gradient reduce-scatter", l) for l in reversed(range(L)) if l in travels]
        if stage == 2:
            assert events == backward + [("parameter all-gather", None)], k
        else:
            forward = [("forward all-gather", l) for l in range(L) if l in travels]
            assert events == forward + [e for l in reversed(range(L)) if l in travels
                                        for e in (("backward all-gather", l), ("gradient reduce-scatter", l))], k


# --- bytes held ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("N", [1, 2, 3, 4])
@pytest.mark.parametrize("stage", zs.STAGES)
def test_measured_bytes_held_match_the_schedule_and_the_accounting(runs, N: int, stage: int) -> None:
    run = runs[N, stage]
    scheduled = zs.scheduled_bytes_per_worker(WIDTHS, N, stage)
    accounted = zs.accounted_bytes_per_worker(WIDTHS, N, stage)
    for k in range(N):
        assert run["peak_bytes"][k] == scheduled  # exact, padding and in-flight layer included
        for cls in zs.CLASSES:
            assert abs(run["peak_bytes"][k][cls] - accounted[cls]) <= 0.05 * accounted[cls], (k, cls)
    # What stays between steps: no gradients at all; parameters and Adam state per the stage.
    lay = run["layout"]
    for w in run["workers"]:
        assert w.held_bytes("gradients") == 0
        assert w.held_bytes("parameters") == 4 * {0: lay.psi, 1: lay.padded, 2: lay.padded, 3: lay.shard}[stage]
        assert w.held_bytes("optimizer_states") == 8 * (lay.psi if stage == 0 else lay.shard)


def test_accounting_is_memory_py_fp32_plus_the_layer_buffers() -> None:
    psi, layer = 435, 16 * 16 + 16
    for stage in zs.STAGES:
        plain = memory.compute_optimizer_memory_bytes(psi, "fp32", 4, stage)
        got = zs.accounted_bytes_per_worker(WIDTHS, 4, stage)
        assert got["optimizer_states"] == plain["optimizer_states"] == (8 * psi if stage == 0 else 2 * psi)
        assert got["gradients"] == plain["gradients"] + (4 * layer if stage >= 2 else 0)
        assert got["parameters"] == plain["parameters"] + (4 * layer if stage == 3 else 0)
    # Each stage holds less than the one before it, with 4 workers.
    held = [sum(zs.scheduled_bytes_per_worker(WIDTHS, 4, s).values()) for s in zs.STAGES]
    assert held == sorted(held, reverse=True) and len(set(held)) == 4


def test_more_workers_than_parameters_leaves_shards_of_padding_only() -> None:
    params, X, Y = _problem([1, 1], n=6)  # Ψ = 2, N = 3: s = 1, worker 2 owns only padding
    base = zs.train_zero(params, X, Y, stage=0, num_workers=3, steps=3, batch_size=3, hp=HP)
    for stage in (1, 2, 3):
        run = zs.train_zero(params, X, Y, stage=stage, num_workers=3, steps=3, batch_size=3, hp=HP)
        np.testing.assert_allclose(run["losses"], base["losses"], rtol=3 * 4 * U)
        assert run["bytes_sent_per_step"] == [[(3 if stage == 3 else 2) * 2 * 4] * 3] * 3
        assert run["peak_bytes"][2] == zs.scheduled_bytes_per_worker([1, 1], 3, stage)
    assert run["workers"][2].get("parameters", "shard")[0] == 0  # the padding stays 0


# --- bad input ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "error", "match"), [
    ({"stage": 4}, ValueError, r"stage must be <= 3, got 4"),
    ({"stage": -1}, ValueError, r"stage must be >= 0"),
    ({"stage": True}, TypeError, r"stage must be an integer, got bool"),
    ({"num_workers": 0}, ValueError, r"num_workers must be >= 1, got 0"),
    ({"num_workers": 11}, ValueError, r"num_workers must be <= batch_size \(10\)"),
    ({"num_workers": 2.0}, TypeError, r"num_workers must be an integer"),
    ({"steps": 0}, ValueError, r"steps must be >= 1, got 0"),
    ({"batch_size": 41}, ValueError, r"batch_size must be <= 40, got 41"),
    ({"hp": {"lr": -1.0, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}}, ValueError, r"hp\['lr'\] must be > 0"),
    ({"X": "float64"}, TypeError, r"X must be float32"),
    ({"Y": "columns"}, ValueError, r"Y.shape\[1\] \(2\) must equal the network's output width \(3\)"),
    ({"params": "float64"}, TypeError, r"params\[0\]\['W'\] must be float32"),
])
def test_bad_input_errors_name_the_argument(change, error, match) -> None:
    params, X, Y = _problem()
    kwargs = {"stage": 2, "num_workers": 2, "steps": 1, "batch_size": BATCH, "hp": HP}
    if change.get("X") == "float64":
        X = X.astype(np.float64)
    elif change.get("Y") == "columns":
        Y = Y[:, :2]
    elif change.get("params") == "float64":
        params = [{k: v.astype(np.float64) for k, v in layer.items()} for layer in params]
    else:
        kwargs.update(change)
    with pytest.raises(error, match=match):
        zs.train_zero(params, X, Y, **kwargs)


def test_accounting_functions_validate_their_arguments() -> None:
    with pytest.raises(ValueError, match="stage must be <= 3"):
        zs.scheduled_bytes_per_worker(WIDTHS, 2, 5)
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        zs.accounted_bytes_per_worker(WIDTHS, 0, 1)
    with pytest.raises(ValueError, match="num_params must be >= 1"):
        zs.expected_bytes_sent_per_step(0, 2, 1)
    with pytest.raises(ValueError, match=r"log\[0\]\['sender'\] must be <= 1"):
        zs.bytes_sent_per_worker_per_step([{"step": 0, "phase": "p", "layer": None, "sender": 2, "receiver": 0,
                                            "bytes": 4}], 2, 1)


# --- the oracle: torch FSDP2 (fully_shard) on two gloo processes -------------------------------------------
def _fsdp_rank(rank: int, world: int, store: str, out: str, params, X, Y, steps: int, batch: int, hp: dict) -> None:
    """One rank of the FSDP2 job: the same layers, data, shards and Adam as ``train_zero(stage=3)``."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    mesh = init_device_mesh("cpu", (world,))
    modules = []
    for l, layer in enumerate(params):
        linear = torch.nn.Linear(*layer["W"].shape)
        with torch.no_grad():  # nn.Linear computes x Wᵀ + b with weight (out, in): store Wᵀ
            linear.weight.copy_(torch.from_numpy(layer["W"].T.copy()))
            linear.bias.copy_(torch.from_numpy(layer["b"]))
        modules += [linear, torch.nn.ReLU()] if l < len(params) - 1 else [linear]
    model = torch.nn.Sequential(*modules)
    for module in model:
        if isinstance(module, torch.nn.Linear):  # one FSDP group per layer; re-gather in backward, as ZeRO-3
            fully_shard(module, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    a, b = micro_batch_bounds(batch, world)[rank]
    d_out = Y.shape[1]
    losses = []
    for t in range(steps):
        Xb, Yb = zs.step_batch(X, Y, batch, t)
        x, y = torch.from_numpy(Xb[a:b]), torch.from_numpy(Yb[a:b])
        optimizer.zero_grad()
        diff = model(x) - y
        # (N / B) · Σ per-example losses: FSDP averages the ranks' gradients, giving the batch mean's
        (diff.pow(2).sum() * (world / (batch * d_out))).backward()
        loss_sum = diff.detach().double().pow(2).sum() / d_out
        dist.all_reduce(loss_sum)
        losses.append(float(loss_sum) / batch)
        optimizer.step()
    local_shapes = [list(p.to_local().shape) for p in model.parameters()]
    full = [p.full_tensor().detach().numpy() for p in model.parameters()]  # collective: every rank
    Path(out, f"rank{rank}.json").write_text(json.dumps({"losses": losses, "local_shapes": local_shapes}))
    if rank == 0:
        np.savez(Path(out, "params.npz"), *full)
    dist.barrier()
    dist.destroy_process_group()


def test_stage_3_follows_torch_fsdp2_on_gloo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.multiprocessing as mp

    widths, n, batch, steps, world = [6, 16, 16, 3], 28, 7, 8, 2  # shards of 4 and 3 examples
    params, X, Y = _problem(widths, n)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two ranks on a shared CPU
    mp.spawn(_fsdp_rank, args=(world, str(tmp_path / "store"), str(tmp_path), params, X, Y, steps, batch, HP),
             nprocs=world, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    torch_params = np.load(tmp_path / "params.npz")
    run = zs.train_zero(params, X, Y, stage=3, num_workers=world, steps=steps, batch_size=batch, hp=HP)
    assert ranks[0]["losses"] == ranks[1]["losses"]
    # Same maths, other float32 kernels: torch's addmm orders each dot product (at most m = 16 terms
    # here) its own way, so each differs by at most 2γ_m ≈ 2mu relative (Higham 2002, §3.1), and Adam's
    # lerp rounds m differently. The first loss (forward only, L layers) agrees to L · 2mu; the later ones
    # and the parameters drift as in _drift_bound with δ = 2mu. (Measured: about 1e-8, below 0.1 of it.)
    m, L = max(widths), len(widths) - 1
    np.testing.assert_allclose(ranks[0]["losses"][0], run["losses"][0], rtol=L * 2 * m * U)
    np.testing.assert_allclose(ranks[0]["losses"], run["losses"], rtol=steps * 2 * m * U)
    for l, layer in enumerate(run["final_params"]):
        for i, ours in ((2 * l, layer["W"].T), (2 * l + 1, layer["b"])):
            gap = np.abs(torch_params[f"arr_{i}"] - ours)
            assert np.all(gap <= _drift_bound(steps, 2 * m * U, HP["lr"], ours)), (l, i, gap.max())
    # FSDP2 shards every parameter on dim 0 (torch.chunk's rule), where ZeRO cuts one flat vector.
    for r, rank in enumerate(ranks):
        expected = []
        for w_in, w_out in zip(widths[:-1], widths[1:]):
            c = -(-w_out // world)
            rows = max(0, min(w_out, (r + 1) * c) - r * c)
            expected += [[rows, w_in], [rows]]
        assert rank["local_shapes"] == expected
