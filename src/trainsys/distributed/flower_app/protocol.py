"""What the ServerApp and the ClientApp agree on: run and node config, and state dicts as ``ArrayRecord``.

A state dict crosses the wire as an ``ArrayRecord`` built from the tensors (``ArrayRecord(state_dict)``:
one ``Array`` per key, in key order, each the ``numpy.save`` bytes of ``tensor.numpy()``) and comes back
with ``ArrayRecord.to_torch_state_dict()`` (``numpy.load(..., allow_pickle=False)``): same keys, shapes,
dtypes and bits — integer buffers included. No Python object is ever pickled.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from flwr.app import ArrayRecord

from trainsys._validation import describe
from trainsys.distributed.flower_app import (NODE_NUM_SUPERNODES, NODE_SUPERNODE_ID, RUN_CONNECT_TIMEOUT,
                                             RUN_FEDAVG_CONFIG, RUN_NUM_SUPERNODES, RUN_RECORD_PATH,
                                             RUN_ROUND_TIMEOUT)
from trainsys.fedavg.server import FedAvgConfig, validate_fedavg_config
from trainsys.fedavg.state import require_state_dict

REQUEST_ARRAYS = "arrays"  # train message: the global state w_t
REQUEST_CONFIG = "config"  # train message: "round", "client-ids", "client-seeds"
REPLY_REPORT = "report"  # train reply: "client-ids", "num-samples", "losses", "num-steps"
REPLY_NODE = "node"  # query reply: "supernode-id", "num-supernodes"


def client_key(client_id: int) -> str:
    """The reply's ``ArrayRecord`` name for client ``k``: ``"client-<k>"``."""
    return f"client-{int(client_id)}"


@dataclass(frozen=True)
class FlowerRunSettings:
    """The run config, read and checked: the FedAvg config plus what the deployment needs."""

    config: FedAvgConfig
    num_supernodes: int
    record_path: str
    round_timeout: float
    connect_timeout: float


def _run_value(run_config: Mapping[str, object], key: str) -> object:
    if key not in run_config:
        raise ValueError(f"run config must set {key!r}; it has {sorted(run_config)}")
    return run_config[key]


def _positive_seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < math.inf:
        raise ValueError(f"run config {key!r} must be a finite number of seconds > 0, got {describe(value)}")
    return float(value)


def read_fedavg_config(run_config: Mapping[str, object]) -> FedAvgConfig:
    """The :class:`FedAvgConfig` in ``run_config["fedavg-config"]`` (a JSON object of its fields), validated."""
    text = _run_value(run_config, RUN_FEDAVG_CONFIG)
    if not isinstance(text, str):
        raise TypeError(f"run config {RUN_FEDAVG_CONFIG!r} must be a JSON string, got {describe(text)}")
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"run config {RUN_FEDAVG_CONFIG!r} must be valid JSON: {error}") from None
    if not isinstance(fields, dict):
        raise TypeError(f"run config {RUN_FEDAVG_CONFIG!r} must be a JSON object, got {describe(fields)}")
    return validate_fedavg_config(fields)


def read_run_settings(run_config: Mapping[str, object]) -> FlowerRunSettings:
    """All of the ServerApp's run config; ``ValueError``/``TypeError`` naming the key that is missing or bad."""
    num_supernodes = _run_value(run_config, RUN_NUM_SUPERNODES)
    if isinstance(num_supernodes, bool) or not isinstance(num_supernodes, int) or num_supernodes < 1:
        raise ValueError(f"run config {RUN_NUM_SUPERNODES!r} must be an integer >= 1, got {describe(num_supernodes)}")
    record_path = _run_value(run_config, RUN_RECORD_PATH)
    if not isinstance(record_path, str) or not record_path:
        raise ValueError(f"run config {RUN_RECORD_PATH!r} must be a non-empty path, got {describe(record_path)}")
    return FlowerRunSettings(
        config=read_fedavg_config(run_config), num_supernodes=num_supernodes, record_path=record_path,
        round_timeout=_positive_seconds(RUN_ROUND_TIMEOUT, _run_value(run_config, RUN_ROUND_TIMEOUT)),
        connect_timeout=_positive_seconds(RUN_CONNECT_TIMEOUT, _run_value(run_config, RUN_CONNECT_TIMEOUT)))


def read_node_config(node_config: Mapping[str, object]) -> tuple[int, int]:
    """``(supernode_id, num_supernodes)`` from a SuperNode's ``--node-config``; ``0 <= i < S`` required."""
    values = []
    for key in (NODE_SUPERNODE_ID, NODE_NUM_SUPERNODES):
        value = node_config.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"node config must set {key!r} to an integer (flower-supernode --node-config "
                             f"'{NODE_SUPERNODE_ID}=i {NODE_NUM_SUPERNODES}=S'), got {describe(value)}")
        values.append(value)
    supernode_id, num_supernodes = values
    if num_supernodes < 1 or not 0 <= supernode_id < num_supernodes:
        raise ValueError(f"node config needs 0 <= {NODE_SUPERNODE_ID} < {NODE_NUM_SUPERNODES}, got "
                         f"{supernode_id} and {num_supernodes}")
    return supernode_id, num_supernodes


def state_to_arrays(state: Mapping[str, torch.Tensor]) -> ArrayRecord:
    """A state dict as an ``ArrayRecord`` (one ``Array`` per key, key order kept); ``state`` is not mutated."""
    state = require_state_dict("state", state)
    return ArrayRecord({key: tensor.detach() for key, tensor in state.items()})


def arrays_to_state(record: object, name: str = "arrays") -> dict[str, torch.Tensor]:
    """The state dict an ``ArrayRecord`` carries: tensors with the sent keys, shapes, dtypes and values."""
    if not isinstance(record, ArrayRecord):
        raise TypeError(f"{name} must be an ArrayRecord, got {describe(record)}")
    return dict(record.to_torch_state_dict())
