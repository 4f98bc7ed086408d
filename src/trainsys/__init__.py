"""trainsys — reference implementations, grading checks and widgets for the course
"Training neural networks under memory and communication limits".

Subpackages mirror the course: :mod:`trainsys.memtrain` (Module 1), :mod:`trainsys.diloco`
(Module 2), :mod:`trainsys.fedavg` (Module 3), :mod:`trainsys.grading` (the checks behind the
hidden tests).
"""

__version__ = "0.1.0"
