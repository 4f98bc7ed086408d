"""The fork server behind every trusted process (trainsys.autograde.forkserver): a forked child runs a module
as ``python -I -m`` would, and ``run_trusted`` returns what ``subprocess.run`` returns, time-outs included.

Each case runs the same request both ways (``TRAINSYS_FORKSERVER=0``: a fresh process) and compares.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from trainsys.autograde import forkserver, launch

PROBE = ("import json, os, resource, sys\n"
         "print(json.dumps([sys.flags.isolated, os.getcwd(), os.environ.get('ONLY_MINE'), "
         "os.environ.get('NBGRADER_COURSE_ROOT'), resource.getrlimit(resource.RLIMIT_AS)[0], sys.path, "
         "sys.argv[1:]]))\n")


def _both(monkeypatch: pytest.MonkeyPatch, call):
    """``call()`` with the fork server, then with a fresh process each time: the two results."""
    monkeypatch.setenv(forkserver.SWITCH, "1")
    forked = call()
    monkeypatch.setenv(forkserver.SWITCH, "0")
    fresh = call()
    monkeypatch.setenv(forkserver.SWITCH, "1")
    return forked, fresh


def test_a_forked_process_sees_what_a_fresh_one_sees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cap = 2**36

    def call() -> list:
        run = launch.run_trusted(tmp_path, "code", timeout=60, extra_env={"ONLY_MINE": "yes", "PYTHONPATH": "/x"},
                                 memory_limit=cap, soft_only=True, stdin=PROBE)
        assert run.returncode == 0, run.stderr
        line = next(text for text in run.stdout.splitlines() if "[" in text)
        return json.loads(line[line.index("["):])

    forked, fresh = _both(monkeypatch, call)
    assert forked == fresh
    assert forked[:5] == [1, str(tmp_path), "yes", str(tmp_path), cap]


def test_exit_status_output_and_errors_are_those_of_a_fresh_process(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    program = ("import sys\nprint('out', 'é')\nprint('err\\r\\nline', file=sys.stderr)\n"
               "sys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\n')\nraise SystemExit(7)\n")

    def call() -> tuple:
        run = launch.run_trusted(tmp_path, "code", timeout=60, stdin=program)
        return run.returncode, run.stdout.replace(">>> ", "").replace("... ", ""), run.stderr.splitlines()[-1]

    forked, fresh = _both(monkeypatch, call)
    assert forked == fresh
    assert forked[0] == 7 and "out é" in forked[1] and "\ufffd" in forked[1] and forked[2] == "line"


def test_an_unknown_module_and_a_bad_command_line_fail_as_they_would(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    forked, fresh = _both(monkeypatch, lambda: launch.run_trusted(tmp_path, "no_such_module_here", timeout=60))
    assert forked.returncode == fresh.returncode == 1
    assert "No module named no_such_module_here" in forked.stderr and "no_such_module_here" in fresh.stderr
    forked, fresh = _both(monkeypatch, lambda: launch.nbgrader(tmp_path, "autograde", "--no-such-option", timeout=120))
    assert forked.returncode == fresh.returncode == 2
    assert "unrecognized arguments: --no-such-option" in forked.stderr


def test_a_large_input_and_output_pass_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    document = json.dumps({"rows": [{"i": i, "text": "x" * 50} for i in range(40_000)]})  # 2.8 MB each way

    def call() -> str:
        run = launch.run_trusted(tmp_path, "json.tool", "--compact", timeout=120, stdin=document)
        assert run.returncode == 0, run.stderr
        return run.stdout

    forked, fresh = _both(monkeypatch, call)
    assert forked == fresh and json.loads(forked) == json.loads(document)


def test_a_time_out_kills_the_process_and_raises_as_subprocess_does(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    program = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n"
    pids = []
    for switch in ("1", "0"):
        monkeypatch.setenv(forkserver.SWITCH, switch)
        start = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired) as caught:
            launch.run_trusted(tmp_path, "code", timeout=2, stdin=program)
        assert time.monotonic() - start < 30
        assert caught.value.timeout == 2 and caught.value.cmd[-2:] == ["-m", "code"]
        assert isinstance(caught.value.output, bytes)  # subprocess.run's, whatever its text setting
        pids.append(int(next(w for w in caught.value.output.decode().replace(">>>", " ").split() if w.isdigit())))
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"


def test_a_process_killed_by_a_signal_returns_its_negative_number(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    program = "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"
    forked, fresh = _both(monkeypatch, lambda: launch.run_trusted(tmp_path, "code", timeout=60, stdin=program))
    assert forked.returncode == fresh.returncode == -signal.SIGTERM


def test_requests_from_several_threads_each_get_their_own_answer(tmp_path: Path) -> None:
    results: dict[int, str] = {}

    def one(index: int) -> None:
        run = launch.run_trusted(tmp_path, "code", timeout=120, stdin=f"import time\ntime.sleep(0.3)\nprint({index} * 7)\n")
        results[index] = run.stdout

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {i: str(i * 7) in text for i, text in results.items()} == {i: True for i in range(6)}


def test_a_dead_server_is_replaced_and_a_refused_request_falls_back(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forkserver.SWITCH, "1")
    assert launch.run_trusted(tmp_path, "code", timeout=60, stdin="print(1)\n").returncode == 0
    first = forkserver._current()
    assert first is not None and first.alive()
    os.kill(first._process.pid, signal.SIGKILL)
    first._process.wait()
    run = launch.run_trusted(tmp_path, "code", timeout=60, stdin="print(2)\n")
    assert run.returncode == 0 and "2" in run.stdout
    second = forkserver._current()
    assert second is not None and second is not first and second.alive()
    # a server that dies while a request is sent: the request runs as a fresh process instead
    monkeypatch.setattr(forkserver.ForkServer, "wait_ready",
                        lambda self: (_ for _ in ()).throw(forkserver.ServerGone("refused")))
    run = launch.run_trusted(tmp_path, "code", timeout=60, stdin="print(3)\n")
    assert run.returncode == 0 and "3" in run.stdout


def test_the_server_leaves_no_child_behind_and_exits_with_its_owner(tmp_path: Path) -> None:
    owner = ("import json, os, sys, time\nfrom pathlib import Path\nfrom trainsys.autograde import forkserver, launch\n"
             "for i in range(3):\n    launch.run_trusted(Path(sys.argv[1]), 'code', timeout=60, stdin='print(1)\\n')\n"
             "server = forkserver._current()._process.pid\n"
             "kids = [p.name for p in Path('/proc').iterdir() if p.name.isdigit() and "
             "(p / 'stat').read_text().split(') ')[1].split()[1] == str(server)]\n"
             "print(json.dumps([server, kids]))\n")
    run = subprocess.run([launch.BIN / "python", "-c", owner, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, forkserver.SWITCH: "1"})
    assert run.returncode == 0, run.stderr
    server, kids = json.loads(run.stdout.splitlines()[-1])
    assert kids == [], f"the server kept children: {kids}"
    deadline = time.monotonic() + 10
    while Path(f"/proc/{server}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{server}").exists() or "Z" in Path(f"/proc/{server}/stat").read_text().split()[2]
