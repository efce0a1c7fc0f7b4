"""Generation with a shared prompt prefix, for rollouts and the quick eval on CPU.

Every prompt starts with the same ~2,000-token tool prompt. `generate` prefills the prefix
the prompts share once, then decodes each group of identical prompts (a GRPO group: the
`rollout.n` samples of one prompt) as one batch from a copy of that cache. Rows of a batch
have the same length, so decoding needs no attention mask: on CPU the masked attention path
(with grouped-query key/value copies) costs several times more per token than the unmasked
one, and a padded batch of different prompts would need the mask.

Sampling follows `transformers.generate`'s order for the knobs GRPO uses: temperature, then
top-p (nucleus); temperature 0 is greedy.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens all sequences start with, leaving at least one token of each to feed."""
    first = sequences[0]
    length = min(len(s) for s in sequences)
    for other in sequences[1:]:
        i = 0
        while i < length and other[i] == first[i]:
            i += 1
        length = i
    return max(0, min(length, min(len(s) for s in sequences) - 1))


def _pick(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(-1)
        drop = cumulative - sorted_probs > top_p  # keep the smallest set reaching top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1).squeeze(-1)


@torch.no_grad()
def generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop_ids: set[int],
    temperature: float = 0.0,
    top_p: float = 1.0,
) -> list[list[int]]:
    """Continuations of token prompts, each ending at its first stop token (included) or
    after `max_new_tokens` tokens. Order follows `prompts`."""
    if not prompts:
        return []
    shared = common_prefix_length(prompts)
    prefix_cache = None
    if shared:
        prefix_cache = model(
            input_ids=torch.tensor([list(prompts[0][:shared])]), use_cache=True
        ).past_key_values
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, prompt in enumerate(prompts):
        groups.setdefault(tuple(prompt[shared:]), []).append(index)
    outputs: list[list[int]] = [[] for _ in prompts]
    stops = torch.tensor(sorted(stop_ids))
    for tail, members in groups.items():
        size = len(members)
        cache = None
        if prefix_cache is not None:
            cache = copy.deepcopy(prefix_cache)
            if size > 1:
                cache.batch_repeat_interleave(size)
        out = model(
            input_ids=torch.tensor([list(tail)] * size), past_key_values=cache, use_cache=True
        )
        finished = torch.zeros(size, dtype=torch.bool)
        for _ in range(max_new_tokens):
            token = _pick(out.logits[:, -1], temperature, top_p)
            for row, index in enumerate(members):
                if not finished[row]:
                    outputs[index].append(int(token[row]))
            finished |= torch.isin(token, stops)
            if bool(finished.all()):
                break
            out = model(
                input_ids=token[:, None], past_key_values=out.past_key_values, use_cache=True
            )
    return outputs
