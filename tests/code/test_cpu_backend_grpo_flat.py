"""A GRPO batch in which every group scored alike carries no policy gradient, and makes no
update: no parameter gets a gradient, so AdamW's momentum cannot replay the previous step
(measured: 2 of the demo's 8 steps on the time pack were flat, and 24 of 32 groups)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from training.cpu_backend.grpo import SharedPrefixGRPOTrainer, is_flat


def test_a_batch_is_flat_only_when_every_advantage_is_zero() -> None:
    assert is_flat(torch.zeros(16))
    assert not is_flat(torch.tensor([0.0, 0.0, 0.5, -0.5]))
    assert not is_flat(torch.tensor([0.0, -1e-6]))


def test_a_flat_batch_gives_no_parameter_a_gradient() -> None:
    model = torch.nn.Linear(4, 4)
    trainer = SimpleNamespace(sft_replay=None)
    loss = SharedPrefixGRPOTrainer._compute_loss(  # type: ignore[arg-type]
        trainer, model, {"advantages": torch.zeros(8)}
    )
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert all(p.grad is None for p in model.parameters())


def test_a_flat_step_is_counted_once_whatever_its_micro_batches() -> None:
    """Counted on the step's whole generation: its micro-batches (`cpu.grpo_micro_batches`)
    each skip the policy loss, and the step counts once."""
    trainer = SimpleNamespace(flat_batches=0)
    count = SharedPrefixGRPOTrainer._count_if_flat
    count(trainer, torch.zeros(16))  # type: ignore[arg-type]
    count(trainer, torch.tensor([0.0, 0.5, -0.5, 0.0]))  # type: ignore[arg-type]
    assert trainer.flat_batches == 1
