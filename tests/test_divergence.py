"""Module 1, Part 5 extension: replica fingerprints catch injected faults within K steps.

Oracles: ``hashlib.blake2b`` for the fingerprint's encoding, the package's ``data_parallel_train_step``
for the fault-free run (bit for bit), ``ring_bytes_per_worker`` for the gradient bytes.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from trainsys.memtrain import data_parallel as dp
from trainsys.memtrain import divergence as dv
from trainsys.memtrain import mlp
from trainsys.memtrain import ring_allreduce as ring

N, D_IN, D_HIDDEN, D_OUT, SEED, LR, T = 4, 8, 64, 4, 3, 0.05, 12
PSI = D_IN * D_HIDDEN + D_HIDDEN + D_HIDDEN * D_OUT + D_OUT  # 836 float32 parameters


def _batches(steps: int = T, n: int = 30):
    rng = np.random.default_rng(11)
    return [mlp.make_synthetic_regression_batch(n, D_IN, D_OUT, rng) for _ in range(steps)]  # 30 rows: shards 8, 8, 7, 7


def _run(K: int, **kwargs):
    return dv.simulate_replicated_training(_batches(), N, D_HIDDEN, SEED, LR, K, **kwargs)


def _check_steps(K: int, steps: int = T) -> list[int]:
    return [t for t in range(steps) if (t + 1) % K == 0 or t == steps - 1]


def _flip(params, key, index, bit):
    out = {k: v.copy() for k, v in params.items()}
    out[key].reshape(-1).view(np.uint32)[index] ^= np.uint32(1 << bit)
    return out


# --- the fingerprint ---------------------------------------------------------------------------------
def test_fingerprint_is_blake2b_of_headers_and_bytes_and_sees_order_keys_dtypes_shapes() -> None:
    params = mlp.init_mlp_params(D_IN, D_HIDDEN, D_OUT, np.random.default_rng(0))
    h = hashlib.blake2b(digest_size=8)
    for key, value in params.items():
        header = repr((key, value.dtype.str, value.shape)).encode()
        h.update(len(header).to_bytes(8, "little") + header + value.tobytes(order="C"))
    fp = dv.parameter_fingerprint(params)
    assert fp == h.digest() and len(fp) == dv.FINGERPRINT_BYTES == 8
    assert dv.parameter_fingerprint({k: v.copy() for k, v in params.items()}) == fp  # values, not identity
    variants = [
        {k: params[k] for k in reversed(mlp.PARAM_KEYS)},  # same arrays, other order
        {**params, "W1": params["W1"].reshape(D_HIDDEN, D_IN)},  # same bytes, other shape
        {**params, "W1": params["W1"].view(">f4")},  # same bytes, other byte order
        {("w1" if k == "W1" else k): v for k, v in params.items()},  # other key
        {**params, "W1": params["W1"].astype(np.float64)},  # same values, other dtype
    ]
    assert len({dv.parameter_fingerprint(v) for v in variants} | {fp}) == len(variants) + 1
    transposed = {"W": params["W1"].T}  # a non-contiguous view hashes as its C-order copy
    assert dv.parameter_fingerprint(transposed) == dv.parameter_fingerprint({"W": params["W1"].T.copy()})


def test_float_checksums_miss_a_swap_and_a_sub_rounding_flip_that_the_fingerprint_catches() -> None:
    params = mlp.init_mlp_params(D_IN, D_HIDDEN, D_OUT, np.random.default_rng(0))
    flat = lambda p: np.concatenate([v.reshape(-1) for v in p.values()])  # noqa: E731
    # A swap of two different entries: even the exactly rounded sum is blind (it is order-independent).
    swapped = {k: v.copy() for k, v in params.items()}
    swapped["W1"][0, 0], swapped["W1"][3, 7] = params["W1"][3, 7], params["W1"][0, 0]
    assert swapped["W1"][0, 0] != params["W1"][0, 0]
    assert math.fsum(flat(swapped)) == math.fsum(flat(params))
    assert dv.parameter_fingerprint(swapped) != dv.parameter_fingerprint(params)
    # The lowest mantissa bit of the smallest nonzero entry: the float32 sum rounds the change away.
    values = flat(params)
    index = int(np.argmin(np.where(values != 0, np.abs(values), np.inf)))
    assert index < params["W1"].size
    flipped = _flip(params, "W1", index, 0)
    assert flat(flipped)[index] != values[index]
    assert np.sum(flat(flipped)) == np.sum(values)  # float32 checksum: same
    assert dv.parameter_fingerprint(flipped) != dv.parameter_fingerprint(params)
    # The same effect, provable by hand: 2**-30 is below half an ulp of 1 (2**-24) in float32.
    a = {"w": np.array([1.0, 2.0**-30], np.float32)}
    b = _flip(a, "w", 1, 0)
    assert np.float32(1.0) + a["w"][1] == np.float32(1.0) + b["w"][1] == np.float32(1.0)
    assert dv.parameter_fingerprint(a) != dv.parameter_fingerprint(b)


def test_ring_all_gather_gives_every_worker_every_fingerprint_for_8_bytes_times_n_minus_1() -> None:
    for n in range(1, 7):
        fps = [bytes([k]) * 8 for k in range(n)]
        views, sent = dv.ring_all_gather_fingerprints(fps)
        assert views == [fps] * n
        assert sent == [8 * (n - 1)] * n


def test_minority_is_who_differs_from_the_majority_and_a_tie_blames_everyone() -> None:
    a, b, c = b"a" * 8, b"b" * 8, b"c" * 8
    assert dv.minority_workers([a, a, a, a]) == []
    assert dv.minority_workers([a, b, a, a]) == [1]
    assert dv.minority_workers([a, b, c, a, a]) == [1, 2]
    assert dv.minority_workers([a, b]) == [0, 1]
    assert dv.minority_workers([a, a, b, b]) == [0, 1, 2, 3]


# --- the simulation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("K", [1, 5])
def test_fault_free_replicas_are_bit_identical_to_data_parallel_train_step(K: int) -> None:
    record = _run(K)
    params = mlp.init_mlp_params(D_IN, D_HIDDEN, D_OUT, np.random.default_rng(SEED))
    losses = []
    for X, Y in _batches():
        params, loss, _ = dp.data_parallel_train_step(params, dp.shard_dataset_across_workers(X, Y, N), LR)
        losses.append(loss)
    assert record["detections"] == []
    assert record["losses"] == losses  # exact
    for replica in record["params"]:
        for key in mlp.PARAM_KEYS:
            assert replica[key].dtype == params[key].dtype and np.array_equal(replica[key], params[key])
    fp = dv.parameter_fingerprint(params)
    assert [c["step"] for c in record["checks"]] == _check_steps(K)
    assert record["checks"][-1]["fingerprints"] == [fp] * N
    assert losses[-1] < losses[0]  # it trains
    # Bytes: ring all-reduce of Ψ float32 per step vs 8 bytes × (N − 1) per check.
    assert record["gradient_bytes_per_worker"] == [T * b for b in ring.ring_bytes_per_worker(PSI, N, 4)]
    assert record["gradient_bytes_per_worker"] == [T * 4 * (2 * PSI - 209 - 209)] * N  # 836 = 4 × 209
    assert record["fingerprint_bytes_per_worker"] == [len(_check_steps(K)) * 8 * (N - 1)] * N
    per_check, per_step = 8 * (N - 1), record["gradient_bytes_per_worker"][0] // T
    assert (per_check, per_step) == (24, 5016)
    assert per_check / per_step == pytest.approx(4 * N / (PSI * 4)) and per_check / per_step < 0.005


FAULTS = {
    "skip_update": ({"worker": 2, "step": 6}, 6, 2),
    "flip_bit": ({"worker": 1, "step": 7, "key": "W2", "index": 5, "bit": 20}, 7, 1),
    "seed_mismatch": ({"worker": 3}, 0, 3),
}


@pytest.mark.parametrize("K", [1, 5])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_is_reported_at_the_first_check_at_or_after_it_with_the_right_worker(fault: str, K: int) -> None:
    options, t, worker = FAULTS[fault]
    clean = _run(K)
    record = _run(K, **{fault: options})
    detected_at = min(c for c in _check_steps(K) if c >= t)
    window_start = max([c + 1 for c in _check_steps(K) if c < t], default=0)
    assert record["detections"] == [{"step": window_start, "detected_at": detected_at, "workers": [worker]}]
    assert window_start <= t <= detected_at <= t + K - 1
    assert len(record["losses"]) == detected_at + 1  # "stop"
    assert [c["step"] for c in record["checks"]] == [c for c in _check_steps(K) if c <= detected_at]
    if fault == "seed_mismatch":
        assert record["losses"][0] != clean["losses"][0]
    else:  # identical up to the fault
        assert record["losses"][:t + 1] == clean["losses"][:t + 1]
    fps = record["checks"][-1]["fingerprints"]
    assert fps[worker] != fps[(worker + 1) % N] and len(set(fps)) == 2
    # "record": every later check fails too (the replica never rejoins), same window, same worker.
    kept = _run(K, on_mismatch="record", **{fault: options})
    later = [c for c in _check_steps(K) if c >= t]
    assert kept["detections"] == [{"step": window_start, "detected_at": c, "workers": [worker]} for c in later]
    assert len(kept["losses"]) == T


def test_skip_update_leaves_the_worker_exactly_one_step_behind_at_the_check() -> None:
    record = _run(1, skip_update={"worker": 0, "step": 4})
    params = mlp.init_mlp_params(D_IN, D_HIDDEN, D_OUT, np.random.default_rng(SEED))
    for X, Y in _batches()[:4]:
        params, _, _ = dp.data_parallel_train_step(params, dp.shard_dataset_across_workers(X, Y, N), LR)
    assert record["detections"][0]["workers"] == [0]
    assert all(np.array_equal(record["params"][0][k], params[k]) for k in mlp.PARAM_KEYS)  # θ_4, not θ_5


def test_a_low_mantissa_flip_below_1e_6_in_the_loss_is_still_caught() -> None:
    clean = _run(5)
    flip = {"worker": 2, "step": 3, "key": "W1", "index": 0, "bit": 0}
    record = _run(5, flip_bit=flip, on_mismatch="record")
    diff = np.abs(np.array(record["losses"]) - np.array(clean["losses"]))
    assert diff.max() < 1e-6
    assert all(np.abs(record["params"][2][k] - clean["params"][2][k]).max() < 1e-6 for k in mlp.PARAM_KEYS)
    assert record["detections"][0] == {"step": 0, "detected_at": 4, "workers": [2]}


def test_two_replicas_cannot_say_which_one_is_wrong() -> None:
    record = dv.simulate_replicated_training(_batches(4), 2, D_HIDDEN, SEED, LR, 1, skip_update={"worker": 1, "step": 2})
    assert record["detections"] == [{"step": 2, "detected_at": 2, "workers": [0, 1]}]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"check_every": 0}, ValueError, "check_every must be >= 1"),
        ({"check_every": 2.0}, TypeError, "check_every must be an integer"),
        ({"on_mismatch": "halt"}, ValueError, "on_mismatch must be one of"),
        ({"skip_update": {"worker": 4, "step": 0}}, ValueError, r"skip_update\['worker'\] must be <= 3"),
        ({"skip_update": {"worker": 0, "step": T}}, ValueError, r"skip_update\['step'\] must be <= 11"),
        ({"skip_update": {"worker": 0}}, ValueError, "skip_update must have exactly the keys"),
        ({"skip_update": [0, 1]}, TypeError, "skip_update must be None or a dict"),
        ({"flip_bit": {"worker": 0, "step": 0, "key": "W3", "index": 0, "bit": 0}}, ValueError, r"flip_bit\['key'\]"),
        ({"flip_bit": {"worker": 0, "step": 0, "key": "b2", "index": 4, "bit": 0}}, ValueError,
         r"flip_bit\['index'\] must be <= 3"),
        ({"flip_bit": {"worker": 0, "step": 0, "key": "W1", "index": 0, "bit": 32}}, ValueError,
         r"flip_bit\['bit'\] must be <= 31"),
        ({"seed_mismatch": {"worker": 0, "seed": 5}}, ValueError, "seed_mismatch must have exactly the keys"),
        ({"seed_mismatch": {"worker": -1}}, ValueError, r"seed_mismatch\['worker'\] must be >= 0"),
    ],
)
def test_bad_options_are_refused_naming_the_argument(kwargs, error, match) -> None:
    args = {"batches": _batches(), "num_workers": N, "d_hidden": D_HIDDEN, "seed": SEED, "lr": LR, "check_every": 1}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        dv.simulate_replicated_training(**args)


def test_bad_batches_and_fingerprint_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match=r"batches\[1\] must hold at least num_workers = 4 examples"):
        dv.simulate_replicated_training(_batches(1) + _batches(1, n=3), N, D_HIDDEN, SEED, LR, 1)
    with pytest.raises(ValueError, match="batches must be a non-empty list"):
        dv.simulate_replicated_training([], N, D_HIDDEN, SEED, LR, 1)
    with pytest.raises(ValueError, match="params must hold at least one array"):
        dv.parameter_fingerprint({})
    with pytest.raises(TypeError, match=r"params\['W'\] must have a floating-point dtype"):
        dv.parameter_fingerprint({"W": np.zeros(3, np.int32)})
    with pytest.raises(TypeError, match="fingerprints\\[1\\] must be bytes"):
        dv.ring_all_gather_fingerprints([b"x" * 8, "y"])
