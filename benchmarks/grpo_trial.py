"""Pair two GRPO runs from one SFT start: does a GRPO setting (the trial) gain more over
that start than the base setting does?

Reads two `bench_cpu_training.py` runs of the same spec, dataset seed and host that differ
only in GRPO settings: their result JSONs and their per-case held-out results (the `eval/`
folder a run keeps with `--keep DIR`). It writes `benchmarks/results/grpo_trial_<label>.json`:

- whether the two SFT starts answered every held-out case alike: then the runs differ only
  in GRPO, and the comparison below is GRPO's alone;
- each run's GRPO over its own SFT start (paired, from its result JSON);
- the trial's GRPO model minus the base's GRPO model, paired on the same cases, overall and
  by category;
- per run: the steps whose groups all scored alike (no update), the mean share of such
  groups, the reward trend and the prompt pool.

Nothing is timed here. The runs' CPU flags are copied from their JSONs. The trial can reuse
the base run's SFT: copy its kept folder without GRPO's checkpoints and reports, and the
runner resumes after SFT (`--keep` on the copy). Used first for `cpu.grpo_fresh_rows`
(`grpo_fresh_rows.json`, written when this script was `grpo_fresh_rows.py`):

    .venv/bin/python benchmarks/bench_cpu_training.py --set cpu.sft_steps=150 \\
        --set cpu.grpo_steps=16 --set cpu.grpo_fresh_rows=false --models sft final \\
        --data-seed 1 --keep /tmp/base --out A.json
    .venv/bin/python benchmarks/bench_cpu_training.py --set cpu.sft_steps=150 \\
        --set cpu.grpo_steps=16 --models sft final --data-seed 1 --keep /tmp/fresh --out B.json
    .venv/bin/python benchmarks/grpo_trial.py --label fresh_rows --base A.json \\
        --base-eval /tmp/base/eval --trial B.json --trial-eval /tmp/fresh/eval
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from training.evaluation.paired import (
    difference_text,
    paired_against,
    paired_by_category,
    read_cases,
)
from training.evaluation.scoring import CaseResult

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu_training import GRPO_ADDS_FIELDS  # the fields its GRPO adds pairs

RESULTS = Path(__file__).parent / "results"

#: What two SFT starts must agree on, case by case, to count as the same start.
ANSWER_FIELDS = ("passed", "exact_calls", "selection_ok", "called_tools", "final_answer")


def answers(case: CaseResult) -> tuple[Any, ...]:
    return tuple(getattr(case, field) for field in ANSWER_FIELDS)


def differing_cases(first: list[CaseResult], second: list[CaseResult]) -> int:
    """Cases the two models answered differently (or only one answered)."""
    one = {c.case_id: answers(c) for c in first}
    two = {c.case_id: answers(c) for c in second}
    return sum(one.get(case) != two.get(case) for case in one.keys() | two.keys())


def flat_steps(run: dict[str, Any]) -> dict[str, Any]:
    """How much of a run's GRPO carried no signal (groups whose rollouts scored alike)."""
    grpo = run["grpo"]
    shares = [float(s) for s in grpo.get("zero_std_fractions") or []]
    return {
        "steps": len(shares),
        "steps_all_groups_flat": sum(s >= 1.0 for s in shares),
        "mean_flat_group_share": round(sum(shares) / len(shares), 3) if shares else None,
        "reward_trend": grpo.get("reward_trend"),
        "prompt_pool": grpo.get("prompt_pool"),
    }


def compare(
    base: dict[str, Any],
    base_eval: Path,
    trial: dict[str, Any],
    trial_eval: Path,
    label: str = "trial",
) -> dict[str, Any]:
    """The report described in the module docstring; `label` names the trial's run."""
    base_sft, trial_sft = read_cases(base_eval / "sft.json"), read_cases(trial_eval / "sft.json")
    base_final = read_cases(base_eval / "final.json")
    trial_final = read_cases(trial_eval / "final.json")
    return {
        "measured_at_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "runs": {
            name: {
                "settings": run["settings"],
                "data_seed": run["data_seed"],
                "pack": run["pack"],
                "cpu_flags": run["cpu"]["flags"],
                "timings_s": run["timings_s"],
                "grpo_adds": run["grpo_adds"],
                "flat": flat_steps(run),
            }
            for name, run in (("base", base), (label, trial))
        },
        "trial": label,
        "sft_starts_differ_on_cases": differing_cases(base_sft, trial_sft),
        "held_out_cases": len(trial_final),
        "trial_minus_base": paired_against(base_final, trial_final, GRPO_ADDS_FIELDS),
        "trial_minus_base_by_category": paired_by_category(
            base_final, trial_final, GRPO_ADDS_FIELDS
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--label", required=True, help="What the trial changes, as a name: multi_step_prompts."
    )
    parser.add_argument("--base", type=Path, required=True, help="Base run's result JSON.")
    parser.add_argument("--base-eval", type=Path, required=True, help="Its kept eval/ folder.")
    parser.add_argument("--trial", type=Path, required=True, help="Trial run's result JSON.")
    parser.add_argument("--trial-eval", type=Path, required=True, help="Its kept eval/ folder.")
    parser.add_argument(
        "--out", type=Path, default=None, help="Where the JSON goes (grpo_trial_<label>.json)."
    )
    args = parser.parse_args()
    if not args.label.replace("_", "").isalnum() or args.label == "base":
        raise SystemExit(
            f"--label {args.label!r}: letters, digits and underscores only, and not 'base'"
        )
    out = args.out or RESULTS / f"grpo_trial_{args.label}.json"
    base = json.loads(args.base.read_text())
    trial = json.loads(args.trial.read_text())
    if (base["data_seed"], base["pack"]) != (trial["data_seed"], trial["pack"]):
        raise SystemExit("the two runs must share a dataset seed and pack: nothing to pair")
    report = compare(base, args.base_eval, trial, args.trial_eval, args.label)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"SFT starts answered {report['sft_starts_differ_on_cases']} held-out cases differently")
    for name, run in report["runs"].items():
        adds = run["grpo_adds"]["exact_call"]
        flat = run["flat"]
        print(
            f"{name}: GRPO over its SFT start, exact call {difference_text(adds)} "
            f"({adds['cases']} cases); {flat['steps_all_groups_flat']} of {flat['steps']} "
            f"steps all flat; pool {flat['prompt_pool']}"
        )
    for metric, figure in report["trial_minus_base"].items():
        text = difference_text(figure) if "difference" in figure else "no case it applies to"
        print(f"{args.label} minus base, {metric}: {text} ({figure['cases']})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
