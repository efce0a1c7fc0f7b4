"""The packed forward's attention (`toolrl_packed`, registered with transformers'
`AttentionInterface`): each row's new tokens over the shared prefix and the row's own
earlier tokens, row by row for prompts and tool results, batched for decoding rows
(`decode_attention.py`), and with gradients for training's frozen-context loss."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn import functional
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from serving.engine.attention_math import (
    FLASH_MIN_QUERIES,
    attend_with_lse,
    expand_heads,
    merge_partial,
    softmax_attention,
)
from serving.engine.decode_attention import decode_attention
from serving.engine.packed_layout import Layer, Layout

ATTENTION = "toolrl_packed"


def packed_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Row-by-row attention for a packed forward; any other forward gets transformers' SDPA."""
    layout: Layout | None = kwargs.pop("toolrl_layout", None)
    if layout is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    groups = int(getattr(module, "num_key_value_groups", 1))
    if layout.mode == "prefix":
        out = functional.scaled_dot_product_attention(
            query,
            expand_heads(key, groups),
            expand_heads(value, groups),
            is_causal=True,
            scale=scale,
        )
        return out.transpose(1, 2).contiguous(), None
    layer = layout.layers[module.layer_idx]
    if layout.mode == "gradient":
        return _gradient_attention(
            layout, module.layer_idx, layer, query, key, value, scale, groups
        ), None
    return _extend_rows(layout, layer, query, scale, groups), None


def _decode_rows(
    layout: Layout, layer: Layer, query: torch.Tensor, scale: float, members: list[int]
) -> torch.Tensor:
    """The rows `members` (indices into the layout) each bring one token, found at
    `query[..., i, :]` for the i-th entry's offset: one batched call for all of them
    (`decode_attention.py`). Returns [rows, heads, dim] in `members` order."""
    offsets = torch.tensor(layout.counts).cumsum(0) - 1
    slots = torch.tensor([layout.slots[i] for i in members])
    lengths = torch.tensor([layout.starts[i] + 1 for i in members])
    width = int(lengths.max())
    return decode_attention(
        query[0].index_select(1, offsets[members]).transpose(0, 1),
        layer.keys.gather(slots, width),
        layer.values.gather(slots, width),
        lengths,
        layer.prefix_keys,
        layer.prefix_values,
        torch.tensor([layout.prefix_used[i] for i in members]),
        scale,
    )


def _extend_rows(
    layout: Layout, layer: Layer, query: torch.Tensor, scale: float, groups: int
) -> torch.Tensor:
    """Every row's new tokens over its prefix part and its own earlier tokens. Rows that
    bring one token (decoding) go in one batched call; a prompt gathers [prefix | own] for
    one softmax; a few tokens (a tool result) attend to their row, merged through
    log-sum-exp with one prefix call per prefix length. Returns [1, tokens, heads, dim]."""
    decoding = [i for i, count in enumerate(layout.counts) if count == 1]
    if len(decoding) == len(layout.counts):
        return _decode_rows(layout, layer, query, scale, decoding)[None]
    own: list[tuple[torch.Tensor, torch.Tensor]] = []
    merged: list[torch.Tensor] = []
    bounds: list[tuple[int, int]] = []
    whole: set[int] = set()
    start = 0
    decoded = _decode_rows(layout, layer, query, scale, decoding) if decoding else None
    for index, count in enumerate(layout.counts):
        if decoded is not None and count == 1:
            out = decoded[decoding.index(index)][None, :, None, :]
            own.append((out, out.new_zeros(0)))
            merged.append(out)
            whole.add(index)
            bounds.append((start, start + count))
            start += count
            continue
        slot, length = layout.slots[index], layout.starts[index] + count
        keys, values = layer.keys.view(slot, length), layer.values.view(slot, length)
        q = query[..., start : start + count, :]
        used = layout.prefix_used[index] if layer.prefix_keys is not None else 0
        if count >= FLASH_MIN_QUERIES and layer.prefix_values is not None:
            # a prompt: gather [prefix | own] once and take one softmax over both (the
            # prefix copy is small next to the prompt's score matrix)
            assert layer.prefix_keys is not None
            all_keys = torch.cat([layer.prefix_keys[..., :used, :], keys], dim=-2)
            all_values = torch.cat([layer.prefix_values[..., :used, :], values], dim=-2)
            positions = torch.arange(all_keys.shape[-2])
            visible = (
                positions[None, :] <= (all_keys.shape[-2] - count + torch.arange(count))[:, None]
            )
            out = softmax_attention(q, all_keys, all_values, scale, visible, groups)
            own.append((out, out.new_zeros(0)))
            merged.append(out)
            whole.add(index)
        else:
            pair = attend_with_lse(
                q,
                expand_heads(keys, groups),
                expand_heads(values, groups),
                scale,
                keys.shape[-2] - count,
            )
            own.append(pair)
            merged.append(pair[0])
        bounds.append((start, start + count))
        start += count
    if layer.prefix_keys is not None and layer.prefix_values is not None:
        # one call per prefix length in use (normally one: the whole prefix) for the rows
        # that decode a few tokens
        for used in sorted({u for i, u in enumerate(layout.prefix_used) if u and i not in whole}):
            members = [i for i, u in enumerate(layout.prefix_used) if u == used and i not in whole]
            q = torch.cat([query[..., bounds[i][0] : bounds[i][1], :] for i in members], dim=-2)
            out, lse = attend_with_lse(
                q,
                expand_heads(layer.prefix_keys[..., :used, :], groups),
                expand_heads(layer.prefix_values[..., :used, :], groups),
                scale,
                None,
            )
            offset = 0
            for i in members:
                width = bounds[i][1] - bounds[i][0]
                shared = (out[..., offset : offset + width, :], lse[..., offset : offset + width])
                merged[i] = merge_partial(own[i], shared)
                offset += width
    out = torch.cat(merged, dim=-2)
    return out.transpose(1, 2).contiguous()


def _gradient_attention(
    layout: Layout,
    layer_idx: int,
    layer: Layer,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float,
    groups: int,
) -> torch.Tensor:
    """Each row's trained positions over [prefix, its frozen context, its trained positions]
    (gathered per row, one softmax), with gradients through everything computed here."""
    assert layout.context is not None and layout.context_positions is not None
    assert layout.query_positions is not None
    pieces: list[torch.Tensor] = []
    start = 0
    for index, (count, used) in enumerate(zip(layout.counts, layout.prefix_used, strict=True)):
        part = slice(start, start + count)
        context_keys, context_values = layout.context[index][layer_idx]
        keys_parts, values_parts, positions = [], [], []
        if used and layer.prefix_keys is not None and layer.prefix_values is not None:
            keys_parts.append(layer.prefix_keys[..., :used, :])
            values_parts.append(layer.prefix_values[..., :used, :])
            positions.append(torch.arange(used))
        keys_parts += [context_keys, key[..., part, :]]
        values_parts += [context_values, value[..., part, :]]
        positions += [layout.context_positions[index], layout.query_positions[index]]
        visible = torch.cat(positions)[None, :] <= layout.query_positions[index][:, None]
        # recomputed in backward instead of kept: a row's softmax output is heads x queries
        # x keys floats (16 GRPO rollouts: ~1.9 GB over 30 layers), its inputs a fraction
        pieces.append(
            checkpoint(
                softmax_attention,
                query[..., part, :],
                torch.cat(keys_parts, dim=-2),
                torch.cat(values_parts, dim=-2),
                scale,
                visible,
                groups,
                use_reentrant=False,
            )
        )
        start += count
    return torch.cat(pieces, dim=-2).transpose(1, 2).contiguous()


AttentionInterface.register(ATTENTION, packed_attention)
# every other forward of a model switched to `toolrl_packed` (TRL's own paths, `generate`)
# must get the masks SDPA gets: an unknown name would hand attention the raw 2D padding mask
AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def use_packed_attention(model: Any) -> None:
    """Route the model's attention through `packed_attention` (other forwards keep SDPA)."""
    if getattr(model.config, "_attn_implementation", None) != ATTENTION:
        model.set_attn_implementation(ATTENTION)
