"""What an evaluation costs at each engine batch size, on the same model and rows.

Two evaluations run inside the loop, both through the agent loop on the project's engine:
- `quick`: the training job's quick eval (`training/cpu_backend/quick_eval.py`), three times a
  run (before training, after SFT, after GRPO) on `cpu.eval_rows` held-out rows, the model
  in-process, `cpu.eval_batch_size` episodes decoded together;
- `candidate`: the retraining DAG's evaluation of its candidate (and champion)
  (`training.pipeline.retraining_stage.evaluate_model`), the harness against the project's
  CPU engine server, `batch` episodes in flight and the server decoding up to `batch` rows.

In `make demo` the three quick evals took 142 to 329 s and the candidate's evaluation about
100 s of a 20-minute budget. On two cores a decode step of SmolLM2-135M is mostly fixed cost
(`engine_decode.json`: 4 rows 169 ms, 16 rows 244 ms a step), so more episodes in one batch
should cost little more per step. Each batch size runs once, the first size again last (the
baseline first and last, so drift on the host shows); greedy decoding, so the metrics should
agree between sizes up to the last bits of bf16 matmuls in differently shaped batches.

    .venv/bin/python benchmarks/bench_eval_batch.py quick [--model DIR] [--data DIR]
    .venv/bin/python benchmarks/bench_eval_batch.py candidate --model DIR --data DIR

`--model`: a Hugging Face model directory (`quick` defaults to the demo spec's base model;
a demo leaves its SFT model in `pipeline/<run>/checkpoints/sft/final` and its candidate in
`pipeline/<run>/jobs/<job>/model`). `--data`: a dataset directory with `test.parquet` (a
demo's `datasets/<version>`; `quick` generates the demo's 2,000 rows at seed 0 without it).
Writes benchmarks/results/quick_eval.json or candidate_eval.json (or --out) with the CPU
flags. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.evaluation.metrics import HEADLINE_METRICS

RESULTS = Path(__file__).parent / "results"
SPEC = Path(__file__).resolve().parents[1] / "training" / "specs" / "cpu_smollm2.yaml"
METRICS = (*(key for key, _ in HEADLINE_METRICS), "error_rate", "mean_turns")


def each_size(sizes: list[int], run: Callable[[int, int], dict[str, Any]]) -> list[dict[str, Any]]:
    """`run(index, size)` for each size, the first again last; each figure gets its time
    over the baseline's mean (the first size's two runs)."""
    order = [*sizes, sizes[0]] if len(sizes) > 1 else sizes
    figures = []
    for index, size in enumerate(order):
        figure = {"batch_size": size, **run(index, size)}
        print(
            f"  batch {size}: {figure['seconds']:.1f} s, pass {figure.get('pass_rate')}, exact "
            f"{figure.get('exact_call_accuracy')}, turns {figure.get('mean_turns')}",
            flush=True,
        )
        figures.append(figure)
    baseline = [f["seconds"] for f in figures if f["batch_size"] == sizes[0]]
    mean = sum(baseline) / len(baseline)
    for figure in figures:
        figure["time_vs_baseline"] = round(figure["seconds"] / mean, 3)
    return figures


def quick(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """The training job's quick eval on the demo spec's seeded sample of held-out rows."""
    import torch

    from serving.engine.cpu_dtype import choose
    from training.cpu_backend.run import eval_rows, quick_eval, served_tools
    from training.data.packs.generate import generate_builtin_dataset
    from training.spec.model import load_spec
    from training.spec.resolve import resolve_model

    spec = load_spec(SPEC)
    dtype = choose(spec.cpu.dtype).dtype
    torch.set_num_threads(spec.cpu.threads)
    data = args.data
    if data is None:
        data = scratch / "data"
        generate_builtin_dataset(data, n=2_000, seed=0, progress=False)
    update: dict[str, Any] = {"dtype": dtype}
    if args.rows is not None:
        update["eval_rows"] = args.rows
    spec = spec.model_copy(
        update={
            "cpu": spec.cpu.model_copy(update=update),
            "data": spec.data.model_copy(update={"test_files": [str(data / "test.parquet")]}),
        }
    )
    model = args.model.resolve() if args.model else resolve_model(spec, scratch)
    rows = eval_rows(spec)
    with served_tools(spec) as (url, token, _usage):

        def run(index: int, size: int) -> dict[str, Any]:
            sized = spec.model_copy(
                update={"cpu": spec.cpu.model_copy(update={"eval_batch_size": size})}
            )
            cache = scratch / f"eval_{index}.json"
            payload = quick_eval(sized, model, rows, url, cache, token)
            return {
                "seconds": payload["seconds"],
                "generated_tokens": payload["generated_tokens"],
                **{key: payload.get(key) for key in METRICS},
            }

        print(f"quick eval: {len(rows)} rows ({dtype})", flush=True)
        figures = each_size(args.batch_sizes, run)
    return {"dtype": dtype, "threads": spec.cpu.threads, "rows": len(rows), "runs": figures}


def candidate(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """The DAG's evaluation of a candidate on the mock MCP server, as the demo runs it."""
    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start
    from training.evaluation.report import load_report
    from training.pipeline.retraining_stage import evaluate_model

    test = str((args.data / "test.parquet").resolve())
    with start(ServerConfig(mode="mock", port=0, workers=1, log_level="warning")) as server:

        def run(index: int, size: int) -> dict[str, Any]:
            out = scratch / f"run{index}" / "candidate.json"
            out.parent.mkdir(parents=True)
            started = time.perf_counter()
            evaluate_model(
                str(args.model.resolve()),
                test,
                server.url,
                out,
                limit=args.rows,
                backend_name="cpu",
                max_turns=args.max_turns,
                batch=size,
            )
            seconds = time.perf_counter() - started
            report = load_report(out)
            overall = report.metrics.get("overall", {})
            return {
                "seconds": round(seconds, 1),
                "cases": report.cases_total,
                **{key: overall.get(key) for key in METRICS},
            }

        print(f"candidate eval: {args.rows} cases (server start included)", flush=True)
        figures = each_size(args.batch_sizes, run)
    return {"limit": args.rows, "max_turns": args.max_turns, "runs": figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "evaluation",
        choices=("quick", "candidate"),
        help="quick: the training job's quick eval; candidate: the DAG's evaluation",
    )
    parser.add_argument("--model", type=Path, help="model directory (quick: the spec's base)")
    parser.add_argument("--data", type=Path, help="dataset directory with test.parquet")
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=[16, 48], help="the first is the baseline"
    )
    parser.add_argument(
        "--rows", type=int, help="rows (quick: the spec's eval_rows; candidate: 96, the demo's)"
    )
    parser.add_argument("--max-turns", type=int, default=4, help="candidate: rollout.max_turns")
    parser.add_argument("--out", type=Path, help="results file")
    args = parser.parse_args()
    if args.evaluation == "candidate":
        args.rows = 96 if args.rows is None else args.rows
        if args.model is None or args.data is None:
            parser.error("candidate needs --model and --data")
    if any(size < 1 for size in args.batch_sizes) or args.max_turns < 1:
        parser.error("--batch-sizes and --max-turns must be positive")
    if args.rows is not None and args.rows < 1:
        parser.error("--rows must be positive")
    if args.model is not None and not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json there (a Hugging Face model dir)")
    if args.data is not None and not (args.data / "test.parquet").is_file():
        parser.error(f"--data {args.data}: no test.parquet there")

    from serving.engine.cpu_dtype import cpu_facts

    measure = quick if args.evaluation == "quick" else candidate
    with tempfile.TemporaryDirectory(prefix="bench-eval-batch-") as scratch:
        figures = measure(args, Path(scratch))
    record = {
        "benchmark": f"{args.evaluation}_eval",
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "model": str(args.model) if args.model else "the demo spec's base model",
        "baseline_batch_size": args.batch_sizes[0],
        **figures,
    }
    out = args.out or RESULTS / f"{args.evaluation}_eval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    for figure in record["runs"]:
        print(
            f"batch {figure['batch_size']:>3}: {figure['seconds']:6.1f} s "
            f"({figure['time_vs_baseline']}x)"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
