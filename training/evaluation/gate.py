"""The promotion gate: promote a candidate only if it clears absolute thresholds AND does not
regress against the champion on the same data AND its training really finished.

Every check is recorded (metric, value, threshold, champion value, verdict) so the decision
explains itself metric by metric; the DAG reads `decision` from the JSON and the exit code
(0 promote, 1 reject, 2 unusable input). Missing evidence rejects: a metric the candidate's
report lacks cannot pass a threshold, a champion evaluated on other data cannot be compared,
a training that stopped short of its planned step (a resumed job can exit 0 having trained
0 steps) or was stopped by the format-drift guard is not a candidate.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from training.evaluation.report import EvalReport

GATE_SCHEMA_VERSION = 1
MAX_FILE_BYTES = 1024 * 1024
EXIT_PROMOTE, EXIT_REJECT, EXIT_INVALID = 0, 1, 2


class GateInputError(ValueError):
    """A thresholds or training-status file that cannot be used (exit code 2)."""


class Bound(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min: float | None = Field(default=None, allow_inf_nan=False)
    max: float | None = Field(default=None, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_side_at_least(self) -> Bound:
        if self.min is None and self.max is None:
            raise ValueError("a bound needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min is greater than max")
        return self


class Regression(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    direction: Literal["higher", "lower"] = "higher"
    """Which way is better for this metric."""
    tolerance: float | None = Field(default=None, ge=0.0, le=1e6, allow_inf_nan=False)
    """Allowed worsening (absolute); None uses the default tolerance."""


class Thresholds(BaseModel):
    """`thresholds.yaml`: metric paths are dotted keys into the report's `metrics`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = 1
    absolute: dict[str, Bound] = Field(default_factory=dict)
    regression: dict[str, Regression] = Field(default_factory=dict)
    default_tolerance: float = Field(default=0.02, ge=0.0, le=1e6, allow_inf_nan=False)
    require_same_data: bool = True
    """Reject when the champion's report was made on different data."""
    require_final_step: bool = True
    reject_drift_stop: bool = True
    accept_sft_only: bool = True
    """A run whose format guard gave GRPO's steps to SFT (status `sft_only`) planned no GRPO
    step, and reached what it planned: judged on the metrics like any other. False: reject
    such a candidate for not being RL-trained."""

    @model_validator(mode="after")
    def _paths(self) -> Thresholds:
        for path in [*self.absolute, *self.regression]:
            if not path or len(path) > 200 or any(not part for part in path.split(".")):
                raise ValueError(f"bad metric path {path[:60]!r}")
        return self


class TrainingOutcome(BaseModel):
    """How the candidate's training ended (from the training job's status)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    planned_final_step: int = Field(ge=0)
    final_step: int = Field(ge=0)
    """The last step actually trained (checkpointed), not the one the job was asked for."""
    stop_reason: Literal["completed", "sft_only", "format_drift", "error", "unknown"] = "completed"
    """sft_only: complete, with GRPO's planned steps given to SFT by the format guard."""


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["absolute", "regression", "training", "data"]
    passed: bool
    metric: str | None = None
    value: float | None = None
    threshold: float | None = None
    champion: float | None = None
    detail: str = ""


class GateDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = GATE_SCHEMA_VERSION
    decision: Literal["promote", "reject"]
    reasons: list[str]
    """One line per failed check (empty when promoted)."""
    checks: list[Check]
    candidate_model: str
    champion_model: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_PROMOTE if self.decision == "promote" else EXIT_REJECT


def _load_yaml_or_json(path: Path, what: str) -> Any:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise GateInputError(f"{what} {path}: larger than {MAX_FILE_BYTES} bytes")
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except GateInputError:
        raise
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise GateInputError(f"{what} {path}: unreadable ({str(exc)[:200]})") from exc


def _validated(model: type[BaseModel], data: Any, what: str, path: Path) -> Any:
    if not isinstance(data, dict):
        raise GateInputError(f"{what} {path}: expected a mapping at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise GateInputError(f"{what} {path}: {where}: {first['msg']}") from exc


def load_thresholds(path: Path) -> Thresholds:
    result: Thresholds = _validated(
        Thresholds, _load_yaml_or_json(path, "thresholds"), "thresholds", path
    )
    return result


#: `training.jobs.result.TrainingResult.status` -> the gate's stop reason. "incomplete"
#: stopped early without a guard firing: the final-step check is what rejects it.
RESULT_STOP_REASONS = {
    "succeeded": "completed",
    "sft_only": "sft_only",
    "incomplete": "completed",
    "drifted": "format_drift",
    "failed": "error",
}


def load_training_outcome(path: Path) -> TrainingOutcome:
    """A training status file: this model's fields, or a training job's `result.json`
    (`status`, `final_step`, `planned_step`)."""
    data = _load_yaml_or_json(path, "training status")
    if isinstance(data, dict) and "status" in data and "planned_step" in data:
        data = {
            "planned_final_step": data.get("planned_step"),
            "final_step": data.get("final_step"),
            "stop_reason": RESULT_STOP_REASONS.get(str(data.get("status")), "unknown"),
        }
    result: TrainingOutcome = _validated(TrainingOutcome, data, "training status", path)
    return result


def metric(report: EvalReport, path: str) -> float | None:
    """A finite number at a dotted path of `report.metrics`, else None."""
    node: Any = report.metrics
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
        return None
    return float(node)


def _absolute(report: EvalReport, path: str, bound: Bound) -> list[Check]:
    value = metric(report, path)
    checks = []
    for side, limit in (("min", bound.min), ("max", bound.max)):
        if limit is None:
            continue
        if value is None:
            ok, detail = False, "metric missing from the candidate's report"
        else:
            ok = value >= limit if side == "min" else value <= limit
            detail = f"{value:.4g} {'>=' if side == 'min' else '<='} {limit:.4g} required"
        checks.append(
            Check(
                name=f"{path} {side}",
                kind="absolute",
                passed=ok,
                metric=path,
                value=value,
                threshold=limit,
                detail=detail,
            )
        )
    return checks


def _regression(
    candidate: EvalReport, champion: EvalReport, path: str, rule: Regression, default: float
) -> Check:
    tolerance = rule.tolerance if rule.tolerance is not None else default
    value, best = metric(candidate, path), metric(champion, path)
    name = f"{path} vs champion"
    if best is None:
        return Check(
            name=name,
            kind="regression",
            passed=True,
            metric=path,
            value=value,
            detail="champion's report lacks this metric: not compared",
        )
    if value is None:
        return Check(
            name=name,
            kind="regression",
            passed=False,
            metric=path,
            champion=best,
            detail="metric missing from the candidate's report",
        )
    worse = best - value if rule.direction == "higher" else value - best
    return Check(
        name=name,
        kind="regression",
        passed=worse <= tolerance + 1e-12,
        metric=path,
        value=value,
        champion=best,
        threshold=tolerance,
        detail=f"{'worse' if worse > 0 else 'not worse'} by {abs(worse):.4g} "
        f"(tolerance {tolerance:.4g}, {rule.direction} is better)",
    )


def _training(outcome: TrainingOutcome | None, thresholds: Thresholds) -> list[Check]:
    if outcome is None:
        if thresholds.require_final_step:
            return [
                Check(
                    name="training status",
                    kind="training",
                    passed=False,
                    detail="no training status given; cannot prove the run finished",
                )
            ]
        return []
    checks = []
    if thresholds.require_final_step:
        ok = outcome.final_step >= outcome.planned_final_step > 0
        detail = f"trained to step {outcome.final_step} of {outcome.planned_final_step}"
        if outcome.stop_reason == "sft_only":
            ok = thresholds.accept_sft_only and outcome.final_step >= outcome.planned_final_step
            detail = "SFT-only: the format guard gave GRPO's steps to SFT" + (
                "" if thresholds.accept_sft_only else " (accept_sft_only is false)"
            )
        checks.append(
            Check(
                name="training reached final step",
                kind="training",
                passed=ok,
                value=outcome.final_step,
                threshold=outcome.planned_final_step,
                detail=detail,
            )
        )
    if thresholds.reject_drift_stop:
        ok = outcome.stop_reason not in ("format_drift", "error")
        checks.append(
            Check(
                name="training stop reason",
                kind="training",
                passed=ok,
                detail=f"stopped: {outcome.stop_reason}",
            )
        )
    return checks


def decide(
    candidate: EvalReport,
    thresholds: Thresholds,
    champion: EvalReport | None = None,
    training: TrainingOutcome | None = None,
) -> GateDecision:
    """The decision table: every check must pass to promote."""
    checks = _training(training, thresholds)
    for path, bound in thresholds.absolute.items():
        checks.extend(_absolute(candidate, path, bound))
    if champion is not None:
        same = candidate.source.data_sha256 == champion.source.data_sha256
        if thresholds.require_same_data:
            checks.append(
                Check(
                    name="same evaluation data",
                    kind="data",
                    passed=same,
                    detail="champion evaluated on the same data file"
                    if same
                    else "champion's report is on different data: re-evaluate the "
                    "champion on this data first",
                )
            )
        if same or not thresholds.require_same_data:
            checks.extend(
                _regression(candidate, champion, path, rule, thresholds.default_tolerance)
                for path, rule in thresholds.regression.items()
            )
    failed = [c for c in checks if not c.passed]
    return GateDecision(
        decision="reject" if failed else "promote",
        reasons=[f"{c.name}: {c.detail}" for c in failed],
        checks=checks,
        candidate_model=candidate.source.model,
        champion_model=champion.source.model if champion else None,
    )
