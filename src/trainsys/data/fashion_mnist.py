r"""Fashion-MNIST (Xiao, Rasul and Vollgraf 2017) from Debian's ``dataset-fashion-mnist``, offline.

The package installs the four IDX files of Zalando's release under :data:`DATA_DIR`:
``train-images-idx3-ubyte.gz`` (60,000 images), ``train-labels-idx1-ubyte.gz``,
``t10k-images-idx3-ubyte.gz`` (10,000 images) and ``t10k-labels-idx1-ubyte.gz``; 28×28 grey levels,
10 balanced classes (T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal, Shirt, Sneaker, Bag, Ankle boot).

IDX format (LeCun's MNIST page): a big-endian header — magic ``0x00000803`` (unsigned bytes, 3 dimensions)
then ``n, 28, 28`` for images; magic ``0x00000801`` then ``n`` for labels — followed by the bytes. Every
loader checks the header and the file's SHA-256 against :data:`SHA256` (measured on the Debian package
``0.0~git20200523.55506a9-1``); a different file is refused rather than silently used.

:func:`load_fashion_mnist` returns ``(train, test)`` as :class:`~trainsys.fedavg.data.LabelledDataset`:
``features: (n, 784)`` float32 in ``[0, 1]`` (grey level / 255), ``labels: (n,)`` int64 in ``[0, 10)``.
The official 10,000-image test set is the held-out set; nothing is fitted on it.
"""

from __future__ import annotations

import functools
import gzip
import struct
import subprocess
from pathlib import Path

import numpy as np
import torch

from trainsys.evidence import dataset_entry, sha256_file
from trainsys.fedavg.data import LabelledDataset

DATA_DIR = Path("/usr/share/datasets/fashion-mnist")
DEBIAN_PACKAGE = "dataset-fashion-mnist"
FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
SHA256 = {
    "train-images-idx3-ubyte.gz": "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
    "train-labels-idx1-ubyte.gz": "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
    "t10k-images-idx3-ubyte.gz": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    "t10k-labels-idx1-ubyte.gz": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
}
"""SHA-256 of the files of Debian's dataset-fashion-mnist 0.0~git20200523.55506a9-1 (measured 2026-12-05)."""
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
IMAGE_MAGIC, LABEL_MAGIC = 0x00000803, 0x00000801
SIDE = 28
MISSING_HINT = "run `make datasets` (it installs the Debian package dataset-fashion-mnist)"


def data_files(data_dir: Path = DATA_DIR) -> dict[str, Path]:
    """The four IDX paths; ``FileNotFoundError`` naming the missing file and ``make datasets``."""
    paths = {key: Path(data_dir) / name for key, name in FILES.items()}
    for path in paths.values():
        if not path.is_file():
            raise FileNotFoundError(f"Fashion-MNIST file {path} is missing: {MISSING_HINT}")
    return paths


def debian_version(package: str = DEBIAN_PACKAGE) -> str:
    """The installed Debian package version (``dpkg-query``), or ``"unknown"`` when dpkg cannot say."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def read_idx(path: Path, magic: int) -> np.ndarray:
    """The uint8 array of a gzipped IDX file whose header starts with ``magic``: ``(n, 28, 28)`` or ``(n,)``.

    Raises ``ValueError`` naming the file when the magic number, the dimensions or the byte count differ
    from the header's promise (a truncated or foreign file).
    """
    raw = gzip.decompress(Path(path).read_bytes())
    found = struct.unpack(">I", raw[:4])[0]
    if found != magic:
        raise ValueError(f"{path}: IDX magic must be {magic:#010x}, got {found:#010x}")
    ndim = magic & 0xFF
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    body = raw[4 + 4 * ndim:]
    if ndim == 3 and dims[1:] != (SIDE, SIDE):
        raise ValueError(f"{path}: images must be {SIDE}x{SIDE}, the header says {dims[1:]}")
    if len(body) != int(np.prod(dims)):
        raise ValueError(f"{path}: the header promises {int(np.prod(dims))} bytes of data, the file holds {len(body)}")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def verify_checksums(data_dir: Path = DATA_DIR) -> dict[str, str]:
    """``{file name: sha256}`` of the four files; ``ValueError`` naming a file whose hash is not :data:`SHA256`."""
    digests = {path.name: sha256_file(path) for path in data_files(data_dir).values()}
    for name, digest in digests.items():
        if digest != SHA256[name]:
            raise ValueError(f"{Path(data_dir) / name} has SHA-256 {digest}, expected {SHA256[name]} "
                             f"(Debian {DEBIAN_PACKAGE} 0.0~git20200523.55506a9-1)")
    return digests


@functools.lru_cache(maxsize=2)
def _load(data_dir: str) -> tuple[LabelledDataset, LabelledDataset]:
    paths = data_files(Path(data_dir))
    verify_checksums(Path(data_dir))
    parts = []
    for split in ("train", "test"):
        images = read_idx(paths[f"{split}_images"], IMAGE_MAGIC)  # (n, 28, 28) uint8
        labels = read_idx(paths[f"{split}_labels"], LABEL_MAGIC)  # (n,) uint8
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{split}: {images.shape[0]} images but {labels.shape[0]} labels")
        features = torch.from_numpy(images.reshape(len(images), SIDE * SIDE).astype(np.float32) / 255.0)  # (n, 784)
        parts.append(LabelledDataset(features, torch.from_numpy(labels.astype(np.int64)), len(CLASSES)))
    return parts[0], parts[1]


def load_fashion_mnist(data_dir: str | Path = DATA_DIR) -> tuple[LabelledDataset, LabelledDataset]:
    """``(train, test)``: 60,000 and 10,000 examples, ``features: (n, 784)`` float32 in ``[0, 1]``, labels int64.

    The official split is kept: ``test`` is the t10k set, held out from everything that is fitted. The
    files' headers and SHA-256 are checked first (``ValueError`` on a mismatch); a missing file raises
    ``FileNotFoundError`` naming ``make datasets``. Loaded once per process (cached; the tensors are shared,
    so do not modify them in place — :meth:`LabelledDataset.subset` copies).
    """
    return _load(str(data_dir))


def fashion_mnist_entry(data_dir: str | Path = DATA_DIR) -> dict[str, object]:
    """The evidence record's dataset entry: name, Debian version, the four files with their SHA-256."""
    paths = data_files(Path(data_dir))
    return dataset_entry("Fashion-MNIST", debian_version(), list(paths.values()),
                         source=f"Debian package {DEBIAN_PACKAGE}", split="official: 60,000 train, 10,000 t10k test",
                         features="784 grey levels / 255, float32 in [0, 1]")
