"""GRPO's SFT replay (`cpu.grpo_sft_replay_coef`, `training/cpu_backend/replay.py`): the
replayed batches are the SFT start's own examples in SFT's order, the term is the SFT loss
times the coefficient with a gradient, and a GRPO step adds it (a flat step too)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from serving.tools import get_catalog
from testkit.pipeline_specs import tiny_cpu_spec
from training.cpu_backend.grpo import SharedPrefixGRPOTrainer
from training.cpu_backend.packed_loss import frozen_context_sft_loss
from training.cpu_backend.replay import SftReplay, collate, sft_replay
from training.cpu_backend.sft import sft_examples
from training.spec.model import CpuSection, TrainingSpec


def spec(**cpu: Any) -> TrainingSpec:
    return tiny_cpu_spec(
        "replay",
        {"sft_steps": 3, "sft_batch_size": 4, "grpo_steps": 2, "frozen_context": True, **cpu},
    )


def schemas() -> list[dict[str, Any]]:
    return list(get_catalog().openai_schemas())


def replay_of(data: Path, model_dir: Path, **cpu: Any) -> SftReplay:
    """The replay a spec with these `cpu` fields builds on the built-in data."""
    replay = sft_replay(spec(**cpu), data / "train.parquet", model_dir, schemas())
    assert replay is not None
    return replay


def test_collate_pads_right_and_keeps_padding_out_of_the_loss() -> None:
    batch = collate(
        [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [8], "labels": [8]}],
        pad_id=0,
    )
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]


def test_the_coefficient_is_off_by_default_and_bounded() -> None:
    assert CpuSection().grpo_sft_replay_coef == 0.0
    assert CpuSection(grpo_sft_replay_coef=0.5).grpo_sft_replay_coef == 0.5
    for bad in (-0.1, 11, float("nan"), "strong"):
        with pytest.raises(ValidationError):
            CpuSection(grpo_sft_replay_coef=bad)


def test_off_means_no_replay_at_all(builtin_data_300: Path, tiny_model_dir: Path) -> None:
    assert sft_replay(spec(), builtin_data_300 / "train.parquet", tiny_model_dir, schemas()) is None


def test_replayed_batches_are_the_sft_examples_in_sft_order(
    builtin_data_300: Path, tiny_model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    run = spec(grpo_sft_replay_coef=0.5)
    replay = sft_replay(run, builtin_data_300 / "train.parquet", tiny_model_dir, schemas())
    assert replay is not None and replay.coef == 0.5
    examples, dropped = sft_examples(
        run,
        builtin_data_300 / "train.parquet",
        AutoTokenizer.from_pretrained(str(tiny_model_dir)),
        schemas(),
        3,
    )
    assert dropped == 0 and len(replay.batches) == 3
    assert [e for batch in replay.batches for e in batch] == examples
    # each batch is one SFT step's rows: they share the system prompt (the prefix path)
    for batch in replay.batches:
        assert len(batch) == 4
        heads = {tuple(e["input_ids"][:20]) for e in batch}
        assert len(heads) == 1
    # step k replays SFT batch k, cycling, so a resumed run takes the same one
    assert torch.equal(replay.batch(1)["input_ids"], replay.batch(4)["input_ids"])
    assert not torch.equal(replay.batch(0)["input_ids"], replay.batch(1)["input_ids"])


def test_the_term_is_coef_times_the_sft_loss_with_a_gradient(
    builtin_data_300: Path, tiny_model_dir: Path
) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    replay = replay_of(builtin_data_300, tiny_model_dir, grpo_sft_replay_coef=2.0)
    assert replay is not None
    inputs = replay.batch(0)
    expected = frozen_context_sft_loss(
        model, inputs["input_ids"], inputs["attention_mask"], inputs["labels"]
    )
    loss = replay.loss(model, 0)
    assert torch.isclose(loss, 2.0 * expected)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_a_flat_grpo_step_still_takes_the_replay_and_logs_it(
    builtin_data_300: Path, tiny_model_dir: Path
) -> None:
    """All groups alike: no RL signal, but the replay is a signal of its own."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    replay = replay_of(builtin_data_300, tiny_model_dir, grpo_sft_replay_coef=1.0)
    metrics: dict[str, dict[str, list[float]]] = {"train": {"sft_replay_loss": []}}
    trainer = SimpleNamespace(
        sft_replay=replay,
        state=SimpleNamespace(global_step=0),
        _metrics=metrics,
    )
    trainer._replay_loss = lambda m: SharedPrefixGRPOTrainer._replay_loss(
        trainer,  # type: ignore[arg-type]
        m,
    )
    trainer._first_micro_batch = lambda: SharedPrefixGRPOTrainer._first_micro_batch(
        trainer  # type: ignore[arg-type]
    )
    loss = SharedPrefixGRPOTrainer._compute_loss(
        trainer,  # type: ignore[arg-type]
        model,
        {"advantages": torch.zeros(4)},
    )
    loss.backward()
    value = float(loss.detach())
    assert value > 0
    assert metrics["train"]["sft_replay_loss"] == [pytest.approx(value)]
    assert any(p.grad is not None for p in model.parameters())


def test_the_replay_rides_on_each_steps_first_micro_batch_only() -> None:
    """With `cpu.grpo_micro_batches` TRL calls the loss once per micro-batch (`_step` counts
    them); the replay is one term per optimizer step, as without micro-batches."""
    first = SharedPrefixGRPOTrainer._first_micro_batch
    for step, expected in ((0, True), (1, False), (2, True), (3, False)):
        trainer = SimpleNamespace(_step=step, current_gradient_accumulation_steps=2)
        assert first(trainer) is expected  # type: ignore[arg-type]
    alone = SimpleNamespace(_step=5, current_gradient_accumulation_steps=1)
    assert first(alone)  # type: ignore[arg-type]
    model = torch.nn.Linear(4, 4)
    later = SimpleNamespace(sft_replay=object(), _first_micro_batch=lambda: False)
    loss = SharedPrefixGRPOTrainer._compute_loss(  # type: ignore[arg-type]
        later, model, {"advantages": torch.zeros(4)}
    )
    loss.backward()  # a flat later micro-batch: no replay, no gradient
    assert float(loss.detach()) == 0.0
    assert all(p.grad is None for p in model.parameters())


def test_rows_all_too_long_are_a_clear_error(builtin_data_300: Path, tiny_model_dir: Path) -> None:
    run = spec(grpo_sft_replay_coef=1.0, sft_max_length=256)
    with pytest.raises(ValueError, match=r"longer than cpu\.sft_max_length=256"):
        sft_replay(run, builtin_data_300 / "train.parquet", tiny_model_dir, schemas())


def test_an_empty_replay_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one non-empty batch"):
        SftReplay((), 1.0, 0)
    with pytest.raises(ValueError, match="at least one non-empty batch"):
        SftReplay(((),), 1.0, 0)


def test_turn_start_weight_falls_on_each_assistant_turns_first_token() -> None:
    """The labelled runs of a row are its assistant turns: the first position of each run is
    where the turn chose to call or to answer, and only those positions are weighted."""
    from training.cpu_backend.packed_loss import TrainedPositions, turn_start_weights

    trained = TrainedPositions(
        [list(range(20)), list(range(12))],
        [torch.tensor([3, 4, 5, 9, 10, 15]), torch.tensor([7, 8])],
    )
    weights = turn_start_weights(trained, 15.0)
    assert weights.tolist() == [15.0, 1.0, 1.0, 15.0, 1.0, 15.0, 15.0, 1.0]


def test_turn_start_weight_scales_only_those_tokens_in_the_loss(
    builtin_data_300: Path, tiny_model_dir: Path
) -> None:
    from transformers import AutoModelForCausalLM

    from training.cpu_backend.packed_loss import sft_positions, turn_start_weights

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    plain = replay_of(builtin_data_300, tiny_model_dir, grpo_sft_replay_coef=1.0)
    weighted = replay_of(
        builtin_data_300, tiny_model_dir, grpo_sft_replay_coef=1.0, grpo_sft_replay_turn_weight=15
    )
    assert plain is not None and weighted is not None and weighted.turn_start_weight == 15
    inputs = plain.batch(0)
    trained = sft_positions(inputs["input_ids"], inputs["attention_mask"], inputs["labels"])
    starts = int((turn_start_weights(trained, 2.0) == 2.0).sum())
    count = sum(int(p.numel()) for p in trained.positions)
    assert 0 < starts < count
    with torch.no_grad():
        base = float(plain.loss(model, 0))
        double = float(replace(plain, turn_start_weight=2.0).loss(model, 0))
        heavier = float(weighted.loss(model, 0))
    # weight w adds (w - 1) more copies of the turn starts' loss and nothing else
    starts_loss = double - base
    assert starts_loss > 0
    assert heavier == pytest.approx(base + 14 * starts_loss, rel=1e-4)


def test_turn_start_weight_is_bounded_and_needs_the_frozen_context() -> None:
    assert CpuSection().grpo_sft_replay_turn_weight == 1.0
    for bad in (0.5, 0, 51, "heavy"):
        with pytest.raises(ValidationError):
            CpuSection(grpo_sft_replay_turn_weight=bad)
    with pytest.raises(ValidationError, match="frozen-context SFT loss only"):
        CpuSection(frozen_context=False, grpo_sft_replay_turn_weight=5)


def test_replay_boundary_weight_defaults_to_sfts_and_can_be_set_apart(
    builtin_data_300: Path, tiny_model_dir: Path
) -> None:
    """`cpu.grpo_sft_replay_boundary_weight`: unset, the replay weighs the parallel-call
    decision as SFT did; set, the replay alone takes the new weight (SFT's stays), and 1
    turns the replay's boundary weighting off."""
    as_sft = replay_of(
        builtin_data_300, tiny_model_dir, grpo_sft_replay_coef=1.0, sft_call_boundary_weight=15
    )
    assert as_sft.boundary is not None and as_sft.boundary.weight == 15
    heavier = replay_of(
        builtin_data_300,
        tiny_model_dir,
        grpo_sft_replay_coef=1.0,
        sft_call_boundary_weight=15,
        grpo_sft_replay_boundary_weight=40,
    )
    assert heavier.boundary is not None and heavier.boundary.weight == 40
    assert heavier.boundary.token_id == as_sft.boundary.token_id
    off = replay_of(
        builtin_data_300,
        tiny_model_dir,
        grpo_sft_replay_coef=1.0,
        sft_call_boundary_weight=15,
        grpo_sft_replay_boundary_weight=1,
    )
    assert off.boundary is None
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    with torch.no_grad():
        assert (
            float(heavier.loss(model, 0)) > float(as_sft.loss(model, 0)) > float(off.loss(model, 0))
        )


def test_replay_boundary_weight_is_bounded_and_needs_the_frozen_context() -> None:
    assert CpuSection().grpo_sft_replay_boundary_weight is None
    for bad in (0.5, 0, 101, "heavy"):
        with pytest.raises(ValidationError):
            CpuSection(grpo_sft_replay_boundary_weight=bad)
    with pytest.raises(ValidationError, match="grpo_sft_replay_boundary_weight"):
        CpuSection(frozen_context=False, grpo_sft_replay_boundary_weight=5)
    unweighted = CpuSection(frozen_context=False, grpo_sft_replay_boundary_weight=1)
    assert unweighted.grpo_sft_replay_boundary_weight == 1
