"""The student's function, called from a trusted process across an operating-system boundary.

Inside a notebook kernel, student code runs before the tests and can replace anything: ``numpy``,
``numpy.testing``, ``trainsys.grading``, ``sys.displayhook``. So points are decided elsewhere:

- a **student process**, in the sandbox (:mod:`trainsys.autograde.sandbox`), executes the lesson's
  setup cell and the student's cells, and then only ever *calls the student's function* on the
  arguments it receives and sends back the result (:mod:`trainsys.autograde.student_side`);
- the **trusted process** runs the visible tests and ``trainsys.grading.check_<name>`` with a
  :class:`RemoteFunction` standing in for the student's function. The comparison with the
  reference happens in a process where no student code has ever run. This module is its side.

The two talk through :mod:`trainsys.autograde.wire` — data only, never pickle — in the messages of
:mod:`trainsys.autograde.protocol`. What a call does to its arguments comes back too: the arguments after
the call are written back into the caller's objects (in-place updates, an advanced generator, a model's new
weights and mode); a result that *is* an argument, or a view of an argument array, comes back as a
reference to the caller's own object; a 0-d tensor whose autograd graph reaches the arguments' parameters
comes back as a tensor with the same value and the same gradients with respect to the caller's parameters.
The memory a call needed is read from ``/proc`` (:mod:`trainsys.autograde.procfs`), out of the student's reach.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from typing import Any

import numpy as np

from trainsys.autograde import procfs, wire
from trainsys.autograde.launch import QUIET, limit_memory
from trainsys.autograde.protocol import GRAPH_TAG, global_generators, set_global_generators, shared_types
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

EXCEPTIONS = {e.__name__: e for e in (TypeError, ValueError, NotImplementedError, AssertionError, KeyError,
                                      IndexError, ZeroDivisionError, AttributeError, RuntimeError, MemoryError,
                                      OverflowError, FloatingPointError, ArithmeticError, LookupError)}


class IsolationUnavailable(BaseException):
    """The student process gave no usable answer (crashed, garbage on the channel): nothing can be
    concluded about the answer. A ``BaseException``, so that a check's ``except Exception`` does not
    turn it into an ordinary failed case."""


class IsolationTimeout(IsolationUnavailable):
    """The student process did not answer in time (worth one retry with a longer limit)."""


# --- what a call did to its arguments, on the caller's objects ----------------------------------------
def _at(obj: Any, path: tuple) -> Any:
    try:
        for key in path:
            obj = obj[key]
    except (KeyError, IndexError, TypeError) as exc:
        raise WireError(f"a reference to an argument that does not exist: {path!r}") from exc
    return obj


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
    if isinstance(value, shared_types()):
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


# --- the student process, seen from the grader ---------------------------------------------------------
STUDENT_MAIN = "from trainsys.autograde.student_side import student_process_main; student_process_main()"


class StudentProcess:
    """The student's code, loaded in a fresh Python process (sandboxed unless ``sandbox`` is ``None``);
    ``function`` is its graded function.

    ``cells`` are the sources to execute in order (the lesson's setup cell, the student's own cells up
    to the answer); as in a kernel, an error in one does not stop the next. ``name`` is the graded
    function's name, or a list of names that one process serves (``functions`` maps each to its
    :class:`RemoteFunction`; ``function`` is the first): the grader re-checks one function per process, a
    test may check many references at the cost of one start. ``timeout`` bounds the load and every call.
    """

    def __init__(self, cells: list[str], name: str | list[str], timeout: float = 60.0,
                 sandbox: SandboxConfig | None = None, memory_limit_bytes: int | None = None) -> None:
        names = [name] if isinstance(name, str) else list(name)
        if not names or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ValueError(f"StudentProcess: name must be a function name or a non-empty list of them, got {name!r}")
        self.timeout = timeout
        self.sandbox = sandbox
        command = [sys.executable, "-I", "-c", STUDENT_MAIN]
        preexec = None
        self.cgroup = None
        self.memory_cap = None
        self.reached: set[str] = set()
        if sandbox is not None:
            self.cgroup = Cgroup(sandbox)
            command = wrap(command, sandbox, cgroup=self.cgroup, env=MEASURABLE_MALLOC)
            env = None
        else:
            env = {**os.environ, **QUIET, **MEASURABLE_MALLOC}
            preexec = limit_memory(memory_limit_bytes) if memory_limit_bytes else None
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, preexec_fn=preexec, env=env,
                                        start_new_session=True)
        if sandbox is not None:
            self.memory_cap = memory_cap(sandbox, self.cgroup, self.process.pid)
        try:
            wire.send(self.process.stdin, {"cells": list(cells), "names": names})
        except (BrokenPipeError, OSError) as exc:
            self.close()
            raise IsolationUnavailable(f"the student's process did not start: {exc}") from None
        status = self._reply()
        if type(status) is not dict or type(status.get("ok")) is not bool:
            self.close()
            raise IsolationUnavailable("the student's process answered with something that is not a status")
        self.status = {"ok": status["ok"], "error": str(status.get("error"))[:500] if status.get("error") else None,
                       "tampered": [str(t) for t in status.get("tampered", []) if isinstance(t, str)][:50]}
        self.functions = {n: RemoteFunction(self, n) for n in names}
        self.function = self.functions[names[0]]

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
            init = procfs.children(outer)
            if len(init) != 1:
                return None
            kids = procfs.children(init[0])
            return min(kids, key=procfs.start_time) if kids else None
        except (OSError, ValueError):
            return None

    def measure(self, name: str, args: tuple, kwargs: dict) -> tuple[Any, int]:
        """``(result, peak)``: the call's result and the peak memory it needed, in bytes.

        Measured by the operating system when it allows: the process's peak resident set (``VmHWM``),
        reset just before the call (``/proc/<pid>/clear_refs``) and read just after it, minus its
        resident set before — numbers the student's code cannot touch. Otherwise (no permission to
        reset) the student process measures itself with ``tracemalloc``.
        """
        self._send({"name": name, "args": tuple(args), "kwargs": dict(kwargs), "measure": True,
                    "generators": global_generators()})
        self._expect("ready")
        pid = self.main_pid()
        baseline = procfs.reset_peak(pid) if pid is not None else None
        self._send({"tracemalloc": baseline is None})
        self._expect("done")
        peak = procfs.peak(pid) if baseline is not None else None
        self._send({"go": True})
        result, reply = self._finish(args, kwargs)
        if baseline is not None and peak is not None:
            return result, max(peak - baseline, 0)
        traced = reply.get("peak")
        if type(traced) is not int:
            raise IsolationUnavailable("the student's process sent no memory measurement")
        return result, traced

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        self._send({"name": name, "args": tuple(args), "kwargs": dict(kwargs), "generators": global_generators()})
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
                set_global_generators(reply["generators"])
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
        return self.process.call(self.__name__, args, kwargs)

    def peak_memory(self, *args: Any, **kwargs: Any) -> tuple[Any, int]:
        """``(result, peak bytes)`` of one call, measured out of the student's reach where possible."""
        return self.process.measure(self.__name__, args, kwargs)


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
