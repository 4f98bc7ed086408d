r"""Module 3 — Federated Averaging (McMahan et al. 2017), in PyTorch, one file per course part.

``model.py`` and ``data.py`` (Part 1) build the classifier and a synthetic labelled dataset;
``partition.py`` (Part 2) deals the training set out to ``K`` clients, IID or not; ``client.py``
(Part 3) is a client's local SGD; ``state.py`` (Part 4) is arithmetic on state dicts and the
weighted average; ``server.py`` (Part 5) is the round and the loop; ``experiments.py`` (Part 6)
runs the paper's comparisons at laptop scale.

The objective is :math:`f(w) = \sum_{k=1}^{K} \frac{n_k}{n} F_k(w)` with :math:`F_k` client
``k``'s mean loss over its :math:`n_k` examples. Each round the server picks
:math:`m = \max(\lceil C K\rceil, 1)` clients :math:`S_t`, each runs ``E`` epochs of SGD with batch
``B`` from the global weights, and the server sets
:math:`w_{t+1} = \sum_{k \in S_t} \frac{n_k}{m_t} w^k_{t+1}` with :math:`m_t = \sum_{k\in S_t} n_k`
— the normalisation over the *selected* clients (the paper's erratum to its Algorithm 1).
"""
