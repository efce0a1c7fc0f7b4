"""After verl exits, the entry trusts only marked steps, merges the final one and writes the
result. Here verl's own FSDP checkpoint manager writes the steps (FSDP2 over gloo on CPU, as
its GPU engine does over NCCL), verl's trainer hook marks them, and `verl.model_merger` turns
the last into a Hugging Face directory whose weights are the trained ones (one optimizer
step moved them away from the base model's, so a merge that copied the base would fail).
The H200 smoke run saved two steps but never reached the merge: the marker was missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from serving.runtime.ports import free_port
from training.checkpoints.layout import TRACKER, step_dir_name
from training.jobs.entry import verl_result
from training.model.tiny import build_tiny_model
from training.spec.model import TrainingSpec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def spec_for(train_file: Path, steps: int) -> TrainingSpec:
    return TrainingSpec.model_validate(
        {
            "name": "merge-test",
            "model": {"path": "tiny://hermes", "call_format": "hermes"},
            "data": {
                "train_files": [str(train_file)],
                "test_files": [str(train_file)],
                "train_batch_size": 2,
            },
            "batch": {"ppo_mini_batch_size": 2},
            "schedule": {"total_training_steps": steps},
        }
    )


def verl_saves(model_dir: Path, run_dir: Path, step: int) -> None:
    """verl's order: actor shards, data.pt, tracker, then the checkpoint hook."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    from training.spec.overrides import CHECKPOINT_CALLBACK

    step_dir = run_dir / step_dir_name(step)
    saved = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "testkit" / "verl_fsdp_save.py"),
            str(model_dir),
            str(step_dir),
            str(free_port()),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert saved.returncode == 0, saved.stderr[-3000:]
    (step_dir / "data.pt").write_bytes(b"dataloader state")
    (run_dir / TRACKER).write_text(str(step))
    config = OmegaConf.create({"trainer": {"checkpoint_callback_class": CHECKPOINT_CALLBACK}})
    build_checkpoint_callback(config).on_save(
        trainer=None, global_step=step, checkpoint_dir=str(step_dir)
    )


def test_final_marked_step_is_merged_to_hugging_face_weights(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny_model(tmp_path / "model")
    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b", "c", "d"]}), train)
    run_dir = tmp_path / "run"
    verl_saves(model_dir, run_dir, 2)

    result = verl_result(spec_for(train, 2), tmp_path, run_dir, "hash")

    assert (result.status, result.final_step, result.planned_step) == ("succeeded", 2, 2)
    assert result.message == ""
    assert result.merged_model_dir == str(tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(result.merged_model_dir, dtype=torch.bfloat16)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).state_dict()
    saved = torch.load(run_dir / step_dir_name(2) / "trained_state.pt", weights_only=True)
    expected = {k: v.to(torch.bfloat16) for k, v in saved.items()}  # verl merges to bf16
    got = merged.state_dict()
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected), "merge != trained weights"
    changed = [k for k in expected if not torch.equal(base[k], got[k])]
    assert len(changed) > len(expected) // 2, "the merge looks like the base model"


def test_steps_saved_without_a_marker_are_neither_final_nor_merged(tmp_path: Path) -> None:
    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b"]}), train)
    run_dir = tmp_path / "run"
    (run_dir / step_dir_name(2) / "actor").mkdir(parents=True)
    (run_dir / TRACKER).write_text("2")  # the H200 run: verl's tracker, no marker

    result = verl_result(spec_for(train, 2), tmp_path, run_dir, "hash")

    assert (result.status, result.final_step, result.merged_model_dir) == ("incomplete", 0, None)
    assert "tracker names step 2" in result.message
