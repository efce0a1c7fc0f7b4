"""Summarise a `benchmarks/gpu_verl_smoke.sh` run into one JSON of figures.

The shell script does the wiring (MCP server, Ray head, `toolrl train submit`); this reads
what the run left behind, so the figures come from the run's own records rather than from
the script's expectations: verl's per-step console metrics in the job log, the job's
`result.json`, the MCP server's Prometheus counters (tool calls the bridge really made), the
reward's drift log (calls and malformed calls per rollout) and the checkpoint tree.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from pathlib import Path
from typing import Any

STEP_LINE = re.compile(r"step:(\d+) - (.*)")
# verl prints plain floats and, for some metrics, numpy reprs: `num_turns/mean:np.float64(3.5)`
NUMBER = r"(?:np\.\w+\()?(-?[\d.]+(?:e[-+]?\d+)?)\)?"
METRIC = re.compile(r"([\w/@.\-]+):" + NUMBER)
VALIDATION = re.compile(r"'([\w/@.\-]+)': " + NUMBER)
KEPT_METRICS = (
    "timing_s/step",
    "timing_s/gen",
    "timing_s/reward",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/update_actor",
    "timing_s/update_weights",
    "timing_s/save_checkpoint",
    "timing_s/adv",
    "timing_s/dump_rollout_generations",
    "perf/throughput",
    "perf/total_num_tokens",
    "actor/perf/max_memory_allocated_gb",
    "actor/perf/max_memory_reserved_gb",
    "perf/mfu/actor",
    "timing_per_token_ms/gen",
    "critic/score/mean",
    "critic/score/min",
    "critic/score/max",
    "critic/rewards/mean",
    "actor/pg_loss",
    "actor/kl_loss",
    "actor/entropy",
    "actor/grad_norm",
    "response_length/mean",
    "response_length/clip_ratio",
    "prompt_length/mean",
    "num_turns/mean",
    "num_turns/max",
    "rollout_corr/kl",
)
TOOL_CALLS = re.compile(r'^toolrl_mcp_tool_calls_total\{tool="([^"]+)"\} (\d+)', re.MULTILINE)
TOOL_ERRORS = re.compile(r'^toolrl_mcp_tool_errors_total\{tool="([^"]+)"\} (\d+)', re.MULTILINE)


def step_metrics(job_log: str) -> dict[int, dict[str, float]]:
    """verl's console logger prints `step:N - key:value - ...` once per step."""
    steps: dict[int, dict[str, float]] = {}
    for line in job_log.splitlines():
        match = STEP_LINE.search(line)
        if not match:
            continue
        values = {key: float(value) for key, value in METRIC.findall(match.group(2))}
        steps[int(match.group(1))] = {k: values[k] for k in KEPT_METRICS if k in values}
    return steps


def final_validation(job_log: str) -> dict[str, float]:
    """verl pretty-prints `Final validation metrics: {...}` over several prefixed lines."""
    start = job_log.find("Final validation metrics:")
    if start < 0:
        return {}
    end = job_log.find("}", start)
    block = job_log[start : end if end >= 0 else len(job_log)]
    # each line is `(Actor pid=N)  "<piece of a Python string literal>"`, quoted ' or "
    pieces = (
        re.sub(r"^\(\w+ pid=\d+\)\s*\(?[\"']?|[\"']?\s*$", "", line) for line in block.splitlines()
    )
    joined = "".join(pieces)
    return {key: float(value) for key, value in VALIDATION.findall(joined)}


def stage_seconds(times_file: Path) -> dict[str, float]:
    """Seconds between consecutive marks of the shell script."""
    if not times_file.is_file():
        return {}
    marks = [line.split() for line in times_file.read_text().splitlines() if line.strip()]
    return {
        f"{name}_s": round(float(stamp) - float(previous), 1)
        for (_, previous), (name, stamp) in itertools.pairwise(marks)
    }


def mcp_calls(metrics_text: str) -> dict[str, Any]:
    calls = {tool: int(n) for tool, n in TOOL_CALLS.findall(metrics_text)}
    errors = {tool: int(n) for tool, n in TOOL_ERRORS.findall(metrics_text)}
    return {
        "total": sum(calls.values()),
        "errors": sum(errors.values()),
        "by_tool": {t: n for t, n in sorted(calls.items()) if n},
    }


def drift_totals(drift_dir: Path) -> dict[str, int]:
    rollouts = calls = malformed = 0
    for file in sorted(drift_dir.glob("*.jsonl")) if drift_dir.is_dir() else []:
        for line in file.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a killed worker
            rollouts += 1
            calls += int(record.get("calls", 0))
            malformed += int(record.get("malformed", 0))
    return {"rollouts_scored": rollouts, "calls_parsed": calls, "malformed_calls": malformed}


def checkpoint_tree(run_dir: Path) -> dict[str, Any]:
    saved = (p for p in run_dir.glob("global_step_*") if p.is_dir())
    steps = sorted(int(p.name.removeprefix("global_step_")) for p in saved)
    tracker = run_dir / "latest_checkpointed_iteration.txt"
    return {
        "steps_saved": steps,
        "tracker": tracker.read_text().strip() if tracker.is_file() else None,
    }


def summarise(workdir: Path, out_dir: Path, status: str) -> dict[str, Any]:
    job_log = out_dir / "job.log"
    result_file = workdir / "result.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else None
    metrics_file = workdir / "mcp_metrics.txt"
    merged = Path(result["merged_model_dir"]) if result and result.get("merged_model_dir") else None
    log_text = job_log.read_text(errors="replace") if job_log.is_file() else ""
    return {
        "status": status,
        "stages": stage_seconds(out_dir / "stages.times"),
        "steps": step_metrics(log_text),
        "final_validation": final_validation(log_text),
        "result": result,
        "mcp_tool_calls": mcp_calls(metrics_file.read_text() if metrics_file.is_file() else ""),
        "reward_drift_log": drift_totals(workdir / "drift"),
        "checkpoints": checkpoint_tree(workdir / "checkpoints" / "gpu-tiny-smoke"),
        "merged_files": sorted(p.name for p in merged.iterdir())
        if merged and merged.is_dir()
        else [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--status", default="UNKNOWN")
    args = parser.parse_args()
    summary = summarise(args.workdir, args.out_dir, args.status)
    text = json.dumps(summary, indent=2)
    (args.out_dir / "gpu_verl_smoke.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
