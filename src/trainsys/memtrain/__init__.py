"""Module 1 — the memory-constrained trainer, one file per course part (``mlp.py`` is Part 1)."""
