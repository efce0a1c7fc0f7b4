"""Check: does GRPO gain more when it draws its prompts from the train rows its SFT start did
not train on (`cpu.grpo_fresh_rows`, `training/cpu_backend/prompt_pool.py`)?

Reads two `bench_cpu_training.py` runs of the same spec, dataset seed and host that differ
only in that setting: their result JSONs and their per-case held-out results (the `eval/`
folder a run keeps with `--keep DIR`). It writes `benchmarks/results/grpo_fresh_rows.json`:

- whether the two SFT starts answered every held-out case alike: then the runs differ only
  in the prompts GRPO drew, and the comparison below is GRPO's alone;
- each run's GRPO over its own SFT start (paired, from its result JSON);
- the fresh-rows GRPO model minus the other GRPO model, paired on the same cases, overall and
  by category;
- per run: the steps whose groups all scored alike (no update), the mean share of such
  groups, the reward trend and the prompt pool.

Nothing is timed here. The runs' CPU flags are copied from their JSONs.

    .venv/bin/python benchmarks/bench_cpu_training.py --set cpu.sft_steps=150 \\
        --set cpu.grpo_steps=16 --models sft final --data-seed 1 --keep /tmp/base --out A.json
    .venv/bin/python benchmarks/bench_cpu_training.py --set cpu.sft_steps=150 \\
        --set cpu.grpo_steps=16 --set cpu.grpo_fresh_rows=true --models sft final \\
        --data-seed 1 --keep /tmp/fresh --out B.json
    .venv/bin/python benchmarks/grpo_fresh_rows.py --base A.json --base-eval /tmp/base/eval \\
        --fresh B.json --fresh-eval /tmp/fresh/eval
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
OUT = RESULTS / "grpo_fresh_rows.json"

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
    base: dict[str, Any], base_eval: Path, fresh: dict[str, Any], fresh_eval: Path
) -> dict[str, Any]:
    """The report described in the module docstring."""
    base_sft, fresh_sft = read_cases(base_eval / "sft.json"), read_cases(fresh_eval / "sft.json")
    base_final = read_cases(base_eval / "final.json")
    fresh_final = read_cases(fresh_eval / "final.json")
    fresh_minus_base = paired_against(base_final, fresh_final, GRPO_ADDS_FIELDS)
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
            for name, run in (("base", base), ("fresh_rows", fresh))
        },
        "sft_starts_differ_on_cases": differing_cases(base_sft, fresh_sft),
        "held_out_cases": len(fresh_final),
        "fresh_minus_base": fresh_minus_base,
        "fresh_minus_base_by_category": paired_by_category(
            base_final, fresh_final, GRPO_ADDS_FIELDS
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="Result JSON, option off.")
    parser.add_argument("--base-eval", type=Path, required=True, help="Its kept eval/ folder.")
    parser.add_argument("--fresh", type=Path, required=True, help="Result JSON, option on.")
    parser.add_argument("--fresh-eval", type=Path, required=True, help="Its kept eval/ folder.")
    parser.add_argument("--out", type=Path, default=OUT, help="Where the JSON goes.")
    args = parser.parse_args()
    base = json.loads(args.base.read_text())
    fresh = json.loads(args.fresh.read_text())
    if (base["data_seed"], base["pack"]) != (fresh["data_seed"], fresh["pack"]):
        raise SystemExit("the two runs must share a dataset seed and pack: nothing to pair")
    report = compare(base, args.base_eval, fresh, args.fresh_eval)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"SFT starts answered {report['sft_starts_differ_on_cases']} held-out cases differently")
    for name, run in report["runs"].items():
        adds = run["grpo_adds"]["exact_call"]
        flat = run["flat"]
        print(
            f"{name}: GRPO over its SFT start, exact call {difference_text(adds)} "
            f"({adds['cases']} cases); {flat['steps_all_groups_flat']} of {flat['steps']} "
            f"steps all flat; pool {flat['prompt_pool']}"
        )
    for metric, figure in report["fresh_minus_base"].items():
        print(f"fresh rows minus base, {metric}: {difference_text(figure)} ({figure['cases']})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
