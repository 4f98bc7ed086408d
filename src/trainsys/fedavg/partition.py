r"""Module 3, Part 2 — dealing the training set out to ``K`` clients.

A partition is a list of ``K`` index tensors (1-D int64, sorted ascending), disjoint and covering
``range(n)``: client ``k`` holds ``n_k`` examples, :math:`\sum_k n_k = n`.

* **IID** — a uniformly random permutation cut into ``K`` near-equal parts: every client sees the
  label distribution of the whole set, up to sampling noise.
* **Pathological non-IID** (McMahan et al. 2017, §3) — sort by label, cut into
  ``K · s`` shards of consecutive examples, give each client ``s`` shards at random
  (the paper: MNIST, 200 shards of 300, ``s = 2``): most clients see only ``s`` labels.
* **Dirichlet label skew** (Hsu et al. 2019) — for each class ``c`` draw client proportions
  :math:`p_c \sim \mathrm{Dir}(\alpha \mathbf 1_K)` and split that class accordingly; small
  ``α`` concentrates each class on few clients, ``α → ∞`` approaches IID.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from trainsys._validation import describe, require_int
from trainsys.fedavg.data import LabelledDataset, require_dataset, require_indices
from trainsys.fedavg.model import make_generator, require_seed

Partition = list[torch.Tensor]

DIRICHLET_ATTEMPTS = 100
"""How many Dirichlet draws :func:`partition_data_non_iid` makes before giving up on non-empty clients."""


def split_sizes(n: int, parts: int) -> list[int]:
    """Sizes of ``parts`` near-equal consecutive pieces of ``n`` items: the first ``n mod parts`` get one more."""
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def require_partition(name: str, value: object, n: int) -> Partition:
    """Require a non-empty list of valid index tensors (each non-empty, in ``[0, n)``, no repeats)."""
    if not isinstance(value, (list, tuple)) or len(value) == 0:
        raise TypeError(f"{name} must be a non-empty list of index tensors (one per client), got {describe(value)}")
    return [require_indices(f"{name}[{k}]", part, n) for k, part in enumerate(value)]


def _require_num_clients(num_clients: object, n: int) -> int:
    return require_int("num_clients", num_clients, minimum=1, maximum=n)


# --- Lesson 4 --------------------------------------------------------------------------------------
def partition_data_iid(dataset: LabelledDataset, num_clients: int, seed: int) -> Partition:
    """``num_clients`` random, disjoint, covering parts of ``range(len(dataset))``, sizes differing by <= 1.

    ``perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))`` is cut into consecutive
    pieces of :func:`split_sizes` ``(n, num_clients)`` (the first ``n mod K`` clients get one extra
    example); each client's indices are returned sorted ascending, as int64 tensors. Raises
    ``ValueError`` when ``num_clients < 1`` or ``num_clients > n`` (a client with no data cannot train).
    """
    dataset = require_dataset("dataset", dataset)
    num_clients = _require_num_clients(num_clients, len(dataset))
    perm = torch.randperm(len(dataset), generator=make_generator(require_seed("seed", seed)))  # (n,)
    pieces = torch.split(perm, split_sizes(len(dataset), num_clients))
    return [torch.sort(piece).values for piece in pieces]


# --- Lesson 5 --------------------------------------------------------------------------------------
def partition_data_non_iid(
    dataset: LabelledDataset,
    num_clients: int,
    shards_per_client: int = 2,
    seed: int = 0,
    *,
    alpha: float | None = None,
) -> Partition:
    r"""Label-skewed partition: the paper's sorted shards (default) or, with ``alpha``, Dirichlet skew.

    **Shards** (``alpha=None``): ``order = torch.sort(labels, stable=True).indices`` (by label, ties by
    index); ``order`` is cut into ``S = num_clients * shards_per_client`` consecutive shards of
    :func:`split_sizes` ``(n, S)``; ``torch.randperm(S, generator=torch.Generator().manual_seed(seed))``
    deals them: client ``k`` gets shards ``perm[k*s : (k+1)*s]``. A shard no longer than a class
    holds at most two labels, so a client holds at most ``2 s`` (usually ``s``). Raises ``ValueError``
    when ``S > n`` (a shard would be empty).

    **Dirichlet** (``alpha > 0``; ``shards_per_client`` is then unused): with
    ``rng = numpy.random.default_rng(seed)``, for each class ``c`` in ascending order its indices are
    permuted (``rng.permutation``), proportions :math:`p_c \sim \mathrm{Dir}(\alpha\mathbf 1_K)` are
    drawn (``rng.dirichlet``) and the class is cut at :math:`\lfloor n_c \cdot \mathrm{cumsum}(p_c)\rfloor`.
    If a client ends up empty the whole draw is repeated (up to ``DIRICHLET_ATTEMPTS`` times, then
    ``ValueError`` naming ``alpha``).

    Returns ``num_clients`` sorted int64 index tensors, disjoint and covering ``range(n)``.
    """
    dataset = require_dataset("dataset", dataset)
    n = len(dataset)
    num_clients = _require_num_clients(num_clients, n)
    seed = require_seed("seed", seed)
    if alpha is not None:
        return _dirichlet_partition(dataset, num_clients, alpha, seed)
    shards_per_client = require_int("shards_per_client", shards_per_client, minimum=1)
    num_shards = num_clients * shards_per_client
    if num_shards > n:
        raise ValueError(f"shards_per_client={shards_per_client} with num_clients={num_clients} asks for "
                         f"{num_shards} shards of {n} examples; a shard would be empty")
    order = torch.sort(dataset.labels, stable=True).indices  # (n,) by label, ties by index
    shards = torch.split(order, split_sizes(n, num_shards))
    deal = torch.randperm(num_shards, generator=make_generator(seed))  # (S,)
    clients = []
    for k in range(num_clients):
        mine = deal[k * shards_per_client:(k + 1) * shards_per_client]
        clients.append(torch.sort(torch.cat([shards[int(j)] for j in mine])).values)
    return clients


def _dirichlet_partition(dataset: LabelledDataset, num_clients: int, alpha: object, seed: int) -> Partition:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not np.isfinite(float(alpha)):
        raise TypeError(f"alpha must be a finite real number > 0 (or None for shards), got {describe(alpha)}")
    alpha = float(alpha)
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    rng = np.random.default_rng(seed)
    labels = dataset.labels.numpy()
    for _ in range(DIRICHLET_ATTEMPTS):
        owned: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in range(dataset.n_classes):
            members = rng.permutation(np.flatnonzero(labels == c))  # (n_c,)
            proportions = rng.dirichlet(np.full(num_clients, alpha))  # (K,)
            cuts = np.floor(np.cumsum(proportions)[:-1] * members.size).astype(np.int64)  # (K - 1,)
            for k, piece in enumerate(np.split(members, cuts)):
                owned[k].append(piece)
        if all(sum(p.size for p in pieces) > 0 for pieces in owned):
            return [torch.sort(torch.from_numpy(np.concatenate(pieces)).to(torch.int64)).values
                    for pieces in owned]
    raise ValueError(f"alpha={alpha} left some of the {num_clients} clients without examples in "
                     f"{DIRICHLET_ATTEMPTS} draws; use a larger alpha or fewer clients")


# --- Lesson 6 --------------------------------------------------------------------------------------
def count_client_samples(partition: Partition, dataset: LabelledDataset) -> torch.Tensor:
    """Per-client, per-class example counts: ``counts: (num_clients, n_classes)`` int64.

    ``counts[k, c]`` is the number of client ``k``'s examples with label ``c`` (zero columns kept, so
    every row has ``dataset.n_classes`` entries: the matrix a heatmap of the partition shows). Row sums
    are the client sizes ``n_k``; column sums the class sizes. Raises ``TypeError``/``ValueError``
    (naming ``partition``) for an empty list or an index tensor out of range.
    """
    dataset = require_dataset("dataset", dataset)
    partition = require_partition("partition", partition, len(dataset))
    rows = [torch.bincount(dataset.labels[idx], minlength=dataset.n_classes) for idx in partition]  # (C,) each
    return torch.stack(rows)  # (K, C)
