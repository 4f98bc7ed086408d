"""The claims list (book/claims.yml): every factual claim about torch, Flower or a paper is tested or cited.

Each entry names the page that makes the claim and a phrase of it (found there, whitespace aside, so the
list cannot drift from the text), and either a test that checks it against the system (``file::name``,
which must exist) or a citation precise enough to check: a paper with its section, table, figure or
algorithm, or a URL with the version read. The tests after the structural ones are the checks the list
names in this file: recomputed numbers and torch's or Flower's own behaviour.
"""

from __future__ import annotations

import ast
import math
import re
from functools import lru_cache
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CLAIMS = yaml.safe_load((ROOT / "book/claims.yml").read_text())
LOCATOR = re.compile(r"\b(?:Section|Sections|Table|Figure|Fig\.|Algorithm|Appendix|Abstract|Theorem|Eq\.)\s*[\dA-Z]|§\s*\d")
VERSIONED_URL = re.compile(r"https?://\S+")
VERSION = re.compile(r"\b(?:v?\d+\.\d+(?:\.\d+)?|PR #\d+|pull/\d+|merged \w+ \d{4})\b")


def _ids(entries: list[dict]) -> list[str]:
    return [str(e.get("id")) for e in entries]


@lru_cache(maxsize=None)
def _page_text(where: str) -> str:
    path = ROOT / where
    if path.suffix == ".ipynb":
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    else:
        text = path.read_text()
    return " ".join(text.split())


@lru_cache(maxsize=None)
def _test_names(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))


def test_the_list_is_well_formed() -> None:
    assert isinstance(CLAIMS, list) and len(CLAIMS) >= 40, "book/claims.yml must list the claims (40 or more)"
    ids = _ids(CLAIMS)
    assert len(ids) == len(set(ids)), f"duplicated ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    for entry in CLAIMS:
        unknown = set(entry) - {"id", "where", "text", "claim", "tested", "cited", "fixed"}
        assert not unknown, f"{entry.get('id')}: unknown fields {unknown}"
        missing = {"id", "where", "text", "claim"} - set(entry)
        assert not missing, f"{entry.get('id')}: missing {missing}"


@pytest.mark.parametrize("entry", CLAIMS, ids=_ids(CLAIMS))
def test_each_claim_is_on_its_page(entry: dict) -> None:
    assert (ROOT / entry["where"]).is_file(), f"{entry['id']}: {entry['where']} does not exist"
    phrase = " ".join(str(entry["text"]).split())
    assert phrase in _page_text(entry["where"]), (
        f"{entry['id']}: the phrase {phrase!r} is not in {entry['where']} (the text changed: update the entry)")


@pytest.mark.parametrize("entry", CLAIMS, ids=_ids(CLAIMS))
def test_each_claim_is_tested_or_cited(entry: dict) -> None:
    assert ("tested" in entry) != ("cited" in entry), f"{entry['id']}: give exactly one of `tested` or `cited`"
    if "tested" in entry:
        path, _, name = str(entry["tested"]).partition("::")
        assert path.startswith("tests/") and (ROOT / path).is_file(), f"{entry['id']}: no test file {path}"
        assert name in _test_names(path), f"{entry['id']}: {path} defines no test {name}"
    else:
        cited = str(entry["cited"])
        url = VERSIONED_URL.search(cited)
        if url:
            assert VERSION.search(cited), f"{entry['id']}: a URL citation names the version read: {cited!r}"
        else:
            assert LOCATOR.search(cited), f"{entry['id']}: a paper citation names its section, table, figure or algorithm: {cited!r}"


# --- the checks the list names -------------------------------------------------------------------------------

def test_the_2nn_has_199210_parameters() -> None:
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(784, 200), torch.nn.ReLU(), torch.nn.Linear(200, 200),
                              torch.nn.ReLU(), torch.nn.Linear(200, 10))
    assert sum(p.numel() for p in net.parameters()) == 156_800 + 200 + 40_000 + 200 + 2_000 + 10 == 199_210


def test_perplexities_in_nats() -> None:
    # DiLoCo Table 2's perplexities, rounded to 3 decimals as the lessons print them
    assert [round(math.log(p), 3) for p in (16.23, 15.30, 15.02)] == [2.787, 2.728, 2.709]
    assert round(math.log(15.30) - math.log(15.02), 3) == 0.018


def test_adam_without_bias_correction() -> None:
    import torch

    steps = [(1 - 0.9**t) / math.sqrt(1 - 0.999**t) for t in range(1, 200)]  # in units of lr, constant gradient
    assert round(steps[0], 2) == 3.16 and round(max(steps), 1) == 6.6 and steps.index(max(steps)) + 1 == 12
    # torch's Adam, with its bias correction, moves exactly lr on the first step of a constant gradient
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.1)
    w.grad = torch.ones(1, dtype=torch.float64)
    opt.step()
    assert torch.allclose(w.detach(), torch.tensor([-0.1], dtype=torch.float64), rtol=0, atol=1e-9)  # eps/|g| = 1e-8


def test_adam_eps_inside_the_root() -> None:
    g, eps = 1e-4, 1e-8
    outside, inside = g / (math.sqrt(g * g) + eps), g / math.sqrt(g * g + eps)  # bias-corrected v = g^2
    assert round(1 - inside / outside, 2) == 0.29


def test_moment_half_lives_and_torch_default_betas() -> None:
    import torch

    half = [math.log(2) / math.log(1 / b) for b in (0.9, 0.95, 0.999)]
    assert [round(half[0], 1), round(half[1], 1), round(half[2])] == [6.6, 13.5, 693]
    assert torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults["betas"] == (0.9, 0.999)


def test_unscaled_decay_over_a_round() -> None:
    assert round(math.log10(0.9**500)) == -23


def test_momentum_buffer_on_a_constant_input_is_torchs() -> None:
    import torch

    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.7, momentum=0.9, nesterov=True)
    for _ in range(20):
        w.grad = torch.ones(1, dtype=torch.float64)
        opt.step()
    buffer = float(opt.state[w]["momentum_buffer"])
    # 20 float64 multiply-adds of numbers below 10: error far below 1e-12
    assert math.isclose(buffer, (1 - 0.9**20) / 0.1, rel_tol=1e-12) and round(buffer, 2) == 8.78
    assert round(math.sqrt(1 / (1 - 0.9**2)), 1) == 2.3  # the lesson's gain on noise


def test_torch_sgd_refuses_nesterov_with_dampening_or_without_momentum() -> None:
    import torch

    p = [torch.zeros(1, requires_grad=True)]
    with pytest.raises(ValueError, match="[Nn]esterov"):
        torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(ValueError, match="[Nn]esterov"):
        torch.optim.SGD(p, lr=0.1, momentum=0.0, nesterov=True)


def test_relu_derivatives_at_zero() -> None:
    import torch

    grads = []
    for f in (torch.relu, lambda z: torch.clamp(z, min=0.0), lambda z: torch.maximum(z, torch.zeros_like(z))):
        z = torch.zeros(1, requires_grad=True)
        f(z).sum().backward()
        grads.append(float(z.grad))
    assert grads == [0.0, 1.0, 0.5]


def test_flower_names_its_deployment_runtime_and_superexec() -> None:
    """Flower 1.42, the pinned version, logs "Flower Deployment Runtime" and ships a SuperExec beside the
    SuperLink and SuperNode (its console scripts)."""
    import importlib.metadata as metadata

    import flwr

    assert flwr.__version__ == "1.42.0"
    scripts = {e.name for e in metadata.distribution("flwr").entry_points if e.group == "console_scripts"}
    assert {"flower-superlink", "flower-supernode", "flower-superexec", "flwr-serverapp", "flwr-clientapp"} <= scripts
    source = (Path(flwr.__file__).parent / "superlink/cli/flower_superlink.py").read_text()
    assert "Flower Deployment Runtime" in source and "Deployment Engine" not in source


def test_torch_linear_draws_within_one_over_root_fan_in() -> None:
    import torch

    torch.manual_seed(0)
    layer = torch.nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    for tensor in (layer.weight, layer.bias):
        # 120,000 uniform draws fill the interval: the extremes come within 0.1% of the bound
        assert float(tensor.abs().max()) <= bound and float(layer.weight.abs().max()) > 0.999 * bound


def test_torch_batchnorm_running_mean_momentum() -> None:
    import torch

    bn = torch.nn.BatchNorm1d(3)
    assert bn.momentum == 0.1
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    bn(x)  # training mode: running_mean = 0.9 * 0 + 0.1 * batch mean
    torch.testing.assert_close(bn.running_mean, 0.1 * x.mean(dim=0))


def test_sampling_with_replacement_misses_a_third() -> None:
    assert round(100 * (1 - 1 / 600) ** 600) == 37 and round(100 / math.e) == 37


@pytest.mark.parametrize("segment", [1, 4, 16])
def test_torch_checkpoint_reruns_every_layer_of_every_segment(segment: int) -> None:
    """Lesson 17: torch.utils.checkpoint keeps only a segment's inputs, so the backward pass re-runs all of a
    segment's layers, its last included: 16 recomputed layers whatever the segment size."""
    import torch
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 4).double() for _ in range(16)]
    calls = [0] * len(layers)

    def block(a, lo, hi):
        for l in range(lo, hi):
            calls[l] += 1
            a = torch.relu(layers[l](a))
        return a

    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    for lo in range(0, 16, segment):
        a = checkpoint(block, a, lo, lo + segment, use_reentrant=False)
    a.sum().backward()
    assert calls == [2] * 16  # one forward, one recomputation, for every layer


def test_torch_load_state_dict_refuses_missing_keys_and_casts_dtypes() -> None:
    import torch

    model = torch.nn.Linear(2, 1)
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict({"weight": torch.zeros(1, 2)})
    precise = {"weight": torch.full((1, 2), 1 / 3, dtype=torch.float64), "bias": torch.zeros(1, dtype=torch.float64)}
    model.load_state_dict(precise)  # no error: the float64 values are rounded into the float32 parameter
    assert model.weight.dtype == torch.float32
    assert float(model.weight[0, 0]) != 1 / 3 and abs(float(model.weight[0, 0]) - 1 / 3) < 2**-24


def test_torch_zeros_and_type_promotion() -> None:
    import torch

    zero = torch.zeros(3)
    assert zero.dtype == torch.float32 and zero.device.type == "cpu"
    assert (zero + torch.ones(3, dtype=torch.float16)).dtype == torch.float32
    assert (zero + torch.ones(3, dtype=torch.int64)).dtype == torch.float32
    assert (torch.tensor([True, False]) * 0).dtype == torch.int64


def test_torch_sgd_dampening_starts_from_an_undamped_copy() -> None:
    import torch

    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0, momentum=0.9, dampening=0.5)
    buffers = []
    for g in (2.0, 4.0):
        w.grad = torch.tensor([g], dtype=torch.float64)
        opt.step()
        buffers.append(float(opt.state[w]["momentum_buffer"]))
    assert buffers == [2.0, 0.9 * 2.0 + 0.5 * 4.0]  # first: g undamped; then mu b + (1 - tau) g


def test_torch_all_reduce_sums_by_default() -> None:
    import inspect

    import torch.distributed as dist

    assert inspect.signature(dist.all_reduce).parameters["op"].default == dist.ReduceOp.SUM
