"""The promotion gate's decision table, its CLI exit codes, and hostile threshold/report files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from training.evaluation.cli import DEFAULT_THRESHOLDS, register_cli
from training.evaluation.gate import (
    GateInputError,
    Thresholds,
    TrainingOutcome,
    decide,
    load_thresholds,
    load_training_outcome,
)
from training.evaluation.report import EvalReport, EvalSource, ReportError, load_report

#: A billion-laughs alias bomb plus a self-referencing alias.
LAUGHS = (
    "a: &a [x, x]\n"
    + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcde", "bcdef", strict=True)
    )
    + "absolute: {x: &r [*r]}\n"
)
DONE = TrainingOutcome(planned_final_step=100, final_step=100)
RULES = Thresholds.model_validate(
    {
        "absolute": {
            "overall.pass_rate": {"min": 0.5},
            "overall.malformed_call_rate": {"max": 0.1},
        },
        "regression": {
            "overall.pass_rate": {"direction": "higher"},
            "overall.malformed_call_rate": {"direction": "lower", "tolerance": 0.01},
        },
        "default_tolerance": 0.02,
    }
)


def report(data: str = "abc", model: str = "cand", **overall: Any) -> EvalReport:
    metrics = {"pass_rate": 0.6, "malformed_call_rate": 0.05} | overall
    return EvalReport(
        created_at="2026-01-01T00:00:00+00:00",
        source=EvalSource(
            endpoint="http://x/v1", model=model, mode="chat", data_path="t.parquet",
            data_sha256=data, max_turns=8,
        ),
        cases_total=10,
        metrics={"overall": metrics},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("candidate", "champion", "training", "decision", "failed"),
    [
        (report(), None, DONE, "promote", []),
        (report(pass_rate=0.4), None, DONE, "reject", ["overall.pass_rate min"]),
        (report(pass_rate=None), None, DONE, "reject", ["overall.pass_rate min"]),
        (report(pass_rate=float("nan")), None, DONE, "reject", ["overall.pass_rate min"]),
        (report(malformed_call_rate=0.2), None, DONE, "reject",
         ["overall.malformed_call_rate max"]),
        (report(pass_rate=0.6), report(pass_rate=0.61), DONE, "promote", []),
        (report(pass_rate=0.6), report(pass_rate=0.7), DONE, "reject",
         ["overall.pass_rate vs champion"]),
        (report(malformed_call_rate=0.08), report(malformed_call_rate=0.05), DONE, "reject",
         ["overall.malformed_call_rate vs champion"]),
        (report(), report(data="other", pass_rate=0.1), DONE, "reject", ["same evaluation data"]),
        (report(), report(pass_rate="n/a"), DONE, "promote", []),
        (report(), None, TrainingOutcome(planned_final_step=100, final_step=0), "reject",
         ["training reached final step"]),
        (report(), None, TrainingOutcome(planned_final_step=10, final_step=10,
                                         stop_reason="format_drift"), "reject",
         ["training stop reason"]),
        (report(), None, None, "reject", ["training status"]),
        (report(), None, TrainingOutcome(planned_final_step=0, final_step=0), "reject",
         ["training reached final step"]),
    ],
)  # fmt: skip
def test_decision_table(
    candidate: EvalReport,
    champion: EvalReport | None,
    training: TrainingOutcome | None,
    decision: str,
    failed: list[str],
) -> None:
    result = decide(candidate, RULES, champion, training)
    assert result.decision == decision
    assert [c.name for c in result.checks if not c.passed] == failed
    assert result.exit_code == (0 if decision == "promote" else 1)
    assert len(result.reasons) == len(failed)


def test_regression_is_skipped_when_data_differs_only_if_allowed() -> None:
    rules = RULES.model_copy(update={"require_same_data": False})
    result = decide(report(pass_rate=0.6), rules, report(data="other", pass_rate=0.9), DONE)
    assert [c.name for c in result.checks if not c.passed] == ["overall.pass_rate vs champion"]


def test_shipped_thresholds_file_is_valid() -> None:
    rules = load_thresholds(DEFAULT_THRESHOLDS)
    assert rules.absolute["overall.pass_rate"].min is not None
    assert rules.regression["overall.malformed_call_rate"].direction == "lower"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("absolute: [", "unreadable"),
        ("- 1\n- 2\n", "mapping"),
        ("surprise: 1\n", "surprise"),
        ("absolute: {x: {min: 0.9, max: 0.1}}\n", "min is greater"),
        ("absolute: {x: {}}\n", "min, max or both"),
        ("absolute: {x: {min: .nan}}\n", "absolute.x.min"),
        ("absolute: {'a..b': {min: 1}}\n", "bad metric path"),
        ("default_tolerance: -1\n", "default_tolerance"),
        ("\x00\x01binary", "unreadable"),
        ("b: " + "[" * 5000 + "]" * 5000, "unreadable|b"),
        (LAUGHS, "absolute.x"),
    ],
)
def test_hostile_threshold_files_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(GateInputError, match=message):
        load_thresholds(path)


def test_oversized_and_missing_files_are_clear_errors(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 * 1024 * 1024))
    with pytest.raises(GateInputError, match="larger than"):
        load_thresholds(big)
    with pytest.raises(GateInputError, match="unreadable"):
        load_training_outcome(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not a readable JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"schema_version": 99}', "newer than this reader"),
        ('{"schema_version": 1}', "invalid report"),
        ("[" * 100_000 + "]" * 100_000, "not a readable JSON"),
        ("\udcff", "not a readable JSON"),
    ],
)
def test_hostile_report_files_are_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(ReportError, match=message):
        load_report(path)


def cli() -> typer.Typer:
    app = typer.Typer()
    register_cli(app)
    return app


def test_gate_cli_exit_codes_and_machine_readable_decision(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(report().model_dump_json())
    bad.write_text(report(pass_rate=0.1).model_dump_json())
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"planned_final_step": 5, "final_step": 5}))
    rules = tmp_path / "rules.yaml"
    rules.write_text(json.dumps(RULES.model_dump(mode="json")))
    out = tmp_path / "decision.json"
    runner = CliRunner()
    base = ["gate", "--thresholds", str(rules), "--training-status", str(status)]
    result = runner.invoke(cli(), [*base, str(good), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["decision"] == "promote"
    result = runner.invoke(
        cli(), [*base, str(bad), "--champion-report", str(good), "--out", str(out)]
    )
    assert result.exit_code == 1
    decision = json.loads(out.read_text())
    assert decision["decision"] == "reject"
    assert any("overall.pass_rate" in reason for reason in decision["reasons"])
    assert "FAIL  overall.pass_rate min" in result.output
    junk = tmp_path / "junk.json"
    junk.write_text("{")
    result = runner.invoke(cli(), [*base, str(junk)])
    assert result.exit_code == 2 and "not a readable JSON" in result.output


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        ({"status": "succeeded", "final_step": 20, "planned_step": 20}, []),
        ({"status": "incomplete", "final_step": 0, "planned_step": 20},
         ["training reached final step"]),
        ({"status": "drifted", "final_step": 7, "planned_step": 20},
         ["training reached final step", "training stop reason"]),
        ({"status": "failed", "final_step": 20, "planned_step": 20}, ["training stop reason"]),
    ],
)  # fmt: skip
def test_a_training_jobs_result_file_is_accepted_as_status(
    tmp_path: Path, result: dict[str, Any], failed: list[str]
) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"schema_version": 1, "spec_hash": "x", **result}))
    decision = decide(report(), RULES, None, load_training_outcome(path))
    assert [c.name for c in decision.checks if not c.passed] == failed


def test_the_demo_gate_refuses_the_model_that_could_not_call_a_tool() -> None:
    """The candidate a fresh `make demo` promoted at 687826b (issue 13): it must never pass
    the demo's thresholds again, and a working model must."""
    demo = load_thresholds(
        Path(__file__).parents[2] / "training" / "specs" / "thresholds_demo.yaml"
    )
    broken = report(
        pass_rate=0.005,
        tool_selection_accuracy=0.43,
        argument_accuracy=0.10,
        exact_call_accuracy=0.05,
        parseable_rate=0.59,
        malformed_call_rate=0.41,
        irrelevance_accuracy=0.2,
        abstention_rate=0.2,
        error_rate=0.0,
    )
    decision = decide(broken, demo, None, DONE)
    assert decision.decision == "reject"
    assert any("pass_rate" in reason for reason in decision.reasons)
    working = report(
        pass_rate=0.45,
        tool_selection_accuracy=0.6,
        argument_accuracy=0.55,
        exact_call_accuracy=0.45,
        parseable_rate=0.9,
        malformed_call_rate=0.06,
        irrelevance_accuracy=0.8,
        abstention_rate=0.7,
        error_rate=0.0,
    )
    assert decide(working, demo, None, DONE).decision == "promote"
