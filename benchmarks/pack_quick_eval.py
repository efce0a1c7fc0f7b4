"""Check: does the CPU training stage's quick eval judge a pack dataset's calls by the pack's
own tools? Runs one model's quick eval (the same rows, settings and tool server as a run's)
on a pack dataset, as `run_local` does, and writes `benchmarks/results/pack_quick_eval.json`
beside any `eval_sft.json` a run left there, for the same model and rows.

Why it exists: the episode loop once ran on a thread that did not see the pack's registry
(`episodes.run_episodes`), so on the time pack every `convert_time` call read as
`unknown_function` and the format guard replaced GRPO with more SFT.

    .venv/bin/python benchmarks/pack_quick_eval.py --model RUN/checkpoints/cpu-smollm2/sft/final \\
        --data RUN/data [--earlier RUN/checkpoints/cpu-smollm2/eval_sft.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from serving.engine.cpu_dtype import choose, cpu_facts

RESULTS = Path(__file__).parent / "results"
SPEC = Path(__file__).resolve().parents[1] / "training" / "specs" / "cpu_smollm2.yaml"
FIGURES = ("parseable_rate", "tool_selection_accuracy", "exact_call_accuracy", "pass_rate")


def figures(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "rows": block.get("rows"),
        **{name: block.get(name) for name in FIGURES},
        "malformed_by_kind": block.get("malformed_by_kind"),
    }


def main() -> None:
    from serving.toolcalls import using_registry
    from training.cpu_backend.run import eval_rows, quick_eval, served_tools
    from training.data.packs.truth import dataset_registry
    from training.pipeline.retraining_stage import replay_for_pack
    from training.spec.model import load_spec, with_settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="A model directory.")
    parser.add_argument("--data", type=Path, required=True, help="The pack dataset folder.")
    parser.add_argument("--earlier", type=Path, default=None, help="A run's eval_<stage>.json.")
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--out", type=Path, default=RESULTS / "pack_quick_eval.json")
    args = parser.parse_args()
    train_file = args.data / "train.parquet"
    spec = with_settings(
        load_spec(args.spec),
        [f"data.train_files=[{train_file}]", f"data.test_files=[{args.data / 'test.parquet'}]"],
    )
    spec = replay_for_pack(spec, args.data)
    dtype = choose(spec.cpu.dtype).dtype  # `auto` as a run resolves it on this CPU
    spec = spec.model_copy(update={"cpu": spec.cpu.model_copy(update={"dtype": dtype})})
    with ExitStack() as stack:
        stack.enter_context(using_registry(dataset_registry(train_file)))
        url, token, _ = stack.enter_context(served_tools(spec))
        cache = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "eval.json"
        block = quick_eval(spec, args.model, eval_rows(spec), url, cache, token)
    report = {
        "measured_at_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpu": cpu_facts(),
        "dtype": dtype,
        "model": str(args.model),
        "data": str(args.data),
        "now": figures(block),
        "earlier": figures(json.loads(args.earlier.read_text())) if args.earlier else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name in ("earlier", "now"):
        if report[name]:
            print(name, json.dumps(report[name]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
