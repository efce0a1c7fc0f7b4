"""TrainingSpec -> TRL GRPOConfig: every knob the CPU backend honours lands where TRL reads
it, and TRL's own config validation accepts the result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from training.cpu_backend.grpo import LOSS_TYPES, grpo_arguments, rollout_settings
from training.cpu_backend.sft import sft_arguments
from training.spec.model import TrainingSpec, load_spec
from training.spec.resolve import resolve_model, resolve_paths

SPEC_FILE = Path(__file__).resolve().parents[2] / "training" / "specs" / "cpu_tiny.yaml"


def make_spec(**sections: Any) -> TrainingSpec:
    base: dict[str, Any] = {
        "name": "t",
        "model": {"path": "tiny://hermes", "call_format": "hermes"},
        "data": {"train_files": ["a"], "test_files": ["b"], "train_batch_size": 4},
        "batch": {"ppo_mini_batch_size": 4},
    }
    base.update(sections)
    return TrainingSpec.model_validate(base)


def test_demo_spec_maps_onto_a_valid_trl_config(tmp_path: Path) -> None:
    from trl.trainer.grpo_config import GRPOConfig

    spec = load_spec(SPEC_FILE)
    args = grpo_arguments(spec, tmp_path)
    config = GRPOConfig(**args)  # TRL validates batch/generation divisibility itself
    assert config.num_generations == spec.rollout.n == 4
    assert config.per_device_train_batch_size == spec.cpu.prompts_per_step * spec.rollout.n
    assert config.generation_batch_size == config.per_device_train_batch_size  # on-policy
    assert config.importance_sampling_level == "sequence"  # gspo
    assert config.beta == pytest.approx(spec.algorithm.kl_loss_coef)
    assert config.epsilon == pytest.approx(3e-4)
    assert config.epsilon_high == pytest.approx(4e-4)
    rollouts = rollout_settings(spec)  # the episodes TRL's rollout_func runs
    assert rollouts.max_turns == spec.rollout.max_turns
    assert rollouts.temperature == spec.rollout.temperature
    assert rollouts.completion_budget == spec.cpu.max_completion_length
    assert rollouts.max_rows == config.generation_batch_size  # one batch decodes at once
    assert config.max_steps == spec.cpu.grpo_steps
    assert config.save_steps == spec.checkpoint.save_freq
    assert config.loss_type == "grpo"
    assert config.chat_template_kwargs == {"enable_thinking": False}
    assert config.use_cpu is True and config.bf16 is False


def test_micro_batches_split_the_update_not_the_generation(tmp_path: Path) -> None:
    """`cpu.grpo_micro_batches`: one generation of prompts x n rollouts per optimizer step,
    its update in that many backward passes (TRL's accumulation), on-policy throughout."""
    from trl.trainer.grpo_config import GRPOConfig

    spec = make_spec(rollout={"n": 4}, cpu={"prompts_per_step": 4, "grpo_micro_batches": 2})
    config = GRPOConfig(**grpo_arguments(spec, tmp_path))
    assert config.generation_batch_size == 16  # every rollout of the step, generated at once
    assert config.per_device_train_batch_size == 8
    assert config.gradient_accumulation_steps == config.steps_per_generation == 2
    assert rollout_settings(spec).max_rows == 16
    for bad in (3, 32):  # must divide the step's 16 rollouts
        with pytest.raises(ValueError, match=r"cpu\.grpo_micro_batches \(\d+\) must divide"):
            make_spec(rollout={"n": 4}, cpu={"prompts_per_step": 4, "grpo_micro_batches": bad})
    with pytest.raises(ValueError, match="grpo_micro_batches"):
        make_spec(cpu={"grpo_micro_batches": 0})


@pytest.mark.parametrize(
    ("algorithm", "level", "beta"),
    [
        ({"loss": "gspo", "use_kl_loss": True, "kl_loss_coef": 0.01}, "sequence", 0.01),
        ({"loss": "vanilla", "use_kl_loss": False, "kl_loss_coef": 0.01}, "token", 0.0),
    ],
)
def test_loss_and_kl_follow_the_algorithm_section(
    tmp_path: Path, algorithm: dict[str, Any], level: str, beta: float
) -> None:
    spec = make_spec(
        algorithm={**algorithm, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28},
        rollout={"n": 2, "max_turns": 3, "temperature": 0.7, "top_p": 0.9},
    )
    args = grpo_arguments(spec, tmp_path)
    assert args["importance_sampling_level"] == level
    assert args["beta"] == beta
    assert (args["epsilon"], args["epsilon_high"]) == (0.2, 0.28)
    assert (args["temperature"], args["top_p"]) == (0.7, 0.9)
    rollouts = rollout_settings(spec)  # the rollouts sample as TRL's config says
    assert (rollouts.temperature, rollouts.top_p, rollouts.max_turns) == (0.7, 0.9, 3)


@pytest.mark.parametrize(("mode", "loss_type"), sorted(LOSS_TYPES.items()))
def test_every_loss_aggregation_has_a_trl_loss_type(
    tmp_path: Path, mode: str, loss_type: str
) -> None:
    from trl.trainer.grpo_config import GRPOConfig

    spec = make_spec(algorithm={"loss_agg_mode": mode})
    config = GRPOConfig(**grpo_arguments(spec, tmp_path))
    assert config.loss_type == loss_type


def test_relative_paths_resolve_against_the_workdir(tmp_path: Path) -> None:
    spec = resolve_paths(load_spec(SPEC_FILE), tmp_path)
    assert spec.data.train_files == [str(tmp_path / "data" / "train.parquet")]
    remote = make_spec(data={"train_files": ["s3://b/t.parquet"], "test_files": ["/abs/x"]})
    resolved = resolve_paths(remote, tmp_path)
    assert resolved.data.train_files == ["s3://b/t.parquet"]
    assert resolved.data.test_files == ["/abs/x"]


def test_tiny_scheme_must_agree_with_the_call_format(tmp_path: Path) -> None:
    spec = make_spec(model={"path": "tiny://qwen3_coder", "call_format": "hermes"})
    with pytest.raises(ValueError, match="call format"):
        resolve_model(spec, tmp_path)
    plain = make_spec(model={"path": "/models/qwen", "call_format": "hermes"})
    assert resolve_model(plain, tmp_path) == Path("/models/qwen")


def test_cpu_section_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="sft_stepz"):
        make_spec(cpu={"sft_stepz": 3})


@pytest.mark.parametrize("ratio", [0.0, 0.25])
def test_sft_schedule_ends_at_its_floor_not_at_zero(tmp_path: Path, ratio: float) -> None:
    """The full-prompt steps come last in the curriculum: the floor is what they train at."""
    import torch
    from transformers import get_scheduler
    from trl.trainer.sft_config import SFTConfig

    spec = make_spec(cpu={"sft_steps": 40, "sft_lr": 0.003, "sft_min_lr_ratio": ratio})
    config = SFTConfig(**sft_arguments(spec, tmp_path))
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=config.learning_rate)
    scheduler = get_scheduler(
        config.lr_scheduler_type,
        optimizer,
        num_warmup_steps=config.warmup_steps,
        num_training_steps=config.max_steps,
        scheduler_specific_kwargs=config.lr_scheduler_kwargs,
    )
    for _ in range(config.max_steps):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(0.003 * ratio, abs=1e-9)


def test_sft_min_lr_ratio_is_bounded() -> None:
    with pytest.raises(ValueError, match="sft_min_lr_ratio"):
        make_spec(cpu={"sft_min_lr_ratio": 1.5})
