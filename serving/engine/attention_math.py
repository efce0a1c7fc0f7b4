"""Attention arithmetic for the packed forward, independent of its layout: a softmax with
its log-sum-exp (so two partial attentions merge exactly), the gathered-row softmax with
grouped-query heads stacked, and the merge."""

from __future__ import annotations

import torch

FLASH_MIN_QUERIES = 64
"""Below this many queries the plain matmul softmax beats the CPU flash kernel (measured:
1 query x 800 keys 99 us vs 336 us; 250 x 250 2.2 ms vs 1.0 ms)."""


def expand_heads(states: torch.Tensor, groups: int) -> torch.Tensor:
    return states if groups == 1 else states.repeat_interleave(groups, dim=1)


def attend_with_lse(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float,
    causal_offset: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of `query` over `key`/`value` and the log-sum-exp of its scores.
    `causal_offset`: query i sees keys up to index offset + i (None: every key)."""
    queries, keys = query.shape[-2], key.shape[-2]
    visible = None
    if causal_offset is not None and causal_offset + queries - 1 < keys - 1:
        raise ValueError("queries must be the last tokens of their keys")
    if causal_offset is not None and queries > 1:
        visible = torch.arange(keys)[None, :] <= (causal_offset + torch.arange(queries))[:, None]
    if queries >= FLASH_MIN_QUERIES:
        causal = visible is not None and queries == keys
        mask = None
        if visible is not None and not causal:
            mask = torch.zeros(visible.shape, dtype=query.dtype).masked_fill(
                ~visible, float("-inf")
            )
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, is_causal=causal, attn_mask=mask, scale=scale
        )
        return out, lse
    return math_attention(query, key, value, scale, visible)


def softmax_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float,
    visible: torch.Tensor,
    groups: int,
    chunk: int = 256,
) -> torch.Tensor:
    """Plain attention over keys already gathered for one row: scores and softmax in the
    model's dtype, a chunk of queries at a time so the score matrix stays small. The query
    heads that share a key/value head are stacked instead of copying the keys per head
    (grouped-query attention). Differentiable.

    Why not a float32 softmax (transformers' eager attention): torch's CPU kernel already
    accumulates a bf16 softmax in float32 and rounds once, so the weights are the same values
    bit for bit, without a float32 copy of every score matrix and its backward in float32.
    Measured (`benchmarks/bench_attention_softmax.py`, bf16, one row's gradient-pass shapes):
    forward and backward 0.62-0.84x the time; the gradients differ by bf16 rounding.

    query [1, heads, q, d]; key/value [1, kv_heads, k, d]; visible [q, k] bool."""
    heads, length, dim = query.shape[1], query.shape[2], query.shape[3]
    kv_heads = key.shape[1]
    keys, values = key[0], value[0]
    bias = torch.zeros(visible.shape, dtype=query.dtype).masked_fill(~visible, float("-inf"))
    pieces = []
    for start in range(0, length, chunk):
        q = query[0, :, start : start + chunk] * scale
        width = q.shape[1]
        stacked = q.reshape(kv_heads, groups * width, dim)
        scores = (stacked @ keys.transpose(-1, -2)).view(kv_heads, groups, width, -1)
        scores = scores + bias[start : start + width]
        weights = torch.softmax(scores, dim=-1)
        out = weights.view(kv_heads, groups * width, -1) @ values
        pieces.append(out.view(heads, width, dim))
    return torch.cat(pieces, dim=1)[None]


def merge_partial(
    first: tuple[torch.Tensor, torch.Tensor], second: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    (out_a, lse_a), (out_b, lse_b) = first, second
    lse = torch.logaddexp(lse_a, lse_b)
    merged = out_a.float() * torch.exp(lse_a - lse)[..., None]
    merged = merged + out_b.float() * torch.exp(lse_b - lse)[..., None]
    return merged.to(out_a.dtype)


def math_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float,
    visible: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention and its log-sum-exp with plain (differentiable) tensor ops."""
    scores = (query @ key.transpose(-1, -2)).float() * scale
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse[..., None]).to(value.dtype)
    return weights @ value, lse
