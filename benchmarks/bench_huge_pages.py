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
    python benchmarks/bench_huge_pages.py --trainer [--rounds 2] [--steps 12]

`--trainer` times the training stage's own SFT steps instead (`bench_step_probe.py`: the
budget's probe, then a real SFT through the trainer, fp32 master weights and all, seeded),
4 KiB pages against both switches, alternating, and writes huge_pages_trainer.json.

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
TRAINER_RESULTS = HERE / "results" / "huge_pages_trainer.json"
ARMS: dict[str, dict[str, str]] = {
    "baseline": {},
    f"torch {TORCH_SWITCH}=1": {TORCH_SWITCH: "1"},
    f"glibc {GLIBC_HUGETLB}=1": {TUNABLES: f"{GLIBC_HUGETLB}=1"},
    "both": {TORCH_SWITCH: "1", TUNABLES: f"{GLIBC_HUGETLB}=1"},
}
PHASES = ("sft_step", "generation", "update_reference", "update_policy")


def run_arm(
    env_extra: dict[str, str], out: Path, script: str = "bench_cpu_steps.py", *extra: str
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in (TORCH_SWITCH, TUNABLES, RESTARTED)}
    env.update(env_extra)
    subprocess.run(
        [sys.executable, str(HERE / script), "--out", str(out), *extra],
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


def paired_steps(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Step by step (the same batch in every run), each arm's mean over its rounds, and
    both's over the baseline's: the comparison that the rounds' own spread does not swamp."""
    means = {
        name: [
            sum(step) / len(step)
            for step in zip(*(r["real_step_s_each"] for r in rows), strict=True)
        ]
        for name, rows in runs.items()
    }
    ratios = [h / b for b, h in zip(means["baseline"], means["both"], strict=True)]
    return {
        "step_s_mean_over_rounds": {k: [round(x, 2) for x in v] for k, v in means.items()},
        "both_over_baseline_each_step": [round(r, 3) for r in ratios],
        "both_over_baseline_total": round(sum(means["both"]) / sum(means["baseline"]), 3),
        "steps_faster_with_both": sum(r < 1 for r in ratios),
    }


def trainer_arms(rounds: int, steps: int, out: Path) -> None:
    """The training stage's real SFT steps, 4 KiB pages against both switches, alternating."""
    arms = {"baseline": ARMS["baseline"], "both": ARMS["both"]}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory(prefix="bench-huge-pages-") as scratch:
        for round_index in range(rounds):
            for name, extra in arms.items():
                print(f"round {round_index + 1}/{rounds}: {name} ...", flush=True)
                report = run_arm(
                    extra,
                    Path(scratch) / "probe.json",
                    "bench_step_probe.py",
                    "--steps",
                    str(steps),
                )
                runs[name].append(
                    {
                        "probe_step_s": report["probe"]["step_s"],
                        "real_step_s_median": report["real_sft"]["step_s_median"],
                        "real_step_s_mean": report["real_sft"]["step_s_mean"],
                        "real_step_s_each": report["real_sft"]["step_s_each"],
                    }
                )
                machine = report["cpu"]
    summary = {
        name: {
            key: round(min(r[key] for r in rows), 2)
            for key in ("probe_step_s", "real_step_s_median", "real_step_s_mean")
        }
        for name, rows in runs.items()
    }
    ratios = {
        key: round(summary["both"][key] / summary["baseline"][key], 3)
        for key in summary["baseline"]
    }
    report = {
        "machine": machine,
        "rounds": rounds,
        "sft_steps": steps,
        "best_of_rounds": summary,
        "both_over_baseline": ratios,
        "paired_steps": paired_steps(runs),
        "runs": runs,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for name, row in summary.items():
        print(f"{name:10} " + "  ".join(f"{k} {v:.2f}" for k, v in row.items()))
    paired = report["paired_steps"]
    print(
        f"both / baseline: best of rounds {ratios}; step by step "
        f"{paired['both_over_baseline_total']} ({paired['steps_faster_with_both']} of "
        f"{steps - 1} steps faster); written to {out}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="Times through every arm.")
    parser.add_argument("--trainer", action="store_true", help="Time the trainer's SFT steps.")
    parser.add_argument("--steps", type=int, default=12, help="Real SFT steps (--trainer).")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.trainer:
        trainer_arms(args.rounds, args.steps, args.out or TRAINER_RESULTS)
        return
    args.out = args.out or RESULTS
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
    summary: dict[str, dict[str, Any]] = {
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
