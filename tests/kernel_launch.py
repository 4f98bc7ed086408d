"""The test suite's kernel command: a Jupyter kernel forked from a process that already imported NumPy, PyTorch
and ipykernel (tests/kernels.py starts it), instead of a fresh ``python -m ipykernel_launcher``.

It runs as ``python -I -S kernel_launch.py -f CONNECTION_FILE`` (the standard library only, so it starts in
milliseconds). It asks the fork server named by ``TRAINSYS_KERNEL_FORKSERVER`` for a kernel with its own
folder, environment, arguments and standard streams, in a session of its own; it passes on the signals
Jupyter sends it (an interrupt, a shutdown) to the kernel's process group, and exits with the kernel's status.
If it is killed, the server sees its socket close and kills the kernel. Without a server (the variable unset,
or nothing listening) it becomes ``python -m ipykernel_launcher`` itself.
"""

import json
import os
import signal
import socket
import sys

SERVER = "TRAINSYS_KERNEL_FORKSERVER"


def fresh_kernel() -> None:
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[1:]])


def main() -> None:
    path = os.environ.get(SERVER)
    if not path:
        fresh_kernel()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        server.connect(path)
    except OSError:
        fresh_kernel()
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = {key: value for key, value in os.environ.items() if key != SERVER}
    args = sys.argv[1:]
    if env.get("JPY_PARENT_PID", "").isdigit():  # ipykernel reads it when imported, and the server imported it first
        args.append(f"--IPKernelApp.parent_handle={env['JPY_PARENT_PID']}")
    request = {"module": "ipykernel_launcher", "args": args, "cwd": os.getcwd(), "env": env, "new_session": True}
    socket.send_fds(server, [b"r"], [0, 1, 2, theirs.fileno()])
    theirs.close()
    server.close()
    mine.sendall(json.dumps(request).encode() + b"\n")
    reply = mine.makefile("rb")
    first = reply.readline().decode()
    if not first.startswith("pid "):
        fresh_kernel()
    kernel = int(first.split()[1])

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(kernel, signum)
        except OSError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    line = reply.readline().decode()
    status = int(line.split()[1]) if line.startswith("exit ") else 1 << 8
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code & 0xFF if code >= 0 else 1)


if __name__ == "__main__":
    main()
