"""SFT replay during GRPO (InstructGPT's PPO-ptx): the SFT loss on the SFT start's own
examples, added to every GRPO step's loss.

Why: RL only moves what its step's prompts ask about, and a 135M policy does not keep the
decisions apart. Measured on SmolLM2-135M (docs/parts/cpu_backend.md): GRPO that taught
single questions to answer once a tool had answered took multi-step exact calls from 44% to
0%, with no multi-step prompt in any batch; with multi-step prompts in the batch they still
collapsed, because at sampling temperature a second call is more often wrong than right, so
stopping early scores better. Replaying the examples SFT learned from pulls back whatever
drifts away from them and costs about one SFT step per GRPO step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.cpu_backend.packed_loss import CallBoundary, frozen_context_sft_loss
from training.cpu_backend.prefix import causal_lm_loss
from training.cpu_backend.sft import ToolSchema, call_boundary, sft_examples
from training.spec.model import TrainingSpec

Example = dict[str, list[int]]


def collate(examples: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded `input_ids`, `attention_mask` and `labels` (-100 on padding): TRL's SFT
    collator, the one the SFT trainer batched these examples with."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    batch: dict[str, torch.Tensor] = DataCollatorForLanguageModeling(pad_token_id=pad_id)(
        list(examples)
    )
    return batch


@dataclass(frozen=True)
class SftReplay:
    """The SFT batches to replay, in SFT's order, and how the loss on them is taken."""

    batches: tuple[tuple[Example, ...], ...]
    coef: float
    pad_id: int
    frozen_context: bool = True
    question_gradient: bool = False
    boundary: CallBoundary | None = None
    turn_start_weight: float = 1.0
    """How much each assistant turn's first token (call or answer?) counts in the replay."""

    def __post_init__(self) -> None:
        if not self.batches or not all(self.batches):
            raise ValueError("SFT replay needs at least one non-empty batch")

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """GRPO step `step`'s batch: SFT's batch `step`, cycling (resume takes the same one)."""
        return collate(self.batches[step % len(self.batches)], self.pad_id)

    def loss(self, model: Any, step: int) -> torch.Tensor:
        """`coef` x the SFT loss of step `step`'s batch, taken as SFT took it."""
        inputs = self.batch(step)
        args = (model, inputs["input_ids"], inputs["attention_mask"], inputs["labels"])
        if self.frozen_context:
            loss = frozen_context_sft_loss(
                *args,
                question_gradient=self.question_gradient,
                boundary=self.boundary,
                turn_start_weight=self.turn_start_weight,
            )
        else:
            loss = causal_lm_loss(*args)
        return self.coef * loss


def sft_replay(
    spec: TrainingSpec, train_file: Path, model_dir: Path, schemas: list[ToolSchema]
) -> SftReplay | None:
    """The spec's replay (`cpu.grpo_sft_replay_coef`; None when 0): the examples of the
    spec's SFT (`cpu.sft_steps` batches; a run continuing from the champion, which has no
    SFT of its own here, takes `cpu.grpo_steps` batches of the same kind)."""
    from transformers import AutoTokenizer

    cpu = spec.cpu
    if cpu.grpo_sft_replay_coef == 0:
        return None
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    steps = cpu.sft_steps or cpu.grpo_steps
    examples, _ = sft_examples(spec, train_file, tokenizer, schemas, steps)
    if not examples:
        raise ValueError(
            f"cpu.grpo_sft_replay_coef: every SFT row is longer than cpu.sft_max_length="
            f"{cpu.sft_max_length}"
        )
    size = cpu.sft_batch_size
    batches = tuple(tuple(examples[i : i + size]) for i in range(0, len(examples), size))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return SftReplay(
        batches,
        cpu.grpo_sft_replay_coef,
        int(pad),
        cpu.frozen_context,
        cpu.sft_question_gradient,
        call_boundary(spec, tokenizer, cpu.grpo_sft_replay_boundary_weight),
        cpu.grpo_sft_replay_turn_weight,
    )
