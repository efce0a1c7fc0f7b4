"""What one packed forward holds, shared by the cache (`packed.py`) and the attention
(`packed_attention.py`): each layer's stored keys, and the rows of the forward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from serving.engine.row_store import RowStore


@dataclass
class Layer:
    prefix_keys: torch.Tensor | None = None
    prefix_values: torch.Tensor | None = None
    keys: RowStore = field(default_factory=RowStore)
    values: RowStore = field(default_factory=RowStore)


@dataclass
class Layout:
    """What one packed forward holds: consecutive query groups, one per row."""

    layers: list[Layer]
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
