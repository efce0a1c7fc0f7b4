"""Benchmark: does the SFT step get slower as a run goes on, and what grows with it?

The budget's probe times three steps at the start of a run; on the AMX host the demo's run
then averaged 1.37x the probe's step, and the run's own step times (`cpu_report.json`
`sft.step_s`, recorded since 2026-12-07) rose from about 6 s to about 8 s over 81 steps. This
script trains `--steps` SFT steps of the demo spec alone (no services) and records, per step,
the wall time, the process's user and system CPU seconds, minor page faults, context
switches, resident memory and the memory held on 2 MiB pages, then prints the means per
quarter of the run. Run it once per allocator setting (the huge-page switches come from the
environment, as the job driver sets them, `training/cpu_backend/huge_pages.py`):

    THP_MEM_ALLOC_ENABLE=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \\
        .venv/bin/python benchmarks/bench_sft_step_drift.py --label huge-pages
    .venv/bin/python benchmarks/bench_sft_step_drift.py --label 4k-pages

The process sizes oneDNN's primitive cache as the trainer does (`cpu.onednn_primitive_cache`,
`training/cpu_backend/onednn_cache.py`); a capacity in the environment wins, which is how
the cache's own runs compare (2026-12-07: the default's steps drifted 1.13-1.20x over 60
steps, 65,536's did not):

    ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024 THP_MEM_ALLOC_ENABLE=1 \
        GLIBC_TUNABLES=glibc.malloc.hugetlb=1 .venv/bin/python \
        benchmarks/bench_sft_step_drift.py --steps 60 --probe 20 --label default-cache

`--probe N` also times fixed work (a matmul, and one made-up batch's forward and backward)
in the training process every N steps: if that slows down, the process has changed, not the
data. Each step's forward and backward and its optimizer step are recorded apart.

Appends one entry per run to benchmarks/results/sft_step_drift.json with the CPU flags. Run
it alone.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results" / "sft_step_drift.json"
SPEC = ROOT / "training" / "specs" / "cpu_smollm2.yaml"


def quarters(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    size = max(1, len(rows) // 4)
    parts = [rows[i * size : (i + 1) * size] for i in range(4) if rows[i * size : (i + 1) * size]]
    return [
        {key: round(statistics.fmean(row[key] for row in part), 3) for key in part[0]}
        for part in parts
    ]


def demo_sft_spec(steps: int) -> tuple[Any, str, int]:
    """The demo spec for `steps` SFT steps with no checkpoint saves, in this CPU's compute
    dtype, on the spec's thread count (set here); that dtype; and oneDNN's primitive cache
    capacity, sized first as the trainer does before any matmul: what the SFT benchmarks
    train with."""
    import torch

    from serving.engine.cpu_dtype import choose
    from training.cpu_backend.onednn_cache import size_primitive_cache
    from training.spec.model import load_spec

    spec = load_spec(SPEC)
    capacity = size_primitive_cache(spec.cpu.onednn_primitive_cache)
    dtype = choose(spec.cpu.dtype).dtype
    torch.set_num_threads(spec.cpu.threads)
    cpu = spec.cpu.model_copy(
        update={"dtype": dtype, "sft_steps": steps, "sft_save_freq": steps + 1}
    )
    return spec.model_copy(update={"cpu": cpu}), dtype, capacity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="what this run is, in the results file")
    parser.add_argument("--steps", type=int, default=70, help="SFT steps to train")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="after each step run Python's collector and give free pages back "
        "(memory.MemoryCallback, as GRPO does)",
    )
    parser.add_argument(
        "--probe",
        type=int,
        default=0,
        metavar="N",
        help="time fixed work (a matmul, one fixed batch forward and backward) in the "
        "training process every N steps and at the first and last",
    )
    args = parser.parse_args()
    if args.steps < 8:
        parser.error("--steps must be at least 8 (four quarters of two steps)")

    import torch
    from transformers import TrainerCallback

    from serving.engine.cpu_dtype import cpu_facts
    from serving.tools import get_catalog
    from training.cpu_backend.huge_pages import anon_huge_pages_kib, huge_page_state
    from training.cpu_backend.memory import MemoryCallback, status_gib
    from training.cpu_backend.sft import run_sft
    from training.data.packs.generate import generate_builtin_dataset
    from training.spec.resolve import resolve_model

    class PerStep(TrainerCallback):
        """The process's counters at each step's end, the step's phases, and (with `--probe`)
        fixed work timed in the training process at chosen steps."""

        def __init__(self) -> None:
            self.marks: list[tuple[float, ...]] = []
            self.phases: list[dict[str, float]] = []
            self.probes: list[dict[str, float]] = []
            self.restarts: list[tuple[float, ...]] = []
            self._begin = self._pre_optimizer = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._begin = time.perf_counter()

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self._pre_optimizer = time.perf_counter()

        def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            now = time.perf_counter()
            self.phases.append(
                {
                    "forward_backward_s": self._pre_optimizer - self._begin,
                    "optimizer_s": now - self._pre_optimizer,
                }
            )

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.marks.append(counters())
            if state.global_step in probe_at:
                self.probes.append({"step": state.global_step, **fixed_work(kwargs["model"])})
            # the next step counts from here, so a probe's time is in no step's row
            self.restarts.append(counters())

    def counters() -> tuple[float, ...]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return (
            time.perf_counter(),
            usage.ru_utime,
            usage.ru_stime,
            usage.ru_minflt,
            usage.ru_nvcsw,
            usage.ru_nivcsw,
            status_gib().get("VmRSS:", 0.0),
            (anon_huge_pages_kib() or 0) / 2**20,
        )

    def fixed_work(model: Any) -> dict[str, float]:
        """The same work at any point of the run: a matmul in the model's dtype, and a
        forward and backward of one fixed batch (gradients dropped after, so training is
        untouched). If these slow down as the run goes on, the process has changed, not
        the data."""
        generator = torch.Generator().manual_seed(0)
        left = torch.randn(2048, 2048, generator=generator).to(model.dtype)
        right = torch.randn(2048, 2048, generator=generator).to(model.dtype)
        timings = []
        for _ in range(12):
            start = time.perf_counter()
            left @ right
            timings.append(time.perf_counter() - start)
        ids = torch.randint(0, 40_000, (8, 480), generator=generator)
        passes = []
        for _ in range(3):
            start = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            passes.append(time.perf_counter() - start)
            model.zero_grad(set_to_none=True)
        return {
            "matmul_2048_s": round(min(timings[2:]), 5),
            "fixed_forward_backward_s": round(min(passes), 3),
            "rss_gib": status_gib().get("VmRSS:", 0.0),
        }

    probe_at = (
        {1, args.steps, *range(args.probe, args.steps + 1, args.probe)} if args.probe else set()
    )
    spec, dtype, primitive_cache = demo_sft_spec(args.steps)  # oneDNN's cache sized first
    schemas = list(get_catalog().openai_schemas())
    per_step = PerStep()
    with tempfile.TemporaryDirectory(prefix="bench-sft-drift-") as scratch:
        folder = Path(scratch)
        generate_builtin_dataset(folder / "data", n=300, seed=0, progress=False)
        base = resolve_model(spec, folder)
        print(f"{args.steps} SFT steps ({dtype}) ...", flush=True)
        callbacks = [per_step, *([MemoryCallback(release_after_step=True)] if args.collect else [])]
        run_sft(spec, base, folder / "data" / "train.parquet", folder / "run", schemas, callbacks)
    keys = ("wall_s", "user_s", "sys_s", "minor_faults", "waits", "preemptions")
    rows = [
        {
            **{key: float(b[i] - a[i]) for i, key in enumerate(keys)},
            **phase,
            "rss_gib": float(b[6]),
            "huge_pages_gib": float(b[7]),
        }
        for a, b, phase in zip(
            per_step.restarts, per_step.marks[1:], per_step.phases[1:], strict=False
        )
    ]
    by_quarter = quarters(rows)
    entry: dict[str, Any] = {
        "label": args.label,
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "dtype": dtype,
        "threads": spec.cpu.threads,
        "huge_pages": huge_page_state(),
        "steps": args.steps,
        "collect_each_step": args.collect,
        "onednn_primitive_cache": primitive_cache,
        "note": "per step after the first; 'waits' and 'preemptions' are the process's "
        "voluntary and involuntary context switches",
        "by_quarter": by_quarter,
        "per_step": [{key: round(value, 3) for key, value in row.items()} for row in rows],
        "fixed_work": per_step.probes,
        "last_quarter_over_first": {
            key: round(by_quarter[-1][key] / by_quarter[0][key], 3)
            for key in ("wall_s", "forward_backward_s", "optimizer_s", "user_s", "sys_s", "rss_gib")
            if by_quarter[0][key]
        },
    }
    history = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps([*history, entry], indent=2) + "\n")
    for number, quarter in enumerate(by_quarter, 1):
        print(
            f"quarter {number}: {quarter['wall_s']:.2f} s a step, user {quarter['user_s']:.2f} s, "
            f"sys {quarter['sys_s']:.2f} s, resident {quarter['rss_gib']:.2f} GiB, "
            f"on 2 MiB pages {quarter['huge_pages_gib']:.2f} GiB; forward+backward "
            f"{quarter['forward_backward_s']:.2f} s, optimizer {quarter['optimizer_s']:.2f} s"
        )
    for probe in per_step.probes:
        print(f"fixed work at step {probe['step']}: {probe}")
    print(f"last quarter over first: {entry['last_quarter_over_first']} -> {RESULTS}")


if __name__ == "__main__":
    main()
