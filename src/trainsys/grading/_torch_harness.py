"""The torch side of the check machinery (Module 3): tensors, state dicts, models, datasets.

:func:`run_torch_cases` is :func:`trainsys.grading._harness.run_cases` for arguments that are torch
objects: the snapshot taken before the student's call understands tensors, modules (their state
dict and training mode), datasets and generators, so that a function which mutates an input it
promised to leave alone fails the case; and the global torch generator must be left untouched,
because every random draw in Module 3 comes from an explicit seed.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from trainsys.fedavg.data import LabelledDataset
from trainsys.grading._harness import Args, CheckFailure, call, quiet, run_cases

BAD = (TypeError, ValueError)


def fixed(*args: Any, **kwargs: Any) -> Callable[[], Args]:
    """A case factory returning fresh deep copies of ``args`` and ``kwargs``."""
    return lambda: (copy.deepcopy(args), copy.deepcopy(kwargs))


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for two correct implementations computing in ``dtype``, derived as the NumPy harness's
    rule (``trainsys.grading._harness.default_tolerance``, which gives float32 and float64): ``2·γ_k``
    (``trainsys.tolerance.gamma``) for ``k`` roundings in the dtype, with ``atol`` for entries whose
    magnitude is at most 0.5 where they cancel. Half precisions are formed in float32 and rounded: bfloat16
    once (u = 2^-8: rtol = 2·γ_1 = 7.8e-3, one bfloat16 ulp), float16 up to four times in torch's CPU
    kernels (the input cast, the op, an in-place scale, the output; u = 2^-11: rtol = 2·γ_4 = 3.9e-3)."""
    from trainsys.grading._harness import default_tolerance as numpy_default
    from trainsys.tolerance import gamma

    if dtype == torch.bfloat16:
        u = 2.0**-8  # bfloat16 has no NumPy dtype: gamma_1 by hand
        return 2 * u / (1 - u), u / (1 - u)
    if dtype == torch.float16:
        return 2 * gamma(4, np.float16), gamma(4, np.float16)
    return numpy_default(np.dtype(np.float32) if dtype == torch.float32 else np.dtype(np.float64))


def assert_tensor(case: str, what: str, got: Any, expected: torch.Tensor, *, exact: bool = False,
                  rtol: float | None = None, atol: float | None = None) -> None:
    """Type, shape, dtype, device, then values (integers and bools always exactly)."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(f"[{case}] {what} must be a torch.Tensor, got {type(got).__name__}")
    if tuple(got.shape) != tuple(expected.shape):
        raise CheckFailure(f"[{case}] {what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    if got.dtype != expected.dtype:
        raise CheckFailure(f"[{case}] {what} has dtype {got.dtype}, expected {expected.dtype}")
    if got.device != expected.device:
        raise CheckFailure(f"[{case}] {what} is on device {got.device}, expected {expected.device}")
    if expected.device.type == "meta" or expected.numel() == 0:
        return
    g = got.detach().cpu().to(torch.float64).numpy()
    e = expected.detach().cpu().to(torch.float64).numpy()
    if not expected.is_floating_point():
        exact = True
    same_nan = np.isnan(g) == np.isnan(e)
    if not np.all(same_nan):
        raise CheckFailure(f"[{case}] {what} has NaN where the reference has none (or the reverse)")
    err = np.where(np.isnan(e), 0.0, np.abs(g - e))
    err = np.where(np.isinf(e) & (g == e), 0.0, err)
    if exact:
        bad = err > 0
    else:
        d_rtol, d_atol = default_tolerance(expected.dtype)
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
        bad = err > atol + rtol * np.abs(np.where(np.isfinite(e), e, 0.0))
    if np.any(bad):
        idx = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), g.shape)
        raise CheckFailure(f"[{case}] {what} differs from the reference in {int(bad.sum())} of {bad.size} entries; "
                           f"worst at index {tuple(int(i) for i in idx)}: got {float(g[idx])!r}, "
                           f"expected {float(e[idx])!r}")


def assert_state(case: str, what: str, got: Any, expected: Mapping[str, torch.Tensor], **tolerance: Any) -> None:
    """Compare a state dict key by key (same key set; every tensor as :func:`assert_tensor`)."""
    if not isinstance(got, Mapping):
        raise CheckFailure(f"[{case}] {what} must be a dict of tensors, got {type(got).__name__}")
    if set(got) != set(expected):
        extra = sorted(map(str, set(got) - set(expected)))
        raise CheckFailure(f"[{case}] {what} must have exactly the keys {sorted(expected)}; "
                           f"missing {sorted(set(expected) - set(got))}, unexpected {extra}")
    for key in expected:
        assert_tensor(case, f"{what}[{key!r}]", got[key], expected[key], **tolerance)


def assert_real(case: str, what: str, got: Any, expected: float, *, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    """A real number (Python or NumPy scalar, or a 0-d tensor) close to ``expected``."""
    if isinstance(got, torch.Tensor) and got.ndim == 0:
        got = got.item()
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, numbers.Real):
        raise CheckFailure(f"[{case}] {what} must be a real number, got {type(got).__name__}")
    if not abs(float(got) - expected) <= atol + rtol * abs(expected):
        raise CheckFailure(f"[{case}] {what} is {float(got)!r}, expected {expected!r}")


def assert_equal(case: str, what: str, got: Any, expected: Any) -> None:
    """Exact equality of plain values (ints, lists of ints, strings, None)."""
    try:
        same = type(got) is not bool and got == expected if type(expected) is not bool else got is expected
        same = same if isinstance(same, bool) else False
    except Exception:  # noqa: BLE001 - an incomparable value is a wrong value
        same = False
    if not same:
        raise CheckFailure(f"[{case}] {what} is {got!r}, expected {expected!r}")


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two CPU tensors use the same storage (meta tensors never do)."""
    if a.device.type == "meta" or b.device.type == "meta":
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of a model's state dict (for before/after comparisons)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def training_flags(model: nn.Module) -> list[bool]:
    return [m.training for m in model.modules()]


def _snapshot(value: Any) -> Any:
    if isinstance(value, nn.Module):
        return ("module", model_state(value), training_flags(value))
    return copy.deepcopy(value)


def assert_unchanged(case: str, what: str, before: Any, after: Any) -> None:
    """Fail when an input the contract leaves alone was mutated (tensors, models, datasets, dicts, lists)."""
    msg = f"[{case}] the function modified its input {what} in place"
    if isinstance(before, tuple) and len(before) == 3 and before[0] == "module" and isinstance(after, nn.Module):
        if training_flags(after) != before[2]:
            raise CheckFailure(f"{msg}: its training/eval mode changed (restore the mode you found)")
        now = model_state(after)
        for key, tensor in before[1].items():
            if key not in now or not torch.equal(now[key], tensor):
                raise CheckFailure(f"{msg}: model.state_dict()[{key!r}] changed")
        return
    if isinstance(before, torch.Tensor):
        if isinstance(after, torch.Tensor) and before.device.type != "meta" and not torch.equal(
                torch.nan_to_num(before.detach()), torch.nan_to_num(after.detach())):
            raise CheckFailure(msg)
        return
    if isinstance(before, LabelledDataset):
        assert_unchanged(case, f"{what}.features", before.features, after.features)
        assert_unchanged(case, f"{what}.labels", before.labels, after.labels)
        return
    if isinstance(before, np.random.Generator):
        if before.bit_generator.state != after.bit_generator.state:
            raise CheckFailure(f"{msg}: the generator was advanced")
        return
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        if list(before) != list(after):
            raise CheckFailure(f"{msg}: its keys changed")
        for key in before:
            assert_unchanged(case, f"{what}[{key!r}]", before[key], after[key])
        return
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)):
        if len(before) != len(after):
            raise CheckFailure(f"{msg}: its length changed")
        for i, (b, a) in enumerate(zip(before, after)):
            assert_unchanged(case, f"{what}[{i}]", b, a)


def run_torch_cases(
    name: str,
    fn: Callable[..., Any],
    reference: Callable[..., Any],
    cases: list[tuple[str, Callable[[], Args]]],
    compare: Callable[..., None],
    invalid: list[tuple[str, tuple[type[BaseException], ...], str, Callable[[], Args]]] = (),
    *,
    mutable: tuple[int, ...] = (),
    compare_with_inputs: bool = False,
    count_only: bool = False,
) -> str | int:
    """:func:`~trainsys.grading._harness.run_cases` for torch arguments (see the module docstring).

    Positional arguments not listed in ``mutable`` must come back unchanged; the global torch RNG
    state must be the same after the student's call as before. With ``count_only`` the number of
    cases run is returned instead of the summary (to combine several runs in one check).
    """
    return run_cases(name, fn, reference, cases, compare, invalid, mutable=mutable,
                     compare_with_inputs=compare_with_inputs, snapshot=_snapshot, unchanged=assert_unchanged,
                     student_call=_call_keeping_global_rng, count_only=count_only)


def _call_keeping_global_rng(fn: Callable[..., Any], label: str, *args: Any, **kwargs: Any) -> Any:
    """The student's call; fails the case if it drew from (or re-seeded) torch's global generator."""
    rng_state = torch.get_rng_state()
    got = call(fn, label, *args, **kwargs)
    if not torch.equal(rng_state, torch.get_rng_state()):
        raise CheckFailure(f"[{label}] the function drew from (or re-seeded) torch's global random "
                           "generator; use a torch.Generator seeded from the seed argument")
    return got


def guarded(fn: Callable[..., Any], label: str, *args: Any, **kwargs: Any) -> Any:
    """Call the student's function from inside a compare step: quiet, failures named by ``label``."""
    with quiet():
        return call(fn, label, *args, **kwargs)


def row_index(dataset: LabelledDataset) -> dict[bytes, int]:
    """Map each feature row's bytes to its index (rows of Gaussian features are distinct)."""
    return {row.numpy().tobytes(): i for i, row in enumerate(dataset.features)}


def rows_to_indices(case: str, what: str, lookup: dict[bytes, int], features: torch.Tensor) -> list[int]:
    """The original indices of ``features``' rows; fail when a row is not in the dataset."""
    out = []
    for row in features:
        key = row.detach().numpy().tobytes()
        if key not in lookup:
            raise CheckFailure(f"[{case}] {what} holds a row that is not in the dataset")
        out.append(lookup[key])
    return out
