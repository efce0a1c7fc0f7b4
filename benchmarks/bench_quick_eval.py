"""What the training stage's quick eval costs at each engine batch size, on the same rows.

The CPU training job evaluates its model three times (before training, after SFT, after
GRPO) on `cpu.eval_rows` held-out rows (`training/cpu_backend/quick_eval.py`): every row
through the agent loop on the in-process engine, `cpu.eval_batch_size` episodes decoded
together. In `make demo` those three evals took 142 to 329 s of a 20-minute budget. On two
cores a decode step of SmolLM2-135M is mostly fixed cost (`engine_decode.json`: 4 rows 169
ms, 16 rows 244 ms a step), so more episodes in one batch should cost little more per step.

This runs `evaluate` on the demo's spec (`cpu_smollm2.yaml`), the embedded MCP server in
mock mode and the spec's seeded sample of held-out rows, once per batch size, the first
size again last (the baseline first and last, so drift on the host shows), and prints the
seconds, the tokens and the headline metrics of each. Greedy decoding, so the metrics should
agree between sizes up to the last bits of bf16 matmuls in differently shaped batches.

    .venv/bin/python benchmarks/bench_quick_eval.py [--model DIR] [--batch-sizes 16 48]

`--model`: a Hugging Face model directory (the demo's SFT model, say
`runs/demo/pipeline/<run>/jobs/<job>/checkpoints/cpu-smollm2/sft/final`); the spec's base
model without it. `--data`: a dataset directory with `test.parquet` (generated here, the
demo's 2,000 rows at seed 0, without it). Writes benchmarks/results/quick_eval.json (or
--out) with the CPU flags. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "quick_eval.json"
SPEC = Path(__file__).resolve().parents[1] / "training" / "specs" / "cpu_smollm2.yaml"
METRICS = (
    "pass_rate",
    "exact_call_accuracy",
    "tool_selection_accuracy",
    "parseable_rate",
    "abstention_rate",
    "mean_turns",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="model directory (default: the spec's base)")
    parser.add_argument("--data", type=Path, help="dataset directory with test.parquet")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 48])
    parser.add_argument("--rows", type=int, help="held-out rows (default: the spec's eval_rows)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if any(size < 1 for size in args.batch_sizes):
        parser.error("--batch-sizes must be positive")
    if args.rows is not None and args.rows < 1:
        parser.error("--rows must be positive")
    if args.model is not None and not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json there (a Hugging Face model dir)")

    import torch

    from serving.engine.cpu_dtype import choose, cpu_facts
    from training.cpu_backend.run import eval_rows, quick_eval, served_tools
    from training.data.packs.generate import generate_builtin_dataset
    from training.spec.model import load_spec
    from training.spec.resolve import resolve_model

    spec = load_spec(SPEC)
    dtype = choose(spec.cpu.dtype).dtype
    torch.set_num_threads(spec.cpu.threads)
    with tempfile.TemporaryDirectory(prefix="bench-quick-eval-") as scratch:
        folder = Path(scratch)
        data = args.data
        if data is None:
            data = folder / "data"
            generate_builtin_dataset(data, n=2_000, seed=0, progress=False)
        test = data / "test.parquet"
        if not test.is_file():
            parser.error(f"--data {data}: no test.parquet there")
        update: dict[str, Any] = {"dtype": dtype}
        if args.rows is not None:
            update["eval_rows"] = args.rows
        spec = spec.model_copy(
            update={
                "cpu": spec.cpu.model_copy(update=update),
                "data": spec.data.model_copy(update={"test_files": [str(test)]}),
            }
        )
        model = args.model.resolve() if args.model else resolve_model(spec, folder)
        rows = eval_rows(spec)
        runs: list[dict[str, Any]] = []
        order = [*args.batch_sizes, args.batch_sizes[0]] if len(args.batch_sizes) > 1 else []
        with served_tools(spec) as (url, token, _usage):
            for index, size in enumerate(order or args.batch_sizes):
                sized = spec.model_copy(
                    update={"cpu": spec.cpu.model_copy(update={"eval_batch_size": size})}
                )
                cache = folder / f"eval_{index}.json"
                print(f"quick eval: {len(rows)} rows, batch {size} ...", flush=True)
                payload = quick_eval(sized, model, rows, url, cache, token)
                run = {
                    "batch_size": size,
                    "seconds": payload["seconds"],
                    "generated_tokens": payload["generated_tokens"],
                    **{key: payload.get(key) for key in METRICS},
                }
                runs.append(run)
                print(
                    f"  {run['seconds']:.1f} s, {run['generated_tokens']} tokens, pass "
                    f"{run['pass_rate']}, exact {run['exact_call_accuracy']}, turns "
                    f"{run['mean_turns']}",
                    flush=True,
                )
    baseline = [r["seconds"] for r in runs if r["batch_size"] == args.batch_sizes[0]]
    base_s = sum(baseline) / len(baseline)
    for run in runs:
        run["time_vs_baseline"] = round(run["seconds"] / base_s, 3)
    record = {
        "benchmark": "quick_eval",
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "dtype": dtype,
        "threads": spec.cpu.threads,
        "model": str(args.model) if args.model else spec.model.path,
        "rows": len(rows),
        "baseline_batch_size": args.batch_sizes[0],
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    for run in runs:
        print(f"batch {run['batch_size']:>3}: {run['seconds']:6.1f} s ({run['time_vs_baseline']}x)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
