"""SFT's learning-rate schedule (`training/cpu_backend/schedule.py`): transformers' cosine,
step for step, until SFT's deadline brings its end in; then it ends at the floor where the
deadline will stop, follows the deadline's projection, and survives a checkpoint."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import TrainerCallback, get_scheduler

from testkit.pipeline_specs import tiny_cpu_spec
from training.cpu_backend.schedule import (
    ShrinkingCosine,
    projected_last_step,
    schedule_of,
    shrinking_scheduler,
)


def _optimizer(lr: float = 3e-4) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def _rates(scheduler: Any, steps: int) -> list[float]:
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        scheduler.optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize(("warmup", "total"), [(1, 6), (5, 100), (6, 130), (0, 20)])
def test_unshortened_it_is_transformers_cosine_with_min_lr_step_for_step(
    warmup: int, total: int
) -> None:
    ours = shrinking_scheduler(_optimizer(), warmup, total, 0.1)
    theirs = get_scheduler(
        "cosine_with_min_lr",
        optimizer=_optimizer(),
        num_warmup_steps=warmup,
        num_training_steps=total,
        scheduler_specific_kwargs={"min_lr_rate": 0.1},
    )
    assert _rates(ours, total) == pytest.approx(_rates(theirs, total), rel=1e-12, abs=1e-15)


def test_shortened_it_reaches_the_floor_at_the_new_end_and_stays_there() -> None:
    schedule = ShrinkingCosine(warmup_steps=5, total_steps=100, min_lr_ratio=0.1)
    assert schedule(72) > 0.25  # the planned cosine cut at 72: still a quarter of the peak
    assert schedule.end_at(72) == 72
    assert schedule(72) == pytest.approx(0.1)
    assert [schedule(step) for step in (73, 100, 500)] == pytest.approx([0.1, 0.1, 0.1])
    factors = [schedule(step) for step in range(5, 80)]
    assert all(a >= b for a, b in itertools.pairwise(factors))  # never climbs


def test_the_end_stays_within_the_plan_and_past_the_warmup() -> None:
    schedule = ShrinkingCosine(warmup_steps=5, total_steps=100, min_lr_ratio=0.1)
    assert schedule.end_at(80) == 80
    assert schedule.end_at(90) == 90  # a later projection moves it out again
    assert schedule.end_at(500) == 100  # never past the planned steps
    assert schedule.end_at(2) == 6  # the warmup keeps its steps
    assert [schedule(step) for step in range(5)] == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])


@pytest.mark.parametrize(
    ("warmup", "total", "ratio"), [(0, 0, 0.1), (-1, 10, 0.1), (1, 10, -0.1), (1, 10, 1.5)]
)
def test_a_schedule_without_steps_or_with_a_floor_outside_0_1_is_refused(
    warmup: int, total: int, ratio: float
) -> None:
    with pytest.raises(ValueError, match=r"schedule needs steps|min_lr_ratio"):
        ShrinkingCosine(warmup, total, ratio)


def test_the_horizon_goes_into_the_schedulers_state_and_comes_back_on_resume() -> None:
    before = shrinking_scheduler(_optimizer(), 5, 100, 0.1)
    _rates(before, 30)
    schedule_of(before).end_at(60)  # type: ignore[union-attr]
    state = before.state_dict()
    resumed = shrinking_scheduler(_optimizer(), 5, 100, 0.1)
    resumed.load_state_dict(state)
    restored = schedule_of(resumed)
    assert restored is not None and restored.horizon == 60
    assert resumed.last_epoch == 30


def test_schedule_of_finds_nothing_in_another_scheduler() -> None:
    assert schedule_of(None) is None
    assert schedule_of(torch.optim.lr_scheduler.StepLR(_optimizer(), step_size=1)) is None


def test_the_projection_lands_on_the_step_the_deadline_stops_at() -> None:
    """Steps of 3 s from 0, a deadline of 100 s: the deadline stops after step 33 (a 34th
    would end at 102 s), and the projection says 33 from the third step on."""
    ends = [3.0 * i for i in range(1, 21)]
    for done in range(3, 21):
        assert projected_last_step(done, done, ends[:done], 0.0, 100.0, 1) == 33


def test_the_projection_prices_steps_at_the_dearer_of_the_mean_and_the_recent_steps() -> None:
    """Ten 2 s steps then ten 4 s steps: the mean is 3 s, the recent steps 4 s; 40 s are
    left, so 10 more steps, not 13."""
    ends = [2.0 * i for i in range(1, 11)] + [20.0 + 4.0 * i for i in range(1, 11)]
    assert projected_last_step(20, 20, ends, 0.0, 100.0, 1) == 30
    # a resumed process: its own steps and its own share, counted from its first step
    assert projected_last_step(44, 4, [13.0, 16.0, 19.0, 22.0], 10.0, 30.0, 1) == 50


def test_the_projection_waits_for_three_steps_and_keeps_the_floor() -> None:
    assert projected_last_step(2, 2, [3.0, 6.0], 0.0, 100.0, 1) is None
    assert projected_last_step(3, 3, [], 0.0, 100.0, 1) is None
    assert projected_last_step(3, 3, [1.0, 2.0, 3.0], 0.0, 0.0, 20) == 20  # past the deadline
    assert projected_last_step(30, 30, [29.0, 30.0], 0.0, 10.0, 20) == 30  # no time left
    assert projected_last_step(3, 3, [0.0, 0.0, 0.0], 0.0, 10.0, 1) is None  # no time taken


def test_the_deadline_moves_the_end_out_again_after_a_slow_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first step of 10 s (it starts the trainer), then steps of 2 s, 100 s for SFT: after
    the third step the projection is early (step 21, priced at the mean of 4.7 s); by step
    20 it is step 41, and the cosine follows it out instead of keeping the early end."""
    import time

    from training.cpu_backend.sft import SftDeadline

    clock = {"now": 0.0}
    monkeypatch.setattr(time, "perf_counter", lambda: clock["now"])
    scheduler = shrinking_scheduler(_optimizer(), 5, 100, 0.1)
    deadline = SftDeadline(seconds=100.0, min_steps=1)
    state = SimpleNamespace(global_step=0, max_steps=100)
    deadline.on_train_begin(None, state, SimpleNamespace(should_training_stop=False))
    ends = {1: 10.0, **{step: 10.0 + 2.0 * (step - 1) for step in range(2, 21)}}
    horizons = {}
    for step, now in ends.items():
        clock["now"], state.global_step = now, step
        control = SimpleNamespace(should_training_stop=False)
        deadline.on_step_end(None, state, control, lr_scheduler=scheduler)
        assert not control.should_training_stop
        horizons[step] = deadline.horizon
    assert horizons[2] is None and horizons[3] == 21
    assert horizons[20] == 41 == schedule_of(scheduler).horizon  # type: ignore[union-attr]
    assert all(horizons[s] <= horizons[s + 1] for s in range(3, 20))  # type: ignore[operator]


class _Rates(TrainerCallback):
    """The rate the optimizer holds after each step (the next step's)."""

    def __init__(self) -> None:
        self.rates: list[float] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rates.append(float(kwargs["optimizer"].param_groups[0]["lr"]))


def test_a_real_sft_run_cut_by_its_deadline_ends_at_its_floor_rate(
    builtin_data_300: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The tiny model's SFT planned for 12 steps with no time for any: the deadline stops it
    at its floor of 5, and from the third step the projection has moved the cosine's end
    there, so SFT stops at its floor rate (lr x 0.1), where the planned cosine would still be
    near the peak. The saved checkpoint's scheduler holds the new end."""
    from serving.tools import get_catalog
    from training.cpu_backend.sft import SftDeadline, run_sft

    spec = tiny_cpu_spec(
        "schedule",
        {
            "sft_steps": 12,
            "sft_batch_size": 2,
            "sft_lr": 1e-3,
            "sft_min_lr_ratio": 0.1,
            "sft_save_freq": 4,
            "grpo_steps": 2,
        },
    )
    schemas = list(get_catalog().openai_schemas())
    deadline, rates = SftDeadline(seconds=0.0, min_steps=5), _Rates()
    run_dir = tmp_path / "run"
    done = run_sft(
        spec, tiny_model_dir, builtin_data_300 / "train.parquet", run_dir, schemas,
        [deadline, rates],
    )  # fmt: skip
    assert deadline.stopped_at == 5 and done.steps == 5
    assert deadline.horizon == 5
    assert rates.rates[-1] == pytest.approx(1e-4)  # the floor: 0.1 of 1e-3
    planned = ShrinkingCosine(warmup_steps=1, total_steps=12, min_lr_ratio=0.1)
    assert 1e-3 * planned(5) > 5e-4  # where the planned cosine would have left it
    saved = torch.load(
        next(run_dir.glob("sft/**/scheduler.pt")), weights_only=False
    )  # the trainer's own checkpoint, written at step 4
    assert saved["lr_lambdas"][0]["horizon"] == 5


def test_the_sft_trainer_keeps_another_schedule_type_as_transformers_builds_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Only `cosine_with_min_lr` (what `sft_arguments` asks for) becomes a ShrinkingCosine;
    a trainer asked for another type gets transformers' own, not ours in its place."""
    from transformers import AutoTokenizer

    from training.cpu_backend.sft import _trainer, sft_arguments

    spec = tiny_cpu_spec("schedule-type", {"sft_steps": 4, "sft_batch_size": 2})
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    rows = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}] * 4
    for kind, ours in (("cosine_with_min_lr", True), ("constant", False)):
        arguments = sft_arguments(spec, tmp_path / kind)
        if kind != "cosine_with_min_lr":
            arguments.update(lr_scheduler_type=kind, lr_scheduler_kwargs={})
        trainer = _trainer(spec, tiny_model_dir, tokenizer, rows, arguments, [])
        trainer.create_optimizer()
        scheduler = trainer.create_scheduler(4, trainer.optimizer)
        assert (schedule_of(scheduler) is not None) is ours
