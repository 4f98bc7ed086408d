"""The Checkpoints' helper: the student's function first, the package's only while it is a stub."""

import pytest

from trainsys.lesson import own_or_reference


def reference(x, *, scale=2):
    return x * scale


def test_a_written_function_is_the_one_called(capsys) -> None:
    calls = []

    def mine(x, *, scale=2):
        calls.append((x, scale))
        return x * scale + 1

    run = own_or_reference(mine, reference)
    assert run(3, scale=5) == 16 and run(1) == 3
    assert calls == [(3, 5), (1, 2)]
    assert run.__name__ == "mine"
    assert capsys.readouterr().out == ""


def test_a_stub_falls_back_once_saying_so_in_one_line(capsys) -> None:
    calls = []

    def stub(x, *, scale=2):
        calls.append(x)
        raise NotImplementedError

    run = own_or_reference(stub, reference)
    assert [run(3), run(4, scale=3)] == [6, 12]
    assert calls == [3]  # after the first NotImplementedError the stub is not called again
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "stub" in lines[0] and "test_lesson_helper.reference" in lines[0]


def test_other_errors_are_the_students_to_see() -> None:
    def buggy(x, *, scale=2):
        raise ValueError("x must be positive")

    with pytest.raises(ValueError, match="x must be positive"):
        own_or_reference(buggy, reference)(1)


@pytest.mark.parametrize("argument", ["function", "reference"])
def test_non_callables_are_refused_by_name(argument) -> None:
    kwargs = {"function": reference, "reference": reference, argument: 3}
    with pytest.raises(TypeError, match=f"{argument} must be a function, got int"):
        own_or_reference(**kwargs)
