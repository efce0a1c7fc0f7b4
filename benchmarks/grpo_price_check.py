"""Check: does the time budget price a GRPO step at what `make demo` runs then took?

Reads the recorded demo runs (`benchmarks/results/demo_runs.json`, written by
`demo_record.py`); for every run whose plan came from the budget's probe, it prices the
run's GRPO step again with today's `budget.measured_cost` (and the replay's SFT batch where
that run replayed one) from the SFT step the run's probe measured, and sets both prices, the
one the run planned with and today's, against the GRPO seconds per step the run took. Per
kind of CPU (AMX, AVX512-BF16 without AMX, AVX2 only) it prints the median actual/planned
ratio under each, and writes `benchmarks/results/grpo_price.json`. Nothing is timed here:
the figures are the recorded runs', each with its CPU flags.

    .venv/bin/python benchmarks/grpo_price_check.py
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from training.cpu_backend.budget import (
    PROBE_OVER_RUN,
    STEP_COSTS,
    MeasuredStep,
    measured_cost,
    with_replay,
)
from training.spec.model import CpuSection

RESULTS = Path(__file__).parent / "results"
RUNS = RESULTS / "demo_runs.json"
OUT = RESULTS / "grpo_price.json"


def cpu_kind(flags: list[str]) -> str:
    if "amx_bf16" in flags:
        return "AMX"
    return "AVX512-BF16, no AMX" if "avx512_bf16" in flags else "AVX2 only"


def priced_run(run: dict[str, Any]) -> dict[str, Any] | None:
    """One recorded run's GRPO step: taken, planned then, priced now; None where the run
    planned without a probe, trained no GRPO step or lacks a field."""
    plan = run.get("time_budget") or {}
    grpo_s = (run.get("training_timings_s") or {}).get("grpo_s")
    steps, sft_step_s, planned = (
        plan.get("grpo_steps"),
        plan.get("sft_step_s"),
        plan.get("grpo_step_s"),
    )
    dtype = plan.get("dtype")
    source = str(plan.get("cost_source", ""))
    if not (grpo_s and steps and sft_step_s and planned) or dtype not in STEP_COSTS:
        return None
    if not source.startswith("measured here"):
        return None
    replays = "replays one SFT batch" in source
    cpu = CpuSection(grpo_sft_replay_coef=1.0 if replays else 0.0)
    probe = MeasuredStep(step_s=sft_step_s * PROBE_OVER_RUN, spent_s=0.0, timed_steps=3)
    now = with_replay(cpu, measured_cost(dtype, probe)).grpo_s
    actual = grpo_s / steps
    return {
        "measured_at_utc": run.get("measured_at_utc"),
        "cpu_kind": cpu_kind(run["cpu"]["flags"]),
        "flags": run["cpu"]["flags"],
        "dtype": dtype,
        "sft_ratio": round(sft_step_s / STEP_COSTS[dtype].sft_s, 3),
        "grpo_steps": steps,
        "actual_step_s": round(actual, 1),
        "planned_then_s": round(planned, 1),
        "priced_now_s": round(now, 1),
        "actual_over_then": round(actual / planned, 3),
        "actual_over_now": round(actual / now, 3),
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(float(statistics.median(float(r[key]) for r in rows)), 3)

    return {
        "runs": len(rows),
        "median_actual_over_planned_then": median("actual_over_then"),
        "median_actual_over_priced_now": median("actual_over_now"),
        "range_over_now": [
            min(r["actual_over_now"] for r in rows),
            max(r["actual_over_now"] for r in rows),
        ],
        "median_overrun_per_step_then_s": round(
            statistics.median(r["actual_step_s"] - r["planned_then_s"] for r in rows), 1
        ),
        "median_overrun_per_step_now_s": round(
            statistics.median(r["actual_step_s"] - r["priced_now_s"] for r in rows), 1
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=RUNS, help="Recorded demo runs (JSON list).")
    parser.add_argument("--out", type=Path, default=OUT, help="Where the JSON goes.")
    args = parser.parse_args()
    recorded = json.loads(args.runs.read_text(encoding="utf-8"))
    rows = [row for row in map(priced_run, recorded) if row is not None]
    kinds = sorted({r["cpu_kind"] for r in rows})
    by_kind = {kind: summary([r for r in rows if r["cpu_kind"] == kind]) for kind in kinds}
    for kind, figures in by_kind.items():
        print(
            f"{kind}: {figures['runs']} runs, GRPO step actual/planned median "
            f"{figures['median_actual_over_planned_then']} as planned then, "
            f"{figures['median_actual_over_priced_now']} as priced now "
            f"(range {figures['range_over_now'][0]}-{figures['range_over_now'][1]})"
        )
    report = {
        "checked_at_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": str(args.runs.name),
        "note": "actual: the run's GRPO seconds over its GRPO steps (setup included); planned "
        "then: the plan the run made; priced now: budget.measured_cost from the run's own "
        "probe, with the replay's SFT batch where the run replayed one",
        "by_cpu_kind": by_kind,
        "runs": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
