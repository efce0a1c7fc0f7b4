"""GRPO on CPU with TRL, mapped from the TrainingSpec.

What runs here, as verl does on GPU: `rollout.n` samples per prompt, each an episode of the
project's agent loop with multi-turn tool calling (the MCP tools, one session per rollout:
`rollouts.py`, TRL's `rollout_func` hook), the project's reward on the verl-style
transcript (`reward.py`), group-normalised advantages, the GSPO (sequence-level ratio) or
PPO-clip loss, optional KL to the frozen SFT model, and the loss on model tokens only (the
rollout's `env_mask` zeroes the tool results and template tokens the loop placed).

One GRPO step = one batch of `cpu.prompts_per_step` prompts x `rollout.n` rollouts and one
optimizer step on it (on-policy, like verl with one mini-batch per step).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl.trainer.grpo_trainer import GRPOTrainer

from training.cpu_backend.checkpoints import (
    LayoutCallback,
    actor_path,
    latest_complete_step,
    read_data_state,
)
from training.cpu_backend.episodes import EpisodeSettings, cpu_renderer
from training.cpu_backend.memory import (
    PEAK_KEY,
    RSS_KEY,
    MemoryCallback,
    release_free_pages,
)
from training.cpu_backend.packed_loss import frozen_context_completion_logps
from training.cpu_backend.precision import PrecisionMixin
from training.cpu_backend.prefix import completion_logps
from training.cpu_backend.prompt_pool import prompt_pool
from training.cpu_backend.replay import SftReplay
from training.cpu_backend.reward import ProjectReward, score_completions
from training.cpu_backend.rollouts import EpisodeRollouts, Resampling
from training.cpu_backend.sft import StepClock, grpo_own_rows
from training.cpu_backend.update_chunks import (
    chunk_weight,
    row_chunks,
    select_rows,
    trained_tokens,
)
from training.spec.model import TrainingSpec

logger = logging.getLogger(__name__)

#: verl's `actor.loss_agg_mode` -> TRL's `loss_type` (how token losses become one number).
LOSS_TYPES = {
    "token-mean": "dapo",  # mean over every model token of the batch
    "seq-mean-token-mean": "grpo",  # mean per sequence, then over sequences
    "seq-mean-token-sum-norm": "dr_grpo",  # token sum / a constant length, over sequences
    "seq-mean-token-sum": "dr_grpo",  # same up to that constant
}


#: Every GRPO rollout with its reward, beside the checkpoints (`ProjectReward`).
ROLLOUTS_FILE = "rollouts.jsonl"


def grpo_arguments(spec: TrainingSpec, output_dir: Path) -> dict[str, Any]:
    """The spec as `GRPOConfig` keyword arguments (pure: tested without building one)."""
    algo, rollout, cpu = spec.algorithm, spec.rollout, spec.cpu
    return {
        "output_dir": str(output_dir),
        "max_steps": cpu.grpo_steps,
        "learning_rate": cpu.grpo_lr,
        "weight_decay": spec.optim.weight_decay,
        "max_grad_norm": spec.optim.grad_clip,
        "warmup_steps": spec.optim.warmup_steps,
        "lr_scheduler_type": "constant_with_warmup",
        # one generation per optimizer step, its update in `grpo_micro_batches` backward passes
        "per_device_train_batch_size": cpu.prompts_per_step * rollout.n // cpu.grpo_micro_batches,
        "gradient_accumulation_steps": cpu.grpo_micro_batches,
        "steps_per_generation": cpu.grpo_micro_batches,
        "num_iterations": 1,
        "num_generations": rollout.n,
        "max_completion_length": cpu.max_completion_length,
        "temperature": rollout.temperature,
        "top_p": rollout.top_p,
        "chat_template_kwargs": {"enable_thinking": spec.model.enable_thinking},
        "importance_sampling_level": "sequence" if algo.loss == "gspo" else "token",
        "loss_type": LOSS_TYPES[algo.loss_agg_mode],
        "epsilon": algo.clip_ratio_low,
        "epsilon_high": algo.clip_ratio_high,
        "beta": algo.kl_loss_coef if algo.use_kl_loss else 0.0,
        "entropy_coef": algo.entropy_coeff,
        "scale_rewards": "group",
        "shuffle_dataset": True,
        "seed": cpu.seed,
        "data_seed": cpu.seed,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": spec.checkpoint.save_freq,
        "save_total_limit": None,
        "report_to": [],
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "gradient_checkpointing": False,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "remove_unused_columns": False,
        "model_init_kwargs": {"dtype": cpu.dtype},
    }


def is_flat(advantages: torch.Tensor) -> bool:
    """True when no rollout's advantage differs from zero (all groups scored alike)."""
    return bool((advantages == 0).all())


@dataclass
class GrpoResult:
    model_dir: Path
    final_step: int
    planned_steps: int
    steps_trained: int
    seconds: float
    tokens: int
    drift_stopped: bool
    resumed_from: int | None
    rewards: list[float] = field(default_factory=list)
    malformed_history: list[float] = field(default_factory=list)
    reward_stds: list[float] = field(default_factory=list)
    """Spread of the reward across each step's rollouts (TRL's `reward_std`)."""
    flat_batches: int = 0
    """Steps of this run whose groups all scored alike: no update was made."""
    zero_std_fractions: list[float] = field(default_factory=list)
    """Per step, the share of groups whose rollouts all scored alike (after any dynamic
    sampling): TRL's `frac_reward_zero_std`."""
    resampling: list[dict[str, float]] = field(default_factory=list)
    """Per step with dynamic sampling: flat groups drawn and kept, extra rollouts."""
    sft_replay_losses: list[float] = field(default_factory=list)
    """Per step with `cpu.grpo_sft_replay_coef`: the replay term added to the loss."""
    rss_gib: list[float] = field(default_factory=list)
    """Per step, the process's resident set after it (GiB; `memory.MemoryCallback`)."""
    peak_rss_gib: list[float] = field(default_factory=list)
    """Per step, the process's peak resident set so far (GiB)."""
    setup_seconds: float = 0.0
    """Wall seconds from the call to the first step's start: the trainer, its models and the
    dataset built (the time budget prices GRPO per step; this is what a step count does not
    scale)."""
    step_seconds: tuple[float, ...] = ()
    """Wall seconds of each step this process trained (generation, reference pass, update,
    the SFT replay and any checkpoint save): what a GRPO step costs where the run is."""
    prompt_pool: dict[str, int] = field(default_factory=dict)
    """Which train rows the prompts came from (`prompt_pool.PromptPool.as_dict`)."""

    @property
    def steps_per_s(self) -> float:
        return self.steps_trained / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class SharedPrefixGRPOTrainer(PrecisionMixin, GRPOTrainer):
    """TRL's GRPO trainer with rollouts from the project's agent loop (`rollouts.py`, on the
    serving engine's continuous batching) and the log-probabilities of the loss, the old
    policy and the reference computed once per shared prefix
    (`prefix.completion_logps`, or with `frozen_context` `packed_loss.
    frozen_context_completion_logps`, where tool responses and prompts carry no gradient).
    Same numbers as TRL's paths, a fraction of the tokens; anything with images falls back
    to TRL. The optimizer follows the model's dtype (`precision.py`)."""

    frozen_context = False
    toolrl_batch_rows: list[dict[str, Any]] = []  # noqa: RUF012 (replaced per batch)
    flat_batches = 0
    """Optimizer steps skipped because every group's rollouts scored alike (no signal)."""
    sft_replay: SftReplay | None = None
    """`cpu.grpo_sft_replay_coef`: the SFT loss on the SFT start's examples, each step."""
    update_tokens: int | None = None
    """`cpu.grpo_update_tokens`: most trained tokens per backward pass (`update_chunks.py`)."""
    _tool_mask: Any = None

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        # With `cpu.grpo_micro_batches`, TRL calls this once per micro-batch of the step's
        # rollouts (its loss already scaled for the accumulation); the replay is one term
        # per optimizer step, so it rides on the step's first micro-batch only.
        replay = self.sft_replay is not None and self._first_micro_batch()
        if is_flat(inputs["advantages"]):
            # Every rollout here scored like the rest of its group: the policy gradient is
            # zero. A backward pass would leave only the KL term, and AdamW (momentum,
            # per-weight normalisation) would turn a whole step of that into a full-size
            # step along the *previous* batch's direction. So no signal, no update from RL:
            # no parameter gets a gradient from here and, when the whole step is flat
            # (counted in `_generate_and_score_completions`), the optimizer skips them (the
            # SFT replay, a signal of its own, still applies).
            if not replay:
                return torch.zeros((), requires_grad=True)
            return self._replay_loss(model)
        release_free_pages()  # what generation and the no-gradient passes left as holes
        chunks = row_chunks(trained_tokens(inputs), self.update_tokens)
        if len(chunks) == 1:
            loss = self._policy_loss(model, inputs)
        else:
            loss = self._chunked_policy_loss(model, inputs, chunks)
        return loss + self._replay_loss(model) if replay else loss

    def _policy_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        """TRL's GRPO loss on `inputs`."""
        # TRL masks tool tokens out of the loss after computing their log-probabilities;
        # the frozen-context path needs the mask earlier, to skip them altogether
        self._tool_mask = inputs.get("tool_mask")
        try:
            return super()._compute_loss(model, inputs)  # type: ignore[no-untyped-call]
        finally:
            self._tool_mask = None

    def _chunked_policy_loss(
        self, model: Any, inputs: dict[str, Any], chunks: list[slice]
    ) -> torch.Tensor:
        """The loss over `chunks` of the micro-batch's rows (`update_chunks.py`): every chunk
        but the last is backpropagated here, its graph freed before the next is built; the
        last chunk's loss is returned for the trainer's backward, with the earlier chunks'
        values added as a constant so the logged loss is the whole micro-batch's."""
        if not (self.compute_loss_func is not None or getattr(self, "loss_is_scaled_for_ga", None)):
            # the trainer would divide the returned loss again; the chunks here would not be
            raise RuntimeError("chunked GRPO update needs TRL's loss scaled for accumulation")
        rows = int(inputs["advantages"].shape[0])
        done = torch.zeros(())
        for index, part in enumerate(chunks):
            weight = chunk_weight(self.loss_type, part, rows)
            loss: torch.Tensor = self._policy_loss(model, select_rows(inputs, part, rows)) * weight
            if index == len(chunks) - 1:
                return loss + done
            self.accelerator.backward(loss)
            done = done + loss.detach()
            release_free_pages()  # the chunk's graph is freed: its pages go back
        raise AssertionError("row_chunks returns at least one chunk")

    def _first_micro_batch(self) -> bool:
        """Whether this loss is the optimizer step's first micro-batch (TRL counts
        micro-batches in `_step`, advanced after each one)."""
        accumulation = int(getattr(self, "current_gradient_accumulation_steps", 1) or 1)
        return int(getattr(self, "_step", 0)) % accumulation == 0

    def _replay_loss(self, model: Any) -> torch.Tensor:
        """This step's SFT replay term (`replay.py`), logged as `sft_replay_loss`."""
        assert self.sft_replay is not None
        loss = self.sft_replay.loss(model, self.state.global_step)
        self._metrics["train"]["sft_replay_loss"].append(float(loss.detach()))
        return loss

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> Any:
        # the rollout function gets only the prompts; the rows (index for the tool session)
        # travel beside them
        self.toolrl_batch_rows = inputs
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self.toolrl_batch_rows = []
        self._count_if_flat(output["advantages"])
        return output

    def _count_if_flat(self, advantages: torch.Tensor) -> None:
        """A step whose groups all scored alike makes no RL update: counted once per step
        (here, on the whole generation), not per micro-batch of its update."""
        if is_flat(advantages):
            self.flat_batches += 1

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[Any, Any, Any]:
        if compute_aux_loss or any(value is not None for value in multimodal.values()):
            return super()._get_per_token_logps_and_entropies(  # type: ignore[no-any-return]
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        if not torch.is_grad_enabled():
            release_free_pages()  # generation's (or the previous pass's) freed pages
        if self.frozen_context:
            logps, entropies = frozen_context_completion_logps(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                self.temperature,
                compute_entropy,
                self._tool_mask,
            )
            return logps, entropies, None
        logps, entropies = completion_logps(
            model, input_ids, attention_mask, logits_to_keep, self.temperature, compute_entropy
        )
        return logps, entropies, None


class _TokenMeter(TrainerCallback):
    """Tokens seen before this process started (a resumed state counts earlier ones)."""

    tokens_at_start = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.tokens_at_start = int(state.num_input_tokens_seen)
        return control


def _drift_callback(reward: ProjectReward) -> Any:
    class DriftGuard(TrainerCallback):
        """Stops the run when the malformed-call rate stays above the threshold."""

        stopped = False

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if reward.drifting:
                DriftGuard.stopped = True
                control.should_training_stop = True
                control.should_save = True
            return control

    return DriftGuard()


def rollout_settings(spec: TrainingSpec) -> EpisodeSettings:
    """The spec's rollouts: `rollout.n` sampled episodes per prompt of up to
    `rollout.max_turns` model turns, each within `cpu.max_completion_length` tokens after
    its prompt, tool results included (pure: tested without a model)."""
    budget = spec.cpu.max_completion_length
    return EpisodeSettings(
        max_turns=spec.rollout.max_turns,
        max_tokens=budget,
        temperature=spec.rollout.temperature,
        top_p=spec.rollout.top_p,
        completion_budget=budget,
        max_rows=spec.cpu.prompts_per_step * spec.rollout.n,
        call_format=spec.model.call_format,
    )


def episode_rollouts(
    spec: TrainingSpec,
    tokenizer: Any,
    mcp_url: str,
    pool: Sequence[Mapping[str, Any]] = (),
    mcp_token: str | None = None,
) -> EpisodeRollouts:
    """TRL's `rollout_func` for this spec (`rollouts.py`); with `cpu.resample_rounds`,
    flat groups are replaced by groups drawn from `pool` (the train rows)."""
    resampling = None
    if spec.cpu.resample_rounds and pool:
        config = spec.reward.model_copy(update={"call_format": spec.model.call_format})

        def score(ids: Sequence[Sequence[int]], truths: Sequence[object]) -> list[float]:
            return [float(s["score"]) for s in score_completions(tokenizer, ids, truths, config)[1]]

        resampling = Resampling(pool, score, spec.cpu.resample_rounds, spec.cpu.seed)
    return EpisodeRollouts(
        cpu_renderer(tokenizer, spec.model.enable_thinking),
        mcp_url,
        rollout_settings(spec),
        spec.cpu.threads,
        mcp_token=mcp_token,
        tool_timeout_s=spec.tools.timeout_s,
        resampling=resampling,
    )


def run_grpo(
    spec: TrainingSpec,
    start_model: Path,
    train_file: Path,
    run_dir: Path,
    mcp_url: str,
    callbacks: list[Any] | None = None,
    mcp_token: str | None = None,
    replay: SftReplay | None = None,
    trained: AbstractSet[int] = frozenset(),
) -> GrpoResult:
    """GRPO from `start_model` (the SFT output), resuming from `run_dir` when it holds a
    complete checkpoint; checkpoints go to `run_dir/global_step_N` (verl's layout). With
    `replay` (`replay.sft_replay`), each step adds the SFT loss on one of its batches. With
    `trained` (`sft.trained_rows`), prompts come from the rows SFT did not train on first
    (`prompt_pool.py`)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl.trainer.grpo_config import GRPOConfig

    began = time.perf_counter()
    planned = spec.cpu.grpo_steps
    resume = latest_complete_step(run_dir)
    reward_config = spec.reward.model_copy(update={"call_format": spec.model.call_format})
    tokenizer = AutoTokenizer.from_pretrained(str(start_model))
    run_dir.mkdir(parents=True, exist_ok=True)
    reward = ProjectReward(
        tokenizer,
        reward_config,
        spec.drift.max_malformed_rate,
        spec.drift.window,
        spec.drift.margin_over_start,
        transcript_path=run_dir / ROLLOUTS_FILE,
    )
    if resume is not None:
        reward.malformed_history = list(read_data_state(run_dir, resume).get("malformed", []))
    if resume is not None and resume >= planned:
        return GrpoResult(actor_path(run_dir, resume), resume, planned, 0, 0.0, 0, False, resume)
    args = GRPOConfig(**grpo_arguments(spec, run_dir / ".trainer"))
    pool = prompt_pool(
        train_file,
        spec.cpu.grpo_categories,
        trained,
        needed=planned * spec.cpu.prompts_per_step,
        seed=spec.cpu.seed,
        own_templates=grpo_own_rows(spec, train_file),
    )
    rows = pool.rows
    if trained:
        logger.info(pool.describe())
    layout = LayoutCallback(
        run_dir,
        spec.checkpoint.keep,
        spec.cpu.prompts_per_step,
        spec.checkpoint.s3_uri,
        lambda: {"malformed": list(reward.malformed_history)},
    )
    drift = _drift_callback(reward)
    meter = _TokenMeter()
    clock = StepClock()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*rollout_func.*")
        trainer = SharedPrefixGRPOTrainer(
            model=str(start_model),
            reward_funcs=[reward],  # type: ignore[list-item]
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            rollout_func=episode_rollouts(spec, tokenizer, mcp_url, rows, mcp_token),
            callbacks=[
                layout,
                drift,
                meter,
                clock,
                # before the callbacks that forward logs; gives the step's free pages back
                MemoryCallback(release_after_step=True),
                *(callbacks or []),
            ],
        )
    trainer.frozen_context = spec.cpu.frozen_context
    trainer.sft_replay = replay
    trainer.update_tokens = spec.cpu.grpo_update_tokens
    trainer.toolrl_dtype = spec.cpu.dtype
    # GRPO's small steps are below bf16's resolution: round stochastically (precision.py)
    trainer.toolrl_stochastic_rounding = True
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(actor_path(run_dir, resume)) if resume else None)
    seconds = time.perf_counter() - start
    final = latest_complete_step(run_dir) or trainer.state.global_step
    logged = [e for e in trainer.state.log_history if "reward" in e]
    stds = [float(e.get("reward_std", 0.0)) for e in logged]
    prefix = "dynamic_sampling/"
    return GrpoResult(
        model_dir=actor_path(run_dir, final),
        final_step=final,
        planned_steps=planned,
        steps_trained=trainer.state.global_step - (resume or 0),
        seconds=seconds,
        tokens=int(trainer.state.num_input_tokens_seen) - meter.tokens_at_start,
        drift_stopped=bool(drift.stopped),
        resumed_from=resume,
        rewards=[float(e["reward"]) for e in logged],
        malformed_history=list(reward.malformed_history),
        reward_stds=stds,
        flat_batches=trainer.flat_batches,
        zero_std_fractions=[float(e.get("frac_reward_zero_std", 0.0)) for e in logged],
        resampling=[
            {k.removeprefix(prefix): float(v) for k, v in e.items() if k.startswith(prefix)}
            for e in logged
            if any(k.startswith(prefix) for k in e)
        ],
        sft_replay_losses=[float(e["sft_replay_loss"]) for e in logged if "sft_replay_loss" in e],
        rss_gib=[float(e[RSS_KEY]) for e in logged if RSS_KEY in e],
        peak_rss_gib=[float(e[PEAK_KEY]) for e in logged if PEAK_KEY in e],
        setup_seconds=start - began,
        step_seconds=tuple(b - a for a, b in pairwise([start, *clock.ends])),
        prompt_pool=pool.as_dict(),
    )
