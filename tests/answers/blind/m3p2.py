"""Red team, Module 3 Part 2 (client data partitioning): wrong answers and correct alternatives written from the
release notebooks only."""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from trainsys.fedavg.data import LabelledDataset


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_dataset(dataset):
    if not isinstance(dataset, LabelledDataset):
        raise TypeError(f"dataset must be a LabelledDataset, got {type(dataset).__name__}")


def _check_clients(num_clients, n, *, allow_bool=False):
    ok = isinstance(num_clients, (int, np.integer)) if allow_bool else _is_int(num_clients)
    if not ok:
        raise TypeError(f"num_clients must be an integer, got {type(num_clients).__name__}")
    if not 1 <= num_clients <= n:
        raise ValueError(f"num_clients must be in [1, {n}], got {num_clients}")
    return int(num_clients)


def _check_seed(seed):
    if not _is_int(seed):
        raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
    if not 0 <= seed <= 2**63 - 1:
        raise ValueError(f"seed must be in [0, 2**63 - 1], got {seed}")
    return int(seed)


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 4: partition_data_iid
# ----------------------------------------------------------------------------------------------------------------------

def _iid(dataset, num_clients, seed, *, flaw=None):
    if flaw != "no_dataset_check":
        _check_dataset(dataset)
    n = len(dataset)
    K = _check_clients(num_clients, n, allow_bool=flaw == "bool_clients")
    seed = _check_seed(seed)
    if flaw == "global_rng":
        torch.manual_seed(seed)
        perm = torch.randperm(n)
    elif flaw == "numpy_perm":
        perm = torch.from_numpy(np.random.default_rng(seed).permutation(n)).to(torch.int64)
    else:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    q, r = divmod(n, K)
    if flaw == "remainder_last":
        sizes = [q] * (K - 1) + [n - q * (K - 1)]
    else:
        sizes = [q + 1] * r + [q] * (K - r)
    if flaw == "round_robin":
        pieces = [perm[k::K] for k in range(K)]
    else:
        pieces = list(torch.split(perm, sizes))
    out = [torch.sort(p).values for p in pieces]
    return tuple(out) if flaw == "tuple" else out


def _iid_remainder_last(dataset, num_clients, seed):
    return _iid(dataset, num_clients, seed, flaw="remainder_last")


def _iid_global_rng(dataset, num_clients, seed):
    return _iid(dataset, num_clients, seed, flaw="global_rng")


def _iid_numpy_perm(dataset, num_clients, seed):
    return _iid(dataset, num_clients, seed, flaw="numpy_perm")


def _iid_round_robin(dataset, num_clients, seed):
    return _iid(dataset, num_clients, seed, flaw="round_robin")


def _iid_bool_clients(dataset, num_clients, seed):
    return _iid(dataset, num_clients, seed, flaw="bool_clients")


def _iid_no_dataset_check(dataset, num_clients, seed):
    return _iid(dataset, num_clients, seed, flaw="no_dataset_check")


def _iid_tuple(dataset, num_clients, seed):
    return _iid(dataset, num_clients, seed, flaw="tuple")


def _iid_unsorted(dataset, num_clients, seed):
    _check_dataset(dataset)
    n = len(dataset)
    K = _check_clients(num_clients, n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(_check_seed(seed)))
    q, r = divmod(n, K)
    return list(torch.split(perm, [q + 1] * r + [q] * (K - r)))


def _iid_alt_tensor_split(dataset, num_clients, seed):
    """torch.tensor_split(perm, K) already gives the first n mod K pieces one extra element."""
    if not isinstance(dataset, LabelledDataset):
        raise TypeError("dataset: expected a LabelledDataset")
    if isinstance(num_clients, bool) or not isinstance(num_clients, numbers.Integral):
        raise TypeError(f"num_clients: expected an int, got {num_clients!r}")
    if num_clients < 1 or num_clients > len(dataset):
        raise ValueError(f"num_clients: {num_clients} is outside [1, {len(dataset)}]")
    _check_seed(seed)
    g = torch.Generator()
    g.manual_seed(int(seed))
    perm = torch.randperm(len(dataset), generator=g)
    return [piece.sort().values.clone() for piece in torch.tensor_split(perm, int(num_clients))]


def _iid_alt_offsets(dataset, num_clients, seed):
    """An explicit loop over cumulative offsets."""
    _check_dataset(dataset)
    n = len(dataset)
    K = _check_clients(num_clients, n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(_check_seed(seed)))
    parts, start = [], 0
    for k in range(K):
        size = n // K + (1 if k < n % K else 0)
        parts.append(torch.sort(perm[start:start + size]).values)
        start += size
    return parts


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 5: partition_data_non_iid
# ----------------------------------------------------------------------------------------------------------------------

def _check_alpha(alpha, *, allow_bool=False, require_finite=True):
    if (not allow_bool and isinstance(alpha, (bool, np.bool_))) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number or None, got {type(alpha).__name__}")
    a = float(alpha)
    if math.isnan(a) or a <= 0 or (require_finite and math.isinf(a)):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
    return a


def _dirichlet(labels, C, K, a, seed, *, flaw=None):
    rng = np.random.default_rng(seed)
    if flaw == "legacy_global":
        np.random.seed(seed % 2**32)
    classes = range(C)
    if flaw == "first_appearance":
        _, first = np.unique(labels, return_index=True)
        classes = [int(labels[i]) for i in sorted(first)]
    for _attempt in range(100):
        if flaw == "reseed_retry":
            rng = np.random.default_rng(seed)
        pieces = [[] for _ in range(K)]
        for c in classes:
            members = np.flatnonzero(labels == c)
            if flaw == "dirichlet_first":
                p = rng.dirichlet(np.full(K, a))
                perm = rng.permutation(members)
            elif flaw == "legacy_global":
                perm = np.random.permutation(members)
                p = np.random.dirichlet(np.full(K, a))
            else:
                perm = rng.permutation(members)
                p = rng.dirichlet(np.full(K, a))
            if flaw == "round_cuts":
                cuts = np.round(len(members) * np.cumsum(p)[:-1]).astype(int)
            else:
                cuts = np.floor(len(members) * np.cumsum(p)[:-1]).astype(int)
            for k, piece in enumerate(np.split(perm, cuts)):
                pieces[k].append(piece)
        parts = [np.concatenate(ps) if ps else np.empty(0, dtype=np.int64) for ps in pieces]
        if flaw == "no_retry" or all(len(p) > 0 for p in parts):
            return [torch.sort(torch.from_numpy(p).to(torch.int64)).values for p in parts]
    raise ValueError(f"alpha={a}: some client received no example in 100 draws")


def _shards(labels, K, s, seed, *, flaw=None):
    n = len(labels)
    if flaw == "unstable_sort":
        order = torch.from_numpy(np.argsort(labels.numpy(), kind="quicksort")).to(torch.int64)
    else:
        order = torch.sort(labels, stable=True).indices
    S = K * s
    q, r = divmod(n, S)
    sizes = [q] * (S - r) + [q + 1] * r if flaw == "long_shards_last" else [q + 1] * r + [q] * (S - r)
    shards = torch.split(order, sizes)
    if flaw == "numpy_deal":
        deal = np.random.default_rng(seed).permutation(S).tolist()
    else:
        deal = torch.randperm(S, generator=torch.Generator().manual_seed(seed)).tolist()
    out = []
    for k in range(K):
        mine = deal[k::K] if flaw == "round_robin_deal" else deal[k * s:(k + 1) * s]
        out.append(torch.sort(torch.cat([shards[j] for j in mine])).values)
    return out


def _non_iid(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None, flaw=None):
    _check_dataset(dataset)
    n = len(dataset)
    K = _check_clients(num_clients, n)
    seed = _check_seed(seed)
    if flaw == "validate_shards_always" or alpha is None:
        if not _is_int(shards_per_client):
            raise TypeError(f"shards_per_client must be an integer, got {type(shards_per_client).__name__}")
        if shards_per_client < 1 or K * shards_per_client > n:
            raise ValueError(f"shards_per_client={shards_per_client}: need 1 <= K * s <= n = {n}")
    if alpha is not None:
        a = _check_alpha(alpha, allow_bool=flaw == "bool_alpha", require_finite=flaw != "inf_alpha")
        return _dirichlet(dataset.labels.numpy(), dataset.n_classes, K, a, seed, flaw=flaw)
    return _shards(dataset.labels, K, int(shards_per_client), seed, flaw=flaw)


def _make_non_iid(flaw, doc):
    def partition_data_non_iid(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
        return _non_iid(dataset, num_clients, shards_per_client, seed, alpha=alpha, flaw=flaw)
    partition_data_non_iid.__name__ = f"_non_iid_{flaw}"
    partition_data_non_iid.__doc__ = doc
    return partition_data_non_iid


_non_iid_long_shards_last = _make_non_iid("long_shards_last", "the n mod S longer shards at the end of the sorted order")
_non_iid_unstable_sort = _make_non_iid("unstable_sort", "np.argsort(kind='quicksort'): ties not by index")
_non_iid_round_robin_deal = _make_non_iid("round_robin_deal", "client k gets deal[k::K]")
_non_iid_numpy_deal = _make_non_iid("numpy_deal", "the deal from NumPy's default_rng, not torch.randperm")
_non_iid_round_cuts = _make_non_iid("round_cuts", "Dirichlet cut points rounded, not floored")
_non_iid_dirichlet_first = _make_non_iid("dirichlet_first", "proportions drawn before the class permutation")
_non_iid_legacy_global = _make_non_iid("legacy_global", "np.random.seed + legacy global draws")
_non_iid_first_appearance = _make_non_iid("first_appearance", "classes in order of first appearance")
_non_iid_reseed_retry = _make_non_iid("reseed_retry", "each retry re-creates default_rng(seed)")
_non_iid_no_retry = _make_non_iid("no_retry", "empty clients returned")
_non_iid_inf_alpha = _make_non_iid("inf_alpha", "alpha = inf accepted")
_non_iid_bool_alpha = _make_non_iid("bool_alpha", "alpha = True accepted")
_non_iid_validate_shards_always = _make_non_iid("validate_shards_always", "K*s <= n enforced for Dirichlet too")


def _non_iid_shuffle_before_cut(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
    """'Partitions should be random': a randperm of the examples before cutting the shards."""
    if alpha is not None:
        return _non_iid(dataset, num_clients, shards_per_client, seed, alpha=alpha)
    _non_iid(dataset, num_clients, shards_per_client, seed)      # validation
    g = torch.Generator().manual_seed(int(seed))
    n, K, s = len(dataset), int(num_clients), int(shards_per_client)
    order = torch.randperm(n, generator=g)
    S = K * s
    q, r = divmod(n, S)
    shards = torch.split(order, [q + 1] * r + [q] * (S - r))
    deal = torch.randperm(S, generator=g).tolist()
    return [torch.sort(torch.cat([shards[j] for j in deal[k * s:(k + 1) * s]])).values for k in range(K)]


def _non_iid_alt_array_split(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
    """np.array_split for the shards (first n mod S longer); rng.permutation(n_c) then index for Dirichlet."""
    if not isinstance(dataset, LabelledDataset):
        raise TypeError("dataset: expected a LabelledDataset")
    n = len(dataset)
    if isinstance(num_clients, bool) or not isinstance(num_clients, numbers.Integral):
        raise TypeError("num_clients: expected an integer")
    if not 1 <= num_clients <= n:
        raise ValueError(f"num_clients: must be in [1, {n}]")
    _check_seed(seed)
    K = int(num_clients)
    labels = dataset.labels.numpy()
    if alpha is None:
        if isinstance(shards_per_client, bool) or not isinstance(shards_per_client, numbers.Integral):
            raise TypeError("shards_per_client: expected an integer")
        if shards_per_client < 1 or K * shards_per_client > n:
            raise ValueError("shards_per_client: every shard must hold at least one example (K * s <= n)")
        s = int(shards_per_client)
        order = torch.sort(dataset.labels, stable=True).indices.numpy()
        shards = np.array_split(order, K * s)
        deal = torch.randperm(K * s, generator=torch.Generator().manual_seed(int(seed))).numpy()
        result = []
        for k in range(K):
            mine = np.concatenate([shards[j] for j in deal[k * s:(k + 1) * s]])
            result.append(torch.from_numpy(np.sort(mine)).to(torch.int64))
        return result
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha: expected a finite positive number, got {alpha!r}")
    rng = np.random.default_rng(int(seed))
    for _ in range(100):
        buckets = [[] for _ in range(K)]
        for c in range(dataset.n_classes):
            members = np.nonzero(labels == c)[0]
            shuffled = members[rng.permutation(len(members))]
            props = rng.dirichlet(alpha * np.ones(K))
            bounds = [int(math.floor(len(members) * x)) for x in np.cumsum(props)[:K - 1]]
            for k, piece in enumerate(np.split(shuffled, bounds)):
                buckets[k].extend(piece.tolist())
        if min(len(b) for b in buckets) > 0:
            return [torch.tensor(sorted(b), dtype=torch.int64) for b in buckets]
    raise ValueError("alpha: too small, a client stayed empty after 100 draws")


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 6: count_client_samples
# ----------------------------------------------------------------------------------------------------------------------

def _count(partition, dataset, *, flaw=None):
    if flaw != "no_dataset_check":
        _check_dataset(dataset)
    allowed = (list,) if flaw == "list_only" else (list, tuple)
    if not isinstance(partition, allowed) or len(partition) == 0:
        raise TypeError("partition must be a non-empty list or tuple of index tensors")
    n, C = len(dataset.labels), dataset.n_classes
    rows = []
    for k, idx in enumerate(partition):
        where = "partition" if flaw == "unnamed_client" else f"partition[{k}]"
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"{where} must be a tensor")
        if flaw == "any_int_dtype":
            if idx.is_floating_point() or idx.dtype == torch.bool:
                raise TypeError(f"{where} must hold integer indices, got {idx.dtype}")
            idx = idx.long()
        elif flaw == "float_cast":
            idx = idx.long()
        elif idx.dtype != torch.int64:
            raise TypeError(f"{where} must be int64, got {idx.dtype}")
        if flaw == "flatten_2d":
            idx = idx.flatten()
        elif idx.ndim != 1:
            raise TypeError(f"{where} must be 1-D, got shape {tuple(idx.shape)}")
        if idx.numel() == 0:
            if flaw != "empty_ok":
                raise ValueError(f"{where} is empty")
        else:
            low_ok = True if flaw == "negative_ok" else int(idx.min()) >= 0
            if not low_ok or int(idx.max()) >= n:
                raise ValueError(f"{where} holds an index outside [0, {n})")
            if flaw != "repeats_ok" and torch.unique(idx).numel() != idx.numel():
                raise ValueError(f"{where} repeats an index")
        labels = dataset.labels[idx]
        if flaw == "no_minlength":
            rows.append(torch.bincount(labels))
        else:
            rows.append(torch.bincount(labels, minlength=C))
    return torch.stack(rows)


def _count_no_minlength(partition, dataset):
    return _count(partition, dataset, flaw="no_minlength")


def _count_float_cast(partition, dataset):
    return _count(partition, dataset, flaw="float_cast")


def _count_any_int_dtype(partition, dataset):
    return _count(partition, dataset, flaw="any_int_dtype")


def _count_repeats_ok(partition, dataset):
    return _count(partition, dataset, flaw="repeats_ok")


def _count_empty_ok(partition, dataset):
    return _count(partition, dataset, flaw="empty_ok")


def _count_negative_ok(partition, dataset):
    return _count(partition, dataset, flaw="negative_ok")


def _count_flatten_2d(partition, dataset):
    return _count(partition, dataset, flaw="flatten_2d")


def _count_list_only(partition, dataset):
    return _count(partition, dataset, flaw="list_only")


def _count_no_dataset_check(partition, dataset):
    return _count(partition, dataset, flaw="no_dataset_check")


def _count_unnamed_client(partition, dataset):
    return _count(partition, dataset, flaw="unnamed_client")


def _count_first_labels(partition, dataset):
    """Counts labels[:n_k] — 'the client's n_k examples' — instead of labels[idx]."""
    _count(partition, dataset)      # validation
    return torch.stack([torch.bincount(dataset.labels[:len(idx)], minlength=dataset.n_classes) for idx in partition])


def _count_transposed(partition, dataset):
    return _count(partition, dataset).T.contiguous()


def _count_alt_one_hot(partition, dataset):
    """Sum of one-hot rows, per client, after the same validation."""
    if not isinstance(dataset, LabelledDataset):
        raise TypeError("dataset: expected a LabelledDataset")
    if not isinstance(partition, (list, tuple)):
        raise TypeError("partition: expected a list or tuple of tensors")
    if not partition:
        raise ValueError("partition: empty")
    n, C = len(dataset), dataset.n_classes
    counts = torch.zeros((len(partition), C), dtype=torch.int64)
    for k, idx in enumerate(partition):
        name = f"partition[{k}]"
        if not torch.is_tensor(idx) or idx.dtype is not torch.int64 or idx.dim() != 1:
            raise TypeError(f"{name}: expected a 1-D int64 tensor")
        if len(idx) == 0:
            raise ValueError(f"{name}: no examples")
        if bool(((idx < 0) | (idx >= n)).any()):
            raise ValueError(f"{name}: index out of range [0, {n})")
        if len(set(idx.tolist())) != len(idx):
            raise ValueError(f"{name}: repeated index")
        counts[k] = torch.nn.functional.one_hot(dataset.labels[idx], C).sum(dim=0)
    return counts


def _count_alt_scatter(partition, dataset):
    """One scatter_add_ over (client, label) pairs, as the NumPy oracle does with np.add.at."""
    out = _count_alt_one_hot(partition, dataset)     # validation + shape
    flat = torch.zeros(len(partition) * dataset.n_classes, dtype=torch.int64)
    for k, idx in enumerate(partition):
        flat.scatter_add_(0, k * dataset.n_classes + dataset.labels[idx], torch.ones(len(idx), dtype=torch.int64))
    assert torch.equal(flat.view_as(out), out)
    return flat.view(len(partition), dataset.n_classes).clone()


MUTANTS = {
    "partition_data_iid": [
        ("whole remainder to the last client ('the first n mod K clients' get one more)", _iid_remainder_last),
        ("torch.manual_seed + global randperm: global generator re-seeded ('seeds torch.Generator().manual_seed(seed)')",
         _iid_global_rng),
        ("NumPy default_rng(seed).permutation instead of torch.randperm ('perm = torch.randperm(n, generator=g)')",
         _iid_numpy_perm),
        ("round-robin perm[k::K] instead of consecutive pieces ('cut into consecutive pieces ... (torch.split)')",
         _iid_round_robin),
        ("num_clients=True accepted as 1 ('num_clients not an integer (TypeError)')", _iid_bool_clients),
        ("no dataset type check: any sized object accepted ('dataset not a LabelledDataset' is refused)",
         _iid_no_dataset_check),
        ("returns torch.split's tuple ('result list of K tensors')", _iid_tuple),
        ("pieces not sorted ('example indices, each sorted ascending')", _iid_unsorted),
    ],
    "partition_data_non_iid": [
        ("longer shards at the end ('the first n mod S shards one longer')", _non_iid_long_shards_last),
        ("unstable argsort by label ('torch.sort(labels, stable=True) ... ties by index')", _non_iid_unstable_sort),
        ("client k gets deal[k::K] ('client k gets shards deal[k*s : (k+1)*s]')", _non_iid_round_robin_deal),
        ("shard deal drawn with NumPy ('deal = torch.randperm(S, generator=torch.Generator().manual_seed(seed))')",
         _non_iid_numpy_deal),
        ("examples shuffled before cutting shards ('order = torch.sort(labels, stable=True).indices')",
         _non_iid_shuffle_before_cut),
        ("Dirichlet cuts rounded ('cut ... at floor(n_c * cumsum(p_c))')", _non_iid_round_cuts),
        ("Dirichlet proportions drawn before the permutation ('permute its indices, draw proportions')",
         _non_iid_dirichlet_first),
        ("np.random.seed + legacy global RNG ('rng = np.random.default_rng(seed)')", _non_iid_legacy_global),
        ("classes in order of first appearance ('for each class c in ascending order')", _non_iid_first_appearance),
        ("each retry re-creates default_rng(seed): the same failed draw 100 times ('the whole draw is repeated')",
         _non_iid_reseed_retry),
        ("no retry: a client may be empty ('If any client ends up with no example, the whole draw is repeated')",
         _non_iid_no_retry),
        ("alpha = inf accepted ('a finite real alpha > 0')", _non_iid_inf_alpha),
        ("alpha = True accepted as 1.0 ('not bool')", _non_iid_bool_alpha),
        ("K*s <= n enforced even when alpha is given ('shards_per_client ... ignored when alpha is given')",
         _non_iid_validate_shards_always),
    ],
    "count_client_samples": [
        ("bincount without minlength ('Every row has C entries')", _count_no_minlength),
        ("float index tensors cast to long ('an element that is not a 1-D int64 tensor (TypeError)')",
         _count_float_cast),
        ("int32 index tensors accepted ('1-D int64 tensor')", _count_any_int_dtype),
        ("repeated index not refused ('a repeated index (ValueError)')", _count_repeats_ok),
        ("empty client tensor gives a zero row ('an empty tensor ... (ValueError)')", _count_empty_ok),
        ("negative index wraps around ('an index outside [0, n)')", _count_negative_ok),
        ("2-D index tensor flattened ('a 1-D int64 tensor')", _count_flatten_2d),
        ("tuple partition refused ('anything that is not a list or tuple')", _count_list_only),
        ("dataset not validated ('Validate dataset (a LabelledDataset, naming dataset)')", _count_no_dataset_check),
        ("messages say 'partition' but not which client ('names partition (and the client, e.g. partition[2])')",
         _count_unnamed_client),
        ("counts labels[:n_k] instead of labels[idx] ('counts[k, c] = number of client k's examples with label c')",
         _count_first_labels),
        ("returns (C, K) ('counts: (K, C)')", _count_transposed),
    ],
}

ALTERNATIVES = {
    "partition_data_iid": [
        ("torch.tensor_split(perm, K)", _iid_alt_tensor_split),
        ("explicit offsets loop", _iid_alt_offsets),
    ],
    "partition_data_non_iid": [
        ("np.array_split shards; Dirichlet via members[rng.permutation(n_c)] and math.floor cuts",
         _non_iid_alt_array_split),
    ],
    "count_client_samples": [
        ("one_hot(...).sum(0) per client", _count_alt_one_hot),
        ("scatter_add_ over flattened (client, label) cells", _count_alt_scatter),
    ],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _non_iid_alt_tensor_split_and_loops(dataset, num_clients, shards_per_client=2, seed=0, *, alpha=None):
    """Shards with torch.tensor_split of the stable label order; Dirichlet pieces collected per client in lists."""
    _check_dataset(dataset)
    n = len(dataset)
    K = _check_clients(num_clients, n)
    seed = _check_seed(seed)
    if alpha is None:
        s = shards_per_client
        if not _is_int(s):
            raise TypeError(f"shards_per_client must be an integer, got {s!r}")
        if s < 1 or K * s > n:
            raise ValueError(f"shards_per_client must satisfy 1 <= K*s <= n, got {s} with K = {K}, n = {n}")
        order = torch.sort(dataset.labels, stable=True).indices
        shards = torch.tensor_split(order, K * int(s))  # the first n mod S one longer
        deal = torch.randperm(K * int(s), generator=torch.Generator().manual_seed(seed))
        return [torch.sort(torch.cat([shards[int(j)] for j in deal[k * s:(k + 1) * s]])).values for k in range(K)]
    a = _check_alpha(alpha)
    labels = dataset.labels.numpy()
    rng = np.random.default_rng(seed)
    for _ in range(100):
        pieces = [[] for _ in range(K)]
        for c in range(dataset.n_classes):
            members = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(K, a))
            for k, piece in enumerate(np.split(members, np.floor(len(members) * np.cumsum(p)[:-1]).astype(int))):
                pieces[k].append(piece)
        parts = [np.sort(np.concatenate(pk)) for pk in pieces]
        if all(len(pk) for pk in parts):
            return [torch.from_numpy(pk.astype(np.int64)) for pk in parts]
    raise ValueError(f"alpha = {a}: 100 Dirichlet draws left a client empty")


ALTERNATIVES.setdefault("partition_data_non_iid", []).append(
    ("torch.tensor_split shards; Dirichlet pieces gathered in per-client lists", _non_iid_alt_tensor_split_and_loops))
