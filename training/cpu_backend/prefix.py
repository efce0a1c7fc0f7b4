"""Shared-prefix loss: run the tool prompt once per batch instead of once per row.

Every training prompt starts with the same system message and the same eleven tool schemas,
about 2,000 of the 2,300 tokens of a row with the tiny model's vocabulary. On two CPU
cores the forward and backward passes cost about linearly in tokens, so a batch of eight
rows would spend most of its time on eight copies of the same prefix. Here the prefix runs
once (with gradients) and each row's own tokens run on top of its key/value cache. The loss
is the same token-mean cross-entropy over the labelled (assistant) tokens as a plain
forward gives, and so are the gradients, up to floating-point rounding
(`tests/code/test_cpu_backend_prefix.py`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional
from transformers import DynamicCache

IGNORE = -100
MIN_SHARED = 32
"""Below this many shared tokens a plain forward is as fast."""


def shared_prefix_length(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
) -> int:
    """Tokens every row starts with, stopping before the first labelled token of any row
    (the prefix pass computes no loss) and at any padding."""
    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    different = (~same).nonzero()
    length = int(different[0]) if len(different) else input_ids.shape[1]
    labelled = (labels != IGNORE).any(dim=0).nonzero()
    if len(labelled):
        # the token at position t is predicted from position t - 1: keep that in the suffix
        length = min(length, int(labelled[0]) - 1)
    return max(length, 0)


def causal_lm_loss(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    num_items: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Sum of next-token cross-entropy over labelled tokens, divided by `num_items`
    (default: the number of labelled tokens), with the shared prefix computed once and
    the output head applied to labelled positions only (tool responses, prompts and
    padding need no logits)."""
    denominator = num_items if num_items is not None else (labels[:, 1:] != IGNORE).sum()
    base, head = model.get_decoder(), model.get_output_embeddings()
    shared = shared_prefix_length(input_ids, attention_mask, labels)
    if shared < MIN_SHARED or input_ids.shape[0] == 1:
        hidden = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        states, targets = hidden.last_hidden_state[:, :-1], labels[:, 1:]
    else:
        # the prefix once (with gradients), then each row's own tokens on top of it, one
        # row at a time: no padding is computed and no attention mask is needed
        prefix = base(input_ids=input_ids[:1, :shared], use_cache=True).past_key_values
        cached = [(layer.keys, layer.values) for layer in prefix.layers]
        total = torch.zeros((), dtype=torch.float32)
        for row in range(input_ids.shape[0]):
            length = int(attention_mask[row].sum())
            targets = labels[row, shared + 1 : length]
            keep = targets != IGNORE
            if not bool(keep.any()):
                continue
            cache = DynamicCache()
            for index, (keys, values) in enumerate(cached):
                cache.update(keys, values, index)
            states = base(
                input_ids=input_ids[row : row + 1, shared:length],
                past_key_values=cache,
                use_cache=True,
            ).last_hidden_state[0, :-1]
            logits = head(states[keep])
            total = total + functional.cross_entropy(logits.float(), targets[keep], reduction="sum")
        return total / torch.as_tensor(denominator).clamp(min=1)
    keep = targets != IGNORE
    logits = head(states[keep])
    total = functional.cross_entropy(logits.float(), targets[keep], reduction="sum")
    return total / torch.as_tensor(denominator).clamp(min=1)


def completion_logps(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float = 1.0,
    compute_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of the last `logits_to_keep` tokens,
    as TRL's GRPO computes them, for left-padded prompts followed by completions.

    Each row's left padding is dropped (positions then match generation, which saw no
    padding), the prefix all rows share runs once, and the rest runs as one right-padded
    batch on top of the repeated cache. Logits are divided by `temperature` (TRL's rule).
    """
    rows, width = input_ids.shape
    completion = logits_to_keep
    prompt_width = width - completion
    starts = (attention_mask[:, :prompt_width] == 0).sum(dim=1)
    prompt_lengths = prompt_width - starts
    sequences = [input_ids[i, int(starts[i]) :] for i in range(rows)]
    shared = int(prompt_lengths.min()) - 1
    first = sequences[0][:shared]
    for sequence in sequences[1:]:
        same = (sequence[:shared] == first).int()
        shared = int(same.cumprod(0).sum()) if len(same) else 0
        first = first[:shared]
    shared = max(shared, 0)
    tails = [sequence[shared:] for sequence in sequences]
    tail_width = max(len(tail) for tail in tails)
    tail_ids = torch.zeros((rows, tail_width), dtype=input_ids.dtype)
    tail_mask = torch.zeros((rows, tail_width), dtype=attention_mask.dtype)
    for i, tail in enumerate(tails):
        tail_ids[i, : len(tail)] = tail
        tail_mask[i, : len(tail)] = attention_mask[i, int(starts[i]) + shared :]
    base, head = model.get_decoder(), model.get_output_embeddings()
    cache = None
    if shared:
        cache = base(
            input_ids=input_ids[:1, int(starts[0]) : int(starts[0]) + shared], use_cache=True
        ).past_key_values
        cache.batch_repeat_interleave(rows)
    mask = torch.cat([torch.ones((rows, shared), dtype=tail_mask.dtype), tail_mask], dim=1)
    hidden = base(
        input_ids=tail_ids, attention_mask=mask, past_key_values=cache, use_cache=shared > 0
    ).last_hidden_state
    # completion token j of row i sits at tail position (prompt_i - shared + j) and is
    # predicted from the position before it
    offsets = (prompt_lengths - shared - 1)[:, None] + torch.arange(completion)[None, :]
    states = hidden.gather(1, offsets[..., None].expand(-1, -1, hidden.shape[-1]))
    logits = head(states).float() / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    targets = input_ids[:, prompt_width:]
    token_logps = log_probs.gather(-1, targets[..., None]).squeeze(-1)
    entropy = None
    if compute_entropy:
        entropy = -(log_probs.exp() * log_probs).sum(-1)
    return token_logps, entropy
