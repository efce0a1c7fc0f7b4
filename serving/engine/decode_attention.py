"""Attention of every decoding row's one new token in one batched call.

A decode step gives each active row one query. Attended row by row, with the shared prefix
as a second call merged through log-sum-exp (`packed.py`), that is about eight small tensor
calls per row and layer, and on a 2-core CPU their dispatch overhead outweighed their
arithmetic (`benchmarks/bench_engine_decode.py`). Here all decode rows go at once:
- their scores over the shared prefix are one matmul, the rows' query heads stacked per
  key/value head (grouped-query attention, the prefix never copied);
- their scores over their own tokens are one batched matmul over the slot store
  (`row_store.py`), positions past a row's length masked;
- one float32 softmax over [prefix | own] per row, as one softmax over the row's whole
  sequence, and the two weighted sums added.
"""

from __future__ import annotations

import torch


def decode_attention(
    query: torch.Tensor,
    own_keys: torch.Tensor,
    own_values: torch.Tensor,
    own_lengths: torch.Tensor,
    prefix_keys: torch.Tensor | None,
    prefix_values: torch.Tensor | None,
    prefix_used: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query per row over the row's prefix part and its own tokens.

    query [rows, heads, dim]; own_keys/own_values [rows, kv_heads, length, dim] (a row's
    positions at or past `own_lengths[row]` are padding); prefix_keys/values
    [1, kv_heads, prefix, dim] or None; prefix_used [rows]: how much of the prefix each row
    sees. Returns [rows, heads, dim]."""
    rows, heads, dim = query.shape
    kv_heads = own_keys.shape[1]
    groups = heads // kv_heads
    stacked = query.reshape(rows, kv_heads, groups, dim)
    own_scores = (stacked @ own_keys.transpose(-1, -2)).float() * scale
    own_padding = torch.arange(own_keys.shape[2])[None, :] >= own_lengths[:, None]
    scores = own_scores.masked_fill(own_padding[:, None, None, :], float("-inf"))
    width = int(prefix_used.max()) if prefix_keys is not None and rows else 0
    if width:
        assert prefix_keys is not None
        by_head = stacked.transpose(0, 1).reshape(kv_heads, rows * groups, dim)
        prefix_scores = (by_head @ prefix_keys[0, :, :width].transpose(-1, -2)).float() * scale
        prefix_scores = prefix_scores.view(kv_heads, rows, groups, width).transpose(0, 1)
        unseen = torch.arange(width)[None, :] >= prefix_used[:, None]
        prefix_scores = prefix_scores.masked_fill(unseen[:, None, None, :], float("-inf"))
        scores = torch.cat([prefix_scores, scores], dim=-1)
    weights = torch.softmax(scores, dim=-1).to(own_values.dtype)
    out = weights[..., width:] @ own_values
    if width:
        assert prefix_values is not None
        prefix_weights = weights[..., :width].transpose(0, 1).reshape(kv_heads, rows * groups, -1)
        shared = prefix_weights @ prefix_values[0, :, :width]
        out = out + shared.view(kv_heads, rows, groups, dim).transpose(0, 1)
    return out.reshape(rows, heads, dim)
