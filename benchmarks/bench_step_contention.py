"""Benchmark: how much a little background load slows the SFT step, and whether `nice` on the
load gives the step its time back.

Inside `make demo` the SFT step is 1.37x its own probe's (7.27 s a step against 5.2 s on the
AMX host, `demo_runs.json`), while the probe predicts a run alone to 0.94x (`bench_step_probe`).
The services beside the training (Airflow, MLflow, Ray, the MCP servers) used only 8.8% of the
two cores in that window (`demo_cpu_share.json`). Two training threads meet at a barrier after
every operator, so a service that takes one core for a millisecond stalls both threads:
the step can lose more than the CPU the service used.

Arms, in alternating rounds, each timing `--timed` SFT steps of the demo spec after a warm-up
(`sft.probe_sft_step`, the budget's own probe):
- `alone`: nothing else running;
- `load`: `--procs` processes, each busy `--busy-ms` then asleep `--idle-ms`, at nice 0;
- `load_niced`: the same processes at nice 19 (the kernel then favours the training threads).

    .venv/bin/python benchmarks/bench_step_contention.py [--rounds 2] [--timed 6]

Prints the figures and writes benchmarks/results/step_contention.json with the CPU flags.
Run it alone.

What it showed, and its limit (2026-12-07, AMX host): a 0.19-core load made the step 1.14x;
at nice 19 the step was 0.94x, but the load then used only 0.07 cores. This load is elastic
(it spins for as long as it gets the CPU); the demo's services are not: they have fixed work
to do. So niceness was tried where it matters, on the demo's services (nice 10 and their
sessions' autogroups): the trainer's CPU share during SFT stayed 1.71 cores (1.72 before) and
it was still preempted 339 times a second (362 before; `demo_cpu_share.json`). It was not
kept. What this script measures is the cost of a background load, not a remedy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_frontdoor import cpu_seconds  # noqa: E402  (a process's CPU seconds from /proc)

RESULTS = Path(__file__).parent / "results" / "step_contention.json"
SPEC = ROOT / "training" / "specs" / "cpu_smollm2.yaml"

LOAD = """
import os, sys, time
os.nice(int(sys.argv[1]))
busy, idle = float(sys.argv[2]) / 1000, float(sys.argv[3]) / 1000
while True:
    end = time.perf_counter() + busy
    while time.perf_counter() < end:
        pass
    time.sleep(idle)
"""


def start_load(
    procs: int, nice: int, busy_ms: float, idle_ms: float
) -> list[subprocess.Popen[bytes]]:
    argv = [sys.executable, "-c", LOAD, str(nice), str(busy_ms), str(idle_ms)]
    return [subprocess.Popen(argv) for _ in range(procs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the arms")
    parser.add_argument("--timed", type=int, default=6, help="SFT steps timed per arm")
    parser.add_argument("--procs", type=int, default=2, help="background load processes")
    parser.add_argument("--busy-ms", type=float, default=1.0, help="each load's busy burst")
    parser.add_argument("--idle-ms", type=float, default=9.0, help="each load's sleep between")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch

    from serving.engine.cpu_dtype import choose, cpu_facts
    from serving.tools import get_catalog
    from training.cpu_backend.huge_pages import huge_page_state
    from training.cpu_backend.sft import probe_sft_step
    from training.data.packs.generate import generate_builtin_dataset
    from training.spec.model import load_spec
    from training.spec.resolve import resolve_model

    spec = load_spec(SPEC)
    dtype = choose(spec.cpu.dtype).dtype
    torch.set_num_threads(spec.cpu.threads)
    spec = spec.model_copy(update={"cpu": spec.cpu.model_copy(update={"dtype": dtype})})
    schemas = list(get_catalog().openai_schemas())
    arms = {"alone": None, "load": 0, "load_niced": 19}
    steps: dict[str, list[float]] = {arm: [] for arm in arms}
    load_cpu: dict[str, list[float]] = {arm: [] for arm in arms if arms[arm] is not None}
    with tempfile.TemporaryDirectory(prefix="bench-step-contention-") as scratch:
        folder = Path(scratch)
        generate_builtin_dataset(folder / "data", n=300, seed=0, progress=False)
        train = folder / "data" / "train.parquet"
        base = resolve_model(spec, folder)
        for round_number in range(args.rounds):
            for arm, nice in arms.items():
                load = (
                    [] if nice is None else start_load(args.procs, nice, args.busy_ms, args.idle_ms)
                )
                started = time.perf_counter()
                try:
                    probe = probe_sft_step(spec, base, train, schemas, timed_steps=args.timed)
                    if load:
                        spent = sum(cpu_seconds(p.pid) for p in load)
                        load_cpu[arm].append(spent / (time.perf_counter() - started))
                finally:
                    for process in load:
                        process.kill()
                        process.wait()
                assert probe is not None
                steps[arm].append(probe.step_s)
                print(f"round {round_number + 1} {arm:<11} {probe.step_s:.2f} s a step", flush=True)
    medians = {arm: statistics.median(values) for arm, values in steps.items()}
    record: dict[str, Any] = {
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "dtype": dtype,
        "threads": spec.cpu.threads,
        "huge_pages": huge_page_state(),
        "spec": str(SPEC.relative_to(ROOT)),
        "load": {"procs": args.procs, "busy_ms": args.busy_ms, "idle_ms": args.idle_ms},
        "timed_steps_per_arm": args.timed,
        "rounds": args.rounds,
        "step_s_per_round": {arm: [round(v, 3) for v in values] for arm, values in steps.items()},
        "step_s_median": {arm: round(v, 3) for arm, v in medians.items()},
        "over_alone": {arm: round(v / medians["alone"], 3) for arm, v in medians.items()},
        "load_cpu_cores": {arm: [round(v, 3) for v in values] for arm, values in load_cpu.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    for arm in arms:
        used = load_cpu.get(arm)
        note = f", the load used {statistics.fmean(used):.2f} cores" if used else ""
        ratio = medians[arm] / medians["alone"]
        print(f"{arm:<11} {medians[arm]:.2f} s a step = {ratio:.2f}x alone{note}")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
