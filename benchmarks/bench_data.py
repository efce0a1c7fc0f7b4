"""Benchmark: generate + validate 100,000 rows (target: < 60 s, < 2 GiB peak on 2 cores).

Prints the figures and writes benchmarks/results/data.json. The same script first runs a
10,000-row baseline, so the report also carries a scaling ratio that is comparable across
noisy machines (1.0 = perfectly linear).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from training.data.config import ValidationConfig
from training.data.packs.generate import generate_builtin_dataset
from training.data.validate import validate_dataset

RESULTS = Path(__file__).parent / "results" / "data.json"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(n: int, workdir: Path) -> dict[str, Any]:
    out = workdir / f"ds-{n}"
    started = time.perf_counter()
    manifest = generate_builtin_dataset(out, n=n, seed=0, progress=False).manifest
    generated = time.perf_counter()
    report = validate_dataset(out, ValidationConfig())
    validated = time.perf_counter()
    if not report.success:
        raise SystemExit(f"validation failed during benchmark:\n{report.summary()}")
    return {
        "rows": manifest["rows"],
        "generate_s": round(generated - started, 2),
        "validate_s": round(validated - generated, 2),
        "total_s": round(validated - started, 2),
        "rows_per_s": round(n / (validated - started)),
        "peak_rss_mib_so_far": round(peak_rss_mib()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--baseline-rows", type=int, default=10_000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="toolrl-bench-"))
    try:
        baseline = run(args.baseline_rows, workdir)
        shutil.rmtree(workdir / f"ds-{args.baseline_rows}")
        full = run(args.rows, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    scale = args.rows / args.baseline_rows
    result = {
        "benchmark": "data generate+validate",
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "baseline": baseline,
        "full": full,
        "scaling_ratio": round(full["total_s"] / (baseline["total_s"] * scale), 3),
        "peak_rss_gib": round(peak_rss_mib() / 1024, 3),
        "targets": {"total_s": 60, "peak_rss_gib": 2.0},
        "meets_targets": full["total_s"] < 60 and peak_rss_mib() / 1024 < 2.0,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
