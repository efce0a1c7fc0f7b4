"""PipelineConfig: every knob of the scheduled loop in one typed place.

A deployment overrides fields with a YAML file named by `TOOLRL_PIPELINE_CONFIG`. DAG files
read it at parse time for their schedule and retry settings (one small local file), and every
task reads it again at run time, so a changed value never needs a new DAG file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from serving.mcp_client.sources import ToolSources
from training.data.config import ValidationConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_ENV = "TOOLRL_PIPELINE_CONFIG"


def shipped_path(value: str) -> str:
    """A relative spec or thresholds path names a file shipped with toolrl
    (`training/specs/cpu_tiny.yaml`): resolved against the package root, which is the
    checkout in development and site-packages in an image. Absolute and empty pass as is."""
    return value if not value or Path(value).is_absolute() else str(REPO_ROOT / value)


class AirflowServices(BaseModel):
    """How `toolrl airflow up` runs Airflow's own services on one machine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_port: int = Field(default=8080, ge=1, le=65535, description="api-server (UI + REST).")
    parallelism: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Task slots of the LocalExecutor (Airflow's default 32 pre-forks 1.2 GB).",
    )
    dag_refresh_s: int = Field(
        default=30, ge=5, description="How often the dag-processor lists the DAG folder."
    )
    healthy_within_s: float = Field(
        default=120.0, gt=0, description="`up` fails if a service is not healthy by then."
    )


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset_schedule: str | None = Field(
        default="0 3 * * 1",
        description="Cron of toolcall_dataset (catchup off). None: runs only when triggered, "
        "as the demo does, so unpausing it does not start a catch-up run beside its trigger.",
    )
    dataset_rows: int = Field(default=2_000, ge=10, description="Rows per dataset version.")
    chinese_fraction: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of dataset rows in Chinese. 0 for the default base model: "
        "SmolLM2-135M-Instruct was trained on English only, so Chinese rows would measure "
        "a language it does not have; a Qwen base on a GPU cluster can take 0.3.",
    )
    data_root: str = Field(
        default=str(REPO_ROOT / "runs" / "datasets"),
        description="Where validated versions live (a local dir; S3 mirror when a bucket is set).",
    )
    s3_bucket: str | None = Field(default=None, description="Mirror datasets to this bucket.")
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    training_spec: str = Field(
        default=str(REPO_ROOT / "training" / "specs" / "cpu_smollm2.yaml"),
        description="TrainingSpec used by scheduled retraining (a DAG param overrides it). "
        "A relative path names a file shipped with toolrl (`training/specs/cpu_tiny.yaml`): "
        "it resolves against the package root, so one config works in a checkout and in an "
        "image where toolrl is installed in site-packages.",
    )
    training_backend: Literal["cpu", "verl"] = Field(
        default="cpu", description="cpu (TRL, embedded) or verl (GPU cluster)."
    )
    eval_backend: Literal["cpu", "transformers"] = Field(
        default="cpu",
        description="Model server the evaluation drives on CPU: cpu (the project's engine: "
        "tool prompt cached, requests batched) or transformers (`transformers serve`).",
    )
    evaluation_runs_on: Literal["airflow", "ray"] = Field(
        default="airflow",
        description="Where `evaluate` serves the candidate and the champion: in the Airflow "
        "task itself (one machine, `make demo`), or as a Ray job on the training image "
        "(`ray`: the compose stack and Kubernetes, whose Airflow image has no torch).",
    )
    eval_limit: int | None = Field(
        default=None, ge=1, description="Evaluate at most this many held-out cases (all: None)."
    )
    thresholds: str = Field(
        default=str(REPO_ROOT / "training" / "evaluation" / "thresholds.yaml"),
        description="Gate thresholds file (relative: shipped with toolrl, as training_spec).",
    )
    workdir: str = Field(
        default=str(REPO_ROOT / "runs" / "pipeline"),
        description="Per-run working directories (shared storage on a cluster).",
    )
    task_timeout_minutes: int = Field(default=60, ge=1, description="Default task timeout.")
    training_timeout_hours: int = Field(default=48, ge=1, description="Wait-for-training timeout.")
    retries: int = Field(default=2, ge=0, description="Retries of submit/poll-type tasks.")
    connections: dict[str, str] = Field(
        default_factory=dict,
        description="Airflow connections for `toolrl airflow up`, conn id -> URI (Ray, MLflow, "
        "MCP, S3); unset ones take the embedded defaults of serving/settings.py.",
    )
    airflow: AirflowServices = Field(default_factory=AirflowServices)
    pack: str | None = Field(
        default=None,
        description="Generate datasets from this task pack (a YAML file, or a shipped pack: "
        "time, memory) against its MCP server instead of the built-in tools. Training and "
        "evaluation then replay the dataset's call store (never the server itself), and "
        "`chinese_fraction` gives way to the pack's `languages`.",
    )
    pack_sources: str | None = Field(
        default=None,
        description="Tool-sources YAML holding the pack's server (`toolrl tools list` "
        "format). None: the pack's own `source:` (the shipped time pack has one).",
    )
    tool_sources: ToolSources = Field(
        default_factory=ToolSources,
        description="MCP servers whose tools form the catalog (`toolrl tools list`): stdio "
        "or streamable HTTP, with optional prefixes. Default: the project's own server.",
    )

    @field_validator("training_spec", "thresholds")
    @classmethod
    def _shipped_when_relative(cls, value: str) -> str:
        return shipped_path(value)


def load_pipeline_config(env: dict[str, str] | None = None) -> PipelineConfig:
    """Defaults, overridden by the YAML file at $TOOLRL_PIPELINE_CONFIG (task run time)."""
    source = (env if env is not None else dict(os.environ)).get(CONFIG_ENV)
    if not source:
        return PipelineConfig()
    raw = yaml.safe_load(Path(source).read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{source} must hold a YAML mapping")
    return PipelineConfig.model_validate(raw)
