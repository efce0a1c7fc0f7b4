"""Loss and log-probabilities with a frozen context: gradients flow through the model's own
tokens only, and the whole batch runs as two packed forwards.

For a pretrained model the expensive tokens of a training row are not the ones it learns
from. A row is ~800 tokens of shared tool prompt, a question, and tool responses (a
knowledge-search result alone is ~400 tokens), around 60 assistant tokens. Here:

1. **Context, no gradient.** Every token of every row runs once without gradient in one
   packed cache (`serving.engine.packed.PackedKV`: the shared prefix stored once, each row
   masked to see only itself). That gives the keys and values of all context tokens and,
   for no-gradient calls (old policy, reference model), every log-probability directly.
2. **Model tokens, with gradient.** The positions that predict a trained token (assistant
   turns in SFT, model-generated completion tokens in GRPO) run again, all rows packed into
   one forward, attending to the frozen context keys plus each other (same row, earlier
   position). Gradients reach every weight through these tokens, and between turns of one
   row, but not through the context's own hidden states.

The forward values are those of a plain forward (the loss and log-probabilities match it,
`tests/code/test_cpu_backend_packed_loss.py`); the gradient leaves out the path through
context tokens, the approximation prefix tuning and frozen-prompt training also make. For a
model trained from scratch that path is how attention learns to read the prompt, so the
tiny model keeps `prefix.causal_lm_loss` (`cpu.frozen_context: false`).

Why two passes instead of one forward with gradient over the whole row: on 2 cores a row's
backward costs about twice its forward per token, and ~90% of its tokens are context.
Why everything packed: each separate forward with gradient materialises a full weight
gradient (135M values) however few tokens it has, ~0.1 s on 2 cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from serving.engine.packed import PackedKV

IGNORE = -100
LOGIT_CHUNK = 1024
"""Positions per output-head chunk: full-vocabulary logits for 2,400 GRPO positions are ~0.5 GB
in fp32, so they are computed (and recomputed in backward) a chunk at a time."""


@dataclass(frozen=True)
class TrainedPositions:
    """Per row, the positions whose next token is trained (absolute, prefix included)."""

    sequences: list[list[int]]
    positions: list[torch.Tensor]
    open_positions: list[torch.Tensor] | None = None
    """Per row, context positions that also run with gradient but carry no loss: the
    user's question (`question_positions`), so training can change how it is read."""

    def gradient_positions(self, row: int) -> torch.Tensor:
        """Sorted positions of `row` that run in the gradient pass."""
        if self.open_positions is None:
            return self.positions[row]
        merged: torch.Tensor = torch.unique(
            torch.cat([self.positions[row], self.open_positions[row]])
        )
        return merged


def _token_logps(
    head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, targets[:, None]).squeeze(-1)
    if not entropy:
        return picked, picked.new_zeros(picked.shape)
    return picked, -(log_probs.exp() * log_probs).sum(-1)


def chunked_token_logps(
    head: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) at each position (and the entropy, zeros unless asked), a chunk of
    positions at a time."""
    picked, entropies = [], []
    for start in range(0, hidden.shape[0], LOGIT_CHUNK):
        part = slice(start, start + LOGIT_CHUNK)
        if torch.is_grad_enabled() and hidden.requires_grad and hidden.shape[0] > LOGIT_CHUNK:
            values = checkpoint(
                _token_logps,
                head,
                hidden[part],
                targets[part],
                temperature,
                entropy,
                use_reentrant=False,
            )
        else:
            values = _token_logps(head, hidden[part], targets[part], temperature, entropy)
        picked.append(values[0])
        entropies.append(values[1])
    if not picked:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(picked), torch.cat(entropies)


def _shared_prefix(sequences: Sequence[Sequence[int]], limit: int) -> int:
    first = sequences[0]
    length = min(limit, *(len(s) for s in sequences))
    for other in sequences[1:]:
        i = 0
        while i < length and other[i] == first[i]:
            i += 1
        length = i
    return max(length, 0)


def context_pass(model: Any, trained: TrainedPositions) -> tuple[PackedKV, list[torch.Tensor]]:
    """Step 1: every token once, no gradient. Returns the packed cache and, per row, the
    hidden states of its positions after the shared prefix."""
    first_trained = min(
        (
            int(p.min())
            for p in map(trained.gradient_positions, range(len(trained.sequences)))
            if p.numel()
        ),
        default=len(trained.sequences[0]),
    )
    shared = _shared_prefix(trained.sequences, first_trained)
    kv = PackedKV(model)
    with torch.no_grad():
        kv.set_prefix(trained.sequences[0][:shared])
        rows = list(range(len(trained.sequences)))
        for row in rows:
            kv.start_row(row)
        hidden = kv.extend(rows, [s[shared:] for s in trained.sequences], last_only=False)
    return kv, hidden


def trained_hidden(model: Any, trained: TrainedPositions) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states at every trained position of every row (row order, then position), and
    the token each one predicts. With gradient enabled, step 2 runs for them; without, they
    come straight from step 1."""
    kv, hidden = context_pass(model, trained)
    shared = kv.prefix_length
    targets = torch.cat(
        [
            torch.tensor(seq, dtype=torch.long)[pos + 1]
            for seq, pos in zip(trained.sequences, trained.positions, strict=True)
        ]
    )
    if not torch.is_grad_enabled():
        states = torch.cat(
            [h[pos - shared] for h, pos in zip(hidden, trained.positions, strict=True)]
        )
        return states, targets
    return _gradient_pass(kv, trained), targets


def _gradient_pass(kv: PackedKV, trained: TrainedPositions) -> torch.Tensor:
    """Step 2: the trained positions of all rows in one forward with gradient, on top of the
    frozen keys/values of everything else; open positions (the question) run in the same
    forward, so the trained ones attend to their differentiable keys and values, and only
    the trained positions' hidden states come back."""
    rows = [r for r, p in enumerate(trained.positions) if p.numel()]
    running = [trained.gradient_positions(r) for r in rows]
    ids = [
        torch.tensor(trained.sequences[r], dtype=torch.long)[p]
        for r, p in zip(rows, running, strict=True)
    ]
    hidden = kv.gradient_forward(rows, running, ids)
    if trained.open_positions is None:
        return hidden
    offsets = torch.tensor([0, *(int(p.numel()) for p in running)]).cumsum(0)[:-1]
    picked = torch.cat(
        [
            offset + torch.searchsorted(run, trained.positions[r])
            for offset, run, r in zip(offsets.tolist(), running, rows, strict=True)
        ]
    )
    return hidden[picked]


def sft_positions(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    question_gradient: bool = False,
) -> TrainedPositions:
    """SFT: position t is trained when label t+1 is (an assistant token). With
    `question_gradient`, each row's question also runs with gradient (`question_positions`)."""
    sequences, positions = [], []
    for row in range(input_ids.shape[0]):
        length = int(attention_mask[row].sum())
        sequences.append(input_ids[row, :length].tolist())
        labelled = (labels[row, 1:length] != IGNORE).nonzero().squeeze(-1)
        positions.append(labelled)
    if not question_gradient:
        return TrainedPositions(sequences, positions)
    return TrainedPositions(sequences, positions, question_positions(sequences, positions))


def question_positions(
    sequences: Sequence[Sequence[int]], positions: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Per row, the tokens after the batch's shared prefix (system prompt and tool schemas)
    and before the row's first trained position: the user's turn.

    Why these and no more: with the whole context frozen, training cannot change how the
    question's own tokens are represented, only how the answer attends to them. A model
    that must learn to read something its pretraining never saw (Chinese city names for a
    135M English model: 4% exact calls with the context frozen) needs the gradient there.
    The question is ~30 tokens of a ~900-token row, so the saving of the frozen context
    (tool schemas, tool responses) stays. Rows whose question is shared by the whole batch
    (one row, a GRPO group) have none."""
    if not sequences:
        return []
    first = [
        int(p.min()) if p.numel() else len(s) for s, p in zip(sequences, positions, strict=True)
    ]
    shared = _shared_prefix(sequences, min(first))
    return [torch.arange(shared, end, dtype=torch.long) for end in first]


@dataclass(frozen=True)
class CallBoundary:
    """Where a call turn decides how to go on, and how much that choice weighs in the loss.

    After each `</tool_call>` the model picks between another call in the same turn (a
    parallel call) and ending the turn. That is one token in ~60 of a row, and in the time
    pack 6 of 7 such choices end the turn, so a plain mean loss lets a 135M model learn the
    majority and not the question that decides it: teacher-forced after SFT, the chance of a
    second call is about the same on parallel rows as on single ones, train rows included
    (`benchmarks/diag_parallel_choice.py`; figures in docs/parts/cpu_backend.md)."""

    token_id: int
    weight: float


def boundary_weights(trained: TrainedPositions, boundary: CallBoundary) -> torch.Tensor:
    """Per trained position (row order, then position, as `trained_hidden` returns them):
    `boundary.weight` where the position's own token is the call's closing tag, else 1."""
    weights = [
        torch.where(
            torch.tensor(sequence, dtype=torch.long)[positions] == boundary.token_id,
            boundary.weight,
            1.0,
        )
        for sequence, positions in zip(trained.sequences, trained.positions, strict=True)
    ]
    return torch.cat(weights).to(torch.float32) if weights else torch.zeros(0)


def turn_start_weights(trained: TrainedPositions, weight: float) -> torch.Tensor:
    """Per trained position (the order `trained_hidden` returns them): `weight` where a run
    of labelled tokens begins, the first token of an assistant turn, else 1.

    That token is where a turn decides between calling a tool and answering: after a tool
    result, whether a chain goes on. One token of a turn's ~30, so a mean loss barely holds
    it, and GRPO, which moves whole sequences, moves it first (`replay.py`)."""
    weights = []
    for positions in trained.positions:
        starts = torch.ones(positions.numel(), dtype=torch.bool)
        starts[1:] = positions[1:] - positions[:-1] != 1
        weights.append(torch.where(starts, weight, 1.0))
    return torch.cat(weights).to(torch.float32) if weights else torch.zeros(0)


def frozen_context_sft_loss(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    num_items: int | torch.Tensor | None = None,
    question_gradient: bool = False,
    boundary: CallBoundary | None = None,
    turn_start_weight: float = 1.0,
) -> torch.Tensor:
    """Sum of next-token cross-entropy over labelled tokens / `num_items` (default: their
    count), with the context frozen (module docstring), the question too unless
    `question_gradient`. With `boundary`, the token after each call's closing tag counts
    `boundary.weight` times, and each assistant turn's first token `turn_start_weight` times
    (`turn_start_weights`; the denominator stays the token count, so the other tokens'
    gradients are what they were)."""
    trained = sft_positions(input_ids, attention_mask, labels, question_gradient)
    count = sum(int(p.numel()) for p in trained.positions)
    denominator = torch.as_tensor(num_items if num_items is not None else count).clamp(min=1)
    if count == 0:
        weight: torch.Tensor = model.get_output_embeddings().weight
        return weight.sum() * 0.0
    hidden, targets = trained_hidden(model, trained)
    logps, _ = chunked_token_logps(model.get_output_embeddings(), hidden, targets)
    if boundary is not None and boundary.weight != 1.0:
        logps = logps * boundary_weights(trained, boundary)
    if turn_start_weight != 1.0:
        logps = logps * turn_start_weights(trained, turn_start_weight)
    return -logps.sum() / denominator


def frozen_context_completion_logps(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float = 1.0,
    compute_entropy: bool = False,
    trained_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """GRPO's per-token log-probabilities of the last `logits_to_keep` columns (left-padded
    prompts, right-padded completions, as TRL lays them out).

    With gradient, only completion tokens where `trained_mask` is 1 (TRL's `tool_mask`: the
    model's own tokens, not injected tool responses) are recomputed with gradient; the rest
    read 0 and are masked out of the loss by the caller. Without gradient every valid
    completion token gets its value."""
    rows, width = input_ids.shape
    prompt_width = width - logits_to_keep
    completion_mask = attention_mask[:, prompt_width:].bool()
    wanted = completion_mask.clone()
    if torch.is_grad_enabled() and trained_mask is not None:
        wanted &= trained_mask.bool()
    sequences, positions = [], []
    for row in range(rows):
        start = int((attention_mask[row, :prompt_width] == 0).sum())
        end = prompt_width + int(completion_mask[row].sum())
        sequences.append(input_ids[row, start:end].tolist())
        prompt_length = prompt_width - start
        columns = wanted[row].nonzero().squeeze(-1)
        positions.append(prompt_length - 1 + columns)
    trained = TrainedPositions(sequences, positions)
    hidden, targets = trained_hidden(model, trained)
    logps, entropy = chunked_token_logps(
        model.get_output_embeddings(), hidden, targets, temperature, compute_entropy
    )
    row_index = torch.cat(
        [torch.full((p.numel(),), r, dtype=torch.long) for r, p in enumerate(positions)]
    )
    column = torch.cat([wanted[r].nonzero().squeeze(-1) for r in range(rows)])
    out = torch.zeros((rows, logits_to_keep), dtype=logps.dtype)
    out = out.index_put((row_index, column), logps)
    entropies = None
    if compute_entropy:
        entropies = torch.zeros((rows, logits_to_keep), dtype=torch.float32)
        entropies = entropies.index_put((row_index, column), entropy.detach())
    return out, entropies
