"""Mutants for Module 3, Part 1, lesson 1 (the classifier): the construction mistakes the notebook names."""

from __future__ import annotations

import math

import torch
from torch import nn

from trainsys.fedavg import model as ref

REFERENCE = "trainsys.fedavg.model"


def _global_seed(d_in, d_hidden, n_classes, seed, batch_norm=False):
    ref.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)  # validation
    torch.manual_seed(seed)  # re-seeds (and then advances) the global generator
    middle = [nn.BatchNorm1d(d_hidden)] if batch_norm else []
    return nn.Sequential(nn.Linear(d_in, d_hidden), *middle, nn.ReLU(), nn.Linear(d_hidden, n_classes))


def _zero_biases(d_in, d_hidden, n_classes, seed, batch_norm=False):
    model = ref.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)
    with torch.no_grad():
        model[0].bias.zero_()
        model[-1].bias.zero_()
    return model


def _softmax_head(d_in, d_hidden, n_classes, seed, batch_norm=False):
    model = ref.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)
    return nn.Sequential(*model, nn.Softmax(dim=1))  # cross-entropy then applies a second softmax


def _he_normal(d_in, d_hidden, n_classes, seed, batch_norm=False):
    model = ref.build_mlp_classifier(d_in, d_hidden, n_classes, seed, batch_norm)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in (model[0], model[-1]):
            layer.weight.normal_(0.0, math.sqrt(2.0 / layer.in_features), generator=g)
            layer.bias.uniform_(-1 / math.sqrt(layer.in_features), 1 / math.sqrt(layer.in_features), generator=g)
    return model


MUTANTS = {
    "build_mlp_classifier": [
        ("seeds the global generator with torch.manual_seed and uses nn.Linear's own init", _global_seed),
        ("initialises the biases to zero", _zero_biases),
        ("ends with a Softmax layer (the loss then applies a second softmax)", _softmax_head),
        ("He-normal weights instead of PyTorch's uniform default", _he_normal),
    ],
}
