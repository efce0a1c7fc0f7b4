"""Quality on the held-out templates of the `mcp-server-time` pack, after training.

Issue 17's targets: tool selection >= 80% and exact call >= 60% on the pack's held-out
templates (the test split: a quarter of each intent's phrasings, never trained on). Rates are
over the cases that need a tool (irrelevance and clarification rows are counted apart), each
with its case count and a 95% Wilson interval, so a reader can tell a miss from noise.

Two ways in:
- `--report FILE`: an eval report already written by the loop (the DAG's
  `eval/candidate.json`); the figures are read from its per-case journal beside it.
- `--model DIR --data DIR`: evaluate a trained model here, exactly as the DAG's evaluation
  does (`retraining_stage.evaluate_model`: the CPU engine server, the harness), against a
  private replay server over the dataset's own call store, never the live server.

Writes benchmarks/results/time_pack_quality.json. The measurement is what it is: a missed
target is reported as missed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.evaluation.paired import paired_against, read_cases

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "time_pack_quality.json"
TARGETS = {"tool_selection": 0.80, "exact_call": 0.60}
Z_95 = 1.96


def _rate(hits: int, n: int) -> dict[str, Any]:
    from training.evaluation.report import wilson_interval

    rate = hits / n if n else 0.0
    low, high = wilson_interval(rate, n, Z_95)
    return {
        "rate": round(rate, 4),
        "hits": hits,
        "n": n,
        "wilson95": [round(low, 4), round(high, 4)],
    }


def figures(cases: Sequence[Any]) -> dict[str, Any]:
    """Tool selection and exact call over the cases that need a tool, with counts and 95%
    Wilson intervals; abstention over the no-tool cases. Counted by the harness's own
    `metrics.headline_counts`, so these are the report's rates with intervals around them."""
    from training.evaluation.metrics import headline_counts

    counts = headline_counts(cases)
    return {
        "cases": len(cases),
        "tool_cases": counts["tool_selection_accuracy"][1],
        "tool_selection": _rate(*counts["tool_selection_accuracy"]),
        "exact_call": _rate(*counts["exact_call_accuracy"]),
        "abstention": _rate(*counts["abstention_rate"]),
    }


def evaluate_here(model: Path, data: Path, out: Path, max_turns: int) -> Path:
    """The DAG's evaluation of `model` on `data`'s test split, tools replayed from its store."""
    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start
    from training.pipeline.retraining_stage import evaluate_model

    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    store = data / str(manifest["call_store"]["path"])
    with start(ServerConfig(mode="replay", store=store, port=0, workers=1)) as server:
        evaluate_model(
            str(model), str(data / "test.parquet"), server.url, out, None, "cpu", max_turns
        )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="An eval report (its journal beside it).")
    parser.add_argument("--model", type=Path, help="A trained model directory to evaluate.")
    parser.add_argument("--data", type=Path, required=True, help="The time-pack dataset.")
    parser.add_argument("--training", type=Path, help="cpu_report.json of the training run.")
    parser.add_argument("--max-turns", type=int, default=4, help="As the spec's rollout.max_turns.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--note", default="", help="What was measured, if not the plan.")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="An eval report of the model this one started from (the SFT stage): adds the "
        "paired difference on the same cases.",
    )
    parser.add_argument(
        "--eval-out",
        type=Path,
        help="With --model: where the eval report and its journal go (default: a temp dir).",
    )
    args = parser.parse_args(argv)
    if (args.report is None) == (args.model is None):
        parser.error("give exactly one of --report or --model")
    eval_out = args.eval_out or Path(tempfile.mkdtemp(prefix="time-pack-eval-")) / "eval.json"
    report = args.report or evaluate_here(args.model, args.data, eval_out, args.max_turns)
    cases = read_cases(report)
    manifest = json.loads((args.data / "manifest.json").read_text(encoding="utf-8"))
    overall = figures(cases)
    languages = sorted({c.language or "unknown" for c in cases})
    payload: dict[str, Any] = {
        "what": "held-out templates (test split) of the mcp-server-time pack, after training",
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "dataset": {
            "version": manifest["dataset_version"],
            "rows": manifest["rows"],
            "splits": manifest["splits"],
            "test_templates": {
                k: v["test"] for k, v in (manifest.get("pack") or {}).get("templates", {}).items()
            },
            "call_store_digest": manifest["call_store"]["digest"],
        },
        "model": str(args.model or ""),
        "note": args.note,
        "eval_report": str(report),
        "tools": "replay of the dataset's call store (the live server is not called)",
        "overall": overall,
        "by_language": {
            lang: figures([c for c in cases if (c.language or "unknown") == lang])
            for lang in languages
        },
        "by_category": {
            cat: figures([c for c in cases if c.category == cat])
            for cat in sorted({c.category for c in cases})
        },
        "targets": {
            name: {
                "min": goal,
                "measured": overall[name]["rate"],
                "met": overall[name]["rate"] >= goal,
            }
            for name, goal in TARGETS.items()
        },
    }
    if args.baseline:
        payload["against_baseline"] = {
            "baseline_report": str(args.baseline),
            **paired_against(read_cases(args.baseline), cases),
        }
    if args.training and args.training.is_file():
        trained = json.loads(args.training.read_text(encoding="utf-8"))
        payload["training"] = {
            "backend": trained.get("backend"),
            "sft_steps": (trained.get("sft") or {}).get("steps"),
            "grpo_steps": (trained.get("grpo") or {}).get("steps_trained"),
            "timings_s": trained.get("timings"),
            "tools": trained.get("tools"),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    for name, target in payload["targets"].items():
        figure = overall[name]
        verdict = "met" if target["met"] else "MISSED"
        print(
            f"{name}: {figure['rate']:.1%} ({figure['hits']}/{figure['n']}, 95% "
            f"[{figure['wilson95'][0]:.1%}, {figure['wilson95'][1]:.1%}]) target "
            f">= {target['min']:.0%}: {verdict}"
        )
    for name, diff in (payload.get("against_baseline") or {}).items():
        if isinstance(diff, dict) and diff.get("cases"):
            print(
                f"{name} vs baseline: {diff['difference']:+.1%} on {diff['cases']} paired cases "
                f"(90% [{diff['ci90_low']:+.1%}, {diff['ci90_high']:+.1%}])"
            )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
