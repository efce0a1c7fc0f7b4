"""What fixing glibc's mmap threshold costs a training step: `bench_cpu_steps.py` run in fresh
processes with glibc's default, with the threshold at 1 MiB (the training stage's default,
`cpu.malloc_mmap_threshold_mib`), and with the default again, one after another.

Why: at 1 MiB a GRPO run's resident set stops climbing (peak 10.12 -> 8.93 GiB,
`grpo_job_memory_mmap_threshold.json`), but every big tensor then gets fresh pages from the
kernel, and a page fault per page could make the steps slower; the demo's budget turns step
seconds into step counts. The default runs first and last so drift on the host shows.

    python benchmarks/bench_mmap_threshold_steps.py [--repeats 3] [--prompts 2]

Writes benchmarks/results/mmap_threshold_steps.json. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "mmap_threshold_steps.json"
RUNS: tuple[tuple[str, float | None], ...] = (
    ("glibc_default", None),
    ("mmap_1mib", 1.0),
    ("glibc_default_again", None),
)


def step_seconds(report: dict[str, Any]) -> dict[str, float]:
    """The step phases' seconds from one `bench_cpu_steps.py` report."""
    grpo = report["grpo_step"]
    return {
        "sft_step_s": report["sft_step"]["seconds"],
        "generation_s": grpo["generation"]["seconds"],
        "update_policy_s": grpo["update_policy"]["seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="SFT steps timed (best kept).")
    parser.add_argument("--prompts", type=int, default=2, help="GRPO prompts in the step.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    machine: Any = None
    with tempfile.TemporaryDirectory(prefix="bench-mmap-") as folder:
        for name, threshold in RUNS:
            out = Path(folder) / f"{name}.json"
            command = [sys.executable, str(REPO / "benchmarks" / "bench_cpu_steps.py")]
            command += ["--repeats", str(args.repeats), "--prompts", str(args.prompts)]
            command += ["--out", str(out)]
            if threshold is not None:
                command += ["--mmap-threshold-mib", str(threshold)]
            subprocess.run(command, check=True, cwd=REPO, capture_output=True, text=True)
            report = json.loads(out.read_text())
            machine = report["machine"]
            runs[name] = {"mmap_threshold_mib": threshold, **step_seconds(report)}
            print(f"{name}: {runs[name]}", flush=True)
    baseline = {
        key: (runs["glibc_default"][key] + runs["glibc_default_again"][key]) / 2
        for key in ("sft_step_s", "generation_s", "update_policy_s")
    }
    ratios = {key: round(runs["mmap_1mib"][key] / value, 3) for key, value in baseline.items()}
    result = {"machine": machine, "repeats": args.repeats, "prompts": args.prompts, **runs}
    result["mmap_1mib_over_default_mean"] = ratios
    print(f"1 MiB over glibc's default (mean of its two runs): {ratios}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
