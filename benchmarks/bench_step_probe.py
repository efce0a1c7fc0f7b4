"""Does the time budget's step probe predict the steps the run then trains?

The budget (`training/cpu_backend/budget.py`) plans from an SFT step cost timed where the
run is, before training (`sft.probe_sft_step`: one warm-up step, then `--timed` steps on whole
batches spread over the run's own, weights thrown away). This script runs that probe on the
demo's spec (`cpu_smollm2.yaml`: SmolLM2-135M, batch 8) and then a real SFT of `--steps`
steps from the same base on the same data, and compares the probe's step with the real
ones (median after the first, and the mean), beside the table's step cost for this CPU's
dtype: the baseline a plan used before the probe.

    .venv/bin/python benchmarks/bench_step_probe.py [--steps 20] [--timed 3] [--out FILE]

Writes benchmarks/results/step_probe.json (or --out) with the CPU flags. Run it alone: the
question is how well a few steps predict the rest, and a second process on two cores moves
both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "step_probe.json"
SPEC = Path(__file__).resolve().parents[1] / "training" / "specs" / "cpu_smollm2.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="real SFT steps to compare with")
    parser.add_argument("--timed", type=int, default=3, help="steps the probe times")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.steps < 2 or args.timed < 1:
        parser.error("--steps must be at least 2 and --timed at least 1")

    import torch

    from serving.engine.cpu_dtype import choose, cpu_facts
    from serving.tools import get_catalog
    from training.cpu_backend.budget import STEP_COSTS
    from training.cpu_backend.sft import StepClock, probe_sft_step, run_sft
    from training.data.packs.generate import generate_builtin_dataset
    from training.spec.model import load_spec
    from training.spec.resolve import resolve_model

    spec = load_spec(SPEC)
    dtype = choose(spec.cpu.dtype).dtype
    torch.set_num_threads(spec.cpu.threads)
    cpu = spec.cpu.model_copy(update={"dtype": dtype, "sft_steps": args.steps})
    spec = spec.model_copy(update={"cpu": cpu})
    schemas = list(get_catalog().openai_schemas())
    with tempfile.TemporaryDirectory(prefix="bench-step-probe-") as scratch:
        folder = Path(scratch)
        generate_builtin_dataset(folder / "data", n=300, seed=0, progress=False)
        train = folder / "data" / "train.parquet"
        base = resolve_model(spec, folder)
        print(f"probe: {args.timed} timed SFT steps after a warm-up ({dtype}) ...", flush=True)
        probe = probe_sft_step(spec, base, train, schemas, timed_steps=args.timed)
        assert probe is not None
        print(f"  {probe.step_s:.2f} s a step, {probe.spent_s:.1f} s in all", flush=True)
        print(f"real SFT: {args.steps} steps from the same base ...", flush=True)
        clock = StepClock()
        started = time.perf_counter()
        sft = run_sft(spec, base, train, folder / "run", schemas, [clock])
        wall = time.perf_counter() - started
    steps = [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    real_median, real_mean = statistics.median(steps), statistics.fmean(steps)
    table = STEP_COSTS[dtype].sft_s
    record: dict[str, Any] = {
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "dtype": dtype,
        "threads": spec.cpu.threads,
        "spec": str(SPEC.relative_to(SPEC.parents[2])),
        "batch_size": spec.cpu.sft_batch_size,
        "probe": {
            "timed_steps": probe.timed_steps,
            "step_s": round(probe.step_s, 2),
            "spent_s": round(probe.spent_s, 1),
        },
        "real_sft": {
            "steps": sft.steps,
            "wall_s": round(wall, 1),
            "step_s_each": [round(s, 2) for s in steps],
            "step_s_median": round(real_median, 2),
            "step_s_mean": round(real_mean, 2),
        },
        "table_step_s": table,
        "probe_over_real_mean": round(probe.step_s / real_mean, 3),
        "table_over_real_mean": round(table / real_mean, 3),
        "note": "steps after the real run's first are timed end to end (checkpoint saves "
        "included); the probe's first step is its warm-up",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(
        f"real step {real_mean:.2f} s (median {real_median:.2f}); probe {probe.step_s:.2f} s "
        f"= {probe.step_s / real_mean:.2f}x; table {table:g} s = {table / real_mean:.2f}x "
        f"-> {args.out}"
    )


if __name__ == "__main__":
    main()
