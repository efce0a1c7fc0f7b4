"""Diagnostic: does the model know when a turn needs a second call?

Parallel calls are 0% exact on the time pack's held-out templates in every measured run: the
model makes the first call, ends the turn, and answers from one result. The choice is one
token, the one after the turn's first `</tool_call>`: a newline and another `<tool_call>`
(parallel rows) or `<|im_end|>` (single and multi-step rows, whose first turn has one call).

This script teacher-forces each row's reference first turn up to that tag, with the prompt
the loop renders (the dataset's tools in OpenAI function form), and reads the model's
probability of going on. A model that reads the question gives parallel rows a high chance
and the others a low one; one that learned only the mix of its training turns gives every
category the same chance. Train rows and held-out rows are read apart.

    python benchmarks/diag_parallel_choice.py --model WORK/model --data DATA [--label NAME]

Adds one entry per model to benchmarks/results/parallel_choice.json (keyed by --label).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "parallel_choice.json"
CATEGORIES = ("parallel", "single", "multi_step")
CALL_CLOSE = "</tool_call>"
TURN_START = "<|im_start|>"


def openai_tools(data: Path) -> list[dict[str, Any]]:
    """The dataset's catalog as the loop lists it (`serving.renderer.openai_function`):
    a pack dataset's `tools.json`, else (the built-in data) the project's own catalog."""
    from training.data.packs.truth import tool_snapshot_path

    tools_file = tool_snapshot_path(data)  # None for a built-in dataset (it has one too)
    if tools_file is None:
        from serving.tools import get_catalog

        return list(get_catalog().openai_schemas())
    from serving.renderer import openai_function

    tools = json.loads(tools_file.read_text(encoding="utf-8"))
    return [openai_function(tool) for tool in tools]


def mean_and_interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean with a normal-approximation 95% interval (rows are independent questions)."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * spread / math.sqrt(n) if n else 0.0
    return {"mean": round(mean, 4), "n": n, "ci95": [round(mean - half, 4), round(mean + half, 4)]}


def first_turn(tokenizer: Any, record: dict[str, Any], tools: list[dict[str, Any]]) -> list[int]:
    """The row's prompt and its reference first assistant turn, as token ids."""
    from serving.renderer import ChatRenderer
    from training.cpu_backend.sft import trajectory

    messages = trajectory(record)[: len(record["prompt"]) + 1]
    return ChatRenderer(tokenizer).ids(messages, tools, add_generation_prompt=False)


def choice_prefix(tokenizer: Any, ids: list[int]) -> list[int]:
    """`ids` up to and including the first `</tool_call>` of the last assistant turn: the
    point where the turn goes on to a second call or ends."""
    close = tokenizer.convert_tokens_to_ids(CALL_CLOSE)
    start = tokenizer.convert_tokens_to_ids(TURN_START)
    turn = max(i for i, token in enumerate(ids) if token == start)
    return ids[: ids.index(close, turn) + 1]


def second_call_chances(
    model: Any, tokenizer: Any, rows: Any, tools: list[dict[str, Any]]
) -> list[float]:
    """Per row, P(newline) right after the first `</tool_call>` of its reference first turn
    (the newline that starts a second call; a turn's end is `<|im_end|>` there)."""
    import torch

    (newline,) = tokenizer.encode("\n", add_special_tokens=False)
    chances = []
    for record in rows.to_dict("records"):
        prefix = choice_prefix(tokenizer, first_turn(tokenizer, record, tools))
        with torch.no_grad():
            logits = model(torch.tensor([prefix])).logits[0, -1]
        chances.append(float(torch.softmax(logits.float(), -1)[newline]))
    return chances


def measure(model_dir: Path, data: Path, rows_per_category: int) -> dict[str, Any]:
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tools = openai_tools(data)
    figures: dict[str, Any] = {}
    for split in ("train", "test"):
        frame = pd.read_parquet(data / f"{split}.parquet")
        for category in CATEGORIES:
            rows = frame[frame["category"] == category].head(rows_per_category)
            if len(rows):
                chances = second_call_chances(model, tokenizer, rows, tools)
                figures[f"{split}/{category}"] = mean_and_interval(chances)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="A model directory.")
    parser.add_argument(
        "--data",
        type=Path,
        required=True,
        help="A dataset directory (a pack's or the built-in one).",
    )
    parser.add_argument("--label", default="", help="Entry name (default: the model path).")
    parser.add_argument("--rows", type=int, default=32, help="Rows per category and split.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.rows < 2:
        parser.error("--rows must be at least 2 (an interval needs two rows)")
    for needed in ("train.parquet", "test.parquet"):
        if not (args.data / needed).is_file():
            parser.error(f"{args.data} has no {needed}: pass a dataset directory")
    figures = measure(args.model, args.data, args.rows)
    for name, value in figures.items():
        low, high = value["ci95"]
        print(
            f"{name:>16}: P(second call) {value['mean']:.3f} [{low:.3f}, {high:.3f}] n={value['n']}"
        )
    results = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    results[args.label or str(args.model)] = {
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "model": str(args.model),
        "data": str(args.data),
        "p_second_call": figures,
    }
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
