"""Where a GRPO step's memory goes, phase by phase, in the real training stage; and what
handing glibc's free pages back between the phases (`memory.release_free_pages`) changes.

Why: with the update cut into 1,024-token chunks a step's graph added 0.84 GiB instead of 3.94
(`bench_grpo_step_memory.py`), yet a whole run's GRPO peak did not fall (9.10 GiB with 2
micro-batches, 10.08 with the chunks, `grpo_job_memory_update_tokens.json`). So the peak is
not the graph. Here each phase of a step is read: the resident set before it, its own peak
(VmHWM reset at the phase's start through /proc/self/clear_refs), the resident set after it,
and glibc's own count of the bytes its live blocks hold and of its free heap (`mallinfo2`).

How: the demo spec (`cpu_smollm2.yaml`) after a short SFT, on one generated dataset, the
real job driver in a child process per run, its methods wrapped to take the readings:
generation (`EpisodeRollouts.__call__`), the log-probability passes with and without a
gradient, the loss with its chunk backward passes, the whole training step, the optimizer
step. Runs: `kept` (no release within GRPO: the code before), `released` (free pages
released between phases and at each step's end, without a collection) and `collected` (the
code as it is: Python's collector runs at each step's end before the release).

    python benchmarks/bench_grpo_phase_memory.py [--sft-steps 10] [--grpo-steps 3] [--out FILE]

Writes benchmarks/results/grpo_phase_memory.json. Run it alone.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # benchmark scripts are files, not a package
sys.path.insert(0, str(REPO))

RESULTS = REPO / "benchmarks" / "results" / "grpo_phase_memory.json"
RUNS = ("kept", "released", "collected")
"""`released`: the in-step releases without Python's collector at the step's end (the code
before it collected there); `collected`: the code as it is (`MemoryCallback` runs
Python's collector, then `memory.release_free_pages`, after each optimizer step)."""
GIB = 2**30


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (malloc.h), in field order."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


def _heap_gib() -> tuple[float, float]:
    """(bytes in live malloc blocks, mapped ones included; free bytes in the heap), GiB."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return round((info.uordblks + info.hblkhd) / GIB, 3), round(info.fordblks / GIB, 3)


def _instrument(records: list[dict[str, Any]], release: str) -> None:
    """Wrap the phases of a training step so each appends its readings to `records`."""
    import torch
    from transformers import Trainer

    from training.cpu_backend import grpo, memory, precision, rollouts

    def status() -> tuple[float, float]:
        found = memory.status_gib()
        return found.get("VmRSS:", 0.0), found.get("VmHWM:", 0.0)

    def wrap(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def measured(*args: Any, **kwargs: Any) -> Any:
            phase = label
            if name == "_get_per_token_logps_and_entropies":
                phase += " (gradient)" if torch.is_grad_enabled() else " (no gradient)"
            before, _ = status()
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS from here
            started = time.perf_counter()
            out = original(*args, **kwargs)
            after, peak = status()
            live, free = _heap_gib()
            records.append(
                {
                    "phase": phase,
                    "rss_before_gib": before,
                    "peak_gib": peak,
                    "rss_after_gib": after,
                    "malloc_live_gib": live,
                    "malloc_free_gib": free,
                    "seconds": round(time.perf_counter() - started, 2),
                }
            )
            return out

        setattr(owner, name, measured)

    if release == "kept":  # the code before the in-step releases
        setattr(grpo, "release_free_pages", lambda: None)  # noqa: B010 (a module global)
    original_init = memory.MemoryCallback.__init__

    def callback_init(callback: Any, release_after_step: bool = False, **_: Any) -> None:
        original_init(
            callback,
            release_after_step=release_after_step and release != "kept",
            collect_after_step=release == "collected",
        )

    setattr(memory.MemoryCallback, "__init__", callback_init)  # noqa: B010
    wrap(rollouts.EpisodeRollouts, "__call__", "generation")
    wrap(grpo.SharedPrefixGRPOTrainer, "_get_per_token_logps_and_entropies", "log-probs")
    wrap(grpo.SharedPrefixGRPOTrainer, "_compute_loss", "loss and chunk backward")
    wrap(Trainer, "training_step", "training step")
    wrap(precision.MasterWeightAdamW, "step", "optimizer step")


def child(workdir: Path, run: str) -> None:
    """One run of the job driver, instrumented; its records go to `workdir/phases.json`."""
    from training.jobs.entry import main

    records: list[dict[str, Any]] = []
    _instrument(records, release=run)
    command = ["--spec", "spec.yaml", "--run-key", f"phases-{run}", "--backend", "cpu"]
    main([*command, "--workdir", str(workdir)])
    (workdir / "phases.json").write_text(json.dumps(records, indent=1))


def summary(records: list[dict[str, Any]], report: dict[str, Any]) -> dict[str, Any]:
    """The GRPO phase's peak (the highest phase peak after SFT's last step), per step."""
    first_generation = next(i for i, r in enumerate(records) if r["phase"] == "generation")
    grpo = records[first_generation:]
    steps = [r for r in grpo if r["phase"] == "training step"]
    return {
        "sft_peak_gib": max((r["peak_gib"] for r in records[:first_generation]), default=0.0),
        "grpo_peak_gib": max(r["peak_gib"] for r in grpo),
        "grpo_step_peaks_gib": [r["peak_gib"] for r in steps],
        "grpo_step_seconds": [r["seconds"] for r in steps],
        "grpo_s": round(report["timings"]["grpo_s"], 1),
        "rewards": report["grpo"]["rewards"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=10, help="SFT steps before GRPO.")
    parser.add_argument("--grpo-steps", type=int, default=3, help="GRPO steps read.")
    parser.add_argument("--out", type=Path, default=RESULTS, help="Where the JSON goes.")
    parser.add_argument(
        "--runs", nargs="+", choices=RUNS, default=list(RUNS[:2]), help="Which runs."
    )
    parser.add_argument("--child", choices=RUNS, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.workdir, args.child)
        return

    from bench_grpo_step_memory import generate_data, job_workdir

    from serving.engine.cpu_dtype import cpu_facts
    from training.cpu_backend.compute_dtype import choose, cpu_flags

    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-grpo-phases-") as folder:
        data = generate_data(Path(folder))
        for run in args.runs:
            workdir = job_workdir(Path(folder), run, data, {}, args.sft_steps, args.grpo_steps)
            command = [sys.executable, __file__, "--child", run, "--workdir", str(workdir)]
            subprocess.run(command, check=True, cwd=workdir, capture_output=True, text=True)
            records = json.loads((workdir / "phases.json").read_text())
            report = json.loads((workdir / "cpu_report.json").read_text())
            runs[run] = {**summary(records, report), "phases": records}
            print(f"{run}: {json.dumps({k: v for k, v in runs[run].items() if k != 'phases'})}")
    result = {
        "machine": cpu_facts(),
        "dtype": choose("auto", cpu_flags()).dtype,
        "sft_steps": args.sft_steps,
        "grpo_steps": args.grpo_steps,
        "dataset_rows": 600,
        **runs,
        "grpo_peak_gib": {run: runs[run]["grpo_peak_gib"] for run in args.runs},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
