"""Benchmark: does SFT cut by its deadline hand GRPO a better model when its cosine ends at the cut?

In `make demo` the time budget plans SFT's steps from a short probe and SFT's deadline then
stops it early (the last three demos: 83 of 96, 71 of 80 and 73 of 101 planned steps). With
the cosine laid over the planned count, SFT stopped at a quarter of its peak rate, not at its
floor. `schedule.ShrinkingCosine` lets the deadline end the cosine where it will stop.

This script trains the demo spec's SFT twice from the same base model on the same batches
(the rows the budget's plan of `--planned` steps takes), both stopped after `--cut` steps:
- `planned`: the cosine over the planned steps, cut (what the demo did before);
- `ends at cut`: the same cosine ended at the cut (what the deadline's projection does when
  it is right).
Then it scores both with the production harness (agent loop, the project's CPU model server,
the MCP server in mock mode) on the same held-out-template cases, paired case by case with a
bootstrap 90% interval. Writes benchmarks/results/sft_horizon.json with the CPU flags. Run it
alone: about 20 minutes on a 2-core AMX host.

    .venv/bin/python benchmarks/bench_sft_horizon.py --planned 100 --cut 72
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results" / "sft_horizon.json"
SPEC = ROOT / "training" / "specs" / "cpu_smollm2.yaml"
ARMS = ("planned", "ends_at_cut")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--planned", type=int, default=100, help="SFT steps the plan asked for")
    parser.add_argument("--cut", type=int, default=72, help="the step the deadline stops at")
    parser.add_argument("--rows", type=int, default=2_000, help="dataset rows (train + test)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the generated dataset")
    parser.add_argument("--eval-limit", type=int, default=None, help="held-out cases (all)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    if not 0 < args.cut <= args.planned:
        parser.error("--cut must be a step within the plan (1 to --planned)")

    import torch
    from bench_cpu_training import GRPO_ADDS_FIELDS, evaluate  # this folder, on sys.path
    from bench_sft_step_drift import demo_sft_spec
    from transformers import TrainerCallback

    from serving.engine.cpu_dtype import cpu_facts
    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start
    from serving.tools import get_catalog
    from training.cpu_backend.memory import release_memory
    from training.cpu_backend.schedule import schedule_of
    from training.cpu_backend.sft import run_sft
    from training.data.packs.generate import generate_builtin_dataset
    from training.evaluation.paired import paired_against, paired_by_category, read_cases
    from training.spec.resolve import resolve_model

    class CutAt(TrainerCallback):
        """Stops after step `cut` (as the deadline would) and records each step's rate;
        with `end_cosine`, ends the cosine at the cut from the first step."""

        def __init__(self, cut: int, end_cosine: bool) -> None:
            self.cut, self.end_cosine = cut, end_cosine
            self.rates: list[float] = []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            schedule = schedule_of(kwargs.get("lr_scheduler"))
            if schedule is None:
                raise RuntimeError("the SFT trainer no longer drives a ShrinkingCosine")
            if self.end_cosine:
                schedule.end_at(self.cut)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self.rates.append(float(kwargs["optimizer"].param_groups[0]["lr"]))
            if state.global_step >= self.cut:
                control.should_training_stop = True
            return control

    spec, dtype, _ = demo_sft_spec(args.planned)
    schemas = list(get_catalog().openai_schemas())
    arms: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sft-horizon-") as scratch:
        folder = Path(scratch)
        generate_builtin_dataset(
            folder / "data", n=args.rows, seed=args.data_seed, chinese_fraction=0.0, progress=False
        )
        base = resolve_model(spec, folder)
        train_file = folder / "data" / "train.parquet"
        for arm in ARMS:
            torch.manual_seed(spec.cpu.seed)  # both arms start from the same state
            cut = CutAt(args.cut, end_cosine=arm == "ends_at_cut")
            print(f"{arm}: {args.cut} of {args.planned} SFT steps ({dtype}) ...", flush=True)
            started = time.perf_counter()
            result = run_sft(spec, base, train_file, folder / arm, schemas, [cut], subdir="sft")
            arms[arm] = {
                "model_dir": result.model_dir,
                "steps": result.steps,
                "train_s": round(time.perf_counter() - started, 1),
                "first_loss": result.first_loss,
                "last_loss": result.last_loss,
                "losses": [list(pair) for pair in result.losses],
                "rate_first_last": [cut.rates[0], cut.rates[-1]],
                "rates": [round(rate, 8) for rate in cut.rates],
            }
            gc.collect()
            release_memory({}, arm)
        config = ServerConfig(mode="mock", port=0, workers=1, log_level="warning")
        with start(config) as mcp:
            for arm in ARMS:
                arms[arm]["held_out"] = evaluate(
                    arms[arm]["model_dir"],
                    folder / "data" / "test.parquet",
                    folder / "eval" / f"{arm}.json",
                    mcp.url,
                    args.eval_limit,
                    spec.rollout.max_turns,
                )
                print(arm, json.dumps(arms[arm]["held_out"]["overall"]), flush=True)
        planned_cases = read_cases(folder / "eval" / "planned.json")
        cut_cases = read_cases(folder / "eval" / "ends_at_cut.json")
        paired = paired_against(planned_cases, cut_cases, GRPO_ADDS_FIELDS)
        paired_categories = paired_by_category(planned_cases, cut_cases, GRPO_ADDS_FIELDS)
    for arm in ARMS:
        arms[arm]["model_dir"] = None  # a temporary directory, gone
    report = {
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "spec": str(SPEC.relative_to(ROOT)),
        "dtype": dtype,
        "rows": args.rows,
        "data_seed": args.data_seed,
        "planned_steps": args.planned,
        "cut_at": args.cut,
        "arms": arms,
        "ends_at_cut_minus_planned": paired,
        "ends_at_cut_minus_planned_by_category": paired_categories,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"paired": paired, **{a: arms[a]["held_out"]["overall"] for a in ARMS}}))


if __name__ == "__main__":
    main()
