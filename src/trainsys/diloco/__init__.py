r"""Module 2 — DiLoCo: distributed low-communication training, simulated in one process.

Douillard et al. 2023 (arXiv 2311.08105), Algorithm 1. ``k`` workers start every round from the
global parameters :math:`\theta^{(t-1)}`, each runs ``H`` inner AdamW steps on its own shard, and
only then communicates. The outer gradient (the *pseudo-gradient*) is

.. math::

    \Delta^{(t)} = \theta^{(t-1)} - \frac1k \sum_{i=1}^{k} \theta_i^{(t)}

— original minus local, the sign torchft had to fix in 2025 — and an outer SGD with Nesterov
momentum (lr 0.7, momentum 0.9) applies it. One all-reduce per ``H`` steps instead of one per step:
``H`` times less communication. Special cases: outer lr 1 without momentum is FedAvg (parameter
averaging); ``H = 1`` with inner SGD and outer lr 1 is synchronous data-parallel SGD.

One file per course part, in lesson order:

- :mod:`~trainsys.diloco.model` — lessons 1–6: the NumPy MLP classifier, softmax, cross-entropy, backward;
  also the synthetic data set and the held-out split;
- :mod:`~trainsys.diloco.adamw` — lessons 7–11: AdamW by hand (``adamw_step``);
- :mod:`~trainsys.diloco.params` — lessons 12–15: arithmetic on parameter dicts;
- :mod:`~trainsys.diloco.sharding` — lessons 16–20: IID and Dirichlet shards, a worker's ``H`` inner steps;
- :mod:`~trainsys.diloco.outer` — lessons 21–24: the Nesterov outer optimizer and the pseudo-gradient;
- :mod:`~trainsys.diloco.loop` — lessons 25–27: one round, ``train_diloco``, the synchronous baseline;
- :mod:`~trainsys.diloco.evaluation` — lessons 28–30: held-out loss, accuracy, communication savings;
- :mod:`~trainsys.diloco.experiment` — the ``H`` sweep behind lessons 26–30 and ``make bench``.
- :mod:`~trainsys.diloco.language_model` — the same loop on the course's GPT (:mod:`trainsys.models.gpt`),
  the workers batched with ``torch.func.vmap``;
- :mod:`~trainsys.diloco.gpt_experiment` — DiLoCo against synchronous data parallelism on Shakespeare, the
  ``diloco-gpt`` record of ``make reproduce``.

Parameters are dicts of float32 arrays ``{"W0", "b0", "W1", "b1", …}``; every function returns new
arrays and states unless its docstring says what it mutates.
"""
