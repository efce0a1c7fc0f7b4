"""Evaluate -> gate -> register -> promote, as the retraining DAG runs them.

Idempotent per DAG run: the evaluation resumes from its journal, registration is keyed by
the run id, and applying the same decision twice changes nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from serving.settings import env_var
from training.pipeline.retraining_stage import (
    StageError,
    evaluate_model,
    git_sha,
    planned_tools,
)

STOP_REASONS = {
    "succeeded": "completed",
    "incomplete": "completed",
    "drifted": "format_drift",
    "failed": "error",
}


def model_name() -> str:
    return os.environ.get("TOOLRL_MODEL_NAME") or str(env_var("TOOLRL_MODEL_NAME").default)


def evaluate_candidate_and_champion(
    planned: dict[str, Any],
    result: dict[str, Any],
    mcp_url: str,
    tracking_uri: str,
    limit: int | None,
    backend: str = "cpu",
) -> dict[str, Any]:
    """Evaluate the candidate, and the current champion on the same test file (so the gate
    compares like with like). No champion yet: only the candidate is evaluated."""
    from training.registry.registry import RegistryError, download, resolve

    merged = result.get("merged_model_dir")
    if not merged or not Path(merged).is_dir():
        raise StageError(f"training produced no merged model directory ({merged!r})")
    workdir = Path(planned["workdir"]) / "eval"
    test_file, max_turns = _test_file_and_turns(planned)
    with planned_tools(planned, mcp_url) as tools_url:  # replay: the plan's own store
        candidate = evaluate_model(
            merged, test_file, tools_url, workdir / "candidate.json", limit, backend, max_turns
        )
        attach_training_plots(Path(candidate), Path(merged).parent / "plots")
        champion_report = None
        try:
            info = resolve(tracking_uri, f"models:/{model_name()}@champion")
        except RegistryError:
            info = None
        if info is not None:
            champion_dir = download(tracking_uri, info, workdir / "champion-model")
            champion_report = evaluate_model(
                str(champion_dir),
                test_file,
                tools_url,
                workdir / "champion.json",
                limit,
                backend,
                max_turns,
            )
    return {
        "candidate_report": candidate,
        "champion_report": champion_report,
        "champion_version": info.version if info else None,
    }


def attach_training_plots(report_path: Path, plots: Path) -> list[Path]:
    """Re-render the candidate's HTML with the training stage's plots embedded (the JSON,
    which the gate reads, is unchanged)."""
    from training.evaluation.report import load_report, write_report

    figures = sorted(plots.glob("*.png")) if plots.is_dir() else []
    if figures:
        write_report(load_report(report_path), report_path, figures)
    return figures


def _test_file_and_turns(planned: dict[str, Any]) -> tuple[str, int]:
    """The held-out file and the turn limit the candidate was trained with (the eval
    gives it the same number of model responses per episode as its rollouts had)."""
    from training.spec.model import load_spec

    spec = load_spec(Path(planned["spec_path"]))
    return spec.data.test_files[0], spec.rollout.max_turns


def gate_candidate(
    evaluated: dict[str, Any], result: dict[str, Any], thresholds_path: str
) -> dict[str, Any]:
    from training.evaluation.gate import TrainingOutcome, decide, load_thresholds
    from training.evaluation.report import load_report

    candidate = load_report(Path(evaluated["candidate_report"]))
    champion = (
        load_report(Path(evaluated["champion_report"]))
        if evaluated.get("champion_report")
        else None
    )
    outcome = TrainingOutcome(
        planned_final_step=int(result["planned_step"]),
        final_step=int(result["final_step"]),
        stop_reason=STOP_REASONS.get(result["status"], "unknown"),
    )
    decision = decide(candidate, load_thresholds(Path(thresholds_path)), champion, outcome)
    path = Path(evaluated["candidate_report"]).with_name("gate_decision.json")
    path.write_text(decision.model_dump_json(indent=2) + "\n")
    return {"decision": decision.decision, "reasons": decision.reasons, "path": str(path)}


def register_candidate_version(
    tracking_uri: str,
    planned: dict[str, Any],
    result: dict[str, Any],
    evaluated: dict[str, Any],
    run_key: str,
) -> dict[str, Any]:
    from training.registry.registry import Lineage, register_candidate
    from training.spec.model import load_spec

    spec = load_spec(Path(planned["spec_path"]))
    lineage = Lineage(
        run_key=_registry_key(run_key),
        dataset_version=planned["dataset_version"],
        dataset_validation="passed",
        training_run_id=result.get("mlflow_run_id"),
        spec_hash=planned["spec_hash"],
        git_sha=git_sha(),
        call_format=spec.model.call_format,
        base_model=str(planned.get("base_model") or spec.model.path)[:250],
        parent_version=planned.get("parent_version"),
        tool_mode=planned.get("tool_mode", spec.tools.mode),
        tool_store_digest=planned.get("tool_store_digest"),
    )
    info = register_candidate(
        tracking_uri,
        model_name(),
        Path(result["merged_model_dir"]),
        lineage,
        Path(evaluated["candidate_report"]),
    )
    return {"name": info.name, "version": info.version, "created": info.created}


def _registry_key(run_key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run_key)[:200]


def apply_decision(
    tracking_uri: str, registered: dict[str, Any], decision: dict[str, Any]
) -> dict[str, Any]:
    from training.registry.registry import record_gate

    info = record_gate(
        tracking_uri, registered["name"], registered["version"], Path(decision["path"])
    )
    return {
        "name": info.name,
        "version": info.version,
        "aliases": info.aliases,
        "promoted": "champion" in info.aliases and decision["decision"] == "promote",
    }


def confirm_serving(applied: dict[str, Any]) -> str:
    """Serving watches `@champion` and switches blue/green by itself; here we only report
    whether a serving front door is configured to pick the promotion up."""
    url = os.environ.get("TOOLRL_SERVING_URL")
    if not applied["promoted"]:
        return "no promotion: serving keeps the current champion"
    if not url:
        return "promoted; no serving endpoint configured (TOOLRL_SERVING_URL unset)"
    return f"promoted; serving at {url} reloads models:/{applied['name']}@champion"


def summary(applied: dict[str, Any], decision: dict[str, Any], served: str) -> str:
    verdict = decision["decision"].upper()
    lines = [f"{applied['name']} v{applied['version']}: gate {verdict}", served]
    lines += [f"  - {reason}" for reason in decision.get("reasons", [])]
    text = "\n".join(lines)
    print(text)
    return json.dumps({"summary": text, **applied})
