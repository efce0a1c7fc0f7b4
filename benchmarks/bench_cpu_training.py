"""Benchmark: the whole CPU training stage of the demo (target: < 10 min on 2 cores).

Generates the demo dataset, then runs `run_local` with `training/specs/cpu_tiny.yaml` in a
fresh workdir: tiny model build, quick held-out eval, SFT warm start, eval, GRPO, eval.
Reports SFT and GRPO steps/s and tokens/s, the held-out metrics before training, after SFT
and after GRPO with the time each phase took, and the machine's load average (the figures
are only comparable at a similar load: other work on the two cores slows every phase).
Writes benchmarks/results/cpu_training.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from training.cpu_backend.metrics import HEADLINE_RATES

RESULTS = Path(__file__).parent / "results" / "cpu_training.json"
SPEC = Path(__file__).resolve().parents[1] / "training" / "specs" / "cpu_tiny.yaml"
METRICS = HEADLINE_RATES


def run(spec_path: Path, workdir: Path, rows: int) -> dict[str, Any]:
    from training.cpu_backend.run import REPORT, run_local
    from training.spec.model import load_spec

    generate = [sys.executable, "-m", "training.cli", "data", "generate"]
    out = str(workdir / "data")
    subprocess.run([*generate, "--out", out, "--n", str(rows), "--quiet"], check=True)
    started = time.perf_counter()
    run_local(load_spec(spec_path), workdir)
    total = time.perf_counter() - started
    report: dict[str, Any] = json.loads((workdir / REPORT).read_text())
    evals = report["evals"]
    timings = report["timings"]
    phase_seconds = {
        "before": 0.0,
        "sft": timings["sft_s"],
        "grpo": timings["grpo_s"],
    }
    return {
        "stage_total_s": round(total, 1),
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "sft": {
            "steps": report["sft"]["steps"],
            "steps_per_s": round(report["metrics"]["train/sft/steps_per_s"], 3),
            "tokens_per_s": round(report["metrics"]["train/sft/tokens_per_s"]),
            "first_loss": report["sft"]["first_loss"],
            "last_loss": report["sft"]["last_loss"],
        },
        "grpo": {
            "steps": report["grpo"]["steps_trained"],
            "steps_per_s": round(report["metrics"]["train/steps_per_s"], 3),
            "tokens_per_s": round(report["metrics"]["train/tokens_per_s"]),
            "rewards": [round(r, 3) for r in report["grpo"]["rewards"]],
            "malformed_history": report["grpo"]["malformed_history"],
        },
        "held_out": {
            stage: {
                **{m: round(float(evals[stage][m]), 3) for m in METRICS},
                "mean_reward": round(float(evals[stage]["mean_reward"]), 3),
                "rows": evals[stage]["rows"],
                "eval_s": round(float(evals[stage]["seconds"]), 1),
                "phase_s": round(phase_seconds[stage], 1),
            }
            for stage in ("before", "sft", "grpo")
        },
        "result": report["result"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--rows", type=int, default=2_000, help="Dataset size (train + test).")
    parser.add_argument("--keep", type=Path, default=None, help="Keep the workdir here.")
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench-cpu-"))
    load_before = os.getloadavg()
    try:
        figures = run(args.spec, workdir, args.rows)
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_1m_before": round(load_before[0], 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
        },
        "spec": str(args.spec.relative_to(Path.cwd()) if args.spec.is_absolute() else args.spec),
        **figures,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
