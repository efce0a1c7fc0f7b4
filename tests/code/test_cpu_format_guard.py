"""The format guard's verdict (`training.cpu_backend.format_guard`): what the run does after
SFT for every kind of quick eval it may read, hostile ones included, and how many SFT steps
an extension buys under a time budget. The run itself:
tests/integration/test_cpu_format_guard_run.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from training.cpu_backend.budget import BudgetPlan
from training.cpu_backend.format_guard import extension, extension_spec, judge
from training.evaluation.gate import Thresholds
from training.spec.model import CpuSection, TrainingSpec


def cpu(**fields: Any) -> CpuSection:
    base: dict[str, Any] = {"sft_format_guard": "extend", "grpo_steps": 2}
    return CpuSection.model_validate({**base, **fields})


def plan(grpo_step_s: float | None = 60.0, sft_step_s: float | None = 7.5) -> BudgetPlan:
    return BudgetPlan(
        budget_s=720.0,
        dtype="bfloat16",
        planned_sft_steps=130,
        planned_grpo_steps=8,
        sft_steps=74,
        grpo_steps=2,
        estimated_s=700.0,
        reason="test",
        cost_source="test",
        sft_step_s=sft_step_s,
        grpo_step_s=grpo_step_s,
    )


WEAK = {"parseable_rate": 0.24, "cases": 48}


def test_a_learnt_format_goes_on_to_grpo() -> None:
    verdict = judge(cpu(), {"parseable_rate": 0.84, "cases": 48}, None)
    assert verdict.action == "grpo"
    assert verdict.parseable_rate == 0.84 and verdict.eval_cases == 48
    assert "learnt: 84% parseable" in verdict.reason


def test_the_floor_itself_counts_as_learnt() -> None:
    assert judge(cpu(), {"parseable_rate": 0.5, "cases": 8}, None).action == "grpo"


def test_extend_without_a_budget_takes_the_specs_steps() -> None:
    verdict = judge(cpu(sft_format_extend_steps=12), WEAK, None)
    assert verdict.action == "extend"
    assert (verdict.extend_steps, verdict.extend_deadline_s) == (12, None)
    assert "24% parseable" in verdict.reason and "12 more SFT steps" in verdict.reason
    assert "SFT-only" in verdict.reason


def test_extend_under_a_budget_takes_grpos_planned_seconds() -> None:
    verdict = judge(cpu(), WEAK, plan(grpo_step_s=61.0, sft_step_s=7.5))
    assert verdict.action == "extend"
    assert verdict.extend_deadline_s == pytest.approx(122.0)
    assert verdict.extend_steps == 16  # floor(122 / 7.5)
    assert "GRPO's planned 122 s" in verdict.reason


def test_a_plan_without_step_costs_falls_back_to_the_specs_steps() -> None:
    assert extension(cpu(sft_format_extend_steps=5), plan(grpo_step_s=None)) == (5, None)
    assert extension(cpu(sft_format_extend_steps=5), plan(sft_step_s=None)) == (5, None)


def test_an_extension_is_at_least_one_step() -> None:
    assert extension(cpu(grpo_steps=1), plan(grpo_step_s=1.0, sft_step_s=9.0))[0] == 1


def test_stop_says_why_and_what_to_do() -> None:
    verdict = judge(cpu(sft_format_guard="stop"), WEAK, plan())
    assert verdict.action == "stop" and verdict.extend_steps == 0
    assert "GRPO skipped" in verdict.reason and "cpu.sft_steps" in verdict.reason


def test_off_runs_grpo_whatever_sft_reached() -> None:
    verdict = judge(cpu(sft_format_guard="off"), WEAK, None)
    assert verdict.action == "grpo" and verdict.reason == "the format guard is off"


@pytest.mark.parametrize("payload", [None, {}])
def test_no_quick_eval_runs_grpo_and_says_so(payload: dict[str, Any] | None) -> None:
    verdict = judge(cpu(), payload, None)
    assert verdict.action == "grpo" and "no quick eval" in verdict.reason


@pytest.mark.parametrize(
    "rate",
    [None, float("nan"), float("inf"), -0.1, 1.5, "0.2", True, [0.2], {"x": 1}],
)
def test_a_rate_that_is_not_a_share_is_not_judged(rate: Any) -> None:
    """A null rate (no tool case), a corrupt cache file or a hostile value: no verdict from
    it, so no steps are taken away from GRPO on its word."""
    verdict = judge(cpu(), {"parseable_rate": rate, "cases": "many"}, None)
    assert verdict.action == "grpo"
    assert verdict.parseable_rate is None and verdict.eval_cases == 0
    assert "no parseable rate" in verdict.reason


def test_the_extension_trains_other_rows_at_its_own_rate() -> None:
    spec = TrainingSpec.model_validate(
        {
            "name": "t",
            "model": {"path": "tiny://hermes"},
            "data": {"train_files": ["a.parquet"], "test_files": ["b.parquet"]},
            "cpu": {"seed": 7, "sft_steps": 60, "sft_short_steps": 10, "sft_lr": 3e-4},
        }
    )
    verdict = judge(spec.cpu.model_copy(update={"sft_format_guard": "extend"}), WEAK, None)
    extended = extension_spec(spec, verdict).cpu
    assert (extended.sft_steps, extended.sft_short_steps, extended.seed) == (16, 0, 8)
    assert extended.sft_lr == spec.cpu.sft_format_extend_lr != spec.cpu.sft_lr
    assert spec.cpu.sft_steps == 60  # the run's own spec is not changed


def test_yaml_off_is_the_word_off() -> None:
    """`sft_format_guard: off` in a YAML spec (or `--set cpu.sft_format_guard=off`) arrives
    as false."""
    assert CpuSection.model_validate({"sft_format_guard": False}).sft_format_guard == "off"


@pytest.mark.parametrize(
    "fields",
    [
        {"sft_format_guard": "maybe"},
        {"sft_format_guard": True},
        {"sft_format_min_parseable": 1.5},
        {"sft_format_min_parseable": -0.1},
        {"sft_format_extend_steps": 0},
    ],
)
def test_bad_guard_settings_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CpuSection.model_validate(fields)


def test_the_gate_reads_sft_only_from_a_jobs_result_file(tmp_path: Path) -> None:
    """`toolrl gate --training-status result.json`: an `sft_only` run planned no GRPO step
    and reached it, which the final-step check accepts (and `accept_sft_only: false` not);
    a plain result that planned nothing is still refused."""
    from training.evaluation.gate import _training, load_training_outcome

    result = tmp_path / "result.json"
    result.write_text(json.dumps({"status": "sft_only", "final_step": 0, "planned_step": 0}))
    outcome = load_training_outcome(result)
    assert outcome.stop_reason == "sft_only"
    assert all(check.passed for check in _training(outcome, Thresholds()))
    refused = _training(outcome, Thresholds(accept_sft_only=False))
    assert [c.name for c in refused if not c.passed] == ["training reached final step"]
    result.write_text(json.dumps({"status": "succeeded", "final_step": 0, "planned_step": 0}))
    plain = _training(load_training_outcome(result), Thresholds())
    assert [c.name for c in plain if not c.passed] == ["training reached final step"]
