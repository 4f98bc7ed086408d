r"""DiLoCo on a language model: the course's small GPT, character-level, one token stream per worker.

The same loop as the MLP's (:func:`~trainsys.diloco.loop.train_diloco`,
:func:`~trainsys.diloco.loop.train_synchronous_baseline`) with a :class:`LanguageModelTask` in place of
the MLP: the task supplies the data, the initial parameters, the workers' inner steps, the gradients
of the synchronous baseline and the held-out metrics; the loop keeps the rounds, the pseudo-gradient,
the Nesterov outer step and the byte count. Parameters stay the loop's NumPy dicts (one array per
``GPT.named_parameters()`` entry, float32); AdamW is the package's :func:`~trainsys.diloco.adamw.adamw_step`.

Speed: the ``N`` workers' inner steps run as one batched computation. Their parameters are stacked
``(N, …)``; ``torch.func.vmap`` over ``grad_and_value(functional_call(GPT, θ_k, batch_k))`` gives the
``N`` gradients in one call, and ``adamw_step`` is elementwise, so applying it to the stacked tree is
``N`` independent AdamWs (one shared step count, as every worker steps together). A worker's batch
rows are ``B`` windows of ``context + 1`` tokens drawn uniformly (with replacement) from its shard's
stream by its own generator, input the first ``context`` tokens, target the last ``context``.

Held-out metrics, on ``eval_windows`` fixed windows of the held-out stream (the same for every run, so
comparisons between runs are paired): the mean next-character cross-entropy (nats; perplexity
:math:`e^{\ell}`) and the next-character accuracy (argmax).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import functional_call, grad_and_value, vmap

from trainsys._validation import describe, require_int
from trainsys.diloco.adamw import AdamWState, init_adamw_state
from trainsys.diloco.loop import check_optimizer_fields, config_fields
from trainsys.diloco.model import Params
from trainsys.diloco.sharding import inner_optimizer_step
from trainsys.models.gpt import GPT, GPTConfig

TokenShard = np.ndarray
"""A worker's training text: a 1-D int64 array of token ids (plays or chunks concatenated)."""


@dataclass(frozen=True)
class LMConfig:
    """A language-model run: model, DiLoCo schedule, inner AdamW, outer Nesterov, evaluation, seeds.

    The data is the task's (:class:`LanguageModelTask`); ``num_workers`` must equal its number of
    shards. Model: :class:`~trainsys.models.gpt.GPTConfig` with the task's vocabulary and ``context``,
    ``n_layer``, ``n_head``, ``n_embd``. ``batch_size`` windows per worker per step. ``eval_every``:
    inner steps between two held-out evaluations (a multiple of ``inner_steps``, or ``0`` for every
    round); the last round is always evaluated. ``seed`` drives initialisation and batch sampling.
    """

    num_workers: int = 4
    inner_steps: int = 50
    rounds: int = 20
    context: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    inner_optimizer: str = "adamw"
    inner_lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    batch_size: int = 8
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    eval_every: int = 0
    seed: int = 0
    progress: bool | None = None


def validate_lm_config(config: LMConfig | Mapping | None) -> LMConfig:
    """An :class:`LMConfig` from a config, a dict of overrides of the defaults, or ``None``.

    Raises ``TypeError``/``ValueError`` naming ``config['<field>']``: unknown keys, sizes below 1,
    rates out of range, ``eval_every`` not a multiple of ``inner_steps``.
    """
    c = config_fields(config, LMConfig)
    name = "config[{!r}]".format
    for key in ("num_workers", "inner_steps", "rounds", "context", "n_layer", "n_head", "n_embd", "batch_size"):
        c[key] = require_int(name(key), c[key], minimum=1)
    c["seed"] = require_int(name("seed"), c["seed"], minimum=0)
    c["eval_every"] = require_int(name("eval_every"), c["eval_every"], minimum=0)
    if c["eval_every"] % c["inner_steps"]:
        raise ValueError(f"{name('eval_every')} must be 0 or a multiple of inner_steps = {c['inner_steps']}, "
                         f"got {c['eval_every']}")
    check_optimizer_fields(c)
    return LMConfig(**c)


def _require_tokens(name: str, tokens: object, vocab_size: int, minimum: int) -> np.ndarray:
    if not isinstance(tokens, np.ndarray) or tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise TypeError(f"{name} must be a 1-D integer array of token ids, got {describe(tokens)}")
    if tokens.shape[0] < minimum:
        raise ValueError(f"{name} must hold at least {minimum} tokens (context + 1), got {tokens.shape[0]}")
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise ValueError(f"{name} holds ids outside [0, {vocab_size}): min {tokens.min()}, max {tokens.max()}")
    return tokens.astype(np.int64, copy=False)


def sample_windows(tokens: np.ndarray, batch_size: int, context: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``, each ``(batch_size, context)`` int64: windows at ``rng.integers(0, n - context, batch_size)``.

    ``y`` is ``x`` shifted by one token (the next character at every position). ``rng`` is advanced.
    """
    starts = rng.integers(0, tokens.shape[0] - context, size=batch_size)  # (B,)
    rows = starts[:, None] + np.arange(context + 1)  # (B, context + 1)
    window = tokens[rows]  # (B, context + 1)
    return window[:, :-1], window[:, 1:]


def stack_params(trees: Sequence[Params]) -> Params:
    """``N`` trees with one structure -> one tree of ``(N, …)`` arrays (new memory)."""
    return {k: np.stack([t[k] for t in trees]) for k in trees[0]}


def unstack_params(stacked: Params) -> list[Params]:
    """``(N, …)`` tree -> ``N`` trees of views (no copy)."""
    n = next(iter(stacked.values())).shape[0]
    return [{k: v[i] for k, v in stacked.items()} for i in range(n)]


class LanguageModelTask:
    """The language-model side of DiLoCo's loop: ``shards`` (one token stream per worker), ``heldout`` text.

    ``vocab_size``: ids lie in ``[0, vocab_size)``. ``eval_windows`` held-out windows of ``context + 1``
    tokens at evenly spaced offsets over ``heldout`` (raises if it is shorter than that many windows). ``data``: what the
    run records say about the data (names, sharding; copied into the record's ``"data"``).
    """

    def __init__(self, shards: Sequence[np.ndarray], heldout: np.ndarray, vocab_size: int, *,
                 eval_windows: int = 64, data: Mapping | None = None) -> None:
        self.vocab_size = require_int("vocab_size", vocab_size, minimum=2)
        if isinstance(shards, (np.ndarray, Mapping)) or not isinstance(shards, Sequence) or not shards:
            raise TypeError(f"shards must be a non-empty list of 1-D token arrays, got {describe(shards)}")
        self.shards = [_require_tokens(f"shards[{i}]", s, self.vocab_size, 2) for i, s in enumerate(shards)]
        self.heldout = _require_tokens("heldout", heldout, self.vocab_size, 2)
        self.eval_windows = require_int("eval_windows", eval_windows, minimum=1)
        self.data = dict(data or {})
        self._model: GPT | None = None

    # --- setup ------------------------------------------------------------------------------------
    def gpt_config(self, cfg: LMConfig) -> GPTConfig:
        return GPTConfig(vocab_size=self.vocab_size, context=cfg.context, n_layer=cfg.n_layer, n_head=cfg.n_head,
                         n_embd=cfg.n_embd)

    def validate_config(self, config: LMConfig | Mapping | None) -> LMConfig:
        cfg = validate_lm_config(config)
        if cfg.num_workers != len(self.shards):
            raise ValueError(f"config['num_workers'] must equal the task's {len(self.shards)} shards, "
                             f"got {cfg.num_workers}")
        for i, s in enumerate(self.shards):
            if s.shape[0] <= cfg.context:
                raise ValueError(f"shards[{i}] holds {s.shape[0]} tokens, fewer than context + 1 = {cfg.context + 1}")
        if self.heldout.shape[0] < self.eval_windows * (cfg.context + 1):
            raise ValueError(f"heldout holds {self.heldout.shape[0]} tokens, fewer than eval_windows * (context + 1) "
                             f"= {self.eval_windows * (cfg.context + 1)}")
        return cfg

    def setup_run(self, config: LMConfig | Mapping | None) -> dict[str, object]:
        """The loop's run dict: ``config``, ``seeds``, ``params`` (θ⁽⁰⁾ from ``init_seed``), ``worker_rngs``, ``shard_sizes``."""
        from trainsys.diloco.loop import derived_seed  # the loop imports this module's users, not this module

        cfg = self.validate_config(config)
        seeds = {"seed": cfg.seed, "init_seed": derived_seed(cfg.seed, 0),
                 "worker_seeds": [derived_seed(cfg.seed, 1, k) for k in range(cfg.num_workers)]}
        return {"config": cfg, "seeds": seeds, "params": self.init_params(cfg, seeds["init_seed"]),
                "worker_rngs": [np.random.default_rng(s) for s in seeds["worker_seeds"]],
                "shard_sizes": [int(s.shape[0]) for s in self.shards], "task": self}

    def init_params(self, cfg: LMConfig, init_seed: int) -> Params:
        """θ⁽⁰⁾: ``GPT(gpt_config)`` initialised under ``torch.manual_seed(init_seed)``, as float32 NumPy arrays."""
        torch.manual_seed(init_seed)
        model = GPT(self.gpt_config(cfg))
        self._model = model
        return {k: p.detach().numpy().copy() for k, p in model.named_parameters()}

    def model(self, cfg: LMConfig) -> GPT:
        if self._model is None or self._model.config != self.gpt_config(cfg):
            self._model = GPT(self.gpt_config(cfg))
        return self._model

    # --- the loop's hooks --------------------------------------------------------------------------
    def batches(self, run: Mapping, shards: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch per listed worker, each drawn with that worker's generator: ``(x, y)`` ``(k, B, T)``."""
        cfg = run["config"]
        pairs = [sample_windows(self.shards[i], cfg.batch_size, cfg.context, run["worker_rngs"][i]) for i in shards]
        x = torch.from_numpy(np.stack([p[0] for p in pairs]))  # (k, B, T)
        y = torch.from_numpy(np.stack([p[1] for p in pairs]))  # (k, B, T)
        return x, y

    def _loss_fn(self, cfg: LMConfig):
        model = self.model(cfg)

        def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return functional_call(model, params, (x, y), {"check_ids": False})[1]

        return grad_and_value(loss)

    def worker_gradients(self, run: Mapping, stacked: Params, shared: bool) -> tuple[Params, np.ndarray]:
        """Every worker's gradient on its next batch: ``((N, …) tree, (N,) losses)``.

        ``stacked``: one ``(N, …)`` tree (each worker its own parameters), or, with ``shared=True``, one
        plain tree that every worker evaluates (the synchronous baseline).
        """
        cfg = run["config"]
        x, y = self.batches(run, range(cfg.num_workers))  # (N, B, T)
        params = {k: torch.from_numpy(v) for k, v in stacked.items()}
        fn = vmap(self._loss_fn(cfg), in_dims=(None if shared else 0, 0, 0))
        grads, losses = fn(params, x, y)  # (N, …) trees, (N,)
        return {k: g.detach().numpy() for k, g in grads.items()}, losses.detach().double().numpy()

    def init_worker_states(self, params: Params, k: int) -> AdamWState:
        """The ``k`` workers' AdamW states, stacked: one state over ``(k, …)`` moments."""
        return init_adamw_state(stack_params([params] * k))

    def inner_steps(self, run: Mapping, global_params: Params, states: AdamWState, H: int, hp: Mapping
                    ) -> tuple[list[Params], AdamWState, np.ndarray]:
        """Every worker's ``H`` inner steps from ``global_params``: ``(θ_1..θ_N, states, losses (N, H))``."""
        k = run["config"].num_workers
        theta = stack_params([global_params] * k)  # (N, …)
        losses = np.empty((k, H))
        for h in range(H):
            grads, losses[:, h] = self.worker_gradients(run, theta, shared=False)
            theta, states = inner_optimizer_step(theta, grads, states, hp)  # N independent AdamWs, elementwise
        return unstack_params(theta), states, losses

    def gradients(self, run: Mapping, params: Params) -> tuple[list[Params], list[float]]:
        """The synchronous baseline's step: each worker's gradient at the one ``params`` on its next batch."""
        grads, losses = self.worker_gradients(run, params, shared=True)
        return unstack_params(grads), [float(l) for l in losses]

    def evaluate(self, run: Mapping, params: Params) -> dict[str, float]:
        """``{"heldout_loss", "heldout_accuracy", "heldout_perplexity"}`` on the fixed held-out windows."""
        cfg = run["config"]
        window = torch.from_numpy(self.heldout_windows(cfg.context))  # (n, T + 1)
        model = self.model(cfg)
        with torch.no_grad():
            logits, loss = functional_call(model, {k: torch.from_numpy(v) for k, v in params.items()},
                                           (window[:, :-1], window[:, 1:]))  # (n, T, V), ()
        accuracy = float((logits.argmax(-1) == window[:, 1:]).double().mean())
        return {"heldout_loss": float(loss), "heldout_accuracy": accuracy, "heldout_perplexity": math.exp(float(loss))}

    def heldout_windows(self, context: int) -> np.ndarray:
        """``(eval_windows, context + 1)`` int64: windows starting at evenly spaced offsets over the held-out text."""
        starts = np.linspace(0, self.heldout.shape[0] - context - 1, self.eval_windows).astype(np.int64)  # (n,)
        return self.heldout[starts[:, None] + np.arange(context + 1)]  # (n, context + 1)

    def log_round(self, run: Mapping, r: int) -> bool:
        """Whether round ``r`` gets a history entry (every ``eval_every`` steps, and the last round)."""
        cfg = run["config"]
        return r == cfg.rounds or cfg.eval_every == 0 or (r * cfg.inner_steps) % cfg.eval_every == 0
