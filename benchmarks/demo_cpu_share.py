"""Benchmark: who uses the two cores while `make demo` trains.

The demo's SFT step reads slower inside the demo than alone (8.5 s a step against the probe's
6.1 s and the step benchmark's 5-6 s on the AMX host, `demo_runs.json`). The suspects are the
services that share the cores: Airflow's scheduler, dag processor, triggerer and API server,
MLflow, Ray's head and its dashboard, the MCP servers. This script samples every process's
CPU time from `/proc` (user + system clock ticks) every `--every` seconds while a command runs,
groups processes by what their command line says they are, and writes per-group CPU seconds
for the whole run and for the window the training process was alive, as shares of the cores.

    python benchmarks/demo_cpu_share.py --label amx -- make demo

Prints the table and writes benchmarks/results/demo_cpu_share.json (one entry per run,
appended, with this machine's CPU flags). Reading `/proc` costs a few milliseconds a sample.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results" / "demo_cpu_share.json"

from serving.engine.cpu_dtype import cpu_facts  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
TRAINING = "training job"
#: (label, words that must all appear in the command line), first match wins.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (TRAINING, ("training.jobs.entry",)),
    (TRAINING, ("toolrl", "train", "local")),
    ("airflow scheduler", ("airflow", "scheduler")),
    ("airflow dag-processor", ("airflow", "dag-processor")),
    ("airflow triggerer", ("airflow", "triggerer")),
    ("airflow api-server", ("airflow", "api_server")),
    ("airflow task", ("airflow", "task")),
    ("airflow (other)", ("airflow",)),
    ("mlflow", ("mlflow",)),
    ("ray dashboard", ("ray", "dashboard")),
    ("ray gcs", ("gcs_server",)),
    ("ray raylet", ("raylet",)),
    ("ray (other)", ("ray",)),
    ("mcp servers", ("mcp",)),
    ("toolrl cli", ("toolrl",)),
)


def group_of(cmdline: str) -> str:
    for label, words in GROUPS:
        if all(word in cmdline for word in words):
            return label
    return "other"


def snapshot() -> dict[int, tuple[str, float]]:
    """pid -> (group, CPU seconds so far) for every process readable now."""
    found: dict[int, tuple[str, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:  # the process ended between listing and reading
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
        command = raw.replace(b"\0", b" ").decode(errors="replace")
        found[int(entry.name)] = (group_of(command), seconds)
    return found


def training_state(pid: int) -> dict[str, Any] | None:
    """What the scheduler did with the training process: its context switches (voluntary: it
    waited; involuntary: it was preempted), threads and the CPUs it may use."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "voluntary_ctxt_switches": int(fields["voluntary_ctxt_switches"]),
        "nonvoluntary_ctxt_switches": int(fields["nonvoluntary_ctxt_switches"]),
        "threads": int(fields["Threads"]),
        "cpus_allowed": fields["Cpus_allowed_list"].strip(),
        "nice": int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]),
    }


def training_environment(pid: int) -> dict[str, str]:
    """The training process's thread, allocator and Ray settings from its environment."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
    keep = ("OMP_", "MKL_", "KMP_", "GOMP", "THP_", "GLIBC_", "TORCH", "RAY_JOB", "CUDA")
    return {key: value for key, value in pairs if key.startswith(keep)}


def run(command: list[str], every: float) -> tuple[list[dict[str, Any]], int, float]:
    """Sample while `command` runs: a list of (time, per-pid CPU seconds) samples, with the
    training process's scheduler counters."""
    samples: list[dict[str, Any]] = []
    me = os.getpid()
    start = time.monotonic()
    child = subprocess.Popen(command, cwd=ROOT)
    while child.poll() is None:
        now = snapshot()
        now.pop(me, None)
        sample: dict[str, Any] = {"t": time.monotonic() - start, "pids": now}
        trainers = [pid for pid, (group, _) in now.items() if group == TRAINING]
        if trainers:
            pid = max(trainers, key=lambda p: now[p][1])
            sample["training"] = {"pid": pid, "cpu_s": now[pid][1], **(training_state(pid) or {})}
            if not any("environment" in s for s in samples):
                sample["environment"] = training_environment(pid)
        samples.append(sample)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=every)
    return samples, child.returncode, time.monotonic() - start


def shares(samples: list[dict[str, Any]], first: int, last: int) -> dict[str, float]:
    """CPU seconds per group between samples `first` and `last`: each pid's last reading in
    the window less its reading at `first` (from 0 for a pid that started inside the window;
    a pid that ended inside it counts up to its last reading)."""
    before: dict[int, tuple[str, float]] = samples[first]["pids"]
    latest: dict[int, tuple[str, float]] = {}
    for sample in samples[first : last + 1]:
        latest.update(sample["pids"])
    used: dict[str, float] = {}
    for pid, (group, seconds) in latest.items():
        start = before.get(pid)
        spent = seconds - (start[1] if start and start[0] == group else 0.0)
        used[group] = used.get(group, 0.0) + max(0.0, spent)
    return dict(sorted(used.items(), key=lambda item: -item[1]))


def training_window(samples: list[dict[str, Any]]) -> tuple[int, int] | None:
    alive = [i for i, s in enumerate(samples) if any(g == TRAINING for g, _ in s["pids"].values())]
    return (max(0, alive[0] - 1), alive[-1]) if alive else None


def table(used: dict[str, float], seconds: float, cores: int) -> list[dict[str, Any]]:
    return [
        {
            "group": group,
            "cpu_s": round(cpu, 1),
            "share_of_cores": round(cpu / (seconds * cores), 3),
        }
        for group, cpu in used.items()
        if cpu >= 0.05
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="what this run is, in the results file")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("command", nargs="+", help="what to run, after --")
    args = parser.parse_args()
    samples, code, wall = run(args.command, args.every)
    cores = os.cpu_count() or 1
    entry: dict[str, Any] = {
        "label": args.label,
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "command": args.command,
        "exit_code": code,
        "wall_s": round(wall, 1),
        "samples": len(samples),
        "whole_run": table(shares(samples, 0, len(samples) - 1), wall, cores),
    }
    entry["training_timeline"] = [
        {"t": round(s["t"], 1), **s["training"]} for s in samples if "training" in s
    ]
    entry["training_environment"] = next(
        (s["environment"] for s in samples if "environment" in s), {}
    )
    window = training_window(samples)
    if window:
        seconds = samples[window[1]]["t"] - samples[window[0]]["t"]
        entry["training_window_s"] = round(seconds, 1)
        entry["training_window"] = table(shares(samples, *window), seconds, cores)
    for name, seconds_key in (("whole_run", "wall_s"), ("training_window", "training_window_s")):
        if name in entry:
            print(f"\n{name} ({entry[seconds_key]} s, {cores} cores)")
            for row in entry[name]:
                print(f"  {row['group']:<24} {row['cpu_s']:>8.1f} s  {row['share_of_cores']:.1%}")
    history = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps([*history, entry], indent=2) + "\n")
    print(f"\nwrote {RESULTS}")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
