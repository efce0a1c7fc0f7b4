"""Every row's keys (or values) of one layer in one tensor, a slot per row.

The engine decodes up to `max_rows` rows at once, one new token each per step. With a
separate buffer per row, attention over the rows' own tokens is a loop of small calls per
row and layer (16 rows x 30 layers x ~8 ops a step); the Python and dispatch overhead of
those calls, not their arithmetic, set the decode step time. Kept in one
`[slots, kv_heads, capacity, head_dim]` tensor, the decode rows' keys are one gather and
their attention one batched matmul (`decode_attention.py`).

Slots are reused as rows finish; the tensor grows (doubling) in rows or in length when a
row needs more, which happens a few times per run. It is zero-filled, never left
uninitialised: a batched decode reads past a short row's length (masked to weight 0), and
0 x NaN from stale memory would be NaN.
"""

from __future__ import annotations

import torch

_FIRST_CAPACITY = 64
"""Tokens per slot at first: a decode step of a fresh row needs a handful."""


def _grown(size: int, needed: int) -> int:
    """A dimension's new size: unchanged when it fits, else doubled (or what is needed)."""
    return size if needed <= size else max(needed, 2 * size)


class RowStore:
    """Keys or values of every row of one layer: `data[slot, :, :length, :]`."""

    def __init__(self) -> None:
        self.data: torch.Tensor | None = None

    def _reserve(self, like: torch.Tensor, slots: int, length: int) -> torch.Tensor:
        """The storage, grown to hold `slots` slots of at least `length` tokens each.
        `like`: [kv_heads, tokens, head_dim] states of the layer (dtype and shape)."""
        data = self.data
        if data is None:
            data = like.new_zeros(
                (max(slots, 1), like.shape[0], max(length, _FIRST_CAPACITY), like.shape[-1])
            )
        elif slots > data.shape[0] or length > data.shape[2]:
            grown = data.new_zeros(
                (
                    _grown(data.shape[0], slots),
                    data.shape[1],
                    _grown(data.shape[2], length),
                    data.shape[3],
                )
            )
            grown[: data.shape[0], :, : data.shape[2]] = data
            data = grown
        self.data = data
        return data

    def write(self, slot: int, start: int, states: torch.Tensor) -> None:
        """Put `states` [kv_heads, tokens, head_dim] at positions `start...` of `slot`."""
        data = self._reserve(states, slot + 1, start + states.shape[1])
        data[slot, :, start : start + states.shape[1]] = states

    def write_one_each(
        self, slots: torch.Tensor, starts: torch.Tensor, states: torch.Tensor
    ) -> None:
        """One token per slot at once (a decode step): `states` [kv_heads, rows, head_dim],
        row i's token at position `starts[i]` of slot `slots[i]`."""
        data = self._reserve(states, int(slots.max()) + 1, int(starts.max()) + 1)
        data[slots, :, starts] = states.transpose(0, 1)

    def view(self, slot: int, length: int) -> torch.Tensor:
        """The first `length` states of one slot, [1, kv_heads, length, head_dim] (no copy)."""
        if self.data is None:
            raise RuntimeError("nothing stored yet")
        return self.data[slot : slot + 1, :, :length]

    def gather(self, slots: torch.Tensor, length: int) -> torch.Tensor:
        """The first `length` positions of several slots, [rows, kv_heads, length, head_dim]."""
        if self.data is None:
            raise RuntimeError("nothing stored yet")
        return self.data[:, :, :length].index_select(0, slots)
