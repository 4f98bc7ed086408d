"""A fork server for the grader's trusted processes: nbgrader and the re-check start without importing.

Every trusted process the grader starts (:func:`trainsys.autograde.launch.run_trusted`: nbgrader for each
job, the re-check's verifier, the course tools) used to be a fresh ``python -I -m <module>``, and most of its
CPU time went on imports: about 0.9 s for nbgrader's (nbconvert, nbformat, SQLAlchemy, Jupyter's server
stack), 0.4 s for the verifier's (NumPy). A class of 30 pays that some 90 times. Here one server process
(``python -I -m trainsys.autograde.forkserver FD``) imports them once (:data:`PRELOAD`), and each request
is a ``fork()`` of it that then runs the module exactly as ``python -I -m <module> <args>`` would: same
interpreter flags and ``sys.path``, the request's working folder, environment and address-space cap, its own
standard input, output and error (pipes whose far ends the grader holds), ``runpy`` running the module as
``__main__``, and the interpreter's normal exit (exit status, ``atexit``, flushed output).

How the two ends talk (Unix sockets between trusted processes, never reachable from a sandbox: its
processes are started later, by nbgrader, and close every inherited descriptor):

- the grader keeps one end of a ``SOCK_SEQPACKET`` pair (the *control* socket); per request it sends one
  byte with four descriptors: the child's stdin, stdout and stderr pipe ends and one end of a fresh stream
  socket pair (the *reply* socket);
- on the reply socket the grader writes the request as one JSON line; the server answers ``pid N`` once it
  has forked, and ``exit STATUS`` (the raw ``waitpid`` status) once it has reaped that child. A requester
  that closes its reply socket before then is gone, and the server kills its child.

The server is single-threaded (a fork copies only the calling thread, so no lock can be held by a thread
that does not exist in the child) and exits when the grader's end of the control socket closes. It runs in
the grader's process group, so killing the grader's group kills it and every child it forked (a request
may ask for a session of its own instead). Where the server cannot start or dies, :func:`run` says so by
returning ``None`` and the caller starts a process as before (:func:`trainsys.autograde.launch.run_trusted`);
``TRAINSYS_FORKSERVER=0`` turns it off. Measured on 2 cores: ``nbgrader --version`` 1.7 s → 0.1 s; the
hostile class of tests/test_hostile_class.py 295 → 272 busy core-seconds.

The test suite starts one more (``tests/kernels.py``): not isolated, preloading PyTorch and ipykernel, and also
taking requests on a listening Unix socket in a private folder, from which the lessons' kernels are forked.
"""

from __future__ import annotations

import contextlib
import gc
import json
import locale
import os
import resource
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

PRELOAD = ("nbgrader.apps.nbgraderapp", "trainsys.autograde.verify")  # what the trusted processes import
SWITCH = "TRAINSYS_FORKSERVER"  # "0": start every trusted process afresh
READY = b"ready"
KILL_GRACE = 10.0  # seconds to collect a killed child's output and status after its time-out


# Imports the grader's children skip. jsonschema imports rfc3987-syntax whenever it is installed (the
# jsonschema[format-nongpl] extra that jupyter-events requires installs it) to check the "iri" and
# "iri-reference" formats, and that package builds its Earley grammar at import: about 0.9 s of CPU in every
# process that imports nbformat, half of nbgrader's start-up (measured on 2 cores: importing nbgrader.apps
# 1.9 s, 0.9 s without it). nbformat, nbconvert, nbclient and nbgrader validate without a format checker,
# so no child of the grader checks those formats (tests/test_grader_seams.py holds both facts).
SKIPPED_IMPORTS = ("rfc3987_syntax",)


def skip_unused_imports() -> None:
    """Make importing each of :data:`SKIPPED_IMPORTS` raise ``ImportError`` in this process, as a ``None``
    entry in ``sys.modules`` does (Python's documented way); a module already imported stays."""
    for name in SKIPPED_IMPORTS:
        sys.modules.setdefault(name, None)


def cap_address_space(limit_bytes: int, soft_only: bool = False) -> None:
    """Cap this process's address space at ``limit_bytes``; ``soft_only``: the hard limit stays (a trusted
    process capped below its sandboxed children: the sandbox's ``prlimit`` raises theirs to its own)."""
    hard = resource.getrlimit(resource.RLIMIT_AS)[1] if soft_only else limit_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, hard))


# --- the grader's end ----------------------------------------------------------------------------------
class ServerGone(Exception):
    """The fork server could not take the request (it never started, or it died): start a process instead."""


class ForkServer:
    """The grader's handle on one server process; :meth:`run` may be called from several threads."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD, listen: str | None = None, isolated: bool = True) -> None:
        """Start a server that imports ``preload``; ``listen``: also take requests from connections to a
        Unix socket at that path; ``isolated``: run it (and so every child) as ``python -I``."""
        self.owner = os.getpid()
        self._lock = threading.Lock()
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, *(["-I"] if isolated else []), "-m", __name__, str(theirs.fileno()),
                   "--preload", ",".join(preload), *(["--listen", listen] if listen else [])]
        try:
            self._process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
        finally:
            theirs.close()
        self._ready = False

    def wait_ready(self) -> None:
        """Wait until the server has imported what it preloads (raises :class:`ServerGone` if it exits)."""
        if not self._ready:
            self._control.settimeout(120)
            try:
                if self._control.recv(16) != READY:
                    raise ServerGone("the fork server exited while importing")
            except OSError as exc:
                raise ServerGone(f"the fork server did not start: {exc}") from exc
            self._control.settimeout(None)
            self._ready = True

    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        """Close the control socket (the server then exits) and reap the server."""
        self._control.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # still importing, or stuck: it serves nobody now
            self._process.kill()
            self._process.wait()

    def run(self, command: list[str], module: str, args: list[str], *, cwd: str, env: dict[str, str],
            stdin: str | None, timeout: float, memory_limit: int | None,
            soft_only: bool) -> subprocess.CompletedProcess:
        """Run ``module`` with ``args`` in a child of the server, as :func:`subprocess.run` would run
        ``command`` (the equivalent command line, used in the result and errors) with ``capture_output``,
        text output (undecodable bytes replaced) and ``timeout`` (the child is killed, then
        ``subprocess.TimeoutExpired`` raised). Raises :class:`ServerGone` when no child was started."""
        request = json.dumps({"module": module, "args": args, "cwd": cwd, "env": env,
                              "memory_limit": memory_limit, "soft_only": soft_only}).encode() + b"\n"
        (stdin_r, stdin_w), (stdout_r, stdout_w), (stderr_r, stderr_w) = (os.pipe() for _ in range(3))
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        given = [stdin_r, stdout_w, stderr_w]  # the child's ends, with ``theirs``
        kept = [stdin_w, stdout_r, stderr_r]
        try:
            with self._lock:
                self.wait_ready()
                try:
                    socket.send_fds(self._control, [b"r"], [*given, theirs.fileno()])
                except OSError as exc:
                    raise ServerGone(f"the fork server is gone: {exc}") from exc
            for fd in given:
                os.close(fd)
            given = []
            theirs.close()
            mine.settimeout(60)
            mine.sendall(request)
            lines = _Lines(mine)
            first = lines.next()
            if not first.startswith("pid "):
                raise ServerGone("the fork server did not start the process")
        except (OSError, ServerGone) as exc:
            for fd in (*given, *kept):
                os.close(fd)
            theirs.close()
            mine.close()
            raise exc if isinstance(exc, ServerGone) else ServerGone(f"the fork server failed: {exc}") from exc
        return _collect(command, int(first.split()[1]), lines, stdin_w, stdout_r, stderr_r,
                        None if stdin is None else stdin.encode(), timeout)


class _Lines:
    """Lines from the server on a reply socket (``pid N``, then ``exit STATUS``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer, self.closed = sock, b"", False

    def next(self) -> str:
        """The next whole line, blocking (the socket's time-out applies); ``""`` once the server closed it."""
        while b"\n" not in self.buffer and not self.closed:
            self.feed()
        return self.pop()

    def feed(self) -> None:
        data = self.sock.recv(4096)
        self.buffer += data
        self.closed = not data

    def pop(self) -> str:
        line, found, rest = self.buffer.partition(b"\n")
        if not found:
            return ""
        self.buffer = rest
        return line.decode()


def _collect(command: list[str], pid: int, lines: _Lines, stdin_w: int, stdout_r: int, stderr_r: int,
             stdin: bytes | None, timeout: float) -> subprocess.CompletedProcess:
    """Feed the child's stdin, read its output and wait for its exit status, as ``subprocess.run`` does."""
    output = {stdout_r: bytearray(), stderr_r: bytearray()}
    status: int | None = None
    pending = memoryview(stdin or b"")
    deadline = time.monotonic() + timeout
    timed_out = False
    selector = selectors.DefaultSelector()
    for fd in output:
        selector.register(fd, selectors.EVENT_READ)
    if pending:
        os.set_blocking(stdin_w, False)
        selector.register(stdin_w, selectors.EVENT_WRITE)
    else:
        os.close(stdin_w)
    lines.sock.setblocking(False)
    selector.register(lines.sock, selectors.EVENT_READ)
    try:
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timed_out:
                    break  # a killed child whose output or status never came
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + KILL_GRACE
                continue
            for key, _ in selector.select(remaining):
                if key.fd == stdin_w:
                    try:
                        pending = pending[os.write(stdin_w, pending[:65536]):]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(stdin_w)
                        os.close(stdin_w)
                elif key.fd in output:
                    chunk = os.read(key.fd, 65536)
                    output[key.fd] += chunk
                    if not chunk:
                        selector.unregister(key.fd)
                else:
                    with contextlib.suppress(BlockingIOError):
                        lines.feed()
                    line = lines.pop()
                    if line.startswith("exit "):
                        status = int(line.split()[1])
                    if status is not None or lines.closed:
                        selector.unregister(lines.sock)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # as subprocess.run does when interrupted
        raise
    finally:
        if stdin_w in selector.get_map():
            os.close(stdin_w)
        selector.close()
        os.close(stdout_r)
        os.close(stderr_r)
        lines.sock.close()
    if timed_out:  # the output so far, as bytes: what subprocess.run attaches whatever its text setting
        raise subprocess.TimeoutExpired(command, timeout, output=bytes(output[stdout_r]), stderr=bytes(output[stderr_r]))
    stdout, stderr = (_text(bytes(output[fd])) for fd in (stdout_r, stderr_r))
    if status is None:
        raise RuntimeError(f"the grader's fork server died while process {pid} ran ({' '.join(command)})")
    return subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(status), stdout, stderr)


def _text(data: bytes) -> str:
    """Bytes as ``subprocess.run(text=True, errors="replace")`` decodes them (universal newlines)."""
    text = data.decode(locale.getpreferredencoding(False), errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


_server: ForkServer | None = None
_server_lock = threading.Lock()


def enabled() -> bool:
    """Whether trusted processes are forked (``TRAINSYS_FORKSERVER`` is not ``0``)."""
    return os.environ.get(SWITCH, "1") != "0"


def _current() -> ForkServer | None:
    """This process's server: started on first use, and again after it died or in a forked copy of this
    process (``None`` where it cannot be started)."""
    global _server
    with _server_lock:
        if _server is not None and (_server.owner != os.getpid() or not _server.alive()):
            if _server.owner == os.getpid():
                _server.close()
            _server = None
        if _server is None:
            with contextlib.suppress(OSError):
                _server = ForkServer()
        return _server


def _discard(server: ForkServer) -> None:
    global _server
    with _server_lock:
        if _server is server:
            _server = None
    with contextlib.suppress(OSError):
        server.close()


def run(command: list[str], module: str, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess | None:
    """:meth:`ForkServer.run` on this process's server, or ``None`` when forking is turned off or the server
    could not take the request (it is then dropped, and the next request starts a new one): the caller
    starts ``command`` itself."""
    if not enabled():
        return None
    server = _current()
    if server is None:
        return None
    try:
        return server.run(command, module, args, **kwargs)
    except ServerGone:
        _discard(server)
        return None


# --- the server's end ----------------------------------------------------------------------------------
def _serve(control_fd: int, preload: tuple[str, ...], listen: str | None) -> dict:
    """Import ``preload``, then fork a child per request until the control socket closes (then exit).

    Requests come over the control socket and, with ``listen``, over connections to a Unix socket at that
    path (one request each: a process that is not the server's owner, such as a kernel launcher). A child
    whose requester closes its reply socket before the child ends is killed. Returns only in a child: its
    request, with its standard streams in place."""
    skip_unused_imports()
    path = list(sys.path)  # as the interpreter set it: an import may add to it (setuptools adds its vendored copies)
    for name in preload:
        __import__(name)
    sys.path[:] = path
    gc.collect()
    gc.freeze()  # the imported objects stay out of the children's collections: fewer copied pages
    control = socket.socket(fileno=control_fd)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, "control")
    if listen is not None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(listen)
        listener.listen(64)
        selector.register(listener, selectors.EVENT_READ, "listener")
    control.send(READY)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    children: dict[int, tuple[socket.socket, bool]] = {}  # pid -> (reply socket, in its own session)
    while True:
        for key, _ in selector.select():
            if key.data == "listener":
                connection, _ = key.fileobj.accept()
                selector.register(connection, selectors.EVENT_READ, "request")
            elif key.data in ("control", "request"):
                sock = key.fileobj
                try:
                    message, fds, _, _ = socket.recv_fds(sock, 16, 4)
                except OSError:
                    message, fds = b"", []
                if key.data == "request":
                    selector.unregister(sock)
                    sock.close()
                elif not message:
                    sys.exit(0)  # the owner is gone; children still running finish on their own
                request, reply = _read_request(fds)
                if request is None:
                    continue
                pid = os.fork()
                if pid == 0:  # the child: drop the server's state, take the request's streams
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for registered in list(selector.get_map().values()):
                        if isinstance(registered.fileobj, socket.socket):
                            registered.fileobj.close()
                    selector.close()
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    reply.close()
                    for target, fd in enumerate(fds[:3]):
                        os.dup2(fd, target)
                        os.close(fd)
                    if request.get("new_session"):
                        os.setsid()  # its own process group: a signal to the group reaches it alone
                    return request
                for fd in fds[:3]:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    reply.sendall(f"pid {pid}\n".encode())
                children[pid] = (reply, bool(request.get("new_session")))
                selector.register(reply, selectors.EVENT_READ, pid)
            elif key.data == "wake":
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_r, 4096):
                        pass
            else:  # a reply socket readable: its requester is gone (it never writes after the request)
                pid = key.data
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    (os.killpg if children[pid][1] else os.kill)(pid, signal.SIGKILL)
                selector.unregister(key.fileobj)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reply, _ = children.pop(pid, (None, False))
            if reply is not None:
                if reply in (k.fileobj for k in selector.get_map().values()):
                    selector.unregister(reply)
                with contextlib.suppress(OSError):
                    reply.sendall(f"exit {status}\n".encode())
                reply.close()


def _read_request(fds: list[int]) -> tuple[dict | None, socket.socket | None]:
    """The request that came with ``fds`` (stdin, stdout, stderr, reply socket): its line from the reply
    socket (the requester is given 10 s to write it). ``(None, None)``, every descriptor closed, if there is
    no such request."""
    if len(fds) != 4:
        for fd in fds:
            os.close(fd)
        return None, None
    reply = socket.socket(fileno=fds[3])
    reply.settimeout(10)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = reply.recv(65536)
            if not chunk:
                raise ValueError("no request")
            data += chunk
        request = json.loads(data)
        if not isinstance(request, dict):
            raise ValueError("not a request")
    except (OSError, ValueError):
        for fd in fds[:3]:
            os.close(fd)
        reply.close()
        return None, None
    reply.settimeout(None)
    return request, reply


def _become(request: dict, started_in: str) -> None:
    """In the child: the request's folder, environment and cap, then its module as ``__main__`` (whatever it
    raises, ``SystemExit`` included, ends this interpreter as it would end ``python -m``). A server that is
    not isolated had its own folder first on ``sys.path`` (``started_in``, as ``-m`` puts it); the child has
    the request's folder there instead."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if request.get("memory_limit") is not None:
        cap_address_space(int(request["memory_limit"]), bool(request.get("soft_only")))
    if sys.path and sys.path[0] == started_in and not sys.flags.isolated:
        sys.path[0] = os.getcwd()
    module = request["module"]
    sys.modules.pop(module, None)  # run afresh as __main__, as ``python -m`` does
    sys.argv = [sys.argv[0], *request["args"]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main(argv: list[str]) -> None:
    """``FD [--listen PATH] [--preload MODULE,…]`` (as :class:`ForkServer` starts it)."""
    started_in = os.getcwd()
    listen = argv[argv.index("--listen") + 1] if "--listen" in argv else None
    preload = tuple(argv[argv.index("--preload") + 1].split(",")) if "--preload" in argv else PRELOAD
    _become(_serve(int(argv[0]), preload, listen), started_in)


if __name__ == "__main__":
    main(sys.argv[1:])
