"""From every lesson key, the index (``tests/lesson_index.py``) reaches the lesson's notebook, release, reference,
check, answers and tests; and every lesson, release and check has a key."""

from __future__ import annotations

import importlib
import re

import pytest

import trainsys.grading as grading
from tests.lesson_index import ANSWER_PACKAGES, ROOT, answers, by_function, lessons, places, files_naming
from trainsys.syllabus import lesson_key

LESSONS = lessons()


def _resolve(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("key", LESSONS, ids=[f"{k} {l.function}" for k, l in LESSONS.items()])
def test_key_reaches_every_place(key: str) -> None:
    lesson = LESSONS[key]
    assert (ROOT / lesson.source).is_file() and (ROOT / lesson.release).is_file(), lesson
    reference = _resolve(lesson.reference)
    assert callable(reference) and reference.__name__ == lesson.function, lesson.reference
    check = _resolve(lesson.check)
    assert f"check_{lesson.function}" in grading.__all__, f"check_{lesson.function} is not exported by trainsys.grading"
    assert getattr(grading, f"check_{lesson.function}") is check, f"trainsys.grading exports another {lesson.check}"
    registered = answers().get(lesson.function, {})
    missing = [package for package in ANSWER_PACKAGES if not registered.get(package)]
    assert not missing, f"{key} {lesson.function} has no answers in {missing}"
    assert files_naming(lesson.function), f"{key} {lesson.function}: no tests/test_*.py names it"


def test_every_lesson_release_and_check_has_a_key() -> None:
    assert len(LESSONS) == len(list(ROOT.glob("solutions/*/*.ipynb"))) > 0
    releases = {str(p.relative_to(ROOT)) for p in ROOT.glob("notebooks/*/*.ipynb")}
    assert releases == {str(l.release) for l in LESSONS.values()}, "releases without a source (or sources unreleased)"
    checks = {n[len("check_"):] for n in grading.__all__ if n.startswith("check_")}
    assert checks == set(by_function()), (f"checks graded by no lesson: {sorted(checks - set(by_function()))}; "
                                          f"lessons without a check: {sorted(set(by_function()) - checks)}")
    unknown = sorted(set(answers()) - set(by_function()))
    assert not unknown, f"answers registered for functions no lesson grades: {unknown}"


def test_places_and_key_errors_name_what_was_given() -> None:
    assert places("m2p5.22")["function"] == "update_outer_momentum"
    assert lesson_key("notebooks/m1p1-mlp-core/03_linear_forward.ipynb") == "m1p1.03"
    with pytest.raises(KeyError, match="'m9p9.99'"):
        places("m9p9.99")
    with pytest.raises(ValueError, match="lesson notebook.*'solutions/intro.ipynb'"):
        lesson_key("solutions/intro.ipynb")


CHECKLIST_PLACES = (  # every place README's "Writing a lesson" must name, as it names them
    "src/trainsys/<reference>.py", "tests/test_<tests>.py", "src/trainsys/grading/<checks>.py",
    "src/trainsys/grading/__init__.py", "tests/answers/developer/<mutants>.py", "tests/answers/blind/<mp>.py",
    "tests/answers/clauses/<checks>.py", "solutions/<part>/<NN>_<function>.ipynb", "solutions/<part>/<NN>_<function>",
    "_toc.yml", "notebooks/<part>/<NN>_<function>.ipynb", "make release",
)


def _checklist() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Writing a lesson\n")
    return readme[start:readme.index("\n## ", start + 1)]


@pytest.mark.parametrize("key", LESSONS, ids=[f"{k} {l.function}" for k, l in LESSONS.items()])
def test_readme_checklist_names_the_lessons_files(key: str) -> None:
    """Every file README's checklist names, filled in for this lesson, is where the lesson's pieces are."""
    text, lesson = _checklist(), LESSONS[key]
    missing = [place for place in CHECKLIST_PLACES if f"`{place}`" not in text]
    assert not missing, f"README's 'Writing a lesson' no longer names {missing}"
    registered = answers()[lesson.function]
    check_stem = lesson.check.split(".")[-2]
    fill = {"<reference>": "/".join(lesson.reference.split(".")[1:-1]), "<checks>": check_stem,
            "<mutants>": registered["tests.answers.developer"][0].rsplit(".", 1)[1], "<mp>": lesson.part,
            "<part>": lesson.source.parts[1], "<NN>": key.split(".")[1], "<function>": lesson.function}
    assert registered["tests.answers.blind"] == (f"tests.answers.blind.{lesson.part}",), registered
    assert registered["tests.answers.clauses"] == (f"tests.answers.clauses.{check_stem}",), registered
    toc = (ROOT / "_toc.yml").read_text()
    tests = {p.stem[len("test_"):] for p in files_naming(lesson.function)}
    for place in re.findall(r"`((?:src|tests|solutions|notebooks)/[^`\s…]+|_toc\.yml)`", text):
        if "<tests>" in place:
            assert any((ROOT / place.replace("<tests>", t)).is_file() for t in tests), (place, tests)
            continue
        for placeholder, value in fill.items():
            place = place.replace(placeholder, value)
        assert "<" not in place, f"README names {place} with a placeholder the test does not know"
        assert (ROOT / place).is_file() or f"file: {place}\n" in toc, f"{key}: README's {place} does not exist"
