r"""DiLoCo for real: one process per worker, torch's AdamW inside, one all-reduce every H steps.

Run: ``torchrun --standalone --nproc_per_node=k -m trainsys.distributed.diloco --out r.json
--rounds T --inner-steps H [--sharding iid|noniid] [--seed S]`` plus, optionally, the fault options
of :func:`trainsys.diloco.faults.train_diloco_with_faults` (``--miss-prob P`` or ``--absent
"ROUND:W,W;ROUND:W"``, ``--staleness "W:S,W:S"``, ``--stale-weighting none|inverse``) and the replica
check (``--fingerprint-every K``, ``--fault KIND:RANK:ROUND``, ``--on-mismatch stop|record``).

Every rank builds the run of :func:`trainsys.diloco.loop.setup_run` for the same config (data, held-out
split, shards, initial weights, per-worker batch generators) and keeps its own shard and generator.
Each round, rank ``k`` copies the global model, takes ``H`` steps of ``torch.optim.AdamW`` (state kept
across rounds, never synchronised) on batches drawn exactly as the simulation draws them, then
``dist.all_reduce`` averages the workers' parameters; the pseudo-gradient ``θ_global − mean(θ_k)``
is applied with ``torch.optim.SGD(momentum, nesterov=True)`` on every rank. Rank 0 writes the held-out
loss and accuracy per round, for comparison with :func:`trainsys.diloco.loop.train_diloco`.

**Faults** (rounds ``t = 1..T`` as in the simulation, whose docstring derives the maths). Every rank
makes ``fault_rng = default_rng(derived_seed(seed, 2))`` and, without a schedule, draws
``fault_rng.random(N)`` every round exactly as the simulation does, so every rank computes the same
absent set :math:`\bar A_t` (``u < miss_prob``, or the schedule's round ``t``) and the same arrivals
:math:`A_t` without exchanging a byte. This is the *simulation* of absence inside one process group:
an absent rank is still alive and still joins the round's all-reduce, but it does no inner step (its
AdamW state and batch generator stay as they were) and contributes zeros. An arriving rank ``i`` with
staleness ``s`` starts its inner steps from its own copy of :math:`\theta^{(t-1-s_i)}`, :math:`s_i =
\min(s, t-1)` (every rank keeps the history of its global models :math:`\theta^{(0)}, \theta^{(1)},
\dots`, as the simulation does), and contributes its re-based model :math:`\tilde\theta_i = \theta_i -
(\theta^{(t-1-s_i)} - \theta^{(t-1)})` (:math:`\tilde\theta_i = \theta_i` when fresh) — the same two
float32 roundings as the simulation's. With the weights of
:func:`~trainsys.diloco.faults.arrival_weights`, the all-reduce of the contributions

.. math::

    c_i = \begin{cases} w_i\,\tilde\theta_i & i \in A_t \text{ (weighted)}\\
    \tilde\theta_i & i \in A_t \text{ (uniform; the sum is divided by } |A_t|)\\ 0 & i \notin A_t\end{cases}
    \qquad \bar\theta = \textstyle\sum_k c_k

is the simulation's :math:`\sum_{i\in A_t} w_i\tilde\theta_i`, and :math:`\theta^{(t-1)} - \bar\theta` is
its pseudo-gradient. A round with :math:`A_t = \emptyset` has no all-reduce and no outer step: every
rank knows it from its own draws, keeps :math:`\theta` and the SGD momentum buffer. Without fault
options this is exactly the job without faults (all arrive, uniform weights: ``Σ_k θ_k / N``).

**Replica fingerprints.** After every ``K``-th round and after the last, every rank calls
:func:`~trainsys.distributed.fingerprint.check_replicas` on its own copy of the global model and of
the outer momentum (the NumPy dict ``W0, b0, W1, …, momentum_W0, …`` of ``_replica_state``): one all-gather of 8-byte digests, after which every rank holds the same
``N`` digests and therefore the same verdict. A detection is recorded as ``{"round", "detected_at",
"workers"}``: ``detected_at`` the round after which the check ran, ``round`` the first round after the
last check at which all replicas agreed (0 — the initialisation — if none did), so the divergence arose
during rounds ``round … detected_at``; the ranks cannot know the injected round. ``--fault
KIND:RANK:ROUND`` (:func:`~trainsys.distributed.fingerprint.parse_fault`, ``ROUND`` in ``0..T``): ``skip``
— rank ``RANK`` joins round ``ROUND``'s all-reduce but does not apply its outer step; ``flip`` — after
round ``ROUND``'s outer step it flips the lowest bit of its first global parameter; ``seed`` (``ROUND =
0``) — its global model starts from the weights :func:`~trainsys.diloco.loop.setup_run` draws for seed
``S + 1``. With ``--on-mismatch stop`` a detection ends the run after that round on every rank. No rank
can hang: the verdict is a function of the all-gathered digests, which are the same on every rank, so
either every rank leaves the loop after the same check or none does, and every rank issues the same
sequence of collectives (the arrivals, hence whether a round has an all-reduce, are also the same
everywhere); all then meet at :func:`~trainsys.distributed.launch.finish`'s barrier.

**The language model** (``--model gpt``): the same round on the course's GPT and Shakespeare
(:mod:`trainsys.diloco.gpt_experiment`: ``--sharding iid|genre``, its model and batch size): rank ``k`` holds
shard ``k`` of :func:`~trainsys.diloco.gpt_experiment.task` for ``N`` = the world size, the θ⁽⁰⁾ and batch
generator of :meth:`~trainsys.diloco.language_model.LanguageModelTask.setup_run`, and draws its windows with
:func:`~trainsys.diloco.language_model.sample_windows` exactly as the simulation's vmapped step does; rank 0
evaluates with the task's held-out windows. Fault options are not offered for it.

Rank 0's result: ``history`` (per round ``round``, ``heldout_loss``, ``heldout_accuracy``, and the
simulation record's ``arrived``, ``missed``, ``stale`` ``{id: s}``, ``weights`` ``{id: w}``,
``outer_step_applied``, ``worker_steps`` — JSON turns the ids used as keys into strings), ``world_size``,
``faults``, ``fault_seed``, ``fault`` (``{"kind", "rank", "round"}`` or ``None``), ``detections``,
``fingerprint_every``, ``on_mismatch`` and ``stopped_at`` (the round a ``stop`` ended the run at, or
``None``).
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import torch
import torch.distributed as dist

from trainsys._validation import require_int
from trainsys.distributed.fingerprint import Fault, check_replicas, flip_lowest_bit_, parse_fault
from trainsys.distributed.launch import finish, init_process_group, write_result
from trainsys.diloco.evaluation import classification_accuracy, evaluate_heldout_loss
from trainsys.diloco.faults import STALE_WEIGHTINGS, arrival_weights, round_arrivals, validate_faults
from trainsys.diloco.loop import derived_seed, setup_run
from trainsys.diloco.sharding import sample_worker_batch
from trainsys.memtrain.divergence import ON_MISMATCH

ABSENT_FORMAT = "ROUND:W,W;ROUND:W (e.g. '2:1;4:0,1': worker 1 misses round 2, workers 0 and 1 round 4)"
STALENESS_FORMAT = "W:S,W:S (e.g. '1:2': worker 1 reports 2 rounds late)"


def _int_field(option: str, expected: str, spec: str, field: str) -> int:
    try:
        return int(field.strip())
    except ValueError:
        raise ValueError(f"{option} must be {expected}; {field.strip()!r} is not an integer in {spec!r}") from None


def parse_absent(spec: str) -> dict[int, list[int]]:
    """``--absent "ROUND:W,W;ROUND:W"`` → the simulation's ``schedule`` ``{round: [absent worker ids]}``.

    Only the form is checked here (``ValueError`` naming ``--absent``, the expected form and what was
    given; a round named twice is refused rather than merged); ranges and repeats are checked by
    :func:`~trainsys.diloco.faults.validate_faults`.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"--absent must be {ABSENT_FORMAT}, got {spec!r}")
    schedule: dict[int, list[int]] = {}
    for entry in spec.split(";"):
        round_field, sep, workers_field = entry.partition(":")
        if not sep or not workers_field.strip():
            raise ValueError(f"--absent must be {ABSENT_FORMAT}; entry {entry.strip()!r} of {spec!r} "
                             f"has no ROUND:W,… pair")
        r = _int_field("--absent", ABSENT_FORMAT, spec, round_field)
        if r in schedule:
            raise ValueError(f"--absent names round {r} twice in {spec!r}; list its absent workers once")
        schedule[r] = [_int_field("--absent", ABSENT_FORMAT, spec, w) for w in workers_field.split(",")]
    return schedule


def parse_staleness(spec: str) -> dict[int, int]:
    """``--staleness "W:S,W:S"`` → the simulation's ``staleness`` ``{worker id: rounds late}``.

    Form only (``ValueError`` naming ``--staleness``; a worker named twice is refused); ranges are
    checked by :func:`~trainsys.diloco.faults.validate_faults`.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"--staleness must be {STALENESS_FORMAT}, got {spec!r}")
    staleness: dict[int, int] = {}
    for entry in spec.split(","):
        worker_field, sep, s_field = entry.partition(":")
        if not sep:
            raise ValueError(f"--staleness must be {STALENESS_FORMAT}; entry {entry.strip()!r} of {spec!r} "
                             f"has no W:S pair")
        w = _int_field("--staleness", STALENESS_FORMAT, spec, worker_field)
        if w in staleness:
            raise ValueError(f"--staleness names worker {w} twice in {spec!r}; give its staleness once")
        staleness[w] = _int_field("--staleness", STALENESS_FORMAT, spec, s_field)
    return staleness


def _model(params: dict[str, np.ndarray]) -> torch.nn.Sequential:
    """An ``nn.Sequential`` of ``Linear``/``ReLU`` holding the NumPy parameters (``Linear`` stores ``Wᵀ``)."""
    L = len(params) // 2
    layers: list[torch.nn.Module] = []
    for l in range(L):
        W, b = params[f"W{l}"], params[f"b{l}"]
        linear = torch.nn.Linear(*W.shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(W.T.copy()))
            linear.bias.copy_(torch.from_numpy(b))
        layers += [linear, torch.nn.ReLU()] if l < L - 1 else [linear]
    return torch.nn.Sequential(*layers)


def _numpy_params(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """The model's parameters as the simulation's NumPy dict, in the order ``W0, b0, W1, b1, …``."""
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    out = {}
    for l, linear in enumerate(linears):
        out[f"W{l}"] = linear.weight.detach().numpy().T.copy()
        out[f"b{l}"] = linear.bias.detach().numpy().copy()
    return out


def _replica_state(global_model: torch.nn.Module, outer: torch.optim.Optimizer) -> dict[str, np.ndarray]:
    r"""What every replica must hold identically: θ (``W0, b0, …``) and the outer momentum buffers.

    The momentum matters: a one-ulp flip of θ is damped by the next Nesterov step (θ enters it with the
    factor :math:`1 - \eta(1+\mu)`, :math:`-0.33` with the defaults) and can round away within a round,
    while the difference it left in the momentum buffer persists.
    """
    state = _numpy_params(global_model)
    for key, p in zip(list(state), global_model.parameters()):
        buffer = outer.state.get(p, {}).get("momentum_buffer")
        if buffer is not None:  # none before the first outer step
            state[f"momentum_{key}"] = buffer.detach().numpy().copy()
    return state


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inner-steps", type=int, default=10)
    parser.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    parser.add_argument("--sharding", choices=["iid", "noniid", "genre"], default="iid",
                        help="mlp: iid or noniid; gpt: iid or genre")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--miss-prob", type=float, default=0.0, help="probability that a worker misses a round")
    parser.add_argument("--absent", default=None, help=f"a schedule of absences, {ABSENT_FORMAT}")
    parser.add_argument("--staleness", default=None, help=f"rounds late per worker, {STALENESS_FORMAT}")
    parser.add_argument("--stale-weighting", choices=STALE_WEIGHTINGS, default="none")
    parser.add_argument("--fingerprint-every", type=int, default=1, help="check the replicas every K rounds")
    parser.add_argument("--fault", default=None, help="KIND:RANK:ROUND with KIND in skip, flip, seed")
    parser.add_argument("--on-mismatch", choices=ON_MISMATCH, default="record")
    return parser.parse_args()


def _faults(
    args: argparse.Namespace, world: int
) -> tuple[float, dict[int, frozenset[int]] | None, dict[int, int], str]:
    """The fault options, parsed and validated by the simulation's :func:`validate_faults`."""
    schedule = None if args.absent is None else parse_absent(args.absent)
    staleness = None if args.staleness is None else parse_staleness(args.staleness)
    try:
        return validate_faults(world, args.rounds, args.miss_prob, schedule, staleness, args.stale_weighting)
    except (TypeError, ValueError) as exc:  # the simulation names its own arguments: say which option is which
        raise type(exc)(f"{exc} (command line: --absent gives schedule, --staleness staleness, --miss-prob "
                        f"miss_prob, --stale-weighting stale_weighting; the job has {world} ranks and "
                        f"{args.rounds} rounds)") from None


def _injected_fault(spec: str | None, world: int, rounds: int) -> Fault | None:
    """``--fault KIND:RANK:ROUND`` with ``ROUND`` in ``0..T`` (0: the initialisation, for ``seed`` only)."""
    if spec is None:
        return None
    fault = parse_fault(spec, world, rounds + 1)
    if fault.kind != "seed" and fault.step == 0:
        raise ValueError(f"--fault {fault.kind}:RANK:ROUND needs a round with an outer step, in [1, {rounds}], "
                         f"got {fault.step}")
    return fault


def _gpt_params(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: p.detach().numpy().copy() for k, p in model.named_parameters()}


def main_gpt(args: argparse.Namespace, rank: int, world: int) -> None:
    """DiLoCo on the GPT, one rank per worker (see the module docstring); rank 0 writes the history."""
    from trainsys.diloco.gpt_experiment import run_config, task
    from trainsys.diloco.language_model import sample_windows
    from trainsys.models.gpt import GPT

    if args.sharding not in ("iid", "genre"):
        raise ValueError(f"--sharding must be iid or genre with --model gpt, got {args.sharding!r}")
    if args.miss_prob or args.absent or args.staleness or args.fault:
        raise ValueError("--model gpt runs without fault options (--miss-prob, --absent, --staleness, --fault)")
    torch.set_num_threads(1)
    lm = task(args.sharding, world)
    cfg = dataclasses.replace(run_config("diloco", world, args.inner_steps, args.inner_steps * args.rounds, 0,
                                         args.seed), eval_every=0)
    run = lm.setup_run(cfg)
    shard, rng = lm.shards[rank], run["worker_rngs"][rank]
    global_model, worker_model = GPT(lm.gpt_config(cfg)), GPT(lm.gpt_config(cfg))
    with torch.no_grad():
        for model in (global_model, worker_model):
            for name, p in model.named_parameters():
                p.copy_(torch.from_numpy(run["params"][name]))
    inner = torch.optim.AdamW(worker_model.parameters(), lr=cfg.inner_lr, betas=(cfg.beta1, cfg.beta2),
                              eps=cfg.eps, weight_decay=cfg.weight_decay)
    outer = torch.optim.SGD(global_model.parameters(), lr=cfg.outer_lr, momentum=cfg.outer_momentum, nesterov=True)
    history = []
    for t in range(1, cfg.rounds + 1):
        with torch.no_grad():
            for w, g in zip(worker_model.parameters(), global_model.parameters()):
                w.copy_(g)
        for _ in range(cfg.inner_steps):
            x, y = sample_windows(shard, cfg.batch_size, cfg.context, rng)  # (B, T) each, the simulation's draw
            inner.zero_grad()
            worker_model(torch.from_numpy(x), torch.from_numpy(y))[1].backward()
            inner.step()
        outer.zero_grad()
        for w, g in zip(worker_model.parameters(), global_model.parameters()):
            total = w.detach().clone()
            dist.all_reduce(total)  # the round's only communication: Σ_k θ_k
            g.grad = g.detach() - total / world  # pseudo-gradient θ_global − mean θ_k
        outer.step()
        if rank == 0:
            history.append({"round": t, **lm.evaluate(run, _gpt_params(global_model))})
    write_result(args.out, {"history": history, "world_size": world, "model": "gpt", "sharding": args.sharding})
    finish()


def main() -> None:
    args = _arguments()
    rank, world = init_process_group()
    if args.model == "gpt":
        main_gpt(args, rank, world)
        return
    if args.sharding == "genre":
        raise ValueError("--sharding genre is for --model gpt; the MLP takes iid or noniid")
    require_int("--fingerprint-every", args.fingerprint_every, minimum=1)
    p, sched, stale_of, weighting = _faults(args, world)
    fault = _injected_fault(args.fault, world, args.rounds)
    run = setup_run({"num_workers": world, "rounds": args.rounds, "inner_steps": args.inner_steps,
                     "sharding": args.sharding, "seed": args.seed, "progress": False})
    cfg = run["config"]
    N, T, H = world, cfg.rounds, cfg.inner_steps
    shard, rng = run["shards"][rank], run["worker_rngs"][rank]  # this worker's data and batch order
    fault_seed = derived_seed(cfg.seed, 2)
    fault_rng = np.random.default_rng(fault_seed)  # the same draws on every rank: all agree on who is absent

    mine = fault is not None and fault.rank == rank
    start = run["params"]
    if mine and fault.kind == "seed":  # this replica starts from another seed's weights
        start = setup_run({"num_workers": world, "rounds": args.rounds, "inner_steps": args.inner_steps,
                           "sharding": args.sharding, "seed": args.seed + 1, "progress": False})["params"]
    global_model = _model(start)
    worker_model = _model(run["params"])
    inner = torch.optim.AdamW(worker_model.parameters(), lr=cfg.inner_lr, betas=(cfg.beta1, cfg.beta2),
                              eps=cfg.eps, weight_decay=cfg.weight_decay)
    outer = torch.optim.SGD(global_model.parameters(), lr=cfg.outer_lr, momentum=cfg.outer_momentum, nesterov=True)
    globals_so_far = [[g.detach().clone() for g in global_model.parameters()]]  # θ^(0), θ^(1), …: stale bases
    history: list[dict] = []
    detections: list[dict] = []
    worker_steps = [0] * N
    last_agreed, stopped_at = -1, None  # the last round after which a check found every replica identical
    for t in range(1, T + 1):
        absent, arrived, eff = round_arrivals(t, N, p, sched, stale_of, fault_rng)  # the simulation's draws
        weights = arrival_weights([eff[i] for i in arrived], weighting)
        for i in arrived:
            worker_steps[i] += H
        if rank in arrived:
            base = globals_so_far[t - 1 - eff[rank]]  # θ^(t-1-s), this rank's own copy
            with torch.no_grad():  # start the round from it; AdamW's state stays this worker's
                for w, b in zip(worker_model.parameters(), base):
                    w.copy_(b)
            for _ in range(H):
                X, y = sample_worker_batch(shard, cfg.batch_size, rng)
                inner.zero_grad()
                torch.nn.functional.cross_entropy(worker_model(torch.from_numpy(X)), torch.from_numpy(y)).backward()
                inner.step()
        if arrived:  # every rank knows the arrivals: all or none of them call the all-reduce
            outer.zero_grad()
            for j, (w, g) in enumerate(zip(worker_model.parameters(), global_model.parameters())):
                if rank not in arrived:
                    contribution = torch.zeros_like(g)  # absent: alive in the group, contributes nothing
                elif eff[rank] == 0:
                    contribution = w.detach().clone()
                else:  # θ̃ = θ_k − (θ^(t-1-s) − θ^(t-1)), so that θ^(t-1) − θ̃ = θ^(t-1-s) − θ_k
                    contribution = w.detach() - (base[j] - g.detach())
                if weights is not None and rank in arrived:
                    contribution = contribution * weights[arrived.index(rank)]
                dist.all_reduce(contribution)  # the round's only communication: Σ_k c_k
                mean = contribution / len(arrived) if weights is None else contribution
                g.grad = g.detach() - mean  # pseudo-gradient θ_global − Σ w_i θ̃_i
            if not (mine and fault.kind == "skip" and fault.step == t):
                outer.step()  # Nesterov momentum on the pseudo-gradient
        if mine and fault.kind == "flip" and fault.step == t:
            flip_lowest_bit_(next(global_model.parameters()))
        globals_so_far.append([g.detach().clone() for g in global_model.parameters()])
        if rank == 0:
            params = _numpy_params(global_model)
            w_list = weights if weights is not None else [1.0 / len(arrived)] * len(arrived)
            history.append({"round": t,
                            "heldout_loss": evaluate_heldout_loss(params, run["X_heldout"], run["y_heldout"]),
                            "heldout_accuracy": classification_accuracy(params, run["X_heldout"], run["y_heldout"]),
                            "arrived": arrived, "missed": sorted(absent),
                            "stale": {i: eff[i] for i in arrived if eff[i] > 0},
                            "weights": dict(zip(arrived, w_list)), "outer_step_applied": bool(arrived),
                            "worker_steps": list(worker_steps)})
        if t % args.fingerprint_every == 0 or t == T:
            detection = check_replicas(_replica_state(global_model, outer), t)  # the same verdict on every rank
            if detection is None:
                last_agreed = t
            else:
                detections.append({"round": last_agreed + 1, **detection})
                if args.on_mismatch == "stop":  # every rank breaks here, after the same collective
                    stopped_at = t
                    break
    write_result(args.out, {
        "history": history, "world_size": world, "fault_seed": fault_seed,
        "faults": {"miss_prob": p, "schedule": None if sched is None else {r: sorted(a) for r, a in sched.items()},
                   "staleness": dict(stale_of), "stale_weighting": weighting},
        "fault": None if fault is None else {"kind": fault.kind, "rank": fault.rank, "round": fault.step},
        "detections": detections, "fingerprint_every": args.fingerprint_every, "on_mismatch": args.on_mismatch,
        "stopped_at": stopped_at})
    del inner, outer, worker_model, global_model
    finish()


if __name__ == "__main__":
    main()
