r"""Module 1, Part 5 (extension) — catching silent divergence between data-parallel replicas.

Data parallelism (:mod:`~trainsys.memtrain.data_parallel`) keeps ``N`` copies of the parameters and
relies on every copy taking the *same* step from the *same* all-reduced gradient, so that the copies
stay bit-identical without ever being compared. Nothing enforces it: a worker that skips an update, a
bit flipped in memory or by a faulty core ("silent data corruption": Hochschild et al. 2021, "Cores
that don't count"; Dixit et al. 2021, "Silent Data Corruptions at Scale"), or a replica initialised
from another seed all leave training running, with a loss that may look normal. The fault surfaces,
if ever, as a bad final model.

**Fingerprint.** :func:`parameter_fingerprint` hashes a parameter dict's exact bytes — for every entry,
in the dict's order, its key, dtype (with byte order), shape and raw C-order values — with BLAKE2b
(Aumasson et al. 2013; RFC 7693, Saarinen & Aumasson 2015) at a digest size of
:data:`FINGERPRINT_BYTES` = 8 (Python's ``hashlib.blake2b(digest_size=8)``). Cost: one read of the
:math:`\Psi b` parameter bytes, no extra memory. Any bit difference changes the input, and two
different inputs share a 64-bit digest with probability about :math:`2^{-64}`. A floating-point
checksum such as :math:`\sum_i \theta_i` is cheaper to reason about but blind by construction: it is
invariant under any permutation of the entries, and a change smaller than half an ulp of the running
sum is rounded away.

**Protocol** (:func:`simulate_replicated_training`). Every ``K = check_every`` steps (after steps
``K−1, 2K−1, …``, and after the last step) the ``N`` workers **all-gather** their fingerprints around a
ring (Patarasuk & Yuan 2009): in ``N − 1`` rounds worker ``k`` passes to ``(k + 1) mod N`` the
fingerprint it received in the previous round (its own in the first), so each worker sends and receives
exactly :math:`8(N-1)` bytes per check. Every worker then holds the same ``N`` fingerprints and reaches
the same verdict: the **majority** fingerprint is the one held by more replicas than any other, and
the replicas that differ from it are reported. A fault during step ``t`` is therefore reported at the
first check at or after ``t``, i.e. within ``K`` steps. Per worker and per step the gradient all-reduce
sends :math:`\approx 2\frac{N-1}{N}\Psi b` bytes, so the fingerprints add a fraction

.. math::

    \frac{8(N-1)}{K \cdot 2\frac{N-1}{N}\Psi b} = \frac{4N}{K\,\Psi\,b}

of the gradient traffic (exact when ``N`` divides :math:`\Psi`): :math:`2\cdot 10^{-6}` for
:math:`N = 1024` workers, :math:`\Psi = 10^9` bf16 parameters and ``K = 1`` (0.48 % for this module's
836-parameter float32 MLP with ``N = 4``). What it does not catch: a fault that hits every replica the
same way (a wrong all-reduce result is identical everywhere), and a divergence that heals before the
next check.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from trainsys._validation import describe, require_float_array, require_float_tree, require_int, require_real
from trainsys.memtrain.data_parallel import (
    compute_local_gradients,
    flatten_params,
    shard_dataset_across_workers,
    unflatten_params,
)
from trainsys.memtrain.mlp import PARAM_KEYS, Params, init_mlp_params, sgd_step
from trainsys.memtrain.ring_allreduce import bytes_sent_per_worker, ring_all_reduce_mean

FINGERPRINT_BYTES: int = 8
"""Digest size of :func:`parameter_fingerprint`, in bytes (BLAKE2b allows 1 to 64)."""

ON_MISMATCH: tuple[str, str] = ("stop", "record")
"""What :func:`simulate_replicated_training` does after a failed check: end the run, or log and go on."""

DETECTION_KEYS: tuple[str, ...] = ("step", "detected_at", "workers")
"""The keys of one detection record."""


def parameter_fingerprint(params: Mapping[str, np.ndarray]) -> bytes:
    """An 8-byte BLAKE2b digest of a parameter dict's exact contents, in the dict's key order.

    For each ``(key, array)`` the hash absorbs a length-prefixed header ``repr((key, dtype.str, shape))``
    and then the array's raw bytes in C order (a contiguous copy is made only for a non-contiguous
    array). The header makes the digest depend on the key order, the keys, the dtypes (byte order
    included) and the shapes, not only on the concatenated values; the values' length follows from the
    header, so the encoding is unambiguous. Returns :data:`FINGERPRINT_BYTES` bytes. ``params`` must be a
    non-empty dict with ``str`` keys and floating-point arrays; it is not modified.
    """
    params = require_float_tree("params", params)
    if not params:
        raise ValueError("params must hold at least one array, got an empty dict")
    h = hashlib.blake2b(digest_size=FINGERPRINT_BYTES)
    for key, value in params.items():
        if not isinstance(key, str):
            raise TypeError(f"params keys must be str, got {describe(key)}")
        header = repr((key, value.dtype.str, value.shape)).encode()
        h.update(len(header).to_bytes(8, "little"))
        h.update(header)
        h.update(np.ascontiguousarray(value).data)  # Ψ_key · b bytes, read once
    return h.digest()


def ring_all_gather_fingerprints(fingerprints: Sequence[bytes]) -> tuple[list[list[bytes]], list[int]]:
    """All-gather one fingerprint per worker around a ring; return every worker's view and bytes sent.

    In round ``s = 0 … N−2`` worker ``k`` sends worker ``(k + 1) mod N`` the fingerprint of worker
    ``(k − s) mod N`` (its own at ``s = 0``, then the one it just received). Returns ``(views, sent)``:
    ``views[k]`` is worker ``k``'s list of all ``N`` fingerprints indexed by their origin, ``sent[k]`` the
    bytes worker ``k`` put on the ring, :math:`8(N-1)` (it also receives :math:`8(N-1)`).
    """
    if not isinstance(fingerprints, (list, tuple)) or not fingerprints:
        raise ValueError(f"fingerprints must be a non-empty list of bytes (one per worker), got {describe(fingerprints)}")
    for k, fp in enumerate(fingerprints):
        if not isinstance(fp, bytes):
            raise TypeError(f"fingerprints[{k}] must be bytes, got {describe(fp)}")
    N = len(fingerprints)
    views: list[list[bytes | None]] = [[None] * N for _ in range(N)]
    for k in range(N):
        views[k][k] = fingerprints[k]
    sent = [0] * N
    for s in range(N - 1):
        messages = [(k, (k - s) % N, views[k][(k - s) % N]) for k in range(N)]  # all sends of one round at once
        for sender, origin, payload in messages:
            views[(sender + 1) % N][origin] = payload
            sent[sender] += len(payload)
    return views, sent  # type: ignore[return-value]


def minority_workers(fingerprints: Sequence[bytes]) -> list[int]:
    """The replicas whose fingerprint differs from the majority's, ascending; ``[]`` when all agree.

    The majority fingerprint is the one held by strictly more replicas than any other. When two or more
    fingerprints tie for the most holders (e.g. ``N = 2`` and the two differ) no replica can be singled
    out, and every worker is returned.
    """
    counts = Counter(fingerprints).most_common()
    if len(counts) == 1:
        return []
    if counts[0][1] == counts[1][1]:
        return list(range(len(fingerprints)))
    return [k for k, fp in enumerate(fingerprints) if fp != counts[0][0]]


def _validate_fault(name: str, fault: object, keys: tuple[str, ...]) -> dict | None:
    if fault is None:
        return None
    if not isinstance(fault, Mapping):
        raise TypeError(f"{name} must be None or a dict with keys {list(keys)}, got {describe(fault)}")
    if set(fault) != set(keys):
        raise ValueError(f"{name} must have exactly the keys {sorted(keys)}, got {sorted(fault)}")
    return dict(fault)


def _validate_batches(batches: object, num_workers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    if not isinstance(batches, (list, tuple)) or not batches:
        raise ValueError(f"batches must be a non-empty list of (X, Y) pairs, one per step, got {describe(batches)}")
    out = []
    for t, pair in enumerate(batches):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"batches[{t}] must be a pair (X, Y) of arrays, got {describe(pair)}")
        X = require_float_array(f"batches[{t}][0] (X)", pair[0], ndim=2)
        Y = require_float_array(f"batches[{t}][1] (Y)", pair[1], ndim=2)
        first_X, first_Y = out[0] if out else (X, Y)
        if X.shape[1:] != first_X.shape[1:] or Y.shape[1:] != first_Y.shape[1:] or X.shape[0] != Y.shape[0]:
            raise ValueError(f"batches[{t}] must be (X: (n, {first_X.shape[1]}), Y: (n, {first_Y.shape[1]})), "
                             f"got X {X.shape} and Y {Y.shape}")
        if X.shape[0] < num_workers:
            raise ValueError(f"batches[{t}] must hold at least num_workers = {num_workers} examples, got {X.shape[0]}")
        out.append((X, Y))
    return out


def simulate_replicated_training(
    batches: Sequence[tuple[np.ndarray, np.ndarray]],
    num_workers: int,
    d_hidden: int,
    seed: int,
    lr: float,
    check_every: int,
    *,
    skip_update: Mapping | None = None,
    flip_bit: Mapping | None = None,
    seed_mismatch: Mapping | None = None,
    on_mismatch: str = "stop",
) -> dict:
    r"""Train ``N = num_workers`` explicit MLP replicas with data-parallel SGD, checking them every ``K`` steps.

    Setup: every worker ``k`` draws its own copy of the parameters,
    ``init_mlp_params(d_in, d_hidden, d_out, np.random.default_rng(seed))`` (``d_in``, ``d_out`` from the
    batches). Step ``t = 0 … T−1`` (``T = len(batches)``, ``batches[t] = (X_t, Y_t)`` float arrays with at
    least ``N`` rows) is exactly :func:`~trainsys.memtrain.data_parallel.data_parallel_train_step`, run by
    each worker on its **own** copy: shard ``k`` of :func:`shard_dataset_across_workers`, the summed local
    gradient from the worker's own parameters, one ring all-reduce mean of the flat gradients, the factor
    ``N/n``, and :func:`~trainsys.memtrain.mlp.sgd_step` with ``lr``. Checks: after every step ``t`` with
    ``(t + 1) % check_every == 0`` and after the last step (module docstring).

    Faults (each ``None`` or a dict with exactly these keys; ``k`` a worker, ``t`` a step):

    - ``skip_update={"worker": k, "step": t}``: worker ``k`` takes part in step ``t``'s all-reduce but
      keeps its parameters;
    - ``flip_bit={"worker": k, "step": t, "key": key, "index": i, "bit": j}``: after step ``t``, bit ``j``
      (0 = least significant mantissa bit) of element ``i`` (C-order flat index) of worker ``k``'s
      ``params[key]`` is inverted;
    - ``seed_mismatch={"worker": k}``: worker ``k`` initialises from ``seed + 1`` (a fault of step 0).

    ``on_mismatch``: ``"stop"`` ends the run after the first failed check; ``"record"`` logs every failed
    check and goes on. Returns the run record, a dict:

    - ``"losses"``: per step run, the union batch's mean loss before the step as worker 0 logs it
      (:math:`\sum_k \text{loss\_sum}_k / n`, each worker's loss from its own replica; the scalar exchange
      is not counted, as in ``data_parallel_train_step``);
    - ``"checks"``: one ``{"step": t, "fingerprints": [N bytes]}`` per check, in order;
    - ``"detections"``: one dict per failed check with :data:`DETECTION_KEYS`: ``"detected_at"``, the
      step after which the check ran; ``"step"``, the first step after the last check at which all
      replicas agreed (0 if none) — the divergence arose during steps ``step … detected_at``;
      ``"workers"``, :func:`minority_workers` of the gathered fingerprints;
    - ``"fingerprint_bytes_per_worker"`` and ``"gradient_bytes_per_worker"``: bytes each worker sent for
      the fingerprint all-gathers and for the gradient all-reduces;
    - ``"params"``: the ``N`` replicas' final parameters.
    """
    N = require_int("num_workers", num_workers, minimum=1)
    batches = _validate_batches(batches, N)
    d_hidden = require_int("d_hidden", d_hidden, minimum=1)
    seed = require_int("seed", seed, minimum=0)
    lr = require_real("lr", lr, strictly_positive=True)
    K = require_int("check_every", check_every, minimum=1)
    if on_mismatch not in ON_MISMATCH:
        raise ValueError(f"on_mismatch must be one of {list(ON_MISMATCH)}, got {on_mismatch!r}")
    T = len(batches)
    skip = _validate_fault("skip_update", skip_update, ("worker", "step"))
    flip = _validate_fault("flip_bit", flip_bit, ("worker", "step", "key", "index", "bit"))
    mismatch = _validate_fault("seed_mismatch", seed_mismatch, ("worker",))
    for name, fault in (("skip_update", skip), ("flip_bit", flip), ("seed_mismatch", mismatch)):
        if fault is not None:
            fault["worker"] = require_int(f"{name}['worker']", fault["worker"], minimum=0, maximum=N - 1)
            if "step" in fault:
                fault["step"] = require_int(f"{name}['step']", fault["step"], minimum=0, maximum=T - 1)

    d_in, d_out = batches[0][0].shape[1], batches[0][1].shape[1]
    replicas = []
    for k in range(N):
        s = seed + 1 if mismatch is not None and mismatch["worker"] == k else seed
        replicas.append(init_mlp_params(d_in, d_hidden, d_out, np.random.default_rng(s)))
    if flip is not None:
        if flip["key"] not in PARAM_KEYS:
            raise ValueError(f"flip_bit['key'] must be one of {list(PARAM_KEYS)}, got {flip['key']!r}")
        target = replicas[0][flip["key"]]
        flip["index"] = require_int("flip_bit['index']", flip["index"], minimum=0, maximum=target.size - 1)
        flip["bit"] = require_int("flip_bit['bit']", flip["bit"], minimum=0, maximum=8 * target.itemsize - 1)

    record: dict = {"losses": [], "checks": [], "detections": [],
                    "fingerprint_bytes_per_worker": [0] * N, "gradient_bytes_per_worker": [0] * N}
    last_agreed = -1  # the last step after which a check found every replica identical
    for t, (X, Y) in enumerate(batches):
        shards = shard_dataset_across_workers(X, Y, N)
        local = [compute_local_gradients(replicas[k], shards[k]) for k in range(N)]  # (S_k, loss_sum_k, n_k)
        n = sum(n_k for _, _, n_k in local)
        means, log = ring_all_reduce_mean([flatten_params(g) for g, _, _ in local])  # N × (Ψ,)
        for k, sent in enumerate(bytes_sent_per_worker(log, N)):
            record["gradient_bytes_per_worker"][k] += sent
        record["losses"].append(sum(loss_sum for _, loss_sum, _ in local) / n)
        for k in range(N):
            if skip is not None and (skip["worker"], skip["step"]) == (k, t):
                continue  # the fault: worker k keeps θ_t
            grad = unflatten_params(means[k] * means[k].dtype.type(N / n), replicas[k])
            replicas[k] = sgd_step(replicas[k], grad, lr)
        if flip is not None and flip["step"] == t:
            k = flip["worker"]
            replicas[k] = {key: value.copy() for key, value in replicas[k].items()}
            array = replicas[k][flip["key"]]
            bits = array.reshape(-1).view(np.dtype(f"u{array.itemsize}"))  # same memory, as unsigned ints
            bits[flip["index"]] ^= bits.dtype.type(1) << bits.dtype.type(flip["bit"])
        if (t + 1) % K != 0 and t != T - 1:
            continue
        views, sent = ring_all_gather_fingerprints([parameter_fingerprint(p) for p in replicas])
        for k in range(N):
            record["fingerprint_bytes_per_worker"][k] += sent[k]
        fingerprints = views[0]  # every worker holds the same list and reaches the same verdict
        record["checks"].append({"step": t, "fingerprints": list(fingerprints)})
        workers = minority_workers(fingerprints)
        if not workers:
            last_agreed = t
            continue
        record["detections"].append({"step": last_agreed + 1, "detected_at": t, "workers": workers})
        if on_mismatch == "stop":
            break
    record["params"] = replicas
    return record
