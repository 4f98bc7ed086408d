"""Sphinx extension: execute the book's notebooks with trainsys.execution's sliced reply polling.

Without it, a notebook that displays widgets can sit idle for the whole execution timeout now and
then (measured: see trainsys.execution). Loaded before myst-nb executes anything, in the same process.
"""

from trainsys.execution import install


def setup(app):
    install()
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
