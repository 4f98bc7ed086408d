"""The student process: runs the student's cells, then calls the graded function for the grader.

Started by :class:`~trainsys.autograde.isolation.StudentProcess` (``python -I -c "from …student_side import
student_process_main; student_process_main()"``) in the sandbox, whose view of the package replaces a graded
function's definitions everywhere: so the entry point bears a name no lesson grades. It reads the cells over
stdin, runs them as a kernel would (IPython syntax translated, a failing cell does not stop the next,
``get_ipython`` and ``display`` present), reports which guarded objects (:data:`GUARDED_MODULES`) the
student's code replaced, then serves calls of the graded function: it only ever sends data back
(:mod:`trainsys.autograde.wire`, the messages of :mod:`trainsys.autograde.protocol`), and nothing it sends is
trusted by the grader.

What a call did is sent back with its result: the arguments after the call, their objects from before the
call marked (:func:`_mark_kept`); parts of the result that are, or view, the arguments as references to them
(:func:`_encode_result`); a 0-d tensor whose graph reaches the arguments' parameters as its value and
gradients (:func:`_graph`).
"""

from __future__ import annotations

import builtins
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from trainsys.autograde import wire
from trainsys.autograde.protocol import GRAPH_TAG, global_generators, set_global_generators, shared_types
from trainsys.autograde.wire import Alias, Kept, Same, View, WireError
from trainsys.notebook import ipython_to_python

GUARDED_MODULES = ("numpy", "numpy.testing", "trainsys.grading", "trainsys.grading._harness", "builtins")
GUARDED_NAMES = {
    "numpy": ("allclose", "isclose", "array_equal", "abs", "all", "any", "isnan", "isfinite", "max", "where"),
    "builtins": ("abs", "isinstance", "len", "getattr", "print", "float", "int", "type", "callable"),
}


# --- what a call did to its arguments ----------------------------------------------------------------
def _walk(obj: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every container and array reachable from ``obj`` with its path of keys/indices."""
    yield path, obj
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _walk(value, (*path, key))
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            yield from _walk(value, (*path, index))


def _leaves(args: Any) -> list[tuple[tuple, str | None, Any]]:
    """Tensors a result's graph may reach: ``(path, parameter name or None, tensor)``."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    found = []
    for path, obj in _walk(args):
        if isinstance(obj, torch.nn.Module):
            found += [(path, name, p) for name, p in obj.named_parameters() if p.requires_grad]
        elif isinstance(obj, torch.Tensor) and obj.requires_grad and obj.is_leaf:
            found.append((path, None, obj))
    return found


def _encode_result(result: Any, args: Any) -> Any:
    """Replace objects of ``result`` that are (or view) parts of ``args`` by references to them, and an
    object met twice in the result by a reference to its first place (``cache["logits"] is logits``)."""
    by_id = {id(o): p for p, o in _walk(args) if isinstance(o, shared_types())}
    arrays = [(p, o) for p, o in _walk(args) if isinstance(o, np.ndarray)]
    torch = sys.modules.get("torch")
    seen: dict[int, tuple] = {}

    def encode(obj: Any, path: tuple) -> Any:
        if id(obj) in by_id:
            return Alias(by_id[id(obj)])
        if isinstance(obj, shared_types()):
            if id(obj) in seen:
                return Same(seen[id(obj)])
            seen[id(obj)] = path
        if isinstance(obj, np.ndarray):
            for base_path, base in arrays:
                if base.size and obj.size and np.shares_memory(obj, base):
                    offset = obj.__array_interface__["data"][0] - base.__array_interface__["data"][0]
                    return View(base_path, offset, obj.shape, obj.strides, obj.dtype.str)
            return obj
        if torch is not None and isinstance(obj, torch.Tensor) and obj.grad_fn is not None and obj.ndim == 0:
            return _graph(torch, obj, args)
        if isinstance(obj, dict):
            return {k: encode(v, (*path, k)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [encode(v, (*path, i)) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return tuple(encode(v, (*path, i)) for i, v in enumerate(obj))
        return obj

    return encode(result, ())


def _graph(torch: Any, loss: Any, args: Any) -> dict:
    """A scalar with a graph: its value and its gradient with respect to each leaf of the arguments."""
    leaves = _leaves(args)
    grads = torch.autograd.grad(loss, [t for _, _, t in leaves], allow_unused=True) if leaves else []
    return {GRAPH_TAG: True, "value": loss.detach(),
            "grads": [[list(path), name, g] for (path, name, _), g in zip(leaves, grads) if g is not None]}


def _mark_kept(args: Any, originals: dict[int, tuple]) -> Any:
    """The arguments after the call, each object that was there before the call wrapped in ``Kept``.

    ``originals`` maps ``id`` → path of every mutable object of the arguments *before* the call (the
    caller keeps those objects alive, so ids cannot be reused). The caller then updates its own
    objects in place where the student did, and takes the new objects where the student replaced one
    (``acc[k] = acc[k] + g`` is a new array, not an in-place update, and must look like one).
    """
    def mark(obj: Any) -> Any:
        if isinstance(obj, dict):
            inner: Any = {k: mark(v) for k, v in obj.items()}
        elif isinstance(obj, list):
            inner = [mark(v) for v in obj]
        elif isinstance(obj, tuple):
            inner = tuple(mark(v) for v in obj)
        else:
            inner = obj
        path = originals.get(id(obj))
        return Kept(path, inner) if path is not None and isinstance(obj, shared_types()) else inner

    return mark(args)


# --- running the cells and serving calls ------------------------------------------------------------------
def _guarded_objects() -> dict[str, Any]:
    import importlib

    found = {}
    for module_name in GUARDED_MODULES:
        module = importlib.import_module(module_name)
        names = GUARDED_NAMES.get(module_name) or [n for n in dir(module) if not n.startswith("__")]
        for name in names:
            if hasattr(module, name):
                found[f"{module_name}.{name}"] = (module, name, getattr(module, name))
    return found


class _NoShell:
    """What ``get_ipython()`` gives the student's cells here: line magics and shell commands do nothing,
    a cell magic (``%%time``, ``%%capture``) runs its cell's body, as the kernel would."""

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace

    def get(self) -> _NoShell:
        return self

    def run_line_magic(self, *args: Any, **kwargs: Any) -> None:
        return None

    def run_cell_magic(self, name: str, line: str, cell: str) -> None:
        exec(compile(ipython_to_python(cell), "<cell magic>", "exec"), self.namespace)

    def system(self, *args: Any, **kwargs: Any) -> None:
        return None

    getoutput = system


def _display(*objects: Any, **kwargs: Any) -> None:  # pragma: no cover - runs in the student process
    """The kernel's ``display``: here its output goes nowhere."""
    return None


def student_process_main() -> None:  # pragma: no cover - runs in the student process
    """Execute the student's cells, then serve calls of the named functions until the channel closes.

    Nothing here is trusted by the grader: it only ever reads data from this process.
    """
    stdin, stdout = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # student prints (even from C code) must not reach the channel
    sys.stdout = sys.stderr
    is_, getattr_ = (lambda a, b: a is b), builtins.getattr
    request = wire.receive(stdin)
    originals = _guarded_objects()

    def tampered() -> list[str]:
        return sorted(k for k, (module, name, obj) in originals.items()
                      if not is_(getattr_(module, name, None), obj))

    namespace: dict[str, Any] = {"__name__": "__main__"}
    namespace["get_ipython"] = _NoShell(namespace).get
    namespace["display"] = _display  # a kernel builtin, as common in an answer cell as print
    first_error = None
    for index, source in enumerate(request["cells"]):  # like a kernel: a failing cell does not stop the next
        try:
            exec(compile(ipython_to_python(source), f"<cell {index}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001 - report whatever the student code raised
            first_error = first_error or f"{type(exc).__name__}: {exc}"
    functions = {name: namespace.get(name) for name in request["names"]}
    missing = [name for name, fn in functions.items() if not callable(fn)]
    status = {"ok": not missing, "error": (first_error or f"{missing[0]} is not defined") if missing else None}
    wire.send(stdout, {**status, "tampered": tampered()})
    while not missing:
        try:
            request = wire.receive(stdin)
        except EOFError:
            return
        fn, args, kwargs = functions[request["name"]], request["args"], request["kwargs"]
        if "generators" in request:
            set_global_generators(request["generators"])
        objects = [(p, o) for p, o in _walk((args, kwargs)) if len(p) >= 2 and isinstance(o, shared_types())]
        originals = {id(o): p for p, o in objects}  # ``objects`` keeps them alive: no id is reused
        traced = False
        if request.get("measure"):  # the grader measures this process's peak memory around the call
            wire.send(stdout, {"ready": True})
            traced = bool(wire.receive(stdin).get("tracemalloc"))
        try:
            if traced:
                import tracemalloc

                tracemalloc.start()
                start, _ = tracemalloc.get_traced_memory()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    result = fn(*args, **kwargs)
            finally:
                if traced:
                    peak = tracemalloc.get_traced_memory()[1] - start
                    tracemalloc.stop()
                if request.get("measure"):
                    wire.send(stdout, {"done": True})
                    wire.receive(stdin)
            reply = {"ok": True, "result": _encode_result(result, (args, kwargs)),
                     "args": _mark_kept((args, kwargs), originals), "generators": global_generators(),
                     "warnings": [[w.category.__name__, str(w.message)[:500]] for w in caught[:20]]}
            if traced:
                reply["peak"] = peak
            data = wire.dumps(reply)
        except BaseException as exc:  # noqa: BLE001 - whatever the call raised, or a result we cannot send
            kind = "TypeError" if isinstance(exc, WireError) else type(exc).__name__
            message = f"the result cannot be sent back: {exc}" if isinstance(exc, WireError) else str(exc)
            failure = {"ok": False, "type": kind, "message": message[:2000]}
            try:  # what the call did to its arguments before it raised (a generator it advanced, …)
                data = wire.dumps({**failure, "args": _mark_kept((args, kwargs), originals),
                                   "generators": global_generators()})
            except BaseException:  # noqa: BLE001 - arguments we cannot send back: the failure alone
                data = wire.dumps(failure)
        stdout.write(data)
        stdout.flush()
