"""Two or more `bench_cpu_training.py` runs of one dataset, paired case by case.

A setting (an SFT learning rate, a batch size) changes what a run costs and what its models
score; the runs' own intervals overlap more than the settings differ, because the cases both
answered move both. So this reads each run's result JSON and the harness journals its kept
workdir holds (`bench_cpu_training.py --keep DIR`), and pairs every run's SFT and final models
against the first run's on the cases both answered (`training.evaluation.paired`, a paired
bootstrap 90% interval). The runs must share the dataset (`--rows`, `--data-seed`, `--pack`)
and `--eval-limit`, or the case ids do not meet; a run whose cases do not match the baseline's
is refused rather than paired on a subset.

    python benchmarks/bench_cpu_training.py --set cpu.sft_steps=60 --models sft \\
        --eval-limit 96 --keep /tmp/a --out /tmp/a.json
    python benchmarks/bench_cpu_training.py --set cpu.sft_steps=60 --set cpu.sft_lr=6e-4 \\
        --models sft --eval-limit 96 --keep /tmp/b --out /tmp/b.json
    python benchmarks/compare_runs.py --run lr-3e-4 /tmp/a.json /tmp/a \\
        --run lr-6e-4 /tmp/b.json /tmp/b --out benchmarks/results/sft_lr_short.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from training.evaluation.paired import paired_against, read_cases
from training.evaluation.scoring import CaseResult

MODELS = ("sft", "final")
FIGURES = (
    "parseable_rate",
    "tool_selection_accuracy",
    "exact_call_accuracy",
    "abstention_rate",
    "pass_rate",
    "malformed_call_rate",
)


class RunMismatchError(ValueError):
    """Two runs that cannot be paired: different datasets or case sets."""


def load_run(label: str, result: Path, workdir: Path) -> dict[str, Any]:
    """One run's result JSON and its models' per-case journals."""
    if not result.is_file():
        raise FileNotFoundError(f"{label}: no result JSON at {result}")
    report = json.loads(result.read_text(encoding="utf-8"))
    cases: dict[str, list[CaseResult]] = {}
    for model in MODELS:
        journal_report = workdir / "eval" / f"{model}.json"
        if not journal_report.is_file():
            raise FileNotFoundError(
                f"{label}: no {model} eval at {journal_report}; run bench_cpu_training.py "
                "with --keep DIR and pass that DIR"
            )
        cases[model] = read_cases(journal_report)
    return {"label": label, "report": report, "cases": cases}


def dataset_key(report: dict[str, Any]) -> tuple[Any, ...]:
    return (report.get("rows"), report.get("data_seed"), report.get("pack"))


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """What one run was and what its models scored."""
    report = run["report"]
    return {
        "settings": report["settings"],
        "timings_s": report["timings_s"],
        "sft": report["sft"],
        "grpo_rewards": report["grpo"]["rewards"],
        "held_out": {
            model: {
                "cases": report["held_out_eval"][model]["overall"].get("cases"),
                **{name: report["held_out_eval"][model]["overall"].get(name) for name in FIGURES},
            }
            for model in MODELS
        },
    }


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every run after the first, paired against the first, model by model."""
    baseline = runs[0]
    for run in runs[1:]:
        if dataset_key(run["report"]) != dataset_key(baseline["report"]):
            raise RunMismatchError(
                f"{run['label']} ran on dataset {dataset_key(run['report'])}, the baseline "
                f"{baseline['label']} on {dataset_key(baseline['report'])}: nothing to pair"
            )
        for model in MODELS:
            ids = {c.case_id for c in run["cases"][model]}
            base_ids = {c.case_id for c in baseline["cases"][model]}
            if ids != base_ids:
                raise RunMismatchError(
                    f"{run['label']}'s {model} eval scored {len(ids)} cases, "
                    f"{len(ids & base_ids)} of them the baseline's {len(base_ids)}: pass the "
                    "same --eval-limit to both runs"
                )
    return {
        "baseline": baseline["label"],
        "cpu": baseline["report"].get("cpu"),
        "dataset": dict(
            zip(("rows", "data_seed", "pack"), dataset_key(baseline["report"]), strict=True)
        ),
        "runs": {run["label"]: summary(run) for run in runs},
        "paired_against_baseline": {
            run["label"]: {
                model: paired_against(baseline["cases"][model], run["cases"][model])
                for model in MODELS
            }
            for run in runs[1:]
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Pair bench_cpu_training.py runs of one dataset, case by case, against "
        "the first run given."
    )
    parser.add_argument(
        "--run",
        nargs=3,
        action="append",
        metavar=("LABEL", "RESULT_JSON", "WORKDIR"),
        required=True,
        help="A run: its label, its --out JSON, its --keep workdir (repeat; the first is "
        "the baseline).",
    )
    parser.add_argument("--note", default="", help="What the comparison asks, for the JSON.")
    parser.add_argument("--out", type=Path, required=True, help="Where the JSON goes.")
    args = parser.parse_args(argv)
    if len(args.run) < 2:
        parser.error("give at least two --run: a baseline and a run to pair with it")
    try:
        runs = [load_run(label, Path(r), Path(w)) for label, r, w in args.run]
        result = {"note": args.note, **compare(runs)}
    except (FileNotFoundError, KeyError, ValueError) as err:
        # ValueError: RunMismatchError, a result that is not JSON, a journal line that is not
        # a case (pydantic's ValidationError)
        print(f"compare_runs: {err}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result["paired_against_baseline"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
