"""Module 3, Part 3: local client training against torch.optim.SGD and a hand-written cross-entropy."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from trainsys.tolerance import assert_within_rounding
from trainsys.fedavg import client, data, model

DATA = data.build_synthetic_dataset(60, 5, 4, seed=0)
IDX = torch.arange(3, 40, 2)  # 19 examples


@pytest.mark.parametrize(("batch_size", "sizes"), [(5, [5, 5, 5, 4]), (19, [19]), (None, [19]), (50, [19]),
                                                   (1, [1] * 19)])
def test_m3_07_batches_cover_the_client_once(batch_size, sizes) -> None:
    batches = client.make_client_batches(DATA, IDX, batch_size, seed=3)
    assert [len(y) for _, y in batches] == sizes
    rows = {r.numpy().tobytes(): i for i, r in enumerate(DATA.features)}
    seen = [rows[r.numpy().tobytes()] for X, _ in batches for r in X]
    assert sorted(seen) == IDX.tolist()
    assert all(torch.equal(y, DATA.labels[[rows[r.numpy().tobytes()] for r in X]]) for X, y in batches)
    if len(sizes) > 1:
        assert seen != IDX.tolist()  # shuffled
        other = [rows[r.numpy().tobytes()] for X, _ in client.make_client_batches(DATA, IDX, batch_size, 4) for r in X]
        assert other != seen


def test_m3_08_loss_equals_hand_written_cross_entropy() -> None:
    net = model.build_mlp_classifier(5, 8, 4, 1)
    X, y = DATA.features[:16], DATA.labels[:16]
    loss = client.compute_batch_loss(net, (X, y))
    logits = net(X).detach().double().numpy()
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert float(loss.detach()) == pytest.approx(-log_softmax[np.arange(16), y.numpy()].mean(), rel=1e-6)
    assert loss.ndim == 0 and loss.requires_grad


def test_m3_09_sgd_step_equals_torch_optim_sgd() -> None:
    net = model.build_mlp_classifier(5, 8, 4, 2)
    twin = copy.deepcopy(net)
    batch = (DATA.features[:10], DATA.labels[:10])
    for p in net.parameters():  # stale gradients from an earlier backward must not leak in
        p.grad = torch.ones_like(p)
    loss = client.local_sgd_step(net, batch, lr=0.3)
    opt = torch.optim.SGD(twin.parameters(), lr=0.3)
    opt.zero_grad()
    expected = torch.nn.functional.cross_entropy(twin(batch[0]), batch[1])
    expected.backward()
    before = [(p.detach().clone(), p.grad.clone()) for p in twin.parameters()]
    opt.step()
    assert loss == pytest.approx(float(expected.detach()), rel=1e-6)
    # the same torch forward and backward on both sides; the update p - lr g rounds at most twice on each
    # (the product, the difference): within 2 gamma_2 (|p| + lr |g|) (trainsys.tolerance)
    for a, b, (p0, g) in zip(net.parameters(), twin.parameters(), before):
        assert_within_rounding(a.detach().numpy(), b.detach().numpy(), (p0.abs() + 0.3 * g.abs()).numpy(), 2,
                               np.float32, "parameters after one step")


@pytest.mark.parametrize(("epochs", "batch_size", "momentum"), [(1, 4, 0.0), (3, 5, 0.0), (2, None, 0.0), (2, 4, 0.9)])
def test_m3_10_client_training_equals_a_torch_optim_loop(epochs, batch_size, momentum) -> None:
    net = model.build_mlp_classifier(5, 8, 4, 3)
    twin = copy.deepcopy(net)
    result = client.train_client_locally(net, DATA, IDX, epochs, batch_size, 0.2, seed=11, momentum=momentum)
    opt = torch.optim.SGD(twin.parameters(), lr=0.2, momentum=momentum)
    losses = []
    for e in range(epochs):
        total = 0.0
        for X, y in client.make_client_batches(DATA, IDX, batch_size, 11 + e):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(twin(X), y)
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
        losses.append(total / len(IDX))
    # exact: the client runs torch.optim.SGD on the same batches in the same order (Lesson 10's contract), so
    # both sides execute the same kernels in the same sequence on any CPU; no rounding can differ
    for a, b in zip(net.parameters(), twin.parameters()):
        assert torch.equal(a, b)
    # the epoch loss: the same float32 batch losses, summed as Python floats in the same order, / n_k (exact)
    assert result["epoch_losses"] == losses
    assert result["num_samples"] == 19
    assert result["num_steps"] == client.local_update_count(19, epochs, batch_size)
    assert result["num_steps"] == epochs * (1 if batch_size is None else math.ceil(19 / batch_size))


def test_m3_10_training_lowers_the_client_loss_and_is_stateless() -> None:
    net = model.build_mlp_classifier(5, 16, 4, 4)
    first = copy.deepcopy(net)
    result = client.train_client_locally(net, DATA, IDX, 20, 5, 0.2, seed=0, momentum=0.9)
    assert result["epoch_losses"][-1] < 0.5 * result["epoch_losses"][0]
    again = client.train_client_locally(first, DATA, IDX, 20, 5, 0.2, seed=0, momentum=0.9)
    assert again == result  # no optimizer state survives a call


BAD = [
    (client.make_client_batches, (DATA, IDX, 0, 0), ValueError, "batch_size"),
    (client.make_client_batches, (DATA, torch.tensor([0, 60]), 2, 0), ValueError, "indices"),
    (client.make_client_batches, (DATA, torch.tensor([1, 1]), 2, 0), ValueError, "indices"),
    (client.compute_batch_loss, (model.build_mlp_classifier(5, 3, 4, 0), (DATA.features[:2], torch.tensor([0, 4]))),
     ValueError, "batch"),
    (client.local_sgd_step, (model.build_mlp_classifier(5, 3, 4, 0), (DATA.features[:2], DATA.labels[:2]), 0.0),
     ValueError, "lr"),
    (client.train_client_locally, (model.build_mlp_classifier(5, 3, 4, 0), DATA, IDX, 0, 2, 0.1, 0), ValueError,
     "epochs"),
    (client.train_client_locally, (model.build_mlp_classifier(5, 3, 4, 0), DATA, IDX, 1, 0, 0.1, 0), ValueError,
     "batch_size"),
    (client.train_client_locally, (model.build_mlp_classifier(5, 3, 4, 0), DATA, IDX, 1, 2, 0.1, 0, 1.0), ValueError,
     "momentum"),
]


@pytest.mark.parametrize(("fn", "args", "error", "argument"), BAD, ids=[f"{b[0].__name__}-{b[3]}" for b in BAD])
def test_m3_part3_bad_input_names_the_argument(fn, args, error, argument) -> None:
    with pytest.raises(error, match=argument):
        fn(*args)
