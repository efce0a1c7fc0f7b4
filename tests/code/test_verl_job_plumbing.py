"""The verl job's plumbing that a GPU run depends on and a CPU machine can check: the
attention choice reaching verl's keys, settings reaching verl's own Ray actors, and the same
portable spec (relative data, `tiny://` model) resolving as on the CPU backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from training.jobs.entry import prepare_verl_spec, worker_env_overrides
from training.spec.model import SpecError, TrainingSpec, load_spec
from training.spec.overrides import build_overrides
from training.spec.plan import compose_verl_config, plan

SPECS = Path(__file__).resolve().parents[2] / "training" / "specs"


def spec_with(**model: Any) -> TrainingSpec:
    return TrainingSpec.model_validate(
        {
            "name": "t",
            "model": {"path": "/m", "call_format": "hermes", **model},
            "data": {
                "train_files": ["/d/a.parquet"],
                "test_files": ["/d/b.parquet"],
                "train_batch_size": 8,
            },
            "batch": {"ppo_mini_batch_size": 8},
        }
    )


def overrides_of(spec: TrainingSpec) -> dict[str, str]:
    return dict(o.split("=", 1) for o in build_overrides(spec, "/tools.yaml"))


def test_flash_attention_keeps_padding_removal_and_verls_default() -> None:
    overrides = overrides_of(spec_with())
    assert overrides["actor_rollout_ref.model.use_remove_padding"] == "true"
    assert not any("attn_implementation" in key for key in overrides)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_other_attention_turns_padding_removal_off_and_reaches_verl(attention: str) -> None:
    overrides = build_overrides(spec_with(attn_implementation=attention), "/tools.yaml")
    as_dict = dict(o.split("=", 1) for o in overrides)
    assert as_dict["actor_rollout_ref.model.use_remove_padding"] == "false"
    config = compose_verl_config(overrides)
    assert config.actor_rollout_ref.model.override_config.attn_implementation == attention
    assert config.actor_rollout_ref.model.use_remove_padding is False


def test_unknown_attention_is_refused_naming_the_field(tmp_path: Path) -> None:
    text = (SPECS / "gpu_tiny_smoke.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("attn_implementation: sdpa", "attn_implementation: flash3"))
    with pytest.raises(SpecError, match="attn_implementation"):
        load_spec(bad)


def test_gpu_smoke_spec_plans_cleanly(tmp_path: Path) -> None:
    result = plan(load_spec(SPECS / "gpu_tiny_smoke.yaml"), tmp_path)
    assert "verl validate_config" in result.checks
    assert "tool config loader" in result.checks
    assert "trainer.total_training_steps=2" in result.overrides
    assert "actor_rollout_ref.rollout.name=vllm" in result.overrides


def test_worker_settings_travel_in_verls_runtime_env_and_secrets_never_do() -> None:
    env = {
        "TOOLRL_DRIFT_DIR": "/w/drift",
        "TOOLRL_CHECKPOINT_S3_URI": "s3://b/ckpt",
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
        "AWS_SECRET_ACCESS_KEY": "do-not-leak",
        "HOME": "/root",
    }
    overrides = worker_env_overrides(env)
    joined = " ".join(overrides)
    assert "do-not-leak" not in joined
    assert "HOME" not in joined
    config = compose_verl_config(overrides)
    env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.TOOLRL_DRIFT_DIR == "/w/drift"
    assert env_vars.TOOLRL_CHECKPOINT_S3_URI == "s3://b/ckpt"
    assert env_vars.MLFLOW_TRACKING_URI == "http://127.0.0.1:5000"


def test_no_settings_no_overrides() -> None:
    assert worker_env_overrides({"PATH": "/bin"}) == []


def test_verl_sees_the_same_resolved_spec_as_the_cpu_backend(tmp_path: Path) -> None:
    spec = load_spec(SPECS / "gpu_tiny_smoke.yaml")
    warm = tmp_path / "base_model"
    warm.mkdir()
    (warm / "model.safetensors").write_bytes(b"warm-started weights")
    resolved = prepare_verl_spec(spec, tmp_path)
    assert resolved.model.path == str(warm)  # a model already there is used, not rebuilt
    assert resolved.data.train_files == [str(tmp_path / "data" / "train.parquet")]
    assert resolved.data.test_files == [str(tmp_path / "data" / "test.parquet")]
    assert (warm / "model.safetensors").read_bytes() == b"warm-started weights"


def test_absolute_model_paths_pass_through(tmp_path: Path) -> None:
    resolved = prepare_verl_spec(spec_with(path="/models/qwen"), tmp_path)
    assert resolved.model.path == "/models/qwen"
    assert resolved.data.train_files == ["/d/a.parquet"]


def test_spec_env_vars_and_worker_settings_compose_together(tmp_path: Path) -> None:
    """The smoke spec sets a vLLM variable for verl's workers; the entrypoint adds the drift
    directory under the same key tree. Both must survive composition (the command runs both)."""
    result = plan(load_spec(SPECS / "gpu_tiny_smoke.yaml"), tmp_path)
    command = result.overrides + worker_env_overrides({"TOOLRL_DRIFT_DIR": "/w/drift"})
    env_vars = compose_verl_config(command).ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.VLLM_USE_FLASHINFER_SAMPLER == "0"  # a string, as Ray requires
    assert env_vars.TOOLRL_DRIFT_DIR == "/w/drift"


@pytest.mark.parametrize(
    "value",
    [
        "http://127.0.0.1:5000/?a=b&c=d",
        "s3://bucket/with space/and'quote",
        "/w/drift,with=[brackets]{braces}",
        "true",
        "123",
    ],
)
def test_hostile_setting_values_reach_workers_verbatim(value: str) -> None:
    """Values are quoted for Hydra: none can break the command line, add a key or turn into a
    number or boolean (Ray accepts only strings as env values)."""
    env_vars = compose_verl_config(
        worker_env_overrides({"TOOLRL_DRIFT_DIR": value})
    ).ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars["TOOLRL_DRIFT_DIR"] == value
    assert list(env_vars) == ["TOOLRL_DRIFT_DIR"]


def test_every_plan_sets_the_checkpoint_callback_without_s3() -> None:
    """Completion markers come from the callback; a plan without S3 needs them as much."""
    from training.spec.overrides import CHECKPOINT_CALLBACK

    spec = spec_with()
    assert spec.checkpoint.s3_uri is None
    assert overrides_of(spec)["trainer.checkpoint_callback_class"] == CHECKPOINT_CALLBACK


def test_steps_verl_saved_without_markers_are_named_in_the_result(tmp_path: Path) -> None:
    from training.checkpoints.layout import TRACKER, mark_complete
    from training.jobs.entry import unmarked_steps_message

    run = tmp_path / "run"
    (run / "global_step_1").mkdir(parents=True)
    (run / "global_step_1" / "data.pt").write_bytes(b"x")
    (run / "global_step_2").mkdir()
    (run / TRACKER).write_text("2")
    message = unmarked_steps_message(run, 0)
    assert "step 2" in message and "checkpoint_callback_class" in message
    mark_complete(run / "global_step_1")
    assert "newest step with a completion marker is 1" in unmarked_steps_message(run, 1)
    (run / TRACKER).write_text("1")
    assert unmarked_steps_message(run, 1) == ""
    for junk in ("", "two", "-"):
        (run / TRACKER).write_text(junk)  # a tracker cut mid-write is no claim
        assert unmarked_steps_message(run, 1) == ""


def test_a_job_id_holding_401_is_not_taken_for_an_auth_failure() -> None:
    """Job ids end in a hash: `...-9d3d4d0401db-a1` once made a missing job look like a 401."""
    from training.jobs.submit import auth_failure

    missing = RuntimeError(
        "Request failed with status code 404: Job toolrl-trig-fail-9d3d4d0401db-a1 does not exist."
    )
    assert auth_failure(missing, "http://ray:8265") is None
    refused = auth_failure(RuntimeError("Request failed with status code 401: no"), "http://r")
    assert refused is not None and "none was sent" in str(refused)
    wrong = auth_failure(RuntimeError("Request failed with status code 403"), "http://r")
    assert wrong is not None and "refused the token" in str(wrong)
