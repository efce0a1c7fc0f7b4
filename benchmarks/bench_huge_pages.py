"""Do 2 MiB pages make a CPU training step faster? The step benchmark
(`bench_cpu_steps.py`: an SFT step, GRPO's generation, its reference pass and its policy
update, seeded so every run does the same work) in fresh processes, once per way of asking
for transparent huge pages, the plain process first as the baseline.

Why it can matter: a step allocates tensors of tens to hundreds of MiB (the output head's
logits over 49,152 tokens, attention scores), glibc serves each from a fresh mapping, and the
kernel faults it in 4 KiB at a time: a quarter of the step benchmark's CPU time was the
kernel's. With the kernel in `madvise` mode a process gets 2 MiB pages only where it asks:
    THP_MEM_ALLOC_ENABLE=1              torch's CPU allocator advises its blocks of >= 2 MiB
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1  glibc advises its heap and mapped blocks

    python benchmarks/bench_huge_pages.py [--rounds 1] [--out FILE]

Writes benchmarks/results/huge_pages.json. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from training.cpu_backend.huge_pages import GLIBC_HUGETLB, RESTARTED, TORCH_SWITCH, TUNABLES

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "huge_pages.json"
ARMS: dict[str, dict[str, str]] = {
    "baseline": {},
    f"torch {TORCH_SWITCH}=1": {TORCH_SWITCH: "1"},
    f"glibc {GLIBC_HUGETLB}=1": {TUNABLES: f"{GLIBC_HUGETLB}=1"},
    "both": {TORCH_SWITCH: "1", TUNABLES: f"{GLIBC_HUGETLB}=1"},
}
PHASES = ("sft_step", "generation", "update_reference", "update_policy")


def run_arm(env_extra: dict[str, str], out: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in (TORCH_SWITCH, TUNABLES, RESTARTED)}
    env.update(env_extra)
    subprocess.run(
        [sys.executable, str(HERE / "bench_cpu_steps.py"), "--out", str(out)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def phase_seconds(report: dict[str, Any]) -> dict[str, float]:
    grpo = report["grpo_step"]
    return {
        "sft_step": report["sft_step"]["seconds"],
        "generation": grpo["generation"]["seconds"],
        "update_reference": grpo["update_reference"]["seconds"],
        "update_policy": grpo["update_policy"]["seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="Times through every arm.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ARMS}
    with tempfile.TemporaryDirectory(prefix="bench-huge-pages-") as scratch:
        for round_index in range(args.rounds):
            for name, extra in ARMS.items():
                print(f"round {round_index + 1}/{args.rounds}: {name} ...", flush=True)
                report = run_arm(extra, Path(scratch) / "steps.json")
                runs[name].append(
                    {
                        "seconds": phase_seconds(report),
                        "sampled_tokens": report["grpo_step"]["generation"]["sampled_tokens"],
                        "peak_rss_gib": report.get("peak_rss_gib"),
                        "huge_pages": report.get("huge_pages"),
                        "load_avg_1m": report.get("load_avg_1m"),
                    }
                )
                machine, dtype = report["machine"], report["dtype"]
    best = {
        name: {p: min(r["seconds"][p] for r in rows) for p in PHASES} for name, rows in runs.items()
    }
    base = best["baseline"]
    summary = {
        name: {
            "best_seconds": seconds,
            "ratio_to_baseline": {p: round(seconds[p] / base[p], 3) for p in PHASES},
            "peak_rss_gib": max((r["peak_rss_gib"] or 0.0) for r in runs[name]),
        }
        for name, seconds in best.items()
    }
    report = {
        "machine": machine,
        "dtype": dtype,
        "rounds": args.rounds,
        "same_work": len({r["sampled_tokens"] for rows in runs.values() for r in rows}) == 1,
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'arm':32} " + " ".join(f"{p:>17}" for p in PHASES) + "  peak GiB")
    for name, row in summary.items():
        cells = " ".join(
            f"{row['best_seconds'][p]:8.2f}s {row['ratio_to_baseline'][p]:5.2f}x" for p in PHASES
        )
        print(f"{name:32} {cells}  {row['peak_rss_gib']:.2f}")
    print(f"same work in every run: {report['same_work']}; written to {args.out}")


if __name__ == "__main__":
    main()
