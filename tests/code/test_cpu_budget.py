"""The CPU training stage's time budget (`training/cpu_backend/budget.py`): step counts
scaled to fit from the dtype's measured step cost, floors kept, the plan pinned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.cpu_backend.budget import (
    MIN_GRPO_STEPS,
    MIN_SFT_STEPS,
    PIN_FILE,
    STEP_COSTS,
    pinned_plan,
    plan_steps,
)
from training.spec.model import CpuSection

DEMO = CpuSection(sft_steps=130, grpo_steps=8)


def seconds(sft: int, grpo: int, dtype: str) -> float:
    return sft * STEP_COSTS[dtype].sft_s + grpo * STEP_COSTS[dtype].grpo_s


def test_a_spec_that_fits_is_left_as_written() -> None:
    plan = plan_steps(DEMO, 10 * 3600, "float32")
    assert (plan.sft_steps, plan.grpo_steps) == (130, 8)
    assert "fit" in plan.reason


@pytest.mark.parametrize("dtype", sorted(STEP_COSTS))
def test_a_tight_budget_scales_both_phases_into_it(dtype: str) -> None:
    budget = 0.5 * seconds(130, 8, dtype)
    plan = plan_steps(DEMO, budget, dtype)
    assert plan.estimated_s <= budget
    assert MIN_SFT_STEPS <= plan.sft_steps < 130 and MIN_GRPO_STEPS <= plan.grpo_steps <= 8
    assert plan.estimated_s == seconds(plan.sft_steps, plan.grpo_steps, dtype)
    assert f"{plan.sft_steps} + {plan.grpo_steps} steps" in plan.reason
    assert plan.apply(DEMO).sft_steps == plan.sft_steps


def test_the_slower_cpu_gets_fewer_steps_for_the_same_budget() -> None:
    fast, slow = plan_steps(DEMO, 900, "bfloat16"), plan_steps(DEMO, 900, "float32")
    assert slow.sft_steps + slow.grpo_steps < fast.sft_steps + fast.grpo_steps


def test_an_impossible_budget_keeps_the_floors_and_says_so() -> None:
    plan = plan_steps(DEMO, 10, "float32")
    assert (plan.sft_steps, plan.grpo_steps) == (MIN_SFT_STEPS, MIN_GRPO_STEPS)
    assert "over budget" in plan.reason


@pytest.mark.parametrize(("budget", "dtype"), [(0, "float32"), (-5, "float32"), (60, "float16")])
def test_bad_budget_or_dtype_is_a_clear_error(budget: float, dtype: str) -> None:
    with pytest.raises(ValueError, match=r"budget|dtype"):
        plan_steps(DEMO, budget, dtype)


def test_the_plan_is_pinned_so_a_resumed_run_keeps_its_steps(tmp_path: Path) -> None:
    first = pinned_plan(DEMO, 900, "float32", tmp_path)
    again = pinned_plan(DEMO, 10 * 3600, "bfloat16", tmp_path)  # another machine, same run
    assert again == first
    (tmp_path / PIN_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="delete it to plan again"):
        pinned_plan(DEMO, 900, "float32", tmp_path)
    (tmp_path / PIN_FILE).write_text(json.dumps({"budget_s": 1}))
    with pytest.raises(ValueError, match="unreadable"):
        pinned_plan(DEMO, 900, "float32", tmp_path)


REPO = Path(__file__).resolve().parents[2]
DEMO_SPEC = REPO / "training" / "specs" / "cpu_smollm2.yaml"


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_demo_writes_its_spec_with_the_training_share_of_its_budget(
    tmp_path: Path, dtype: str
) -> None:
    from training.ops.demo.budget import BUDGET_MINUTES, OVERHEAD_S, budgeted_spec
    from training.spec.model import load_spec

    budget = budgeted_spec(DEMO_SPEC, tmp_path, None, dtype)
    written = load_spec(budget.spec_path)  # a valid spec the training job reads
    assert budget.minutes == BUDGET_MINUTES[dtype]
    assert written.cpu.time_budget_s == BUDGET_MINUTES[dtype] * 60 - OVERHEAD_S[dtype]
    assert budget.plan is not None and budget.plan.budget_s == written.cpu.time_budget_s
    assert f"time budget {BUDGET_MINUTES[dtype]:g} minutes" in budget.describe()
    as_written = load_spec(DEMO_SPEC)
    assert written.model_copy(update={"cpu": as_written.cpu}) == as_written  # only cpu changed


def test_budget_zero_runs_the_spec_as_written_and_a_negative_one_is_refused(
    tmp_path: Path,
) -> None:
    from training.ops.demo.budget import budgeted_spec
    from training.spec.model import load_spec

    budget = budgeted_spec(DEMO_SPEC, tmp_path, 0, "float32")
    assert budget.plan is None and load_spec(budget.spec_path).cpu.time_budget_s is None
    with pytest.raises(ValueError, match="budget-minutes"):
        budgeted_spec(DEMO_SPEC, tmp_path, -1, "float32")


@pytest.mark.parametrize("dtype", sorted(STEP_COSTS))
def test_grpo_is_cut_to_its_floor_before_sft_loses_a_step(dtype: str) -> None:
    """A short budget keeps SFT steps, which decide whether the candidate clears the gate,
    and gives GRPO its floor (measured: GRPO at these budgets lowered exact calls)."""
    full_sft = 130 * STEP_COSTS[dtype].sft_s
    roomy = plan_steps(DEMO, full_sft + 3.5 * STEP_COSTS[dtype].grpo_s, dtype)
    assert (roomy.sft_steps, roomy.grpo_steps) == (130, 3)
    tight = plan_steps(DEMO, full_sft, dtype)
    assert tight.grpo_steps == MIN_GRPO_STEPS
    assert tight.sft_steps == int((full_sft - MIN_GRPO_STEPS * STEP_COSTS[dtype].grpo_s)
                                  // STEP_COSTS[dtype].sft_s)  # fmt: skip
    assert "GRPO first" in tight.reason
