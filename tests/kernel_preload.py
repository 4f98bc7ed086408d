"""What the suite's kernel server (tests/kernels.py) runs once so that no lesson kernel pays for it.

Every lesson's setup cell imports Matplotlib's pyplot and pytest, and most lessons draw a figure: importing
Matplotlib, reading its font list, loading the first font and building the mathtext parser took 0.55 s of each
kernel's start (measured: 0.45 s import, 0.11 s first draw). This module does all of it in the server, before
any kernel is forked, without importing pyplot or a backend: pyplot chooses its backend when it is imported, so
that is left to each kernel, as in a fresh one. The backend Matplotlib reads from ``MPLBACKEND`` when it is
imported is the one ipykernel would give the kernel (it sets the inline backend when ``MPLBACKEND`` is unset);
tests/kernels.py preloads this only where the kernels' environment agrees.
"""

import io
import os

from tests.kernels import INLINE

if os.environ.get("MPLBACKEND", INLINE) != INLINE:
    raise RuntimeError(f"kernel_preload: MPLBACKEND is {os.environ['MPLBACKEND']!r}, the kernels would need it")
os.environ["MPLBACKEND"] = INLINE  # in the server only: each kernel has its own environment
import matplotlib  # noqa: E402  (reads MPLBACKEND)
import pytest  # noqa: E402,F401
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

_figure = Figure(figsize=(2, 1))
_figure.add_subplot().set_title("$x_1$ and text")  # the default font and the mathtext parser, loaded and cached
FigureCanvasAgg(_figure).print_png(io.BytesIO())
del _figure
