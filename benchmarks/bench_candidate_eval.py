"""What the DAG's evaluation of a candidate costs at each batch, on the same cases.

The retraining DAG scores its candidate (and the champion, once there is one) with the
evaluation harness against the project's CPU engine server
(`training.pipeline.retraining_stage.evaluate_model`): the harness keeps `batch` episodes in
flight and the server decodes up to `batch` rows together. In `make demo` that evaluation of
96 held-out cases took about 100 s. This runs it on one model and dataset once per batch
size, the first size again last (baseline first and last), on the mock MCP server, and
prints the seconds and the headline metrics of each: greedy decoding, so the metrics should
agree between sizes up to the last bits of bf16 matmuls in differently shaped batches.

    .venv/bin/python benchmarks/bench_candidate_eval.py --model DIR --data DIR
        [--batch-sizes 16 48] [--limit 96] [--max-turns 4]

`--model`: a Hugging Face model directory (a demo's `jobs/<job>/model`); `--data`: a dataset
directory with `test.parquet` (a demo's `datasets/<version>`). Writes
benchmarks/results/candidate_eval.json (or --out) with the CPU flags. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "candidate_eval.json"
METRICS = (
    "pass_rate",
    "exact_call_accuracy",
    "tool_selection_accuracy",
    "parseable_rate",
    "abstention_rate",
    "error_rate",
    "mean_turns",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="model directory")
    parser.add_argument("--data", type=Path, required=True, help="dataset dir with test.parquet")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 48])
    parser.add_argument("--limit", type=int, default=96, help="cases (the demo's eval_limit)")
    parser.add_argument("--max-turns", type=int, default=4, help="the spec's rollout.max_turns")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if any(size < 1 for size in args.batch_sizes) or args.limit < 1 or args.max_turns < 1:
        parser.error("--batch-sizes, --limit and --max-turns must be positive")
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json there (a Hugging Face model dir)")
    test = args.data / "test.parquet"
    if not test.is_file():
        parser.error(f"--data {args.data}: no test.parquet there")

    from serving.engine.cpu_dtype import cpu_facts
    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start
    from training.evaluation.report import load_report
    from training.pipeline.retraining_stage import evaluate_model

    order = [*args.batch_sizes, args.batch_sizes[0]] if len(args.batch_sizes) > 1 else []
    runs: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-candidate-eval-") as scratch,
        start(ServerConfig(mode="mock", port=0, workers=1, log_level="warning")) as server,
    ):
        for index, size in enumerate(order or args.batch_sizes):
            out = Path(scratch) / f"run{index}" / "candidate.json"
            out.parent.mkdir(parents=True)
            print(f"candidate eval: {args.limit} cases, batch {size} ...", flush=True)
            started = time.perf_counter()
            evaluate_model(
                str(args.model.resolve()),
                str(test.resolve()),
                server.url,
                out,
                args.limit,
                "cpu",
                args.max_turns,
                batch=size,
            )
            seconds = time.perf_counter() - started
            report = load_report(out)
            overall = report.metrics.get("overall", {})
            run = {
                "batch_size": size,
                "seconds": round(seconds, 1),
                "cases": report.cases_total,
                **{key: overall.get(key) for key in METRICS},
            }
            runs.append(run)
            print(
                f"  {seconds:.1f} s (server start included), pass {run['pass_rate']}, exact "
                f"{run['exact_call_accuracy']}, turns {run['mean_turns']}",
                flush=True,
            )
    baseline = [r["seconds"] for r in runs if r["batch_size"] == args.batch_sizes[0]]
    base_s = sum(baseline) / len(baseline)
    for run in runs:
        run["time_vs_baseline"] = round(run["seconds"] / base_s, 3)
    record = {
        "benchmark": "candidate_eval",
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "model": str(args.model),
        "limit": args.limit,
        "max_turns": args.max_turns,
        "baseline_batch_size": args.batch_sizes[0],
        "note": "seconds include starting the engine server (as in the DAG)",
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    for run in runs:
        print(f"batch {run['batch_size']:>3}: {run['seconds']:6.1f} s ({run['time_vs_baseline']}x)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
