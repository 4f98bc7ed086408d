"""Red team, Module 3 Part 3 (local client training): wrong answers and correct alternatives written from the release
notebooks only."""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trainsys.fedavg.client import compute_batch_loss as _given_loss       # Lesson 9/10 setup cells import it
from trainsys.fedavg.client import local_sgd_step as _given_step           # Lesson 10 setup cell imports it
from trainsys.fedavg.client import make_client_batches as _given_batches   # Lesson 8/10 setup cells import it
from trainsys.fedavg.data import LabelledDataset


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x):
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 7: make_client_batches
# ----------------------------------------------------------------------------------------------------------------------

def _batches(dataset, indices, batch_size, seed, *, flaw=None):
    if flaw != "no_dataset_check" and not isinstance(dataset, LabelledDataset):
        raise TypeError(f"dataset must be a LabelledDataset, got {type(dataset).__name__}")
    if not isinstance(indices, torch.Tensor) or indices.ndim != 1:
        raise TypeError("indices must be a 1-D int64 tensor")
    if flaw == "int32_ok":
        if indices.is_floating_point():
            raise TypeError(f"indices must be integers, got {indices.dtype}")
        indices = indices.long()
    elif indices.dtype != torch.int64:
        raise TypeError(f"indices must be int64, got {indices.dtype}")
    n = len(dataset.labels)
    n_k = len(indices)
    if n_k == 0:
        raise ValueError("indices is empty")
    low_ok = True if flaw == "negative_ok" else int(indices.min()) >= 0
    if not low_ok or int(indices.max()) >= n:
        raise ValueError(f"indices must lie in [0, {n})")
    if torch.unique(indices).numel() != n_k:
        raise ValueError("indices repeats an example")
    if batch_size is not None:
        if flaw == "bool_batch_size":
            ok = isinstance(batch_size, (int, np.integer))
        elif flaw == "float_batch_size":
            ok = _is_int(batch_size) or (isinstance(batch_size, float) and batch_size.is_integer())
        else:
            ok = _is_int(batch_size)
        if not ok:
            raise TypeError(f"batch_size must be an integer or None, got {type(batch_size).__name__}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        batch_size = int(batch_size)
    if not _is_int(seed):
        raise TypeError("seed must be an integer")
    if flaw != "seed_no_range" and not 0 <= seed <= 2**63 - 1:
        raise ValueError(f"seed must be in [0, 2**63 - 1], got {seed}")
    size = n_k if batch_size is None else batch_size
    if flaw == "one_batch_unshuffled" and size >= n_k:
        order = indices
    else:
        base = torch.sort(indices).values if flaw == "sort_first" else indices
        if flaw == "global_rng":
            order = base[torch.randperm(n_k)]
        else:
            order = base[torch.randperm(n_k, generator=torch.Generator().manual_seed(int(seed)))]
    chunks = torch.split(order, size)
    if flaw == "drop_last" and len(chunks) > 1 and len(chunks[-1]) < size:
        chunks = chunks[:-1]
    if flaw == "lists":
        return [[dataset.features[c], dataset.labels[c]] for c in chunks]
    return [(dataset.features[c], dataset.labels[c]) for c in chunks]


def _mk(flaw, doc):
    def make_client_batches(dataset, indices, batch_size, seed):
        return _batches(dataset, indices, batch_size, seed, flaw=flaw)
    make_client_batches.__name__ = f"_batches_{flaw}"
    make_client_batches.__doc__ = doc
    return make_client_batches


_batches_drop_last = _mk("drop_last", "drops the short last batch")
_batches_global_rng = _mk("global_rng", "torch.randperm(n_k) from the global generator")
_batches_sort_first = _mk("sort_first", "sorts indices before permuting")
_batches_one_batch_unshuffled = _mk("one_batch_unshuffled", "B >= n_k or None: the indices in their given order")
_batches_negative_ok = _mk("negative_ok", "negative indices wrap around")
_batches_int32_ok = _mk("int32_ok", "int32 indices accepted")
_batches_bool_batch_size = _mk("bool_batch_size", "batch_size=True accepted")
_batches_float_batch_size = _mk("float_batch_size", "batch_size=3.0 accepted")
_batches_seed_no_range = _mk("seed_no_range", "negative / huge seeds accepted")
_batches_lists = _mk("lists", "batches are [X, y] lists")
_batches_no_dataset_check = _mk("no_dataset_check", "dataset type not validated")


def _batches_with_replacement(dataset, indices, batch_size, seed):
    _batches(dataset, indices, batch_size, seed)                       # validation
    n_k = len(indices)
    g = torch.Generator().manual_seed(int(seed))
    order = indices[torch.randint(0, n_k, (n_k,), generator=g)]
    return [(dataset.features[c], dataset.labels[c]) for c in torch.split(order, n_k if batch_size is None else batch_size)]


def _batches_alt_ranges(dataset, indices, batch_size, seed):
    """Slice the shuffled order with range(0, n_k, B); validation written differently."""
    if not isinstance(dataset, LabelledDataset):
        raise TypeError("dataset: expected a LabelledDataset")
    if not torch.is_tensor(indices) or indices.dtype is not torch.int64 or indices.dim() != 1:
        raise TypeError("indices: expected a 1-D torch.int64 tensor")
    n_k = indices.numel()
    if n_k == 0 or bool((indices < 0).any()) or bool((indices >= len(dataset)).any()) \
            or len(set(indices.tolist())) < n_k:
        raise ValueError("indices: must be non-empty, distinct and inside [0, n)")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)):
        raise TypeError("batch_size: expected an int or None")
    if batch_size is not None and batch_size < 1:
        raise ValueError("batch_size: must be at least 1")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError("seed: expected an int")
    if seed < 0 or seed >= 2**63:
        raise ValueError("seed: out of range")
    g = torch.Generator()
    g.manual_seed(int(seed))
    order = indices[torch.randperm(n_k, generator=g)]
    B = n_k if batch_size is None else int(batch_size)
    out = []
    for start in range(0, n_k, B):
        chunk = order[start:start + B]
        out.append((dataset.features.index_select(0, chunk), dataset.labels.index_select(0, chunk)))
    return out


def _batches_alt_gather_once(dataset, indices, batch_size, seed):
    """Gather the whole epoch once (a copy), then split the copy: the batches are views of one new buffer."""
    checked = _batches(dataset, indices, batch_size, seed)                   # validation (same rules)
    del checked
    g = torch.Generator().manual_seed(int(seed))
    order = indices[torch.randperm(len(indices), generator=g)]
    X, y = dataset.features[order], dataset.labels[order]
    B = len(indices) if batch_size is None else int(batch_size)
    return list(zip(torch.split(X, B), torch.split(y, B)))


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 8: compute_batch_loss
# ----------------------------------------------------------------------------------------------------------------------

def _loss(model, batch, *, flaw=None):
    if flaw == "callable_model":
        if not callable(model):
            raise TypeError("model must be callable")
    elif not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    allowed = (tuple,) if flaw == "tuple_only" else (tuple, list)
    if flaw == "extra_items_ok":
        if not isinstance(batch, allowed) or len(batch) < 2:
            raise TypeError("batch must be a pair (X, y)")
    elif not isinstance(batch, allowed) or len(batch) != 2:
        raise TypeError("batch must be a pair (X, y)")
    X, y = batch[0], batch[1]
    if not isinstance(X, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError("batch must hold two tensors")
    if X.ndim != 2 or not X.is_floating_point():
        raise ValueError("batch: X must be a 2-D floating tensor")
    if flaw != "empty_ok" and X.shape[0] < 1:
        raise ValueError("batch: X has no rows")
    if flaw == "column_labels" and y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if flaw == "int32_labels":
        if y.is_floating_point():
            raise ValueError("batch: y must hold integer labels")
        y = y.long()
    if y.ndim != 1 or y.dtype != torch.int64:
        raise ValueError("batch: y must be a 1-D int64 tensor")
    if len(y) != X.shape[0]:
        raise ValueError("batch: X and y have different lengths")
    if flaw == "eval_forward":
        model.eval()
    if flaw == "double_forward":
        with torch.no_grad():
            C = model(X).shape[1]
    logits = model(X)
    if logits.ndim != 2 or logits.shape[0] != len(y):
        raise ValueError("batch: the model's output is not (b, C)")
    C = logits.shape[1]
    low = True if flaw == "negative_labels" else bool((y >= 0).all())
    if not low or not bool((y < C).all()):
        raise ValueError(f"batch: labels must lie in [0, {C})")
    if flaw == "float64":
        logits = logits.double()
    if flaw == "sum":
        return F.cross_entropy(logits, y, reduction="sum")
    if flaw == "naive_softmax":
        p = torch.exp(logits) / torch.exp(logits).sum(dim=1, keepdim=True)
        return -torch.log(p.gather(1, y[:, None])).mean()
    if flaw == "softmax_then_ce":
        return F.cross_entropy(torch.softmax(logits, dim=1), y)
    if flaw == "nll":
        return F.nll_loss(F.log_softmax(logits, dim=1), y)
    loss = F.cross_entropy(logits, y)
    if flaw == "item":
        return loss.item()
    if flaw == "detach":
        return loss.detach()
    return loss


def _mkl(flaw, doc):
    def compute_batch_loss(model, batch):
        return _loss(model, batch, flaw=flaw)
    compute_batch_loss.__name__ = f"_loss_{flaw}"
    compute_batch_loss.__doc__ = doc
    return compute_batch_loss


_loss_negative_labels = _mkl("negative_labels", "only y < C checked")
_loss_int32_labels = _mkl("int32_labels", "int32 labels cast to int64")
_loss_empty_ok = _mkl("empty_ok", "b = 0 accepted (NaN loss)")
_loss_eval_forward = _mkl("eval_forward", "model.eval() before the forward")
_loss_double_forward = _mkl("double_forward", "an extra forward pass to learn C")
_loss_float64 = _mkl("float64", "loss computed and returned in float64")
_loss_callable_model = _mkl("callable_model", "any callable accepted as model")
_loss_tuple_only = _mkl("tuple_only", "a [X, y] list refused")
_loss_extra_items_ok = _mkl("extra_items_ok", "(X, y, extra) accepted")
_loss_column_labels = _mkl("column_labels", "(b, 1) labels squeezed")


_loss_sum = _mkl("sum", "reduction='sum'")
_loss_item = _mkl("item", "returns loss.item()")
_loss_detached = _mkl("detach", "returns loss.detach()")
_loss_naive_softmax = _mkl("naive_softmax", "exp / sum softmax, then log")
_loss_softmax_then_ce = _mkl("softmax_then_ce", "softmax before F.cross_entropy")


def _loss_alt_logsumexp(model, batch):
    """The mean negative log-softmax at the labels, written with logsumexp and gather (step 3 of the lesson)."""
    if not isinstance(model, nn.Module):
        raise TypeError("model: expected a torch.nn.Module")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError("batch: expected (X, y)")
    X, y = batch
    if not (torch.is_tensor(X) and torch.is_tensor(y)):
        raise TypeError("batch: expected two tensors")
    if X.dim() != 2 or not torch.is_floating_point(X) or X.size(0) == 0:
        raise ValueError("batch: X must be a non-empty 2-D float tensor")
    if y.dim() != 1 or y.dtype != torch.int64 or y.size(0) != X.size(0):
        raise ValueError("batch: y must be a 1-D int64 tensor as long as X")
    logits = model(X)
    if logits.dim() != 2 or logits.size(0) != y.size(0):
        raise ValueError("batch: model output must be (b, C)")
    if int(y.min()) < 0 or int(y.max()) >= logits.size(1):
        raise ValueError("batch: label outside [0, C)")
    log_p = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    return -log_p.gather(1, y.unsqueeze(1)).squeeze(1).mean()


def _loss_alt_nll(model, batch):
    """F.nll_loss on F.log_softmax, after the same checks (one forward pass)."""
    return _loss(model, batch, flaw="nll")


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 9: local_sgd_step
# ----------------------------------------------------------------------------------------------------------------------

def _check_lr(lr, *, allow_bool=False, allow_inf=False):
    if (not allow_bool and isinstance(lr, (bool, np.bool_))) or not isinstance(lr, numbers.Real):
        raise TypeError(f"lr must be a real number, got {type(lr).__name__}")
    lr = float(lr)
    if math.isnan(lr) or lr <= 0 or (not allow_inf and math.isinf(lr)):
        raise ValueError(f"lr must be finite and > 0, got {lr}")
    return lr


def _step(model, batch, lr, *, flaw=None):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if flaw == "zero_grad_before_validation":
        model.zero_grad(set_to_none=True)
    lr = _check_lr(lr, allow_bool=flaw == "bool_lr", allow_inf=flaw == "inf_lr")
    if flaw == "force_train":
        model.train()
    if flaw != "no_zero_grad":
        model.zero_grad(set_to_none=True)
    loss = _given_loss(model, batch)
    if flaw == "autograd_grad":
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        with torch.no_grad():
            for p, g in zip(params, grads):
                if g is not None:
                    p.add_(g, alpha=-lr)
        return float(loss.detach())
    loss.backward()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if flaw == "every_param":
                p.add_(p.grad, alpha=-lr)
                continue
            if p.grad is None:
                continue
            if flaw == "weights_only" and "weight" not in name:
                continue
            p.add_(p.grad, alpha=lr if flaw == "ascent" else -lr)
    if flaw == "clear_grad_after":
        model.zero_grad(set_to_none=True)
    if flaw == "loss_after":
        with torch.no_grad():
            return float(_given_loss(model, batch))
    return float(loss.detach())


def _mks(flaw, doc):
    def local_sgd_step(model, batch, lr):
        return _step(model, batch, lr, flaw=flaw)
    local_sgd_step.__name__ = f"_step_{flaw}"
    local_sgd_step.__doc__ = doc
    return local_sgd_step


_step_no_zero_grad = _mks("no_zero_grad", "stale .grad accumulates")
_step_ascent = _mks("ascent", "p += lr * grad")
_step_loss_after = _mks("loss_after", "reports the loss after the update")
_step_weights_only = _mks("weights_only", "biases never move")
_step_force_train = _mks("force_train", "model.train() inside the step")
_step_zero_grad_before_validation = _mks("zero_grad_before_validation", ".grad cleared before lr is checked")
_step_bool_lr = _mks("bool_lr", "lr=True accepted")
_step_inf_lr = _mks("inf_lr", "lr=inf accepted")
_step_autograd_grad = _mks("autograd_grad", "torch.autograd.grad: .grad left stale")
_step_every_param = _mks("every_param", "p.grad assumed to exist for every parameter")
_step_clear_grad_after = _mks("clear_grad_after", ".grad cleared after the step too")


def _step_alt_optim(model, batch, lr):
    """A throw-away torch.optim.SGD (momentum 0) does exactly w <- w - lr * grad."""
    if not isinstance(model, nn.Module):
        raise TypeError("model: expected an nn.Module")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr: expected a real number")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: expected a finite positive number, got {lr}")
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trainable, lr=float(lr))
    opt.zero_grad(set_to_none=True)
    loss = _given_loss(model, batch)
    loss.backward()
    opt.step()
    return loss.item()


def _step_alt_zero_fill(model, batch, lr):
    """zero_grad(set_to_none=False) then backward: .grad holds exactly this batch's gradient; p -= lr * p.grad."""
    if not isinstance(model, nn.Module):
        raise TypeError("model must be an nn.Module")
    lr = _check_lr(lr)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.detach_()
            p.grad.zero_()
    loss = _given_loss(model, batch)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad
    return float(loss)


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 10: train_client_locally
# ----------------------------------------------------------------------------------------------------------------------

_SHARED_OPT: dict = {}


def _train(model, dataset, indices, epochs, batch_size, lr, seed, momentum=0.0, *, flaw=None):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if flaw == "train_before_validation":
        model.train()
    if flaw == "bool_epochs":
        ok = isinstance(epochs, (int, np.integer))
    else:
        ok = _is_int(epochs)
    if not ok:
        raise TypeError("epochs must be an integer")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    epochs = int(epochs)
    if flaw != "no_lr_check":
        lr = _check_lr(lr)
    if not _is_real(momentum):
        raise TypeError("momentum must be a real number")
    momentum = float(momentum)
    if flaw == "nan_momentum":
        if momentum < 0 or momentum >= 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    elif flaw == "negative_momentum":
        if not momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    elif not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    first = _given_batches(dataset, indices if flaw != "whole_dataset" else torch.arange(len(dataset)), batch_size, seed)
    n_k = len(indices)
    model.train()
    opt = None
    if momentum > 0:
        if flaw == "shared_optimizer":
            opt = _SHARED_OPT.setdefault("opt", torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum))
        else:
            opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    losses, steps = [], 0
    for e in range(1 if flaw == "one_epoch" else epochs):
        if flaw == "optimizer_per_epoch" and momentum > 0 and e > 0:
            opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        epoch_seed = seed if flaw == "same_seed" else seed + e
        src = indices if flaw != "whole_dataset" else torch.arange(len(dataset))
        batches = first if e == 0 else _given_batches(dataset, src, batch_size, epoch_seed)
        total, means = 0.0, []
        for batch in batches:
            if opt is None:
                value = _given_step(model, batch, lr)
            else:
                if flaw != "zero_grad_after":
                    opt.zero_grad()
                loss = _given_loss(model, batch)
                loss.backward()
                opt.step()
                if flaw == "zero_grad_after":
                    opt.zero_grad()
                value = float(loss.detach())
                if flaw == "momentum_loss_after":
                    with torch.no_grad():
                        value = float(_given_loss(model, batch))
            total += value * len(batch[1])
            means.append(value)
            steps += 1
        if flaw == "mean_of_means":
            losses.append(sum(means) / len(means))
        elif flaw == "numpy_losses":
            losses.append(np.float64(total) / n_k)
        else:
            losses.append(total / n_k)
    return {"epoch_losses": losses, "num_steps": steps, "num_samples": n_k}


def _mkt(flaw, doc):
    def train_client_locally(model, dataset, indices, epochs, batch_size, lr, seed, momentum=0.0):
        return _train(model, dataset, indices, epochs, batch_size, lr, seed, momentum, flaw=flaw)
    train_client_locally.__name__ = f"_train_{flaw}"
    train_client_locally.__doc__ = doc
    return train_client_locally


_train_same_seed = _mkt("same_seed", "every epoch shuffles with seed")
_train_mean_of_means = _mkt("mean_of_means", "epoch loss = mean of batch means")
_train_one_epoch = _mkt("one_epoch", "one epoch whatever E says")
_train_whole_dataset = _mkt("whole_dataset", "trains on torch.arange(n)")
_train_shared_optimizer = _mkt("shared_optimizer", "one optimizer kept across calls")
_train_optimizer_per_epoch = _mkt("optimizer_per_epoch", "velocity reset every epoch")
_train_train_before_validation = _mkt("train_before_validation", "model.train() before the arguments are checked")
_train_bool_epochs = _mkt("bool_epochs", "epochs=True accepted")
_train_nan_momentum = _mkt("nan_momentum", "NaN momentum accepted")
_train_negative_momentum = _mkt("negative_momentum", "momentum < 0 accepted")
_train_no_lr_check = _mkt("no_lr_check", "lr left to local_sgd_step / torch.optim.SGD")
_train_zero_grad_after = _mkt("zero_grad_after", "momentum path: zero_grad after the step (stale .grad enters step 1)")
_train_momentum_loss_after = _mkt("momentum_loss_after", "momentum path: loss measured after the step")
_train_numpy_losses = _mkt("numpy_losses", "epoch losses are np.float64")


def _train_no_mode(model, dataset, indices, epochs, batch_size, lr, seed, momentum=0.0):
    """Trains in training mode but restores the mode the model arrived in (the evaluate_accuracy habit)."""
    was = model.training if isinstance(model, nn.Module) else None
    out = _train(model, dataset, indices, epochs, batch_size, lr, seed, momentum)
    if was is not None:
        model.train(was)
    return out


def _train_alt_all_optim(model, dataset, indices, epochs, batch_size, lr, seed, momentum=0.0):
    """A fresh torch.optim.SGD for both cases (momentum 0 is w <- w - lr * grad); bookkeeping with math.ceil."""
    if not isinstance(model, nn.Module):
        raise TypeError("model: expected an nn.Module")
    if isinstance(epochs, bool) or not isinstance(epochs, numbers.Integral):
        raise TypeError("epochs: expected an int")
    if epochs < 1:
        raise ValueError("epochs: must be >= 1")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr: expected a real number")
    if not math.isfinite(lr) or lr <= 0:
        raise ValueError("lr: must be finite and positive")
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real):
        raise TypeError("momentum: expected a real number")
    if not (0.0 <= momentum < 1.0):
        raise ValueError("momentum: must be in [0, 1)")
    epoch_batches = [_given_batches(dataset, indices, batch_size, seed)]
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=float(lr), momentum=float(momentum))
    n_k = int(indices.numel())
    losses = []
    for e in range(int(epochs)):
        batches = epoch_batches[0] if e == 0 else _given_batches(dataset, indices, batch_size, seed + e)
        weighted = 0.0
        for X, y in batches:
            opt.zero_grad(set_to_none=True)
            loss = _given_loss(model, (X, y))
            loss.backward()
            opt.step()
            weighted += loss.item() * y.numel()
        losses.append(weighted / n_k)
    B = n_k if batch_size is None else batch_size
    return {"epoch_losses": losses, "num_steps": int(epochs) * math.ceil(n_k / B), "num_samples": n_k}


def _train_alt_manual_momentum(model, dataset, indices, epochs, batch_size, lr, seed, momentum=0.0):
    """Momentum written by hand (v = mu v + g, w -= lr v, v starting at the first gradient), inside the call."""
    if not isinstance(model, nn.Module):
        raise TypeError("model must be an nn.Module")
    if not _is_int(epochs):
        raise TypeError("epochs must be an int")
    if epochs < 1:
        raise ValueError("epochs must be at least 1")
    lr = _check_lr(lr)
    if not _is_real(momentum):
        raise TypeError("momentum must be real")
    if not 0 <= momentum < 1:
        raise ValueError("momentum must be in [0, 1)")
    batches = _given_batches(dataset, indices, batch_size, seed)
    model.train()
    velocity: dict = {}
    n_k, steps, losses = len(indices), 0, []
    for e in range(epochs):
        if e:
            batches = _given_batches(dataset, indices, batch_size, seed + e)
        total = 0.0
        for batch in batches:
            if momentum == 0:
                value = _given_step(model, batch, lr)
            else:
                model.zero_grad(set_to_none=True)
                loss = _given_loss(model, batch)
                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        if p.grad is None:
                            continue
                        if id(p) not in velocity:
                            velocity[id(p)] = torch.clone(p.grad).detach()
                        else:
                            velocity[id(p)].mul_(momentum).add_(p.grad)
                        p.add_(velocity[id(p)], alpha=-lr)
                value = float(loss.detach())
            total += value * len(batch[1])
            steps += 1
        losses.append(total / n_k)
    return {"epoch_losses": losses, "num_steps": steps, "num_samples": n_k}


MUTANTS = {
    "make_client_batches": [
        ("drops the short last batch ('the last ... is kept')", _batches_drop_last),
        ("torch.randperm without generator ('torch's global random generator is not touched')", _batches_global_rng),
        ("sampling with replacement ('each of the client's examples exactly once')", _batches_with_replacement),
        ("sorts indices before the permutation ('order = indices[torch.randperm(n_k, generator=g)]')",
         _batches_sort_first),
        ("B >= n_k or None: one batch in the given order ('one batch (still shuffled)')", _batches_one_batch_unshuffled),
        ("negative indices wrap around ('indices ... in [0, n)')", _batches_negative_ok),
        ("int32 indices accepted ('indices not a 1-D int64 tensor (TypeError)')", _batches_int32_ok),
        ("batch_size=True accepted as 1 ('an integer (not bool)')", _batches_bool_batch_size),
        ("batch_size=3.0 accepted ('batch_size not an integer')", _batches_float_batch_size),
        ("no seed range check ('seed int in [0, 2^63-1]')", _batches_seed_no_range),
        ("dataset type not checked ('a dataset that is not a LabelledDataset' is refused)", _batches_no_dataset_check),
    ],
    "compute_batch_loss": [
        ("reduction='sum' ('L = 1/b sum_i ...')", _loss_sum),
        ("returns loss.item() ('0-d float tensor with grad_fn')", _loss_item),
        ("returns loss.detach() ('with grad_fn')", _loss_detached),
        ("naive exp/sum softmax ('a finite value for logits of +-1000')", _loss_naive_softmax),
        ("softmax before F.cross_entropy ('raw scores, no softmax')", _loss_softmax_then_ce),
        ("negative labels not refused ('a label outside [0, C) ... naming batch')", _loss_negative_labels),
        ("int32 labels cast ('y not 1-D int64' is refused)", _loss_int32_labels),
        ("empty batch gives NaN ('b >= 1', 'X not a non-empty 2-D float tensor')", _loss_empty_ok),
        ("model.eval() before the forward ('Mutation: none')", _loss_eval_forward),
        ("extra no_grad forward to learn C: BatchNorm stats updated twice ('Mutation: none')", _loss_double_forward),
        ("loss returned in float64 (logits promoted; the loss should be in the logits' dtype)", _loss_float64),
        ("any callable accepted as model ('model not an nn.Module (TypeError, naming model)')", _loss_callable_model),
        ("a [X, y] list refused ('a tuple or list of two tensors')", _loss_tuple_only),
        ("(X, y, extra) accepted ('batch not a pair')", _loss_extra_items_ok),
        ("(b, 1) labels squeezed ('y (b,) int64')", _loss_column_labels),
    ],
    "local_sgd_step": [
        ("never clears .grad ('each .grad is replaced by this batch's gradient')", _step_no_zero_grad),
        ("gradient ascent ('theta - eta dL/dtheta')", _step_ascent),
        ("returns the loss after the update ('L_b(w), the batch loss before the step')", _step_loss_after),
        ("updates weights only ('weights and biases alike')", _step_weights_only),
        ("forces model.train() ('The model's mode is left as found')", _step_force_train),
        ("clears .grad before validating lr ('raised before anything is touched')", _step_zero_grad_before_validation),
        ("lr=True accepted ('a real number, not bool')", _step_bool_lr),
        ("lr=inf accepted ('finite and > 0')", _step_inf_lr),
        ("torch.autograd.grad: .grad not replaced ('each .grad is replaced by this batch's gradient')",
         _step_autograd_grad),
        ("assumes every parameter has a .grad: crashes on a frozen one ('every parameter that receives a gradient')",
         _step_every_param),
        ("clears .grad after the step ('each .grad is replaced by this batch's gradient')", _step_clear_grad_after),
    ],
    "train_client_locally": [
        ("same shuffle every epoch ('epoch e shuffles with seed + e')", _train_same_seed),
        ("epoch loss = mean of batch means ('per-epoch mean training loss', example-weighted)", _train_mean_of_means),
        ("one epoch whatever E ('E local passes')", _train_one_epoch),
        ("trains on torch.arange(n) ('the client's examples')", _train_whole_dataset),
        ("one optimizer kept across calls ('no optimizer ... state survives the call')", _train_shared_optimizer),
        ("a new optimizer every epoch: velocity reset ('created for this call only', equal to one torch.optim.SGD)",
         _train_optimizer_per_epoch),
        ("restores the caller's mode after training ('it is put in training mode and left there')", _train_no_mode),
        ("model.train() before validation ('refused ... before the model is touched')", _train_train_before_validation),
        ("epochs=True accepted ('epochs not an integer >= 1')", _train_bool_epochs),
        ("NaN momentum passes 'm < 0 or m >= 1' ('momentum outside [0, 1)')", _train_nan_momentum),
        ("negative momentum accepted ('mu in [0, 1)')", _train_negative_momentum),
        ("lr not validated here: NaN lr trains with momentum, messages do not name lr ('lr not finite and positive')",
         _train_no_lr_check),
        ("momentum path zero_grads after the step: the caller's stale .grad enters step 1 ('a fresh torch.optim.SGD "
         "loop' with zero_grad before each step)", _train_zero_grad_after),
        ("momentum path reports the loss after each step ('keeping the loss before the step')",
         _train_momentum_loss_after),
        ("epoch losses are np.float64 ('[E floats]')", _train_numpy_losses),
    ],
}

ALTERNATIVES = {
    "make_client_batches": [
        ("range(0, n_k, B) slices of the shuffled order, index_select", _batches_alt_ranges),
        ("gather the epoch once, then torch.split the copy (views of one new buffer, none of the dataset)",
         _batches_alt_gather_once),
    ],
    "compute_batch_loss": [
        ("logsumexp + gather", _loss_alt_logsumexp),
        ("F.nll_loss(F.log_softmax(...))", _loss_alt_nll),
    ],
    "local_sgd_step": [
        ("a throw-away torch.optim.SGD, loss.item()", _step_alt_optim),
        ("zero-filled .grad then backward; p -= lr * p.grad", _step_alt_zero_fill),
    ],
    "train_client_locally": [
        ("torch.optim.SGD for momentum 0 too; num_steps from math.ceil", _train_alt_all_optim),
        ("momentum written by hand with a per-call velocity dict", _train_alt_manual_momentum),
    ],
}

DISPUTED = {
    "make_client_batches": [
        ("batches are [X, y] lists ('list of ... pairs (X_b, y_b)')",
         "the contract says 'pairs', not tuples, and compute_batch_loss accepts a tuple or a list of two tensors, "
         "so a two-element list works everywhere a batch is used"),
    ],
}
