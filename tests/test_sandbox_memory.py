"""Memory: no student can take the grader, a classmate or the machine down (issue 23).

The sandbox's processes are the kernel OOM killer's first pick; all of one sandbox's processes together
are capped (a memory cgroup where the grader may make one, else :class:`~trainsys.autograde.sandbox.MemoryCap`
summing their memory from /proc); the trusted processes run under an address-space limit of their own
that the sandboxes below them do not inherit. Scaled down: caps of a few hundred MiB, children of 100 MiB.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.hostile_class import FAN_OUT
from trainsys.autograde import sandbox as sb
from trainsys.autograde.isolation import IsolationUnavailable, StudentProcess
from trainsys.autograde.launch import limit_memory as _limit_memory
from trainsys.autograde.options import sandbox_memory_default
from trainsys.autograde.sandbox import SandboxConfig, wrap

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux only")
MIB = 2**20


def test_the_sandbox_is_the_oom_killers_first_pick() -> None:
    code = ("import os\nprint(open('/proc/self/oom_score_adj').read().strip())\n"
            "try:\n    os.write(os.open('/proc/self/oom_score_adj', os.O_WRONLY), b'-1000')\n"
            "except OSError:\n    pass\n"
            "print(open('/proc/self/oom_score_adj').read().strip())\n")
    run = subprocess.run(wrap([sys.executable, "-I", "-c", code], SandboxConfig()), capture_output=True, text=True,
                         timeout=60)
    assert run.stdout.split() == ["1000", "1000"], "the sandbox must not be able to lower its OOM score: " + run.stdout


@pytest.mark.skipif(not sb.cgroup_caps_memory(), reason="memory cgroups need root and cgroup v1 here")
def test_a_fan_out_is_held_to_the_sandboxs_cap_by_its_memory_cgroup() -> None:
    """Six children of 100 MiB under a 300 MiB cap: the OOM killer ends the largest processes (children,
    or the answer's own process when a child has barely started), the sandbox's memory never passes the
    cap, and the grader learns which limit was reached."""
    with StudentProcess([FAN_OUT], "fan_out", timeout=60, sandbox=SandboxConfig(memory=300 * MIB)) as student:
        try:
            assert student.function(6, 100) >= 1, "no child was stopped"
        except IsolationUnavailable as exc:
            assert "memory limit (0.3 GiB for all its processes together)" in str(exc)
    assert student.cgroup.peak_memory is not None and student.cgroup.peak_memory <= 300 * MIB
    assert "memory" in student.reached
    assert "memory limit (0.3 GiB for all its processes together)" in student.limits_note()


@pytest.mark.skipif(not sb.cgroup_caps_memory(), reason="memory cgroups need root and cgroup v1 here")
def test_an_answer_that_times_out_after_reaching_the_cap_says_so() -> None:
    """A fan-out while the answer loads, then no answer: the time-out names the memory limit too."""
    from trainsys.autograde.isolation import IsolationTimeout

    load = FAN_OUT + "fan_out(4, 100)\nimport time\ntime.sleep(60)\n"
    with pytest.raises(IsolationTimeout, match=r"did not answer within 8 s: it reached the sandbox's memory limit"):
        StudentProcess([load], "f", timeout=8, sandbox=SandboxConfig(memory=200 * MIB))


def test_without_a_cgroup_the_memory_cap_kills_the_whole_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sb.Cgroup, "ROOTS", {k: v for k, v in sb.Cgroup.ROOTS.items() if k != "memory"})
    with StudentProcess([FAN_OUT], "fan_out", timeout=60, sandbox=SandboxConfig(memory=300 * MIB)) as student:
        assert student.memory_cap is not None
        with pytest.raises(IsolationUnavailable, match=r"memory limit \(0\.3 GiB for all its processes"):
            student.function(6, 100)
        assert student.memory_cap.reached
    assert student.process.poll() is not None and not sb.process_tree(student.process.pid)


def test_an_honest_answer_well_under_the_cap_is_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sb.Cgroup, "ROOTS", {k: v for k, v in sb.Cgroup.ROOTS.items() if k != "memory"})
    with StudentProcess([FAN_OUT], "fan_out", timeout=60, sandbox=SandboxConfig(memory=1024 * MIB)) as student:
        assert student.function(2, 50) == 0
        assert 0 < student.memory_cap.peak < 1024 * MIB
    assert not student.reached


def test_trusted_processes_are_capped_but_their_sandboxes_get_their_own_limit() -> None:
    """nbgrader and the verifier run with a soft 1 GiB address-space limit here: a 2 GiB allocation in
    them fails, while a sandbox they start gets its own (larger) limit from prlimit."""
    inner = wrap([sys.executable, "-I", "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"],
                 SandboxConfig(address_space=3 * 2**30))
    code = ("import subprocess, sys\n"
            "try:\n    bytearray(2 * 2**30)\n    print('allocated')\nexcept MemoryError:\n    print('refused')\n"
            f"print(subprocess.run({inner!r}, capture_output=True, text=True).stdout.strip())\n")
    run = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60,
                         preexec_fn=_limit_memory(2**30, soft_only=True))
    assert run.stdout.split() == ["refused", str(3 * 2**30)], run.stdout + run.stderr


def test_the_default_cap_shares_the_machine_between_the_jobs() -> None:
    assert sandbox_memory_default(2, 6144, total_mb=24 * 1024) == 6144  # 9 GiB each, capped per process
    assert sandbox_memory_default(8, 6144, total_mb=24 * 1024) == 2304  # 18 GiB / 8
    assert sandbox_memory_default(64, 6144, total_mb=8 * 1024) == 1024  # never below what a torch kernel needs


def test_a_student_who_hits_a_limit_reads_which() -> None:
    """A full private /tmp (an 8 MiB tmpfs here) fails the visible tests; the verdict names the limit."""
    from tests.hostile_class import ASSIGNMENT, STEM, solution
    from trainsys.autograde.verify import read_lesson, verify_notebook
    from trainsys.course import REPO

    lesson = read_lesson(REPO / "solutions" / ASSIGNMENT / f"{STEM}.ipynb")
    answer = solution() + "\n_relu = relu_forward\ndef relu_forward(Z):\n    open('/tmp/cache', 'wb').write(bytes(16 * 2**20))\n    return _relu(Z)\n"
    notes: list[str] = []
    verdicts = verify_notebook(STEM, lesson, [answer], 60.0, SandboxConfig(tmpfs_size=8 * MIB), notes)
    assert [v.status for v in verdicts] == ["failed", "failed"], verdicts
    for verdict in verdicts:
        assert "No space left on device" in verdict.message, verdict.message
        assert "reached the sandbox's temporary disk (8 MiB)" in verdict.message, verdict.message


@pytest.mark.parametrize(("message", "limit"), [
    ("OSError: [Errno 28] No space left on device", "disk"), ("OSError: [Errno 27] File too large", "file size"),
    ("BlockingIOError: [Errno 11] Resource temporarily unavailable", "processes"),
    ("RuntimeError: can't start new thread", "processes"), ("MemoryError", "address space"),
    ("AssertionError: arrays differ", None)])
def test_limit_messages_are_recognised(message: str, limit: str | None) -> None:
    assert sb.limit_from_message(message) == limit
    if limit is not None:
        assert sb.describe_limit(limit, SandboxConfig()).startswith("the sandbox's ")


def test_exit_signals_of_the_rlimits_are_recognised() -> None:
    assert sb.limit_from_exit(128 + 24) == "cpu" and sb.limit_from_exit(128 + 25) == "file size"
    assert sb.limit_from_exit(1) is None and sb.limit_from_exit(None) is None


def test_a_kernel_past_the_cap_is_ended_by_the_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    """nbgrader's sandboxed kernels get the same cap: here without a cgroup, so the watchdog ends the kernel."""
    import asyncio
    import time

    monkeypatch.setattr(sb.Cgroup, "ROOTS", {k: v for k, v in sb.Cgroup.ROOTS.items() if k != "memory"})
    monkeypatch.setenv(sb.ENV_VAR, SandboxConfig(memory=300 * MIB).to_env())

    async def run() -> tuple[bool, bool]:
        manager = sb.SandboxKernelManager(kernel_name="python3")
        await manager.start_kernel()
        client = manager.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=120)
            client.execute(FAN_OUT + "fan_out(6, 100)\n")
            deadline = time.monotonic() + 60
            while await manager.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            return await manager.is_alive(), manager.memory_cap.reached
        finally:
            client.stop_channels()
            await manager.shutdown_kernel(now=True)

    alive, reached = asyncio.run(run())
    assert reached and not alive
