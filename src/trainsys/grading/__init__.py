"""Checks behind nbgrader's hidden tests: ``check_<function>(fn)`` for every graded function.

A hidden-test cell calls, e.g., ``trainsys.grading.check_linear_forward(linear_forward)``; the check
returns a one-line summary when every case passes and raises ``AssertionError`` naming the failing
case otherwise.
"""

from trainsys.grading._harness import CheckFailure
from trainsys.grading.accumulation import (
    check_accumulate_gradients,
    check_grad_accumulation_step,
    check_scale_accumulated_gradients,
    check_split_into_micro_batches,
)
from trainsys.grading.checkpointing import (
    check_estimate_checkpointing_memory_savings,
    check_mlp_backward_checkpointed,
    check_mlp_forward_checkpointed,
    check_recompute_block_activations,
)
from trainsys.grading.memory import (
    check_compare_memory,
    check_compute_optimizer_memory_bytes,
    check_compute_param_memory_bytes,
    check_compute_peak_activation_memory_bytes,
)
from trainsys.grading.mixed_precision import (
    check_cast_to_half_precision,
    check_has_non_finite_gradients,
    check_make_master_params,
    check_mixed_precision_step,
    check_scale_loss,
    check_unscale_gradients,
)
from trainsys.grading.mlp import (
    check_first_linear_backward,
    check_init_mlp_params,
    check_linear_backward,
    check_linear_forward,
    check_make_synthetic_regression_batch,
    check_mlp_backward,
    check_mlp_forward,
    check_mse_loss_and_grad,
    check_relu_backward,
    check_relu_forward,
)

__all__ = [
    "CheckFailure",
    "check_accumulate_gradients",
    "check_cast_to_half_precision",
    "check_compare_memory",
    "check_compute_optimizer_memory_bytes",
    "check_compute_param_memory_bytes",
    "check_compute_peak_activation_memory_bytes",
    "check_has_non_finite_gradients",
    "check_make_master_params",
    "check_mixed_precision_step",
    "check_scale_loss",
    "check_unscale_gradients",
    "check_estimate_checkpointing_memory_savings",
    "check_mlp_backward_checkpointed",
    "check_mlp_forward_checkpointed",
    "check_recompute_block_activations",
    "check_grad_accumulation_step",
    "check_scale_accumulated_gradients",
    "check_split_into_micro_batches",
    "check_first_linear_backward",
    "check_init_mlp_params",
    "check_linear_backward",
    "check_linear_forward",
    "check_make_synthetic_regression_batch",
    "check_mlp_backward",
    "check_mlp_forward",
    "check_mse_loss_and_grad",
    "check_relu_backward",
    "check_relu_forward",
]
