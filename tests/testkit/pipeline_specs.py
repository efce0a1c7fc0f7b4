"""The tiny TrainingSpec and gate thresholds the end-to-end tests train and gate with: a
model built from a config (no weights), a few CPU steps, so a whole retraining run takes
about a minute. One definition, so the e2e modules cannot drift apart."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from training.spec.model import TrainingSpec

_TINY_SPEC: dict[str, Any] = {
    "model": {"path": "tiny://hermes", "call_format": "hermes"},
    "data": {"train_files": ["x"], "test_files": ["y"], "train_batch_size": 2},
    "rollout": {"n": 2, "max_turns": 2},
    "batch": {"ppo_mini_batch_size": 2},
    "checkpoint": {"run_dir": "ckpt", "save_freq": 2, "keep": 1},
    "drift": {"max_malformed_rate": 1.0, "window": 50},
    "cpu": {
        "sft_steps": 4,
        "sft_batch_size": 2,
        "sft_save_freq": 4,
        "grpo_steps": 2,
        "grpo_sft_replay_coef": 0.5,  # the replay path runs in every end-to-end training
        "prompts_per_step": 2,
        "max_completion_length": 32,
        "max_truncated_fraction": 1.0,  # tiny-model plumbing test: cut rollouts on purpose
        "eval_rows": 2,
        "eval_max_new_tokens": 12,
        "threads": 2,
    },
}


def tiny_spec(name: str) -> dict[str, Any]:
    return {"name": name, **copy.deepcopy(_TINY_SPEC)}


def tiny_cpu_spec(name: str, cpu: dict[str, Any]) -> TrainingSpec:
    """A validated TrainingSpec on the tiny model whose `cpu` section is `cpu` alone (the
    section's defaults elsewhere): for tests of one CPU-backend piece (the SFT trainer, its
    schedule, the budget's probe, the SFT replay)."""
    return TrainingSpec.model_validate(
        {
            "name": name,
            "model": {"path": "tiny://hermes", "call_format": "hermes"},
            "data": {"train_files": ["x"], "test_files": ["y"], "train_batch_size": 2},
            "rollout": {"n": 2},
            "batch": {"ppo_mini_batch_size": 2},
            "checkpoint": {"run_dir": "ckpt"},
            "cpu": cpu,
        }
    )


def lenient_thresholds(require_same_data: bool = True) -> dict[str, Any]:
    """A gate any finished, drift-free candidate passes."""
    return {
        "absolute": {"overall.error_rate": {"max": 1.0}},
        "regression": {},
        "require_same_data": require_same_data,
        "require_final_step": True,
        "reject_drift_stop": True,
    }


def model_dir(root: Path, marker: str) -> Path:
    """A stand-in merged checkpoint: a config and a weights file whose bytes name it."""
    path = root / marker
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "marker": marker}))
    (path / "model.safetensors").write_bytes(marker.encode() * 100)
    return path


def published_version(root: Path, name: str, *, passed: bool = True) -> Path:
    """A published dataset version's files, as the retraining stage checks them before it
    trains (their contents are not read there): manifest, train and test files, and a
    validation report that passed (or not)."""
    path = root / name
    (path / "validation").mkdir(parents=True)
    for file in ("manifest.json", "train.parquet", "test.parquet"):
        (path / file).write_text("{}")
    (path / "validation" / "report.json").write_text(json.dumps({"success": passed}))
    return path
