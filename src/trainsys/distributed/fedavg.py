"""FedAvg rounds for real: each process hosts a group of clients; the aggregate is an all-reduce.

Run: ``torchrun --standalone --nproc_per_node=P -m trainsys.distributed.fedavg --out r.json --rounds T
[--fraction C] [--epochs E] [--partition iid|shards] [--seed S]``.

Every rank prepares the run of :func:`trainsys.fedavg.server.run_fedavg` for the same config (data,
split, partition, initial model, the round generator), so every rank draws the same selected clients
and client seeds. Rank ``r`` trains the selected clients ``k`` with ``k mod P == r`` (starting from the
global model), and the server's weighted average becomes two collectives:

.. math::

    w_{t+1} = \frac{\sum_r \sum_{k \in S_t,\, k \bmod P = r} n_k\, w^k}{\sum_r \sum_{k} n_k}
    \quad = \quad \frac{\mathrm{all\_reduce}(\sum n_k w^k)}{\mathrm{all\_reduce}(\sum n_k)} .

Rank 0 writes the test accuracy per round, to compare with the one-process simulation. (A federation of
real devices would run the same functions under a framework such as Flower, where the "server" and
"clients" are separate programs talking over the network instead of ranks of one job.)
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import torch
import torch.distributed as dist

from trainsys.distributed.launch import finish, init_process_group, write_result
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.server import evaluate_accuracy, make_partition, prepare_run, select_clients, validate_fedavg_config


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--partition", choices=["iid", "shards"], default="iid")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rank, world = init_process_group()
    config = validate_fedavg_config({"rounds": args.rounds, "fraction": args.fraction, "epochs": args.epochs,
                                     "partition": args.partition, "seed": args.seed})
    train, test, model, seeds = prepare_run(config)
    partition = make_partition(config, train, seeds["partition"])
    rng = np.random.default_rng(seeds["rounds"])  # identical on every rank: same clients, same seeds
    history = []
    for _ in range(config.rounds):
        selected = select_clients(len(partition), config.fraction, rng)
        client_seeds = rng.integers(0, 2**31 - 1, size=len(selected))
        state = model.state_dict()
        weighted = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in state.items()}
        total = torch.zeros(1, dtype=torch.float64)
        for k, seed in zip(selected, client_seeds):
            if k % world != rank:
                continue  # another process hosts this client
            local = copy.deepcopy(model)
            result = train_client_locally(local, train, partition[k], config.epochs, config.batch_size, config.lr,
                                          int(seed), config.momentum)
            for key, value in local.state_dict().items():
                weighted[key] += result["num_samples"] * value.to(torch.float64)
            total += result["num_samples"]
        for tensor in (*weighted.values(), total):
            dist.all_reduce(tensor)  # Σ over every process's clients
        model.load_state_dict({k: (weighted[k] / total).to(v.dtype) for k, v in state.items()})
        history.append({"test_accuracy": evaluate_accuracy(model, test), "selected": selected})
    write_result(args.out, {"history": history, "world_size": world})
    finish()


if __name__ == "__main__":
    main()
