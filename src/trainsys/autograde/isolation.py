"""Re-running a hidden check with the student's code in another process.

Inside the notebook kernel, student code runs before the hidden tests and can replace anything:
``numpy.allclose``, ``numpy.testing``, ``trainsys.grading`` itself. So the grading command checks each
answer again out of the student's reach:

- a **child process** executes the lesson's setup cell and the student's answer cell, and then only
  ever *calls the student's function* on arguments it receives, sending back the result;
- the **parent** runs the unchanged ``trainsys.grading.check_<name>`` with a :class:`RemoteFunction`
  standing in for the student's function. The comparison with the reference happens in a process
  where no student code has ever run.

Aliasing survives the process boundary: when the result *is* an argument, or an array that shares
memory with an argument array (a view), the child sends the argument's position (and the view's
offset, shape and strides) and the parent hands back its own object — so checks of in-place updates
and of views still mean what they say. The child also reports which testing functions the student
code replaced (``tampered``), compared by identity with the originals taken before it ran.
"""

from __future__ import annotations

import builtins
import pickle
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

GUARDED_MODULES = ("numpy", "numpy.testing", "trainsys.grading", "trainsys.grading._harness", "builtins")
GUARDED_NAMES = {
    "numpy": ("allclose", "isclose", "array_equal", "abs", "all", "any", "isnan", "isfinite", "max", "where"),
    "builtins": ("abs", "isinstance", "len", "getattr", "print", "float", "int", "type", "callable"),
}
class IsolationUnavailable(BaseException):
    """The student process did not answer (too slow, crashed): nothing can be concluded about the answer.

    A ``BaseException``, so that a check's ``except Exception`` does not turn it into a failed case.
    """


EXCEPTIONS = {e.__name__: e for e in (TypeError, ValueError, NotImplementedError, AssertionError, KeyError,
                                      IndexError, ZeroDivisionError, AttributeError, RuntimeError, MemoryError)}


# --- wire format: length-prefixed pickles --------------------------------------------------------------
def _send(stream: Any, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: Any) -> Any:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError("the student process closed the channel")
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


@dataclass(frozen=True)
class _Alias:
    path: tuple


@dataclass(frozen=True)
class _View:
    path: tuple
    offset: int  # bytes from the argument array's first element
    shape: tuple
    strides: tuple
    dtype: str


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
    for key in path:
        obj = obj[key]
    return obj


def _shared_types() -> tuple[type, ...]:
    """Objects a function may return or update in place: containers, arrays, generators, torch objects."""
    types: tuple[type, ...] = (dict, list, np.ndarray, np.random.Generator)
    torch = sys.modules.get("torch")
    if torch is not None:
        types += (torch.Tensor, torch.nn.Module, torch.Generator)
    return types


def _encode_result(result: Any, args: Any) -> Any:
    """Replace objects of ``result`` that are (or view) parts of ``args`` by references to them."""
    by_id = {id(o): p for p, o in _walk(args) if isinstance(o, _shared_types())}
    arrays = [(p, o) for p, o in _walk(args) if isinstance(o, np.ndarray)]

    def encode(obj: Any) -> Any:
        if id(obj) in by_id:
            return _Alias(by_id[id(obj)])
        if isinstance(obj, np.ndarray):
            for path, base in arrays:
                if base.size and obj.size and np.shares_memory(obj, base):
                    offset = obj.__array_interface__["data"][0] - base.__array_interface__["data"][0]
                    return _View(path, offset, obj.shape, obj.strides, obj.dtype.str)
            return obj
        if isinstance(obj, dict):
            return {k: encode(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [encode(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(encode(v) for v in obj)
        return obj

    return encode(result)


def _decode_result(result: Any, args: Any) -> Any:
    if isinstance(result, _Alias):
        return _at(args, result.path)
    if isinstance(result, _View):  # the same view of the parent's own array
        base = _at(args, result.path)
        root = base
        while isinstance(root.base, np.ndarray):
            root = root.base
        offset = base.__array_interface__["data"][0] - root.__array_interface__["data"][0] + result.offset
        return np.ndarray(result.shape, dtype=np.dtype(result.dtype), buffer=root, offset=offset,
                          strides=result.strides)
    if isinstance(result, dict):
        return {k: _decode_result(v, args) for k, v in result.items()}
    if isinstance(result, list):
        return [_decode_result(v, args) for v in result]
    if isinstance(result, tuple):
        return tuple(_decode_result(v, args) for v in result)
    return result


def _write_back(target: Any, source: Any) -> None:
    """Make the parent's arguments equal the child's after the call, in place where possible.

    Arrays and tensors are copied into, dicts and lists updated entry by entry, a NumPy generator takes
    the child's state (the draws the function made), a torch module its parameters, buffers and mode.
    """
    torch = sys.modules.get("torch")
    if isinstance(target, np.random.Generator) and isinstance(source, np.random.Generator):
        target.bit_generator.state = source.bit_generator.state
        return
    if torch is not None:
        if isinstance(target, torch.Generator) and isinstance(source, torch.Generator):
            target.set_state(source.get_state())
            return
        if isinstance(target, torch.nn.Module) and isinstance(source, torch.nn.Module):
            with torch.no_grad():
                target.load_state_dict(source.state_dict())
            for mine, theirs in zip(target.modules(), source.modules()):
                mine.training = theirs.training
            for mine, theirs in zip(target.parameters(), source.parameters()):
                mine.grad = None if theirs.grad is None else theirs.grad.detach().clone()
            return
        if isinstance(target, torch.Tensor) and isinstance(source, torch.Tensor):
            if target.shape == source.shape and target.dtype == source.dtype:
                with torch.no_grad():
                    target.copy_(source)
            return
    if isinstance(target, np.ndarray) and isinstance(source, np.ndarray):
        if target.shape == source.shape and target.flags.writeable:
            np.copyto(target, source, casting="unsafe")
    elif isinstance(target, dict) and isinstance(source, dict):
        for key in list(target):
            if key not in source:
                del target[key]
        for key, value in source.items():
            if key in target and isinstance(target[key], _shared_types()):
                _write_back(target[key], value)
            else:
                target[key] = value
    elif isinstance(target, list) and isinstance(source, list):
        for i, value in enumerate(source[: len(target)]):
            _write_back(target[i], value)
    elif isinstance(target, tuple) and isinstance(source, tuple):
        for mine, theirs in zip(target, source):
            _write_back(mine, theirs)


# --- the child ---------------------------------------------------------------------------------------
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


def _child_main() -> None:  # pragma: no cover - runs in the student process
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # student prints must not corrupt the channel
    is_, getattr_ = (lambda a, b: a is b), builtins.getattr
    request = _receive(stdin)
    originals = _guarded_objects()

    def tampered() -> list[str]:
        return sorted(k for k, (module, name, obj) in originals.items()
                      if not is_(getattr_(module, name, None), obj))

    namespace: dict[str, Any] = {"__name__": "__main__"}
    first_error = None
    try:  # IPython syntax (%magics, !shell) becomes plain Python calls, as in the kernel
        from IPython.core.inputtransformer2 import TransformerManager

        transform = TransformerManager().transform_cell
    except ImportError:
        transform = str
    for index, source in enumerate(request["cells"]):  # like a kernel: a failing cell does not stop the next
        try:
            exec(compile(transform(source), f"<cell {index}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001 - report whatever the student code raised
            first_error = first_error or f"{type(exc).__name__}: {exc}"
    fn = namespace.get(request["name"])
    fn = fn if callable(fn) else None
    status = {"ok": fn is not None, "error": None if fn else first_error or f"{request['name']} is not defined"}
    _send(stdout, {**status, "tampered": tampered()})
    while fn is not None:
        try:
            call = _receive(stdin)
        except EOFError:
            return
        args, kwargs = call
        try:
            result = fn(*args, **kwargs)
            reply = {"ok": True, "result": _encode_result(result, (args, kwargs)), "args": (args, kwargs)}
        except BaseException as exc:  # noqa: BLE001
            reply = {"ok": False, "type": type(exc).__name__, "message": str(exc)}
        try:
            _send(stdout, reply)
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
            _send(stdout, {"ok": False, "type": "TypeError", "message": f"result cannot be sent back: {exc}"})


# --- the parent --------------------------------------------------------------------------------------
class StudentProcess:
    """The student's code, loaded in a fresh Python process; ``function`` is its graded function.

    ``cells`` are the sources to execute in order (the lesson's setup cell, the student's own cells
    before the answer, the answer cell); as in a kernel, an error in one does not stop the next.
    """

    def __init__(self, cells: list[str], name: str, timeout: float = 60.0,
                 memory_limit_bytes: int | None = None) -> None:
        self.timeout = timeout
        preexec = None
        if memory_limit_bytes:
            def preexec() -> None:  # pragma: no cover - runs in the child before exec
                import resource
                resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from trainsys.autograde.isolation import _child_main; _child_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=preexec,
            env={**__import__("os").environ, "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"},
        )
        _send(self.process.stdin, {"cells": list(cells), "name": name})
        self.status = self._reply()
        self.function = RemoteFunction(self, name)

    def _reply(self) -> dict:
        import threading

        box: dict[str, Any] = {}

        def read() -> None:
            try:
                box["reply"] = _receive(self.process.stdout)
            except Exception as exc:  # noqa: BLE001
                box["error"] = exc

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(self.timeout)
        if reader.is_alive():
            self.close()
            raise IsolationUnavailable(f"the student's code did not answer within {self.timeout:.0f} s")
        if "error" in box:
            raise IsolationUnavailable(f"the student's process ended: {box['error']}")
        return box["reply"]

    def call(self, args: tuple, kwargs: dict) -> Any:
        try:
            _send(self.process.stdin, (args, kwargs))
        except (BrokenPipeError, OSError) as exc:
            raise IsolationUnavailable(f"the student's process is gone: {exc}") from None
        reply = self._reply()
        if not reply["ok"]:
            raise EXCEPTIONS.get(reply["type"], RuntimeError)(reply["message"])
        _write_back(tuple(args), tuple(reply["args"][0]))
        _write_back(kwargs, reply["args"][1])
        return _decode_result(reply["result"], (args, kwargs))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def __enter__(self) -> StudentProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteFunction:
    """Calls the student's function in its :class:`StudentProcess`; usable wherever a check takes ``fn``."""

    def __init__(self, process: StudentProcess, name: str) -> None:
        self.process, self.__name__ = process, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.process.call(args, kwargs)
