"""The grading sandbox and its data-only channel, each guarantee tested on its own.

The sandbox (trainsys.autograde.sandbox) must hide the course, keep the system read-only, cut the
network, keep its processes in their own PID namespace (all dying with it) and apply its rlimits; the
channel (trainsys.autograde.wire) must carry every kind of value the checks exchange and refuse
anything that is not plain data. The class-level attacks are in tests/test_hostile_class.py.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from trainsys.autograde import sandbox as sb
from trainsys.autograde import wire
from trainsys.autograde.isolation import IsolationTimeout, IsolationUnavailable, StudentProcess
from trainsys.autograde.sandbox import SandboxConfig, SandboxUnavailable, ensure_available, wrap
from trainsys.course import REPO

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux only")


def _in_sandbox(code: str, config: SandboxConfig | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    command = wrap([sys.executable, "-I", "-c", code], config or SandboxConfig())
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


# --- the sandbox ----------------------------------------------------------------------------------------
def test_the_course_is_hidden_but_the_package_is_importable() -> None:
    run = _in_sandbox(
        "import os, trainsys.grading, numpy\n"
        f"print(sorted(os.listdir({str(REPO)!r})))\n"
        f"print(os.path.exists({str(REPO / 'solutions')!r}), os.path.exists({str(REPO / 'autograder')!r}))\n")
    assert run.returncode == 0, run.stderr
    listing, hidden = run.stdout.splitlines()
    assert "solutions" not in listing and "autograder" not in listing and "tests" not in listing
    assert hidden == "False False"


def test_the_system_and_the_package_are_read_only() -> None:
    target = REPO / "src" / "trainsys" / "grading" / "__init__.py"
    before = target.read_bytes()
    run = _in_sandbox(
        "import errno\n"
        f"for path in ({str(target)!r}, '/usr/lib/x', {sys.prefix + '/lib/python3.11/site-packages/evil.pth'!r}):\n"
        "    try:\n"
        "        open(path, 'a').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
        "open('/tmp/mine', 'w').write('ok'); print(open('/tmp/mine').read())\n")
    assert run.returncode == 0, run.stderr
    assert "wrote" not in run.stdout and run.stdout.count("refused") == 3
    assert run.stdout.strip().endswith("ok"), "the private tmpfs must be writable"
    assert target.read_bytes() == before


def _fonts(font_list: dict) -> dict:
    """A font list with its lists as sets: Matplotlib scans fonts in no fixed order."""
    return {k: sorted(map(json.dumps, v)) if isinstance(v, list) else v for k, v in font_list.items()}


def test_matplotlib_reads_the_font_list_built_once_and_cannot_change_it() -> None:
    """build_font_list: the list a sandboxed process would write, given read-only to every later sandbox."""
    fresh = _in_sandbox("import matplotlib.font_manager, os, json, matplotlib\n"
                        "folder = matplotlib.get_cachedir()\n"
                        "print(folder, json.dumps(json.load(open(os.path.join(folder, os.listdir(folder)[0])))))")
    assert fresh.returncode == 0, fresh.stderr
    folder, built_there = fresh.stdout.split(" ", 1)
    assert folder == sb.MPL_DIR
    font_list = sb.build_font_list(SandboxConfig())
    assert font_list and _fonts(json.loads(Path(font_list).read_text())) == _fonts(json.loads(built_there))
    before = Path(font_list).read_bytes()
    run = _in_sandbox(
        "import os, matplotlib.font_manager as fm\n"
        "print(sorted(os.listdir(os.environ['MPLCONFIGDIR'])), len(fm.fontManager.ttflist) > 0)\n"
        "try:\n"
        f"    open(os.path.join(os.environ['MPLCONFIGDIR'], {Path(font_list).name!r}), 'w').write('{{}}')\n"
        "    print('wrote')\n"
        "except OSError as exc:\n"
        "    print('refused')\n", SandboxConfig(font_list=font_list))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == [f"[{Path(font_list).name!r}] True", "refused"], run.stdout + run.stderr
    assert Path(font_list).read_bytes() == before


def test_there_is_no_network() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        run = _in_sandbox(
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "    print('connected')\n"
            "except OSError as exc:\n"
            "    print('refused')\n")
    finally:
        server.close()
    assert run.stdout.strip() == "refused", run.stdout + run.stderr


def test_the_grader_is_invisible_and_processes_die_with_the_sandbox() -> None:
    marker = f"trainsys-sandbox-test-{uuid.uuid4().hex}"
    run = _in_sandbox(
        "import os, subprocess\n"
        f"print(os.getppid() != {os.getpid()}, {os.getpid()} not in [int(p) for p in os.listdir('/proc') if p.isdigit()])\n"
        f"subprocess.Popen(['/bin/sh', '-c', 'exec -a {marker} sleep 300'], start_new_session=True)\n"
        "try:\n"
        f"    os.kill({os.getpid()}, 0)\n"
        "    print('signalled')\n"
        "except OSError:\n"
        "    print('cannot signal')\n")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True", "cannot", "signal"]
    time.sleep(0.5)
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                alive.append(pid)
        except OSError:
            pass
    assert not alive, f"a process started in the sandbox outlived it: {alive}"


def test_rlimits_and_user() -> None:
    config = SandboxConfig(address_space=3 * 2**30, processes=64, open_files=128, file_size=2**20, cpu_seconds=60)
    run = _in_sandbox(
        "import os, resource\n"
        "print([resource.getrlimit(getattr(resource, n))[0] for n in "
        "('RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_NOFILE', 'RLIMIT_FSIZE', 'RLIMIT_CPU')])\n"
        "print(os.getuid())\n"
        "try:\n"
        "    open('/tmp/big', 'wb').write(b'x' * 2**21)\n"
        "except OSError as exc:\n"
        "    print('too big')\n", config)
    lines = run.stdout.splitlines()
    assert lines[0] == str([3 * 2**30, 64, 128, 2**20, 60]), run.stdout + run.stderr
    if os.geteuid() == 0:
        assert lines[1] == str(sb.SLOT_UID_BASE), "as root, the sandbox runs as the slot's own user"
    assert "too big" in run.stdout


def test_a_fork_bomb_is_contained() -> None:
    run = _in_sandbox(
        "import os\n"
        "count = 0\n"
        "try:\n"
        "    for _ in range(1000):\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(30); os._exit(0)\n"
        "        count += 1\n"
        "except OSError:\n"
        "    pass\n"
        "print(count)\n", SandboxConfig(processes=50), timeout=60)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.strip()) < 50


def test_a_missing_bubblewrap_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sb.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        ensure_available()


def test_the_sandbox_runs_here() -> None:
    ensure_available()


# --- the data-only channel ------------------------------------------------------------------------------
def _round_trip(value):
    return wire.loads(wire.dumps(value))


def test_values_cross_the_channel_unchanged() -> None:
    rng = np.random.default_rng(7)
    rng.standard_normal(3)
    value = {"a": np.arange(6, dtype=np.float16).reshape(2, 3), 3: (1, 2.5, float("nan"), None, True, "s"),
             "scalar": np.float32(1.5), "gen": rng, "types": [np.int8, float], "inf": float("-inf"),
             "dtype": np.dtype("<f8"), "empty": np.zeros((0, 4)), "big": 2**80}
    back = _round_trip(value)
    assert back.keys() == value.keys()
    np.testing.assert_array_equal(back["a"], value["a"])
    assert back["a"].dtype == np.float16
    assert back[3][:2] == (1, 2.5) and np.isnan(back[3][2]) and back[3][3:] == (None, True, "s")
    assert type(back["scalar"]) is np.float32 and back["scalar"] == 1.5
    assert back["gen"].bit_generator.state == rng.bit_generator.state
    assert back["types"] == [np.int8, float] and back["dtype"] == np.dtype("<f8") and back["big"] == 2**80
    assert back["empty"].shape == (0, 4)


def test_torch_values_and_modules_cross_the_channel() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model[1].eval()
    generator = torch.Generator().manual_seed(3)
    back = _round_trip({"model": model, "t": torch.ones(2, dtype=torch.bfloat16), "g": generator,
                        "dtype": torch.float16, "device": torch.device("cpu")})
    copy = back["model"]
    assert type(copy) is torch.nn.Sequential and [type(m) for m in copy] == [type(m) for m in model]
    assert [m.training for m in copy.modules()] == [m.training for m in model.modules()]
    for (k1, v1), (k2, v2) in zip(model.state_dict().items(), copy.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2)
    x = torch.randn(5, 3)
    model.eval(), copy.eval()
    assert torch.equal(model(x), copy(x))
    assert back["t"].dtype == torch.bfloat16 and back["dtype"] is torch.float16
    assert torch.equal(back["g"].get_state(), generator.get_state())


@pytest.mark.parametrize("value", [lambda: 1, object(), np.array([object()], dtype=object)],
                         ids=["function result is a stand-in", "object", "object array"])
def test_anything_else_is_refused_or_a_stand_in(value) -> None:
    if callable(value) and not isinstance(value, np.ndarray):
        stand_in = _round_trip(value)
        with pytest.raises(RuntimeError, match="cannot run in another process"):
            stand_in()
        return
    with pytest.raises(wire.WireError, match="cannot be sent"):
        wire.dumps(value)


def test_a_module_of_a_students_own_class_is_refused() -> None:
    class Mine(torch.nn.Module):
        pass

    with pytest.raises(wire.WireError, match="cannot be sent"):
        wire.dumps(Mine())


def _message(header: object, blobs: list[bytes] = ()) -> bytes:
    import json

    data = json.dumps(header).encode()
    return struct.pack("<Q", len(data)) + data + b"".join(struct.pack("<Q", len(b)) + b for b in blobs)


@pytest.mark.parametrize(("message", "error"), [
    (struct.pack("<Q", 8) + pickle.dumps(print)[:8], "not JSON"),
    (_message({"v": {"$": "reduce", "v": "os.system"}, "n": 0}), "unknown message node"),
    (_message({"v": {"$": "module", "c": "os:system", "a": {}, "s": {}}, "n": 0}), "neither torch's nor the course's"),
    (_message({"v": {"$": "dataclass", "c": "subprocess:Popen", "v": {}}, "n": 0}), "neither torch's nor the course's"),
    (_message({"v": {"$": "ndarray", "b": 0}, "n": 1}, [b"\x93NUMPY not an array"]), "malformed array"),
    (_message({"v": {"$": "ndarray", "b": 3}, "n": 0}), "does not carry"),
    (_message({"v": {"$": "tensor", "b": 0}, "n": 1}, [pickle.dumps(print)]), "malformed tensor"),
    (struct.pack("<Q", wire.MAX_HEADER + 1), "over the"),
], ids=["a pickle", "unknown tag", "module class from os", "dataclass from subprocess", "bad npy",
        "missing blob", "pickle as tensor", "huge header"])
def test_messages_that_are_not_data_are_refused(message: bytes, error: str) -> None:
    with pytest.raises((wire.WireError, EOFError), match=error):
        wire.receive(io.BytesIO(message))


def test_an_array_holding_pickled_objects_is_refused() -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array([print], dtype=object), allow_pickle=True)
    with pytest.raises(wire.WireError, match="malformed array"):
        wire.receive(io.BytesIO(_message({"v": {"$": "ndarray", "b": 0}, "n": 1}, [buffer.getvalue()])))


# --- the student process ----------------------------------------------------------------------------------
def _student(source: str, name: str = "f", timeout: float = 30) -> StudentProcess:
    return StudentProcess([source], name, timeout=timeout, sandbox=SandboxConfig())


def test_in_place_updates_views_and_generators_come_back() -> None:
    source = ("import numpy as np\n"
              "def f(a, rng):\n"
              "    a += 1\n"
              "    rng.standard_normal()\n"
              "    return a[1:], a\n")
    a, rng = np.zeros(4), np.random.default_rng(1)
    expected = np.random.default_rng(1)
    expected.standard_normal()
    with _student(source) as student:
        view, same = student.function(a, rng)
    assert same is a and np.shares_memory(view, a) and view.base is not None
    np.testing.assert_array_equal(a, np.ones(4))
    assert rng.bit_generator.state == expected.bit_generator.state


def test_a_loss_with_a_graph_comes_back_with_the_same_gradients() -> None:
    source = "import torch\ndef f(model, x):\n    return model(x).pow(2).mean()\n"
    torch.manual_seed(0)
    model, x = torch.nn.Linear(3, 1), torch.randn(4, 3)
    with _student(source) as student:
        loss = student.function(model, x)
    assert loss.grad_fn is not None
    want = model(x).pow(2).mean()
    torch.testing.assert_close(loss.detach(), want.detach())
    got = torch.autograd.grad(loss, list(model.parameters()))
    expected = torch.autograd.grad(want, list(model.parameters()))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


WRITE_TO_EVERY_PIPE = (
    "import os, stat, struct, pickle\n"
    "def _to_pipes(data):\n"
    "    for fd in range(3, 64):\n"
    "        try:\n"
    "            if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
    "                os.write(fd, data)\n"
    "        except OSError:\n"
    "            pass\n")


@pytest.mark.parametrize(("source", "error"), [
    (WRITE_TO_EVERY_PIPE + "def f(x):\n    _to_pipes(b'garbage that is not a message' * 100)\n    return x\n",
     IsolationUnavailable),
    (WRITE_TO_EVERY_PIPE + "def f(x):\n    p = pickle.dumps(print)\n    _to_pipes(struct.pack('<Q', len(p)) + p)\n"
     "    return x\n", IsolationUnavailable),
    ("import os\ndef f(x):\n    os._exit(0)\n", IsolationUnavailable),
    ("def f(x):\n    while True:\n        pass\n", IsolationTimeout),
], ids=["garbage on stdout", "a pickle on stdout", "exits during the call", "never returns"])
def test_a_student_process_that_does_not_answer_properly_is_unavailable(source: str, error: type) -> None:
    with _student(source, timeout=5) as student:
        assert student.status["ok"]
        with pytest.raises(error):
            student.function(np.zeros(2))


def test_prints_do_not_corrupt_the_channel() -> None:
    source = "import os, sys\nprint('load')\ndef f(x):\n    print('call'); os.write(1, b'raw'); sys.stdout.flush()\n    return x * 2\n"
    with _student(source) as student:
        np.testing.assert_array_equal(student.function(np.ones(2)), np.full(2, 2.0))


def test_an_unsendable_result_is_a_type_error() -> None:
    with _student("def f(x):\n    return object()\n") as student:
        with pytest.raises(TypeError, match="cannot be sent back"):
            student.function(1)


def test_a_replaced_buffer_is_not_an_in_place_update() -> None:
    source = ("def f(acc, g):\n"
              "    acc['a'] += g\n"          # in place: the caller's array changes
              "    acc['b'] = acc['b'] + g\n"  # a new array: the caller's dict must hold a new object
              "    acc['c'] = 1\n")
    a, b = np.zeros(3), np.zeros(3)
    acc = {"a": a, "b": b}
    with _student(source) as student:
        student.function(acc, np.ones(3))
    assert acc["a"] is a and acc["b"] is not b and acc["c"] == 1
    np.testing.assert_array_equal(a, np.ones(3))
    np.testing.assert_array_equal(b, np.zeros(3))
    np.testing.assert_array_equal(acc["b"], np.ones(3))


def test_the_grader_fingerprint_sees_a_new_startup_file(tmp_path, monkeypatch) -> None:
    from trainsys.autograde import integrity

    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "ok.py").write_text("x = 1\n")
    monkeypatch.setattr(integrity, "site_packages", lambda: [site])
    before = integrity.fingerprint(tmp_path)
    (site / "__pycache__").mkdir()
    (site / "__pycache__" / "ok.cpython-311.pyc").write_bytes(b"cache")
    integrity.assert_unchanged(before, tmp_path)  # a bytecode cache is no change
    (site / "evil.pth").write_text("import os\n")
    with pytest.raises(integrity.GraderChanged, match="site-packages"):
        integrity.assert_unchanged(before, tmp_path)


def test_what_a_failing_call_did_to_its_arguments_comes_back() -> None:
    source = ("import numpy as np\n"
              "def f(rng, x):\n"
              "    rng.standard_normal()\n"
              "    x.flags.writeable = True\n"
              "    raise ValueError('x must be positive')\n"
              "def g(x):\n"
              "    y = x.copy(); y.flags.writeable = False\n"
              "    return y\n")
    rng, expected = np.random.default_rng(5), np.random.default_rng(5)
    expected.standard_normal()
    with StudentProcess([source], "f", timeout=30, sandbox=SandboxConfig()) as student:
        with pytest.raises(ValueError, match="x must be positive"):
            student.function(rng, np.zeros(2))
    assert rng.bit_generator.state == expected.bit_generator.state
    with StudentProcess([source], "g", timeout=30, sandbox=SandboxConfig()) as student:
        assert not student.function(np.zeros(2)).flags.writeable


def test_one_process_serves_several_named_functions_each_call_to_its_own() -> None:
    source = ("import numpy as np\n"
              "def f(a):\n    a += 1\n    return a\n"
              "def g(a):\n    return -a\n")
    a = np.zeros(2)
    with StudentProcess([source], ["f", "g"], timeout=30, sandbox=SandboxConfig()) as student:
        assert student.status["ok"] and student.function is student.functions["f"]
        assert student.functions["f"](a) is a and a.tolist() == [1.0, 1.0]  # f's in-place update came back
        assert student.functions["g"](a).tolist() == [-1.0, -1.0] and a.tolist() == [1.0, 1.0]
        assert student.functions["f"](a) is a and a.tolist() == [2.0, 2.0]
    with StudentProcess([source], ["f", "h", "g"], timeout=30, sandbox=SandboxConfig()) as student:
        assert student.status == {"ok": False, "error": "h is not defined", "tampered": []}


@pytest.mark.parametrize("name", ["", [], ["f", "not a name"], [1]], ids=["empty", "none", "not a name", "not text"])
def test_a_bad_function_name_is_refused_before_any_process_starts(name) -> None:
    with pytest.raises(ValueError, match="name must be a function name or a non-empty list of them"):
        StudentProcess(["def f():\n    pass\n"], name, timeout=30, sandbox=SandboxConfig())


def test_an_object_returned_twice_is_one_object_and_legacy_generators_cross() -> None:
    source = ("import numpy as np\n"
              "def f(x, legacy):\n"
              "    y = x * 2\n"
              "    legacy.random_sample()\n"
              "    return y, {'y': y, 'z': y + 1}\n")
    legacy, expected = np.random.RandomState(3), np.random.RandomState(3)
    expected.random_sample()
    with _student(source) as student:
        y, cache = student.function(np.ones(3), legacy)
    assert cache["y"] is y and cache["z"] is not y
    assert legacy.random_sample() == expected.random_sample()


@pytest.mark.skipif(os.geteuid() != 0 or not sb.Cgroup.ROOTS["cpu"].is_dir(), reason="cgroups need root and v1")
def test_each_sandbox_gets_its_own_cgroups_and_they_go_with_it() -> None:
    student = StudentProcess(["def f(x):\n    return x\n"], "f", timeout=30, sandbox=SandboxConfig(memory=2**30))
    try:
        paths = list(student.cgroup.paths)
        assert {p.parent for p in paths} == set(sb.Cgroup.ROOTS.values())
        assert (paths[1] / "pids.max").read_text().strip() == str(SandboxConfig().processes)
        assert (student.cgroup.controllers["memory"] / "memory.limit_in_bytes").read_text().strip() == str(2**30)
        members = (paths[0] / "cgroup.procs").read_text().split()
        assert str(student.main_pid()) in members, "the student's process must run in its sandbox's cgroup"
    finally:
        student.close()
    assert not any(p.exists() for p in paths), "the cgroups must be removed with the sandbox"


def test_parameters_carry_their_grad_both_ways() -> None:
    source = ("import torch\n"
              "def f(model):\n"
              "    seen = model.weight.grad.clone()\n"
              "    model.weight.grad = None\n"
              "    model.bias.grad = torch.full_like(model.bias, 7.0)\n"
              "    return seen\n")
    model = torch.nn.Linear(2, 3)
    model.weight.grad = torch.ones(3, 2)
    with _student(source) as student:
        seen = student.function(model)
    assert torch.equal(seen, torch.ones(3, 2)), "the stale .grad must reach the student's function"
    assert model.weight.grad is None and torch.equal(model.bias.grad, torch.full((3,), 7.0))


def test_what_a_call_does_to_the_global_generators_comes_back() -> None:
    """A function that seeds or draws from NumPy's or torch's global generator leaves them, here, as it
    would in the kernel — so a check's "the global generators are untouched" case sees it."""
    import numpy as np
    import torch

    source = ("import numpy as np, torch\n"
              "def f(x):\n"
              "    np.random.seed(7); torch.manual_seed(7)\n"
              "    return x + float(np.random.standard_normal()) + float(torch.rand(()))\n"
              "def g(x):\n"
              "    return x + float(np.random.standard_normal()) + float(torch.randn(()))\n")
    namespace: dict = {}
    exec(source, namespace)
    with _student(source, "f") as f_student, _student(source, "g") as g_student:
        for name, remote in (("f", f_student.function), ("g", g_student.function)):
            np.random.seed(3); torch.manual_seed(3)
            expected = namespace[name](1.0)
            states = (np.random.get_state()[1].copy(), torch.get_rng_state().clone())
            np.random.seed(3); torch.manual_seed(3)
            assert remote(1.0) == expected, name
            assert np.array_equal(np.random.get_state()[1], states[0]), f"{name}: NumPy's global state"
            assert torch.equal(torch.get_rng_state(), states[1]), f"{name}: torch's global state"
