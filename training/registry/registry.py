"""Register merged checkpoints in the MLflow model registry and move its aliases.

Aliases, not stages (deprecated in MLflow 3): a new version gets `challenger`; the gate alone
moves `champion` (the version it replaces keeps `previous`); rollback moves `champion` back.
Serving loads `models:/NAME@champion`, so deploy and rollback are alias moves.

Idempotency: every registration carries a run key (the DAG run id). A re-run of the same
DAG run finds the version (and the MLflow run holding the weights) by that key and returns
it instead of registering twice. Weights go to the artifact store through the tracking
server (S3 in production, via boto3); lineage goes into version tags (see LINEAGE_TAGS).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from serving.launch.champion import SAFE_NAME as _SAFE
from serving.launch.champion import RegistryError as RegistryError
from serving.launch.champion import VersionInfo as VersionInfo
from serving.launch.champion import check_name as _check_name
from serving.launch.champion import download as download
from serving.launch.champion import mlflow_client as _client
from serving.launch.champion import resolve as resolve
from serving.launch.champion import version_info as _info

EXPERIMENT = "toolrl-registry"
TAG = "toolrl."
RUN_KEY_TAG = "toolrl.run_key"
PREVIOUS_TAG = "toolrl.previous_champion"
STATUS_TAG = "validation_status"
CHAMPION, CHALLENGER, PREVIOUS = "champion", "challenger", "previous"


class Lineage(BaseModel):
    """Where a candidate came from; each field becomes a `toolrl.<field>` version tag."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_key: str = Field(pattern=_SAFE.pattern)
    """Idempotency key: the DAG run id (same key, same version)."""
    dataset_version: str = Field(min_length=1, max_length=250)
    dataset_validation: Literal["passed", "failed", "unknown"] = "unknown"
    training_run_id: str | None = Field(default=None, max_length=250)
    spec_hash: str | None = Field(default=None, max_length=250)
    git_sha: str | None = Field(default=None, max_length=250)
    call_format: Literal["hermes", "qwen3_coder"] = "hermes"
    """The model's tool-call syntax: serving picks vLLM's parser from it."""
    base_model: str | None = Field(default=None, max_length=250)
    parent_version: str | None = Field(default=None, max_length=250)
    """The champion version this candidate continued from (None: trained from the base)."""
    tool_mode: Literal["mock", "replay", "live", "real"] | None = None
    """Which tools the rollouts called (the spec's tools.mode); None: not recorded."""
    tool_store_digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """replay: `CallStore.digest()` of the recording served, so a registered model names the
    exact recorded results it trained against."""
    candidate_stage: Literal["grpo", "sft"] | None = None
    """Whose weights the version holds where the training run chose: `sft` when GRPO's model
    came out measurably worse than its SFT start (`training.cpu_backend.candidate_choice`)."""


def find_by_run_key(tracking_uri: str, name: str, run_key: str) -> VersionInfo | None:
    client = _client(tracking_uri)
    found = client.search_model_versions(
        f"name='{_check_name(name)}' and tags.`{RUN_KEY_TAG}` = '{_check_name(run_key)}'"
    )
    return _info(sorted(found, key=lambda v: int(v.version))[0]) if found else None


def _weights_run(client: Any, run_key: str, model_dir: Path, lineage: Lineage) -> str:
    """The MLflow run holding this run key's weights: reused if a finished one exists."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(EXPERIMENT)
    try:
        experiment_id = (
            experiment.experiment_id if experiment else client.create_experiment(EXPERIMENT)
        )
    except MlflowException:  # created concurrently
        experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{RUN_KEY_TAG}` = '{run_key}' and attributes.status = 'FINISHED'",
        max_results=1,
    )
    if runs:
        return str(runs[0].info.run_id)
    tags = {f"{TAG}{k}": str(v) for k, v in lineage.model_dump().items() if v is not None}
    run = client.create_run(experiment_id, tags=tags, run_name=f"register-{run_key}"[:250])
    run_id = str(run.info.run_id)
    try:
        client.log_artifacts(run_id, str(model_dir), "model")
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")
    return run_id


def register_candidate(
    tracking_uri: str,
    name: str,
    model_dir: Path,
    lineage: Lineage,
    eval_report: Path | None = None,
) -> VersionInfo:
    """Upload the merged checkpoint and register it as a version with alias `challenger`
    and `validation_status=pending`. Same run key -> the existing version, untouched."""
    from mlflow.exceptions import MlflowException

    _check_name(name)
    if not (model_dir / "config.json").is_file():
        raise RegistryError(f"{model_dir} is not a Hugging Face model dir (no config.json)")
    existing = find_by_run_key(tracking_uri, name, lineage.run_key)
    if existing is not None:
        return existing
    client = _client(tracking_uri)
    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
            raise
    run_id = _weights_run(client, lineage.run_key, model_dir, lineage)
    tags = {f"{TAG}{k}": str(v) for k, v in lineage.model_dump().items() if v is not None}
    tags[STATUS_TAG] = "pending"
    if eval_report is not None:
        client.log_artifact(run_id, str(eval_report), "eval")
        html = eval_report.with_suffix(".html")
        if html.is_file():
            client.log_artifact(run_id, str(html), "eval")
        tags[f"{TAG}eval_report"] = f"runs:/{run_id}/eval/{eval_report.name}"
        tags.update(_eval_tags(eval_report))
    version = client.create_model_version(
        name, source=f"runs:/{run_id}/model", run_id=run_id, tags=tags
    )
    client.set_registered_model_alias(name, CHALLENGER, version.version)
    return _info(client.get_model_version(name, version.version), created=True)


def _eval_tags(report_path: Path) -> dict[str, str]:
    from training.evaluation.report import load_report

    overall = load_report(report_path).metrics.get("overall", {})
    keys = ("pass_rate", "tool_selection_accuracy", "argument_accuracy", "malformed_call_rate")
    return {f"{TAG}eval.{k}": str(overall.get(k)) for k in keys}


def record_gate(tracking_uri: str, name: str, version: str, decision_path: Path) -> VersionInfo:
    """Attach the gate's decision (tag + artifact); promote when it says so, else mark the
    version rejected. Re-running with the same decision changes nothing."""
    decision = json.loads(decision_path.read_text())
    verdict = decision.get("decision") if isinstance(decision, dict) else None
    if verdict not in ("promote", "reject"):
        raise RegistryError(f"{decision_path}: not a gate decision")
    client = _client(tracking_uri)
    current = client.get_model_version(_check_name(name), version)
    if current.run_id:
        client.log_artifact(current.run_id, str(decision_path), "gate")
    client.set_model_version_tag(name, version, f"{TAG}gate_decision", verdict)
    reasons = "; ".join(decision.get("reasons", []))[:4000]
    client.set_model_version_tag(name, version, f"{TAG}gate_reasons", reasons or "-")
    if verdict == "promote":
        return promote(tracking_uri, name, version)
    client.set_model_version_tag(name, version, STATUS_TAG, "rejected")
    return _info(client.get_model_version(name, version))


def _alias_version(client: Any, name: str, alias: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def promote(tracking_uri: str, name: str, version: str) -> VersionInfo:
    """`champion` -> version; the replaced champion keeps `previous`. Idempotent."""
    client = _client(tracking_uri)
    client.get_model_version(_check_name(name), version)  # raises if absent
    old = _alias_version(client, name, CHAMPION)
    if old != version:
        if old is not None:
            client.set_registered_model_alias(name, PREVIOUS, old)
            client.set_model_version_tag(name, version, PREVIOUS_TAG, old)
        client.set_registered_model_alias(name, CHAMPION, version)
    client.set_model_version_tag(name, version, STATUS_TAG, "promoted")
    if _alias_version(client, name, CHALLENGER) == version:
        client.delete_registered_model_alias(name, CHALLENGER)
    return _info(client.get_model_version(name, version))


def rollback(tracking_uri: str, name: str) -> VersionInfo:
    """Move `champion` back to `previous`; `previous` moves one further back (or goes)."""
    client = _client(tracking_uri)
    target = _alias_version(client, _check_name(name), PREVIOUS)
    current = _alias_version(client, name, CHAMPION)
    if target is None:
        raise RegistryError(f"{name} has no '{PREVIOUS}' version to roll back to")
    client.set_registered_model_alias(name, CHAMPION, target)
    if current is not None:
        client.set_model_version_tag(name, current, STATUS_TAG, "rolled_back")
    before = client.get_model_version(name, target).tags.get(PREVIOUS_TAG)
    if before and before != target:
        client.set_registered_model_alias(name, PREVIOUS, before)
    else:
        client.delete_registered_model_alias(name, PREVIOUS)
    return _info(client.get_model_version(name, target))
