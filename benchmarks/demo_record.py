"""Record what a finished `make demo` measured: wall time, the budget's plan, step and eval
times, peak memory, the gate's decision and the champion's held-out figures with intervals.

    start=$(date +%s); make demo; echo $(( $(date +%s) - start ))    # make demo's wall time
    python benchmarks/demo_record.py runs/demo --wall-s 2083 --label budget-grpo-first

Reads the demo's workdir (the training job's `cpu_report.json`, the DAG's gate decision, the
champion after each scheduled run with the candidate's paired gain over it: `history.py`) and
appends one entry, with this machine's CPU flags, to benchmarks/results/demo_runs.json (the time
targets: 20 minutes with native bf16, 35 on AVX2).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from serving.engine.cpu_dtype import cpu_facts
from training.ops.demo.budget import BUDGET_MINUTES
from training.ops.demo.history import champion_history, held_out_figures

RESULTS = Path(__file__).parent / "results" / "demo_runs.json"
QUICK_EVAL_FIGURES = (
    "rows",
    "parseable_rate",
    "tool_selection_accuracy",
    "exact_call_accuracy",
    "abstention_rate",
    "pass_rate",
)


def newest(workdir: Path, pattern: str) -> Path:
    found = sorted(workdir.glob(pattern), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no {pattern} under {workdir}: is it a finished demo's workdir?")
    return found[-1]


def candidate_figures(workdir: Path) -> dict[str, Any]:
    """The last run's candidate on the DAG's held-out cases, with intervals; {} without one."""
    found = sorted(workdir.glob("pipeline/*/eval/candidate.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return {}
    report = json.loads(found[-1].read_text(encoding="utf-8"))
    return {key: asdict(figure) for key, figure in held_out_figures(report).items()}


def record(workdir: Path, wall_s: float, label: str) -> dict[str, Any]:
    report = json.loads(newest(workdir, "pipeline/*/jobs/*/cpu_report.json").read_text())
    gate = json.loads(newest(workdir, "pipeline/*/eval/gate_decision.json").read_text())
    history = [asdict(entry) for entry in champion_history(workdir / "pipeline")]
    dtype = str(report["time_budget"]["dtype"]) if report.get("time_budget") else "unknown"
    return {
        "label": label,
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "make_demo_wall_s": wall_s,
        "make_demo_wall_min": round(wall_s / 60, 1),
        "target_min": BUDGET_MINUTES.get(dtype),
        "time_budget": report.get("time_budget"),
        "training_timings_s": {k: round(float(v), 1) for k, v in report["timings"].items()},
        "quick_eval_s": {k: v.get("seconds") for k, v in report["evals"].items()},
        # what each phase did to the model on the job's own held-out rows (the same rows for
        # every phase): whether the demo's GRPO moved its SFT start, and which way
        "quick_eval": {
            stage: {key: block.get(key) for key in QUICK_EVAL_FIGURES}
            for stage, block in report["evals"].items()
        },
        "training_peak_rss_gib": report.get("peak_rss_gib"),
        "sft": {
            key: report["sft"].get(key)
            for key in ("steps", "deadline_s", "stopped_by_deadline_at", "lr_horizon")
        },
        "grpo": {key: report["grpo"].get(key) for key in ("steps_trained", "setup_s", "step_s")},
        "gate": {k: gate.get(k) for k in ("decision", "reasons")},
        # the candidate's figures whatever the gate decided: a rejection keeps its intervals
        "candidate_held_out": candidate_figures(workdir),
        "champion_held_out": history[-1]["figures"] if history else None,
        # `toolrl demo --runs N`: the champion after each scheduled run (issue 31's target:
        # runs 2 and 3 not worse than run 1 outside the interval)
        "scheduled_runs": [
            {
                key: entry[key]
                for key in ("run", "promoted", "champion", "figures", "versus_champion")
            }
            for entry in history
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("workdir", type=Path, help="The demo's workdir (runs/demo).")
    parser.add_argument("--wall-s", type=float, required=True, help="make demo's wall time.")
    parser.add_argument("--label", default="demo", help="What this run varied.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    entry = record(args.workdir, args.wall_s, args.label)
    runs = json.loads(args.out.read_text()) if args.out.is_file() else []
    runs.append(entry)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(entry, indent=2))


if __name__ == "__main__":
    main()
