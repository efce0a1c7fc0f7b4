"""A GRPO update in row chunks of bounded tokens, each backpropagated before the next is built.

Why: the graph of a GRPO update holds activations for every token the model sampled, about
0.7 MiB a token for SmolLM2-135M in bf16, and a step's sampled tokens follow its rollouts:
16 rollouts that each run to the 576-token budget make a graph several times that of 16
short ones. `cpu.grpo_micro_batches` splits a step into a fixed number of rollouts, so a
step of long rollouts still builds a big graph (measured in `make demo`: 6.9 to 8.3 GiB
peaks with the same spec). With `cpu.grpo_update_tokens` each micro-batch's rollouts are
cut further, in order, into chunks of at most that many trained tokens (a rollout longer
than the budget goes alone), so the largest graph is bounded by the budget, not by how
long the model talked.

The chunks' losses add up to the micro-batch's loss: TRL normalises per sequence (`grpo`,
`dr_grpo`: a chunk weighs its share of the rows) or by the step's token count (`dapo`:
already global, weight 1). Gradients are the same up to float rounding
(`tests/code/test_cpu_backend_update_chunks.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

#: TRL `loss_type`s whose normalisation a chunk weight can reproduce, and how:
#: "rows" = mean over sequences (a chunk weighs rows / all rows), "global" = divided by
#: a count that spans the whole generation (weight 1).
CHUNKABLE_LOSSES = {"grpo": "rows", "dr_grpo": "rows", "dapo": "global"}


def row_chunks(tokens: Sequence[int], budget: int | None) -> list[slice]:
    """Consecutive rows grouped so each group's tokens stay within `budget` (a row over the
    budget on its own). None: one group of every row. Rows keep their order: TRL lays a
    step out group by group, and the chunks need not respect groups (advantages are
    already computed), but keeping order keeps the arithmetic easy to check."""
    if budget is not None and budget < 1:
        raise ValueError(f"a token budget must be at least 1, got {budget}")
    if not tokens:
        return []
    if budget is None:
        return [slice(0, len(tokens))]
    chunks: list[slice] = []
    start, running = 0, 0
    for row, count in enumerate(tokens):
        if row > start and running + count > budget:
            chunks.append(slice(start, row))
            start, running = row, 0
        running += count
    chunks.append(slice(start, len(tokens)))
    return chunks


def chunk_weight(loss_type: str, rows: slice, total_rows: int) -> float:
    """What a chunk's loss (as TRL computes it on the chunk alone) is multiplied by so that
    the chunks' losses sum to the whole micro-batch's."""
    kind = CHUNKABLE_LOSSES.get(loss_type)
    if kind is None:
        raise ValueError(
            f"TRL loss_type {loss_type!r} cannot be split into token chunks "
            f"(supported: {sorted(CHUNKABLE_LOSSES)}); unset cpu.grpo_update_tokens"
        )
    if kind == "global":
        return 1.0
    return float(rows.stop - rows.start) / total_rows


def select_rows(inputs: Mapping[str, Any], rows: slice, total_rows: int) -> dict[str, Any]:
    """The micro-batch's inputs for `rows` only: every tensor laid out by row is sliced, and
    the rest (`num_items_in_batch`, counts spanning the generation) kept as they are."""
    return {
        key: value[rows]
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == total_rows
        else value
        for key, value in inputs.items()
    }


def trained_tokens(inputs: Mapping[str, Any]) -> list[int]:
    """Per row, the completion tokens the update backpropagates through: the model's own
    sampled tokens (`tool_mask` drops the tool responses the agent loop inserted)."""
    mask = inputs["completion_mask"]
    if inputs.get("tool_mask") is not None:
        mask = mask * inputs["tool_mask"]
    return [int(count) for count in mask.sum(dim=1).tolist()]
