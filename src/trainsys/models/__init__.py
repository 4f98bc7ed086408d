"""Models shared by the modules: the small character-level GPT (:mod:`trainsys.models.gpt`)."""

from trainsys.models.gpt import GPT, GPTConfig, causal_attention, parameter_count, small_config

__all__ = ["GPT", "GPTConfig", "causal_attention", "parameter_count", "small_config"]
