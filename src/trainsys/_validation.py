"""Argument checks shared by every lesson function.

Each helper raises ``TypeError`` or ``ValueError`` with a message that names the
argument, states what was expected, and shows what was given, so that a student
who passes the wrong thing learns *which* thing and *why* from one line.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import numpy as np


def describe(value: object) -> str:
    """A short description of ``value`` for error messages (type, and shape/dtype for arrays)."""
    if isinstance(value, np.ndarray):
        return f"ndarray of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (bool, np.bool_)):
        return f"bool {value!r}"
    if isinstance(value, numbers.Number):
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def require_int(name: str, value: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as ``int`` if it is an integer within ``[minimum, maximum]``; raise otherwise.

    Booleans are rejected: ``True`` is an ``int`` to Python but never a meaningful count.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {describe(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def require_real(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    strictly_positive: bool = False,
) -> float:
    """Return ``value`` as ``float`` if it is a finite real number obeying the bound; raise otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if strictly_positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def require_generator(name: str, value: object) -> np.random.Generator:
    """Require a ``numpy.random.Generator``: all randomness in the course flows through one."""
    if not isinstance(value, np.random.Generator):
        raise TypeError(
            f"{name} must be a numpy.random.Generator (e.g. np.random.default_rng(0)), got {describe(value)}"
        )
    return value


def require_float_array(name: str, value: object, *, ndim: int | None = None) -> np.ndarray:
    """Require a floating-point ``ndarray`` (optionally of a given rank) and return it unchanged."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {describe(value)}")
    if not np.issubdtype(value.dtype, np.floating):
        raise TypeError(f"{name} must have a floating-point dtype, got {describe(value)}")
    if ndim is not None and value.ndim != ndim:
        axes = {1: "(n,)", 2: "(rows, cols)"}.get(ndim, f"{ndim} axes")
        raise ValueError(f"{name} must be {ndim}-dimensional {axes}, got {describe(value)}")
    return value


def require_same_shape(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have identical shapes."""
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {a.shape} and {b.shape}")


def require_axis_match(
    name_a: str, a: np.ndarray, axis_a: int, name_b: str, b: np.ndarray, axis_b: int, meaning: str
) -> None:
    """Raise ``ValueError`` unless ``a.shape[axis_a] == b.shape[axis_b]`` (the shared axis ``meaning``)."""
    if a.shape[axis_a] != b.shape[axis_b]:
        raise ValueError(
            f"{name_a}.shape[{axis_a}] ({a.shape[axis_a]}) must equal {name_b}.shape[{axis_b}] "
            f"({b.shape[axis_b]}): both are the {meaning} axis; got {name_a} {a.shape} and {name_b} {b.shape}"
        )


def require_keys(name: str, value: object, keys: Sequence[str]) -> Mapping:
    """Require a mapping holding exactly ``keys``."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict with keys {sorted(keys)}, got {describe(value)}")
    missing = sorted(set(keys) - set(value))
    extra = sorted(set(value) - set(keys))
    if missing or extra:
        raise ValueError(
            f"{name} must have exactly the keys {sorted(keys)}; missing {missing}, unexpected {extra}"
        )
    return value


def require_float_tree(name: str, tree: object) -> Mapping:
    """Require a dict whose values are floating-point arrays (a parameter or gradient tree)."""
    if not isinstance(tree, Mapping):
        raise TypeError(f"{name} must be a dict of arrays, got {type(tree).__name__}")
    for key, value in tree.items():
        require_float_array(f"{name}[{key!r}]", value)
    return tree


def require_same_tree(name_a: str, a: object, name_b: str, b: object) -> None:
    """Raise unless ``a`` and ``b`` are dicts of float arrays with the same keys and shapes."""
    require_float_tree(name_a, a)
    require_float_tree(name_b, b)
    if set(a) != set(b):
        raise ValueError(f"{name_a} and {name_b} must have the same keys, got {sorted(a)} and {sorted(b)}")
    for key in a:
        if a[key].shape != b[key].shape:
            raise ValueError(f"{name_a}[{key!r}] and {name_b}[{key!r}] must have the same shape, "
                             f"got {a[key].shape} and {b[key].shape}")
