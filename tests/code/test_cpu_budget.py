"""The CPU training stage's time budget (`training/cpu_backend/budget.py`): step counts
scaled to fit from the dtype's measured step cost, floors kept, the plan pinned."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from testkit.pipeline_specs import tiny_cpu_spec
from training.cpu_backend.budget import (
    MIN_GRPO_STEPS,
    MIN_SFT_STEPS,
    PIN_FILE,
    PROBE_OVER_RUN,
    STEP_COSTS,
    MeasuredStep,
    grpo_scale,
    pinned_plan,
    plan_steps,
)
from training.spec.model import CpuSection, TrainingSpec

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


def test_a_grpo_step_that_replays_an_sft_batch_is_planned_at_its_cost() -> None:
    """The replay adds one SFT forward and backward to every GRPO step: a plan that left it
    out ran the demo 0.7 minutes over its budget."""
    replaying = DEMO.model_copy(update={"grpo_sft_replay_coef": 1.0})
    budget = 0.5 * seconds(130, 8, "float32")
    plain, replayed = plan_steps(DEMO, budget, "float32"), plan_steps(replaying, budget, "float32")
    table = STEP_COSTS["float32"]
    assert replayed.grpo_step_s == table.grpo_s + table.sft_s
    assert plain.grpo_step_s == table.grpo_s
    assert replayed.sft_steps + replayed.grpo_steps < plain.sft_steps + plain.grpo_steps
    assert replayed.estimated_s <= budget
    assert "replays one SFT batch" in replayed.cost_source
    step = MeasuredStep(step_s=2 * table.sft_s, spent_s=0.0, timed_steps=3)
    measured = plan_steps(replaying, budget, "float32", step)
    assert measured.grpo_step_s == pytest.approx(2 / PROBE_OVER_RUN * (table.grpo_s + table.sft_s))


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


# --- the step cost measured where the run is (MeasuredStep, sft.probe_sft_step) ------------


def measured(step_s: float, spent_s: float = 0.0) -> MeasuredStep:
    return MeasuredStep(step_s=step_s, spent_s=spent_s, timed_steps=2)


def test_a_step_measured_twice_the_tables_halves_what_fits() -> None:
    """The compose stack's case: the table said 16.5 s, the stack took ~35 s a step."""
    table = plan_steps(DEMO, 1500, "float32")
    slow = plan_steps(DEMO, 1500, "float32", measured(2 * STEP_COSTS["float32"].sft_s))
    # planned at the run's pace, which a probe's few steps underestimate (PROBE_OVER_RUN)
    assert slow.sft_step_s == pytest.approx(2 * STEP_COSTS["float32"].sft_s / PROBE_OVER_RUN)
    assert slow.grpo_step_s == pytest.approx(2 * STEP_COSTS["float32"].grpo_s / PROBE_OVER_RUN)
    assert slow.estimated_s <= 1500 and slow.sft_steps < table.sft_steps
    assert slow.estimated_s == slow.sft_steps * slow.sft_step_s + slow.grpo_steps * slow.grpo_step_s
    assert "measured here" in slow.reason and "measured here" in slow.cost_source
    assert table.sft_step_s == STEP_COSTS["float32"].sft_s and table.measured_s == 0


def test_a_faster_sft_step_than_the_tables_does_not_cheapen_grpo() -> None:
    """The AMX host's case: its probe read 0.60-0.87 of the bf16 table's SFT step, but its
    GRPO steps (mostly generation) took the table's time or more; scaled down alike they were
    planned at 0.64x what they took and the demo ran over its budget (grpo_price.json)."""
    table = STEP_COSTS["bfloat16"]
    fast = plan_steps(DEMO, 900, "bfloat16", measured(0.5 * table.sft_s))
    assert fast.sft_step_s == pytest.approx(0.5 * table.sft_s / PROBE_OVER_RUN)
    assert fast.grpo_step_s == table.grpo_s
    assert "a GRPO step is taken at the table's" in fast.cost_source
    assert grpo_scale(0.6) == 1.0 and grpo_scale(2.0) == 2.0


def test_a_probe_is_planned_at_the_pace_its_runs_have_kept() -> None:
    """A probe's three steps have read 0.79-0.975 of the run's mean step: a probe that reads
    the table's cost buys fewer steps than the table, and the plan says why."""
    table = plan_steps(DEMO, 1500, "float32")
    probed = plan_steps(DEMO, 1500, "float32", measured(STEP_COSTS["float32"].sft_s))
    assert 0 < PROBE_OVER_RUN < 1
    assert probed.sft_steps < table.sft_steps
    assert f"a probe's step has been {PROBE_OVER_RUN:g} of the run's mean" in probed.cost_source


def test_the_seconds_spent_measuring_come_off_the_budget() -> None:
    step = STEP_COSTS["float32"].sft_s
    free = plan_steps(DEMO, 1500, "float32", measured(step, spent_s=0.0))
    charged = plan_steps(DEMO, 1500, "float32", measured(step, spent_s=300.0))
    assert charged.estimated_s <= 1500 - 300 < free.estimated_s
    assert charged.budget_s == 1500 and charged.measured_s == 300
    assert "300 s of the budget went to measuring" in charged.reason


def test_a_fast_host_runs_the_spec_as_written() -> None:
    plan = plan_steps(DEMO, 1500, "float32", measured(0.5, spent_s=2.0))
    assert (plan.sft_steps, plan.grpo_steps) == (130, 8) and "fit" in plan.reason


def test_measuring_that_eats_the_budget_keeps_the_floors_and_says_so() -> None:
    plan = plan_steps(DEMO, 100, "float32", measured(16.0, spent_s=150.0))
    assert (plan.sft_steps, plan.grpo_steps) == (MIN_SFT_STEPS, MIN_GRPO_STEPS)
    assert "over budget" in plan.reason


@pytest.mark.parametrize("step_s", [0.0, -1.0, float("nan"), float("inf")])
def test_a_nonsense_measurement_is_a_clear_error(step_s: float) -> None:
    with pytest.raises(ValueError, match="measured SFT step"):
        plan_steps(DEMO, 900, "float32", measured(step_s))


def test_the_step_is_measured_only_when_planning(tmp_path: Path) -> None:
    calls: list[int] = []

    def measure() -> MeasuredStep:
        calls.append(1)
        return measured(40.0, spent_s=60.0)

    first = pinned_plan(DEMO, 1500, "float32", tmp_path, measure)
    again = pinned_plan(DEMO, 1500, "float32", tmp_path, measure)  # resumed: the pin
    assert calls == [1] and again == first
    assert first.sft_step_s == pytest.approx(40 / PROBE_OVER_RUN)


def test_a_plan_pinned_before_costs_were_recorded_still_loads(tmp_path: Path) -> None:
    old = {
        k: v
        for k, v in asdict(plan_steps(DEMO, 900, "float32")).items()
        if k not in {"sft_step_s", "grpo_step_s", "measured_s"}
    }
    (tmp_path / PIN_FILE).write_text(json.dumps(old))
    plan = pinned_plan(DEMO, 900, "float32", tmp_path, lambda: measured(1.0))
    assert plan.sft_steps == old["sft_steps"] and plan.sft_step_s is None


@pytest.mark.parametrize(
    ("rows", "short", "batches", "expected"),
    [
        (list(range(12)), 2, 3, [2, 3, 6, 7, 10, 11]),  # past the short rows, first to last
        (list(range(12)), 0, 1, [0, 1]),
        (list(range(3)), 4, 2, [0, 1, 2]),  # all rows short: the rows there are
        (list(range(4)), 0, 3, [0, 1, 0, 1, 2, 3]),  # fewer batches than asked: repeated
    ],
)
def test_probe_rows_are_whole_batches_spread_over_the_run(
    rows: list[int], short: int, batches: int, expected: list[int]
) -> None:
    """Whole batches: a batch shares its tool prompt, rows picked one by one may not (the
    first probe did that and timed a step 6.2x the real one)."""
    from training.cpu_backend.sft import probe_rows

    assert probe_rows(rows, short, 2, batches) == expected  # type: ignore[arg-type]


def probe_spec(**cpu: Any) -> TrainingSpec:
    return tiny_cpu_spec("probe", {"sft_steps": 6, "sft_batch_size": 2, "grpo_steps": 2, **cpu})


def test_the_probe_times_real_sft_steps_and_leaves_the_model_as_it_was(
    builtin_data_300: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A real SFT trainer on the tiny model: three timed steps after a warm-up, the seconds it
    took, the base model's files untouched (its weights are thrown away)."""
    from serving.tools import get_catalog
    from training.cpu_backend.sft import probe_sft_step

    before = {p.name: p.read_bytes() for p in tiny_model_dir.iterdir() if p.is_file()}
    schemas = list(get_catalog().openai_schemas())
    step = probe_sft_step(probe_spec(), tiny_model_dir, builtin_data_300 / "train.parquet", schemas)
    assert step is not None and step.timed_steps == 3
    assert 0 < step.step_s < step.spent_s
    after = {p.name: p.read_bytes() for p in tiny_model_dir.iterdir() if p.is_file()}
    assert after == before
    plan = plan_steps(probe_spec().cpu, 3600, "float32", step)
    assert plan.sft_step_s == pytest.approx(step.step_s / PROBE_OVER_RUN)
    assert plan.measured_s == step.spent_s


def test_no_sft_steps_means_nothing_to_time(builtin_data_300: Path, tiny_model_dir: Path) -> None:
    from training.cpu_backend.sft import probe_sft_step

    spec = probe_spec(sft_steps=0)
    assert probe_sft_step(spec, tiny_model_dir, builtin_data_300 / "train.parquet", []) is None


def test_sfts_deadline_is_the_budget_less_the_probe_and_the_planned_grpo_steps() -> None:
    step = MeasuredStep(step_s=10.0, spent_s=40.0, timed_steps=3)
    plan = plan_steps(DEMO, 720, "bfloat16", step)
    deadline = plan.sft_deadline_s()
    assert plan.grpo_step_s is not None and deadline is not None
    assert deadline == pytest.approx(720 - 40 - plan.grpo_steps * plan.grpo_step_s)
    assert deadline >= plan.sft_steps * 10.0  # the planned steps fit inside it
    old = dict(asdict(plan), grpo_step_s=None)  # a plan pinned before costs were recorded
    assert type(plan)(**old).sft_deadline_s() is None


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    """`time.perf_counter`, which the SFT deadline reads, set by hand for the test."""
    import time

    fake = _Clock()
    monkeypatch.setattr(time, "perf_counter", fake)
    return fake


def _started(seconds: float, min_steps: int, at_step: int = 0) -> Any:
    """An `SftDeadline` whose training began at `at_step`."""
    from training.cpu_backend.sft import SftDeadline

    deadline = SftDeadline(seconds=seconds, min_steps=min_steps)
    deadline.on_train_begin(None, _state(at_step), _control())
    return deadline


def _state(step: int, max_steps: int = 100) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(global_step=step, max_steps=max_steps)


def _control() -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(should_training_stop=False)


def test_sft_stops_before_the_step_that_would_end_past_its_deadline(clock: _Clock) -> None:
    deadline = _started(seconds=10.0, min_steps=1)
    clock.now = 6.0  # two steps of 3 s: a third ends at 9 s, inside the 10
    assert not deadline.on_step_end(None, _state(2), _control()).should_training_stop
    clock.now = 9.0  # a fourth would end at 12 s
    assert deadline.on_step_end(None, _state(3), _control()).should_training_stop
    assert deadline.stopped_at == 3


def test_sfts_deadline_keeps_the_floor_and_counts_from_a_resumed_step(clock: _Clock) -> None:
    floor = _started(seconds=1.0, min_steps=20)
    clock.now = 50.0
    assert not floor.on_step_end(None, _state(19), _control()).should_training_stop
    assert floor.on_step_end(None, _state(20), _control()).should_training_stop
    clock.now = 100.0
    resumed = _started(seconds=10.0, min_steps=1, at_step=40)  # its share starts again here
    clock.now = 104.0  # one step of 4 s since the resume: the next ends at 108
    assert not resumed.on_step_end(None, _state(41), _control()).should_training_stop
    last = _started(seconds=0.0, min_steps=1)
    assert not last.on_step_end(None, _state(6, max_steps=6), _control()).should_training_stop


def test_a_real_sft_run_stops_at_its_deadline_and_a_rerun_keeps_that_step(
    builtin_data_300: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The trainer honours the stop: a deadline of 0 s ends the tiny model's SFT at its floor
    (2 of 6 steps), the final model is written and says so, and the finished SFT read back
    later reports the same 2 steps."""
    from serving.tools import get_catalog
    from training.cpu_backend.sft import SftDeadline, run_sft

    schemas = list(get_catalog().openai_schemas())
    train = builtin_data_300 / "train.parquet"
    deadline = SftDeadline(seconds=0.0, min_steps=2)
    run_dir = tmp_path / "run"
    done = run_sft(probe_spec(), tiny_model_dir, train, run_dir, schemas, [deadline])
    assert deadline.stopped_at == 2 and done.steps == 2
    assert len(done.step_seconds) == 2 and all(s > 0 for s in done.step_seconds)
    assert sum(done.step_seconds) <= done.seconds  # each step's wall time, within SFT's
    assert (done.model_dir / "COMPLETE").read_text().strip() == "2"
    again = run_sft(probe_spec(), tiny_model_dir, train, run_dir, schemas, [])
    assert again.model_dir == done.model_dir and again.steps == 2
    assert again.step_seconds == ()  # nothing trained in this call: no step times
