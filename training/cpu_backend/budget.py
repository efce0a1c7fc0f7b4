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
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
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
    "bfloat16": StepCost(
        sft_s=4.5,
        grpo_s=23.5,
        source="AVX512-BF16 host: 130 SFT steps in 590 s, 8 GRPO steps in 188 s "
        "(benchmarks/results/cpu_training.json)",
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

    def apply(self, cpu: CpuSection) -> CpuSection:
        return cpu.model_copy(update={"sft_steps": self.sft_steps, "grpo_steps": self.grpo_steps})


def plan_steps(cpu: CpuSection, budget_s: float, dtype: str) -> BudgetPlan:
    """The spec's steps scaled to `budget_s` seconds of SFT + GRPO on a `dtype` CPU."""
    if budget_s <= 0:
        raise ValueError(f"cpu.time_budget_s must be positive, not {budget_s}")
    if dtype not in STEP_COSTS:
        raise ValueError(f"no measured step cost for dtype {dtype!r} (known: {sorted(STEP_COSTS)})")
    cost = STEP_COSTS[dtype]
    sft_s, grpo_s = cpu.sft_steps * cost.sft_s, cpu.grpo_steps * cost.grpo_s
    planned = sft_s + grpo_s
    if planned <= budget_s:
        return BudgetPlan(
            budget_s, dtype, cpu.sft_steps, cpu.grpo_steps, cpu.sft_steps, cpu.grpo_steps,
            planned, f"the spec's steps fit: about {planned / 60:.1f} of {budget_s / 60:.1f} "
            f"minutes in {dtype}", cost.source,
        )  # fmt: skip
    # GRPO first, down to its floor; SFT keeps what the budget leaves (module docstring)
    floor_grpo = min(cpu.grpo_steps, MIN_GRPO_STEPS)
    grpo = min(cpu.grpo_steps, max(floor_grpo, math.floor((budget_s - sft_s) / cost.grpo_s)))
    left = budget_s - grpo * cost.grpo_s
    sft = min(cpu.sft_steps, max(MIN_SFT_STEPS, math.floor(left / cost.sft_s)))
    estimated = sft * cost.sft_s + grpo * cost.grpo_s
    reason = (
        f"the spec's {cpu.sft_steps} SFT + {cpu.grpo_steps} GRPO steps take about "
        f"{planned / 60:.0f} minutes in {dtype} ({cost.sft_s:g} s and {cost.grpo_s:g} s a step); "
        f"cut to {sft} + {grpo} steps, about {estimated / 60:.1f} minutes (GRPO first: at "
        "this budget SFT steps are what clears the gate)"
        + (" (over budget: the floors)" if estimated > budget_s else "")
    )
    return BudgetPlan(
        budget_s, dtype, cpu.sft_steps, cpu.grpo_steps, sft, grpo, estimated, reason, cost.source
    )


def pinned_plan(cpu: CpuSection, budget_s: float, dtype: str, run_dir: Path) -> BudgetPlan:
    """The run's plan: the one pinned in `run_dir` when the run started, else planned now and
    pinned, so a resumed run (maybe on another machine) trains to the same step counts."""
    pin = run_dir / PIN_FILE
    if pin.is_file():
        try:
            plan = BudgetPlan(**json.loads(pin.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as error:
            raise ValueError(f"{pin} is unreadable ({error}); delete it to plan again") from error
        logger.info("time budget: %s (pinned when the run started, %s)", plan.reason, pin)
        return plan
    plan = plan_steps(cpu, budget_s, dtype)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = pin.with_name(f".{pin.name}.tmp")
    tmp.write_text(json.dumps(asdict(plan), indent=2), encoding="utf-8")
    tmp.replace(pin)
    logger.info("time budget: %s", plan.reason)
    return plan
