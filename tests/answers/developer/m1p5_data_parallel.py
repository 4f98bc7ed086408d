"""Mutants for Module 1, Part 5 (lessons 25–27, 29): the data-parallel mistakes the notebooks name."""

from __future__ import annotations

from trainsys.memtrain import data_parallel as ref
from trainsys.memtrain import mlp
from trainsys.memtrain.ring_allreduce import bytes_sent_per_worker, ring_all_reduce_mean

REFERENCE = "trainsys.memtrain.data_parallel"


def _shard(variant: str):
    def wrong(X, Y, num_workers):
        ref.shard_dataset_across_workers(X, Y, num_workers)  # validation
        n, N = len(X), num_workers
        size = n // N
        if variant == "drop_remainder":  # n mod N examples never seen by any worker
            bounds = [(k * size, (k + 1) * size) for k in range(N)]
        elif variant == "remainder_last":  # the last worker gets up to N − 1 extra examples
            bounds = [(k * size, (k + 1) * size if k < N - 1 else n) for k in range(N)]
        else:
            return [(x.copy(), y.copy()) for x, y in ref.shard_dataset_across_workers(X, Y, N)]
        return [(X[a:b], Y[a:b]) for a, b in bounds]

    return wrong


def _local(variant: str):
    def wrong(params, shard):
        grads, loss_sum, n_k = ref.compute_local_gradients(params, shard)  # validation
        X_k, Y_k = shard
        Y_hat, cache = mlp.mlp_forward(params, X_k)
        loss, dY = mlp.mse_loss_and_grad(Y_hat, Y_k)
        if variant == "mean":  # the shard's mean gradient: uneven shards then weigh the same
            return mlp.mlp_backward(params, cache, dY), loss * n_k, n_k
        if variant == "elements":  # summed over examples AND outputs: d_out times too large
            return mlp.mlp_backward(params, cache, dY * dY.dtype.type(Y_k.size)), loss * Y_k.size, n_k
        return grads, loss, n_k  # "mean_loss": the loss returned as the shard's mean

    return wrong


def _all_reduce(variant: str):
    def wrong(worker_arrays):
        ref.all_reduce_mean(worker_arrays)  # validation
        N = len(worker_arrays)
        if variant == "in_place":  # accumulates into worker 0's array
            total = worker_arrays[0]
            for a in worker_arrays[1:]:
                total += a
            total /= N
            return [total.copy() for _ in range(N)]
        total = sum(a.copy() for a in worker_arrays)
        if variant == "sum":  # forgets to divide by N
            return [total.copy() for _ in range(N)]
        return [total / N] * N  # "alias": one array shared by every worker

    return wrong


def _step(variant: str):
    def wrong(params, shards, lr):
        ref.data_parallel_train_step(params, shards, lr)  # validation
        N = len(shards)
        local = [ref.compute_local_gradients(params, s) for s in shards]
        n = sum(n_k for _, _, n_k in local)
        if variant == "mean_of_means":  # each shard's mean gradient, averaged equally over workers
            flats = [ref.flatten_params(g) / n_k for g, _, n_k in local]
        else:
            flats = [ref.flatten_params(g) for g, _, _ in local]
        means, log = ring_all_reduce_mean(flats)
        if variant == "mean_of_means":
            mean = means[0]
        elif variant == "no_exchange":  # each worker steps with its own gradient; worker 0's is returned
            mean = flats[0] / local[0][2]
        else:  # "forget_count": the mean of the summed gradients taken as the gradient
            mean = means[0]
        grads = ref.unflatten_params(mean.astype(flats[0].dtype), params)
        loss = sum(l for _, l, _ in local) / n
        return mlp.sgd_step(params, grads, lr), loss, bytes_sent_per_worker(log, N)

    return wrong


MUTANTS = {
    "shard_dataset_across_workers": [
        ("drops the remainder (n mod N examples never trained on)", _shard("drop_remainder")),
        ("gives the whole remainder to the last worker", _shard("remainder_last")),
        ("copies each shard instead of slicing", _shard("copy")),
    ],
    "compute_local_gradients": [
        ("returns the shard's mean gradient, not the summed one", _local("mean")),
        ("sums over examples and outputs (n_k·d_out instead of n_k)", _local("elements")),
        ("returns the shard's mean loss instead of its sum", _local("mean_loss")),
    ],
    "all_reduce_mean": [
        ("returns the sum, not the mean", _all_reduce("sum")),
        ("returns the same array object to every worker", _all_reduce("alias")),
        ("accumulates into worker 0's input array in place", _all_reduce("in_place")),
    ],
    "data_parallel_train_step": [
        ("averages the shards' mean gradients equally (wrong for uneven shards)", _step("mean_of_means")),
        ("skips the gradient exchange: worker 0 steps with its own gradient", _step("no_exchange")),
        ("forgets the N/n factor after the all-reduce of summed gradients", _step("forget_count")),
    ],
}
