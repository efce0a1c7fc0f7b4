"""The gradient pass's attention (`serving.engine.attention_math.softmax_attention`), its
softmax in float32 then rounded (the previous formulation, transformers' eager attention)
against the softmax in the model's dtype (now): forward and backward under the same
activation checkpoint training uses, on one row's shapes from the demo's SFT step
(9 query heads over 3 key/value heads, head size 64, ~30-250 queries over ~900-1,200 keys).

    python benchmarks/bench_attention_softmax.py [--repeats 20] [--out FILE]

Writes benchmarks/results/attention_softmax.json with the CPU flags and, per shape, both
times, their ratio, the largest difference of the outputs and of the gradients. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from serving.engine.attention_math import softmax_attention
from serving.engine.cpu_dtype import cpu_facts

RESULTS = Path(__file__).parent / "results" / "attention_softmax.json"
SHAPES = ((30, 900), (100, 1000), (141, 1043), (250, 1165))
HEADS, KV_HEADS, DIM, SCALE = 9, 3, 64, 0.125


def float32_softmax_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float,
    visible: torch.Tensor,
    groups: int,
) -> torch.Tensor:
    """The previous formulation, kept here as the baseline: softmax in float32, then rounded
    to the model's dtype (one chunk: every shape here is under the 256-query chunk)."""
    heads, length, dim = query.shape[1], query.shape[2], query.shape[3]
    kv_heads = key.shape[1]
    bias = torch.zeros(visible.shape, dtype=query.dtype).masked_fill(~visible, float("-inf"))
    stacked = (query[0] * scale).reshape(kv_heads, groups * length, dim)
    scores = (stacked @ key[0].transpose(-1, -2)).view(kv_heads, groups, length, -1) + bias
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    return (weights.view(kv_heads, groups * length, -1) @ value[0]).view(heads, length, dim)[None]


def inputs(queries: int, keys: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator).to(torch.bfloat16).requires_grad_()

    visible = torch.arange(keys)[None, :] <= torch.arange(keys - queries, keys)[:, None]
    return (
        leaf(1, HEADS, queries, DIM),
        leaf(1, KV_HEADS, keys, DIM),
        leaf(1, KV_HEADS, keys, DIM),
        visible,
    )


def timed(
    fn: Any, args: tuple[torch.Tensor, ...], repeats: int
) -> tuple[float, torch.Tensor, list[torch.Tensor]]:
    query, key, value, visible = args
    best, out = float("inf"), torch.empty(0)
    for _ in range(repeats):
        for leaf in (query, key, value):
            leaf.grad = None
        start = time.perf_counter()
        out = checkpoint(
            fn, query, key, value, SCALE, visible, HEADS // KV_HEADS, use_reentrant=False
        )
        out.float().sum().backward()
        best = min(best, time.perf_counter() - start)
    grads = [leaf.grad.float() for leaf in (query, key, value) if leaf.grad is not None]
    return best, out.detach().float(), grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(2)
    rows = []
    for queries, keys in SHAPES:
        before = timed(float32_softmax_attention, inputs(queries, keys), args.repeats)
        now = timed(softmax_attention, inputs(queries, keys), args.repeats)
        row = {
            "queries": queries,
            "keys": keys,
            "float32_softmax_ms": round(before[0] * 1e3, 2),
            "model_dtype_softmax_ms": round(now[0] * 1e3, 2),
            "ratio": round(now[0] / before[0], 3),
            "output_max_abs_diff": float((now[1] - before[1]).abs().max()),
            "gradient_max_rel_diff": max(
                float((a - b).abs().max() / b.abs().max())
                for a, b in zip(now[2], before[2], strict=True)
            ),
        }
        rows.append(row)
        print(
            f"{queries:4d} x {keys:5d}: float32 softmax {row['float32_softmax_ms']:6.2f} ms, "
            f"model dtype {row['model_dtype_softmax_ms']:6.2f} ms ({row['ratio']:.2f}x); "
            f"outputs differ by {row['output_max_abs_diff']:.1e}, gradients by "
            f"{row['gradient_max_rel_diff']:.1e} (relative)",
            flush=True,
        )
    report = {
        "machine": cpu_facts(),
        "threads": 2,
        "dtype": "bfloat16",
        "repeats": args.repeats,
        "shapes": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
