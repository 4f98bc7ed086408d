r"""The ServerApp: FedAvg's rounds over a Flower federation, with the course's selection and aggregation.

Run config (see :mod:`trainsys.distributed.flower_app`): ``fedavg-config`` (JSON of the
:class:`~trainsys.fedavg.server.FedAvgConfig` fields), ``num-supernodes`` ``S``, ``record-path``,
``round-timeout`` and ``connect-timeout`` (seconds).

The run (:func:`run_federated_fedavg`):

1. ``train, test, model, seeds = prepare_run(config)``, ``partition = make_partition(config, train,
   seeds["partition"])``, ``rng = numpy.random.default_rng(seeds["rounds"])`` — ``run_fedavg``'s;
2. wait (at most ``connect-timeout``) for ``S`` connected SuperNodes and learn their ``supernode-id``
   from a ``query`` each (:func:`discover_supernodes`);
3. each round ``t``: ``selected = select_clients(K, C, rng)``, ``seeds = rng.integers(0, 2**31 - 1,
   size=m)`` (the draws of ``run_communication_round``, in its order); one ``train`` message per hosting
   SuperNode; replies gathered for at most ``round-timeout`` seconds (:func:`exchange`); the reporters
   :math:`R_t` (ascending ids) aggregated with ``aggregate_weighted_average`` — weights
   :math:`n_k / \sum_{j\in R_t} n_j` — or ``w_t`` kept when :math:`R_t = \varnothing`; test accuracy
   (``evaluate_accuracy``) after the round.

The run record (JSON at ``record-path``, rewritten after every round so that progress can be watched;
``"finished": true`` once the run is over): ``{"kind": "fedavg_flower", "finished", "config", "seeds",
"client_sizes", "initial_test_accuracy", "num_supernodes", "node_ids": {supernode-id: Flower node id},
"round_timeout_s", "history": [{"round", "test_accuracy", "train_loss" (over the reporters; None if
none), "selected", "client_seeds", "reported", "missing" (selected, no report), "errors" (error replies'
texts), "kept_global_model", "round_time_s", "bytes_down" (m·S_w), "bytes_up" (|R_t|·S_w)}, ...],
"final_test_accuracy", "wall_time_s"}``. When the run fails, the record is ``{"kind": "fedavg_flower",
"finished": true, "error": "<type>: <message>", ...}`` with whatever had been recorded, and the
exception is re-raised (Flower then marks the run failed).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from trainsys.distributed.flower_app import NODE_NUM_SUPERNODES, NODE_SUPERNODE_ID, RUN_RECORD_PATH, hosting_supernode
from trainsys.distributed.flower_app.protocol import (REPLY_NODE, REPLY_REPORT, REQUEST_ARRAYS, REQUEST_CONFIG,
                                                      FlowerRunSettings, arrays_to_state, client_key,
                                                      read_run_settings, state_to_arrays)
from trainsys.fedavg.partition import Partition
from trainsys.fedavg.server import evaluate_accuracy, make_partition, prepare_run, select_clients
from trainsys.fedavg.state import aggregate_weighted_average, load_model_state, state_dict_bytes

POLL_S = 0.2
"""Seconds between two pulls of replies (``Grid.send_and_receive`` would poll every 3 s)."""

app = ServerApp()


def write_record(path: str | os.PathLike[str], record: dict[str, object]) -> None:
    """Write ``record`` as JSON to ``path`` atomically (a temporary file, then ``os.replace``)."""
    path = Path(path)
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(record))
    os.replace(scratch, path)


def exchange(grid: Grid, messages: list[Message], timeout: float) -> tuple[list[str], list[Message]]:
    """Push ``messages``; pull their replies every :data:`POLL_S` s until all came or ``timeout`` s passed.

    Returns ``(message_ids, replies)``: the ids the SuperLink gave the messages (in their order) and the
    replies that arrived in time (error replies included; ``reply.metadata.reply_to_message_id`` names
    the message answered). Replies that arrive later are never pulled.
    """
    ids = [str(i) if i is not None else None for i in grid.push_messages(messages)]
    if None in ids or len(ids) != len(messages):
        raise RuntimeError(f"the SuperLink accepted only {sum(i is not None for i in ids)} of {len(messages)} "
                           "messages")
    pending, replies = set(ids), []
    deadline = time.monotonic() + timeout
    while pending:
        for reply in grid.pull_messages(sorted(pending)):
            if reply.metadata.reply_to_message_id in pending:
                pending.discard(reply.metadata.reply_to_message_id)
                replies.append(reply)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    return ids, replies


def _error_text(reply: Message) -> str:
    return f"node {reply.metadata.src_node_id}: error {reply.error.code}: {reply.error.reason}"


def discover_supernodes(grid: Grid, num_supernodes: int, timeout: float) -> dict[int, int]:
    """``{supernode-id: Flower node id}`` for the ``S`` SuperNodes, after at most ``timeout`` s of waiting.

    Waits until ``grid.get_node_ids()`` lists ``S`` nodes, sends each a ``query`` and reads its node config
    from the reply. Raises ``RuntimeError`` when fewer than ``S`` nodes connect or answer in time, when a
    node's ``num-supernodes`` is not ``S``, or when the ids are not ``0 … S-1`` once each.
    """
    deadline = time.monotonic() + timeout
    while len(node_ids := sorted(int(n) for n in grid.get_node_ids())) < num_supernodes:
        if time.monotonic() >= deadline:
            raise RuntimeError(f"only {len(node_ids)} of {num_supernodes} SuperNodes connected to the SuperLink "
                               f"within {timeout} s")
        time.sleep(POLL_S)
    queries = [Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=n, message_type=MessageType.QUERY)
               for n in node_ids]
    ids, replies = exchange(grid, queries, max(deadline - time.monotonic(), POLL_S))
    errors = [_error_text(r) for r in replies if r.has_error()]
    if errors or len(replies) != len(queries):
        raise RuntimeError(f"{len(replies) - len(errors)} of {len(queries)} SuperNodes answered the discovery "
                           f"query within {timeout} s; errors: {errors}")
    hosts: dict[int, list[int]] = {}
    for reply in replies:
        node = reply.content[REPLY_NODE]
        if node[NODE_NUM_SUPERNODES] != num_supernodes:
            raise RuntimeError(f"SuperNode {reply.metadata.src_node_id} says {NODE_NUM_SUPERNODES}="
                               f"{node[NODE_NUM_SUPERNODES]}, but the run expects {num_supernodes}")
        hosts.setdefault(int(node[NODE_SUPERNODE_ID]), []).append(int(reply.metadata.src_node_id))
    if sorted(hosts) != list(range(num_supernodes)) or any(len(v) != 1 for v in hosts.values()):
        raise RuntimeError(f"the SuperNodes' {NODE_SUPERNODE_ID}s must be 0 … {num_supernodes - 1} once each, "
                           f"got {{id: node ids}} = {hosts}")
    return {i: nodes[0] for i, nodes in sorted(hosts.items())}


def collect_reports(replies: Iterable[Message], sent: dict[str, list[int]], partition: Partition
                    ) -> tuple[dict[int, tuple[dict[str, torch.Tensor], int, float, int]], list[str]]:
    """The clients' results in ``replies``: ``({k: (state, n_k, loss, steps)}, [error texts])``.

    ``sent`` maps each message id to the client ids it asked for. A reply must report exactly those
    clients, each with ``n_k = len(partition[k])``; anything else raises ``RuntimeError`` (a SuperNode
    that trains on other data than the simulation's must not be averaged in silently).
    """
    results, errors = {}, []
    for reply in replies:
        if reply.has_error():
            errors.append(_error_text(reply))
            continue
        asked = sent[reply.metadata.reply_to_message_id]
        report = reply.content[REPLY_REPORT]
        ids, counts = list(report["client-ids"]), list(report["num-samples"])
        if ids != asked:
            raise RuntimeError(f"node {reply.metadata.src_node_id} reported clients {ids}, but was asked for {asked}")
        for k, n_k, loss, steps in zip(ids, counts, report["losses"], report["num-steps"]):
            if n_k != partition[k].numel():
                raise RuntimeError(f"client {k} reported num-samples={n_k}, but holds {partition[k].numel()} examples")
            results[int(k)] = (arrays_to_state(reply.content[client_key(k)], client_key(k)), int(n_k), float(loss),
                               int(steps))
    return results, errors


def run_federated_fedavg(grid: Grid, settings: FlowerRunSettings, record: dict[str, object]) -> dict[str, object]:
    """``config.rounds`` FedAvg rounds over the federation; fills and returns ``record`` (see the module)."""
    config, num_supernodes = settings.config, settings.num_supernodes
    start = time.perf_counter()
    train, test, model, seeds = prepare_run(config)
    partition = make_partition(config, train, seeds["partition"])
    rng = np.random.default_rng(seeds["rounds"])  # the one generator of every round, as in run_fedavg
    record.update(config=asdict(config), seeds=seeds, client_sizes=[int(p.numel()) for p in partition],
                  initial_test_accuracy=evaluate_accuracy(model, test), num_supernodes=num_supernodes,
                  round_timeout_s=settings.round_timeout, history=[])
    node_ids = discover_supernodes(grid, num_supernodes, settings.connect_timeout)
    record["node_ids"] = {str(i): n for i, n in node_ids.items()}
    write_record(settings.record_path, record)
    size = state_dict_bytes(model.state_dict())
    for t in range(1, config.rounds + 1):
        round_start = time.perf_counter()
        selected = select_clients(len(partition), config.fraction, rng)  # run_communication_round's draws,
        client_seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=len(selected))]  # in its order
        plan: dict[int, tuple[list[int], list[int]]] = {}
        for k, seed in zip(selected, client_seeds):
            ids, seeds_k = plan.setdefault(hosting_supernode(k, num_supernodes), ([], []))
            ids.append(k)
            seeds_k.append(seed)
        arrays = state_to_arrays(model.state_dict())  # w_t, sent to every hosting SuperNode
        messages = [Message(RecordDict({REQUEST_ARRAYS: arrays,
                                        REQUEST_CONFIG: ConfigRecord({"round": t, "client-ids": ids,
                                                                      "client-seeds": seeds_k})}),
                            dst_node_id=node_ids[host], message_type=MessageType.TRAIN, group_id=str(t))
                    for host, (ids, seeds_k) in sorted(plan.items())]
        message_ids, replies = exchange(grid, messages, settings.round_timeout)
        sent = {mid: plan[host][0] for mid, host in zip(message_ids, sorted(plan))}
        results, errors = collect_reports(replies, sent, partition)
        reported = sorted(results)  # ascending ids, as run_communication_round aggregates the selected
        if reported:  # renormalised over the reporters: n_k / sum_{j in R_t} n_j
            load_model_state(model, aggregate_weighted_average([results[k][0] for k in reported],
                                                               [results[k][1] for k in reported]))
        counts = [results[k][1] for k in reported]
        record["history"].append({
            "round": t, "test_accuracy": evaluate_accuracy(model, test),
            "train_loss": sum(results[k][1] * results[k][2] for k in reported) / sum(counts) if reported else None,
            "selected": selected, "client_seeds": client_seeds, "reported": reported,
            "missing": [k for k in selected if k not in results], "errors": errors,
            "local_steps": [results[k][3] for k in reported], "kept_global_model": not reported,
            "round_time_s": time.perf_counter() - round_start,
            "bytes_down": len(selected) * size, "bytes_up": len(reported) * size})
        write_record(settings.record_path, record)
    record.update(final_test_accuracy=record["history"][-1]["test_accuracy"], wall_time_s=time.perf_counter() - start,
                  finished=True)
    write_record(settings.record_path, record)
    return record


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Read the run config, run :func:`run_federated_fedavg`; on failure write the error into the record."""
    record: dict[str, object] = {"kind": "fedavg_flower", "finished": False}
    path = context.run_config.get(RUN_RECORD_PATH)
    try:
        settings = read_run_settings(context.run_config)
        run_federated_fedavg(grid, settings, record)
    except BaseException as error:
        if isinstance(path, str) and path:
            record.update(finished=True, error=f"{type(error).__name__}: {error}")
            write_record(path, record)
        raise


__all__ = ["app", "collect_reports", "discover_supernodes", "exchange", "run_federated_fedavg",
           "write_record"]
