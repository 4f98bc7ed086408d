r"""Module 3 on Flower's Deployment Runtime: FedAvg as a ``ServerApp`` and a ``ClientApp`` (Flower 1.42).

The course's FedAvg (:mod:`trainsys.fedavg.server`) runs every client inside one process. Here the
same rounds run on a real Flower federation: one **SuperLink** (the server's broker), ``S``
**SuperNodes** (the machines that hold the clients' data), a ``ServerApp`` (:mod:`.server_app`) that
the SuperLink starts for the run, and a ``ClientApp`` (:mod:`.client_app`) that each SuperNode starts
for every message it receives. :mod:`trainsys.distributed.federate` starts all of them on this machine.

**Who hosts whom.** SuperNode ``i`` (node config ``supernode-id=i num-supernodes=S``) hosts the clients
:math:`k \equiv i \pmod S` of the ``K`` in the partition: :func:`hosting_supernode`. A real deployment
would give each machine its own data; here every SuperNode rebuilds the course's synthetic data set and
partition from the run's config and seeds (``prepare_run``, ``make_partition``) and uses only its own
clients' parts.

**The protocol** (Flower's Message API; every parameter travels as an ``ArrayRecord`` of NumPy arrays,
serialised with ``numpy.save`` and read back with ``allow_pickle=False`` — never a pickle):

1. *Discovery* — the ServerApp waits until ``S`` SuperNodes are connected, sends each a ``query``
   message and learns from the replies which node id has which ``supernode-id``.
2. *Round t* — the ServerApp draws the round exactly as ``run_communication_round`` does (with
   ``rng = numpy.random.default_rng(seeds["rounds"])``: ``select_clients(K, C, rng)``, then
   ``rng.integers(0, 2**31 - 1, size=m)``, client ``selected[i]`` training with the ``i``-th seed) and
   sends **one** ``train`` message to every SuperNode that hosts a selected client: the global state
   ``w_t`` (``ArrayRecord`` ``"arrays"``) and its clients' ids and seeds (``ConfigRecord``
   ``"config"``). The ClientApp trains each of them from ``w_t`` with ``train_client_locally`` and
   replies with one ``ArrayRecord`` ``"client-<k>"`` per client and a ``ConfigRecord`` ``"report"``
   (``client-ids``, ``num-samples``, ``losses``, ``num-steps``).
3. The ServerApp waits for the replies at most ``round-timeout`` seconds, then aggregates the clients
   that **reported** with ``aggregate_weighted_average`` — weights :math:`n_k / \sum_{j \in R_t} n_j`,
   renormalised over the reporters as :mod:`trainsys.fedavg.faults` does, in ascending id order as
   ``run_communication_round`` aggregates — or keeps ``w_t`` when nobody reported. With every client
   reporting, the run is ``run_fedavg``'s: same clients, same seeds, same aggregate.

One message per SuperNode per round (not one per client): a SuperNode handles one message at a time
and starts a fresh ClientApp process for each, so this costs one process start per SuperNode and round.

This package imports Flower only in :mod:`.protocol`, :mod:`.server_app` and :mod:`.client_app`;
``import trainsys.distributed.flower_app`` alone (the names below) does not need ``flwr``.
"""

from __future__ import annotations

from trainsys._validation import require_int

SERVER_APP_REF = "trainsys.distributed.flower_app.server_app:app"
"""``[tool.flwr.app.components] serverapp``: the object Flower loads as the ServerApp."""

CLIENT_APP_REF = "trainsys.distributed.flower_app.client_app:app"
"""``[tool.flwr.app.components] clientapp``: the object Flower loads as the ClientApp."""

# Run config (``[tool.flwr.app.config]``, seen by both apps as ``context.run_config``).
RUN_FEDAVG_CONFIG = "fedavg-config"  # JSON of the FedAvgConfig fields (validate_fedavg_config)
RUN_NUM_SUPERNODES = "num-supernodes"  # S
RUN_RECORD_PATH = "record-path"  # where the ServerApp writes the run record (JSON)
RUN_ROUND_TIMEOUT = "round-timeout"  # seconds the ServerApp waits for a round's replies
RUN_CONNECT_TIMEOUT = "connect-timeout"  # seconds it waits for the S SuperNodes to connect and answer

# Node config (``flower-supernode --node-config``, seen by the ClientApp as ``context.node_config``).
NODE_SUPERNODE_ID = "supernode-id"  # i in [0, S)
NODE_NUM_SUPERNODES = "num-supernodes"  # S


def hosting_supernode(client_id: int, num_supernodes: int) -> int:
    """The SuperNode that hosts client ``k``: :math:`k \\bmod S` (``k >= 0``, ``S >= 1``)."""
    client_id = require_int("client_id", client_id, minimum=0)
    num_supernodes = require_int("num_supernodes", num_supernodes, minimum=1)
    return client_id % num_supernodes


def node_config_string(supernode_id: int, num_supernodes: int) -> str:
    """``flower-supernode --node-config`` for SuperNode ``i`` of ``S``: ``"supernode-id=i num-supernodes=S"``."""
    num_supernodes = require_int("num_supernodes", num_supernodes, minimum=1)
    supernode_id = require_int("supernode_id", supernode_id, minimum=0, maximum=num_supernodes - 1)
    return f"{NODE_SUPERNODE_ID}={supernode_id} {NODE_NUM_SUPERNODES}={num_supernodes}"
