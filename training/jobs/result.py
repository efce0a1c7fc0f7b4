"""The training result contract: what a finished job leaves for the evaluate/gate stages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RESULT_FILE = "result.json"
Status = Literal["succeeded", "incomplete", "drifted", "failed"]


class TrainingResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    status: Status
    final_step: int = Field(ge=0, description="Last step with a complete checkpoint.")
    planned_step: int = Field(ge=0, description="The step the spec asked to reach.")
    spec_hash: str
    dataset_version: str | None = None
    checkpoint_dir: str | None = None
    merged_model_dir: str | None = None
    drift: dict[str, float] | None = None
    message: str = ""

    @property
    def reached_planned_step(self) -> bool:
        """A resumed run can exit 0 having trained 0 steps; this is what catches it."""
        return self.final_step >= self.planned_step > 0

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
