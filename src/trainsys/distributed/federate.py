r"""FedAvg on Flower's Deployment Runtime, on this machine: one SuperLink, ``S`` SuperNodes, one run.

``python -m trainsys.distributed.federate --out record.json [--supernodes 2] [--rounds 3] [--fraction 0.1]
[--task synthetic|fashion-mnist|shakespeare] [--timeout 120]`` starts, on 127.0.0.1 and free ports, what ``S + 1`` machines would run (Flower 1.42;
the flags are those of ``flower-superlink --help`` / ``flower-supernode --help`` and ``flwr run --help``,
checked against the installed package's ``flwr/superlink/cli/flower_superlink.py``,
``flwr/supernode/cli/flower_supernode.py`` and ``flwr/cli/run/run.py``)::

    flower-superlink --insecure --host 127.0.0.1 --port PORT --disable-runtime-dependency-installation
    flower-supernode --insecure --superlink 127.0.0.1:PORT --port RUNTIME_PORT_i --max-wait-time T \
                     --node-config "supernode-id=i num-supernodes=S"          # i = 0 … S-1
    flwr run APP_DIR trainsys-local --format json

Since 1.42 one HTTP port serves the SuperLink's Fleet, Control and Runtime APIs (``--host``/``--port``;
the older ``--fleet-api-address``/``--control-api-address`` are deprecated), and each SuperNode serves
its own Runtime API (``--port``, default 9094 — hence one free port per SuperNode). Each of them starts a
``flower-superexec``, which starts ``flwr-serverapp`` / ``flwr-clientapp`` processes for the run.
``APP_DIR`` is a temporary Flower App whose ``pyproject.toml`` names the apps of
:mod:`trainsys.distributed.flower_app` (``[tool.flwr.app.components]``) and carries the run config
(``[tool.flwr.app.config]``); ``flwr run`` reads the SuperLink connection ``trainsys-local`` (``address``,
``insecure = true``) from ``$FLWR_HOME/config.toml``, with ``FLWR_HOME`` a temporary folder too —
nothing is written to the repository or to ``~/.flwr``. Telemetry and the update check are off
(``FLWR_TELEMETRY_ENABLED=0``, ``FLWR_DISABLE_UPDATE_CHECK=1``), and so is the SuperLink's runtime
``uv sync`` of app dependencies: everything works offline. The SuperExecs look for work every 0.2 s
(``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``; default 1 s).

:func:`federate` waits for the ServerApp's run record (:mod:`trainsys.distributed.flower_app.server_app`),
then **stops every process it started** — also on error, ``Ctrl-C``, ``SIGTERM`` and time-out: each
command runs in its own process group (session), and every process carrying this run's marker
environment variable (the SuperLink starts its SuperExec in a session of its own) is killed by pid.

A bad configuration fails fast with a message that says what happened: a ``port`` given explicitly and
in use (``ValueError`` before anything starts); a SuperNode that cannot reach the SuperLink (it gives
up after ``connect_timeout`` s, ``--max-wait-time``, and :func:`federate` raises with its log); any
Flower process that exits early; the whole run outlasting ``timeout``.

**Fault injection** (for the tests): ``kill_supernode=i, kill_after_round=r`` kills SuperNode ``i``'s
whole process group (``SIGKILL``: SuperNode, SuperExec, ClientApps) as soon as the record shows round
``r`` done — while round ``r + 1`` is in flight. The ServerApp then waits ``round_timeout`` s for each
later round and aggregates the clients that reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from trainsys._validation import describe, require_int, require_real
from trainsys.distributed.flower_app import (CLIENT_APP_REF, RUN_CONNECT_TIMEOUT, RUN_FEDAVG_CONFIG,
                                             RUN_NUM_SUPERNODES, RUN_RECORD_PATH, RUN_ROUND_TIMEOUT, SERVER_APP_REF,
                                             node_config_string)
from trainsys.distributed.launch import free_port, require_free_port
from trainsys.fedavg.real import task_config

HOST = "127.0.0.1"
CONNECTION = "trainsys-local"
"""The SuperLink connection's name in the temporary ``$FLWR_HOME/config.toml``."""
APP_NAME = "trainsys-fedavg"
"""``[project].name`` of the temporary Flower App (letters, digits and hyphens, as Flower requires)."""
MARKER = "TRAINSYS_FEDERATE_RUN"
"""Environment variable set to a fresh id in every process of one run, to find them all when stopping."""
STARTUP_TIMEOUT_S = 30.0
"""Seconds the SuperLink may take to listen on its port (a Python process importing Flower; ~2 s idle)."""
FLOWER_PROCESSES = ("flower-superlink", "flower-supernode", "flower-superexec", "flwr-serverapp",
                    "flwr-clientapp", "flwr run")
"""Command names of the processes a run starts (directly or through the SuperExecs)."""


@dataclass
class _Process:
    name: str
    command: list[str]
    popen: subprocess.Popen[bytes]
    log: Path


def _toml(value: object) -> str:
    """A TOML scalar: a string (JSON escapes are TOML basic-string escapes), bool, int or float."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def write_flower_app(app_dir: Path, run_config: dict[str, object]) -> None:
    """A Flower App in ``app_dir``: a ``pyproject.toml`` naming the course's apps and holding ``run_config``."""
    lines = ['[build-system]', 'requires = ["hatchling"]', 'build-backend = "hatchling.build"', '',
             '[project]', f'name = "{APP_NAME}"', 'version = "1.0.0"',
             'description = "The course\'s FedAvg on Flower\'s Deployment Runtime"', 'license = "MIT"',
             'dependencies = []', '', '[tool.flwr.app]', 'publisher = "trainsys"', '',
             '[tool.flwr.app.components]', f'serverapp = "{SERVER_APP_REF}"', f'clientapp = "{CLIENT_APP_REF}"',
             '', '[tool.flwr.app.config]', *(f'{key} = {_toml(v)}' for key, v in run_config.items())]
    app_dir.mkdir(parents=True)
    (app_dir / "pyproject.toml").write_text("\n".join(lines) + "\n")


def write_flower_config(flwr_home: Path, address: str) -> None:
    """``$FLWR_HOME/config.toml`` with one default SuperLink connection, ``address``, without TLS."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    (flwr_home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                                           f'address = "{address}"\ninsecure = true\n')


def flower_command(name: str) -> str:
    """The path of Flower's console script ``name`` next to this Python (raises if Flower 1.42 is missing)."""
    try:
        version = metadata.version("flwr")
    except metadata.PackageNotFoundError:
        raise RuntimeError("Flower is not installed in this environment: pip install flwr==1.42.0") from None
    if not version.startswith("1.42."):
        raise RuntimeError(f"federate drives Flower 1.42's command lines; flwr {version} is installed "
                           "(pip install flwr==1.42.0)")
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise RuntimeError(f"{name} not found next to {sys.executable}: is flwr==1.42.0 installed here?")
    return str(path)


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((HOST, port)) == 0


def _tail(path: Path, chars: int = 2500) -> str:
    """The last ``chars`` characters of a log, without terminal colour codes."""
    try:
        return re.sub(r"\x1b\[[0-9;]*m", "", path.read_text(errors="replace"))[-chars:]
    except OSError:
        return "(no log)"


def run_processes(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``MARKER=marker`` (this user's, this run's only)."""
    needle = f"{MARKER}={marker}".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    pids.append(int(entry.name))
        except OSError:  # gone, or another user's
            continue
    return pids


def stop_processes(processes: list[_Process], marker: str, grace: float = 2.0) -> list[int]:
    """Stop everything one run started; return the pids that were still alive after ``grace`` seconds.

    ``SIGTERM`` to each started command's process group and to every process carrying the run's marker
    (the SuperExecs run in sessions of their own), up to ``grace`` seconds for them to exit, then
    ``SIGKILL`` to the groups and, until none is left, to every marked process; finally every started
    command is reaped.
    """
    def signal_all(signum: int) -> list[int]:
        for proc in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signum)  # the group may outlive its leader
        pids = run_processes(marker)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        return pids

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (any(p.popen.poll() is None for p in processes) or run_processes(marker)):
        time.sleep(0.05)
    stragglers: list[int] = []
    for _ in range(100):
        pids = signal_all(signal.SIGKILL)
        if not pids:
            break
        stragglers += pids
        time.sleep(0.05)
    for proc in processes:
        proc.popen.wait()
    return sorted(set(stragglers))


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def federate(out: str | os.PathLike[str], *, supernodes: int = 2, rounds: int = 3, fraction: float | None = None,
             seed: int = 0, epochs: int = 1, task: str = "synthetic", timeout: float = 120.0, round_timeout: float = 30.0,
             connect_timeout: float = 30.0, port: int | None = None, superlink_address: str | None = None,
             kill_supernode: int | None = None, kill_after_round: int = 1) -> dict[str, Any]:
    """Run FedAvg (``run_fedavg``'s config with these fields) on a local Flower federation; return the record.

    ``task`` picks the data and model (:func:`trainsys.fedavg.real.task_config`: the synthetic task, ``"fashion-mnist"`` with
    the 2NN, or ``"shakespeare"`` by role); ``fraction=None`` is the task's default ``C`` (0.1; Shakespeare 0.01).

    Starts one SuperLink on ``port`` (a free one if ``None``), ``supernodes`` SuperNodes dialling
    ``superlink_address`` (default ``127.0.0.1:port``; another value simulates a SuperNode that cannot
    reach the SuperLink) and the run; waits for the ServerApp's record (see
    :mod:`trainsys.distributed.flower_app.server_app`), adds ``"deployment"`` (addresses, the commands,
    the Flower version, the run's marker, the injected kill, the pids still alive after the SIGTERM grace) and
    ``"federate_wall_time_s"``, writes it to ``out`` and returns it. Every started process is stopped
    before this returns or raises. :data:`STARTUP_TIMEOUT_S` bounds the SuperLink's start,
    ``connect_timeout`` the SuperNodes' attempts to connect (``--max-wait-time``) and the discovery; ``round_timeout`` the ServerApp's wait for one round's
    replies; ``timeout`` the run, from ``flwr run`` to the finished record.

    Raises ``ValueError``/``TypeError`` naming a bad argument (before anything starts), and
    ``RuntimeError`` with the relevant logs when a Flower process exits early, the ServerApp reports an
    error, or the run outlasts ``timeout`` seconds.
    """
    supernodes = require_int("supernodes", supernodes, minimum=1)
    config = task_config(task, rounds=rounds, fraction=fraction, seed=seed, epochs=epochs)
    timeout = require_real("timeout", timeout, strictly_positive=True)
    round_timeout = require_real("round_timeout", round_timeout, strictly_positive=True)
    connect_timeout = require_real("connect_timeout", connect_timeout, strictly_positive=True)
    if kill_supernode is not None:
        kill_supernode = require_int("kill_supernode", kill_supernode, minimum=0, maximum=supernodes - 1)
        if config.rounds < 2:
            raise ValueError(f"kill_supernode needs rounds >= 2 (a round after the kill), got rounds={config.rounds}")
        kill_after_round = require_int("kill_after_round", kill_after_round, minimum=1, maximum=config.rounds - 1)
    if superlink_address is not None and (not isinstance(superlink_address, str) or ":" not in superlink_address):
        raise ValueError(f"superlink_address must be 'host:port', got {describe(superlink_address)}")
    port = free_port(HOST) if port is None else require_free_port("port", port, "the SuperLink", HOST)
    out = Path(out)
    commands = {name: flower_command(name) for name in ("flower-superlink", "flower-supernode", "flwr")}

    start = time.perf_counter()
    marker = uuid.uuid4().hex
    processes: list[_Process] = []
    stragglers: list[int] = []
    with tempfile.TemporaryDirectory(prefix="trainsys-flower-") as tmp:
        tmp_path = Path(tmp)
        record_path = tmp_path / "record.json"
        flwr_home = tmp_path / "flwr-home"
        write_flower_config(flwr_home, f"{HOST}:{port}")
        write_flower_app(tmp_path / APP_NAME, {
            RUN_FEDAVG_CONFIG: json.dumps(asdict(config)),
            RUN_NUM_SUPERNODES: supernodes, RUN_RECORD_PATH: str(record_path),
            RUN_ROUND_TIMEOUT: float(round_timeout), RUN_CONNECT_TIMEOUT: float(connect_timeout)})
        env = {**os.environ, "FLWR_HOME": str(flwr_home), "FLWR_TELEMETRY_ENABLED": "0",
               "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2", "OMP_NUM_THREADS": "1",
               "PYTHONWARNINGS": "ignore",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", MARKER: marker}

        def launch(name: str, command: list[str]) -> _Process:
            log = tmp_path / f"{name}.log"
            with log.open("wb") as handle:
                popen = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=tmp, start_new_session=True)
            processes.append(_Process(name, command, popen, log))
            return processes[-1]

        def failure(what: str, *logs: _Process) -> RuntimeError:
            tails = "\n".join(f"--- {p.name}: {' '.join(p.command)} ---\n{_tail(p.log)}" for p in logs)
            return RuntimeError(f"{what}\n{tails}")

        try:
            superlink = launch("superlink", [commands["flower-superlink"], "--insecure", "--host", HOST,
                                             "--port", str(port), "--disable-runtime-dependency-installation"])
            dial = superlink_address or f"{HOST}:{port}"
            nodes = [launch(f"supernode-{i}", [  # they retry until the SuperLink listens, at most connect_timeout s
                commands["flower-supernode"], "--insecure", "--superlink", dial, "--port", str(free_port(HOST)),
                "--max-wait-time", str(connect_timeout), "--node-config", node_config_string(i, supernodes)])
                for i in range(supernodes)]
            killed_at: float | None = None

            def check_supernodes() -> None:
                for i, node in enumerate(nodes):
                    if node.popen.poll() is not None and not (killed_at is not None and i == kill_supernode):
                        raise failure(f"SuperNode {i} exited with code {node.popen.returncode} before the run "
                                      f"finished (can it reach the SuperLink at {dial}? it gives up after "
                                      f"--max-wait-time {connect_timeout} s)", node)

            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not _listening(port):
                if superlink.popen.poll() is not None:
                    raise failure(f"flower-superlink exited with code {superlink.popen.returncode} before listening "
                                  f"on {HOST}:{port}", superlink)
                if time.monotonic() > deadline:
                    raise failure(f"flower-superlink did not listen on {HOST}:{port} within {STARTUP_TIMEOUT_S} s",
                                  superlink)
                check_supernodes()
                time.sleep(0.1)
            runner = launch("flwr-run", [commands["flwr"], "run", str(tmp_path / APP_NAME), CONNECTION,
                                         "--format", "json"])
            deadline = time.monotonic() + timeout
            while True:
                record = _read_record(record_path)
                if record is not None and record.get("finished"):
                    break
                if time.monotonic() > deadline:
                    raise failure(f"the run did not finish within timeout={timeout} s (record so far: "
                                  f"{len((record or {}).get('history', []))} rounds)", superlink, *nodes, runner)
                if runner.popen.poll() not in (None, 0):
                    raise failure(f"flwr run exited with code {runner.popen.returncode}", runner, superlink)
                if superlink.popen.poll() is not None:
                    raise failure(f"flower-superlink exited with code {superlink.popen.returncode} during the run",
                                  superlink)
                check_supernodes()
                if kill_supernode is not None and killed_at is None and record is not None \
                        and len(record.get("history", [])) >= kill_after_round:
                    os.killpg(nodes[kill_supernode].popen.pid, signal.SIGKILL)  # SuperNode, SuperExec, ClientApps
                    killed_at = time.perf_counter() - start
                time.sleep(0.1)
            if "error" in record:
                check_supernodes()  # a SuperNode that could not connect is the root cause, not the ServerApp
                raise failure(f"the ServerApp failed: {record['error']}", superlink, *nodes)
        finally:
            stragglers = stop_processes(processes, marker)
    record["deployment"] = {
        "flower_version": metadata.version("flwr"), "superlink": f"{HOST}:{port}", "supernodes_dial": dial,
        "supernodes": supernodes, "commands": [p.command for p in processes],
        "marker": marker, "killed_supernode": kill_supernode,
        "killed_after_round": kill_after_round if kill_supernode is not None else None, "killed_at_s": killed_at,
        "pids_killed_after_grace": stragglers}
    record["federate_wall_time_s"] = time.perf_counter() - start
    out.write_text(json.dumps(record, indent=1))
    return record


def summary(record: dict[str, Any]) -> str:
    """A few lines about a run record: per round the accuracy, the selected and the reporting clients."""
    deployment = record.get("deployment", {})
    lines = [f"FedAvg on Flower {deployment.get('flower_version')}: SuperLink {deployment.get('superlink')}, "
             f"{record['num_supernodes']} SuperNodes, initial test accuracy {record['initial_test_accuracy']:.4f}"]
    for h in record["history"]:
        missing = f", missing {h['missing']}" if h["missing"] else ""
        lines.append(f"  round {h['round']}: test accuracy {h['test_accuracy']:.4f}, selected {h['selected']}, "
                     f"reported {h['reported']}{missing} ({h['round_time_s']:.1f} s)")
    if deployment.get("killed_supernode") is not None:
        lines.append(f"  SuperNode {deployment['killed_supernode']} was killed after round "
                     f"{deployment['killed_after_round']} (at {deployment['killed_at_s']:.1f} s)")
    lines.append(f"final test accuracy {record['final_test_accuracy']:.4f}; {record['federate_wall_time_s']:.1f} s "
                 "in all; every started process stopped")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="FedAvg on a local Flower 1.42 federation (Deployment Runtime)")
    parser.add_argument("--out", required=True, help="where to write the run record (JSON)")
    parser.add_argument("--supernodes", type=int, default=2, help="S: SuperNode i hosts the clients k mod S == i")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fraction", type=float, default=None,
                        help="C: clients per round max(ceil(C K), 1) (default: the task's, 0.1; shakespeare 0.01)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--task", choices=["synthetic", "fashion-mnist", "shakespeare"], default="synthetic",
                        help="the data and model: the lessons' synthetic task, Fashion-MNIST (2NN) or Shakespeare")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole run")
    parser.add_argument("--round-timeout", type=float, default=30.0, help="seconds the server waits for a round")
    parser.add_argument("--connect-timeout", type=float, default=30.0,
                        help="seconds a SuperNode tries to reach the SuperLink (and the server waits for them)")
    parser.add_argument("--port", type=int, default=None, help="the SuperLink's port (default: a free one)")
    parser.add_argument("--superlink-address", default=None,
                        help="host:port the SuperNodes dial (default: 127.0.0.1:PORT)")
    parser.add_argument("--kill-supernode", type=int, default=None,
                        help="fault injection: SIGKILL this SuperNode after --kill-after-round rounds")
    parser.add_argument("--kill-after-round", type=int, default=1)
    args = parser.parse_args(argv)

    def terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signum)  # unwinds through federate's cleanup, as Ctrl-C does

    signal.signal(signal.SIGTERM, terminate)
    try:
        record = federate(args.out, supernodes=args.supernodes, rounds=args.rounds, fraction=args.fraction,
                          seed=args.seed, epochs=args.epochs, task=args.task, timeout=args.timeout, round_timeout=args.round_timeout,
                          connect_timeout=args.connect_timeout, port=args.port,
                          superlink_address=args.superlink_address, kill_supernode=args.kill_supernode,
                          kill_after_round=args.kill_after_round)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    except RuntimeError as error:
        print(f"federate: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt as stop:
        signum = stop.args[0] if stop.args else signal.SIGINT
        print(f"federate: stopped by {signal.Signals(signum).name}; every process it started has been stopped",
              file=sys.stderr)
        raise SystemExit(128 + signum) from None
    print(summary(record))


if __name__ == "__main__":
    main()
