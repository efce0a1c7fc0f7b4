"""The CPU backend's checkpoints: verl's layout with the shared completion marker, and the
resume rule (the newest complete step wins; a half-written step is never resumed from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.checkpoints.layout import MARKER, TRACKER
from training.cpu_backend.checkpoints import (
    actor_path,
    commit_checkpoint,
    latest_complete_step,
    read_data_state,
)


def fake_trainer_checkpoint(root: Path, step: int, size: int = 64) -> Path:
    """What the Hugging Face trainer leaves in its scratch folder after a save."""
    folder = root / ".trainer" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * size)
    (folder / "optimizer.pt").write_bytes(b"o" * size)
    (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    return folder


def test_commit_moves_into_the_layout_and_marks_last(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    source = fake_trainer_checkpoint(tmp_path, 5)
    state = {"global_step": 5, "prompts_consumed": 20, "malformed": [0.1, 0.0]}
    target = commit_checkpoint(run_dir, 5, source, state, keep=3)
    assert target == run_dir / "global_step_5"
    assert not source.exists()
    assert (actor_path(run_dir, 5) / "model.safetensors").is_file()
    assert (target / MARKER).is_file()
    assert (run_dir / TRACKER).read_text().strip() == "5"
    assert read_data_state(run_dir, 5) == state
    assert latest_complete_step(run_dir) == 5


def test_half_written_step_is_ignored_even_when_the_tracker_names_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    commit_checkpoint(run_dir, 2, fake_trainer_checkpoint(tmp_path, 2), {}, keep=3)
    # a save of step 4 killed midway: files there, no marker; verl's tracker already says 4
    partial = run_dir / "global_step_4" / "actor"
    partial.mkdir(parents=True)
    (partial / "model.safetensors").write_bytes(b"half")
    (run_dir / TRACKER).write_text("4")
    assert latest_complete_step(run_dir) == 2
    # a marker whose files no longer match (truncated after marking) does not count either
    commit_checkpoint(run_dir, 6, fake_trainer_checkpoint(tmp_path, 6), {}, keep=3)
    (actor_path(run_dir, 6) / "model.safetensors").write_bytes(b"truncated")
    assert latest_complete_step(run_dir) == 2


def test_a_leftover_folder_of_the_same_step_is_replaced(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "global_step_3" / "actor").mkdir(parents=True)
    (run_dir / "global_step_3" / "actor" / "stale.bin").write_bytes(b"x")
    commit_checkpoint(run_dir, 3, fake_trainer_checkpoint(tmp_path, 3), {}, keep=3)
    assert not (actor_path(run_dir, 3) / "stale.bin").exists()
    assert latest_complete_step(run_dir) == 3


def test_pruning_keeps_the_newest_complete_steps(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "global_step_1").mkdir()  # an old partial
    for step in (2, 4, 6, 8):
        commit_checkpoint(run_dir, step, fake_trainer_checkpoint(tmp_path, step), {}, keep=2)
    (run_dir / "global_step_10").mkdir()  # a save in flight, newer than every complete one
    commit_checkpoint(run_dir, 9, fake_trainer_checkpoint(tmp_path, 9), {}, keep=2)
    names = sorted(p.name for p in run_dir.iterdir() if p.name.startswith("global_step_"))
    assert names == ["global_step_10", "global_step_8", "global_step_9"]
    assert latest_complete_step(run_dir) == 9


@pytest.mark.parametrize("content", [b"", b"not a torch file"])
def test_unreadable_data_state_reads_as_empty(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "global_step_1").mkdir()
    (tmp_path / "global_step_1" / "data.pt").write_bytes(content)
    assert read_data_state(tmp_path, 1) == {}
    assert read_data_state(tmp_path, 7) == {}
