r"""Does THIS transformer fit on THIS accelerator? The memory of one training step, per worker.

Module 1 accounts for the bytes of an MLP's step (lesson 39, :mod:`trainsys.memtrain.memory`); this module
applies the same four classes — parameters, gradients, optimizer state, activations (Rajbhandari et al.
2020, "ZeRO", §3) — to decoder-only transformers: GPT-2 small, Llama-3-8B, Llama-3-70B, or a custom
configuration. :func:`transformer_memory` is the pure function; the book's page runs a JavaScript twin
(``book/explorer/transformer_explorer.js``) that ``tests/test_transformer_explorer.py`` checks gives
identical numbers. Bytes are decimal: the device budget is ``device_gb · 10⁹`` bytes, with nothing set
aside for the CUDA context, the allocator's fragmentation or communication buffers.

Parameter count
---------------
Per layer, with hidden size :math:`h`, :math:`a` query heads, :math:`k` key/value heads (GQA; head size
:math:`h/a`, so :math:`h_{kv} = k\,h/a`) and FFN size :math:`f`:

- attention: :math:`W_Q, W_O` are :math:`h\times h`, :math:`W_K, W_V` are :math:`h\times h_{kv}`:
  :math:`2h^2 + 2h\,h_{kv}` (+ biases :math:`2h + 2h_{kv}` in GPT-2 style);
- MLP: GPT-2 style (GELU) two matrices :math:`2hf` (+ biases :math:`f + h`); Llama style (SwiGLU) three,
  gate, up and down: :math:`3hf`;
- norms: GPT-2 style two LayerNorms, :math:`4h` (scale and shift); Llama style two RMSNorms, :math:`2h`.

Plus the token embedding :math:`Vh`, the unembedding :math:`Vh` unless tied, learned positions
:math:`P h` (GPT-2 style only; RoPE has no parameters) and the final norm (:math:`2h` LayerNorm,
:math:`h` RMSNorm):

.. math::
   \Psi = L\,(2h^2 + 2h\,h_{kv} + n_{\text{mlp}}\,hf + \text{biases} + \text{norms}) + Vh\,(2 - [\text{tied}])
          + P h + \text{final norm}.

GPT-2 small 124,439,808 (published 124M), Llama-3-8B 8,030,261,248 (8.03B), Llama-3-70B 70,553,706,496
(70.6B).

Parameters, gradients, optimizer state (Adam)
---------------------------------------------
=================  ========  =========  =============================================  ======
precision          weights   gradients  optimizer state                                bytes
=================  ========  =========  =============================================  ======
``fp32``           4         4          8 (momentum, variance)                         16Ψ
``mixed_fp16``     2         2          12 (fp32 master, momentum, variance)           16Ψ
``mixed_bf16``     2         2          12                                             16Ψ
``fp8``            2 (bf16)  2 (bf16)   12                                             16Ψ
``autocast_bf16``  4         4          8                                              16Ψ
=================  ========  =========  =============================================  ======

``autocast_bf16`` is PyTorch's automatic mixed precision (``torch.autocast(dtype=torch.bfloat16)`` around
the forward pass): the weights, their gradients and Adam stay float32; each linear layer casts its input
and its weight to bf16 and saves both casts for backward. The weights' bf16 copies (:math:`2\,\Psi_{\text{GEMM}}`,
every linear weight and the output head, not the embedding lookups) are therefore *activations*: alive from
forward to backward, not sharded by ZeRO.

FP8 training as Micikevicius et al. 2022 ("FP8 Formats for Deep Learning", §3–4) and NVIDIA Transformer
Engine (``fp8_autocast``) run it: the GEMM inputs of the linear layers are cast to FP8 (E4M3 forward,
E5M2 gradients) on the fly; the model keeps higher-precision weights — here a bf16 working copy, bf16
gradients and an fp32 master copy with the Adam moments — so FP8 saves activation memory and time, not
weight-state memory. The transient FP8 cast of one weight matrix is not counted. ZeRO over :math:`N`
workers (Rajbhandari et al. 2020, Fig. 1): stage 1 divides the optimizer state by :math:`N`, stage 2 also
the gradients, stage 3 also the weights — mixed Adam: :math:`16\Psi`, :math:`4\Psi + 12\Psi/N`,
:math:`2\Psi + 14\Psi/N`, :math:`16\Psi/N`.

Activations (Korthikanti et al. 2022, §4)
-----------------------------------------
One layer, :math:`t = sb` tokens in the micro-batch (sequence length :math:`s`, micro-batch :math:`b`);
:math:`e` bytes per stored activation (4 in fp32, 2 otherwise), :math:`m` bytes per stored GEMM input
(4 fp32, 2 fp16/bf16, 1 fp8: Transformer Engine saves the FP8 cast of a linear layer's input for its
backward GEMM; the attention core stays in bf16), :math:`d` = 1 byte per dropout-mask element in GPT-2
style (dropout on), 0 in Llama style (no dropout). What is stored for the backward pass:

::

    term (elements x bytes)                     GPT-2 style               Llama style
    norm 1 input (residual stream, r bytes)     t·h·r                     t·h·r
    QKV projection input (norm 1 output)        t·h·m (×3 autocast)       t·h·m (×3 autocast)
    Q and K, the inputs of QKᵀ                  t·h·e + t·h_kv·e          same
    V, an input of attention-over-V             t·h_kv·e                  t·h_kv·e
    softmax output                              a·s·t·e                   a·s·t·e
    softmax dropout mask                        a·s·t·d                   0
    dropout output (probabilities used)         a·s·t·e                   0 (the softmax output)
    output projection input                     t·h·m                     t·h·m
    attention dropout mask                      t·h·d                     0
    norm 2 input                                t·h·r                     t·h·r
    MLP input (norm 2 output)                   t·h·m                     t·h·m
    MLP hidden                                  GELU input t·f·e,         gate and up outputs
                                                FC2 input t·f·m           2·t·f·e, down input t·f·m
    MLP dropout mask                            t·h·d                     0

For GPT-2 style in 16-bit (:math:`e = m = 2`, :math:`d = 1`, :math:`h_{kv} = h`, :math:`f = 4h`) the
linear terms sum to :math:`34\,sbh` and the score terms to :math:`5\,as^2b`: the paper's
:math:`sbh\,(34 + 5as/h)`, plus one term the paper does not have: the causal mask, :math:`s^2` booleans
that the explicit attention builds in every layer (Megatron passes one mask to all layers). GQA (:math:`k < a`) shrinks the stored K and V from :math:`2\cdot 2sbh` to
:math:`2\cdot 2sbh\,k/a` bytes (Llama-3-8B: :math:`k/a = 1/4`, 1 sbh instead of 4) but not the scores, one
per *query* head; SwiGLU stores three :math:`sbf` tensors instead of two (Llama-3-8B: :math:`f = 3.5h` →
:math:`21\,sbh` in 16-bit where GPT's 4h MLP has 16); no dropout drops the three masks and the second copy
of the probabilities (:math:`2as^2b` instead of :math:`5as^2b`).

Held to a measurement (:mod:`trainsys.memtrain.measured_memory`: the storages autograd saves, counted once,
in :class:`trainsys.models.gpt.GPT` on CPU). What the measured model does, and the formula therefore counts:

- attention is explicit (:math:`QK^\top`, mask, softmax, dropout, :math:`\cdot V`), no fused kernel; the
  per-head views of Q, K, V are copied to contiguous tensors by ``matmul`` and those copies are saved;
- the norm inputs and the embedding's output are the *residual stream*, :math:`r` bytes: float32 under
  ``fp32`` and ``autocast_bf16`` (autocast runs LayerNorm on the float32 residual; the residual sum of a
  float32 and a bf16 tensor is float32), 16-bit in the Megatron-style precisions;
- under ``autocast_bf16`` Q, K and V are three ``nn.Linear`` s, each casting LN1's output: three bf16 copies
  (Llama style: gate and up cast the MLP input twice); softmax, GELU and dropout run in bf16; the
  cross-entropy's log-softmax is float32 (the :math:`4\,tV` term);
- dropout masks: a GPU's fused dropout keeps a 1-byte bool (``dropout_masks="bool"``, the page); PyTorch's
  CPU dropout multiplies by a noise tensor in the activation's dtype (``dropout_masks="dtype"``, used for the
  comparison): :math:`d = e` inside a layer, :math:`r` after the embedding;
- selective recomputation stores Q, K, V (the checkpoint's inputs) and rebuilds, during one layer's backward,
  the score terms, the mask and the contiguous Q, K, V copies (:math:`th\,e + 2\,th_{kv}\,e`).

Left out, each under 1 % of the activations for :math:`h \ge 32`: LayerNorm's saved mean and
:math:`1/\sigma` (8 bytes per token per norm), the int64 token ids, targets and positions. Where the
measurement differs: with one head and one sequence the per-head view is already contiguous and no copy is
made (selective overcounts by :math:`3\,th\,e`); ``ZeroRedundancyOptimizer`` gives whole tensors to ranks,
so its fullest rank holds more than :math:`1/N` of Adam's state (replayed exactly by
:func:`trainsys.memtrain.measured_memory.zero1_partition`). The measured errors are in the record
``memory-gpt`` (``make bench`` prints their maximum per category).

Recomputation, per layer, stored / transient during that layer's backward:

- ``"none"``: everything above; nothing rebuilt;
- ``"selective"``: the linear terms (:math:`34\,sbh` for GPT in 16-bit); the score terms of one layer (and
  its mask and Q, K, V copies) are rebuilt during its backward (FlashAttention stores the same: it never
  keeps the scores);
- ``"full"``: the layer's input only (:math:`2\,sbh` in 16-bit); during its backward one layer's
  everything-else is rebuilt (its ``"none"`` total minus its input).

Outside the layers (the terms the paper's §4.1 lists after the layer formula): the embedding-dropout mask
t·h·d, the final norm's input t·h·r, the output projection's input t·h·m and the fp32 logits of the cross
entropy 4·t·V; under ``autocast_bf16`` also the head weight's bf16 copy :math:`2\,Vh`. Activations :math:`= L\cdot\text{stored} + \text{outside} + \text{transient}`; activations are
per micro-batch, so gradient accumulation does not change them (it sets the global batch
:math:`b\cdot A\cdot N`), nor does ZeRO (data parallelism does not split a sequence).

The smallest change
-------------------
If the step does not fit, :func:`transformer_memory` searches four ladders, each rung one *step*:
ZeRO stage +1 (up to 3); recomputation none → selective → full; micro-batch down one divisor of the
current micro-batch (accumulation steps up, keeping the global batch); workers doubled (up to
:data:`MAX_WORKERS`; only where the resulting ZeRO stage is ≥ 1, since otherwise workers do not shard
anything; accumulation steps are divided to keep the global batch where that leaves an integer, else
the global batch grows). The *smallest change* is the fitting combination with the fewest steps; ties go
to the smallest per-worker total (the most headroom), then to the first in the order (ZeRO,
recomputation, micro-batch, workers) ascending.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

from trainsys._validation import describe, require_int, require_real

PRESETS: dict[str, dict] = {
    "gpt2-small": {"style": "gpt2", "num_layers": 12, "hidden_size": 768, "num_heads": 12, "num_kv_heads": 12,
                   "ffn_size": 3072, "vocab_size": 50257, "tied_embeddings": True, "max_positions": 1024},
    "llama-3-8b": {"style": "llama", "num_layers": 32, "hidden_size": 4096, "num_heads": 32, "num_kv_heads": 8,
                   "ffn_size": 14336, "vocab_size": 128256, "tied_embeddings": False, "max_positions": None},
    "llama-3-70b": {"style": "llama", "num_layers": 80, "hidden_size": 8192, "num_heads": 64, "num_kv_heads": 8,
                    "ffn_size": 28672, "vocab_size": 128256, "tied_embeddings": False, "max_positions": None},
}
#: Published sizes: GPT-2 small (Radford et al. 2019; 124M), Llama 3 (Grattafiori et al. 2024; 8.03B, 70.6B).
PUBLISHED_PARAMETERS = {"gpt2-small": 124e6, "llama-3-8b": 8.03e9, "llama-3-70b": 70.6e9}
MODELS = (*PRESETS, "custom")
STYLES = ("gpt2", "llama")
PRECISIONS = ("fp32", "mixed_fp16", "mixed_bf16", "fp8", "autocast_bf16")
RECOMPUTE = ("none", "selective", "full")
DEVICE_GB = (24, 40, 80, 141)
MAX_WORKERS = 65536
ARCH_KEYS = ("style", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size", "vocab_size",
             "tied_embeddings", "max_positions")
CONFIG_KEYS = ("model", "seq_len", "micro_batch_size", "grad_accum_steps", "num_workers", "precision", "recompute",
               "zero_stage", "device_gb")
# bytes per element: (weights, gradients, optimizer state, stored activation e, stored GEMM input m)
PRECISION_BYTES = {"fp32": (4, 4, 8, 4, 4), "mixed_fp16": (2, 2, 12, 2, 2), "mixed_bf16": (2, 2, 12, 2, 2),
                   "fp8": (2, 2, 12, 2, 1), "autocast_bf16": (4, 4, 8, 2, 2)}
# (residual stream r: norm inputs, embedding output; 16-bit copies of the norm output read by Q, K, V;
#  copies of the norm output read by the MLP (Llama: gate, up); bytes w of each GEMM weight's saved copy)
AUTOCAST_BYTES = {"fp32": (4, 1, 1, 0), "mixed_fp16": (2, 1, 1, 0), "mixed_bf16": (2, 1, 1, 0), "fp8": (2, 1, 1, 0),
                  "autocast_bf16": (4, 3, 2, 2)}
#: Bytes of a dropout-mask element: "bool" (CUDA's fused dropout, 1 byte) or "dtype" (CPU: the activation's).
DROPOUT_MASKS = ("bool", "dtype")
GB = 1e9


def _choice(name: str, value: object, options: tuple) -> object:
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def validate_architecture(arch: object, name: str = "config['architecture']") -> dict:
    """A custom architecture: a dict with exactly :data:`ARCH_KEYS`; returns a clean copy or raises."""
    if not isinstance(arch, Mapping):
        raise TypeError(f"{name} must be a dict with keys {list(ARCH_KEYS)}, got {describe(arch)}")
    missing = [k for k in ARCH_KEYS if k not in arch]
    extra = sorted(str(k) for k in arch if k not in ARCH_KEYS)
    if missing or extra:
        raise ValueError(f"{name} must have exactly the keys {list(ARCH_KEYS)}; missing {missing}, unexpected {extra} "
                         f"(got keys {sorted(str(k) for k in arch)})")
    style = _choice(f"{name}['style']", arch["style"], STYLES)
    L = require_int(f"{name}['num_layers']", arch["num_layers"], minimum=1, maximum=1024)
    h = require_int(f"{name}['hidden_size']", arch["hidden_size"], minimum=1, maximum=65536)
    a = require_int(f"{name}['num_heads']", arch["num_heads"], minimum=1, maximum=h)
    if h % a:
        raise ValueError(f"{name}['hidden_size'] must be divisible by {name}['num_heads'] (head size h/a), "
                         f"got hidden_size {h} and num_heads {a}")
    k = require_int(f"{name}['num_kv_heads']", arch["num_kv_heads"], minimum=1, maximum=a)
    if a % k:
        raise ValueError(f"{name}['num_heads'] must be divisible by {name}['num_kv_heads'] (query heads per "
                         f"key/value head in GQA), got num_heads {a} and num_kv_heads {k}")
    f = require_int(f"{name}['ffn_size']", arch["ffn_size"], minimum=1, maximum=262144)
    V = require_int(f"{name}['vocab_size']", arch["vocab_size"], minimum=1, maximum=1048576)
    tied = arch["tied_embeddings"]
    if not isinstance(tied, bool):
        raise TypeError(f"{name}['tied_embeddings'] must be a bool, got {describe(tied)}")
    P = arch["max_positions"]
    if style == "gpt2":
        P = require_int(f"{name}['max_positions']", P, minimum=1, maximum=1048576)
    elif P is not None:
        raise ValueError(f"{name}['max_positions'] must be None for style 'llama' (RoPE has no position "
                         f"parameters), got {P!r}")
    return {"style": style, "num_layers": L, "hidden_size": h, "num_heads": a, "num_kv_heads": k, "ffn_size": f,
            "vocab_size": V, "tied_embeddings": tied, "max_positions": P}


def validate_config(config: object) -> dict:
    """Check a :func:`transformer_memory` configuration; returns a clean copy (with ``architecture``)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict with keys {list(CONFIG_KEYS)} (+ 'architecture' for a custom "
                        f"model), got {describe(config)}")
    missing = [k for k in CONFIG_KEYS if k not in config]
    extra = sorted(str(k) for k in config if k not in (*CONFIG_KEYS, "architecture"))
    if missing or extra:
        raise ValueError(f"config must have exactly the keys {list(CONFIG_KEYS)} (+ 'architecture' for a custom "
                         f"model); missing {missing}, unexpected {extra} (got keys {sorted(str(k) for k in config)})")
    model = _choice("config['model']", config["model"], MODELS)
    if model == "custom":
        if "architecture" not in config:
            raise ValueError("config['architecture'] is required when config['model'] is 'custom', got no such key")
        arch = validate_architecture(config["architecture"])
    else:
        if config.get("architecture") is not None:
            raise ValueError(f"config['architecture'] must be absent or None for the preset {model!r} "
                             f"(use model 'custom'), got {describe(config['architecture'])}")
        arch = dict(PRESETS[model])
    s = require_int("config['seq_len']", config["seq_len"], minimum=1, maximum=131072)
    if arch["style"] == "gpt2" and s > arch["max_positions"]:
        raise ValueError(f"config['seq_len'] must be <= max_positions ({arch['max_positions']}: GPT-2 style "
                         f"learns one embedding per position), got {s}")
    b = require_int("config['micro_batch_size']", config["micro_batch_size"], minimum=1, maximum=1024)
    A = require_int("config['grad_accum_steps']", config["grad_accum_steps"], minimum=1, maximum=65536)
    N = require_int("config['num_workers']", config["num_workers"], minimum=1, maximum=MAX_WORKERS)
    precision = _choice("config['precision']", config["precision"], PRECISIONS)
    recompute = _choice("config['recompute']", config["recompute"], RECOMPUTE)
    stage = require_int("config['zero_stage']", config["zero_stage"], minimum=0, maximum=3)
    device = require_real("config['device_gb']", config["device_gb"], strictly_positive=True)
    if isinstance(config["device_gb"], numbers.Integral):
        device = int(config["device_gb"])
    return {"model": model, "architecture": arch, "seq_len": s, "micro_batch_size": b, "grad_accum_steps": A,
            "num_workers": N, "precision": precision, "recompute": recompute, "zero_stage": stage,
            "device_gb": device}


def transformer_parameter_count(arch: Mapping) -> int:
    """:math:`\\Psi` of an architecture (the formula in the module docstring); ``arch`` as in :data:`PRESETS`."""
    a_ = validate_architecture(arch, "arch")
    L, h, a, k, f, V = (a_[x] for x in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size",
                                        "vocab_size"))
    hkv = k * (h // a)
    gpt = a_["style"] == "gpt2"
    attention = 2 * h * h + 2 * h * hkv + ((2 * h + 2 * hkv) if gpt else 0)
    mlp = (2 * h * f + f + h) if gpt else 3 * h * f
    norms = 4 * h if gpt else 2 * h
    layer = attention + mlp + norms
    embeddings = V * h * (1 if a_["tied_embeddings"] else 2)
    positions = a_["max_positions"] * h if gpt else 0
    final_norm = 2 * h if gpt else h
    return L * layer + embeddings + positions + final_norm


def state_bytes(num_params: int, precision: str, num_workers: int, zero_stage: int) -> dict[str, float]:
    """Per-worker bytes of weights, gradients and Adam state (table in the module docstring), by ZeRO stage."""
    psi = require_int("num_params", num_params, minimum=1)
    _choice("precision", precision, PRECISIONS)
    N = require_int("num_workers", num_workers, minimum=1)
    stage = require_int("zero_stage", zero_stage, minimum=0, maximum=3)
    return _state_bytes(psi, precision, N, stage)


def _state_bytes(psi: int, precision: str, N: int, stage: int) -> dict[str, float]:
    pb, gb, ob = PRECISION_BYTES[precision][:3]
    x = float(psi)
    return {"parameters": pb * x / (N if stage >= 3 else 1),
            "gradients": gb * x / (N if stage >= 2 else 1),
            "optimizer_states": ob * x / (N if stage >= 1 else 1)}


def activation_bytes(arch: Mapping, seq_len: int, micro_batch_size: int, precision: str,
                     recompute: str, dropout_masks: str = "bool") -> dict[str, float]:
    """Activation bytes of one micro-batch's pass (the accounting in the module docstring).

    Returns ``per_layer_none`` (everything a layer would store), ``per_layer`` (what it stores under
    ``recompute``), ``layers`` (:math:`L\\cdot` ``per_layer``), ``outside`` (embedding mask, final norm,
    output projection, fp32 logits), ``recompute_peak`` (one layer's rebuilt tensors) and ``total``.
    ``dropout_masks``: ``"bool"`` (a GPU's fused dropout) or ``"dtype"`` (CPU; see the module docstring).
    """
    a_ = validate_architecture(arch, "arch")
    s = require_int("seq_len", seq_len, minimum=1)
    b = require_int("micro_batch_size", micro_batch_size, minimum=1)
    _choice("precision", precision, PRECISIONS)
    _choice("recompute", recompute, RECOMPUTE)
    _choice("dropout_masks", dropout_masks, DROPOUT_MASKS)
    return _activation_bytes(a_, s, b, precision, recompute, dropout_masks)


def _activation_bytes(arch: Mapping, seq_len: int, micro_batch_size: int, precision: str,
                      recompute: str, dropout_masks: str = "bool") -> dict[str, float]:
    # Every quantity is a float and every sum runs left to right: the JavaScript twin does the same
    # operations in the same order, so both give the same doubles.
    gpt = arch["style"] == "gpt2"
    L = float(arch["num_layers"])
    h = float(arch["hidden_size"])
    a = float(arch["num_heads"])
    hkv = float(arch["num_kv_heads"] * (arch["hidden_size"] // arch["num_heads"]))
    f = float(arch["ffn_size"])
    V = float(arch["vocab_size"])
    s = float(seq_len)
    t = s * micro_batch_size
    e = float(PRECISION_BYTES[precision][3])
    m = float(PRECISION_BYTES[precision][4])
    r, qkv_reads, mlp_reads, w = (float(x) for x in AUTOCAST_BYTES[precision])
    drop = 1.0 if gpt else 0.0
    d = 1.0 if dropout_masks == "bool" else e  # a mask inside a layer: the attention/MLP output's dtype
    d_embed = 1.0 if dropout_masks == "bool" else r  # the embedding dropout's mask: the residual's dtype
    ln1 = t * h * r
    mlp_in = t * h * m * (1.0 if gpt else mlp_reads)
    mlp_hidden = (t * f * e + t * f * m) if gpt else (t * f * e + t * f * e + t * f * m)
    linear = (ln1 + t * h * m * qkv_reads + t * h * e + t * hkv * e + t * hkv * e + t * h * m + t * h * d * drop
              + t * h * r + mlp_in + mlp_hidden + t * h * d * drop)
    layer_weights = h * h * 2.0 + h * hkv * 2.0 + h * f * (2.0 if gpt else 3.0)
    copies = layer_weights * w
    scores = a * s * t
    score_terms = scores * e + scores * d * drop + scores * e * drop + s * s
    none = linear + score_terms + copies
    if recompute == "none":
        per_layer, transient = none, 0.0
    elif recompute == "selective":
        per_layer, transient = linear + copies, score_terms + (t * h * e + t * hkv * e * 2.0)
    else:
        per_layer, transient = ln1, none - ln1
    layers = L * per_layer
    outside = t * h * d_embed * drop + t * h * r + t * h * m + t * V * 4.0 + V * h * w
    return {"per_layer_none": none, "per_layer": per_layer, "layers": layers, "outside": outside,
            "recompute_peak": transient, "total": layers + outside + transient}


def _divisors_descending(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def _search(c: dict, psi: int, budget: float) -> dict | None:
    """The smallest fitting change (definition in the module docstring), or None if none fits."""
    arch = c["architecture"]
    stages = list(range(c["zero_stage"], 4))
    recs = list(RECOMPUTE[RECOMPUTE.index(c["recompute"]):])
    mbs = _divisors_descending(c["micro_batch_size"])
    workers = []
    n = c["num_workers"]
    while n <= MAX_WORKERS:
        workers.append(n)
        n *= 2
    states = [[_state_bytes(psi, c["precision"], w, z) for w in workers] for z in stages]
    acts = [[_activation_bytes(arch, c["seq_len"], mb, c["precision"], r)["total"] for mb in mbs] for r in recs]
    best = None
    for i, z in enumerate(stages):
        for j in range(len(recs)):
            for k in range(len(mbs)):
                for w in range(len(workers)):
                    if w > 0 and z == 0:
                        break
                    steps = i + j + k + w
                    if steps == 0 or (best is not None and steps > best[0]):
                        continue
                    st = states[i][w]
                    total = st["parameters"] + st["gradients"] + st["optimizer_states"] + acts[j][k]
                    if total <= budget and (best is None or steps < best[0] or total < best[1]):
                        best = (steps, total, i, j, k, w)
    if best is None:
        return None
    steps, total, i, j, k, w = best
    b, A, N = c["micro_batch_size"], c["grad_accum_steps"], c["num_workers"]
    nb, nN = mbs[k], workers[w]
    G = b * A * N
    nA = G // (nb * nN) if G % (nb * nN) == 0 else A * (b // nb)
    new = {"zero_stage": stages[i], "recompute": recs[j], "micro_batch_size": nb, "grad_accum_steps": nA,
           "num_workers": nN}
    changes = [[key, c[key], value] for key, value in new.items() if value != c[key]]
    config = {"model": c["model"]}
    if c["model"] == "custom":
        config["architecture"] = dict(arch)
    config.update({key: new.get(key, c[key]) for key in CONFIG_KEYS if key != "model"})
    return {"steps": steps, "changes": changes, "config": config, "total": total,
            "global_batch": nb * nA * nN}


def transformer_memory(config: Mapping, dropout_masks: str = "bool") -> dict:
    """Per-worker bytes of one training step of a transformer, and whether it fits the device.

    ``config``: ``model`` (``"gpt2-small"``, ``"llama-3-8b"``, ``"llama-3-70b"`` or ``"custom"`` with an
    ``architecture`` dict of :data:`ARCH_KEYS`), ``seq_len``, ``micro_batch_size``, ``grad_accum_steps``,
    ``num_workers``, ``precision`` (:data:`PRECISIONS`), ``recompute`` (:data:`RECOMPUTE`), ``zero_stage``
    (0–3), ``device_gb``. Returns ``num_parameters``, ``parameters``, ``gradients``, ``optimizer_states``,
    ``activations``, ``total`` (bytes per worker), the activation terms ``activations_per_layer``,
    ``activations_layers``, ``activations_outside_layers``, ``activations_recompute_peak``,
    ``global_batch`` (sequences per optimizer step, :math:`bAN`), ``tokens_per_step``, ``budget_bytes``,
    ``fits``, ``suggestion_status`` (``"not needed"``, ``"found"``, ``"none fits"``) and ``suggestion``
    (None, or ``{"steps", "changes": [[key, old, new], ...], "config", "total", "global_batch"}``).
    ``dropout_masks="dtype"`` counts dropout masks in the activation's dtype, as PyTorch stores them on CPU
    (what :mod:`trainsys.memtrain.measured_memory` measures); the default ``"bool"`` is a GPU's 1 byte.
    Invalid input raises ``TypeError``/``ValueError`` naming the argument, the expected and the given.
    """
    c = validate_config(config)
    _choice("dropout_masks", dropout_masks, DROPOUT_MASKS)
    psi = transformer_parameter_count(c["architecture"])
    st = _state_bytes(psi, c["precision"], c["num_workers"], c["zero_stage"])
    act = _activation_bytes(c["architecture"], c["seq_len"], c["micro_batch_size"], c["precision"], c["recompute"],
                            dropout_masks)
    total = st["parameters"] + st["gradients"] + st["optimizer_states"] + act["total"]
    budget = c["device_gb"] * GB
    fits = total <= budget
    suggestion = None if fits else _search(c, psi, budget)
    status = "not needed" if fits else ("found" if suggestion is not None else "none fits")
    global_batch = c["micro_batch_size"] * c["grad_accum_steps"] * c["num_workers"]
    return {"num_parameters": psi, **st, "activations": act["total"], "total": total,
            "activations_per_layer": act["per_layer"], "activations_layers": act["layers"],
            "activations_outside_layers": act["outside"], "activations_recompute_peak": act["recompute_peak"],
            "global_batch": global_batch, "tokens_per_step": global_batch * c["seq_len"], "budget_bytes": budget,
            "fits": fits, "suggestion_status": status, "suggestion": suggestion}
