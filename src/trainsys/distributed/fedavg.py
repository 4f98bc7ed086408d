r"""FedAvg rounds for real: each process hosts a group of clients; the aggregate is an all-reduce.

Run: ``torchrun --standalone --nproc_per_node=P -m trainsys.distributed.fedavg --out r.json --rounds T
[--fraction C] [--epochs E] [--partition iid|shards|natural] [--seed S] [--task synthetic|fashion-mnist|shakespeare]``
(the task's config from :func:`trainsys.fedavg.real.task_config`, as the simulation and ``make federate`` build it) and, for clients that drop out or
report too late (:mod:`trainsys.fedavg.faults`), ``[--dropout-rate p] [--deadline D] [--overselect r]
[--straggler-median-s M] [--straggler-sigma s]``.

Every rank prepares the run of :func:`trainsys.fedavg.faults.run_fedavg_with_faults` for the same
config (data, split, partition, initial model, the round generator ``rng`` seeded ``seeds["rounds"]``
and the fault generator seeded ``config.seed + FAULT_SEED_OFFSET``), and every rank makes the
simulation's draws in the simulation's order with its function :func:`~trainsys.fedavg.faults.draw_round`
(the selection of :math:`m' =` :func:`~trainsys.fedavg.faults.overselected_count` clients, their seeds,
every client's fate from the fault generator, and the reports sorted out against the deadline). So every rank holds the same
selected, reported, dropped, late and surplus clients without exchanging anything but tensors.

Only the reporters :math:`R_t` are trained: rank ``r`` trains the reporters ``k`` with
``k mod P == r`` (starting from the global model). A client that drops out, is late, or arrives after
the round closed (surplus) is **not** trained here: in reality its device computed an update that the
server throws away (wasted compute, and for a late client a wasted upload); the job skips that work,
which changes nothing, since a client's result depends only on :math:`w_t`, its data and its seed.
The server's weighted average, renormalised over the reporters, becomes two collectives:

.. math::

    w_{t+1} = \frac{\sum_r \sum_{k \in R_t,\, k \bmod P = r} n_k\, w^k}{\sum_r \sum_{k \in R_t,\, k \bmod P = r} n_k}
    \quad = \quad \frac{\mathrm{all\_reduce}(\sum n_k w^k)}{\mathrm{all\_reduce}(\sum n_k)} .

A round without any reporter (known to every rank from the shared draws) keeps :math:`w_t` and
exchanges nothing. Without fault options (``p = 0``, no deadline, ``r = 0``) every selected client
reports, :math:`m' = m`, and the draws and the aggregate are those of
:func:`trainsys.fedavg.server.run_fedavg` (the fault generator is separate and changes nothing).

Rank 0 writes, per round, ``selected``, ``reported``, ``dropped``, ``late``, ``surplus`` (client ids,
ascending), ``round_time_s``, ``kept_global_model`` and ``test_accuracy``, plus a ``faults`` entry (the
options, ``clients_per_round`` ``m`` and ``selected_per_round`` ``m'``), to compare with the
one-process simulation. (A federation of real devices would run the same functions under a framework
such as Flower, where the "server" and "clients" are separate programs talking over the network instead
of ranks of one job.)
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import asdict

import numpy as np
import torch
import torch.distributed as dist

from trainsys._validation import require_real
from trainsys.distributed.launch import finish, init_process_group, write_result
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.faults import (FAULT_SEED_OFFSET, LogNormalLatency, draw_round, overselected_count,
                                    require_deadline, require_dropout_rate)
from trainsys.fedavg.real import task_config
from trainsys.fedavg.server import clients_per_round, evaluate_accuracy, make_partition, prepare_run


def fault_options(args: argparse.Namespace) -> dict[str, object]:
    """The validated fault options: ``dropout_rate``, ``deadline``, ``overselect``, ``straggler``.

    Raises ``TypeError``/``ValueError`` naming the command-line option: ``--dropout-rate`` outside
    ``[0, 1)``, ``--deadline`` not a finite number > 0, ``--overselect`` negative or not finite,
    ``--straggler-median-s`` not > 0 or ``--straggler-sigma`` negative.
    """
    try:
        straggler = LogNormalLatency(args.straggler_median_s, args.straggler_sigma)
    except (TypeError, ValueError) as error:
        raise ValueError(f"--straggler-median-s / --straggler-sigma: {error}") from None
    return {"dropout_rate": require_dropout_rate("--dropout-rate", args.dropout_rate),
            "deadline": require_deadline("--deadline", args.deadline),
            "overselect": require_real("--overselect", args.overselect, minimum=0.0),
            "straggler": straggler}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--partition", choices=["iid", "shards", "natural"], default=None,
                        help="default: iid (natural for shakespeare: one client per speaking role)")
    parser.add_argument("--task", choices=["synthetic", "fashion-mnist", "shakespeare"], default="synthetic")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout-rate", type=float, default=0.0, help="p in [0, 1): a selected client drops out")
    parser.add_argument("--deadline", type=float, default=None, help="simulated seconds; omitted: no deadline")
    parser.add_argument("--overselect", type=float, default=0.0, help="r >= 0: select ceil((1 + r) m) clients")
    parser.add_argument("--straggler-median-s", type=float, default=LogNormalLatency.median_s,
                        help="LogNormalLatency.median_s: the median report time, simulated seconds")
    parser.add_argument("--straggler-sigma", type=float, default=LogNormalLatency.sigma,
                        help="LogNormalLatency.sigma: the spread of the log report time")
    args = parser.parse_args()
    try:
        faults = fault_options(args)
        config = task_config(args.task, rounds=args.rounds, fraction=args.fraction, epochs=args.epochs,
                             partition=args.partition, seed=args.seed)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    rank, world = init_process_group()
    train, test, model, seeds = prepare_run(config)
    seeds = {**seeds, "faults": config.seed + FAULT_SEED_OFFSET}  # as run_fedavg_with_faults seeds it
    partition = make_partition(config, train, seeds["partition"])
    K = len(partition)
    m = clients_per_round(K, config.fraction)
    m_sel = overselected_count(m, faults["overselect"], K)
    # Identical on every rank: the same clients, seeds and fates, drawn in the simulation's order.
    rng, fault_rng = np.random.default_rng(seeds["rounds"]), np.random.default_rng(seeds["faults"])
    history = []
    for _ in range(config.rounds):
        selected, client_seeds, fates = draw_round(K, config.fraction, rng, fault_rng, **faults)  # the simulation's
        if fates["reported"]:  # every rank knows it: all take part in the all-reduces, or none does
            state = model.state_dict()
            weighted = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in state.items()}
            total = torch.zeros(1, dtype=torch.float64)
            for k in fates["reported"]:
                if k % world != rank:
                    continue  # another process hosts this client
                local = copy.deepcopy(model)
                result = train_client_locally(local, train, partition[k], config.epochs, config.batch_size,
                                              config.lr, client_seeds[k], config.momentum)
                for key, value in local.state_dict().items():
                    weighted[key] += result["num_samples"] * value.to(torch.float64)
                total += result["num_samples"]
            for tensor in (*weighted.values(), total):
                dist.all_reduce(tensor)  # Σ over every process's reporters
            model.load_state_dict({k: (weighted[k] / total).to(v.dtype) for k, v in state.items()})
        history.append({"selected": selected, **fates, "kept_global_model": not fates["reported"],
                        "test_accuracy": evaluate_accuracy(model, test)})
    write_result(args.out, {"history": history, "world_size": world, "seeds": seeds,
                            "faults": {**faults, "straggler": asdict(faults["straggler"]),
                                       "clients_per_round": m, "selected_per_round": m_sel}})
    finish()


if __name__ == "__main__":
    main()
