"""Every reward weight and judge knob in one typed place.

Defaults start from the MiniMind agent-RL reward (format -0.5 per error, alignment +0.5 or
-0.5 x gap, ground truth up to +2.5, unfinished -0.5, 3-gram repetition up to -0.5, clip to
[-3, 3]); the fields after those are this project's fixes to its weak points. Unknown keys are
rejected, so a typo in a verl `reward_kwargs` override fails loudly instead of being ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

CallFormatName = Literal["hermes", "qwen3_coder", "auto"]


class RuleWeights(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format_penalty_per_error: float = Field(0.5, ge=0, description="Per syntax error.")
    format_penalty_cap: float = Field(1.5, ge=0, description="Most the format term can take.")
    alignment_bonus: float = Field(0.5, description="When the calls match the expected exactly.")
    alignment_penalty_per_gap: float = Field(0.5, ge=0, description="Per unit of call gap.")
    alignment_floor: float = Field(-2.0, le=0, description="Lowest alignment term.")
    missing_call_gap: float = Field(
        1.0,
        ge=0,
        le=4,
        description="Gap charged per expected call the rollout never made (a call too many "
        "costs 1). Above 1, answering before a multi-step chain is done costs more than "
        "trying its next call.",
    )
    name_only_gap: float = Field(
        0.5, ge=0, le=1, description="Gap charged for the right tool with wrong arguments."
    )
    ground_truth_max: float = Field(2.5, ge=0, description="Credit when the answer is right.")
    clarification_question_share: float = Field(
        0.5, ge=0, le=1, description="Share of the credit for asking without naming the argument."
    )
    unfinished_penalty: float = Field(0.5, ge=0, description="No final answer.")
    repetition_cap: float = Field(0.5, ge=0, description="Most the repetition term can take.")
    repetition_ngram: int = Field(3, ge=1, le=8, description="n of the repeated n-grams.")
    repetition_min_ngrams: int = Field(8, ge=1, description="Shorter prose is not judged.")
    numeric_rel_tol: float = Field(1e-6, ge=0, description="Numbers equal within this.")
    numeric_rounding_rel_tol: float = Field(
        0.01, ge=0, description="A rounded number matches if within its rounding and this."
    )
    clip_low: float = -3.0
    clip_high: float = 3.0

    @model_validator(mode="after")
    def _ordered_clip(self) -> RuleWeights:
        if self.clip_low >= self.clip_high:
            raise ValueError("clip_low must be below clip_high")
        return self


class RewardConfig(BaseModel):
    """The rule reward's configuration: weights plus the call format the rollout parser uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: RuleWeights = Field(default_factory=RuleWeights)
    call_format: CallFormatName = Field(
        "auto",
        description="Rollout parser format; a call in the other format is a format error. "
        "'auto' accepts both (for evaluation across models).",
    )


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


class JudgeConfig(BaseModel):
    """RULER-style group judge over an OpenAI-compatible endpoint.

    `from_env()` reads the variables the reference notes use (`RULER_JUDGE_MODEL`,
    `RULER_MAX_SUB_BATCH`, `RULER_CONCURRENT_CHUNKS`, `RULER_MAX_COMPLETION_TOKENS`) plus
    `RULER_BASE_URL`/`OPENAI_BASE_URL`, `RULER_API_KEY`/`OPENAI_API_KEY`, `RULER_JUDGE_WEIGHT`,
    `RULER_TIMEOUT_S`, `RULER_MAX_RETRIES` and `RULER_BACKOFF_S`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible /v1 root.")
    api_key: SecretStr | None = Field(None, description="Bearer key; never logged.")
    model: str = Field("gpt-5-mini", description="Judge model name.")
    max_sub_batch: int = Field(12, ge=1, description="Trajectories per judge request.")
    concurrent_chunks: int = Field(16, ge=1, description="Judge requests in flight at once.")
    max_completion_tokens: int = Field(2048, ge=16, description="Judge reply budget.")
    temperature: float = Field(0.0, ge=0, le=2)
    timeout_s: float = Field(60.0, gt=0, description="Per request, connect to last byte.")
    max_retries: int = Field(3, ge=0, description="Retries after the first try.")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay; doubles each retry.")
    judge_weight: float = Field(
        0.5, ge=0, le=1, description="0 = rule only, 1 = judge only (judge scaled to the clip)."
    )
    cache_size: int = Field(10_000, ge=0, description="Judge replies kept, keyed by content.")
    max_trajectory_chars: int = Field(
        8_000, ge=200, description="Longer ones are cut in the middle."
    )
    rubric: str = Field(
        "Score each trajectory from 0 to 1 by how well it achieves the user's goal with the "
        "tools: right tools with right arguments, correct use of tool results, a final answer "
        "that is correct and grounded, no unnecessary or malformed calls, asking for missing "
        "information instead of guessing, answering directly when no tool is needed. Compare "
        "the trajectories with each other: a better trajectory gets a higher score.",
        description="What the judge is told to reward.",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> JudgeConfig:
        source = os.environ if env is None else env
        values: dict[str, object] = {}
        mapping = {
            "model": ("RULER_JUDGE_MODEL",),
            "max_sub_batch": ("RULER_MAX_SUB_BATCH",),
            "concurrent_chunks": ("RULER_CONCURRENT_CHUNKS",),
            "max_completion_tokens": ("RULER_MAX_COMPLETION_TOKENS",),
            "base_url": ("RULER_BASE_URL", "OPENAI_BASE_URL"),
            "api_key": ("RULER_API_KEY", "OPENAI_API_KEY"),
            "judge_weight": ("RULER_JUDGE_WEIGHT",),
            "timeout_s": ("RULER_TIMEOUT_S",),
            "max_retries": ("RULER_MAX_RETRIES",),
            "backoff_s": ("RULER_BACKOFF_S",),
        }
        for field_name, names in mapping.items():
            for name in names:
                if source.get(name):
                    values[field_name] = source[name]
                    break
        values.update(overrides)
        return cls.model_validate(values)
