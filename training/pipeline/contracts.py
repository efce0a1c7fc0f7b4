"""What each pipeline stage takes and returns: one typed model per hand-over.

The DAG tasks pass these between them as XComs, which carry JSON: a task returns
`model.model_dump(mode="json")` and the next one rebuilds it with `Model.model_validate(x)`
and reads attributes. Every model is frozen and rejects unknown keys, so a renamed or
misspelt field fails at the hand-over, naming it, instead of as a KeyError three tasks
later. The training job's result is `training.jobs.result.TrainingResult` (the job writes
it as `result.json`), re-exported here so the stages import their contracts from one place.

Dataset DAG: `GeneratedDataset` -> `ValidatedDataset` -> `PublishedDataset` (also the
`toolrl_validated_dataset` Asset event's extra). Retraining DAG: `RunParams` (the DAG's
params) -> `TrainingPlan` -> `SubmittedJob` -> `TrainingResult` -> (`EvaluationRequest`, when the
evaluation runs as a Ray job) -> `Evaluation` ->
`GateVerdict` and `Registration` -> `Promotion` -> `RunSummary`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from training.jobs.result import TrainingResult

__all__ = [
    "DatasetChoice",
    "Evaluation",
    "EvaluationRequest",
    "GateVerdict",
    "GeneratedDataset",
    "Promotion",
    "PublishedDataset",
    "Registration",
    "ReportSummary",
    "RunParams",
    "RunSummary",
    "StartingPoint",
    "SubmittedJob",
    "TrainingPlan",
    "TrainingResult",
    "ValidatedDataset",
]

ToolMode = Literal["mock", "replay", "live", "real"]
Backend = Literal["cpu", "verl"]
Verdict = Literal["promote", "reject"]


class Contract(BaseModel):
    """Frozen, no unknown keys, each field's docstring is its description."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


# --- the dataset DAG -------------------------------------------------------------------


class GeneratedDataset(Contract):
    """`generate`: a new version written to staging, not yet validated."""

    staging_dir: str
    """Where the version was written; it moves under data_root only once it validated."""
    dataset_version: str
    """The version's name: a hash of its content (manifest.json)."""
    rows: int = Field(ge=0)
    """Rows written, train and test together."""
    pack: str | None = None
    """The task pack it was generated from (None: the built-in generator)."""
    call_store_digest: str | None = None
    """With a pack: the digest of the call store its ground truth was recorded into."""


class ValidatedDataset(Contract):
    """`validate`: the great-expectations suite passed (a failure raises, it returns nothing)."""

    checks: int = Field(ge=0)
    """How many checks ran (all passed)."""
    data_docs: str | None = None
    """The Data Docs HTML of the run (None: not built)."""


class PublishedDataset(Contract):
    """`publish`: a validated version in place; also the Asset event's extra."""

    dataset_version: str
    """The version's name (the directory's name)."""
    dataset_dir: str
    """The published version's directory under data_root."""
    uri: str
    """Where consumers read it: the S3 mirror when configured, else `dataset_dir`."""
    train: str
    """Its train.parquet."""
    test: str
    """Its test.parquet (the held-out split the evaluation uses)."""
    data_docs: str
    """great-expectations' Data Docs page (needs the network for its scripts)."""
    validation_page: str
    """The self-contained validation page."""


# --- the retraining DAG ----------------------------------------------------------------


class RunParams(Contract):
    """The retraining DAG's params (empty values: the pipeline config's)."""

    spec: str = ""
    """TrainingSpec YAML to train (empty: the config's `training_spec`)."""
    thresholds: str = ""
    """Gate thresholds YAML (empty: the config's `thresholds`)."""
    backend: Literal["", "cpu", "verl"] = ""
    """Training backend (empty: the config's `training_backend`)."""
    dataset_dir: str = ""
    """A published dataset version to train on, for hand runs (empty: the Asset events)."""
    dry_run: bool = False
    """Plan and validate only: nothing is submitted."""
    eval_limit: int = Field(default=0, ge=0)
    """Evaluate at most this many held-out cases (0: the config's `eval_limit`)."""


class DatasetChoice(Contract):
    """The dataset version a run trains on, checked to be a published, validated one."""

    dataset_version: str
    """The version's name."""
    dataset_dir: str
    """Its directory."""
    train: str
    """Its train.parquet."""
    test: str
    """Its test.parquet."""
    superseded: tuple[str, ...] = ()
    """Older versions this run's Asset events also announced, not trained on."""


class StartingPoint(Contract):
    """Which weights the run starts from (`model.start_from` in the spec)."""

    start: str
    """"base", or "champion vN" when it continues from the current champion."""
    parent_version: str | None = None
    """The champion version it continues from (None: the base model)."""
    why: str | None = None
    """Why it starts from the base although the spec asked for the champion."""


class TrainingPlan(Contract):
    """`plan_spec`: everything this run will do, decided once, before any GPU is booked."""

    spec_path: str
    """The run's own spec (dataset, checkpoint dir and starting weights filled in)."""
    workdir: str
    """The run's working directory (jobs, evaluation, gate decision)."""
    spec_hash: str
    """Hash of the run's spec, for the lineage."""
    dataset_version: str
    """The dataset version it trains on."""
    dataset_superseded: tuple[str, ...] = ()
    """Versions announced by this run's Asset events that the newer one replaces."""
    warnings: tuple[str, ...] = ()
    """What verl's validation warned about (verl backend only)."""
    base_model: str
    """The spec's base model, as written (before any champion continuation)."""
    starting_point: StartingPoint
    """Which weights it starts from."""
    tool_mode: ToolMode
    """The tools the rollouts call: the spec's tools.mode (replay for a pack dataset)."""
    tool_store_digest: str | None = None
    """In replay: the digest of the recording served."""
    backend: Backend
    """Where it trains: cpu (TRL) or verl (GPU cluster)."""
    thresholds: str
    """The gate's thresholds YAML."""
    eval_backend: Literal["cpu", "transformers"] = "cpu"
    """The model server the evaluation drives on CPU."""
    eval_limit: int | None = None
    """Held-out cases evaluated at most (None: all)."""
    dry_run: bool = False
    """Plan only: the run stops after this task."""


class SubmittedJob(Contract):
    """`submit_training`: the Ray job (idempotent per run) and where it leaves its result."""

    submission_id: str
    """The Ray Jobs submission id, derived from the spec name and the DAG run id."""
    result_dir: str
    """The job's working directory, where it writes result.json."""


class ReportSummary(Contract):
    """One evaluation report: where it is, and its headline numbers."""

    path: str
    """The report JSON (the HTML is beside it)."""
    cases_total: int = Field(ge=0)
    """Cases evaluated."""
    overall: dict[str, float] = Field(default_factory=dict)
    """The report's finite `metrics.overall` numbers (selection, exact call, ...)."""

    @classmethod
    def of(cls, path: str, cases_total: int, metrics: dict[str, Any]) -> ReportSummary:
        """From a report's fields; non-numeric and non-finite overall entries are left out."""
        overall = metrics.get("overall")
        numbers = {
            key: float(value)
            for key, value in (overall.items() if isinstance(overall, dict) else ())
            if isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
        }
        return cls(path=path, cases_total=cases_total, overall=numbers)


class Evaluation(Contract):
    """`evaluate`: the candidate, and the current champion on the same held-out data."""

    candidate: ReportSummary
    """The candidate's report."""
    champion: ReportSummary | None = None
    """The champion's report on the same data (None: no champion yet)."""
    champion_version: str | None = None
    """The champion's registry version (None: no champion yet)."""


class EvaluationRequest(Contract):
    """`evaluate` on a cluster: what the evaluation job needs, written into the run dir on
    shared storage (`training/pipeline/evaluation_job.py` reads it on a Ray node)."""

    plan: TrainingPlan
    """The run's plan (test file, eval size and backend, tools)."""
    result: TrainingResult
    """The training job's result (the candidate's merged model)."""
    mcp_url: str
    """The tool server the run trained against (the `toolrl_mcp` connection)."""
    tracking_uri: str
    """MLflow, where the champion to compare with is resolved and downloaded."""


class GateVerdict(Contract):
    """`gate`: the decision, with the file that explains it check by check."""

    decision: Verdict
    """promote or reject."""
    reasons: tuple[str, ...] = ()
    """One line per failed check (empty when promoted)."""
    path: str
    """gate_decision.json: every check (metric, value, threshold, champion value)."""


class Registration(Contract):
    """`register`: the candidate's registry version (alias `challenger`)."""

    name: str
    """Registered model name."""
    version: str
    """Its version."""
    created: bool
    """False when an earlier attempt of this run had already registered it."""


class Promotion(Contract):
    """`promote`: the gate's decision recorded on the version; `champion` moved if it says so."""

    name: str
    """Registered model name."""
    version: str
    """The candidate's version."""
    aliases: tuple[str, ...] = ()
    """The version's aliases afterwards."""
    promoted: bool
    """Whether it is now `champion`."""

    def champion_event_extra(self) -> dict[str, str]:
        """The `toolrl_champion_model` Asset event's extra."""
        return {
            "model_name": self.name,
            "version": self.version,
            "uri": f"models:/{self.name}/{self.version}",
        }


class RunSummary(Contract):
    """`notify`: the run's outcome in one place."""

    summary: str
    """What the log and an alert show: version, verdict, serving, reasons."""
    decision: Verdict
    """The gate's decision."""
    serving: str
    """Whether serving picks the promotion up."""
    promotion: Promotion
    """The version and its aliases afterwards."""
