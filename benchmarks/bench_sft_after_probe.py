"""Benchmark: does the work before SFT in the training process (probe, quick eval) slow it?

In `make demo` the training process times a few SFT steps of its own spec (the budget's
probe, `sft.probe_sft_step`: a second trainer on a second copy of the model, thrown away),
then trains SFT. The SFT's steps then cost more than the probe's (0.67-0.82 probe over run
in the AMX demos), and `bench_sft_horizon.py` showed the same 72 steps 1.17-1.25x slower in a
process that had trained before. If the probe alone does that, the probe belongs in a
process of its own.

Each arm is a fresh process that trains `--steps` SFT steps of the demo spec on the same
rows; `after-probe` runs the budget's probe first, as the training job does, and
`after-eval` the quick eval of the base model (the engine's generation, the MCP server in
mock mode, in this process), as the training job does next. `--arms` names the two arms to
compare; they alternate in order over `--pairs` pairs. Writes
benchmarks/results/sft_after_probe.json (or `--out`) with the CPU flags; run it alone.

    .venv/bin/python benchmarks/bench_sft_after_probe.py --steps 30 --pairs 2
    .venv/bin/python benchmarks/bench_sft_after_probe.py --arms fresh after-eval \
        --out benchmarks/results/sft_after_eval.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results" / "sft_after_probe.json"
ARMS = ("fresh", "after-probe", "after-eval")


def run_arm(arm: str, steps: int) -> dict[str, Any]:
    """Train `steps` SFT steps here (after the budget's probe for `after-probe`, after the
    base model's quick eval for `after-eval`); each step's wall seconds, the first (the
    trainer's start) left out of the mean."""
    from bench_sft_step_drift import demo_sft_spec

    from serving.tools import get_catalog
    from training.cpu_backend.memory import release_memory
    from training.cpu_backend.run import eval_rows, quick_eval, served_tools
    from training.cpu_backend.sft import StepClock, probe_sft_step, run_sft
    from training.data.packs.generate import generate_builtin_dataset
    from training.spec.resolve import resolve_model, resolve_paths

    spec, dtype, _ = demo_sft_spec(steps)
    schemas = list(get_catalog().openai_schemas())
    with tempfile.TemporaryDirectory(prefix="bench-sft-after-probe-") as scratch:
        folder = Path(scratch)
        generate_builtin_dataset(folder / "data", n=300, seed=0, progress=False)
        base = resolve_model(spec, folder)
        train = folder / "data" / "train.parquet"
        probe = probe_sft_step(spec, base, train, schemas) if arm == "after-probe" else None
        eval_s = None
        if arm == "after-eval":
            resolved = resolve_paths(spec, folder)
            with served_tools(resolved) as (url, token, _usage):
                rows = eval_rows(resolved)
                eval_s = quick_eval(resolved, base, rows, url, folder / "eval.json", token)[
                    "seconds"
                ]
            release_memory({}, "before")
        clock = StepClock()
        started = time.perf_counter()
        run_sft(spec, base, train, folder / "run", schemas, [clock])
    ends = [started, *clock.ends]
    step_s = [b - a for a, b in pairwise(ends)]
    return {
        "arm": arm,
        "dtype": dtype,
        "probe_step_s": probe.step_s if probe else None,
        "quick_eval_s": eval_s,
        "mean_step_s": statistics.fmean(step_s[1:]),
        "first_half_s": statistics.fmean(step_s[1 : len(step_s) // 2]),
        "second_half_s": statistics.fmean(step_s[len(step_s) // 2 :]),
        "step_s": [round(s, 3) for s in step_s],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="SFT steps per arm")
    parser.add_argument("--pairs", type=int, default=2, help="pairs of arms, order alternating")
    parser.add_argument(
        "--arms",
        nargs=2,
        choices=ARMS,
        default=["fresh", "after-probe"],
        help="the two arms to compare (the second over the first)",
    )
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # one arm, in a child
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    if args.steps < 4 or args.pairs < 1:
        parser.error("--steps must be at least 4 and --pairs at least 1")
    if args.arm:
        print(json.dumps(run_arm(args.arm, args.steps)))
        return

    from serving.engine.cpu_dtype import cpu_facts

    pairs = []
    for number in range(args.pairs):
        order = list(args.arms) if number % 2 == 0 else list(args.arms)[::-1]
        results = {}
        for arm in order:
            print(f"pair {number + 1}: {arm}, {args.steps} SFT steps ...", flush=True)
            child = subprocess.run(
                [sys.executable, __file__, "--arm", arm, "--steps", str(args.steps)],
                capture_output=True,
                text=True,
                check=True,
            )
            results[arm] = json.loads(child.stdout.strip().splitlines()[-1])
            print(f"  mean step {results[arm]['mean_step_s']:.2f} s", flush=True)
        first, second = args.arms
        ratio = results[second]["mean_step_s"] / results[first]["mean_step_s"]
        key = f"{second}_over_{first}".replace("-", "_")
        pairs.append({"order": order, key: round(ratio, 3), **results})
    report = {
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "steps": args.steps,
        "pairs": pairs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps([p[key] for p in pairs]))


if __name__ == "__main__":
    main()
