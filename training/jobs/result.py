"""The training result contract: what a finished job leaves for the evaluate/gate stages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RESULT_FILE = "result.json"
Status = Literal["succeeded", "sft_only", "incomplete", "drifted", "failed"]
COMPLETE_STATUSES: frozenset[str] = frozenset({"succeeded", "sft_only"})
"""A run that did all it planned: `sft_only` is one whose format guard gave GRPO's steps to
SFT because SFT had not learnt the call format (`training.cpu_backend.format_guard`)."""


class TrainingResult(BaseModel):
    """What a finished job leaves (`result.json`), and what the retraining DAG's `fetch_result`
    hands to evaluate, gate and register (`training.pipeline.contracts`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    schema_version: int = 1
    """Version of this layout."""
    status: Status
    """succeeded, sft_only (complete, but the format guard gave GRPO's steps to SFT: an
    SFT-only candidate), incomplete (stopped short of the planned step, or GRPO skipped by
    the format guard), drifted (stopped by the format-drift guard) or failed."""
    final_step: int = Field(ge=0)
    """Last step with a complete checkpoint."""
    planned_step: int = Field(ge=0)
    """The step the spec asked to reach."""
    spec_hash: str
    """Hash of the spec the job trained (the user's spec, before path resolution)."""
    dataset_version: str | None = None
    """The dataset version it trained on."""
    checkpoint_dir: str | None = None
    """Where its checkpoints are."""
    merged_model_dir: str | None = None
    """The final weights as a Hugging Face directory: what is evaluated and registered."""
    candidate_stage: Literal["grpo", "sft"] | None = None
    """Whose weights `merged_model_dir` holds where the backend chose: `sft` when GRPO's model
    came out measurably worse than its SFT start (`training.cpu_backend.candidate_choice`);
    None where no choice was made (the last stage's model)."""
    drift: dict[str, float] | None = None
    """The format-drift guard's last figures, when it watched the run."""
    message: str = ""
    """Why it ended as it did, for a human."""
    mlflow_run_id: str | None = None
    """The MLflow run the job logged to, for the `toolrl.training_run_id` lineage tag
    (None: not reported; no backend reports it yet)."""

    @property
    def reached_planned_step(self) -> bool:
        """A resumed run can exit 0 having trained 0 steps; this is what catches it. An
        `sft_only` run planned no GRPO step once its format guard spoke."""
        if self.status == "sft_only":
            return self.final_step >= self.planned_step
        return self.final_step >= self.planned_step > 0

    @property
    def complete(self) -> bool:
        """Did all it planned: what `--strict` and the CLI's exit status ask."""
        return self.status in COMPLETE_STATUSES

    def write(self, workdir: Path) -> Path:
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / RESULT_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def read(cls, workdir: Path) -> TrainingResult:
        return cls.model_validate_json((workdir / RESULT_FILE).read_text())
