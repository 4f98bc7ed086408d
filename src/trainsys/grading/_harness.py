"""The machinery every ``check_<function>`` is built from.

A check calls the student's function on named cases, compares each result with the reference
implementation, and raises ``AssertionError`` with a message that names the case, the quantity and
how it differs. Checks are quiet: library warnings are suppressed and nothing reaches stderr, since
nbgrader scores a test cell that writes to stderr as failed.
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np


BAD = (TypeError, ValueError)
"""What an invalid-input case accepts: the contract says TypeError or ValueError, naming the argument."""


class CheckFailure(AssertionError):
    """A graded check failed; the message says on which case and how."""


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence warnings and stderr (floating-point warnings included) for the duration of a check."""
    with warnings.catch_warnings(), np.errstate(all="ignore"), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def peak_of_call(fn: Callable[..., Any], case: str, *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``(result, peak bytes)`` of the student's call, failures as in :func:`call`.

    In the notebook kernel the peak is ``tracemalloc``'s (every NumPy buffer allocated during the call
    and alive at its worst moment). When the grader calls a function that lives in a sandboxed process
    (``trainsys.autograde.isolation.RemoteFunction``), that process's peak resident memory over the call
    is measured by the operating system instead, out of the student code's reach. Compare it with the
    reference measured the same way (:func:`reference_peak`), never with an absolute number.
    """
    measure = getattr(fn, "peak_memory", None)
    if measure is None:
        from trainsys.memtrain.measure import peak_memory_bytes

        return peak_memory_bytes(call, fn, case, *args, **kwargs)
    return call(measure, case, *args, **kwargs)


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"


def assert_peak_within(fn: Callable[..., Any], case: str, reference: Callable[..., Any], args: tuple,
                       factor: float, slack: int, advice: str) -> None:
    """Fail ``case`` when the student's peak memory exceeds ``factor`` times the reference's plus ``slack`` bytes.

    Both are measured the same way (:func:`peak_of_call`; the reference in this process with
    ``tracemalloc``); the caller justifies ``factor`` and ``slack`` from what the reference holds at its peak
    and what the mistake the case exposes would add. ``advice`` says what to change.
    """
    from trainsys.memtrain.measure import peak_memory_bytes

    with quiet():
        _, expected = peak_memory_bytes(reference, *args)
        _, got = peak_of_call(fn, case, *args)
    limit = factor * expected + slack
    if got > limit:
        raise CheckFailure(f"[{case}] peak memory {_size(got)}, expected at most {_size(limit)} (the reference needs "
                           f"{_size(expected)}): {advice}")


def call(fn: Callable[..., Any], case: str, *args: Any, **kwargs: Any) -> Any:
    """Call the student's ``fn``, turning any exception it raises into a failure of ``case``.

    The arguments are passed as they are, so that the check can compare them afterwards with a
    snapshot and catch a function that mutates its inputs.
    """
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailure(f"[{case}] the function is not implemented yet (it raised NotImplementedError)") from None
    except Exception as exc:  # noqa: BLE001 - any student exception is a failed case
        raise CheckFailure(f"[{case}] raised {type(exc).__name__}: {exc}") from None


def _expect_refusal(fn: Callable[..., Any], case: str, errors: tuple[type[BaseException], ...],
                    unnamed: Callable[[str], str | None], args: tuple, kwargs: dict) -> None:
    """``fn(*args, **kwargs)`` must raise one of ``errors``; ``unnamed(message)`` says what the message lacks."""
    names = " or ".join(e.__name__ for e in errors)
    try:
        fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailure(f"[{case}] the function is not implemented yet (it raised NotImplementedError)") from None
    except errors as exc:
        lacking = unnamed(str(exc))
        if lacking:
            raise CheckFailure(f"[{case}] raised {type(exc).__name__} as it should, but its message {str(exc)!r} "
                               f"{lacking}") from None
        return
    except Exception as exc:  # noqa: BLE001
        raise CheckFailure(f"[{case}] must raise {names}, but raised {type(exc).__name__}: {exc}") from None
    raise CheckFailure(f"[{case}] must raise {names} for this invalid input, but returned normally")


def expect_raises(
    fn: Callable[..., Any],
    case: str,
    errors: tuple[type[BaseException], ...],
    argument: str | tuple[str, ...],
    *args: Any,
    **kwargs: Any,
) -> None:
    """Require ``fn(*args)`` to reject its input with one of ``errors`` whose message names ``argument``.

    ``argument`` may also be a tuple of strings, all of which the message must contain (the argument
    and what the contract says the message shows: an index such as ``shards[1]``, both counts, a key).
    """
    def unnamed(message: str) -> str | None:
        if isinstance(argument, tuple):
            missing = [part for part in argument if part not in message]
            return (f"does not show {', '.join(map(repr, missing))} (it must name {', '.join(map(repr, argument))})"
                    if missing else None)
        return None if argument in message else f"does not name the argument {argument!r}"

    _expect_refusal(fn, case, errors, unnamed, args, kwargs)


def expect_raises_naming_any(
    fn: Callable[..., Any],
    case: str,
    errors: tuple[type[BaseException], ...],
    names: tuple[str, ...],
    *args: Any,
    **kwargs: Any,
) -> None:
    """Like :func:`expect_raises`, but the message must name at least one of ``names``: for inputs where
    the contract leaves the culprit open (two arrays that disagree, an inconsistent cache), any of the
    arrays involved may be named — only an anonymous error (NumPy's own broadcasting or matmul message)
    fails."""
    def unnamed(message: str) -> str | None:
        if any(name in message for name in names):
            return None
        return (f"names none of {', '.join(map(repr, names))}: validate the shapes yourself and say which "
                "argument is wrong")

    _expect_refusal(fn, case, errors, unnamed, args, kwargs)


def default_tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing results computed in ``dtype`` by two correct implementations.

    Derived with :mod:`trainsys.tolerance` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd
    ed., §3.1 and Lemma 3.3): two answers that round ``k`` times along each path, in any order, differ by at
    most ``2·γ_k·M``, ``M`` the computation on absolute values. The checks that use this default compare
    results whose longest chain is ``k ≤ 170`` roundings (sums of at most ~100 products of order-1 values,
    plus the layers before them), and whose ``M`` is at most the result's own size where the result is
    larger than 0.1, or at most 0.1 where it cancels towards 0:

    - float32 (u = 6.0e-8): rtol = 2·γ_170 = 2.0e-5, atol = 2·γ_170·0.1 = 2.0e-6.
    - float16 (u = 4.9e-4): results are formed in float32 and rounded once (k = 2 in float16):
      rtol = atol = 2·γ_2 = 2.0e-3.
    - float64 (u = 1.1e-16): 2·γ_170 is 3.8e-14; rtol 1e-10 and atol 1e-12 allow M up to ~3,000 times the
      result (float64 cases built to show cancellation), and still reject every mutant and witness
      (``make bench``). Checks whose contracts state a tighter bound pass their own tolerance; checks whose
      magnitudes are at hand use :func:`assert_within_rounding` (elementwise, no assumption on ``M``).
    """
    from trainsys.tolerance import gamma

    if dtype == np.float16:
        return 2 * gamma(2, np.float16), 2 * gamma(2, np.float16)
    if dtype == np.float32:
        return 2 * gamma(170, np.float32), 2 * gamma(170, np.float32) * 0.1
    return 1e-10, 1e-12


def assert_array(
    case: str,
    what: str,
    got: Any,
    expected: np.ndarray,
    *,
    rtol: float | None = None,
    atol: float | np.ndarray | None = None,
    exact: bool = False,
    check_dtype: bool = True,
) -> None:
    """Compare one array with the reference: type, shape, dtype, then values (exactly or to tolerance)."""
    if not isinstance(got, np.ndarray):
        raise CheckFailure(f"[{case}] {what} must be a numpy.ndarray, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise CheckFailure(f"[{case}] {what} has shape {got.shape}, expected {expected.shape}")
    if check_dtype and got.dtype != expected.dtype:
        raise CheckFailure(f"[{case}] {what} has dtype {got.dtype}, expected {expected.dtype}")
    if expected.size == 0:
        return
    got64 = got.astype(np.float64)
    exp64 = expected.astype(np.float64)
    same_nan = np.isnan(got64) == np.isnan(exp64)
    if not np.all(same_nan):
        idx = np.unravel_index(int(np.argmin(same_nan)), got.shape)
        raise CheckFailure(f"[{case}] {what}[{idx}] is {float(got64[idx])}, expected {float(exp64[idx])} (NaN mismatch)")
    finite = ~np.isnan(exp64)
    err = np.where(finite, np.abs(got64 - exp64), 0.0)
    if exact:
        bad = err > 0
    else:
        default_rtol, default_atol = default_tolerance(expected.dtype)
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
        scale = atol + rtol * np.abs(exp64)
        bad = err > scale
    if np.any(bad):
        idx = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), got.shape)
        raise CheckFailure(
            f"[{case}] {what} differs from the reference in {int(bad.sum())} of {bad.size} entries; "
            f"worst at index {tuple(int(i) for i in idx)}: got {float(got64[idx])!r}, expected {float(exp64[idx])!r} "
            f"(|difference| {err[idx]:.3g})"
        )


def assert_within_rounding(case: str, what: str, got: Any, expected: np.ndarray, magnitude: Any, k: int) -> None:
    """Compare like :func:`assert_array` (type, shape, dtype, NaN positions), with values allowed to differ by
    what two correct computations of ``k`` roundings in ``expected``'s dtype may differ by, elementwise:
    ``2·γ_k·magnitude`` (:func:`trainsys.tolerance.rounding_bound`; ``magnitude`` is the computation on
    absolute values, e.g. ``Σ|a_j|/N`` for a mean). Holds for any summation order on any BLAS."""
    from trainsys.tolerance import rounding_bound

    if not isinstance(expected, np.ndarray):
        raise TypeError(f"expected must be a numpy.ndarray, got {type(expected).__name__}")
    magnitude = np.asarray(magnitude, dtype=np.float64)
    # a non-finite magnitude (an inf or NaN entry) gives no slack: such entries must match exactly
    bound = rounding_bound(np.where(np.isfinite(magnitude), magnitude, 0.0), k, expected.dtype)
    assert_array(case, what, got, expected, rtol=0.0, atol=bound)


_MLP_LAYERS = (("W1", 0, "W"), ("b1", 0, "b"), ("W2", 1, "W"), ("b2", 1, "b"))


def assert_mlp_gradients_within_bound(case: str, what: str, got: Any, expected: Mapping[str, np.ndarray],
                                      params: Mapping[str, np.ndarray], X: np.ndarray, Y: np.ndarray, *,
                                      scale: float | None = None, extra: int = 0, lr: float | None = None) -> None:
    """Part 1's two-layer MLP: ``got`` (a gradient tree, or with ``lr`` the new parameters ``θ − lr·g``) against
    the reference's, within the derived bound of two correct float computations
    (``trainsys.tolerance.mse_gradient_bound`` with ``G = scale·(ŷ − Y)``, ``scale`` 2/Y.size by default, and
    ``extra`` roundings for shard or micro-batch sums and scalings a correct answer may place differently;
    with ``lr``, ``sgd_update_bound`` for the update's own roundings)."""
    from trainsys.tolerance import mse_gradient_bound, sgd_update_bound

    if not isinstance(got, Mapping) or set(got) != set(expected):
        assert_array_dict(case, what, got, expected)  # the type and keys message
    dtype = expected["W1"].dtype
    bounds = mse_gradient_bound([params["W1"], params["W2"]], [params["b1"], params["b2"]], X, Y, dtype,
                                scale=scale, extra_roundings=extra)
    for key, layer, part in _MLP_LAYERS:
        bound = bounds[layer][part]
        if lr is not None:
            grad = (np.asarray(params[key], np.float64) - expected[key]) / lr
            bound = sgd_update_bound(params[key], grad, bound, lr, dtype)
        assert_array(case, f"{what}[{key!r}]", got[key], expected[key], rtol=0.0, atol=bound)


def assert_scalar(case: str, what: str, got: Any, expected: float, *, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    """Compare a real-valued scalar with the reference."""
    if isinstance(got, np.ndarray) and got.shape == ():
        got = got.item()
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, float, np.floating, np.integer)):
        raise CheckFailure(f"[{case}] {what} must be a real number, got {type(got).__name__}")
    got = float(got)
    if not abs(got - expected) <= atol + rtol * abs(expected):
        raise CheckFailure(f"[{case}] {what} is {got!r}, expected {expected!r} (|difference| {abs(got - expected):.3g})")


def assert_tuple(case: str, what: str, got: Any, length: int) -> tuple:
    """Require a tuple (or list) of ``length`` items, as the contract says the function returns."""
    if not isinstance(got, (tuple, list)) or len(got) != length:
        kind = f"{type(got).__name__} of length {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
        raise CheckFailure(f"[{case}] {what} must be a tuple of {length} items, got {kind}")
    return tuple(got)


def assert_array_dict(
    case: str, what: str, got: Any, expected: Mapping[str, np.ndarray], **tolerance: Any
) -> None:
    """Compare a dict of arrays (parameters, gradients, a cache) key by key with the reference."""
    if not isinstance(got, Mapping):
        raise CheckFailure(f"[{case}] {what} must be a dict, got {type(got).__name__}")
    if set(got) != set(expected):
        raise CheckFailure(
            f"[{case}] {what} must have exactly the keys {sorted(expected)}, got {sorted(map(str, got))}"
        )
    for key in expected:
        assert_array(case, f"{what}[{key!r}]", got[key], expected[key], **tolerance)


_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic, np.dtype, type)
_READ_ONLY = "the contract says the input is read, never written"


def assert_unchanged(case: str, what: str, before: Any, after: Any) -> None:
    """Fail when the student's function changed an input it promised to leave alone.

    ``after`` (the argument after the call) must equal ``before`` (a snapshot, or a fresh build of it):
    same types, dict keys, list and tuple lengths, array dtypes, shapes and values, same plain values
    inside (a step counter bumped in the caller's dict). A shape tuple replaced by an array, an array cast
    to another dtype, a list reversed or popped are all changes. Other objects (generators, modules) are
    compared by the checks that own them.
    """
    if type(before) is not type(after):
        raise CheckFailure(f"[{case}] {what} was replaced: it was a {type(before).__name__}, after the call it is a "
                           f"{type(after).__name__}; {_READ_ONLY}")
    if isinstance(before, Mapping):
        if set(before) != set(after):
            raise CheckFailure(f"[{case}] the keys of {what} changed from {sorted(map(str, before))} to "
                               f"{sorted(map(str, after))}; {_READ_ONLY}")
        for key in before:
            assert_unchanged(case, f"{what}[{key!r}]", before[key], after[key])
    elif isinstance(before, (list, tuple)):
        if len(before) != len(after):
            raise CheckFailure(f"[{case}] {what} had {len(before)} items, after the call {len(after)}; {_READ_ONLY}")
        for i, (b, a) in enumerate(zip(before, after)):
            assert_unchanged(case, f"{what}[{i}]", b, a)
    elif isinstance(before, np.ndarray):
        if before.dtype != after.dtype or before.shape != after.shape or \
                not np.array_equal(before, after, equal_nan=True):
            raise CheckFailure(f"[{case}] the function modified its input {what} in place (dtype, shape or values); "
                               "it must return new arrays")
    elif isinstance(before, _SCALARS) and not (before == after or (before != before and after != after)):
        raise CheckFailure(f"[{case}] {what} was changed from {before!r} to {after!r}; {_READ_ONLY}")


def against_fresh_inputs(cases: list[tuple[str, Callable[[], Args]]]) -> Callable[[str, Args], None]:
    """``unchanged(label, inputs)`` for ``run_cases``' ``compare``: every argument after the call against a
    fresh build of the case's inputs (for inputs a deep copy cannot snapshot faithfully)."""
    factories = dict(cases)

    def unchanged(label: str, inputs: Args) -> None:
        for i, (b, a) in enumerate(zip(factories[label]()[0], inputs[0])):
            assert_unchanged(label, f"argument {i + 1}", b, a)

    return unchanged


def rng_for(case_index: int, salt: int) -> np.random.Generator:
    """A generator seeded per check and per case, so every case is reproducible on its own."""
    return np.random.default_rng([salt, case_index])


def passed(name: str, cases: int) -> str:
    """The message a passing check returns (and prints in the notebook)."""
    return f"{name}: all {cases} cases passed"


Args = tuple[tuple[Any, ...], dict[str, Any]]


def run_cases(
    name: str,
    fn: Callable[..., Any],
    reference: Callable[..., Any],
    cases: list[tuple[str, Callable[[], Args]]],
    compare: Callable[[str, Any, Any], None],
    invalid: list[tuple[str, tuple[type[BaseException], ...], str, Callable[[], Args]]] = (),
    *,
    mutable: tuple[int, ...] = (),
    compare_with_inputs: bool = False,
    snapshot: Callable[[Any], Any] = copy.deepcopy,
    unchanged: Callable[[str, str, Any, Any], None] | None = None,
    student_call: Callable[..., Any] | None = None,
    count_only: bool = False,
) -> str | int:
    """Run a check: every valid case against the reference, then every invalid input.

    ``cases`` pairs a label with a factory that builds fresh ``(args, kwargs)`` (a factory, so the
    student and the reference each get their own copy and their own generator). ``compare(label,
    got, expected)`` raises :class:`CheckFailure` on a difference. Inputs are compared with a
    snapshot after the student's call, so in-place mutation fails the case — except for the positional
    arguments listed in ``mutable`` (0-based), which the contract says are updated in place. With
    ``compare_with_inputs``, ``compare`` receives a fourth argument: the student's ``(args, kwargs)``
    after the call (to check an in-place update). ``invalid`` entries are ``(label, accepted exception
    types, argument the message must name, factory)``. ``snapshot``, ``unchanged`` and ``student_call``
    let another harness (torch's) supply its own copying, comparison and call guard; with
    ``count_only`` the number of cases is returned instead of the summary.
    """
    unchanged = unchanged or assert_unchanged
    student_call = student_call or call
    if not callable(fn):
        raise CheckFailure(f"{name}: expected a function, got {type(fn).__name__}")
    with quiet():
        for label, make in cases:
            args, kwargs = make()
            before = [snapshot(a) for a in args]
            got = student_call(fn, label, *args, **kwargs)
            for i, (old, new) in enumerate(zip(before, args)):
                if i not in mutable:
                    unchanged(label, f"argument {i + 1}", old, new)
            ref_args, ref_kwargs = make()
            expected = reference(*ref_args, **ref_kwargs)
            if compare_with_inputs:
                compare(label, got, expected, (args, kwargs))
            else:
                compare(label, got, expected)
        for label, errors, argument, make in invalid:
            args, kwargs = make()
            expect_raises(fn, label, errors, argument, *args, **kwargs)
    count = len(cases) + len(invalid)
    return count if count_only else passed(name, count)


def fixed(*args: Any, **kwargs: Any) -> Callable[[], Args]:
    """A case factory: fresh deep copies of fixed arguments, one set for every call."""
    return lambda: copy.deepcopy((args, kwargs))


def assert_contiguous_views(label: str, got: Any, expected: list, X: np.ndarray, Y: np.ndarray, piece: str,
                            rule: str) -> None:
    """``got`` must split ``(X, Y)`` into the pieces of ``expected``: same sizes and values, and views of
    ``X`` and ``Y`` (slicing costs no memory). ``piece`` names a part ("micro-batch", "shard"); ``rule``
    is the size rule quoted when the sizes differ."""
    if not isinstance(got, list):
        raise CheckFailure(f"[{label}] must return a list of (X, Y) pairs, got {type(got).__name__}")
    got_sizes = [len(pair[0]) if isinstance(pair, (tuple, list)) and pair else None for pair in got]
    want_sizes = [len(x) for x, _ in expected]
    if got_sizes != want_sizes:
        raise CheckFailure(f"[{label}] {piece} sizes are {got_sizes}, expected {want_sizes} ({rule})")
    for i, (pair, (x_ref, y_ref)) in enumerate(zip(got, expected)):
        x_i, y_i = assert_tuple(label, f"{piece} {i}", pair, 2)
        assert_array(label, f"X of {piece} {i}", x_i, x_ref, exact=True)
        assert_array(label, f"Y of {piece} {i}", y_i, y_ref, exact=True)
        if not (np.shares_memory(x_i, X) and np.shares_memory(y_i, Y)):
            raise CheckFailure(f"[{label}] {piece} {i} is a copy; slices of X and Y (views) cost no memory")
