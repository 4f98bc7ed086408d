"""The ClientApp: a SuperNode's answer to the ServerApp's messages (Flower's Message API).

* ``query`` — replies with the SuperNode's node config (``ConfigRecord`` ``"node"``: ``supernode-id``,
  ``num-supernodes``), so that the ServerApp learns which node hosts which clients.
* ``train`` — for every client ``k`` in ``config["client-ids"]`` (all hosted here: ``k mod S`` is this
  SuperNode's id, else the message is refused), a fresh model loaded with the sent global state ``w_t``
  runs :func:`~trainsys.fedavg.client.train_client_locally` on ``partition[k]`` with its seed; the reply
  holds ``ArrayRecord`` ``"client-<k>"`` (:func:`~trainsys.fedavg.state.clone_model_state` of the result)
  per client and ``ConfigRecord`` ``"report"`` (``client-ids``, ``num-samples`` ``n_k``, ``losses`` —
  each client's last-epoch loss — and ``num-steps``), in the order of the request.

The data set, split and partition are rebuilt from the run config and seeds exactly as ``run_fedavg``
builds them (``prepare_run``, ``make_partition``); they are deterministic, so every SuperNode holds the
same parts the simulation's clients hold. A refused or failed message raises: Flower then answers the
ServerApp with an error reply (``ErrorCode.CLIENT_APP_RAISED_EXCEPTION`` and the exception's text).
"""

from __future__ import annotations

import copy

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from trainsys._validation import describe
from trainsys.distributed.flower_app import NODE_NUM_SUPERNODES, NODE_SUPERNODE_ID, hosting_supernode
from trainsys.distributed.flower_app.protocol import (REPLY_NODE, REPLY_REPORT, REQUEST_ARRAYS, REQUEST_CONFIG,
                                                      arrays_to_state, client_key, read_fedavg_config,
                                                      read_node_config, state_to_arrays)
from trainsys.fedavg.client import train_client_locally
from trainsys.fedavg.server import make_partition, prepare_run
from trainsys.fedavg.state import clone_model_state, load_model_state

app = ClientApp()


@app.query()
def describe_supernode(message: Message, context: Context) -> Message:
    """Reply with this SuperNode's ``supernode-id`` and ``num-supernodes`` (its node config, checked)."""
    supernode_id, num_supernodes = read_node_config(context.node_config)
    node = ConfigRecord({NODE_SUPERNODE_ID: supernode_id, NODE_NUM_SUPERNODES: num_supernodes})
    return Message(RecordDict({REPLY_NODE: node}), reply_to=message)


def _int_list(config: ConfigRecord, key: str) -> list[int]:
    values = config.get(key)
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"train message config[{key!r}] must be a list of integers, got {describe(values)}")
    return [int(v) for v in values]


@app.train()
def train(message: Message, context: Context) -> Message:
    """Train every requested client hosted here from the sent ``w_t``; reply with their states and counts."""
    supernode_id, num_supernodes = read_node_config(context.node_config)
    config = read_fedavg_config(context.run_config)
    request = message.content[REQUEST_CONFIG]
    client_ids, client_seeds = _int_list(request, "client-ids"), _int_list(request, "client-seeds")
    if len(client_ids) != len(client_seeds) or not client_ids:
        raise ValueError(f"train message must name >= 1 client and one seed per client, got {len(client_ids)} "
                         f"ids and {len(client_seeds)} seeds")
    foreign = [k for k in client_ids if not 0 <= k < config.num_clients
               or hosting_supernode(k, num_supernodes) != supernode_id]
    if foreign:
        raise ValueError(f"client-ids {foreign} are not hosted by supernode {supernode_id} of {num_supernodes} "
                         f"(it hosts the clients k with k mod {num_supernodes} == {supernode_id}, k < "
                         f"{config.num_clients})")

    train_set, _, model, seeds = prepare_run(config)
    partition = make_partition(config, train_set, seeds["partition"])
    global_state = arrays_to_state(message.content[REQUEST_ARRAYS], "train message arrays")
    load_model_state(model, global_state)  # w_t; strict: keys, shapes and dtypes must be the model's

    reply: dict[str, ArrayRecord | ConfigRecord] = {}
    counts, losses, steps = [], [], []
    for k, seed in zip(client_ids, client_seeds):
        local = copy.deepcopy(model)  # every client starts from w_t, as in run_communication_round
        result = train_client_locally(local, train_set, partition[k], config.epochs, config.batch_size, config.lr,
                                      seed, config.momentum)
        reply[client_key(k)] = state_to_arrays(clone_model_state(local))
        counts.append(int(result["num_samples"]))
        losses.append(float(result["epoch_losses"][-1]))
        steps.append(int(result["num_steps"]))
    reply[REPLY_REPORT] = ConfigRecord({"client-ids": client_ids, "num-samples": counts, "losses": losses,
                                        "num-steps": steps})
    return Message(RecordDict(reply), reply_to=message)
