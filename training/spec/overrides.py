"""TrainingSpec -> verl 0.9.1 Hydra overrides (the `main_ppo` command line).

Only the new-style keys are emitted (`reward.custom_reward_function.*`,
`reward.reward_manager.name`): verl 0.9 still composes the legacy top-level
`custom_reward_function.*` and `reward_model.reward_manager` but silently ignores them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.spec.model import TrainingSpec

VERL_VERSION = "0.9.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
REWARD_ENTRY = REPO_ROOT / "training" / "rewards" / "verl_entry.py"
CHECKPOINT_CALLBACK = "training.checkpoints.callback.CheckpointUploader"

#: Keys that verl 0.9 composes without error and then ignores: a spec that sets them
#: (through `verl_overrides`) is refused at plan time, naming the key.
IGNORED_LEGACY_PREFIXES = ("custom_reward_function.", "reward_model.reward_manager")


_BARE = re.compile(r"^[A-Za-z_/.][A-Za-z0-9_./-]*$")
_LOOKS_TYPED = re.compile(r"^(true|false|null|none|inf|nan|[-+.0-9eE]+)$", re.IGNORECASE)


def hydra_value(value: Any) -> str:
    """Render a Python value in Hydra's override grammar (quoted strings, {k: v}, [a, b])."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if _BARE.match(value) and not _LOOKS_TYPED.match(value):
            return value
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"'{escaped}'"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(hydra_value(v) for v in value) + "]"
    raise TypeError(f"cannot render {type(value).__name__} as a Hydra value")


def _strategy(spec: TrainingSpec) -> str:
    return "megatron" if spec.parallel.strategy == "megatron" else spec.parallel.strategy


ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"


def _data_and_model(spec: TrainingSpec) -> dict[str, Any]:
    """The dataset's files and lengths, and the model to start from."""
    return {
        # data
        "data.train_files": spec.data.train_files,
        "data.val_files": spec.data.test_files,
        "data.train_batch_size": spec.data.train_batch_size,
        "data.max_prompt_length": spec.data.max_prompt_length,
        "data.max_response_length": spec.data.max_response_length,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.return_raw_chat": True,
        "+data.apply_chat_template_kwargs.enable_thinking": spec.model.enable_thinking,
        # model
        "actor_rollout_ref.model.path": spec.model.path,
        "actor_rollout_ref.model.enable_gradient_checkpointing": spec.model.gradient_checkpointing,
        # padding removal packs sequences, which only flash-attn's varlen kernels keep apart
        "actor_rollout_ref.model.use_remove_padding": (
            spec.model.attn_implementation == "flash_attention_2"
        ),
    }


def _algorithm_and_optimiser(spec: TrainingSpec) -> dict[str, Any]:
    """The RL algorithm's loss, the optimiser and the batch sizes."""
    a, b = spec.algorithm, spec.batch
    return {
        # algorithm
        "algorithm.adv_estimator": a.adv_estimator,
        "algorithm.use_kl_in_reward": False,
        f"{ACTOR}.policy_loss.loss_mode": a.loss,
        f"{ACTOR}.clip_ratio_low": a.clip_ratio_low,
        f"{ACTOR}.clip_ratio_high": a.clip_ratio_high,
        f"{ACTOR}.use_kl_loss": a.use_kl_loss,
        f"{ACTOR}.kl_loss_coef": a.kl_loss_coef,
        f"{ACTOR}.kl_loss_type": a.kl_loss_type,
        f"{ACTOR}.entropy_coeff": a.entropy_coeff,
        f"{ACTOR}.loss_agg_mode": a.loss_agg_mode,
        # optimisation and batches
        f"{ACTOR}.optim.lr": spec.optim.lr,
        f"{ACTOR}.optim.lr_warmup_steps": spec.optim.warmup_steps or -1,
        f"{ACTOR}.optim.weight_decay": spec.optim.weight_decay,
        f"{ACTOR}.optim.clip_grad": spec.optim.grad_clip,
        f"{ACTOR}.ppo_mini_batch_size": b.ppo_mini_batch_size,
        f"{ACTOR}.ppo_micro_batch_size_per_gpu": b.micro_batch_size_per_gpu,
        f"{ACTOR}.use_dynamic_bsz": b.use_dynamic_bsz,
        f"{ACTOR}.ppo_max_token_len_per_gpu": b.max_token_len_per_gpu,
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": b.micro_batch_size_per_gpu,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": b.micro_batch_size_per_gpu,
    }


def _parallelism(spec: TrainingSpec) -> dict[str, Any]:
    """How the actor is sharded and over how many GPUs."""
    p = spec.parallel
    return {
        # parallelism
        f"{ACTOR}.strategy": _strategy(spec),
        f"{ACTOR}.ulysses_sequence_parallel_size": p.ulysses_sequence_parallel_size,
        "trainer.n_gpus_per_node": p.n_gpus_per_node,
        "trainer.nnodes": p.nnodes,
    }


def _rollout(spec: TrainingSpec, tool_config_path: str) -> dict[str, Any]:
    """The rollout engine and verl's multi-turn tool agent loop."""
    r = spec.rollout
    return {
        # rollout: async vLLM/SGLang server, multi-turn tool agent loop
        f"{ROLLOUT}.name": r.engine,
        f"{ROLLOUT}.mode": "async",
        f"{ROLLOUT}.n": r.n,
        f"{ROLLOUT}.temperature": r.temperature,
        f"{ROLLOUT}.top_p": r.top_p,
        f"{ROLLOUT}.tensor_model_parallel_size": r.tensor_parallel,
        f"{ROLLOUT}.gpu_memory_utilization": r.gpu_memory_utilization,
        f"{ROLLOUT}.agent.default_agent_loop": "tool_agent",
        f"{ROLLOUT}.multi_turn.enable": True,
        f"{ROLLOUT}.multi_turn.format": spec.model.call_format,
        f"{ROLLOUT}.multi_turn.max_assistant_turns": r.max_turns,
        f"{ROLLOUT}.multi_turn.max_parallel_calls": r.max_parallel_calls,
        f"{ROLLOUT}.multi_turn.max_tool_response_length": r.tool_response_truncate,
        f"{ROLLOUT}.multi_turn.tool_config_path": tool_config_path,
    }


def _reward(spec: TrainingSpec) -> dict[str, Any]:
    """The project's rule reward, with the spec's reward settings."""
    return {
        # reward: the project's rule reward, loaded by path through verl's loader
        "reward.reward_manager.name": "naive",
        "reward.custom_reward_function.path": str(REWARD_ENTRY),
        "reward.custom_reward_function.name": "compute_score",
        "+reward.custom_reward_function.reward_kwargs": {
            "call_format": spec.model.call_format,
            "reward_config": spec.reward.model_dump(mode="json"),
        },
    }


def _trainer(spec: TrainingSpec) -> dict[str, Any]:
    """The schedule, checkpoints and tracking."""
    return {
        # trainer: schedule, checkpoints, tracking
        "trainer.total_epochs": spec.schedule.total_epochs,
        "trainer.save_freq": spec.checkpoint.save_freq,
        "trainer.test_freq": spec.checkpoint.test_freq,
        "trainer.max_actor_ckpt_to_keep": spec.checkpoint.keep,
        "trainer.default_local_dir": spec.checkpoint.run_dir,
        "trainer.resume_mode": "auto",
        "trainer.project_name": spec.tracking.project,
        "trainer.experiment_name": spec.tracking.experiment,
        "trainer.logger": list(spec.tracking.loggers),
        "trainer.val_before_train": False,
    }


def _by_configuration(spec: TrainingSpec) -> dict[str, Any]:
    """The keys that depend on the configuration: the strategy's own, the attention kernel
    when not flash-attn, a step limit, and the checkpoint callback."""
    p = spec.parallel
    values: dict[str, Any] = {}
    if spec.parallel.strategy != "megatron":
        values[f"{ACTOR}.fsdp_config.param_offload"] = p.param_offload
        values[f"{ACTOR}.fsdp_config.optimizer_offload"] = p.optimizer_offload
        values[f"{ACTOR}.fsdp_config.model_dtype"] = "bf16"
    else:
        values[f"{ACTOR}.megatron.tensor_model_parallel_size"] = p.megatron_tensor_parallel
        values[f"{ACTOR}.megatron.pipeline_model_parallel_size"] = p.megatron_pipeline_parallel
        values[f"{ACTOR}.megatron.expert_model_parallel_size"] = p.megatron_expert_parallel
    if spec.model.attn_implementation != "flash_attention_2":
        values["+actor_rollout_ref.model.override_config.attn_implementation"] = (
            spec.model.attn_implementation
        )
    if spec.schedule.total_training_steps is not None:
        values["trainer.total_training_steps"] = spec.schedule.total_training_steps
    # Always: the callback writes the completion marker that resume and the final-step check
    # trust; it mirrors to S3 only when the job's environment names a bucket.
    values["trainer.checkpoint_callback_class"] = CHECKPOINT_CALLBACK
    return values


def build_overrides(spec: TrainingSpec, tool_config_path: str) -> list[str]:
    """The ordered list of `key=value` overrides for verl's `ppo_trainer` config."""
    values: dict[str, Any] = {
        **_data_and_model(spec),
        **_algorithm_and_optimiser(spec),
        **_parallelism(spec),
        **_rollout(spec, tool_config_path),
        **_reward(spec),
        **_trainer(spec),
        **_by_configuration(spec),
    }
    overrides = [f"{key}={hydra_value(value)}" for key, value in values.items()]
    return overrides + list(spec.verl_overrides)


def override_keys(overrides: list[str]) -> list[str]:
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides]
