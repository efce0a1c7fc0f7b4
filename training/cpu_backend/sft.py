"""SFT warm start: teach the tiny model the call format before RL asks it for rewards.

A random tiny model never emits a parseable call, so every GRPO group would score the same
and the advantages would be zero. A short SFT on the train split fixes that. Each example is
the row's prompt followed by the trajectory its ground truth describes: one assistant turn
per step with the expected calls, the tools' results as tool messages (the exact text the
MCP server returns in mock mode), then a final answer that states the expected values (or,
for irrelevance and clarification rows, answers directly or asks for the missing argument).

Loss only on assistant tokens (TRL's training variant of the Qwen template, whose
`{% generation %}` markers give the assistant mask). No truncation: a row longer than
`cpu.sft_max_length` tokens is dropped and counted, never cut (truncation keeps the start,
so a limit shorter than the tool prompt would silently train on prompts without answers).
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from transformers import TrainerCallback
from trl.trainer.sft_trainer import SFTTrainer

from serving.renderer import ChatRenderer
from training.cpu_backend.budget import MeasuredStep
from training.cpu_backend.checkpoints import (
    LayoutCallback,
    actor_path,
    latest_complete_step,
)
from training.cpu_backend.episodes import cpu_renderer
from training.cpu_backend.packed_loss import CallBoundary, frozen_context_sft_loss
from training.cpu_backend.precision import PrecisionMixin, torch_dtype
from training.cpu_backend.prefix import causal_lm_loss
from training.cpu_backend.prompt_pool import grpo_template_rows
from training.cpu_backend.schedule import (
    RECENT_STEPS,
    projected_last_step,
    schedule_of,
    shrinking_scheduler,
)
from training.data.schema import Category, GroundTruth
from training.spec.model import TrainingSpec

logger = logging.getLogger(__name__)
ToolSchema = dict[str, Any]
"""A tool in OpenAI function form (`serving.renderer.openai_function`)."""
FINAL_DIR = "final"
CALL_CLOSE = "</tool_call>"


def tool_text(result: Any) -> str:
    """A tool result as the MCP server's text content renders it (see serving/mcp_server)."""
    return json.dumps(result, ensure_ascii=False, separators=(", ", ": "))


def final_answer(truth: GroundTruth, language: str) -> str:
    chinese = language.startswith("zh")
    if truth.category is Category.CLARIFICATION:
        missing = (truth.missing_argument or "details").replace("_", " ")
        if chinese:
            return f"请提供 {missing}，我再帮你处理。"
        return f"Could you tell me the {missing}? I need it to do this."
    if truth.category is Category.IRRELEVANCE or not truth.answers:
        if chinese:
            return "这个问题不需要工具，我直接回答：好的。"
        return "I can answer this directly without any tool."
    values = ("，" if chinese else ", ").join(truth.answers)
    return f"结果：{values}。" if chinese else f"The result is {values}."


def trajectory(row: Mapping[Any, Any]) -> list[dict[str, Any]]:
    """The row's prompt plus the assistant/tool turns its ground truth describes."""
    truth = GroundTruth.from_json(row["reward_model"]["ground_truth"])
    messages: list[dict[str, Any]] = [
        {"role": str(m["role"]), "content": str(m["content"])} for m in row["prompt"]
    ]
    for index, step in enumerate(truth.steps):
        calls = [
            {"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
            for c in step
        ]
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        results = truth.results[index] if index < len(truth.results) else []
        for call, result in zip(step, results, strict=False):
            messages.append({"role": "tool", "name": call.name, "content": tool_text(result)})
    messages.append(
        {"role": "assistant", "content": final_answer(truth, str(row.get("language", "en")))}
    )
    return messages


def _weighted_order(
    records: list[dict[Any, Any]],
    members: list[int],
    weights: Mapping[str, float],
    rng: random.Random,
) -> list[int]:
    """A seeded order of `members` in which rows of heavier categories tend to come first
    (Efraimidis-Spirakis keys, u ** (1 / w)): a run that sees only part of the split sees
    more of them, and no row repeats before every row has appeared once."""

    def key(index: int) -> float:
        weight = weights.get(str(records[index].get("category", "")), 1.0)
        return float(rng.random() ** (1.0 / weight))

    keys = {index: key(index) for index in members}
    return sorted(members, key=lambda index: keys[index], reverse=True)


def _swap_held_back(
    planned: list[int], order: list[int], held_back: AbstractSet[int]
) -> list[int] | None:
    """`planned` (one group's rows, in plan order) with each held-back row replaced by the
    next row of the group's `order` that is neither held back nor planned, then (a plan that
    cycles the group) by its kept rows again; None when the whole group is held back."""
    kept = [index for index in order if index not in held_back]
    if not kept:
        return None
    in_plan = set(planned)
    spares = itertools.cycle([i for i in kept if i not in in_plan] + kept)
    return [next(spares) if index in held_back else index for index in planned]


def sft_row_order(
    frame: pd.DataFrame,
    steps: int,
    batch_size: int,
    seed: int,
    category_weights: Mapping[str, float] | None = None,
    held_back: AbstractSet[int] = frozenset(),
) -> list[int]:
    """The positions in `frame` of `steps * batch_size` examples in training order (cycling
    through the split if it is smaller). Each consecutive batch shares one system prompt, so
    the rows of a batch share their whole tool prompt (see `prefix.py`); batches come in a
    seeded random order, and the trainer reads them sequentially (which also makes resume
    exact, and lets GRPO tell which rows the first N steps trained on: `trained_rows`).

    `category_weights` (`cpu.sft_category_weights`) bias which rows a partial pass takes:
    with the demo's 130 steps of 8 rows the model sees 1,040 of 1,788 time-pack rows, and
    the weights decide which. Without them every row is equally likely (a plain shuffle).
    Rows at the positions in `held_back` (GRPO's own templates) are never taken: the plan is
    drawn as if they were there, and each of their places goes to a row of the same group the
    plan does not use (`_swap_held_back`), so every other row keeps its batch and place.
    Reshuffling without them instead gave a different SFT start altogether (built-in seed 1:
    exact call 55.6% against 73.8%), so a trial of the option compared two orders as much as
    two data splits."""
    rng = random.Random(seed)
    records = frame.to_dict("records")
    groups: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        groups.setdefault(str(record["prompt"][0]["content"]), []).append(index)
    batches: list[list[int] | None] = []
    for members in groups.values():
        if category_weights:
            order = _weighted_order(records, members, category_weights, rng)
        else:
            order = list(members)
            rng.shuffle(order)
        share = max(1, round(steps * len(members) / len(records)))
        cycled = [order[i % len(order)] for i in range(share * batch_size)]
        if held_back:
            swapped = _swap_held_back(cycled, order, held_back)
            if swapped is None:  # a group held back whole: its slots stay, empty
                batches += [None] * share
                continue
            cycled = swapped
        batches += [cycled[i : i + batch_size] for i in range(0, len(cycled), batch_size)]
    rng.shuffle(batches)
    taken = [batch for batch in batches if batch is not None]
    return [i for batch in taken[:steps] for i in batch]


def sft_rows(
    frame: pd.DataFrame,
    steps: int,
    batch_size: int,
    seed: int,
    category_weights: Mapping[str, float] | None = None,
    held_back: AbstractSet[int] = frozenset(),
) -> list[list[dict[str, Any]]]:
    """The trajectories of `sft_row_order`, in training order."""
    records = frame.to_dict("records")
    order = sft_row_order(frame, steps, batch_size, seed, category_weights, held_back)
    return [trajectory(records[i]) for i in order]


def _category_weights(spec: TrainingSpec) -> dict[str, float]:
    return {str(category): weight for category, weight in spec.cpu.sft_category_weights.items()}


def grpo_own_rows(spec: TrainingSpec, train: pd.DataFrame | Path) -> frozenset[int]:
    """Positions of the train rows SFT leaves to GRPO (`cpu.grpo_own_templates`,
    `prompt_pool.grpo_template_rows`), in the whole train split (a frame read from the file
    in order, or the file)."""
    categories = [str(c) for c in spec.cpu.grpo_own_templates]
    if not categories:
        return frozenset()
    if isinstance(train, Path):
        train = pd.read_parquet(train, columns=["category", "template_id"])
    return grpo_template_rows(train.reset_index(drop=True), categories)


def trained_rows(
    spec: TrainingSpec, train_file: Path, planned_steps: int, trained_steps: int
) -> frozenset[int]:
    """Positions in `train_file` of the rows the first `trained_steps` steps of a
    `planned_steps`-step SFT run trained on (a deadline may stop it early). The plan of N
    steps is not a prefix of a longer one (each prompt group's share scales with N), hence
    both counts. A row dropped as too long shifts the later ones by one row; not counted."""
    cpu = spec.cpu
    own_templates = ["template_id"] if cpu.grpo_own_templates else []
    frame = pd.read_parquet(train_file, columns=["prompt", "category", *own_templates])
    order = sft_row_order(
        frame,
        planned_steps,
        cpu.sft_batch_size,
        cpu.seed,
        _category_weights(spec),
        grpo_own_rows(spec, frame),
    )
    return frozenset(order[: trained_steps * cpu.sft_batch_size])


def tokenize_rows(
    renderer: ChatRenderer,
    trajectories: list[list[dict[str, Any]]],
    schemas: list[ToolSchema],
    max_length: int,
    short_rows: int = 0,
) -> tuple[list[dict[str, list[int]]], int]:
    """Token ids and labels (-100 outside assistant turns) from the one prompt renderer
    (`serving/renderer.py`, the same rendering the rollouts and the served model see), and
    how many rows were dropped for being longer than `max_length`.

    The first `short_rows` rows are rendered without the tool block (the SFT curriculum,
    `cpu.sft_short_steps`). Tokenized here rather than by the trainer because a `datasets`
    table would unify every row's tool-call `arguments` into one struct with every key of
    every tool (missing keys as null), and the template would render those nulls.
    """
    rows: list[dict[str, list[int]]] = []
    dropped = 0
    for number, messages in enumerate(trajectories):
        example = renderer.training_example(messages, schemas if number >= short_rows else None)
        if len(example.input_ids) > max_length:
            dropped += 1
            continue
        labels = [
            t if m else -100 for t, m in zip(example.input_ids, example.assistant_mask, strict=True)
        ]
        rows.append({"input_ids": example.input_ids, "labels": labels})
    return rows, dropped


def call_close_token(tokenizer: Any) -> int:
    """The id of `</tool_call>`, one token in a prepared model (`model/prepare.py`); a
    tokenizer that splits it has no single place where a call ends, so it is refused."""
    ids = tokenizer.encode(CALL_CLOSE, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(
            f"cpu.sft_call_boundary_weight needs {CALL_CLOSE} as one token; this tokenizer "
            f"splits it into {len(ids)}: prepare the model with `toolrl model prepare`"
        )
    return int(ids[0])


def call_boundary(
    spec: TrainingSpec, tokenizer: Any, weight: float | None = None
) -> CallBoundary | None:
    """`weight` (default: the spec's `cpu.sft_call_boundary_weight`) on this tokenizer's
    `</tool_call>`; None when the weight is 1: every token counts alike."""
    if weight is None:
        weight = spec.cpu.sft_call_boundary_weight
    return CallBoundary(call_close_token(tokenizer), weight) if weight != 1.0 else None


def sft_examples(
    spec: TrainingSpec, train_file: Path, tokenizer: Any, schemas: list[ToolSchema], steps: int
) -> tuple[list[dict[str, list[int]]], int]:
    """The tokenized examples of `steps` SFT steps, in training order, and how many rows
    were dropped as too long: what `run_sft` trains on, and what GRPO's SFT replay
    (`replay.py`) reads again, row for row, for the same spec and data."""
    cpu = spec.cpu
    frame = pd.read_parquet(train_file)
    trajectories = sft_rows(
        frame,
        steps,
        cpu.sft_batch_size,
        cpu.seed,
        _category_weights(spec),
        grpo_own_rows(spec, frame),
    )
    return tokenize_rows(
        cpu_renderer(tokenizer, spec.model.enable_thinking),
        trajectories,
        schemas,
        cpu.sft_max_length,
        short_rows=min(cpu.sft_short_steps, steps) * cpu.sft_batch_size,
    )


class SharedPrefixSFTTrainer(PrecisionMixin, SFTTrainer):
    """TRL's SFT trainer with the loss computed by `prefix.causal_lm_loss` (same loss, the
    tool prompt run once per batch) or, with `frozen_context`, by
    `packed_loss.frozen_context_sft_loss`; the optimizer follows the model's dtype."""

    frozen_context = False
    question_gradient = False
    call_boundary: CallBoundary | None = None

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        args = (model, inputs["input_ids"], inputs["attention_mask"], inputs["labels"])
        if self.frozen_context:
            loss = frozen_context_sft_loss(
                *args,
                num_items_in_batch,
                question_gradient=self.question_gradient,
                boundary=self.call_boundary,
            )
        else:
            loss = causal_lm_loss(*args, num_items_in_batch)
        return (loss, None) if return_outputs else loss

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        """`cosine_with_min_lr` as a `schedule.ShrinkingCosine`: the same rates step for step,
        with an end `SftDeadline` can bring in when the time budget will cut SFT short. Any
        other schedule type is transformers' own, as asked."""
        if getattr(self.args.lr_scheduler_type, "value", None) != "cosine_with_min_lr":
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            self.lr_scheduler = shrinking_scheduler(
                optimizer if optimizer is not None else self.optimizer,
                self.args.get_warmup_steps(num_training_steps),
                num_training_steps,
                float(self.args.lr_scheduler_kwargs.get("min_lr_rate", 0.0)),
            )
            self._created_lr_scheduler = True
        return self.lr_scheduler


def sft_arguments(spec: TrainingSpec, output_dir: Path) -> dict[str, Any]:
    """The spec as `SFTConfig` keyword arguments (pure: tested without training)."""
    cpu = spec.cpu
    return {
        "output_dir": str(output_dir),
        "max_steps": cpu.sft_steps,
        "per_device_train_batch_size": cpu.sft_batch_size,
        "learning_rate": cpu.sft_lr,
        "lr_scheduler_type": "cosine_with_min_lr",
        "lr_scheduler_kwargs": {"min_lr_rate": cpu.sft_min_lr_ratio},
        "warmup_steps": max(1, cpu.sft_steps // 20),
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "assistant_only_loss": False,  # rows come tokenized, with assistant-only labels
        "max_length": None,
        "packing": False,
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "gradient_checkpointing": False,
        "logging_steps": max(1, min(10, cpu.sft_steps // 10)),
        "save_strategy": "steps",
        "save_steps": max(1, cpu.sft_save_freq),
        "save_total_limit": None,
        "report_to": [],
        "seed": cpu.seed,
        "data_seed": cpu.seed,
        "train_sampling_strategy": "sequential",
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }


@dataclass(frozen=True)
class SftResult:
    model_dir: Path
    steps: int
    seconds: float
    tokens: int
    dropped_rows: int
    first_loss: float | None
    last_loss: float | None
    resumed_from: int | None
    losses: tuple[tuple[int, float], ...] = ()
    """(step, loss) as the trainer logged them (this process's part of the run)."""
    step_seconds: tuple[float, ...] = ()
    """Wall seconds of each step this process trained, checkpoint saves included (the first
    also holds the trainer's start, a resume's checkpoint load among it): where a run's mean
    step differs from the budget probe's, this says which steps differ."""

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _trainer(
    spec: TrainingSpec,
    base_model: Path,
    tokenizer: Any,
    rows: list[dict[str, list[int]]],
    arguments: dict[str, Any],
    callbacks: list[Any],
) -> SharedPrefixSFTTrainer:
    """The SFT trainer of `spec` on `rows`: what a run trains with and what the step-cost
    probe times, built in one place so the probe times the same step."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl.trainer.sft_config import SFTConfig

    cpu = spec.cpu
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=torch_dtype(cpu.dtype))
    trainer = SharedPrefixSFTTrainer(
        model=model,
        args=SFTConfig(**arguments),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    trainer.frozen_context = cpu.frozen_context
    trainer.question_gradient = cpu.sft_question_gradient
    trainer.call_boundary = call_boundary(spec, tokenizer)
    trainer.toolrl_dtype = cpu.dtype
    return trainer


class StepClock(TrainerCallback):
    """When each optimizer step ended (perf_counter seconds)."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())


def probe_rows(
    rows: list[dict[str, list[int]]], short_rows: int, batch_size: int, batches: int
) -> list[Any]:
    """`batches` whole batches of the run, spread evenly over its full-length rows (past the
    short-row curriculum, which costs less a step), in run order: the steps the run will
    take. Whole batches, never rows picked one by one: a run's batch shares its tool prompt,
    computed once (`prefix.py`); rows from different batches may not, and cost up to 6x."""
    tail = rows[short_rows:] or rows
    starts = list(range(0, len(tail), batch_size))
    if batches <= 1:
        chosen = starts[:1]
    else:
        chosen = [starts[round(i * (len(starts) - 1) / (batches - 1))] for i in range(batches)]
    return [row for start in chosen for row in tail[start : start + batch_size]]


def probe_sft_step(
    spec: TrainingSpec,
    base_model: Path,
    train_file: Path,
    schemas: list[ToolSchema],
    timed_steps: int = 3,
) -> MeasuredStep | None:
    """Time `timed_steps` SFT steps of `spec` here (after one warm-up step) on batches
    spread over the run's own, then throw the weights away: the step cost the time budget
    plans with (budget.py), the median so that one slow step (the second still allocates
    the optimizer's state) does not decide it. None when the spec has no SFT steps to time."""
    import torch
    from transformers import AutoTokenizer

    cpu = spec.cpu
    if cpu.sft_steps == 0 or timed_steps < 1:
        return None
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(base_model))
    rows, _ = sft_examples(spec, train_file, tokenizer, schemas, cpu.sft_steps)
    if not rows:
        raise ValueError(f"every SFT row is longer than cpu.sft_max_length={cpu.sft_max_length}")
    steps = timed_steps + 1
    short = min(cpu.sft_short_steps, cpu.sft_steps) * cpu.sft_batch_size
    picked = probe_rows(rows, short, cpu.sft_batch_size, steps)
    clock = StepClock()
    with tempfile.TemporaryDirectory(prefix="toolrl-sft-probe-") as scratch:
        arguments = sft_arguments(spec, Path(scratch))
        arguments.update({"max_steps": steps, "save_strategy": "no", "logging_steps": steps})
        trainer = _trainer(spec, base_model, tokenizer, picked, arguments, [clock])
        trainer.train()
        del trainer
    gc.collect()
    torch.manual_seed(cpu.seed)  # the run trains from the seed state it would have had
    durations = [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    if not durations:
        return None
    return MeasuredStep(
        step_s=statistics.median(durations),
        spent_s=time.perf_counter() - start,
        timed_steps=len(durations),
    )


class SftDeadline(TrainerCallback):
    """Ends SFT before the step that would finish past `seconds` (counted from this process's
    first step: a resumed run gets its share again), never before `min_steps`: the time
    budget's promise holds when its step probe was optimistic. `stopped_at` says where.

    Each step it also projects where it will stop (`schedule.projected_last_step`) and ends
    the trainer's cosine there (`schedule.ShrinkingCosine`), so SFT cut by its deadline ends
    at its floor rate, not mid-schedule; `horizon` is the last end set before the planned
    steps (None while they fit)."""

    def __init__(self, seconds: float, min_steps: int) -> None:
        self.seconds, self.min_steps = seconds, min_steps
        self.stopped_at: int | None = None
        self.horizon: int | None = None
        self._started: float | None = None
        self._first_step = 0
        self._ends: list[float] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._started, self._first_step = time.perf_counter(), int(state.global_step)
        self._ends = []
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        step, done = int(state.global_step), int(state.global_step) - self._first_step
        if self._started is None or done <= 0:
            return control
        now = time.perf_counter()
        self._ends = [*self._ends[-RECENT_STEPS:], now]  # what the projection reads
        self._follow_deadline(step, done, int(state.max_steps), kwargs.get("lr_scheduler"))
        if step < self.min_steps or step >= int(state.max_steps):
            return control
        elapsed = now - self._started
        if elapsed + elapsed / done > self.seconds:  # the next step, at the mean so far
            control.should_training_stop = True
            self.stopped_at = step
            logger.info(
                "SFT deadline: stopping after step %d of %d (%.0f s of its %.0f s)%s",
                step, int(state.max_steps), elapsed, self.seconds,
                f"; its cosine was ended at step {self.horizon}" if self.horizon else "",
            )  # fmt: skip
        return control

    def _follow_deadline(self, step: int, done: int, max_steps: int, scheduler: Any) -> None:
        schedule = schedule_of(scheduler)
        if schedule is None or self._started is None:
            return
        last = projected_last_step(
            step, done, self._ends, self._started, self.seconds, self.min_steps
        )
        if last is not None:
            schedule.end_at(last)
        # this process's projection, or the end a resumed run's checkpoint holds
        ended = schedule.horizon if schedule.horizon < max_steps else None
        if ended is not None and self.horizon is None:
            logger.info(
                "SFT's steps cost more than planned: its deadline will stop it near step %d "
                "of %d, so its cosine now ends there (and follows as steps go on)",
                ended, max_steps,
            )  # fmt: skip
        self.horizon = ended


def run_sft(
    spec: TrainingSpec,
    base_model: Path,
    train_file: Path,
    run_dir: Path,
    schemas: list[ToolSchema],
    callbacks: list[Any] | None = None,
    subdir: str = "sft",
) -> SftResult:
    """Warm-start `base_model` on the train split; resumable; returns the final model dir.

    A finished warm start (`run_dir/<subdir>/final/COMPLETE`) is reused as is; with
    `cpu.sft_steps: 0` there is none and GRPO starts from `base_model` itself. `subdir`
    keeps a second SFT of the same run (the format guard's extension) apart from the first.
    """
    from transformers import AutoTokenizer

    cpu = spec.cpu
    sft_dir = run_dir / subdir
    final = sft_dir / FINAL_DIR
    if cpu.sft_steps == 0:  # e.g. continuing from a champion that already knows the format
        return SftResult(base_model, 0, 0.0, 0, 0, None, None, None)
    if (final / "COMPLETE").is_file():  # it holds the step SFT ended at (a deadline: earlier)
        written = (final / "COMPLETE").read_text(encoding="utf-8").strip()
        steps = int(written) if written.isdigit() else cpu.sft_steps
        return SftResult(final, steps, 0.0, 0, 0, None, None, steps)
    sft_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(base_model))
    rows, dropped = sft_examples(spec, train_file, tokenizer, schemas, cpu.sft_steps)
    if not rows:
        raise ValueError(f"every SFT row is longer than cpu.sft_max_length={cpu.sft_max_length}")
    clock = StepClock()
    trainer = _trainer(
        spec,
        base_model,
        tokenizer,
        rows,
        sft_arguments(spec, sft_dir / ".trainer"),
        [
            LayoutCallback(sft_dir, spec.checkpoint.keep, cpu.sft_batch_size),
            clock,
            *(callbacks or []),
        ],
    )
    resume = latest_complete_step(sft_dir)
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(actor_path(sft_dir, resume)) if resume else None)
    seconds = time.perf_counter() - start
    logged = [
        (int(entry.get("step", 0)), float(entry["loss"]))
        for entry in trainer.state.log_history
        if "loss" in entry
    ]
    losses = [loss for _, loss in logged]
    trained = trainer.state.global_step - (resume or 0)
    mean_tokens = sum(len(r["input_ids"]) for r in rows) / len(rows)
    tokens = int(mean_tokens * trained * cpu.sft_batch_size)
    final.mkdir(parents=True, exist_ok=True)
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    (final / "COMPLETE").write_text(f"{trainer.state.global_step}\n", encoding="utf-8")
    return SftResult(
        final,
        trained,
        seconds,
        tokens,
        dropped,
        losses[0] if losses else None,
        losses[-1] if losses else None,
        resume,
        tuple(logged),
        tuple(b - a for a, b in zip([start, *clock.ends], clock.ends, strict=False)),
    )
