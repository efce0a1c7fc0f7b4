"""Step counts that fit a time budget, from the CPU's compute dtype and measured step costs.

The same spec costs 3-4x more on a CPU without native bf16: the demo's SFT step takes about
4.5 s in bf16 on an AVX512-BF16 host and about 16 s in float32 on an AVX2-only host
(`benchmarks/results/cpu_steps.json`, `cpu_training.json`). A demo that promises a time
cannot run fixed step counts on both. With `cpu.time_budget_s` the training stage cuts the
spec's steps so that their estimated time fits: GRPO first, down to its floor, then SFT, never
below the floors a run needs to mean anything (SFT teaches the call format; GRPO needs a few
steps to move). GRPO goes first because that is what the measurements say a short budget
should keep: 16 GRPO steps from a 40-step SFT moved held-out exact calls by -7.6 points
[-14.0, -1.3] (`cpu_training_grpo16_resample.json`), while the SFT steps decide whether the
candidate clears the gate at all (the first budgeted AVX2 demo, which scaled both phases
alike to 58 + 3 steps, was rejected at 38.8% tool selection against the demo gate's 45%, and
served nothing). The plan says what it chose and why, is
pinned in the run directory (a resumed run keeps its step counts, as it keeps its dtype),
and goes into the run's report.

The table below holds for the demo's spec on a demo host; where the job runs decides the rest.
On the compose stack the same float32 SFT step took about 35 s, not 16.5 (the stack's other
services take ~0.4 of the 2 cores, and two training threads stall on each other when either
is preempted; `benchmarks/results/stack.json`), so a plan from the table alone ran twice its
budget. So before it plans, the job times a few SFT steps of its own spec where it runs
(`sft.probe_sft_step`, a `MeasuredStep`), plans with that cost, scales the table's GRPO cost
up by the same ratio where the step is slower than the table's (never down: `grpo_scale`)
and charges the probe's seconds to the budget.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from training.spec.model import CpuSection

logger = logging.getLogger(__name__)

PIN_FILE = "budget_plan.json"
MIN_SFT_STEPS = 20
"""Below this an SFT'd SmolLM2 rarely writes a parseable call (the format is not learnt)."""
MIN_GRPO_STEPS = 2


@dataclass(frozen=True)
class StepCost:
    """Seconds per optimizer step of the demo's spec (cpu_smollm2.yaml) on one CPU kind."""

    sft_s: float
    grpo_s: float
    source: str


#: Measured on 2-core hosts (threads 2) with the demo spec's batch sizes.
STEP_COSTS: dict[str, StepCost] = {
    # The slower of the two bf16 hosts measured, so the plan printed before the probe does not
    # promise steps an AVX512-BF16 CPU without AMX cannot take; the AMX host's run (130 SFT
    # steps in 590 s, 8 GRPO steps in 188 s, cpu_training.json) was about twice as fast.
    "bfloat16": StepCost(
        sft_s=9.5,
        grpo_s=55.0,
        source="AMD EPYC with AVX512-BF16, no AMX, 2026-12-06, inside `make demo`: 65 SFT steps "
        "in 617 s; 8 GRPO steps (no replay, from the champion) in 437 s "
        "(benchmarks/results/demo_runs.json)",
    ),
    "float32": StepCost(
        sft_s=16.5,
        grpo_s=80.0,
        source="AVX2-only AMD EPYC, 2026-12-04, inside `make demo` (Airflow, MLflow and Ray "
        "beside it): 58 SFT steps in 956 s, 3 GRPO steps in 239 s; alone the SFT step is "
        "16.2 s (benchmarks/results/cpu_steps.json) and a GRPO step 72 s "
        "(cpu_training_grpo16_resample.json)",
    ),
}


@dataclass(frozen=True)
class MeasuredStep:
    """SFT steps of the run's own spec timed where it runs, before training (weights thrown
    away): the step cost a plan should trust over the table."""

    step_s: float
    """Median seconds of the timed SFT steps (the first step, a warm-up, is not counted)."""
    spent_s: float
    """Wall seconds the measurement took, model load included: charged to the budget."""
    timed_steps: int


PROBE_OVER_RUN = 0.92
"""The probe's step over the mean step of the SFT run that followed it: median of 8 recorded
runs on the demo spec (0.79 to 0.975, never above 1; `step_probe.json` and the `make demo`
runs of 2026-12-06 in `demo_runs.json`). The run's steps include its checkpoint saves and
its longer batches, which three timed steps rarely meet. Planning with the probe as it reads
bought steps SFT's deadline then cut (82 planned, 65 trained), and a cosine schedule cut
short ended before its learning rate had come down (since then the deadline ends the cosine
where it will stop, `schedule.py`: the rows a longer plan drew are what is left to lose)."""


def grpo_scale(sft_ratio: float) -> float:
    """How far a GRPO step's cost follows the SFT step's, measured over the table's: up, not
    down. A host slower than the table's (the compose stack's contention) slows both phases,
    but a host whose SFT step is faster (AMX) does not speed GRPO up alike: most of a GRPO
    step is token-by-token generation, bound by memory and latency, not by the matmul units
    that make AMX's SFT step fast. Over the 9 `make demo` runs on the AMX host (probe ratios
    0.60-0.87) the GRPO step less its replayed SFT batch took 39.6-91.0 s, median 59.9,
    against the table's 55; scaled by the ratio it was planned at 33-48 s, and the runs' GRPO
    took 1.56x its plan (median; `benchmarks/grpo_price_check.py` -> `grpo_price.json`)."""
    return max(1.0, sft_ratio)


def measured_cost(dtype: str, measured: MeasuredStep) -> StepCost:
    """The table's costs for `dtype` replaced by the measured SFT step (corrected by
    `PROBE_OVER_RUN`), GRPO's scaled by `grpo_scale` of the same ratio."""
    table = STEP_COSTS[dtype]
    sft_s = measured.step_s / PROBE_OVER_RUN
    ratio = sft_s / table.sft_s
    scale = grpo_scale(ratio)
    grpo_note = (
        f"so a GRPO step is taken as {scale:.2f} x {table.grpo_s:g} s"
        if scale == ratio
        else f"but a GRPO step is taken at the table's {table.grpo_s:g} s (its generation does "
        "not speed up with a faster SFT step)"
    )
    return StepCost(
        sft_s=sft_s,
        grpo_s=table.grpo_s * scale,
        source=f"measured here before training: {measured.timed_steps} SFT steps at "
        f"{measured.step_s:.1f} s a step, planned as {sft_s:.1f} s (a probe's step has been "
        f"{PROBE_OVER_RUN:g} of the run's mean), {ratio:.2f}x the {dtype} table's "
        f"{table.sft_s:g} s, {grpo_note}; the table: {table.source}",
    )


def with_replay(cpu: CpuSection, cost: StepCost) -> StepCost:
    """`cost` with the SFT replay's batch added to each GRPO step where the spec replays one
    (`cpu.grpo_sft_replay_coef`): that is one more SFT forward and backward per GRPO step,
    which the table's GRPO cost (measured without replay) does not hold. Left out, the demo's
    first run with replay ran 0.7 minutes over its 35."""
    if cpu.grpo_sft_replay_coef <= 0:
        return cost
    return replace(
        cost,
        grpo_s=cost.grpo_s + cost.sft_s,
        source=f"{cost.source}; each GRPO step also replays one SFT batch (+{cost.sft_s:.3g} s)",
    )


@dataclass(frozen=True)
class BudgetPlan:
    budget_s: float
    dtype: str
    planned_sft_steps: int
    planned_grpo_steps: int
    sft_steps: int
    grpo_steps: int
    estimated_s: float
    reason: str
    cost_source: str
    sft_step_s: float | None = None
    """The SFT step cost planned with (None in plans pinned before it was recorded)."""
    grpo_step_s: float | None = None
    measured_s: float = 0.0
    """Seconds spent measuring the step cost before planning, already taken off the budget."""

    def apply(self, cpu: CpuSection) -> CpuSection:
        return cpu.model_copy(update={"sft_steps": self.sft_steps, "grpo_steps": self.grpo_steps})

    def sft_deadline_s(self) -> float | None:
        """Seconds SFT may take: the budget less the probe and the planned GRPO steps. The
        step count comes from a median of a few timed steps, and a run's steps spread
        +-30% (a demo's probe said 7.88 s, its 72 steps averaged 9.97 s, 2.5 minutes over),
        so SFT also stops at this time (`sft.SftDeadline`). None in plans pinned before the
        GRPO step cost was recorded."""
        if self.grpo_step_s is None:
            return None
        return max(0.0, self.budget_s - self.measured_s - self.grpo_steps * self.grpo_step_s)


def plan_steps(
    cpu: CpuSection, budget_s: float, dtype: str, measured: MeasuredStep | None = None
) -> BudgetPlan:
    """The spec's steps scaled to `budget_s` seconds of SFT + GRPO on a `dtype` CPU, from the
    step cost `measured` where the run is (its seconds off the budget), else the table's."""
    if budget_s <= 0:
        raise ValueError(f"cpu.time_budget_s must be positive, not {budget_s}")
    if dtype not in STEP_COSTS:
        raise ValueError(f"no measured step cost for dtype {dtype!r} (known: {sorted(STEP_COSTS)})")
    if measured is not None and not (math.isfinite(measured.step_s) and measured.step_s > 0):
        raise ValueError(f"a measured SFT step must take a positive time, not {measured.step_s}")
    cost = with_replay(
        cpu, STEP_COSTS[dtype] if measured is None else measured_cost(dtype, measured)
    )
    spent = measured.spent_s if measured is not None else 0.0
    total_s, budget_s = budget_s, max(0.0, budget_s - spent)
    sft_s, grpo_s = cpu.sft_steps * cost.sft_s, cpu.grpo_steps * cost.grpo_s
    planned = sft_s + grpo_s
    extra = {"sft_step_s": cost.sft_s, "grpo_step_s": cost.grpo_s, "measured_s": spent}
    spent_note = f"; {spent:.0f} s of the budget went to measuring the step here" if spent else ""
    if planned <= budget_s:
        return BudgetPlan(
            total_s, dtype, cpu.sft_steps, cpu.grpo_steps, cpu.sft_steps, cpu.grpo_steps,
            planned, f"the spec's steps fit: about {planned / 60:.1f} of {budget_s / 60:.1f} "
            f"minutes in {dtype}{spent_note}", cost.source, **extra,
        )  # fmt: skip
    # GRPO first, down to its floor; SFT keeps what the budget leaves (module docstring)
    floor_grpo = min(cpu.grpo_steps, MIN_GRPO_STEPS)
    grpo = min(cpu.grpo_steps, max(floor_grpo, math.floor((budget_s - sft_s) / cost.grpo_s)))
    left = budget_s - grpo * cost.grpo_s
    sft = min(cpu.sft_steps, max(MIN_SFT_STEPS, math.floor(left / cost.sft_s)))
    estimated = sft * cost.sft_s + grpo * cost.grpo_s
    reason = (
        f"the spec's {cpu.sft_steps} SFT + {cpu.grpo_steps} GRPO steps take about "
        f"{planned / 60:.0f} minutes in {dtype} ({cost.sft_s:.3g} s and {cost.grpo_s:.3g} s a step"
        f"{', measured here' if measured else ''}); "
        f"cut to {sft} + {grpo} steps, about {estimated / 60:.1f} minutes (GRPO first: at "
        "this budget SFT steps are what clears the gate)"
        + (" (over budget: the floors)" if estimated > budget_s else "")
        + spent_note
    )
    return BudgetPlan(
        total_s, dtype, cpu.sft_steps, cpu.grpo_steps, sft, grpo, estimated, reason, cost.source,
        **extra,
    )  # fmt: skip


def pinned_plan(
    cpu: CpuSection,
    budget_s: float,
    dtype: str,
    run_dir: Path,
    measure: Callable[[], MeasuredStep | None] | None = None,
) -> BudgetPlan:
    """The run's plan: the one pinned in `run_dir` when the run started, else planned now and
    pinned, so a resumed run (maybe on another machine) trains to the same step counts.
    `measure` times the step cost where the run is; it is called only when planning."""
    pin = run_dir / PIN_FILE
    if pin.is_file():
        try:
            plan = BudgetPlan(**json.loads(pin.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as error:
            raise ValueError(f"{pin} is unreadable ({error}); delete it to plan again") from error
        logger.info("time budget: %s (pinned when the run started, %s)", plan.reason, pin)
        return plan
    measured = measure() if measure is not None else None
    plan = plan_steps(cpu, budget_s, dtype, measured)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = pin.with_name(f".{pin.name}.tmp")
    tmp.write_text(json.dumps(asdict(plan), indent=2), encoding="utf-8")
    tmp.replace(pin)
    logger.info("time budget: %s", plan.reason)
    return plan
