"""Summarise a `benchmarks/gpu_smollm2_grpo.sh` run into one JSON of figures.

The shell script does the wiring; this reads only what the run itself left behind, so a
figure is never the script's expectation:
- per step: verl's console metrics (time split, tokens/s, memory, verl's MFU) and verl's
  rollout dump (`trainer.rollout_data_dir`: every rollout's score and the reward's
  components), from which come the reward mean, the share of GRPO groups whose rewards
  differ at all (a group without spread has zero advantage and teaches nothing), the
  malformed-call rate and the tool calls;
- held-out rows before (SFT start) and after (merged result): the eval harness's per-case
  journals, paired case by case, with 90% bootstrap intervals;
- BFCL before and after: the per-case verdict journals, paired the same way;
- device time per phase from the script's marks, peak GPU memory from `nvidia-smi`.

It runs as `python benchmarks/gpu_smollm2_grpo.py` (its folder first on `sys.path`), so the
smoke summariser's log parsers and the pack benchmark's pairing are imported, not copied.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_verl_smoke import checkpoint_tree, final_validation, mcp_calls, stage_seconds, step_metrics

from training.evaluation.paired import paired_against
from training.evaluation.report import paired_bootstrap

H200_BF16_PEAK_FLOPS = 989e12
"""Dense bf16 of an H100/H200 SXM by the datasheet; KINDS.md measured 790 TFLOP/s on one."""
HELDOUT_FIELDS = {
    "tool_selection": "selection_ok",
    "exact_call": "exact_calls",
    "ground_truth_match": "answer_ok",
    "abstention": "no_call_ok",
    "pass": "passed",
}
"""The held-out figures the issue asks for, paired on these `CaseResult` fields."""
TARGET_EXACT_CALL_GAIN = 0.05


def rollout_steps(rollout_dir: Path) -> dict[int, dict[str, float]]:
    """Per step, from verl's dump `<step>.jsonl` (one line per rollout; the n rollouts of a
    prompt share its decoded `input`)."""
    steps: dict[int, dict[str, float]] = {}
    files = sorted(rollout_dir.glob("*.jsonl")) if rollout_dir.is_dir() else []
    for file in files:
        if not file.stem.isdigit():
            continue
        groups: dict[str, list[float]] = defaultdict(list)
        calls = malformed = rollouts = 0
        for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
                score = float(row["score"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a killed writer
            rollouts += 1
            groups[str(row.get("input", ""))].append(score)
            calls += int(float(row.get("num_calls", 0) or 0))
            malformed += int(float(row.get("malformed_calls", 0) or 0))
        if not rollouts:
            continue
        scores = [s for group in groups.values() for s in group]
        spread = sum(1 for group in groups.values() if max(group) > min(group))
        steps[int(file.stem)] = {
            "rollouts": rollouts,
            "groups": len(groups),
            "reward_mean": round(statistics.fmean(scores), 4),
            "groups_with_spread": round(spread / len(groups), 4),
            "malformed_call_rate": round(malformed / calls, 4) if calls else 0.0,
            "tool_calls": calls,
            "tool_calls_per_rollout": round(calls / rollouts, 3),
        }
    return steps


def trend(values: Sequence[float]) -> dict[str, float]:
    """Least-squares slope per step and the last five steps' mean against the first five."""
    n = len(values)
    if n < 2:
        return {"steps": n}
    xs = range(n)
    mean_x, mean_y = (n - 1) / 2, statistics.fmean(values)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, values, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    k = min(5, n // 2)
    return {
        "steps": n,
        "slope_per_step": round(slope, 5),
        "first_mean": round(statistics.fmean(values[:k]), 4),
        "last_mean": round(statistics.fmean(values[-k:]), 4),
    }


def safetensors_parameters(model_dir: Path) -> int:
    """Parameters counted from the safetensors headers alone (no tensor is read)."""
    total = 0
    for file in sorted(model_dir.glob("*.safetensors")):
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= int(dim)
                total += count
    return total


def time_split(steps: dict[int, dict[str, float]], parameters: int) -> dict[str, Any]:
    """Step time split into generation, update (old log-probs + actor update) and weight sync,
    the first step apart (warm-up), tokens/s/GPU, and an MFU estimate: 2N FLOPs per token for
    the old log-probs and 6N for the update, over their measured time, against the bf16 peak.
    Attention FLOPs are left out, so the estimate is a floor."""
    if not steps:
        return {}
    ordered = [steps[k] for k in sorted(steps)]
    steady = ordered[1:] or ordered

    def mean(key: str, rows: Sequence[dict[str, float]]) -> float | None:
        values = [row[key] for row in rows if key in row]
        return round(statistics.fmean(values), 6) if values else None

    split: dict[str, Any] = {
        key: {"first_step": ordered[0].get(metric), "steady_mean": mean(metric, steady)}
        for key, metric in (
            ("step_s", "timing_s/step"),
            ("generation_s", "timing_s/gen"),
            ("old_log_prob_s", "timing_s/old_log_prob"),
            ("update_s", "timing_s/update_actor"),
            ("weight_sync_s", "timing_s/update_weights"),
            ("checkpoint_s", "timing_s/save_checkpoint"),
            ("rollout_dump_s", "timing_s/dump_rollout_generations"),
            ("tokens_per_s_per_gpu", "perf/throughput"),
            ("verl_mfu_actor", "perf/mfu/actor"),
        )
    }
    flops = seconds = 0.0
    for row in steady:
        tokens = row.get("perf/total_num_tokens", 0.0)
        busy = row.get("timing_s/update_actor", 0.0) + row.get("timing_s/old_log_prob", 0.0)
        if tokens and busy:
            flops += 8 * parameters * tokens
            seconds += busy
    known = seconds and parameters
    split["mfu_estimate"] = round(flops / seconds / H200_BF16_PEAK_FLOPS, 5) if known else None
    split["parameters"] = parameters
    split["steps_total_s"] = round(sum(r.get("timing_s/step", 0.0) for r in ordered), 1)
    split["peak_actor_memory_gb"] = max(
        (r.get("actor/perf/max_memory_allocated_gb", 0.0) for r in ordered), default=None
    )
    return split


def peak_gpu_memory_mib(samples_file: Path) -> float | None:
    """The largest `nvidia-smi` reading over the run (every process on the GPU)."""
    if not samples_file.is_file():
        return None
    readings = []
    for line in samples_file.read_text(errors="replace").splitlines():
        try:
            readings.append(float(line.strip().split(",")[0]))
        except ValueError:
            continue
    return max(readings) if readings else None


def heldout_cases(report: Path) -> list[Any]:
    """Sample 0 of every case from the journal the eval runner keeps beside its report."""
    from training.evaluation.runner import journal_path
    from training.evaluation.scoring import CaseResult

    journal = journal_path(report)
    if not journal.is_file():
        return []
    cases = []
    for line in journal.read_text(encoding="utf-8").splitlines()[1:]:
        try:
            case = CaseResult.model_validate_json(line)
        except ValueError:
            continue
        if case.sample == 0:
            cases.append(case)
    return cases


def heldout_figures(eval_dir: Path) -> dict[str, Any]:
    before, after = (
        heldout_cases(eval_dir / "sft_heldout.json"),
        heldout_cases(eval_dir / "merged_heldout.json"),
    )
    figures: dict[str, Any] = {"cases_before": len(before), "cases_after": len(after)}
    for name in ("sft", "merged"):
        report = eval_dir / f"{name}_heldout.json"
        if report.is_file():
            overall = json.loads(report.read_text(encoding="utf-8"))["metrics"]["overall"]
            figures[f"{name}_overall"] = overall
    if before and after:
        figures["paired"] = paired_against(before, after, HELDOUT_FIELDS)
    return figures


def bfcl_verdicts(report: Path) -> dict[tuple[str, str], bool]:
    """(category, id) -> valid, from the BFCL journal beside the report."""
    journal = report.with_name(report.name + ".cases.jsonl")
    if not journal.is_file():
        return {}
    verdicts = {}
    for line in journal.read_text(encoding="utf-8", errors="replace").splitlines()[1:]:
        try:
            item = json.loads(line)
            verdicts[(str(item["category"]), str(item["id"]))] = bool(item["valid"])
        except (ValueError, KeyError, TypeError):
            continue
    return verdicts


def bfcl_figures(eval_dir: Path) -> dict[str, Any]:
    before = bfcl_verdicts(eval_dir / "sft_bfcl.json")
    after = bfcl_verdicts(eval_dir / "merged_bfcl.json")
    shared = sorted(set(before) & set(after))
    figures: dict[str, Any] = {"cases_before": len(before), "cases_after": len(after)}
    for category in sorted({c for c, _ in shared}):
        keys = [k for k in shared if k[0] == category]
        figures[category] = paired_bootstrap(
            [float(before[k]) for k in keys], [float(after[k]) for k in keys]
        )
    return figures


def targets(
    steps: dict[int, dict[str, float]], heldout: dict[str, Any], bfcl: dict[str, Any]
) -> dict[str, bool | None]:
    """The issue's three targets, each True, False, or None when its figures are missing."""
    rewards = [steps[k]["reward_mean"] for k in sorted(steps)]
    slope = trend(rewards).get("slope_per_step")
    exact = heldout.get("paired", {}).get("exact_call", {})
    categories = [v for k, v in bfcl.items() if isinstance(v, dict) and v.get("cases")]
    return {
        "reward_trend_up": None if slope is None else slope > 0,
        "heldout_exact_call_up_5_points_interval_above_0": None
        if "difference" not in exact
        else exact["difference"] >= TARGET_EXACT_CALL_GAIN and exact["ci90_low"] > 0,
        "bfcl_no_drop_outside_interval": None
        if not categories
        else all(c["ci90_high"] >= 0 for c in categories),
    }


def summarise(root: Path, job: str, status: str) -> dict[str, Any]:
    """Everything under the script's fixed root (`/tmp/toolrl-gpu-smollm2` on the device)."""
    workdir = root / "jobs" / job
    result_file = workdir / "result.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else None
    job_log = root / "job.log"
    log_text = job_log.read_text(errors="replace") if job_log.is_file() else ""
    verl_steps = step_metrics(log_text)
    steps = rollout_steps(root / "rollouts")
    for number, row in steps.items():
        if number in verl_steps and "critic/score/mean" in verl_steps[number]:
            row["verl_score_mean"] = verl_steps[number]["critic/score/mean"]
    metrics_file = workdir / "mcp_metrics.txt"
    model_dir = root / "sft_model"
    parameters = safetensors_parameters(model_dir) if model_dir.is_dir() else 0
    stages = stage_seconds(root / "stages.times")
    split = time_split(verl_steps, parameters)
    heldout = heldout_figures(root / "eval")
    bfcl = bfcl_figures(root / "eval")
    rewards = [steps[k]["reward_mean"] for k in sorted(steps)]
    device_time = dict(stages)
    if "training_s" in stages and split:
        device_time["training_steps_s"] = split["steps_total_s"]
        device_time["training_startup_and_merge_s"] = round(
            stages["training_s"] - split["steps_total_s"], 1
        )
    return {
        "status": status,
        "result": result,
        "device_time_s": device_time,
        "steps": {str(k): v for k, v in sorted(steps.items())},
        "reward_trend": trend(rewards),
        "time_split": split,
        "peak_gpu_memory_mib": peak_gpu_memory_mib(root / "gpu_mem.csv"),
        "verl_steps": {str(k): v for k, v in sorted(verl_steps.items())},
        "final_validation": final_validation(log_text),
        "mcp_tool_calls": mcp_calls(metrics_file.read_text() if metrics_file.is_file() else ""),
        "checkpoints": checkpoint_tree(workdir / "checkpoints" / "gpu-smollm2-grpo"),
        "heldout": heldout,
        "bfcl": bfcl,
        "targets": targets(steps, heldout, bfcl),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="The script's fixed workdir.")
    parser.add_argument("--job", required=True, help="The Ray submission id.")
    parser.add_argument("--status", default="UNKNOWN")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    text = json.dumps(summarise(args.root, args.job, args.status), indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
