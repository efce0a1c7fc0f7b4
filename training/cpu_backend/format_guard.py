"""The format guard: GRPO only from an SFT start that writes the call format.

Why: GRPO learns from the spread of rewards inside a group. A policy whose calls are mostly
malformed scores its rollouts alike (all low), so its steps teach nothing and cost the most
minutes of the run. Measured in `make demo` (bf16, `benchmarks/results/demo_runs.json`,
2026-12-07): SFT stopped at 66 steps with the format not learnt (the quick eval read 24%
parseable, 81% of call attempts malformed); GRPO's two steps then drew 90% and 69% malformed
rollouts, and the candidate was rejected on every floor. The promoted runs read 70-84%
parseable after SFT.

So after SFT the run reads its own quick eval (the same held-out rows the report shows) and,
with `cpu.sft_format_guard`:
- `extend`: GRPO's steps go to more SFT instead. Under a time budget the extension takes the
  seconds GRPO was planned to take (`budget.BudgetPlan`), so the run keeps its promise; the
  extension trains on other rows (the next seed's order) at `cpu.sft_format_extend_lr`.
  The run ends `sft_only`: a complete candidate the gate judges on quality alone.
- `stop`: GRPO is skipped and the run ends `incomplete` with the reason, so no minutes go to
  steps that cannot teach; the gate rejects it.
- `off`: GRPO runs whatever SFT reached.

The verdict comes from the cached quick eval (`eval_sft.json`), so a resumed run reaches the
same one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from training.cpu_backend.budget import BudgetPlan
from training.spec.model import CpuSection, TrainingSpec

FormatAction = Literal["grpo", "extend", "stop"]
EXTENSION_DIR = "sft_extension"
"""Under the run directory: the extension's checkpoints and `final/` model."""
EXTENSION_SEED_OFFSET = 1
"""The extension draws its rows in the order of the next seed: mostly rows SFT has not seen."""


@dataclass(frozen=True)
class FormatVerdict:
    """What the run does after SFT, and why, as the report records it."""

    action: FormatAction
    parseable_rate: float | None
    """The quick eval's parseable rate after SFT (None: nothing to judge by)."""
    min_parseable: float
    eval_cases: int
    """Held-out cases the quick eval ran (tool and no-tool cases together)."""
    extend_steps: int = 0
    extend_deadline_s: float | None = None
    """With a time budget: the seconds GRPO was planned to take, the extension's limit."""
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rate(payload: Mapping[str, Any] | None) -> float | None:
    """The eval's parseable rate when it is a real share, else None (missing, null when the
    eval held no tool case, or not a number at all)."""
    value = (payload or {}).get("parseable_rate")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    rate = float(value)
    return rate if math.isfinite(rate) and 0.0 <= rate <= 1.0 else None


def _cases(payload: Mapping[str, Any] | None) -> int:
    value = (payload or {}).get("cases")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def extension(cpu: CpuSection, plan: BudgetPlan | None) -> tuple[int, float | None]:
    """SFT steps the extension trains and its time limit: the seconds GRPO's planned steps
    would take at the plan's step costs, or `cpu.sft_format_extend_steps` without a plan."""
    if plan is None or plan.grpo_step_s is None or not plan.sft_step_s:
        return cpu.sft_format_extend_steps, None
    seconds = cpu.grpo_steps * plan.grpo_step_s
    return max(1, math.floor(seconds / plan.sft_step_s)), seconds


def judge(
    cpu: CpuSection, sft_eval: Mapping[str, Any] | None, plan: BudgetPlan | None
) -> FormatVerdict:
    """The guard's verdict on the quick eval after SFT (`sft_eval`; None when no SFT ran)."""
    floor = cpu.sft_format_min_parseable
    rate, cases = _rate(sft_eval), _cases(sft_eval)
    if cpu.sft_format_guard == "off":
        return FormatVerdict("grpo", rate, floor, cases, reason="the format guard is off")
    if not sft_eval:
        return FormatVerdict(
            "grpo", rate, floor, cases,
            reason="no quick eval after SFT to judge by (no SFT ran, or cpu.eval_rows is 0)",
        )  # fmt: skip
    if rate is None:
        return FormatVerdict(
            "grpo", rate, floor, cases,
            reason="the quick eval after SFT has no parseable rate (no tool case among its rows)",
        )  # fmt: skip
    if rate >= floor:
        return FormatVerdict(
            "grpo", rate, floor, cases,
            reason=f"the call format is learnt: {rate:.0%} parseable after SFT (floor {floor:.0%})",
        )  # fmt: skip
    weak = (
        f"SFT did not learn the call format: {rate:.0%} parseable in the quick eval "
        f"({cases} cases), under cpu.sft_format_min_parseable {floor:.0%}; GRPO from here "
        "would score most rollouts alike and learn nothing"
    )
    if cpu.sft_format_guard == "stop":
        return FormatVerdict(
            "stop", rate, floor, cases,
            reason=f"{weak}. GRPO skipped (cpu.sft_format_guard: stop); train longer "
            "(cpu.sft_steps, or a larger cpu.time_budget_s) or use cpu.sft_format_guard: extend",
        )  # fmt: skip
    steps, deadline = extension(cpu, plan)
    paid = (
        f"GRPO's planned {deadline:.0f} s" if deadline is not None
        else "cpu.sft_format_extend_steps"
    )  # fmt: skip
    return FormatVerdict(
        "extend", rate, floor, cases, steps, deadline,
        reason=f"{weak}. Its {cpu.grpo_steps} GRPO steps go to {steps} more SFT steps "
        f"({paid}); the candidate is SFT-only this run",
    )  # fmt: skip


def extension_spec(spec: TrainingSpec, verdict: FormatVerdict) -> TrainingSpec:
    """The spec the extension trains with: `verdict.extend_steps` SFT steps of the spec's
    schedule from `cpu.sft_format_extend_lr`, rows in the next seed's order, no short-prompt
    curriculum."""
    cpu = spec.cpu.model_copy(
        update={
            "sft_steps": verdict.extend_steps,
            "sft_lr": spec.cpu.sft_format_extend_lr,
            "sft_short_steps": 0,
            "seed": spec.cpu.seed + EXTENSION_SEED_OFFSET,
        }
    )
    return spec.model_copy(update={"cpu": cpu})
