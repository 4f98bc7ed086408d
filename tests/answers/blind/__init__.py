"""Blind red team: wrong answers (and correct alternatives) written from the lesson notebooks alone.

Each module ``tests/answers/blind/<part>.py`` maps a graded function's name to ``[(description, fn), ...]`` in
``MUTANTS`` (plausible wrong answers a student could write after reading the release notebook) and
``ALTERNATIVES`` (correct answers written differently from the lesson's own solution). Their authors
read only ``notebooks/<part>/*.ipynb``: not the checks, not the reference implementation.
``OPEN`` and ``DISPUTED`` and how the records are checked: ``tests/answers/__init__.py``.
"""
