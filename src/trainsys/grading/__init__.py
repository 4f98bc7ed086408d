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
from trainsys.grading.data_parallel import (
    check_all_reduce_mean,
    check_bucket_gradients,
    check_compute_local_gradients,
    check_data_parallel_train_step,
    check_ring_all_reduce_mean,
    check_shard_dataset_across_workers,
)
from trainsys.grading.diloco_loop import (
    check_classification_accuracy,
    check_communication_savings,
    check_diloco_round,
    check_evaluate_heldout_loss,
    check_iid_shard_dataset,
    check_local_train_step,
    check_noniid_shard_dataset,
    check_run_inner_steps,
    check_sample_worker_batch,
    check_train_diloco,
    check_train_synchronous_baseline,
)
from trainsys.grading.diloco_model import (
    check_cross_entropy_loss,
    check_init_model_params,
    check_model_backward,
    check_model_forward,
    check_relu,
    check_softmax,
)
from trainsys.grading.diloco_optim import (
    check_adamw_param_step,
    check_average_params,
    check_bias_correct_moments,
    check_clone_params,
    check_compute_outer_gradient,
    check_decoupled_weight_decay,
    check_init_adamw_state,
    check_init_outer_optimizer,
    check_nesterov_outer_step,
    check_scale_params,
    check_subtract_params,
    check_update_moments,
    check_update_outer_momentum,
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
from trainsys.grading.trainer import check_train
from trainsys.grading.zero import (
    check_all_gather_param_shards,
    check_init_adam_state,
    check_local_shard_adam_update,
    check_partition_optimizer_state,
    check_zero_optimizer_step,
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

# Module 3's checks import torch; they are loaded on first use so that a NumPy lesson's hidden test
# does not pay for importing torch.
_LAZY = {
    "trainsys.grading.fedavg_client": (
        "check_compute_batch_loss", "check_local_sgd_step", "check_make_client_batches",
        "check_train_client_locally"),
    "trainsys.grading.fedavg_data": (
        "check_build_mlp_classifier", "check_build_synthetic_dataset", "check_count_client_samples",
        "check_partition_data_iid", "check_partition_data_non_iid", "check_train_test_split_dataset"),
    "trainsys.grading.fedavg_experiments": (
        "check_accuracy_vs_client_fraction", "check_compute_non_iid_gap",
        "check_rounds_to_target_vs_local_epochs", "check_run_fedavg_iid", "check_run_fedavg_non_iid",
        "check_train_centralized_baseline"),
    "trainsys.grading.fedavg_server": (
        "check_evaluate_accuracy", "check_run_communication_round", "check_run_fedavg", "check_select_clients"),
    "trainsys.grading.fedavg_state": (
        "check_add_state_dicts", "check_aggregate_weighted_average", "check_clone_model_state",
        "check_load_model_state", "check_scale_state_dict", "check_zeros_like_state"),
}
_LAZY_NAMES = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str):
    if name in _LAZY_NAMES:
        import importlib

        value = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainsys.grading' has no attribute {name!r}")


__all__ = [
    "CheckFailure",
    "check_accumulate_gradients",
    "check_accuracy_vs_client_fraction",
    "check_adamw_param_step",
    "check_add_state_dicts",
    "check_aggregate_weighted_average",
    "check_all_gather_param_shards",
    "check_all_reduce_mean",
    "check_average_params",
    "check_bias_correct_moments",
    "check_bucket_gradients",
    "check_build_mlp_classifier",
    "check_build_synthetic_dataset",
    "check_cast_to_half_precision",
    "check_classification_accuracy",
    "check_clone_model_state",
    "check_clone_params",
    "check_communication_savings",
    "check_compare_memory",
    "check_compute_batch_loss",
    "check_compute_local_gradients",
    "check_compute_non_iid_gap",
    "check_compute_optimizer_memory_bytes",
    "check_compute_outer_gradient",
    "check_compute_param_memory_bytes",
    "check_compute_peak_activation_memory_bytes",
    "check_count_client_samples",
    "check_cross_entropy_loss",
    "check_data_parallel_train_step",
    "check_decoupled_weight_decay",
    "check_diloco_round",
    "check_estimate_checkpointing_memory_savings",
    "check_evaluate_accuracy",
    "check_evaluate_heldout_loss",
    "check_first_linear_backward",
    "check_grad_accumulation_step",
    "check_has_non_finite_gradients",
    "check_iid_shard_dataset",
    "check_init_adam_state",
    "check_init_adamw_state",
    "check_init_mlp_params",
    "check_init_model_params",
    "check_init_outer_optimizer",
    "check_linear_backward",
    "check_linear_forward",
    "check_load_model_state",
    "check_local_sgd_step",
    "check_local_shard_adam_update",
    "check_local_train_step",
    "check_make_client_batches",
    "check_make_master_params",
    "check_make_synthetic_regression_batch",
    "check_mixed_precision_step",
    "check_mlp_backward",
    "check_mlp_backward_checkpointed",
    "check_mlp_forward",
    "check_mlp_forward_checkpointed",
    "check_model_backward",
    "check_model_forward",
    "check_mse_loss_and_grad",
    "check_nesterov_outer_step",
    "check_noniid_shard_dataset",
    "check_partition_data_iid",
    "check_partition_data_non_iid",
    "check_partition_optimizer_state",
    "check_recompute_block_activations",
    "check_relu",
    "check_relu_backward",
    "check_relu_forward",
    "check_ring_all_reduce_mean",
    "check_rounds_to_target_vs_local_epochs",
    "check_run_communication_round",
    "check_run_fedavg",
    "check_run_fedavg_iid",
    "check_run_fedavg_non_iid",
    "check_run_inner_steps",
    "check_sample_worker_batch",
    "check_scale_accumulated_gradients",
    "check_scale_loss",
    "check_scale_params",
    "check_scale_state_dict",
    "check_select_clients",
    "check_shard_dataset_across_workers",
    "check_softmax",
    "check_split_into_micro_batches",
    "check_subtract_params",
    "check_train",
    "check_train_centralized_baseline",
    "check_train_client_locally",
    "check_train_diloco",
    "check_train_synchronous_baseline",
    "check_train_test_split_dataset",
    "check_unscale_gradients",
    "check_update_moments",
    "check_update_outer_momentum",
    "check_zero_optimizer_step",
    "check_zeros_like_state",
]
