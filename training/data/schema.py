"""The dataset-row contract: verl's agent-loop parquet schema plus the project's fields.

verl reads `data_source`, `agent_name`, `prompt`, `reward_model` and `extra_info`;
`reward_model.ground_truth` reaches the reward function verbatim, so it carries everything
the reward needs as one JSON string (`GroundTruth`). The project's own columns (category,
difficulty, expected calls, ...) sit beside them for validation, evaluation and reports.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
DATA_SOURCE = "toolrl/synthetic"
AGENT_NAME = "tool_agent"


class Category(StrEnum):
    SINGLE = "single"
    """One call answers the question."""
    PARALLEL = "parallel"
    """Several independent calls in one turn (order-free)."""
    MULTI_STEP = "multi_step"
    """A later call needs an earlier call's result: planning and memory across turns."""
    IRRELEVANCE = "irrelevance"
    """No tool is needed; the right behaviour is to answer directly."""
    CLARIFICATION = "clarification"
    """A required argument is missing; the right behaviour is to ask for it."""


class Difficulty(StrEnum):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"


class ExpectedCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arguments: dict[str, Any]
    free_arguments: list[str] = Field(
        default_factory=list,
        description=(
            "Arguments whose value is free text (e.g. a search query): a matcher checks that "
            "they are present, not their exact value."
        ),
    )


class GroundTruth(BaseModel):
    """What a correct trajectory does and says. Serialised into `reward_model.ground_truth`."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    category: Category
    steps: list[list[ExpectedCall]] = Field(
        default_factory=list,
        description="Calls per assistant turn; calls within one step are order-free.",
    )
    results: list[list[dict[str, Any]]] = Field(
        default_factory=list,
        description="The result of each expected call, from executing the real tool.",
    )
    answers: list[str] = Field(
        default_factory=list,
        description="Values the final answer must contain (text or numeric match).",
    )
    missing_argument: str | None = Field(
        default=None, description="For clarification rows: the argument the user left out."
    )

    @property
    def expected_calls(self) -> list[ExpectedCall]:
        return [call for step in self.steps for call in step]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GroundTruth:
        return cls.model_validate_json(text)


#: Columns every dataset row has, in order. `prompt`, `reward_model` and `extra_info` are
#: nested (list of messages / structs) exactly as verl's RLHFDataset expects.
ROW_COLUMNS = (
    "data_source",
    "agent_name",
    "ability",
    "prompt",
    "reward_model",
    "extra_info",
    "query",
    "language",
    "category",
    "difficulty",
    "num_steps",
    "tools_used",
    "expected_calls",
    "template_id",
)
