"""Continuous batching on the packed cache: the CPU generation engine.

Rows join as soon as a slot frees up and leave the moment they finish, so a batch never waits
for its slowest member; every step is one forward over each active row's newest token plus
the prompts of rows that just joined (`PackedKV.extend`). Training rollouts and the quick
eval call `generate` (a whole list of prompts, synchronously); the CPU model server feeds the
same `Engine` from HTTP requests (`serving/engine/server.py`).

Sampling follows `transformers.generate`'s order for the knobs GRPO uses: temperature, then
top-p (nucleus); temperature 0 is greedy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from serving.engine.packed import PackedKV


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    stop_ids: frozenset[int] = frozenset()
    seed: int | None = None


@dataclass
class Request:
    """One prompt in the engine. `on_token` sees each new token (streaming); `tokens` holds
    them all; `finish` is `stop` (a stop token, included) or `length`."""

    prompt: Sequence[int]
    sampling: Sampling
    on_token: Callable[[int], None] | None = None
    on_finish: Callable[[Request], None] | None = None
    tokens: list[int] = field(default_factory=list)
    finish: str | None = None
    error: str | None = None
    cancelled: bool = False
    generator: torch.Generator | None = None


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens all sequences start with, leaving at least one token of each to feed."""
    if not sequences:
        return 0
    first = sequences[0]
    length = min(len(s) for s in sequences)
    for other in sequences[1:]:
        i = 0
        while i < length and other[i] == first[i]:
            i += 1
        length = i
    return max(0, min(length, min(len(s) for s in sequences) - 1))


def pick(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None) -> int:
    """Next token from one row's logits."""
    if sampling.temperature <= 0:
        return int(logits.argmax(-1))
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        drop = sorted_probs.cumsum(-1) - sorted_probs > sampling.top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
    return int(torch.multinomial(probs, 1, generator=generator))


class Engine:
    """Continuous batching for one model; not thread-safe (one thread drives `step`)."""

    def __init__(self, model: Any, max_rows: int = 16, max_query_tokens: int = 2048) -> None:
        self.model = model
        self.max_rows = max_rows
        self.max_query_tokens = max_query_tokens
        self.kv = PackedKV(model, max_query_tokens)
        self.pending: deque[Request] = deque()
        self.active: dict[int, Request] = {}
        self._next_row = 0
        self.steps = 0
        self.generated = 0

    @property
    def idle(self) -> bool:
        return not self.pending and not self.active

    def set_prefix(self, tokens: Sequence[int]) -> None:
        """(Re)start the packed cache on a new shared prefix; only while idle."""
        if not self.idle:
            raise RuntimeError("the prefix can change only while no request is in flight")
        self.kv = PackedKV(self.model, self.max_query_tokens)
        self.kv.set_prefix(tokens)

    def reset(self) -> None:
        """Drop every request and the cache (after a failed step)."""
        self.pending.clear()
        self.active.clear()
        self.kv = PackedKV(self.model, self.max_query_tokens)

    def submit(self, request: Request) -> Request:
        if not request.prompt:
            raise ValueError("empty prompt")
        if request.sampling.seed is not None and request.generator is None:
            request.generator = torch.Generator().manual_seed(request.sampling.seed)
        self.pending.append(request)
        return request

    def _shared_with_prefix(self, prompt: Sequence[int]) -> int:
        prefix = self.kv.prefix_tokens
        limit = min(len(prefix), len(prompt) - 1)
        i = 0
        while i < limit and prompt[i] == prefix[i]:
            i += 1
        return i

    @torch.no_grad()
    def step(self) -> None:
        """Admit pending requests into free slots, then one forward: the newest token of
        every active row and the prompts of the rows just admitted."""
        for row, request in list(self.active.items()):
            if request.cancelled:
                request.finish = request.finish or "cancelled"
                self._retire(row)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        rows: list[int] = []
        pieces: list[list[int]] = []
        for row, request in self.active.items():
            rows.append(row)
            pieces.append([request.tokens[-1]])
        while self.pending and len(self.active) < self.max_rows:
            request = self.pending.popleft()
            if request.cancelled:
                request.finish = "cancelled"
                continue
            if limit and len(request.prompt) + request.sampling.max_new_tokens > limit:
                request.finish = "error"
                request.error = (
                    f"prompt ({len(request.prompt)} tokens) + max_tokens "
                    f"({request.sampling.max_new_tokens}) exceed the model's {limit}-token context"
                )
                continue
            row = self._next_row
            self._next_row += 1
            shared = self._shared_with_prefix(request.prompt)
            self.kv.start_row(row, shared)
            self.active[row] = request
            rows.append(row)
            pieces.append(list(request.prompt[shared:]))
        if not rows:
            return
        hidden = self.kv.extend(rows, pieces)
        logits = self.kv.logits(torch.cat(hidden))
        self.steps += 1
        for index, row in enumerate(rows):
            request = self.active[row]
            token = pick(logits[index], request.sampling, request.generator)
            request.tokens.append(token)
            self.generated += 1
            if request.on_token is not None:
                request.on_token(token)
            if token in request.sampling.stop_ids:
                request.finish = "stop"
            elif len(request.tokens) >= request.sampling.max_new_tokens:
                request.finish = "length"
            if request.finish:
                self._retire(row)

    def _retire(self, row: int) -> None:
        self.active.pop(row, None)
        self.kv.drop_rows([row])

    def run_until_done(self) -> None:
        while not self.idle:
            self.step()


def generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop_ids: set[int] | frozenset[int],
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_rows: int = 16,
    seed: int | None = None,
) -> list[list[int]]:
    """Continuations of token prompts, each ending at its first stop token (included) or
    after `max_new_tokens` tokens. Order follows `prompts`; the prefix all prompts share is
    computed once."""
    if not prompts:
        return []
    was_training = model.training
    model.eval()
    try:
        engine = Engine(model, max_rows=max_rows)
        engine.set_prefix(list(prompts[0][: common_prefix_length(prompts)]))
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        sampling = Sampling(max_new_tokens, temperature, top_p, frozenset(stop_ids))
        requests = [engine.submit(Request(list(p), sampling, generator=generator)) for p in prompts]
        engine.run_until_done()
    finally:
        model.train(was_training)
    return [request.tokens for request in requests]
