"""A GRPO update cut into token-bounded row chunks (`cpu.grpo_update_tokens`) gives the
gradient and the logged loss of the uncut update: checked on TRL's own loss through the
project's trainer (the tiny model, the frozen-context path the demo uses), for each loss
aggregation the spec can map to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from training.cpu_backend.grpo import LOSS_TYPES, SharedPrefixGRPOTrainer, grpo_arguments
from training.cpu_backend.update_chunks import (
    chunk_weight,
    row_chunks,
    select_rows,
    trained_tokens,
)
from training.spec.model import TrainingSpec, load_spec

SPEC_FILE = Path(__file__).resolve().parents[2] / "training" / "specs" / "cpu_tiny.yaml"


def test_rows_are_grouped_in_order_within_the_budget() -> None:
    chunks = row_chunks([3, 4, 2, 6, 1, 1], budget=7)
    assert chunks == [slice(0, 2), slice(2, 3), slice(3, 5), slice(5, 6)]
    covered = [row for part in chunks for row in range(6)[part]]
    assert covered == list(range(6))  # every row once, in order


def test_a_row_over_the_budget_goes_alone_and_no_budget_means_one_chunk() -> None:
    assert row_chunks([2, 50, 2], budget=10) == [slice(0, 1), slice(1, 2), slice(2, 3)]
    assert row_chunks([2, 50, 2], budget=None) == [slice(0, 3)]
    assert row_chunks([], budget=10) == []
    assert row_chunks([0, 0, 0], budget=1) == [slice(0, 3)]  # empty rows cost nothing


def test_a_budget_below_one_token_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        row_chunks([1, 2], budget=0)


def test_chunk_weights_follow_trls_normalisation() -> None:
    assert chunk_weight("grpo", slice(0, 3), 8) == pytest.approx(3 / 8)
    assert chunk_weight("dr_grpo", slice(3, 8), 8) == pytest.approx(5 / 8)
    assert chunk_weight("dapo", slice(3, 8), 8) == 1.0
    with pytest.raises(ValueError, match="cannot be split"):
        chunk_weight("bnpo", slice(0, 1), 8)


def test_every_loss_the_spec_maps_to_can_be_chunked() -> None:
    for loss_type in set(LOSS_TYPES.values()):
        chunk_weight(loss_type, slice(0, 1), 2)


def test_select_rows_slices_row_tensors_and_keeps_step_wide_counts() -> None:
    inputs = {
        "advantages": torch.arange(4.0),
        "completion_mask": torch.ones(4, 3),
        "num_items_in_batch": torch.tensor(12),
        "old_per_token_logps": None,
    }
    part = select_rows(inputs, slice(1, 3), 4)
    assert part["advantages"].tolist() == [1.0, 2.0]
    assert part["completion_mask"].shape == (2, 3)
    assert int(part["num_items_in_batch"]) == 12
    assert part["old_per_token_logps"] is None


def test_trained_tokens_leave_out_the_tool_responses() -> None:
    completion = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    tool = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]])
    assert trained_tokens({"completion_mask": completion}) == [3, 4]
    assert trained_tokens({"completion_mask": completion, "tool_mask": tool}) == [2, 4]


def test_the_spec_bounds_the_budget_and_refuses_it_with_an_entropy_bonus() -> None:
    spec = load_spec(SPEC_FILE)
    data = spec.model_dump(mode="json")
    data["cpu"]["grpo_update_tokens"] = 16
    with pytest.raises(ValueError, match="greater than or equal to 64"):
        TrainingSpec.model_validate(data)
    data["cpu"]["grpo_update_tokens"] = 1024
    assert TrainingSpec.model_validate(data).cpu.grpo_update_tokens == 1024
    data["algorithm"]["entropy_coeff"] = 0.01
    with pytest.raises(ValueError, match="entropy"):
        TrainingSpec.model_validate(data)


def _trainer(model_dir: Path, out: Path, loss_agg_mode: str) -> SharedPrefixGRPOTrainer:
    """The project's GRPO trainer on the tiny model with the tiny spec's TRL arguments (no
    training run: only its loss is called)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl.trainer.grpo_config import GRPOConfig

    spec = load_spec(SPEC_FILE)
    data = spec.model_dump(mode="json")
    data["algorithm"]["loss_agg_mode"] = loss_agg_mode
    data["cpu"]["dtype"] = "float32"
    spec = TrainingSpec.model_validate(data)
    arguments = grpo_arguments(spec, out)
    arguments["model_init_kwargs"] = {"dtype": torch.float32}
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def no_reward(completions: list[Any], **_: Any) -> list[float]:
        return [0.0] * len(completions)

    trainer = SharedPrefixGRPOTrainer(
        model=str(model_dir),
        reward_funcs=[no_reward],
        args=GRPOConfig(**arguments),
        train_dataset=Dataset.from_list([{"prompt": "hello"}] * 16),
        processing_class=tokenizer,
    )
    trainer.frozen_context = True
    return trainer


def _update_inputs(vocab: int, rows: int = 16) -> dict[str, torch.Tensor]:
    """A micro-batch as TRL hands it to the loss: left-padded prompts sharing a prefix,
    right-padded completions of different lengths with tool-response spans masked out."""
    generator = torch.Generator().manual_seed(0)
    prompt_width, completion_width = 12, 20
    prompt = torch.randint(5, vocab, (rows, prompt_width), generator=generator)
    prompt[:, :4] = prompt[0, :4]
    prompt_mask = torch.ones(rows, prompt_width, dtype=torch.long)
    prompt_mask[::3, 0] = 0  # some rows start one token later
    completion = torch.randint(5, vocab, (rows, completion_width), generator=generator)
    lengths = torch.randint(4, completion_width + 1, (rows,), generator=generator)
    completion_mask = (torch.arange(completion_width)[None, :] < lengths[:, None]).long()
    tool_mask = torch.ones(rows, completion_width, dtype=torch.long)
    tool_mask[1::2, 2:5] = 0  # a tool response inside every other rollout
    advantages = torch.randn(rows, generator=generator)
    return {
        "prompt_ids": prompt,
        "prompt_mask": prompt_mask,
        "completion_ids": completion,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": advantages,
        "ref_per_token_logps": -torch.rand(rows, completion_width, generator=generator) * 5,
        "num_items_in_batch": (completion_mask * tool_mask).sum(),
    }


def _loss_and_gradient(
    trainer: SharedPrefixGRPOTrainer, inputs: dict[str, torch.Tensor], budget: int | None
) -> tuple[float, list[torch.Tensor]]:
    model = trainer.model
    assert model is not None
    model.zero_grad(set_to_none=True)
    trainer.update_tokens = budget
    loss = trainer._compute_loss(model, inputs)
    loss.backward()  # what the trainer does with the returned loss (TRL scaled it already)
    return float(loss.detach()), [
        p.grad.detach().clone() for p in model.parameters() if p.grad is not None
    ]


@pytest.mark.parametrize(
    "loss_agg_mode", ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum"]
)
def test_chunked_update_has_the_uncut_gradient_and_loss(
    tiny_model_dir: Path, tmp_path: Path, loss_agg_mode: str
) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path, loss_agg_mode)
    assert trainer.model is not None
    inputs = _update_inputs(int(trainer.model.config.vocab_size))
    assert len(row_chunks(trained_tokens(inputs), 40)) >= 4  # the budget really cuts
    whole_loss, whole = _loss_and_gradient(trainer, inputs, None)
    chunked_loss, chunked = _loss_and_gradient(trainer, inputs, 40)
    assert chunked_loss == pytest.approx(whole_loss, rel=1e-5, abs=1e-7)
    assert len(chunked) == len(whole) > 0
    for cut, uncut in zip(chunked, whole, strict=True):
        torch.testing.assert_close(cut, uncut, rtol=1e-4, atol=1e-6)
    assert any(float(g.abs().max()) > 0 for g in whole)  # a real gradient was compared
