"""Red team, Module 3 Part 1 (model and dataset setup): wrong answers and correct alternatives written from the
release notebooks only."""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import nn

from trainsys.fedavg.data import LabelledDataset


_SEED_MAX = 2**63 - 1


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_int(name, x, low, *, allow_bool=False, allow_float=False):
    if allow_float and isinstance(x, float) and float(x).is_integer():
        x = int(x)
    ok = isinstance(x, (int, np.integer)) if allow_bool else _is_int(x)
    if not ok:
        raise TypeError(f"{name} must be an integer, got {type(x).__name__}")
    if x < low:
        raise ValueError(f"{name} must be >= {low}, got {x}")
    return int(x)


def _check_seed(seed, *, upper=True, allow_bool=False):
    ok = isinstance(seed, (int, np.integer)) if allow_bool else _is_int(seed)
    if not ok:
        raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
    if seed < 0 or (upper and seed > _SEED_MAX):
        raise ValueError(f"seed must be in [0, 2**63 - 1], got {seed}")
    return int(seed)


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 1: build_mlp_classifier
# ----------------------------------------------------------------------------------------------------------------------

def _mlp(d_in, d_hidden, n_classes, seed, batch_norm=False, *, flaw=None):
    d_in = _check_int("d_in", d_in, 1, allow_float=flaw == "float_sizes")
    d_hidden = _check_int("d_hidden", d_hidden, 0 if flaw == "d_hidden_zero" else 1)
    n_classes = _check_int("n_classes", n_classes, 2)
    seed = _check_seed(seed, upper=flaw != "seed_no_upper", allow_bool=flaw == "bool_seed")
    if flaw != "batch_norm_truthy" and not isinstance(batch_norm, bool):
        raise TypeError(f"batch_norm must be a bool, got {type(batch_norm).__name__}")
    batch_norm = bool(batch_norm)
    if flaw == "global_rng":
        torch.manual_seed(seed)
        first, last = nn.Linear(d_in, d_hidden), nn.Linear(d_hidden, n_classes)
    elif flaw == "plain_linear":
        first, last = nn.Linear(d_in, d_hidden), nn.Linear(d_hidden, n_classes)
    else:
        first = nn.utils.skip_init(nn.Linear, d_in, d_hidden)
        last = nn.utils.skip_init(nn.Linear, d_hidden, n_classes)
    g = torch.Generator().manual_seed(seed)
    b1, b2 = 1.0 / np.sqrt(d_in), 1.0 / np.sqrt(d_hidden)
    if flaw == "float32_bound":
        b1 = float(1.0 / torch.sqrt(torch.tensor(float(d_in))))
        b2 = float(1.0 / torch.sqrt(torch.tensor(float(d_hidden))))
    if flaw == "second_bound_from_d_in":
        b2 = b1
    layers = [first] + ([nn.BatchNorm1d(d_hidden)] if batch_norm else []) + [nn.ReLU(), last]
    model = nn.Sequential(*layers)
    with torch.no_grad():
        if flaw == "global_rng":
            draws = [(first.weight, b1, None), (first.bias, b1, None), (last.weight, b2, None), (last.bias, b2, None)]
        elif flaw == "weights_then_biases":
            draws = [(first.weight, b1, g), (last.weight, b2, g), (first.bias, b1, g), (last.bias, b2, g)]
        elif flaw == "loop_all_params":
            # a generic loop over every affine module: BatchNorm's weight and bias are drawn too
            draws = []
            for module in model:
                if isinstance(module, nn.Linear):
                    bound = 1.0 / np.sqrt(module.in_features)
                elif isinstance(module, nn.BatchNorm1d):
                    bound = 1.0 / np.sqrt(module.num_features)
                else:
                    continue
                draws += [(module.weight, bound, g), (module.bias, bound, g)]
        else:
            draws = [(first.weight, b1, g), (first.bias, b1, g), (last.weight, b2, g), (last.bias, b2, g)]
        for tensor, bound, gen in draws:
            if gen is None:
                tensor.uniform_(-bound, bound)
            else:
                tensor.uniform_(-bound, bound, generator=gen)
    if flaw == "eval_mode":
        model.eval()
    return model


def _mlp_weights_then_biases(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="weights_then_biases")


def _mlp_global_rng(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="global_rng")


def _mlp_plain_linear(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="plain_linear")


def _mlp_eval_mode(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="eval_mode")


def _mlp_loop_all_params(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="loop_all_params")


def _mlp_d_hidden_zero(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="d_hidden_zero")


def _mlp_seed_no_upper(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="seed_no_upper")


def _mlp_bool_seed(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="bool_seed")


def _mlp_batch_norm_truthy(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="batch_norm_truthy")


def _mlp_float_sizes(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="float_sizes")


def _mlp_float32_bound(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="float32_bound")


def _mlp_second_bound_from_d_in(d_in, d_hidden, n_classes, seed, batch_norm=False):
    return _mlp(d_in, d_hidden, n_classes, seed, batch_norm, flaw="second_bound_from_d_in")


def _mlp_alt_meta_then_fill(d_in, d_hidden, n_classes, seed, batch_norm=False):
    """Build the layers on the meta device (no initialisation is run on real memory), materialise, then fill."""
    for name, value, low in (("d_in", d_in, 1), ("d_hidden", d_hidden, 1), ("n_classes", n_classes, 2)):
        if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name}: expected an integer, got {value!r}")
        if value < low:
            raise ValueError(f"{name}: expected >= {low}, got {value}")
    if not isinstance(seed, numbers.Integral) or isinstance(seed, (bool, np.bool_)):
        raise TypeError(f"seed: expected an integer, got {seed!r}")
    if not 0 <= seed <= 2**63 - 1:
        raise ValueError(f"seed: out of range: {seed}")
    if type(batch_norm) is not bool:
        raise TypeError(f"batch_norm: expected a bool, got {batch_norm!r}")
    d_in, d_hidden, n_classes = int(d_in), int(d_hidden), int(n_classes)
    first = nn.Linear(d_in, d_hidden, device="meta").to_empty(device="cpu")
    last = nn.Linear(d_hidden, n_classes, device="meta").to_empty(device="cpu")
    gen = torch.Generator()
    gen.manual_seed(int(seed))
    with torch.no_grad():
        for layer in (first, last):
            bound = 1.0 / math.sqrt(layer.in_features)
            nn.init.uniform_(layer.weight, -bound, bound, generator=gen)
            nn.init.uniform_(layer.bias, -bound, bound, generator=gen)
    middle = [nn.BatchNorm1d(d_hidden)] if batch_norm else []
    return nn.Sequential(first, *middle, nn.ReLU(), last)


def _mlp_alt_draw_then_wrap(d_in, d_hidden, n_classes, seed, batch_norm=False):
    """Draw the four tensors first, then install them as the Parameters of skip_init layers."""
    _check_int("d_in", d_in, 1)
    _check_int("d_hidden", d_hidden, 1)
    _check_int("n_classes", n_classes, 2)
    seed = _check_seed(seed)
    if not isinstance(batch_norm, bool):
        raise TypeError("batch_norm must be True or False")
    g = torch.Generator().manual_seed(seed)
    shapes = [((d_hidden, d_in), d_in), ((d_hidden,), d_in), ((n_classes, d_hidden), d_hidden), ((n_classes,), d_hidden)]
    drawn = []
    for shape, fan_in in shapes:
        bound = 1.0 / np.sqrt(fan_in)
        drawn.append(torch.empty(shape, dtype=torch.float32).uniform_(-bound, bound, generator=g))
    first = nn.utils.skip_init(nn.Linear, d_in, d_hidden)
    last = nn.utils.skip_init(nn.Linear, d_hidden, n_classes)
    first.weight, first.bias = nn.Parameter(drawn[0]), nn.Parameter(drawn[1])
    last.weight, last.bias = nn.Parameter(drawn[2]), nn.Parameter(drawn[3])
    if batch_norm:
        return nn.Sequential(first, nn.BatchNorm1d(d_hidden), nn.ReLU(), last)
    return nn.Sequential(first, nn.ReLU(), last)


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 2: build_synthetic_dataset
# ----------------------------------------------------------------------------------------------------------------------

def _synth(n, d_in, n_classes, seed, *, flaw=None):
    n = _check_int("n", n, 0 if flaw == "n_zero" else 1)
    d_in = _check_int("d_in", d_in, 1)
    n_classes = _check_int("n_classes", n_classes, 2, allow_bool=False)
    seed = _check_seed(seed, upper=flaw != "seed_no_upper")
    if flaw == "global_rng":
        torch.manual_seed(seed)
        G = torch.randn(d_in, n_classes)
        X = torch.randn(n, d_in)
    else:
        g = torch.Generator().manual_seed(seed)
        if flaw == "x_first":
            X = torch.randn(n, d_in, generator=g)
            G = torch.randn(d_in, n_classes, generator=g)
        elif flaw == "x_transposed":
            G = torch.randn(d_in, n_classes, generator=g)
            X = torch.randn(d_in, n, generator=g).T.contiguous()
        else:
            G = torch.randn(d_in, n_classes, generator=g)
            X = torch.randn(n, d_in, generator=g)
    if flaw == "raw_teacher":
        W = G
    elif flaw == "strict_square" and d_in > n_classes or flaw != "strict_square" and d_in >= n_classes:
        W = torch.linalg.qr(G).Q
    else:
        W = G / float(np.sqrt(d_in))
    labels = torch.argmax(X @ W, dim=1)
    if flaw == "int32_labels":
        labels = labels.to(torch.int32)
    classes = n_classes
    if flaw == "observed_classes":
        classes = max(int(torch.unique(labels).numel()), 1)
    return LabelledDataset(X, labels, classes)


def _synth_x_first(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="x_first")


def _synth_x_transposed(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="x_transposed")


def _synth_raw_teacher(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="raw_teacher")


def _synth_strict_square(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="strict_square")


def _synth_global_rng(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="global_rng")


def _synth_int32_labels(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="int32_labels")


def _synth_observed_classes(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="observed_classes")


def _synth_n_zero(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="n_zero")


def _synth_seed_no_upper(n, d_in, n_classes, seed):
    return _synth(n, d_in, n_classes, seed, flaw="seed_no_upper")


def _synth_bool_n(n, d_in, n_classes, seed):
    # isinstance(n, int) lets True through as n = 1
    for name, value, low in (("n", n, 1), ("d_in", d_in, 1), ("n_classes", n_classes, 2)):
        if not isinstance(value, int):
            raise TypeError(f"{name} must be an int")
        if value < low:
            raise ValueError(f"{name} must be >= {low}")
    seed = _check_seed(seed)
    g = torch.Generator().manual_seed(seed)
    G = torch.randn(d_in, n_classes, generator=g)
    X = torch.randn(int(n), d_in, generator=g)
    W = torch.linalg.qr(G).Q if d_in >= n_classes else G / float(np.sqrt(d_in))
    return LabelledDataset(X, torch.argmax(X @ W, dim=1), n_classes)


def _synth_alt_unscaled_small_branch(n, d_in, n_classes, seed):
    """argmax is invariant to a positive scale, so G / sqrt(d_in) can be labelled as G; max().indices for argmax."""
    n = _check_int("n", n, 1)
    d_in = _check_int("d_in", d_in, 1)
    n_classes = _check_int("n_classes", n_classes, 2)
    seed = _check_seed(seed)
    g = torch.Generator()
    g.manual_seed(seed)
    G = torch.randn((d_in, n_classes), generator=g)
    X = torch.randn((n, d_in), generator=g)
    if d_in >= n_classes:
        Q, _ = torch.linalg.qr(G, mode="reduced")
        scores = torch.matmul(X, Q)
    else:
        scores = torch.matmul(X, G)
    labels = scores.max(dim=1).indices.to(torch.int64)
    return LabelledDataset(X, labels, int(n_classes))


# ----------------------------------------------------------------------------------------------------------------------
# Lesson 3: train_test_split_dataset
# ----------------------------------------------------------------------------------------------------------------------

def _split(dataset, test_fraction, seed, *, flaw=None):
    if not isinstance(dataset, LabelledDataset):
        raise TypeError(f"dataset must be a LabelledDataset, got {type(dataset).__name__}")
    if isinstance(test_fraction, (bool, np.bool_)) or not isinstance(test_fraction, numbers.Real):
        raise TypeError(f"test_fraction must be a real number, got {type(test_fraction).__name__}")
    f = float(test_fraction)
    if flaw == "nan_fraction":
        if f <= 0 or f >= 1:
            raise ValueError(f"test_fraction must be in (0, 1), got {f}")
    elif not 0 < f < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {f}")
    seed = _check_seed(seed)
    X, y, C = dataset.features, dataset.labels, dataset.n_classes
    n = len(y)
    g = torch.Generator().manual_seed(seed)
    if flaw == "one_global_perm":
        perm = torch.randperm(n, generator=g)
        chosen = []
        for c in range(C):
            in_perm = perm[y[perm] == c]
            t_c = int(np.floor(f * len(in_perm) + 0.5))
            chosen.append(in_perm[:t_c])
        test_idx = torch.sort(torch.cat(chosen)).values
    else:
        chosen = []
        classes = torch.unique(y).tolist() if flaw == "skip_absent" else range(C)
        for c in classes:
            members = torch.nonzero(y == c).flatten()
            n_c = len(members)
            if flaw == "truncate":
                t_c = int(f * n_c)
            elif flaw == "bankers_round":
                t_c = int(round(f * n_c))
            else:
                t_c = int(np.floor(f * n_c + 0.5))
            gen = torch.Generator().manual_seed(seed + c) if flaw == "reseed_per_class" else g
            order = torch.randperm(n_c, generator=gen)
            if flaw == "last_t":
                chosen.append(members[order[n_c - t_c:]])
            else:
                chosen.append(members[order[:t_c]])
        test_idx = torch.cat(chosen) if chosen else torch.empty(0, dtype=torch.int64)
        if flaw != "unsorted_test":
            test_idx = torch.sort(test_idx).values
    mask = torch.ones(n, dtype=torch.bool)
    mask[test_idx] = False
    train_idx = torch.nonzero(mask).flatten()
    if len(test_idx) == 0 or (len(train_idx) == 0 and flaw != "train_may_be_empty"):
        raise ValueError(f"test_fraction={f} leaves a part empty")
    return (LabelledDataset(X[train_idx], y[train_idx], C), LabelledDataset(X[test_idx], y[test_idx], C))


def _split_truncate(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="truncate")


def _split_bankers_round(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="bankers_round")


def _split_skip_absent(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="skip_absent")


def _split_reseed_per_class(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="reseed_per_class")


def _split_one_global_perm(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="one_global_perm")


def _split_last_t(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="last_t")


def _split_unsorted_test(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="unsorted_test")


def _split_nan_fraction(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="nan_fraction")


def _split_train_may_be_empty(dataset, test_fraction, seed):
    return _split(dataset, test_fraction, seed, flaw="train_may_be_empty")


def _split_shares_storage(dataset, test_fraction, seed):
    """Right indices, but the test part of a one-class run is a slice (a view) of the input when it is contiguous."""
    _split(dataset, test_fraction, seed)          # validation and the empty-part checks
    X, y = dataset.features, dataset.labels
    # recompute the indices the honest way, then hand back views whenever the index set is one contiguous run
    g = torch.Generator().manual_seed(int(seed))
    chosen = []
    for c in range(dataset.n_classes):
        members = torch.nonzero(y == c).flatten()
        t_c = int(np.floor(float(test_fraction) * len(members) + 0.5))
        chosen.append(members[torch.randperm(len(members), generator=g)[:t_c]])
    test_idx = torch.sort(torch.cat(chosen)).values
    mask = torch.ones(len(y), dtype=torch.bool)
    mask[test_idx] = False
    train_idx = torch.nonzero(mask).flatten()

    def take(idx):
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        if hi - lo == len(idx):
            return X[lo:hi], y[lo:hi]            # basic slicing: a view of the dataset's storage
        return X[idx], y[idx]

    return (LabelledDataset(*take(train_idx), dataset.n_classes), LabelledDataset(*take(test_idx), dataset.n_classes))


def _split_alt_numpy_masks(dataset, test_fraction, seed):
    """Per-class draws as in the contract, bookkeeping in NumPy, int(x + 0.5) for floor(x + 0.5) (x >= 0)."""
    if not isinstance(dataset, LabelledDataset):
        raise TypeError("dataset: a LabelledDataset is required")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real):
        raise TypeError("test_fraction: a real number is required")
    if not (0.0 < test_fraction < 1.0):
        raise ValueError(f"test_fraction: must lie strictly between 0 and 1, got {test_fraction}")
    _check_seed(seed)
    labels = dataset.labels.numpy()
    is_test = np.zeros(len(labels), dtype=bool)
    g = torch.Generator().manual_seed(int(seed))
    for c in range(dataset.n_classes):
        members = np.flatnonzero(labels == c)
        t_c = int(float(test_fraction) * len(members) + 0.5)
        order = torch.randperm(len(members), generator=g).numpy()
        is_test[members[order[:t_c]]] = True
    test_idx = torch.from_numpy(np.flatnonzero(is_test)).to(torch.int64)
    train_idx = torch.from_numpy(np.flatnonzero(~is_test)).to(torch.int64)
    if test_idx.numel() == 0 or train_idx.numel() == 0:
        raise ValueError("test_fraction leaves the training or the test part empty")
    return (dataset.subset(train_idx), dataset.subset(test_idx))


MUTANTS = {
    "build_mlp_classifier": [
        ("draw order W1, W2, b1, b2 (contract: 'first weight, first bias, second weight, second bias')",
         _mlp_weights_then_biases),
        ("torch.manual_seed + nn.Linear: global generator re-seeded ('torch's global generator must be in the same "
         "state after the call')", _mlp_global_rng),
        ("plain nn.Linear then overwritten from the private generator: global generator advanced "
         "('create the layers with nn.utils.skip_init')", _mlp_plain_linear),
        ("returns the model in eval mode ('result nn.Sequential ... in training mode (as built)')",
         _mlp_eval_mode),
        ("generic loop over affine modules also draws BatchNorm's weight/bias ('1.weight (ones), 1.bias (zeros)')",
         _mlp_loop_all_params),
        ("d_hidden = 0 accepted ('d_hidden int >= 1')", _mlp_d_hidden_zero),
        ("seed 2**63 accepted ('seed int in [0, 2^63-1]')", _mlp_seed_no_upper),
        ("seed=True accepted as 1 ('Python or NumPy integers, not bool')", _mlp_bool_seed),
        ("batch_norm=1 accepted ('a non-bool batch_norm (TypeError)')", _mlp_batch_norm_truthy),
        ("d_in=4.0 accepted as 4 ('a non-integer size ... (TypeError)')", _mlp_float_sizes),
        ("bound 1/sqrt(fan_in) computed in float32 (draws no longer bit-equal to the contract's)", _mlp_float32_bound),
        ("second layer bounded by 1/sqrt(d_in) instead of 1/sqrt(d_hidden) ('fan_in' of layer 2)",
         _mlp_second_bound_from_d_in),
    ],
    "build_synthetic_dataset": [
        ("X drawn before G ('first G ... then X')", _synth_x_first),
        ("X drawn as (d_in, n) and transposed ('X in R^{n x d_in} with torch.randn')", _synth_x_transposed),
        ("raw Gaussian teacher G without QR ('W = Q from torch.linalg.qr(G) when d_in >= C')", _synth_raw_teacher),
        ("QR only when d_in > C: the square case d_in == C uses G / sqrt(d_in) ('when d_in >= C')",
         _synth_strict_square),
        ("torch.manual_seed + global randn ('torch's global generator is left untouched')", _synth_global_rng),
        ("int32 labels ('labels (n,) int64')", _synth_int32_labels),
        ("n_classes = number of classes observed ('.n_classes ... kept even when a small sample misses a class')",
         _synth_observed_classes),
        ("n = 0 accepted ('n int >= 1')", _synth_n_zero),
        ("seed 2**63 accepted ('seed int in [0, 2^63-1]')", _synth_seed_no_upper),
        ("n=True accepted (isinstance(n, int); 'integers, not bool')", _synth_bool_n),
    ],
    "train_test_split_dataset": [
        ("int(f * n_c) truncation ('t_c = floor(f n_c + 1/2)')", _split_truncate),
        ("round(f * n_c): ties to even ('rounding half up')", _split_bankers_round),
        ("a new generator per class, seeded seed + c ('One generator g serves all classes, in class order')",
         _split_reseed_per_class),
        ("one permutation of all examples, then the first t_c of each class in it ('the class's indices ... "
         "permuted with torch.randperm(n_c, generator=g)')", _split_one_global_perm),
        ("takes the last t_c of each class permutation ('the first t_c of the permutation go to the test set')",
         _split_last_t),
        ("test part left in permutation order ('in the original order')", _split_unsorted_test),
        ("NaN test_fraction passes 'f <= 0 or f >= 1' ('a real number in the open interval (0, 1)')",
         _split_nan_fraction),
        ("an empty training part is not refused ('one that leaves either part empty')", _split_train_may_be_empty),
        ("a part whose indices are one contiguous run is a slice of the input ('both parts are new tensors ... "
         "neither shares storage with the input')", _split_shares_storage),
    ],
}

ALTERNATIVES = {
    "build_mlp_classifier": [
        ("layers built on the meta device then to_empty, filled with nn.init.uniform_(generator=g)",
         _mlp_alt_meta_then_fill),
        ("four tensors drawn first, then wrapped as nn.Parameter into skip_init layers", _mlp_alt_draw_then_wrap),
    ],
    "build_synthetic_dataset": [
        ("d_in < C branch labelled with G itself (argmax is scale-invariant); max().indices", _synth_alt_unscaled_small_branch),
    ],
    "train_test_split_dataset": [
        ("NumPy boolean mask bookkeeping, int(x + 0.5), dataset.subset", _split_alt_numpy_masks),
        ("loops over torch.unique(labels) only: randperm(0, generator=g) draws nothing, so skipping an absent "
         "class leaves the stream unchanged", _split_skip_absent),
    ],
}


# ==========================================================================================================
# Second correct alternatives (issue 27), written blind from the release notebooks.
# ==========================================================================================================
def _synth_alt_reduced_qr(n, d_in, n_classes, seed):
    """QR through mode='reduced' (the default's own mode) and a tensor method chain for the labels."""
    for name, value, low in (("n", n, 1), ("d_in", d_in, 1), ("n_classes", n_classes, 2)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {value!r}")
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    if not 0 <= seed <= 2**63 - 1:
        raise ValueError(f"seed must be in [0, 2**63 - 1], got {seed}")
    g = torch.Generator()
    g.manual_seed(int(seed))
    G = torch.randn((int(d_in), int(n_classes)), generator=g)
    X = torch.randn((int(n), int(d_in)), generator=g)
    W = torch.linalg.qr(G, mode="reduced")[0] if d_in >= n_classes else G / math.sqrt(d_in)
    return LabelledDataset(X, X.matmul(W).argmax(dim=1), int(n_classes))


ALTERNATIVES.setdefault("build_synthetic_dataset", []).append(
    ("torch.linalg.qr(G, mode='reduced')[0], X.matmul(W).argmax(dim=1)", _synth_alt_reduced_qr))
