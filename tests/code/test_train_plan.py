"""`train plan`: spec -> verl overrides, validated by verl's own composition and checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from training.spec.model import SpecError, TrainingSpec, load_spec
from training.spec.overrides import build_overrides, hydra_value, override_keys
from training.spec.plan import PlanError, plan
from training.spec.templates import template_format, template_warnings

SPECS = Path(__file__).resolve().parents[2] / "training" / "specs"


def spec_dict(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "t",
        "model": {"path": "Qwen/Qwen3.5-4B", "call_format": "qwen3_coder"},
        "data": {
            "train_files": ["/d/train.parquet"],
            "test_files": ["/d/test.parquet"],
            "train_batch_size": 8,
        },
        "batch": {"ppo_mini_batch_size": 4},
        "parallel": {"n_gpus_per_node": 4},
    }
    base.update(changes)
    return base


@pytest.mark.parametrize("seed", ["qwen35_4b_gspo.yaml", "qwen35_35b_a3b_moe.yaml"])
def test_seed_specs_plan_cleanly(seed: str, tmp_path: Path) -> None:
    result = plan(load_spec(SPECS / seed), tmp_path)
    assert "verl validate_config" in result.checks
    assert "reward function is the project's" in result.checks
    assert result.warnings == []  # the family's released template matches qwen3_coder
    keys = override_keys(result.overrides)
    assert "reward.custom_reward_function.path" in keys
    assert not any(k.startswith("custom_reward_function.") for k in keys)
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent" in result.overrides


def test_typo_in_an_override_fails_naming_the_key(tmp_path: Path) -> None:
    spec = TrainingSpec.model_validate(
        spec_dict(verl_overrides=["actor_rollout_ref.actor.ppo_mini_bach_size=4"])
    )
    with pytest.raises(PlanError, match="ppo_mini_bach_size"):
        plan(spec, tmp_path)


@pytest.mark.parametrize(
    "override", ["custom_reward_function.path=/x.py", "reward_model.reward_manager=batch"]
)
def test_keys_verl_would_silently_ignore_are_refused(override: str, tmp_path: Path) -> None:
    spec = TrainingSpec.model_validate(spec_dict(verl_overrides=[override]))
    with pytest.raises(PlanError, match=r"legacy key that verl 0\.9\.1 composes but ignores"):
        plan(spec, tmp_path)


@pytest.mark.parametrize(
    ("callback", "message"),
    [
        ("verl.trainer.ppo.checkpoint_callback.CheckpointCallback", "writes no completion"),
        ("training.checkpoints.nowhere.Nothing", "checkpoint callback marks steps failed"),
        ("null", "writes no completion"),
    ],
)
def test_a_callback_that_would_not_mark_steps_is_refused(
    callback: str, message: str, tmp_path: Path
) -> None:
    """Replacing the project's checkpoint callback would leave every saved step unmarked:
    never resumed from, never merged (what the H200 run showed)."""
    spec = TrainingSpec.model_validate(
        spec_dict(verl_overrides=[f"trainer.checkpoint_callback_class={callback}"])
    )
    with pytest.raises(PlanError, match=message):
        plan(spec, tmp_path)


def test_verl_validation_catches_inconsistent_batches(tmp_path: Path) -> None:
    spec = TrainingSpec.model_validate(
        spec_dict(
            data={"train_files": ["/a"], "test_files": ["/b"], "train_batch_size": 3},
            batch={"ppo_mini_batch_size": 3, "use_dynamic_bsz": False},
            parallel={"n_gpus_per_node": 4},
            rollout={"n": 5},
        )
    )
    with pytest.raises(PlanError, match="must be divisible"):
        plan(spec, tmp_path)


def test_unknown_reward_manager_is_caught_by_verl_registry(tmp_path: Path) -> None:
    spec = TrainingSpec.model_validate(
        spec_dict(verl_overrides=["reward.reward_manager.name=bogus"])
    )
    with pytest.raises(PlanError, match="reward manager registry"):
        plan(spec, tmp_path)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"algorithm": {"loss": "ppo2"}}, "algorithm.loss"),
        ({"rollout": {"n": 1}}, "rollout.n"),
        ({"model": {"path": "m", "call_format": "json"}}, "model.call_format"),
        ({"surprise": True}, "surprise"),
        ({"name": "Bad Name!"}, "name"),
    ],
)
def test_bad_spec_fails_at_load_naming_the_field(
    change: dict[str, Any], field: str, tmp_path: Path
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_dict(**change)))
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        load_spec(path)


@pytest.mark.parametrize("content", ["", "- a list", "name: [unclosed", "\x00\x01"])
def test_unreadable_spec_files_fail_clearly(content: str, tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(content)
    with pytest.raises(SpecError):
        load_spec(path)


def test_template_mismatch_warns(tmp_path: Path) -> None:
    from training.model.tokenizer import chat_template

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "chat_template.jinja").write_text(chat_template("hermes"))
    spec = TrainingSpec.model_validate(
        spec_dict(model={"path": str(model_dir), "call_format": "qwen3_coder"})
    )
    [warning] = template_warnings(spec)
    assert "teaches 'hermes' calls" in warning and "6252" in warning
    assert template_format(chat_template("qwen3_coder")) == "qwen3_coder"
    released = TrainingSpec.model_validate(
        spec_dict(model={"path": "Qwen/Qwen2.5-7B-Instruct", "call_format": "qwen3_coder"})
    )
    assert "teaches 'hermes'" in template_warnings(released)[0]


def test_spec_maps_onto_verl_keys() -> None:
    spec = TrainingSpec.model_validate(
        spec_dict(
            algorithm={"loss": "vanilla", "kl_loss_coef": 0.01}, rollout={"n": 8, "max_turns": 3}
        )
    )
    overrides = dict(o.split("=", 1) for o in build_overrides(spec, "/tools.yaml"))
    assert overrides["actor_rollout_ref.actor.policy_loss.loss_mode"] == "vanilla"
    assert overrides["actor_rollout_ref.actor.kl_loss_coef"] == "0.01"
    assert overrides["actor_rollout_ref.rollout.n"] == "8"
    assert overrides["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] == "3"
    assert overrides["actor_rollout_ref.rollout.multi_turn.format"] == "qwen3_coder"
    assert overrides["trainer.resume_mode"] == "auto"


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (True, "true"),
        (None, "null"),
        (3, "3"),
        ("fsdp2", "fsdp2"),
        ("true", "'true'"),
        ("a b", "'a b'"),
        ("it's", "'it\\'s'"),
        ([1, "x"], "[1, x]"),
        ({"a": {"b": 1}}, "{a: {b: 1}}"),
    ],
)
def test_hydra_value_rendering(value: Any, rendered: str) -> None:
    assert hydra_value(value) == rendered


def test_spec_hash_is_stable_and_sensitive() -> None:
    a = TrainingSpec.model_validate(spec_dict())
    assert a.spec_hash() == TrainingSpec.model_validate(spec_dict()).spec_hash()
    assert a.spec_hash() != TrainingSpec.model_validate(spec_dict(name="u")).spec_hash()
