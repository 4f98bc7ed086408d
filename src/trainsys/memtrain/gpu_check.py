"""``make gpu-check``: the transformer explorer against ``torch.cuda.max_memory_allocated`` on a GPU.

For GPT-2 small (12 layers, width 768, 12 heads, context 1024, vocabulary 50,257, dropout 0.1, tied head)
built as :class:`trainsys.models.gpt.GPT`, at a few settings (micro-batch, precision, recomputation), it
runs one warm-up Adam step, resets the allocator's peak, runs a second step and prints the peak next to the
explorer's total per worker (``transformer_memory`` with a GPU's 1-byte dropout masks) and their relative
difference. What the explorer does not count shows up here: the CUDA allocator's rounding and caching,
cuBLAS workspaces, and under ``torch.autocast`` on CUDA the float32 softmax and LayerNorm outputs (CUDA's
autocast runs them in float32; the explorer's ``autocast_bf16`` is CPU autocast, measured in
:mod:`trainsys.memtrain.measured_memory`). Without a GPU it prints ``no GPU`` and exits 0.
"""

from __future__ import annotations

import sys

import torch

from trainsys.memtrain.measured_memory import explorer_config, recomputation, training_step
from trainsys.memtrain.transformer_memory import transformer_memory
from trainsys.models.gpt import GPTConfig

GPT2_SMALL = GPTConfig(vocab_size=50257, context=1024, n_layer=12, n_head=12, n_embd=768, dropout=0.1)
SETTINGS = [(1, "fp32", "none"), (4, "fp32", "selective"), (4, "fp32", "full"), (4, "autocast_bf16", "none"),
            (8, "autocast_bf16", "full")]
"""(micro-batch, precision, recomputation) checked."""


def peak_bytes(config: GPTConfig, batch_size: int, precision: str, recompute: str) -> int:
    """``torch.cuda.max_memory_allocated`` over the second of two Adam steps of ``GPT(config)`` on CUDA."""
    model, step = training_step(config, batch_size, precision, 0, "cuda")
    with recomputation(model, recompute):
        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del model, step
    torch.cuda.empty_cache()
    return peak


def main() -> int:
    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False; make gpu-check compares "
              "torch.cuda.max_memory_allocated with the transformer explorer on a machine with one")
        return 0
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("GPT-2 small, one steady-state Adam step; explorer = transformer_memory (1-byte dropout masks)")
    for batch, precision, recompute in SETTINGS:
        peak = peak_bytes(GPT2_SMALL, batch, precision, recompute)
        total = transformer_memory(explorer_config(GPT2_SMALL, batch, precision, recompute))["total"]
        print(f"  b = {batch}, {precision:13s} {recompute:9s}: max_memory_allocated {peak / 1e9:7.3f} GB, "
              f"explorer {total / 1e9:7.3f} GB ({(total - peak) / peak:+.1%})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
