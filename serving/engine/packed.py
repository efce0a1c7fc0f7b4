"""Many sequences in one forward, the shared tool prompt stored and computed once.

Every request, rollout and training row starts with the same system prompt and tool list
(about 800 tokens with the compact template). A batched forward would copy that prefix's
keys into every row and pad the rows to one length. Here the tokens of all rows go through
the model as *one* sequence, in any mix (a whole prompt for one row, the newest token for
fifteen others), and attention is computed row by row (`toolrl_packed`, registered with
transformers' `AttentionInterface`): each token attends to the prefix (one call for all
rows' queries) and to its own row's earlier tokens (one call per row), and the two partial
results are merged through their log-sum-exp, exactly as one softmax over both. The
projections and MLPs, most of the FLOPs, run once over all tokens; attention costs what the
rows need and no more; nothing is padded and the prefix is never copied.

Keys and values live in one slot per row (`row_store.py`, appended in place) and once for
the prefix; a decode step (one token per row) attends in one batched call
(`decode_attention.py`). Positions
are explicit, so every row's numbers are those of a separate forward
(`tests/code/test_engine_packed.py`).

Training's frozen-context loss (`training/cpu_backend/packed_loss.py`) reads the cached
keys back (`row_keys`) and runs its gradient pass through `gradient_forward`, where each
row's trained positions attend to its frozen context and to each other, with gradients.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch.nn import functional
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from serving.engine.decode_attention import decode_attention
from serving.engine.row_store import RowStore

SHARED = -1
"""Row id of the shared prefix."""
ATTENTION = "toolrl_packed"
_FLASH_MIN_QUERIES = 64
"""Below this many queries the plain matmul softmax beats the CPU flash kernel (measured:
1 query x 800 keys 99 us vs 336 us; 250 x 250 2.2 ms vs 1.0 ms)."""
_ONE = torch.ones((1, 1, 1, 1), dtype=torch.bool)
"""Stand-in 4D mask: transformers passes a 4D mask through untouched, and the packed
attention ignores it (visibility comes from the layout)."""


@dataclass
class _Layer:
    prefix_keys: torch.Tensor | None = None
    prefix_values: torch.Tensor | None = None
    keys: RowStore = field(default_factory=RowStore)
    values: RowStore = field(default_factory=RowStore)


@dataclass
class _Layout:
    """What one packed forward holds: consecutive query groups, one per row."""

    store: PackedKV
    mode: Literal["prefix", "extend", "gradient"]
    rows: list[int]
    counts: list[int]
    prefix_used: list[int]
    # extend mode: each row's slot in the row store and its length before this forward
    slots: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    # gradient mode: each row's frozen context (keys, values, positions) per layer, and
    # the positions of its query tokens
    context: list[list[tuple[torch.Tensor, torch.Tensor]]] | None = None
    context_positions: list[torch.Tensor] | None = None
    query_positions: list[torch.Tensor] | None = None


class _PackedCache(Cache):
    """The transformers `Cache` face of a `PackedKV`: stores new keys per row."""

    def __init__(self, store: PackedKV) -> None:
        super().__init__(layer_class_to_replicate=DynamicLayer)
        self.store = store
        self.layout: _Layout | None = None

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        layout = self.layout
        if layout is None:
            raise RuntimeError("packed cache used outside PackedKV")
        if layout.mode == "gradient":
            return key_states, value_states
        layers = self.store.layers
        while len(layers) <= layer_idx:
            layers.append(_Layer())
        layer = layers[layer_idx]
        if layout.mode == "prefix":
            layer.prefix_keys, layer.prefix_values = key_states, value_states
            return key_states, value_states
        if all(count == 1 for count in layout.counts):
            slots, starts = torch.tensor(layout.slots), torch.tensor(layout.starts)
            layer.keys.write_one_each(slots, starts, key_states[0])
            layer.values.write_one_each(slots, starts, value_states[0])
            return key_states, value_states
        start = 0
        for slot, offset, count in zip(layout.slots, layout.starts, layout.counts, strict=True):
            layer.keys.write(slot, offset, key_states[0, :, start : start + count])
            layer.values.write(slot, offset, value_states[0, :, start : start + count])
            start += count
        return key_states, value_states

    def get_seq_length(self, layer_idx: int | None = 0) -> int:
        return 0


def _expand(states: torch.Tensor, groups: int) -> torch.Tensor:
    return states if groups == 1 else states.repeat_interleave(groups, dim=1)


def _attend_with_lse(
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
    if queries >= _FLASH_MIN_QUERIES:
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
    return _math_attention(query, key, value, scale, visible)


def _softmax_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float,
    visible: torch.Tensor,
    groups: int,
    chunk: int = 256,
) -> torch.Tensor:
    """Plain attention over keys already gathered for one row: scores in the model's dtype,
    softmax in float32 (as transformers' eager attention), a chunk of queries at a time so
    the score matrix stays small. The query heads that share a key/value head are stacked
    instead of copying the keys per head (grouped-query attention). Differentiable.

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
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
        out = weights.view(kv_heads, groups * width, -1) @ values
        pieces.append(out.view(heads, width, dim))
    return torch.cat(pieces, dim=1)[None]


def _merge(
    first: tuple[torch.Tensor, torch.Tensor], second: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    (out_a, lse_a), (out_b, lse_b) = first, second
    lse = torch.logaddexp(lse_a, lse_b)
    merged = out_a.float() * torch.exp(lse_a - lse)[..., None]
    merged = merged + out_b.float() * torch.exp(lse_b - lse)[..., None]
    return merged.to(out_a.dtype)


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
    layout: _Layout | None = kwargs.pop("toolrl_layout", None)
    if layout is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    groups = int(getattr(module, "num_key_value_groups", 1))
    if layout.mode == "prefix":
        out = functional.scaled_dot_product_attention(
            query, _expand(key, groups), _expand(value, groups), is_causal=True, scale=scale
        )
        return out.transpose(1, 2).contiguous(), None
    layer = layout.store.layers[module.layer_idx]
    if layout.mode == "gradient":
        return _gradient_attention(
            layout, module.layer_idx, layer, query, key, value, scale, groups
        ), None
    return _extend_rows(layout, layer, query, scale, groups), None


def _decode_rows(
    layout: _Layout, layer: _Layer, query: torch.Tensor, scale: float, members: list[int]
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
    layout: _Layout, layer: _Layer, query: torch.Tensor, scale: float, groups: int
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
        if count >= _FLASH_MIN_QUERIES and layer.prefix_values is not None:
            # a prompt: gather [prefix | own] once and take one softmax over both (the
            # prefix copy is small next to the prompt's score matrix)
            assert layer.prefix_keys is not None
            all_keys = torch.cat([layer.prefix_keys[..., :used, :], keys], dim=-2)
            all_values = torch.cat([layer.prefix_values[..., :used, :], values], dim=-2)
            positions = torch.arange(all_keys.shape[-2])
            visible = (
                positions[None, :] <= (all_keys.shape[-2] - count + torch.arange(count))[:, None]
            )
            out = _softmax_attention(q, all_keys, all_values, scale, visible, groups)
            own.append((out, out.new_zeros(0)))
            merged.append(out)
            whole.add(index)
        else:
            pair = _attend_with_lse(
                q, _expand(keys, groups), _expand(values, groups), scale, keys.shape[-2] - count
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
            out, lse = _attend_with_lse(
                q,
                _expand(layer.prefix_keys[..., :used, :], groups),
                _expand(layer.prefix_values[..., :used, :], groups),
                scale,
                None,
            )
            offset = 0
            for i in members:
                width = bounds[i][1] - bounds[i][0]
                shared = (out[..., offset : offset + width, :], lse[..., offset : offset + width])
                merged[i] = _merge(own[i], shared)
                offset += width
    out = torch.cat(merged, dim=-2)
    return out.transpose(1, 2).contiguous()


def _gradient_attention(
    layout: _Layout,
    layer_idx: int,
    layer: _Layer,
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
                _softmax_attention,
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


def _math_attention(
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


AttentionInterface.register(ATTENTION, packed_attention)
# every other forward of a model switched to `toolrl_packed` (TRL's own paths, `generate`)
# must get the masks SDPA gets: an unknown name would hand attention the raw 2D padding mask
AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def use_packed_attention(model: Any) -> None:
    """Route the model's attention through `packed_attention` (other forwards keep SDPA)."""
    if getattr(model.config, "_attn_implementation", None) != ATTENTION:
        model.set_attn_implementation(ATTENTION)


class PackedKV:
    """The packed cache of one model; rows are small integers chosen by the caller."""

    def __init__(self, model: Any, max_query_tokens: int = 2048) -> None:
        use_packed_attention(model)
        self.base = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.max_query_tokens = max_query_tokens
        self.layers: list[_Layer] = []
        self.cache = _PackedCache(self)
        self.lengths: dict[int, int] = {}
        self.row_prefix: dict[int, int] = {}
        self.slots: dict[int, int] = {}
        """Each row's slot in the layers' row stores (`row_store.py`), reused when freed."""
        self._free_slots: list[int] = []
        self.prefix_length = 0
        self.prefix_tokens: list[int] = []

    def row_length(self, row: int) -> int:
        """Tokens row `row` has seen so far, the part of the shared prefix it uses included."""
        return self.row_prefix.get(row, self.prefix_length) + self.lengths.get(row, 0)

    @property
    def cached_tokens(self) -> int:
        return self.prefix_length + sum(self.lengths.values())

    @torch.no_grad()
    def set_prefix(self, tokens: Sequence[int]) -> None:
        """The tokens every row starts with (once, before any row)."""
        if self.lengths:
            raise RuntimeError("set_prefix must come before any row is added")
        if tokens:
            layout = _Layout(self, "prefix", [SHARED], [len(tokens)], [0])
            self._run(layout, list(tokens), torch.arange(len(tokens)))
        self.prefix_length = len(tokens)
        self.prefix_tokens = list(tokens)

    def start_row(self, row: int, prefix_used: int | None = None) -> None:
        """Declare a row that sees only the first `prefix_used` prefix tokens (default all):
        a prompt that shares part of the prefix starts its own tokens right after it."""
        used = self.prefix_length if prefix_used is None else prefix_used
        if not 0 <= used <= self.prefix_length:
            raise ValueError(f"prefix_used={used} outside 0..{self.prefix_length}")
        if row == SHARED or row in self.lengths:
            raise ValueError(f"row {row} is already in use")
        self.row_prefix[row] = used
        self.lengths[row] = 0
        self.slots[row] = heapq.heappop(self._free_slots) if self._free_slots else len(self.slots)

    @torch.no_grad()
    def extend(
        self, rows: Sequence[int], tokens: Sequence[Sequence[int]], last_only: bool = True
    ) -> list[torch.Tensor]:
        """Append `tokens[i]` to row `rows[i]` (started with `start_row`); returns each row's
        hidden states for its new tokens (only the last one with `last_only`). Rows are run
        in chunks of about `max_query_tokens` tokens."""
        if len(rows) != len(tokens):
            raise ValueError("rows and tokens differ in length")
        unknown = [r for r in rows if r not in self.lengths]
        if unknown:
            raise ValueError(f"rows {unknown[:5]} were not started")
        outputs: list[torch.Tensor] = [torch.empty(0)] * len(rows)
        chunk: list[int] = []
        budget = 0
        for index, piece in enumerate(tokens):
            if not piece:
                continue
            if chunk and budget + len(piece) > self.max_query_tokens:
                self._extend_chunk(chunk, rows, tokens, outputs, last_only)
                chunk, budget = [], 0
            chunk.append(index)
            budget += len(piece)
        if chunk:
            self._extend_chunk(chunk, rows, tokens, outputs, last_only)
        return outputs

    def _extend_chunk(
        self,
        chunk: list[int],
        rows: Sequence[int],
        tokens: Sequence[Sequence[int]],
        outputs: list[torch.Tensor],
        last_only: bool,
    ) -> None:
        chunk_rows = [rows[i] for i in chunk]
        pieces = [list(tokens[i]) for i in chunk]
        if len(set(chunk_rows)) != len(chunk_rows):
            raise ValueError("a row appears twice in one extend")
        positions = torch.cat(
            [
                torch.arange(self.row_length(r), self.row_length(r) + len(p))
                for r, p in zip(chunk_rows, pieces, strict=True)
            ]
        )
        layout = _Layout(
            self,
            "extend",
            chunk_rows,
            [len(p) for p in pieces],
            [self.row_prefix[r] for r in chunk_rows],
            slots=[self.slots[r] for r in chunk_rows],
            starts=[self.lengths[r] for r in chunk_rows],
        )
        hidden = self._run(layout, [t for p in pieces for t in p], positions)
        start = 0
        for index, row, piece in zip(chunk, chunk_rows, pieces, strict=True):
            states = hidden[start : start + len(piece)]
            outputs[index] = states[-1:] if last_only else states
            self.lengths[row] += len(piece)
            start += len(piece)

    def _run(self, layout: _Layout, ids: list[int], positions: torch.Tensor) -> torch.Tensor:
        self.cache.layout = layout
        try:
            hidden: torch.Tensor = self.base(
                input_ids=torch.tensor([ids], dtype=torch.long),
                position_ids=positions[None],
                attention_mask=_ONE,
                past_key_values=self.cache,
                use_cache=True,
                toolrl_layout=layout,
            ).last_hidden_state[0]
        finally:
            self.cache.layout = None
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(hidden)
        return logits.float()

    def drop_rows(self, rows: Sequence[int]) -> None:
        """Forget rows (finished requests): their keys leave the cache."""
        for row in rows:
            self.lengths.pop(row, None)
            self.row_prefix.pop(row, None)
            slot = self.slots.pop(row, None)
            if slot is not None:
                heapq.heappush(self._free_slots, slot)

    def gradient_forward(
        self,
        rows: Sequence[int],
        positions: Sequence[torch.Tensor],
        ids: Sequence[torch.Tensor],
    ) -> torch.Tensor:
        """With gradients: run `ids[i]` at `positions[i]` of row `rows[i]`, each attending to
        the prefix, its row's cached keys at every *other* position (frozen), and its own
        row's new tokens at or before it. Returns the hidden states (rows in order)."""
        context: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        context_positions: list[torch.Tensor] = []
        for row, wanted in zip(rows, positions, strict=True):
            used = self.row_prefix[row]
            cached = torch.arange(used, used + self.lengths[row])
            keep = (~torch.isin(cached, wanted)).nonzero().squeeze(-1)
            context_positions.append(cached[keep])
            slot, length = self.slots[row], self.lengths[row]
            context.append(
                [
                    (
                        layer.keys.view(slot, length).index_select(-2, keep),
                        layer.values.view(slot, length).index_select(-2, keep),
                    )
                    for layer in self.layers
                ]
            )
        layout = _Layout(
            self,
            "gradient",
            list(rows),
            [int(p.numel()) for p in positions],
            [self.row_prefix[r] for r in rows],
            context=context,
            context_positions=context_positions,
            query_positions=[p.long() for p in positions],
        )
        flat_ids = torch.cat([i.long() for i in ids]).tolist()
        return self._run(layout, flat_ids, torch.cat([p.long() for p in positions]))
