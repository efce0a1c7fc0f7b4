"""Benchmark: `toolrl train plan` wall time for every verl spec (target: under 15 s).

What a user waits for is a fresh process: interpreter start, imports (verl, torch, Hydra),
verl's config composition and every check `plan` runs. Each spec is planned in a new
process `--repeats` times (median reported). The baseline, measured in the same script and
minutes, is `toolrl --help` in a new process: start-up cost every command pays. The ratio
says how much `plan` itself adds on this machine, whatever its speed today. In-process
figures split a warm second plan into composition and checks.

Writes benchmarks/results/plan.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "plan.json"
VERL_SPECS = ("qwen35_4b_gspo.yaml", "qwen35_35b_a3b_moe.yaml", "gpu_tiny_smoke.yaml")
TARGET_S = 15.0


def wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def warm_breakdown(spec_file: Path) -> dict[str, float]:
    """A second plan in this (already warm) process, and how much of it is composition."""
    from training.spec.model import load_spec
    from training.spec.overrides import build_overrides
    from training.spec.plan import compose_verl_config, plan

    spec = load_spec(spec_file)
    plan(spec)  # imports and first-use caches
    started = time.perf_counter()
    compose_verl_config(build_overrides(spec, "/unused/tool_config.yaml"))
    compose = time.perf_counter() - started
    started = time.perf_counter()
    plan(spec)
    total = time.perf_counter() - started
    return {"warm_compose_s": round(compose, 3), "warm_plan_s": round(total, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    cli = [sys.executable, "-m", "training.cli"]
    baseline = [wall([*cli, "--help"]) for _ in range(args.repeats)]
    specs: dict[str, Any] = {}
    for name in VERL_SPECS:
        spec_file = ROOT / "training" / "specs" / name
        times = [
            wall([*cli, "train", "plan", "--spec", str(spec_file)]) for _ in range(args.repeats)
        ]
        median = statistics.median(times)
        specs[name] = {
            "cold_plan_s": [round(t, 2) for t in times],
            "median_s": round(median, 2),
            "ratio_to_cli_start": round(median / statistics.median(baseline), 2),
            "under_target": median < TARGET_S,
            **warm_breakdown(spec_file),
        }
        print(f"{name}: plan {median:.2f} s (target {TARGET_S:.0f} s)", flush=True)
    result = {
        "target_s": TARGET_S,
        "cli_start_baseline_s": round(statistics.median(baseline), 2),
        "specs": specs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
