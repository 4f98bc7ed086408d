"""The student's function, called from a trusted process across an operating-system boundary.

Inside a notebook kernel, student code runs before the tests and can replace anything: ``numpy``,
``numpy.testing``, ``trainsys.grading``, ``sys.displayhook``. So points are decided elsewhere:

- a **student process**, in the sandbox (:mod:`trainsys.autograde.sandbox`), executes the lesson's
  setup cell and the student's cells, and then only ever *calls the student's function* on the
  arguments it receives and sends back the result;
- the **trusted process** runs the visible tests and ``trainsys.grading.check_<name>`` with a
  :class:`RemoteFunction` standing in for the student's function. The comparison with the
  reference happens in a process where no student code has ever run.

The two talk through :mod:`trainsys.autograde.wire` — data only, never pickle. What a call does to
its arguments comes back too: the arguments after the call are written back into the caller's
objects (in-place updates, an advanced generator, a model's new weights and mode); a result that
*is* an argument, or a view of an argument array, comes back as a reference to the caller's own
object; a 0-d tensor whose autograd graph reaches the arguments' parameters comes back as a tensor
with the same value and the same gradients with respect to the caller's parameters.
"""

from __future__ import annotations

import builtins
import os
import re
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from trainsys.autograde import wire
from trainsys.autograde.sandbox import (
    MEASURABLE_MALLOC,
    Cgroup,
    SandboxConfig,
    describe_limit,
    limit_from_exit,
    memory_cap,
    wrap,
)
from trainsys.autograde.wire import Alias, Kept, Same, View, WireError

GUARDED_MODULES = ("numpy", "numpy.testing", "trainsys.grading", "trainsys.grading._harness", "builtins")
GUARDED_NAMES = {
    "numpy": ("allclose", "isclose", "array_equal", "abs", "all", "any", "isnan", "isfinite", "max", "where"),
    "builtins": ("abs", "isinstance", "len", "getattr", "print", "float", "int", "type", "callable"),
}
EXCEPTIONS = {e.__name__: e for e in (TypeError, ValueError, NotImplementedError, AssertionError, KeyError,
                                      IndexError, ZeroDivisionError, AttributeError, RuntimeError, MemoryError,
                                      OverflowError, FloatingPointError, ArithmeticError, LookupError)}


class IsolationUnavailable(BaseException):
    """The student process gave no usable answer (crashed, garbage on the channel): nothing can be
    concluded about the answer. A ``BaseException``, so that a check's ``except Exception`` does not
    turn it into an ordinary failed case."""


class IsolationTimeout(IsolationUnavailable):
    """The student process did not answer in time (worth one retry with a longer limit)."""


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


def _at(obj: Any, path: tuple) -> Any:
    try:
        for key in path:
            obj = obj[key]
    except (KeyError, IndexError, TypeError) as exc:
        raise WireError(f"a reference to an argument that does not exist: {path!r}") from exc
    return obj


def _shared_types() -> tuple[type, ...]:
    """Objects a function may return or update in place: containers, arrays, generators, torch objects."""
    types: tuple[type, ...] = (dict, list, np.ndarray, np.random.Generator, np.random.RandomState)
    torch = sys.modules.get("torch")
    if torch is not None:
        types += (torch.Tensor, torch.nn.Module, torch.Generator)
    return types


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
    by_id = {id(o): p for p, o in _walk(args) if isinstance(o, _shared_types())}
    arrays = [(p, o) for p, o in _walk(args) if isinstance(o, np.ndarray)]
    torch = sys.modules.get("torch")
    seen: dict[int, tuple] = {}

    def encode(obj: Any, path: tuple) -> Any:
        if id(obj) in by_id:
            return Alias(by_id[id(obj)])
        if isinstance(obj, _shared_types()):
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


GRAPH_TAG = "__trainsys_graph__"


def _graph(torch: Any, loss: Any, args: Any) -> dict:
    """A scalar with a graph: its value and its gradient with respect to each leaf of the arguments."""
    leaves = _leaves(args)
    grads = torch.autograd.grad(loss, [t for _, _, t in leaves], allow_unused=True) if leaves else []
    return {GRAPH_TAG: True, "value": loss.detach(),
            "grads": [[list(path), name, g] for (path, name, _), g in zip(leaves, grads) if g is not None]}


def _rebuild_graph(node: dict, args: Any) -> Any:
    """A tensor equal to the student's scalar whose gradients match the student's, on our own leaves."""
    import torch

    value = node.get("value")
    if not isinstance(value, torch.Tensor) or value.ndim != 0:
        raise WireError("malformed graph result")
    total = value.clone()
    for path, name, grad in node.get("grads", []):
        owner = _at(args, tuple(path))
        leaf = dict(owner.named_parameters()).get(name) if name is not None else owner
        if not isinstance(leaf, torch.Tensor) or not isinstance(grad, torch.Tensor) or grad.shape != leaf.shape:
            raise WireError("malformed gradient in a graph result")
        term = (leaf * grad.to(leaf.dtype)).sum()
        total = total + (term - term.detach())
    return total


def _decode_result(result: Any, args: Any, path: tuple = (), seen: dict | None = None) -> Any:
    """The caller's view of a result encoded by :func:`_encode_result` (same traversal order)."""
    seen = {} if seen is None else seen
    if isinstance(result, Same):
        if result.path not in seen:
            raise WireError("a reference to a part of the result that comes later or does not exist")
        return seen[result.path]
    value = _decode_one(result, args, path, seen)
    if isinstance(value, _shared_types()):
        seen.setdefault(path, value)
    return value


def _decode_one(result: Any, args: Any, path: tuple, seen: dict) -> Any:
    if isinstance(result, Alias):
        return _at(args, result.path)
    if isinstance(result, View):  # the same view of the caller's own array
        base = _at(args, result.path)
        if not isinstance(base, np.ndarray):
            raise WireError("a view of something that is not an array")
        root = base
        while isinstance(root.base, np.ndarray):
            root = root.base
        offset = base.__array_interface__["data"][0] - root.__array_interface__["data"][0] + result.offset
        dtype = np.dtype(result.dtype)
        if dtype.hasobject or len(result.shape) != len(result.strides) or any(n < 0 for n in result.shape):
            raise WireError("malformed view")
        lo = offset + sum(s * (n - 1) for s, n in zip(result.strides, result.shape) if s < 0 and n > 0)
        hi = offset + sum(s * (n - 1) for s, n in zip(result.strides, result.shape) if s > 0 and n > 0)
        if 0 in result.shape:
            return np.empty(result.shape, dtype)
        if lo < 0 or hi + dtype.itemsize > root.nbytes:
            raise WireError("a view outside its base array")
        return np.ndarray(result.shape, dtype=dtype, buffer=root, offset=offset, strides=result.strides)
    if isinstance(result, dict):
        if result.get(GRAPH_TAG) is True:
            return _rebuild_graph(result, args)
        return {k: _decode_result(v, args, (*path, k), seen) for k, v in result.items()}
    if isinstance(result, list):
        return [_decode_result(v, args, (*path, i), seen) for i, v in enumerate(result)]
    if isinstance(result, tuple):
        return tuple(_decode_result(v, args, (*path, i), seen) for i, v in enumerate(result))
    return result


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
        return Kept(path, inner) if path is not None and isinstance(obj, _shared_types()) else inner

    return mark(args)


def _restore(node: Any, root: Any) -> Any:
    """The caller's object for one node of the arguments after the call (see :func:`_mark_kept`)."""
    if isinstance(node, Kept):
        original = _at(root, node.path)
        _update_in_place(original, node.value, root)
        return original
    if isinstance(node, dict):
        return {k: _restore(v, root) for k, v in node.items()}
    if isinstance(node, list):
        return [_restore(v, root) for v in node]
    if isinstance(node, tuple):
        return tuple(_restore(v, root) for v in node)
    return node


def _update_in_place(target: Any, value: Any, root: Any) -> None:
    """Make the caller's ``target`` hold what the student's same object held after the call."""
    torch = sys.modules.get("torch")
    if isinstance(target, dict) and isinstance(value, dict):
        items = [(k, _restore(v, root)) for k, v in value.items()]
        target.clear()
        target.update(items)
    elif isinstance(target, list) and isinstance(value, list):
        target[:] = [_restore(v, root) for v in value]
    elif isinstance(target, np.random.Generator) and isinstance(value, np.random.Generator):
        target.bit_generator.state = value.bit_generator.state
    elif isinstance(target, np.random.RandomState) and isinstance(value, np.random.RandomState):
        target.set_state(value.get_state())
    elif isinstance(target, np.ndarray) and isinstance(value, np.ndarray):
        if target.shape == value.shape and target.flags.writeable:
            np.copyto(target, value, casting="unsafe")
    elif torch is not None and isinstance(target, torch.Generator) and isinstance(value, torch.Generator):
        target.set_state(value.get_state())
    elif torch is not None and isinstance(target, torch.nn.Module) and isinstance(value, torch.nn.Module):
        mine_state, theirs_state = target.state_dict(keep_vars=True), value.state_dict(keep_vars=True)
        with torch.no_grad():
            for key, tensor in mine_state.items():
                new = theirs_state.get(key)
                if isinstance(new, torch.Tensor) and new.shape == tensor.shape:
                    tensor.copy_(new.to(tensor.dtype))
        for mine, theirs in zip(target.modules(), value.modules()):
            mine.training = theirs.training
        for mine, theirs in zip(target.parameters(), value.parameters()):
            mine.grad = None if theirs.grad is None else theirs.grad.detach().clone()
    elif torch is not None and isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor):
        if target.shape == value.shape and target.dtype == value.dtype:
            with torch.no_grad():
                target.copy_(value)


def _write_back(args: tuple, kwargs: dict, after: Any) -> None:
    """Apply the student's arguments after the call (marked by :func:`_mark_kept`) to the caller's."""
    root = (args, kwargs)
    for node in (*after[0], *after[1].values()):
        if isinstance(node, Kept):
            _restore(node, root)


# --- the student process --------------------------------------------------------------------------------
MAGIC = re.compile(r"^\s*[%!]|\?\s*$", re.M)


def ipython_to_python(source: str) -> str:
    """A cell's IPython syntax (``%magic``, ``!shell``, ``obj?``) as plain Python, as the kernel runs it.

    IPython is imported only for cells that need it (it costs a fraction of a second per process).
    """
    if not MAGIC.search(source):
        return source
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


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


def _global_generators() -> dict:
    """The global generators' states (NumPy's legacy one; torch's CPU one if torch is loaded), as wire data.

    A call carries them to the student's process and back, so that a check sees what the call did to the
    global generators (seeding them, drawing from them) exactly as it would in the kernel.
    """
    state = np.random.get_state()
    states: dict = {"numpy": [str(state[0]), state[1], int(state[2]), int(state[3]), float(state[4])]}
    if "torch" in sys.modules:
        states["torch"] = sys.modules["torch"].get_rng_state()
    return states


def _set_global_generators(states: Any) -> None:
    """Set the global generators from :func:`_global_generators`' data; ``WireError`` if it is not such data."""
    try:
        name, keys, pos, has_gauss, cached = states["numpy"]
        if type(keys) is not np.ndarray or keys.dtype != np.uint32 or keys.shape != (624,):
            raise ValueError("a NumPy state without 624 uint32 keys")
        np.random.set_state((str(name), keys, int(pos), int(has_gauss), float(cached)))
        if "torch" in states:
            import torch

            if not isinstance(states["torch"], torch.Tensor) or states["torch"].dtype != torch.uint8:
                raise ValueError("a torch state that is not a uint8 tensor")
            torch.set_rng_state(states["torch"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise WireError(f"invalid global generator states: {exc}") from None


def _child_main() -> None:  # pragma: no cover - runs in the student process
    """Execute the student's cells, then serve calls of the graded function until the channel closes.

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
    fn = namespace.get(request["name"])
    fn = fn if callable(fn) else None
    status = {"ok": fn is not None, "error": None if fn else first_error or f"{request['name']} is not defined"}
    wire.send(stdout, {**status, "tampered": tampered()})
    while fn is not None:
        try:
            request = wire.receive(stdin)
        except EOFError:
            return
        args, kwargs = request["args"], request["kwargs"]
        if "generators" in request:
            _set_global_generators(request["generators"])
        objects = [(p, o) for p, o in _walk((args, kwargs)) if len(p) >= 2 and isinstance(o, _shared_types())]
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
                     "args": _mark_kept((args, kwargs), originals), "generators": _global_generators(),
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
                                   "generators": _global_generators()})
            except BaseException:  # noqa: BLE001 - arguments we cannot send back: the failure alone
                data = wire.dumps(failure)
        stdout.write(data)
        stdout.flush()


class StudentProcess:
    """The student's code, loaded in a fresh Python process (sandboxed unless ``sandbox`` is ``None``);
    ``function`` is its graded function.

    ``cells`` are the sources to execute in order (the lesson's setup cell, the student's own cells up
    to the answer); as in a kernel, an error in one does not stop the next. ``timeout`` bounds the
    load and every call.
    """

    def __init__(self, cells: list[str], name: str, timeout: float = 60.0,
                 sandbox: SandboxConfig | None = None, memory_limit_bytes: int | None = None) -> None:
        self.timeout = timeout
        self.sandbox = sandbox
        command = [sys.executable, "-I", "-c", "from trainsys.autograde.isolation import _child_main; _child_main()"]
        preexec = None
        self.cgroup = None
        self.memory_cap = None
        self.reached: set[str] = set()
        if sandbox is not None:
            self.cgroup = Cgroup(sandbox)
            command = wrap(command, sandbox, cgroup=self.cgroup, env=MEASURABLE_MALLOC)
            env = None
        else:
            env = {**os.environ, "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg", **MEASURABLE_MALLOC}
            if memory_limit_bytes:
                def preexec() -> None:  # pragma: no cover - runs in the child before exec
                    import resource
                    resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, preexec_fn=preexec, env=env,
                                        start_new_session=True)
        if sandbox is not None:
            self.memory_cap = memory_cap(sandbox, self.cgroup, self.process.pid)
        try:
            wire.send(self.process.stdin, {"cells": list(cells), "name": name})
        except (BrokenPipeError, OSError) as exc:
            self.close()
            raise IsolationUnavailable(f"the student's process did not start: {exc}") from None
        status = self._reply()
        if type(status) is not dict or type(status.get("ok")) is not bool:
            self.close()
            raise IsolationUnavailable("the student's process answered with something that is not a status")
        self.status = {"ok": status["ok"], "error": str(status.get("error"))[:500] if status.get("error") else None,
                       "tampered": [str(t) for t in status.get("tampered", []) if isinstance(t, str)][:50]}
        self.function = RemoteFunction(self, name)

    def _reply(self) -> Any:
        box: dict[str, Any] = {}

        def read() -> None:
            try:
                box["reply"] = wire.receive(self.process.stdout)
            except BaseException as exc:  # noqa: BLE001 - any failure to read is "no usable answer"
                box["error"] = exc

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(self.timeout)
        if reader.is_alive():
            self.close()
            raise IsolationTimeout(f"the student's code did not answer within {self.timeout:.0f} s" + self.limits_note())
        if "error" in box:
            self.close()
            error = box["error"]
            if isinstance(error, EOFError):
                raise IsolationUnavailable("the student's process ended without answering" + self.limits_note())
            raise IsolationUnavailable(f"the student's process sent an invalid message: {error}" + self.limits_note())
        return box["reply"]

    def _send(self, value: Any) -> None:
        try:
            data = wire.dumps(value)
        except WireError as exc:  # the check passed something the channel cannot carry: a grader bug
            raise IsolationUnavailable(f"the grader cannot send these arguments: {exc}") from None
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise IsolationUnavailable(f"the student's process is gone: {exc}") from None

    def _expect(self, key: str) -> None:
        reply = self._reply()
        if type(reply) is not dict or reply.get(key) is not True:
            self.close()
            raise IsolationUnavailable(f"the student's process broke the measuring protocol (expected {key!r})")

    def main_pid(self) -> int | None:
        """The outer pid of the Python process running the student's code (not one it forked).

        Without the sandbox it is the process we started; in it, the oldest child of bwrap's init in
        the sandbox's PID namespace (orphans the student makes are reparented there too, later).
        """
        if self.sandbox is None:
            return self.process.pid
        try:
            outer = self.process.pid
            init = [int(p) for p in _children(outer)]
            if len(init) != 1:
                return None
            kids = [int(p) for p in _children(init[0])]
            return min(kids, key=_start_time) if kids else None
        except (OSError, ValueError):
            return None

    def measure(self, args: tuple, kwargs: dict) -> tuple[Any, int]:
        """``(result, peak)``: the call's result and the peak memory it needed, in bytes.

        Measured by the operating system when it allows: the process's peak resident set (``VmHWM``),
        reset just before the call (``/proc/<pid>/clear_refs``) and read just after it, minus its
        resident set before — numbers the student's code cannot touch. Otherwise (no permission to
        reset) the student process measures itself with ``tracemalloc``.
        """
        self._send({"args": tuple(args), "kwargs": dict(kwargs), "measure": True, "generators": _global_generators()})
        self._expect("ready")
        pid = self.main_pid()
        baseline = _reset_peak(pid) if pid is not None else None
        self._send({"tracemalloc": baseline is None})
        self._expect("done")
        peak = _peak(pid) if baseline is not None else None
        self._send({"go": True})
        result, reply = self._finish(args, kwargs)
        if baseline is not None and peak is not None:
            return result, max(peak - baseline, 0)
        traced = reply.get("peak")
        if type(traced) is not int:
            raise IsolationUnavailable("the student's process sent no memory measurement")
        return result, traced

    def call(self, args: tuple, kwargs: dict) -> Any:
        self._send({"args": tuple(args), "kwargs": dict(kwargs), "generators": _global_generators()})
        return self._finish(args, kwargs)[0]

    def _finish(self, args: tuple, kwargs: dict) -> tuple[Any, dict]:
        reply = self._reply()
        try:
            if type(reply) is not dict or type(reply.get("ok")) is not bool:
                raise WireError("a reply without a status")
            after = reply.get("args")
            well_formed = (type(after) is tuple and len(after) == 2 and type(after[0]) is tuple
                           and type(after[1]) is dict)
            if "generators" in reply:  # what the call did to the global generators, as in the kernel
                _set_global_generators(reply["generators"])
            if not reply["ok"]:
                if well_formed:
                    _write_back(tuple(args), kwargs, after)
                raise EXCEPTIONS.get(str(reply.get("type")), RuntimeError)(str(reply.get("message", ""))[:2000])
            if not well_formed:
                raise WireError("a reply without the arguments after the call")
            _write_back(tuple(args), kwargs, after)
            _reissue_warnings(reply.get("warnings"))
            return _decode_result(reply.get("result"), (args, kwargs)), reply
        except WireError as exc:
            self.close()
            raise IsolationUnavailable(f"the student's process sent an invalid reply: {exc}") from None

    def limits_note(self) -> str:
        """``": it reached the sandbox's … limit"`` for the limits the sandbox hit (else empty)."""
        if not self.reached or self.sandbox is None:
            return ""
        return ": it reached " + " and ".join(describe_limit(limit, self.sandbox) for limit in sorted(self.reached))

    def close(self) -> None:
        ended = self.process.poll()
        if ended is None:
            self.process.kill()
        self.process.wait()
        if self.memory_cap is not None:
            self.memory_cap.stop()
            self.reached |= {"memory"} if self.memory_cap.reached else set()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.reached |= self.cgroup.reached
        if (limit := limit_from_exit(ended)) is not None:
            self.reached.add(limit)
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def __enter__(self) -> StudentProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteFunction:
    """Calls the student's function in its :class:`StudentProcess`; usable wherever a check takes ``fn``."""

    def __init__(self, process: StudentProcess, name: str) -> None:
        self.process, self.__name__ = process, name
        self.__qualname__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.process.call(args, kwargs)

    def peak_memory(self, *args: Any, **kwargs: Any) -> tuple[Any, int]:
        """``(result, peak bytes)`` of one call, measured out of the student's reach where possible."""
        return self.process.measure(args, kwargs)


WARNINGS = {w.__name__: w for w in (Warning, UserWarning, RuntimeWarning, DeprecationWarning, FutureWarning,
                                   PendingDeprecationWarning, SyntaxWarning, ImportWarning, UnicodeWarning,
                                   BytesWarning, ResourceWarning)}


def _reissue_warnings(caught: Any) -> None:
    """The warnings the student's call raised, raised again here (a check may require that none escape)."""
    if type(caught) is not list:
        return
    for entry in caught[:20]:
        if type(entry) is list and len(entry) == 2 and all(type(x) is str for x in entry):
            warnings.warn(entry[1], WARNINGS.get(entry[0], UserWarning), stacklevel=3)


def _children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def _start_time(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no {field} in /proc/{pid}/status")


def _reset_peak(pid: int) -> int | None:
    """Reset the process's peak resident set to its current one; return that (``None``: not allowed)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return _status_kib(pid, "VmRSS")
    except (OSError, ValueError):
        return None


def _peak(pid: int) -> int | None:
    try:
        return _status_kib(pid, "VmHWM")
    except (OSError, ValueError):
        return None
