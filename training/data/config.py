"""Typed settings for dataset generation and validation: one place for every knob."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.data.schema import Category

DEFAULT_MIX: dict[Category, float] = {
    Category.SINGLE: 0.32,
    Category.PARALLEL: 0.15,
    Category.MULTI_STEP: 0.33,
    Category.IRRELEVANCE: 0.10,
    Category.CLARIFICATION: 0.10,
}


class GenerationConfig(BaseModel):
    """How a dataset version is generated. Part of the manifest, so part of the version."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=2_000, ge=10, le=2_000_000, description="Total rows (train + test).")
    seed: int = Field(default=0, description="Same seed, same dataset (byte for byte).")
    test_fraction: float = Field(default=0.1, gt=0.0, lt=0.5, description="Share of rows in test.")
    chinese_fraction: float = Field(default=0.3, ge=0.0, le=1.0, description="Share in Chinese.")
    category_mix: dict[Category, float] = Field(
        default_factory=lambda: dict(DEFAULT_MIX), description="Target share per category."
    )
    max_attempts_per_row: int = Field(
        default=50, ge=1, description="Retries to find a prompt not generated before."
    )

    @model_validator(mode="after")
    def _mix_sums_to_one(self) -> GenerationConfig:
        total = sum(self.category_mix.values())
        if not self.category_mix or abs(total - 1.0) > 1e-6:
            raise ValueError(f"category_mix must sum to 1.0 (got {total:.4f})")
        if any(v < 0 for v in self.category_mix.values()):
            raise ValueError("category_mix shares must be >= 0")
        return self


class ValidationConfig(BaseModel):
    """Bounds the validation suite enforces; a dataset outside them stops the pipeline."""

    model_config = ConfigDict(extra="forbid")

    category_tolerance: float = Field(
        default=0.08,
        ge=0.0,
        le=1.0,
        description="Allowed absolute deviation of each category's share from the target mix.",
    )
    min_rows_per_tool: int = Field(
        default=1, ge=0, description="Every catalog tool must be expected at least this often."
    )
    max_prompt_tokens: int = Field(
        default=2_048, ge=64, description="Token budget of a rendered prompt (tools included)."
    )
    min_rows: int = Field(default=10, ge=1, description="A dataset smaller than this is refused.")
    languages: list[str] = Field(
        default_factory=lambda: ["en", "zh"],
        description="Allowed values of the `language` column (a pack dataset: its languages).",
    )
    check_verl_dataset: bool = Field(
        default=True, description="Also load train.parquet with verl's RLHFDataset if installed."
    )
