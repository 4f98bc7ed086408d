r"""Module 3, Part 1 — a synthetic labelled dataset and a held-out split made before any fitting.

The features are standard Gaussian, :math:`x \sim \mathcal N(0, I_{d_{in}})`, and a fixed random
**teacher** labels them: :math:`y = \arg\max_c\, x^\top w_c` with :math:`W = [w_1, \dots, w_C]`
the orthonormal columns of a Gaussian matrix. The scores :math:`x^\top w_c` are then independent
:math:`\mathcal N(0, 1)`, so every class is equally likely (about ``n / C`` examples each) and the
classes are the cells of a fan of hyperplanes through the origin: learnable exactly by the MLP,
yet with many examples near a boundary. At ``d_in = 20``, ``C = 10`` and a few thousand examples
the course's MLP reaches roughly 90 % held-out accuracy after a few epochs of SGD — MNIST-like
difficulty without a download.

A dataset is a :class:`LabelledDataset` of ``features: (n, d_in)`` float32 and ``labels: (n,)``
int64 with values in ``[0, n_classes)``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from trainsys._validation import describe, require_int
from trainsys.fedavg.model import make_generator, require_seed


@dataclass(frozen=True)
class LabelledDataset:
    """``features: (n, d_in)`` float32, ``labels: (n,)`` int64 in ``[0, n_classes)``, and ``n_classes``.

    Features may also be int64 token ids ``(n, context)`` (next-character prediction on Shakespeare,
    :mod:`trainsys.data.shakespeare`): the label is then the next token, ``n_classes`` the vocabulary size.
    """

    features: torch.Tensor
    labels: torch.Tensor
    n_classes: int

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, indices: torch.Tensor) -> "LabelledDataset":
        """The examples at ``indices`` (a new dataset; the tensors are gathered copies)."""
        indices = require_indices("indices", indices, len(self))
        return LabelledDataset(self.features[indices], self.labels[indices], self.n_classes)


def require_dataset(name: str, value: object) -> LabelledDataset:
    """Require a :class:`LabelledDataset` whose tensors have the documented shapes, dtypes and label range."""
    if not isinstance(value, LabelledDataset):
        raise TypeError(f"{name} must be a LabelledDataset (features, labels, n_classes), got {describe(value)}")
    X, y = value.features, value.labels
    if not isinstance(X, torch.Tensor) or X.ndim != 2 or X.dtype not in (torch.float32, torch.int64):
        raise ValueError(f"{name}.features must be a float32 tensor of shape (n, d_in) (or int64 token ids of "
                         f"shape (n, context)), got {_tensor_desc(X)}")
    sequence = X.dtype == torch.int64 and isinstance(y, torch.Tensor) and tuple(y.shape) == tuple(X.shape)
    if not isinstance(y, torch.Tensor) or (y.ndim != 1 and not sequence) or y.dtype != torch.int64:
        raise ValueError(f"{name}.labels must be an int64 tensor of shape (n,) (or (n, context) next ids for "
                         f"int64 token features), got {_tensor_desc(y)}")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"{name}.features has {X.shape[0]} rows but {name}.labels has {y.shape[0]}: "
                         "both are the example axis")
    require_int(f"{name}.n_classes", value.n_classes, minimum=2)
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= value.n_classes):
        raise ValueError(f"{name}.labels must lie in [0, {value.n_classes}), "
                         f"got values from {int(y.min())} to {int(y.max())}")
    return value


def require_indices(name: str, value: object, n: int) -> torch.Tensor:
    """Require a non-empty 1-D int64 tensor of distinct example indices in ``[0, n)``."""
    if not isinstance(value, torch.Tensor) or value.ndim != 1 or value.dtype != torch.int64:
        raise TypeError(f"{name} must be a 1-D int64 tensor of example indices, got {_tensor_desc(value)}")
    if value.numel() == 0:
        raise ValueError(f"{name} must hold at least one example index, got an empty tensor")
    if int(value.min()) < 0 or int(value.max()) >= n:
        raise ValueError(f"{name} must lie in [0, {n}) (the dataset has {n} examples), "
                         f"got values from {int(value.min())} to {int(value.max())}")
    if torch.unique(value).numel() != value.numel():
        raise ValueError(f"{name} must not repeat an example index, got {value.numel()} indices of which "
                         f"{torch.unique(value).numel()} are distinct")
    return value


def _tensor_desc(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return describe(value)


# --- Lesson 2 --------------------------------------------------------------------------------------
def build_synthetic_dataset(n: int, d_in: int, n_classes: int, seed: int) -> LabelledDataset:
    r"""``n`` teacher-labelled Gaussian examples: ``features: (n, d_in)`` float32, ``labels: (n,)`` int64.

    Draws from ``torch.Generator().manual_seed(seed)``, in this order (the order is the contract, so
    that one seed gives the same data in every lesson):

    1. ``G: (d_in, n_classes)`` with entries :math:`\mathcal N(0, 1)`; the teacher is
       ``W = Q`` from the reduced QR decomposition ``G = QR`` (``torch.linalg.qr``; LAPACK's Householder
       signs, the same as ``numpy.linalg.qr``) when ``d_in >= n_classes`` (orthonormal
       columns: balanced classes), else ``W = G / sqrt(d_in)``;
    2. ``X: (n, d_in)`` with entries :math:`\mathcal N(0, 1)`;

    and ``labels = argmax(X @ W, dim=1)``. Nothing global is touched. Raises ``TypeError`` /
    ``ValueError`` for non-integer or non-positive sizes, ``n_classes < 2`` or a bad seed.
    """
    n = require_int("n", n, minimum=1)
    d_in = require_int("d_in", d_in, minimum=1)
    n_classes = require_int("n_classes", n_classes, minimum=2)
    generator = make_generator(require_seed("seed", seed))

    G = torch.randn(d_in, n_classes, generator=generator)  # (d_in, n_classes)
    W = torch.linalg.qr(G).Q if d_in >= n_classes else G / math.sqrt(d_in)  # (d_in, n_classes)
    X = torch.randn(n, d_in, generator=generator)  # (n, d_in)
    labels = torch.argmax(X @ W, dim=1)  # (n,) int64
    return LabelledDataset(X, labels, n_classes)


# --- Lesson 3 --------------------------------------------------------------------------------------
def train_test_split_dataset(
    dataset: LabelledDataset, test_fraction: float, seed: int
) -> tuple[LabelledDataset, LabelledDataset]:
    r"""Split ``dataset`` into ``(train, test)``: disjoint, covering, **stratified** by label.

    For each class ``c`` in ascending order, with :math:`n_c` examples, the test set takes
    :math:`t_c = \lfloor f\, n_c + \tfrac12 \rfloor` of them (``f = test_fraction``, rounded half up
    per class, so every class keeps its share in both parts up to rounding): the class's indices in
    ascending order are permuted by ``torch.randperm(n_c, generator=g)`` — one generator
    ``g = torch.Generator().manual_seed(seed)`` for all classes, in class order — and the first
    :math:`t_c` go to the test set. Both parts keep the original example order (their indices are
    sorted), and both are new tensors (gathered copies), so fitting on one can never touch the other.

    The split is made before anything is fitted: a held-out set that a model or a partition has
    seen is not held out. Raises ``ValueError`` when ``test_fraction`` is not in ``(0, 1)`` or when
    it leaves the train or the test part empty.
    """
    dataset = require_dataset("dataset", dataset)
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real):
        raise TypeError(f"test_fraction must be a real number in (0, 1), got {describe(test_fraction)}")
    test_fraction = float(test_fraction)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    generator = make_generator(require_seed("seed", seed))

    test_parts = []
    for c in range(dataset.n_classes):
        members = torch.nonzero(dataset.labels == c).flatten()  # (n_c,) ascending
        n_test = math.floor(test_fraction * members.numel() + 0.5)
        order = torch.randperm(members.numel(), generator=generator)  # (n_c,)
        test_parts.append(members[order[:n_test]])
    test_idx = torch.sort(torch.cat(test_parts)).values  # (n_test,)
    is_test = torch.zeros(len(dataset), dtype=torch.bool)
    is_test[test_idx] = True
    train_idx = torch.nonzero(~is_test).flatten()  # (n - n_test,)
    if test_idx.numel() == 0 or train_idx.numel() == 0:
        raise ValueError(f"test_fraction={test_fraction} leaves {test_idx.numel()} test and "
                         f"{train_idx.numel()} training examples out of {len(dataset)}; both must be non-empty")
    return dataset.subset(train_idx), dataset.subset(test_idx)
