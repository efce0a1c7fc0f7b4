"""Evaluate -> gate -> register -> promote, as the retraining DAG runs them.

Idempotent per DAG run: the evaluation resumes from its journal, registration is keyed by
the run id, and applying the same decision twice changes nothing. Each stage takes and
returns the contracts of `training.pipeline.contracts`.
"""

from __future__ import annotations

import os
from pathlib import Path

from training.pipeline.contracts import (
    Evaluation,
    GateVerdict,
    Promotion,
    Registration,
    ReportSummary,
    RunSummary,
    TrainingPlan,
    TrainingResult,
)
from training.pipeline.retraining_stage import (
    StageError,
    evaluate_model,
    git_sha,
    model_name,
    planned_tools,
)


def evaluate_candidate_and_champion(
    plan: TrainingPlan,
    result: TrainingResult,
    mcp_url: str,
    tracking_uri: str,
    mcp_token: str | None = None,
) -> Evaluation:
    """Evaluate the candidate, and the current champion on the same test file (so the gate
    compares like with like), each on at most `plan.eval_limit` cases with the plan's eval
    backend. No champion yet: only the candidate is evaluated. `mcp_token` is the tool
    server's bearer token (the `toolrl_mcp` connection's password; a replay server the run
    starts itself needs none)."""
    from training.registry.registry import RegistryError, download, resolve

    merged = result.merged_model_dir
    if not merged or not Path(merged).is_dir():
        raise StageError(f"training produced no merged model directory ({merged!r})")
    workdir = Path(plan.workdir) / "eval"
    test_file, max_turns = _test_file_and_turns(plan)
    limit, backend = plan.eval_limit, plan.eval_backend
    with planned_tools(plan, mcp_url) as tools_url:  # replay: the plan's own store
        token = mcp_token if tools_url == mcp_url else None  # not ours to a private replay
        candidate = evaluate_model(
            merged,
            test_file,
            tools_url,
            workdir / "candidate.json",
            limit,
            backend,
            max_turns,
            token,
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
                token,
            )
    return Evaluation(
        candidate=summarize_report(candidate),
        champion=summarize_report(champion_report) if champion_report else None,
        champion_version=info.version if info else None,
    )


def summarize_report(path: str) -> ReportSummary:
    """A report's path and headline numbers, for the hand-over to the gate."""
    from training.evaluation.report import load_report

    report = load_report(Path(path))
    return ReportSummary.of(path, report.cases_total, report.metrics)


def attach_training_plots(report_path: Path, plots: Path) -> list[Path]:
    """Re-render the candidate's HTML with the training stage's plots embedded (the JSON,
    which the gate reads, is unchanged)."""
    from training.evaluation.report import load_report, write_report

    figures = sorted(plots.glob("*.png")) if plots.is_dir() else []
    if figures:
        write_report(load_report(report_path), report_path, figures)
    return figures


def _test_file_and_turns(plan: TrainingPlan) -> tuple[str, int]:
    """The held-out file and the turn limit the candidate was trained with (the eval
    gives it the same number of model responses per episode as its rollouts had)."""
    from training.spec.model import load_spec

    spec = load_spec(Path(plan.spec_path))
    return spec.data.test_files[0], spec.rollout.max_turns


def gate_candidate(
    evaluation: Evaluation, result: TrainingResult, thresholds_path: str
) -> GateVerdict:
    """Thresholds, no regression against the champion, and a training that reached its
    planned step; the decision is written beside the candidate's report."""
    from training.evaluation.gate import (
        RESULT_STOP_REASONS,
        TrainingOutcome,
        decide,
        load_thresholds,
    )
    from training.evaluation.report import load_report

    candidate = load_report(Path(evaluation.candidate.path))
    champion = load_report(Path(evaluation.champion.path)) if evaluation.champion else None
    outcome = TrainingOutcome(
        planned_final_step=result.planned_step,
        final_step=result.final_step,
        stop_reason=RESULT_STOP_REASONS.get(result.status, "unknown"),
    )
    decision = decide(candidate, load_thresholds(Path(thresholds_path)), champion, outcome)
    path = Path(evaluation.candidate.path).with_name("gate_decision.json")
    path.write_text(decision.model_dump_json(indent=2) + "\n")
    return GateVerdict(decision=decision.decision, reasons=tuple(decision.reasons), path=str(path))


def register_candidate_version(
    tracking_uri: str,
    plan: TrainingPlan,
    result: TrainingResult,
    evaluation: Evaluation,
    run_key: str,
) -> Registration:
    """Register the candidate as `challenger` with its lineage (idempotent per run key)."""
    from training.registry.registry import Lineage, register_candidate
    from training.spec.model import load_spec

    if not result.merged_model_dir:
        raise StageError("training produced no merged model directory to register")
    spec = load_spec(Path(plan.spec_path))
    lineage = Lineage(
        run_key=_registry_key(run_key),
        dataset_version=plan.dataset_version,
        dataset_validation="passed",
        training_run_id=result.mlflow_run_id,
        spec_hash=plan.spec_hash,
        git_sha=git_sha(),
        call_format=spec.model.call_format,
        base_model=(plan.base_model or spec.model.path)[:250],
        parent_version=plan.starting_point.parent_version,
        tool_mode=plan.tool_mode,
        tool_store_digest=plan.tool_store_digest,
        candidate_stage=result.candidate_stage,
    )
    info = register_candidate(
        tracking_uri,
        model_name(),
        Path(result.merged_model_dir),
        lineage,
        Path(evaluation.candidate.path),
    )
    return Registration(name=info.name, version=info.version, created=info.created)


def _registry_key(run_key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run_key)[:200]


def apply_decision(
    tracking_uri: str, registration: Registration, verdict: GateVerdict
) -> Promotion:
    """Record the gate's decision on the version; `champion` moves only on promote."""
    from training.registry.registry import record_gate

    info = record_gate(tracking_uri, registration.name, registration.version, Path(verdict.path))
    return Promotion(
        name=info.name,
        version=info.version,
        aliases=tuple(info.aliases),
        promoted="champion" in info.aliases and verdict.decision == "promote",
    )


def confirm_serving(promotion: Promotion) -> str:
    """Serving watches `@champion` and switches blue/green by itself; here we only report
    whether a serving front door is configured to pick the promotion up."""
    url = os.environ.get("TOOLRL_SERVING_URL")
    if not promotion.promoted:
        return "no promotion: serving keeps the current champion"
    if not url:
        return "promoted; no serving endpoint configured (TOOLRL_SERVING_URL unset)"
    return f"promoted; serving at {url} reloads models:/{promotion.name}@champion"


def summary(promotion: Promotion, verdict: GateVerdict, served: str) -> RunSummary:
    """The run's outcome, printed to the task log and returned as the last hand-over."""
    lines = [f"{promotion.name} v{promotion.version}: gate {verdict.decision.upper()}", served]
    lines += [f"  - {reason}" for reason in verdict.reasons]
    text = "\n".join(lines)
    print(text)
    return RunSummary(summary=text, decision=verdict.decision, serving=served, promotion=promotion)
