"""Module 1, Part 5: data parallelism against the one-worker step, torch, np.mean and the ring's byte formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from trainsys.tolerance import assert_within_rounding, mse_gradient_bound, rounding_bound, sgd_update_bound
from trainsys.memtrain import buckets as bk
from trainsys.memtrain import data_parallel as dp
from trainsys.memtrain import mlp
from trainsys.memtrain import ring_allreduce as ring


def _problem(n: int, dtype=np.float64, seed: int = 0):
    X, Y = mlp.make_synthetic_regression_batch(n, 6, 3, np.random.default_rng(seed))
    params = mlp.init_mlp_params(6, 16, 3, np.random.default_rng(seed + 1))
    params["b1"] = np.random.default_rng(seed + 2).standard_normal(16).astype(np.float32) * 0.1
    return {k: v.astype(dtype) for k, v in params.items()}, X.astype(dtype), Y.astype(dtype)


def _full_batch_step(params, X, Y, lr):
    Y_hat, cache = mlp.mlp_forward(params, X)
    loss, dY = mlp.mse_loss_and_grad(Y_hat, Y)
    return mlp.sgd_step(params, mlp.mlp_backward(params, cache, dY), lr), loss


def test_m1_25_shards_are_contiguous_views_covering_every_example_once() -> None:
    for n in range(1, 21):
        X = np.arange(n, dtype=np.float64)[:, None]
        for N in range(1, n + 1):
            shards = dp.shard_dataset_across_workers(X, X * 2, N)
            sizes = [len(x) for x, _ in shards]
            assert sizes == [n // N + (k < n % N) for k in range(N)]
            np.testing.assert_array_equal(np.concatenate([x for x, _ in shards]), X)
            assert all(np.shares_memory(x, X) for x, _ in shards)


def test_m1_26_summed_local_gradients_match_torch_and_combine_to_the_union_gradient() -> None:
    params, X, Y = _problem(10)
    shards = dp.shard_dataset_across_workers(X, Y, 3)  # sizes 4, 3, 3
    local = [dp.compute_local_gradients(params, s) for s in shards]
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    X_k, Y_k = shards[0]
    y_hat = torch.relu(torch.tensor(X_k) @ t["W1"] + t["b1"]) @ t["W2"] + t["b2"]
    (((y_hat - torch.tensor(Y_k)) ** 2).mean(dim=1).sum()).backward()  # sum over examples of per-example means
    # the summed (not mean) loss of shard 0: G = 2/d_out (y_hat - y); two float64 passes within the derived
    # bound (trainsys.tolerance.mse_gradient_bound), and the union's mean gradient within it too
    Ws, bs = [params["W1"], params["W2"]], [params["b1"], params["b2"]]
    bound0 = mse_gradient_bound(Ws, bs, X_k, Y_k, np.float64, scale=2 / Y_k.shape[1])
    for key, (l, part) in zip(mlp.PARAM_KEYS, [(0, "W"), (0, "b"), (1, "W"), (1, "b")], strict=True):
        assert np.all(np.abs(local[0][0][key] - t[key].grad.numpy()) <= bound0[l][part]), key
    Y_hat, cache = mlp.mlp_forward(params, X)
    loss, dY = mlp.mse_loss_and_grad(Y_hat, Y)
    full = mlp.mlp_backward(params, cache, dY)
    assert [n_k for _, _, n_k in local] == [4, 3, 3]
    # positive squares: the shards' sums add 3 + 1 roundings to the full mean's 2n + 2 (relative to the loss)
    assert abs(sum(l for _, l, _ in local) / 10 - loss) <= rounding_bound(loss, 2 * 10 + 6, np.float64)
    bound = mse_gradient_bound(Ws, bs, X, Y, np.float64, extra_roundings=3 + 1)  # the 3-shard sum, the division
    for key, (l, part) in zip(mlp.PARAM_KEYS, [(0, "W"), (0, "b"), (1, "W"), (1, "b")], strict=True):
        assert np.all(np.abs(sum(g[key] for g, _, _ in local) / 10 - full[key]) <= bound[l][part]), key


def test_m1_27_all_reduce_mean_gives_every_worker_its_own_copy_of_np_mean() -> None:
    rng = np.random.default_rng(0)
    for N in range(1, 6):
        arrays = [rng.standard_normal((3, 4)) for _ in range(N)]
        before = [a.copy() for a in arrays]
        out = dp.all_reduce_mean(arrays)
        assert len(out) == N
        for k, o in enumerate(out):  # N - 1 additions and a division on each side, any order (trainsys.tolerance)
            assert_within_rounding(o, np.mean(arrays, axis=0), np.mean(np.abs(arrays), axis=0), N, np.float64, "mean")
            assert not any(np.shares_memory(o, x) for x in arrays + out[:k])
        assert all(np.array_equal(a, b) for a, b in zip(arrays, before))


RING_SIZES = [1, 5, 7, 12, 13, 29, 60]


@pytest.mark.parametrize("N", range(1, 9))
def test_m1_28_ring_equals_the_mean_and_the_naive_all_reduce(N: int) -> None:
    rng = np.random.default_rng(N)
    for numel in RING_SIZES:
        for dtype in (np.float64, np.float32):
            arrays = [rng.standard_normal(numel).astype(dtype) for _ in range(N)]
            results, _ = ring.ring_all_reduce_mean(arrays)
            naive = dp.all_reduce_mean(arrays)
            magnitude = np.mean(np.abs(np.array(arrays, np.float64)), axis=0)
            for r in results:
                assert r.dtype == dtype and r.shape == (numel,)
                np.testing.assert_array_equal(r, results[0])  # every worker holds the same bits
                # the ring's N - 1 additions and one division in dtype, vs the float64 mean (trainsys.tolerance)
                assert_within_rounding(r, np.mean(np.array(arrays, np.float64), axis=0), magnitude, N, dtype, "ring")
                assert_within_rounding(r, naive[0], magnitude, N, dtype, "ring vs worker order")


@pytest.mark.parametrize("N", range(1, 9))
def test_m1_28_ring_log_schedule_and_exact_bytes(N: int) -> None:
    for numel in RING_SIZES:
        arrays = [np.ones(numel, np.float32) * k for k in range(N)]
        _, log = ring.ring_all_reduce_mean(arrays)
        assert len(log) == N * 2 * (N - 1)  # N = 1: no message at all
        assert sorted({m["step"] for m in log}) == list(range(2 * (N - 1)))
        for step in range(2 * (N - 1)):
            msgs = [m for m in log if m["step"] == step]
            assert sorted(m["sender"] for m in msgs) == list(range(N))
            assert sorted(m["chunk"] for m in msgs) == list(range(N))  # each chunk moves once per step
            assert all(m["receiver"] == (m["sender"] + 1) % N for m in msgs)
            assert {m["phase"] for m in msgs} == {"reduce-scatter" if step < N - 1 else "all-gather"}
        sent = ring.bytes_sent_per_worker(log, N)
        assert sent == ring.ring_bytes_per_worker(numel, N, 4)
        assert all(sum(m["sender"] == k for m in log) == 2 * (N - 1) for k in range(N))
        S = 4 * numel
        if numel % N == 0:
            assert all(b * N == 2 * (N - 1) * S for b in sent)  # exactly 2(N−1)/N · S
        assert all(b <= 2 * (N - 1) * math.ceil(numel / N) * 4 for b in sent)
        assert all(b >= 2 * (N - 1) * (numel // N) * 4 for b in sent)


@pytest.mark.parametrize(("n", "N"), [(12, 1), (12, 3), (10, 3), (10, 4), (7, 7), (97, 8)])
def test_m1_29_data_parallel_step_equals_the_one_worker_step_in_float64(n: int, N: int) -> None:
    params, X, Y = _problem(n)
    new, loss, sent = dp.data_parallel_train_step(params, dp.shard_dataset_across_workers(X, Y, N), 0.1)
    want, want_loss = _full_batch_step(params, X, Y, 0.1)
    assert abs(loss - want_loss) <= rounding_bound(want_loss, 2 * n + 2 * N + 4, np.float64)  # positive squares
    bounds = mse_gradient_bound([params["W1"], params["W2"]], [params["b1"], params["b2"]], X, Y, np.float64,
                                extra_roundings=N + 1)  # the shards' sums and the all-reduce's division
    for key, (l, part) in zip(mlp.PARAM_KEYS, [(0, "W"), (0, "b"), (1, "W"), (1, "b")], strict=True):
        bound = sgd_update_bound(params[key], (params[key] - want[key]) / 0.1, bounds[l][part], 0.1, np.float64)
        assert np.all(np.abs(new[key] - want[key]) <= bound), key
    numel = sum(v.size for v in params.values())
    assert sent == ring.ring_bytes_per_worker(numel, N, 8)


def test_m1_29_matches_torch_sgd_on_the_union_batch() -> None:
    params, X, Y = _problem(10)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch.optim.SGD(t.values(), lr=0.5)
    y_hat = torch.relu(torch.tensor(X) @ t["W1"] + t["b1"]) @ t["W2"] + t["b2"]
    ((y_hat - torch.tensor(Y)) ** 2).mean().backward()
    opt.step()
    new, _, _ = dp.data_parallel_train_step(params, dp.shard_dataset_across_workers(X, Y, 4), 0.5)
    bounds = mse_gradient_bound([params["W1"], params["W2"]], [params["b1"], params["b2"]], X, Y, np.float64,
                                extra_roundings=4 + 1)  # 4 shards' sums and the all-reduce's division
    for key, (l, part) in zip(mlp.PARAM_KEYS, [(0, "W"), (0, "b"), (1, "W"), (1, "b")], strict=True):
        want = t[key].detach().numpy()
        bound = sgd_update_bound(params[key], (params[key] - want) / 0.5, bounds[l][part], 0.5, np.float64)
        assert np.all(np.abs(new[key] - want) <= bound), key


def test_m1_29_float32_difference_is_rounding_only() -> None:
    params, X, Y = _problem(97, np.float32)
    new, _, _ = dp.data_parallel_train_step(params, dp.shard_dataset_across_workers(X, Y, 8), 1.0)
    want, _ = _full_batch_step(params, X, Y, 1.0)
    eps = np.finfo(np.float32).eps
    for key in mlp.PARAM_KEYS:  # a few float32 roundings of the parameter and of the gradient's scale
        scale = np.abs(params[key]).max() + np.abs(params[key] - want[key]).max()
        assert np.abs(new[key] - want[key]).max() <= 64 * eps * scale, key


def test_m1_29_averaging_the_shards_means_is_wrong_for_uneven_shards() -> None:
    params, X, Y = _problem(10)
    shards = dp.shard_dataset_across_workers(X, Y, 3)  # 4, 3, 3
    means = [{k: g[k] / n_k for k in g} for g, _, n_k in (dp.compute_local_gradients(params, s) for s in shards)]
    equal_weights = {k: sum(m[k] for m in means) / 3 for k in mlp.PARAM_KEYS}
    Y_hat, cache = mlp.mlp_forward(params, X)
    full = mlp.mlp_backward(params, cache, mlp.mse_loss_and_grad(Y_hat, Y)[1])
    assert max(np.abs(equal_weights[k] - full[k]).max() for k in mlp.PARAM_KEYS) > 1e-4


def test_m1_30_buckets_reverse_order_caps_and_round_trip() -> None:
    rng = np.random.default_rng(0)
    shapes = [(3, 8), (8,), (8, 8), (8,), (30,), (2,)]
    grads = {f"p{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    reverse = list(grads)[::-1]
    for cap in (1, 8, 32, 100, 256, 257, 10_000):
        for first in (None, 16, 64):
            buckets = bk.bucket_gradients(grads, cap, first)
            assert [k for b in buckets for k in b["keys"]] == reverse
            np.testing.assert_array_equal(np.concatenate([b["flat"] for b in buckets]),
                                          np.concatenate([grads[k].ravel() for k in reverse]))
            for i, b in enumerate(buckets):
                limit = cap if i or first is None else first
                assert b["bytes"] == b["flat"].nbytes
                assert b["bytes"] - grads[b["keys"][-1]].nbytes < limit  # open until its last tensor
                if i + 1 < len(buckets):  # closed because it reached its limit
                    assert b["bytes"] >= limit
            back = bk.unbucket_gradients(buckets, grads)
            assert list(back) == list(grads) and all(np.array_equal(back[k], grads[k]) for k in grads)
    counts = bk.collectives_per_step(grads, [1, 8, 32, 100, 256, 10_000])
    assert counts[0] == len(grads) and counts[-1] == 1 and counts == sorted(counts, reverse=True)


BUCKET_LISTS = {  # parameter shapes in parameter order; gradients become ready in the reverse order
    "MLP of mixed widths": [(784, 1024), (1024,), (1024, 4096), (4096,), (4096, 256), (256,), (256, 10), (10,)],
    "GPT-2 small": list(bk.gpt2_parameter_shapes().values()),
    "embedding larger than the cap": [(50257, 768), (768,), (768, 768), (768,)],
    "tensor larger than the cap in the middle": [(256, 256), (256,), (8192, 1024), (1024,), (1024, 64), (64,)],
}


@pytest.mark.parametrize("name", BUCKET_LISTS)
@pytest.mark.parametrize("first", [None, bk.DDP_FIRST_BUCKET_CAP_BYTES])
@pytest.mark.parametrize("cap", [bk.DDP_BUCKET_CAP_BYTES, 4 * 2**20, 2**20 + 4])
def test_m1_30_assign_buckets_equals_torchs_own_assignment(name: str, first: int | None, cap: int) -> None:
    """The oracle: ``torch.distributed._compute_bucket_assignment_by_size``, the function DDP's Reducer uses to
    (re)build its buckets, given the tensors in gradient-ready order and DDP's list of limits."""
    ready = [torch.empty(shape, device="meta") for shape in BUCKET_LISTS[name][::-1]]  # sizes only, no memory
    limits = [cap] if first is None else [first, cap]
    theirs, _ = dist._compute_bucket_assignment_by_size(ready, limits, tensor_indices=list(range(len(ready))))
    ours = bk.assign_buckets([t.numel() * 4 for t in ready], cap, first)
    assert ours == theirs


def test_m1_30_gpt2_small_at_ddps_defaults() -> None:
    """GPT-2 small's 148 tensors hold its 124,439,808 parameters (the transformer explorer's count), and make
    13 buckets at 25 MiB with a 1 MiB first bucket."""
    from trainsys.memtrain.transformer_memory import PRESETS, transformer_parameter_count

    shapes = bk.gpt2_parameter_shapes()
    assert len(shapes) == 148
    assert sum(math.prod(s) for s in shapes.values()) == transformer_parameter_count(PRESETS["gpt2-small"])
    sizes = [4 * math.prod(s) for s in list(bk.gpt2_parameter_shapes().values())[::-1]]
    assert len(bk.assign_buckets(sizes, bk.DDP_BUCKET_CAP_BYTES, bk.DDP_FIRST_BUCKET_CAP_BYTES)) == 13


def test_m1_30_ddp_defaults_and_the_closing_rule() -> None:
    assert bk.DDP_FIRST_BUCKET_CAP_BYTES == dist._DEFAULT_FIRST_BUCKET_BYTES
    assert bk.DDP_BUCKET_CAP_BYTES == 25 * 2**20
    sizes = [1, 4, 2, 3, 3]  # float32 elements, already in gradient-ready order
    torch_buckets, _ = dist._compute_bucket_assignment_by_size([torch.zeros(s) for s in sizes], [24])
    assert torch_buckets == [[0, 1, 2], [3, 4]]  # 28 bytes: the bucket closes once it reaches 24
    assert bk.assign_buckets([4 * s for s in sizes], 24) == torch_buckets


def _ddp_rebuilt_buckets(tmp_path) -> list[list[int]]:
    """Buckets of a real ``DistributedDataParallel`` (gloo, one process) after it has rebuilt them."""
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                    torch.nn.ReLU(), torch.nn.Linear(1024, 10))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        assert ddp._get_ddp_logging_data()["bucket_sizes"] == str(sum(p.numel() * 4 for p in model.parameters()))
        for _ in range(10):  # DDP records its logging data at iteration 10
            ddp(torch.randn(4, 512)).sum().backward()
        logged = ddp._get_ddp_logging_data()
    finally:
        dist.destroy_process_group()
    assert logged["has_rebuilt_buckets"] == 1
    return [[int(i) for i in group.split()] for group in logged["rebuilt_per_bucket_param_indices"].split(",")]


def test_m1_30_bucket_gradients_reproduces_a_real_ddp_rebuild(tmp_path) -> None:
    """DDP's default (``find_unused_parameters=False``) starts with one bucket for every parameter, then
    rebuilds in gradient-ready order; ``bucket_gradients`` at DDP's defaults gives the same buckets."""
    rebuilt = _ddp_rebuilt_buckets(tmp_path)
    shapes = {"W0": (512, 1024), "b0": (1024,), "W1": (1024, 1024), "b1": (1024,), "W2": (1024, 10), "b2": (10,)}
    grads = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    ours = bk.bucket_gradients(grads, bk.DDP_BUCKET_CAP_BYTES, bk.DDP_FIRST_BUCKET_CAP_BYTES)
    index = {k: i for i, k in enumerate(shapes)}
    assert [[index[k] for k in b["keys"]] for b in ours] == rebuilt == [[5, 4, 3, 2], [1, 0]]


BAD = [
    (dp.shard_dataset_across_workers, (np.ones((4, 2)), np.ones((4, 1)), 0), ValueError, "num_workers"),
    (dp.shard_dataset_across_workers, (np.ones((4, 2)), np.ones((4, 1)), 5), ValueError, "num_workers"),
    (dp.shard_dataset_across_workers, (np.ones((4, 2)), np.ones((4, 1)), 2.0), TypeError, "num_workers"),
    (dp.compute_local_gradients, (_problem(4)[0], (np.ones((0, 6)), np.ones((0, 3)))), ValueError, "shard"),
    (dp.all_reduce_mean, ([np.ones(3), np.ones(4)],), ValueError, "worker_arrays"),
    (dp.all_reduce_mean, ([],), ValueError, "worker_arrays"),
    (ring.ring_all_reduce_mean, ([np.ones((2, 3)), np.ones((3, 2))],), ValueError, "worker_arrays"),
    (ring.ring_all_reduce_mean, ([np.ones(3), np.ones(3, np.float32)],), ValueError, "worker_arrays"),
    (dp.data_parallel_train_step, (_problem(4)[0], [], 0.1), ValueError, "shards"),
    (dp.data_parallel_train_step, (*_problem(4)[:1], [_problem(4)[1:]], 0.0), ValueError, "lr"),
    (bk.bucket_gradients, ({"w": np.ones(3)}, 0), ValueError, "bucket_cap_bytes"),
    (bk.gpt2_parameter_shapes, (0,), ValueError, "d"),
    (bk.gpt2_parameter_shapes, (768, 12.0), TypeError, "layers"),
    (bk.bucket_gradients, ({"w": np.ones(3)}, -1), ValueError, "bucket_cap_bytes"),
    (bk.bucket_gradients, ({"w": np.ones(3)}, 8, 0), ValueError, "first_bucket_cap_bytes"),
    (bk.bucket_gradients, ({"w": np.ones(3), "b": np.ones(3, np.float32)}, 8), ValueError, "grads"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD,
                         ids=[f"{b[0].__name__}-{b[3]}-{i}" for i, b in enumerate(BAD)])
def test_m1_part5_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
