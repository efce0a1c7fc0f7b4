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
(`decode_attention.py`); the attention itself is `packed_attention.py`. Positions
are explicit, so every row's numbers are those of a separate forward
(`tests/code/test_engine_packed.py`).

Training's frozen-context loss (`training/cpu_backend/packed_loss.py`) reads the cached
keys back (`row_keys`) and runs its gradient pass through `gradient_forward`, where each
row's trained positions attend to its frozen context and to each other, with gradients.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from serving.engine.packed_attention import use_packed_attention
from serving.engine.packed_layout import Layer, Layout

SHARED = -1
"""Row id of the shared prefix."""
_ONE = torch.ones((1, 1, 1, 1), dtype=torch.bool)
"""Stand-in 4D mask: transformers passes a 4D mask through untouched, and the packed
attention ignores it (visibility comes from the layout)."""


class _PackedCache(Cache):
    """The transformers `Cache` face of a `PackedKV`: stores new keys per row."""

    def __init__(self, store: PackedKV) -> None:
        super().__init__(layer_class_to_replicate=DynamicLayer)
        self.store = store
        self.layout: Layout | None = None

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
            layers.append(Layer())
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


class PackedKV:
    """The packed cache of one model; rows are small integers chosen by the caller."""

    def __init__(self, model: Any, max_query_tokens: int = 2048) -> None:
        use_packed_attention(model)
        self.base = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.max_query_tokens = max_query_tokens
        self.layers: list[Layer] = []
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
            layout = Layout(self.layers, "prefix", [SHARED], [len(tokens)], [0])
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
        layout = Layout(
            self.layers,
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

    def _run(self, layout: Layout, ids: list[int], positions: torch.Tensor) -> torch.Tensor:
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
        layout = Layout(
            self.layers,
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
