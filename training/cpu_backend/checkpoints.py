"""The CPU backend's checkpoints in the layout both paths share (`training.checkpoints.
layout`, verl's own):

    run_dir/latest_checkpointed_iteration.txt
    run_dir/global_step_N/actor/      Hugging Face model + tokenizer, optimizer, scheduler,
                                      RNG state, trainer state (the step and data position)
    run_dir/global_step_N/data.pt     the data position as verl keeps it (step, epoch,
                                      prompts consumed) plus the drift history
    run_dir/global_step_N/_COMPLETE.json   written last (lists every file and its size)

The Hugging Face trainer saves `checkpoint-N` in a scratch folder; `LayoutCallback.on_save`
moves it into `global_step_N/actor`, writes `data.pt`, marks the step complete, points the
tracker file at it, mirrors it to S3 when the spec names a bucket, and prunes. Resume rule
(the shared one): the highest step whose marker exists and whose files match it; a folder
without the marker (killed mid-save) is ignored. Resuming restores the optimizer, the RNG
and the sampler position: the trainer skips the batches it already consumed, so no prompt
is trained on twice and none is skipped. The SFT warm start uses the same layout under
`run_dir/sft/`.
"""

from __future__ import annotations

import os
import pickle  # for its error type only: torch.load runs with weights_only
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from training.checkpoints.layout import (
    complete_steps,
    is_complete,
    latest_complete_step,
    mark_complete,
    parse_step,
    step_dir_name,
    write_tracker,
)

ACTOR_DIR = "actor"
DATA_FILE = "data.pt"

__all__ = [
    "LayoutCallback",
    "actor_path",
    "commit_checkpoint",
    "is_complete",
    "latest_complete_step",
    "prune",
    "read_data_state",
]


def actor_path(run_dir: Path, step: int) -> Path:
    return run_dir / step_dir_name(step) / ACTOR_DIR


def read_data_state(run_dir: Path, step: int) -> dict[str, Any]:
    """The `data.pt` of a step ({} when missing or unreadable)."""
    try:
        state = torch.load(run_dir / step_dir_name(step) / DATA_FILE, weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError):
        return {}
    return state if isinstance(state, dict) else {}


def prune(run_dir: Path, keep: int) -> None:
    """Keep the newest `keep` complete steps; delete older steps, complete or not (a partial
    newer than the newest complete step may be a save in flight and is left alone)."""
    steps = complete_steps(run_dir)
    if not steps:
        return
    kept, newest = set(steps[-keep:]), steps[-1]
    for child in run_dir.iterdir():
        step = parse_step(child.name)
        if step is not None and step not in kept and step < newest:
            shutil.rmtree(child, ignore_errors=True)


def commit_checkpoint(
    run_dir: Path,
    step: int,
    trainer_dir: Path,
    data_state: dict[str, Any],
    keep: int,
    s3_uri: str | None = None,
) -> Path:
    """Move a Hugging Face `checkpoint-N` folder into the layout and mark it complete.

    Order is what makes the resume rule safe: files, marker, tracker, mirror, pruning.
    """
    target = run_dir / step_dir_name(step)
    if target.exists():  # a half-written leftover of a killed run
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.move(str(trainer_dir), str(target / ACTOR_DIR))
    torch.save(data_state, target / DATA_FILE)
    mark_complete(target, {"step": step, "backend": "cpu-trl"})
    write_tracker(run_dir, step)
    if s3_uri:
        from training.checkpoints.s3 import CheckpointStore, make_client

        store = CheckpointStore(make_client(os.environ.get("MLFLOW_S3_ENDPOINT_URL")), s3_uri)
        store.upload_step(target)
        store.prune(keep)
    prune(run_dir, keep)
    return target


class LayoutCallback(TrainerCallback):
    """Turns the trainer's own checkpoints into the layout, and saves at the last step and
    whenever training is told to stop (drift), so the final step is always resumable."""

    def __init__(
        self,
        run_dir: Path,
        keep: int,
        prompts_per_step: int,
        s3_uri: str | None = None,
        extra_state: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.keep = keep
        self.prompts_per_step = prompts_per_step
        self.s3_uri = s3_uri
        self.extra_state = extra_state

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> TrainerControl:
        if state.global_step >= state.max_steps or control.should_training_stop:
            control.should_save = True
        return control

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> TrainerControl:
        source = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
        if source.is_dir():
            data_state = {
                "global_step": state.global_step,
                "epoch": float(state.epoch or 0.0),
                "prompts_consumed": state.global_step * self.prompts_per_step,
                **(self.extra_state() if self.extra_state else {}),
            }
            commit_checkpoint(
                self.run_dir, state.global_step, source, data_state, self.keep, self.s3_uri
            )
        return control
