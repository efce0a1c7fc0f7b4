"""The typed hand-overs between pipeline stages (training/pipeline/contracts.py): every
model is frozen, rejects unknown keys and documents each field; each survives the JSON an
XCom carries; and the stages take and return them (plan, gate, promotion, summary) offline."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from testkit.pipeline_specs import lenient_thresholds, published_version, tiny_spec
from training.evaluation.report import EvalReport, EvalSource, write_report
from training.pipeline import contracts
from training.pipeline.config import REPO_ROOT, PipelineConfig
from training.pipeline.contracts import (
    DatasetChoice,
    Evaluation,
    GateVerdict,
    Promotion,
    ReportSummary,
    RunParams,
    StartingPoint,
    TrainingPlan,
    TrainingResult,
)
from training.pipeline.gate_stage import confirm_serving, gate_candidate, summary
from training.pipeline.retraining_stage import StageError, plan_run, prepare_spec
from training.spec.model import load_spec

MODELS: list[type[BaseModel]] = [getattr(contracts, name) for name in contracts.__all__]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_contract_is_frozen_strict_and_documented(model: type[BaseModel]) -> None:
    assert model.model_config.get("frozen") is True, model
    assert model.model_config.get("extra") == "forbid", model
    undocumented = [name for name, f in model.model_fields.items() if not f.description]
    assert undocumented == [], f"{model.__name__}: fields without a docstring: {undocumented}"


def test_training_result_is_the_jobs_own_model_not_a_copy() -> None:
    from training.jobs import result

    assert contracts.TrainingResult is result.TrainingResult


def _plan(**changes: Any) -> TrainingPlan:
    fields: dict[str, Any] = {
        "spec_path": "/w/spec.yaml",
        "workdir": "/w",
        "spec_hash": "abc",
        "dataset_version": "v2",
        "dataset_superseded": ["v1"],
        "base_model": "tiny://hermes",
        "starting_point": {"start": "base", "why": "no champion yet"},
        "tool_mode": "mock",
        "backend": "cpu",
        "thresholds": "/t.yaml",
    }
    return TrainingPlan.model_validate(fields | changes)


SAMPLES: list[BaseModel] = [
    _plan(),
    TrainingResult(status="succeeded", final_step=4, planned_step=4, spec_hash="abc"),
    Evaluation(
        candidate=ReportSummary(path="/e/c.json", cases_total=3, overall={"error_rate": 0.0}),
        champion=ReportSummary(path="/e/h.json", cases_total=3),
        champion_version="1",
    ),
    GateVerdict(decision="reject", reasons=("too slow",), path="/e/gate_decision.json"),
    Promotion(name="toolrl", version="2", aliases=("challenger",), promoted=False),
]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).__name__)
def test_a_contract_survives_the_json_an_xcom_carries(sample: BaseModel) -> None:
    carried = json.loads(json.dumps(sample.model_dump(mode="json")))
    assert type(sample).model_validate(carried) == sample


def test_a_misspelt_or_missing_key_fails_at_the_hand_over_naming_it() -> None:
    carried = _plan().model_dump(mode="json")
    with pytest.raises(ValidationError, match="spec_pth"):
        TrainingPlan.model_validate({**carried, "spec_pth": "/x"})
    del carried["thresholds"]
    with pytest.raises(ValidationError, match="thresholds"):
        TrainingPlan.model_validate(carried)
    with pytest.raises(ValidationError, match="frozen"):
        _plan().dry_run = True  # type: ignore[misc]


def test_a_report_summary_keeps_only_finite_numbers() -> None:
    summary_ = ReportSummary.of(
        "/r.json", 5, {"overall": {"a": 0.5, "b": float("nan"), "c": "x", "d": True, "e": 2}}
    )
    assert summary_.overall == {"a": 0.5, "e": 2.0}
    assert ReportSummary.of("/r.json", 0, {}).overall == {}


def test_the_plan_records_every_choice_of_the_run(tmp_path: Path) -> None:
    """`plan_spec`: the newest of the run's own events, the spec written, and the params'
    overrides of the config (backend, thresholds, eval size, dry run) in one typed plan."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec("contract-tiny")))
    old, new = (
        published_version(tmp_path / "data", "v1"),
        published_version(tmp_path / "data", "v2"),
    )
    config = PipelineConfig(
        data_root=str(tmp_path / "data"),
        workdir=str(tmp_path / "runs"),
        training_spec=str(spec),
        eval_limit=7,
    )
    events = [{"dataset_dir": str(p), "dataset_version": p.name} for p in (old, new)]
    plan = plan_run(config, RunParams(), events, "manual__1", tracking_uri=None)
    assert plan.dataset_version == "v2" and plan.dataset_superseded == ("v1",)
    assert (plan.backend, plan.thresholds, plan.eval_limit) == ("cpu", config.thresholds, 7)
    assert plan.starting_point == StartingPoint(start="base")
    assert plan.dry_run is False and plan.tool_mode == "mock"
    written = yaml.safe_load(Path(plan.spec_path).read_text())
    assert written["data"]["train_files"] == [str(new / "train.parquet")]
    assert Path(plan.workdir) == tmp_path / "runs" / "manual__1"

    strict = tmp_path / "strict.yaml"
    strict.write_text((REPO_ROOT / "training/specs/thresholds_demo.yaml").read_text())
    params = RunParams(thresholds=str(strict), eval_limit=2, dry_run=True, dataset_dir=str(old))
    hand = plan_run(config, params, events, "manual__2")
    assert (hand.dataset_version, hand.thresholds, hand.eval_limit) == ("v1", str(strict), 2)
    assert hand.dry_run is True
    with pytest.raises(StageError, match="does not exist"):
        plan_run(config, RunParams(dataset_dir=str(tmp_path / "nope")), None, "manual__3")
    choice = DatasetChoice.model_validate(
        {"dataset_version": "v1", "dataset_dir": str(old), "train": "t", "test": "s"}
    )
    assert prepare_spec(config, choice, "manual__4").dataset_superseded == ()


def _report(path: Path, error_rate: float) -> str:
    report = EvalReport(
        created_at="2026-01-01T00:00:00+00:00",
        source=EvalSource(
            endpoint="http://x/v1", model="m", mode="chat", data_path="t.parquet",
            data_sha256="same", max_turns=2,
        ),
        cases_total=3,
        metrics={"overall": {"error_rate": error_rate}},
    )  # fmt: skip
    return str(write_report(report, path))


def test_gate_promotion_and_summary_hand_over_typed_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thresholds = tmp_path / "lenient.yaml"
    thresholds.write_text(yaml.safe_dump(lenient_thresholds()))
    candidate = _report(tmp_path / "eval" / "candidate.json", 0.0)
    evaluation = Evaluation(candidate=ReportSummary(path=candidate, cases_total=3))
    done = TrainingResult(status="succeeded", final_step=4, planned_step=4, spec_hash="h")
    verdict = gate_candidate(evaluation, done, str(thresholds))
    assert verdict.decision == "promote" and verdict.reasons == ()
    assert json.loads(Path(verdict.path).read_text())["decision"] == "promote"

    short = done.model_copy(update={"final_step": 2, "status": "incomplete"})
    rejected = gate_candidate(evaluation, short, str(thresholds))
    assert rejected.decision == "reject" and rejected.reasons

    promoted = Promotion(name="toolrl", version="3", aliases=("champion",), promoted=True)
    assert promoted.champion_event_extra() == {
        "model_name": "toolrl",
        "version": "3",
        "uri": "models:/toolrl/3",
    }
    monkeypatch.delenv("TOOLRL_SERVING_URL", raising=False)
    served = confirm_serving(promoted)
    assert served.startswith("promoted; no serving endpoint")
    outcome = summary(promoted, verdict, served)
    assert outcome.promotion == promoted and outcome.decision == "promote"
    assert outcome.summary.splitlines()[0] == "toolrl v3: gate PROMOTE"
    kept = Promotion(name="toolrl", version="4", promoted=False)
    assert confirm_serving(kept) == "no promotion: serving keeps the current champion"
    text = summary(kept, rejected, confirm_serving(kept)).summary
    assert "gate REJECT" in text and all(f"  - {r}" in text for r in rejected.reasons)


def test_a_relative_spec_or_thresholds_path_names_a_file_shipped_with_toolrl(
    tmp_path: Path,
) -> None:
    """The compose stack's config and the `toolrl_training_spec` Variable name shipped specs
    relatively (toolrl lives in site-packages in the image): resolved against the package
    root, in the config and in a run's params alike; absolute paths pass untouched."""
    config = PipelineConfig(
        training_spec="training/specs/cpu_tiny.yaml",
        thresholds="training/specs/thresholds_demo.yaml",
    )
    assert config.training_spec == str(REPO_ROOT / "training" / "specs" / "cpu_tiny.yaml")
    assert Path(config.training_spec).is_file() and Path(config.thresholds).is_file()
    assert PipelineConfig(training_spec="/abs/spec.yaml").training_spec == "/abs/spec.yaml"
    old = published_version(tmp_path / "data", "v1")
    plan = plan_run(
        PipelineConfig(data_root=str(tmp_path / "data"), workdir=str(tmp_path / "runs")),
        RunParams(
            spec="training/specs/cpu_tiny.yaml", thresholds="training/specs/thresholds_demo.yaml"
        ),
        [{"dataset_dir": str(old), "dataset_version": "v1"}],
        "manual__shipped",
    )
    assert (
        yaml.safe_load(Path(plan.spec_path).read_text())["name"]
        == load_spec(REPO_ROOT / "training" / "specs" / "cpu_tiny.yaml").name
    )
    assert plan.thresholds == str(REPO_ROOT / "training" / "specs" / "thresholds_demo.yaml")


def test_the_run_dir_is_writable_by_its_group_for_the_ray_job(tmp_path: Path) -> None:
    """Airflow's tasks (uid 50000) write a run dir the Ray job (uid 1000) writes its
    checkpoints into, both in group 0 on the shared volume: group-writable, setgid."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec("shared-tiny")))
    old = published_version(tmp_path / "data", "v1")
    config = PipelineConfig(
        data_root=str(tmp_path / "data"), workdir=str(tmp_path / "runs"), training_spec=str(spec)
    )
    plan = plan_run(
        config, RunParams(), [{"dataset_dir": str(old), "dataset_version": "v1"}], "manual__group"
    )
    mode = Path(plan.workdir).stat().st_mode
    assert mode & stat.S_IWGRP and mode & stat.S_IXGRP and mode & stat.S_ISGID


@pytest.mark.parametrize("thresholds", ["training/specs/no_such.yaml", "pyproject.toml"])
def test_unreadable_gate_thresholds_are_refused_at_planning(
    tmp_path: Path, thresholds: str
) -> None:
    """A typo in the `toolrl_gate_thresholds` Variable (or a file that is not thresholds) fails
    `plan_spec` with the path named, before any training, not at the gate an hour later."""
    old = published_version(tmp_path / "data", "v1")
    with pytest.raises(StageError, match="gate thresholds"):
        plan_run(
            PipelineConfig(data_root=str(tmp_path / "data"), workdir=str(tmp_path / "runs")),
            RunParams(spec="training/specs/cpu_tiny.yaml", thresholds=thresholds),
            [{"dataset_dir": str(old), "dataset_version": "v1"}],
            "manual__bad_thresholds",
        )
