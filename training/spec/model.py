"""TrainingSpec: what a user sets for a GRPO run, typed, with unknown keys rejected.

Every field has a default that is sane for the seed configuration (Qwen3.5-4B on 4 GPUs with
GSPO and `qwen3_coder` calls); `training/specs/*.yaml` hold the seed files. The spec is the
unit of lineage: `spec_hash()` goes into the registry tags.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    field_validator,
    model_validator,
)

from training.data.schema import Category
from training.rewards.config import RewardConfig

CallFormat = Literal["hermes", "qwen3_coder"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Section):
    path: str = Field(
        description="Base model: a local Hugging Face directory, package://DIST (a model a "
        "registry package ships, converted once by `toolrl model prepare`), or "
        "tiny://<call_format> (a ~2M-parameter Qwen3 built locally, for fast tests)."
    )
    start_from: Literal["base", "champion"] = Field(
        default="base",
        description="champion: a pipeline run continues from models:/NAME@champion when one "
        "exists (GRPO on the fresh data after cpu.continue_sft_steps of SFT; the registry "
        "records the parent version); base: always from `path`.",
    )
    call_format: CallFormat = Field(
        default="qwen3_coder",
        description="Tool-call syntax the model's chat template uses (rollout parser).",
    )
    enable_thinking: bool = Field(default=False, description="Render <think> in prompts.")
    gradient_checkpointing: bool = Field(default=True, description="Trade compute for memory.")
    attn_implementation: Literal["flash_attention_2", "sdpa", "eager"] = Field(
        default="flash_attention_2",
        description="Attention of the actor and reference in verl. flash_attention_2 needs the "
        "flash-attn wheel and lets verl drop padding; sdpa runs where no flash-attn build "
        "matches the CUDA/torch pair (sequences then stay padded). vLLM picks its own kernel.",
    )


class DataSection(_Section):
    train_files: list[str] = Field(min_length=1, description="Training parquet files.")
    test_files: list[str] = Field(min_length=1, description="Validation parquet files.")
    dataset_version: str | None = Field(default=None, description="Manifest version (lineage).")
    train_batch_size: int = Field(default=128, ge=1, description="Prompts per step.")
    max_prompt_length: int = Field(default=4_096, ge=64, description="Prompt token budget.")
    max_response_length: int = Field(
        default=4_096, ge=64, description="Budget for all assistant turns + tool responses."
    )


class AlgorithmSection(_Section):
    adv_estimator: Literal["grpo"] = Field(default="grpo", description="Group-relative advantage.")
    loss: Literal["gspo", "vanilla"] = Field(
        default="gspo", description="Policy loss: GSPO (sequence-level ratio) or PPO-clip."
    )
    clip_ratio_low: float = Field(default=3e-4, gt=0, description="Lower clip of the ratio.")
    clip_ratio_high: float = Field(default=4e-4, gt=0, description="Upper clip of the ratio.")
    use_kl_loss: bool = Field(default=True, description="KL to the reference as a loss term.")
    kl_loss_coef: float = Field(default=0.001, ge=0, description="Weight of the KL loss.")
    kl_loss_type: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"] = Field(
        default="low_var_kl", description="KL estimator."
    )
    entropy_coeff: float = Field(default=0.0, ge=0, description="Entropy bonus weight.")
    loss_agg_mode: Literal[
        "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = Field(default="seq-mean-token-mean", description="How token losses are aggregated.")


class RolloutSection(_Section):
    n: int = Field(default=5, ge=2, description="Samples per prompt (the GRPO group).")
    temperature: float = Field(default=1.0, ge=0, le=2, description="Sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling.")
    max_turns: int = Field(default=8, ge=1, le=64, description="Assistant turns per rollout.")
    engine: Literal["vllm", "sglang"] = Field(default="vllm", description="Rollout server.")
    tensor_parallel: int = Field(default=1, ge=1, description="Rollout TP size.")
    gpu_memory_utilization: float = Field(default=0.6, gt=0, le=0.95)
    max_parallel_calls: int = Field(default=4, ge=1, description="Tool calls per turn.")
    tool_response_truncate: int = Field(
        default=2_048, ge=64, description="Chars kept per response."
    )


class OptimSection(_Section):
    lr: float = Field(default=1e-6, gt=0, description="Actor learning rate.")
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(default=0.01, ge=0)
    grad_clip: float = Field(default=1.0, gt=0)


class BatchSection(_Section):
    ppo_mini_batch_size: int = Field(default=32, ge=1, description="Prompts per optimizer step.")
    micro_batch_size_per_gpu: int = Field(default=1, ge=1, description="Per-GPU micro batch.")
    use_dynamic_bsz: bool = Field(default=True, description="Pack by tokens instead.")
    max_token_len_per_gpu: int = Field(default=16_384, ge=256)


class ParallelSection(_Section):
    n_gpus_per_node: int = Field(default=4, ge=1)
    nnodes: int = Field(default=1, ge=1)
    strategy: Literal["fsdp", "fsdp2", "megatron"] = Field(default="fsdp2")
    param_offload: bool = Field(default=False, description="FSDP parameter offload to CPU.")
    optimizer_offload: bool = Field(default=False, description="FSDP optimizer offload to CPU.")
    ulysses_sequence_parallel_size: int = Field(default=1, ge=1)
    megatron_tensor_parallel: int = Field(default=1, ge=1)
    megatron_pipeline_parallel: int = Field(default=1, ge=1)
    megatron_expert_parallel: int = Field(default=1, ge=1)


class CheckpointSection(_Section):
    run_dir: str = Field(default="checkpoints/run", description="Local checkpoint directory.")
    s3_uri: str | None = Field(default=None, description="s3://bucket/prefix mirror of run_dir.")
    save_freq: int = Field(default=10, ge=1, description="Save every N steps.")
    test_freq: int = Field(default=10, ge=1, description="Validate every N steps.")
    keep: int = Field(default=3, ge=1, description="Checkpoints kept (local and S3).")


class ScheduleSection(_Section):
    total_epochs: int = Field(default=1, ge=1)
    total_training_steps: int | None = Field(
        default=None, ge=1, description="Stop after N steps (overrides epochs)."
    )


ToolMode = Literal["mock", "replay", "live", "real"]


class ToolsSection(_Section):
    server_url: str = Field(default="http://127.0.0.1:8000/mcp", description="MCP endpoint.")
    timeout_s: float = Field(default=30.0, gt=0, description="Per tool call.")
    max_concurrency: int = Field(default=64, ge=1, description="Calls in flight per worker.")
    mode: ToolMode = Field(
        default="mock",
        description="Which tools rollouts call (recorded in the lineage tags): mock: the "
        "built-in catalog in the reference context; replay: the recording in `store` "
        "(a user's servers, never touched by training); live: pass-through to the servers "
        "in `sources`, recording into `store` when set (sandboxes only); real: the built-in "
        "catalog with real providers. "
        "The embedded CPU-backend server runs in this mode; an external server at "
        "server_url must be started in it (`toolrl mcp serve --mode ...`).",
    )
    store: str | None = Field(
        default=None,
        description="replay: the CallStore file served (its sidecar `STEM.tools.json` beside "
        "it); its content digest goes into the lineage tags. live: where calls are recorded.",
    )
    sources: str | None = Field(
        default=None, description="live: the tool-sources YAML whose servers are called."
    )

    @model_validator(mode="after")
    def _store_with_replay(self) -> ToolsSection:
        if self.mode == "replay" and not self.store:
            raise ValueError("tools.mode 'replay' needs tools.store (the CallStore file)")
        if self.mode == "live" and not self.sources:
            raise ValueError("tools.mode 'live' needs tools.sources (a tool-sources YAML)")
        if self.mode not in ("replay", "live") and self.store:
            raise ValueError(
                f"tools.store is only used with tools.mode 'replay' or 'live' (not {self.mode!r})"
            )
        if self.mode != "live" and self.sources:
            raise ValueError(
                f"tools.sources is only used with tools.mode 'live' (not {self.mode!r})"
            )
        return self


class JudgeSection(_Section):
    enabled: bool = Field(default=False, description="Add the LLM-as-judge group score.")
    weight: float = Field(default=0.5, ge=0, le=1, description="Judge share in the combined score.")


class DriftSection(_Section):
    max_malformed_rate: float = Field(
        default=0.3, gt=0, le=1, description="Stop when the malformed-call rate exceeds this..."
    )
    window: int = Field(default=3, ge=1, description="...for this many consecutive steps.")
    margin_over_start: float | None = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Drift is a climb from where the run started: when the first GRPO "
        "step's rate plus this is above max_malformed_rate, that is the bar instead (a weak "
        "start that GRPO is improving is not stopped). None: max_malformed_rate alone.",
    )


class TrackingSection(_Section):
    project: str = Field(default="toolrl")
    experiment: str = Field(default="grpo")
    loggers: list[Literal["console", "mlflow", "wandb", "tensorboard"]] = Field(
        default_factory=lambda: ["console", "mlflow"]  # type: ignore[arg-type]
    )


class CpuSection(_Section):
    """The embedded CPU backend (TRL): a short SFT warm start, then GRPO on a tiny model."""

    sft_steps: int = Field(default=300, ge=0, description="SFT warm-start optimizer steps.")
    sft_lr: float = Field(default=3e-3, gt=0, description="SFT learning rate.")
    sft_batch_size: int = Field(default=4, ge=1, description="SFT rows per step.")
    grpo_steps: int = Field(default=20, ge=1, description="GRPO optimizer steps.")
    grpo_lr: float = Field(default=5e-5, gt=0, description="GRPO learning rate.")
    prompts_per_step: int = Field(default=4, ge=1, description="Prompts per GRPO step.")
    time_budget_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds for SFT + GRPO on this machine: the step counts are scaled to "
        "fit, from the measured step cost of the CPU's compute dtype, and the plan is pinned "
        "in the run directory (cpu_backend/budget.py). None: run the steps as written.",
    )
    sft_format_guard: Literal["off", "extend", "stop"] = Field(
        default="off",
        description="What the run does when the quick eval after SFT finds the call format "
        "not learnt (parseable below sft_format_min_parseable): from such a start most GRPO "
        "rollouts are malformed, score alike and teach nothing. extend: GRPO's steps go to "
        "more SFT instead (with a time budget, as many as GRPO's planned time buys; without, "
        "sft_format_extend_steps), and the run ends as an SFT-only candidate; stop: GRPO is "
        "skipped and the run ends incomplete, with that reason; off: GRPO runs anyway "
        "(cpu_backend/format_guard.py).",
    )
    sft_format_min_parseable: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="The quick eval's parseable rate after SFT (tool cases that made a call "
        "attempt with no malformed call) below which the format counts as not learnt. The "
        "demo's promoted runs read 0.70-0.84 here; a run whose SFT did not learn the format, 0.24.",
    )
    sft_format_extend_steps: int = Field(
        default=16,
        ge=1,
        description="SFT steps the format guard's extension trains when no time budget "
        "plans the run (with one, GRPO's planned seconds decide).",
    )
    sft_format_extend_lr: float = Field(
        default=3e-5,
        gt=0,
        description="Peak learning rate of the format guard's extension (the spec's cosine "
        "schedule and floor ratio, fresh optimizer state). Not sft_lr: 16 steps restarted at "
        "3e-4 from an SFT model took its parseable calls from 50% to 5% (docs/parts/"
        "cpu_backend.md, the format guard).",
    )
    grpo_categories: list[Category] = Field(
        default_factory=list,
        description="GRPO prompts only from train rows of these categories (empty: all): "
        "RL aimed at what SFT gets wrong, e.g. [single, clarification, irrelevance] for a "
        "model that over-calls. Measured on SmolLM2-135M: it fixed the over-calling and "
        "multi-step calls still collapsed (docs/parts/cpu_backend.md).",
    )
    grpo_fresh_rows: bool = Field(
        default=False,
        description="GRPO prompts only from train rows the SFT start did not train on "
        "(topped up at random with trained rows when fewer are left than GRPO's steps x "
        "prompts_per_step): a prompt SFT learnt scores alike in every rollout and teaches "
        "GRPO nothing (training/cpu_backend/prompt_pool.py). Off: any row of "
        "grpo_categories. A run continued from a champion trains no SFT and excludes none. "
        "Measured on SmolLM2-135M from one 150-step SFT start: exact call +5.0 points over "
        "it with, +1.2 without (docs/parts/cpu_backend.md). CPU backend only.",
    )
    grpo_own_templates: list[Category] = Field(
        default_factory=list,
        description="Categories whose intents leave part of their train phrasings to GRPO: "
        "SFT never trains on those rows, so GRPO meets the category's decision in a wording "
        "it has not learnt, as the held-out templates are. Per intent and language, the same "
        "rule that picks the test templates picks GRPO's among the train ones; an intent "
        "with one train phrasing in a language keeps it for SFT "
        "(training/cpu_backend/prompt_pool.py). CPU backend only.",
    )
    grpo_sft_replay_coef: float = Field(
        default=0.0,
        ge=0,
        le=10,
        description="Each GRPO step also takes the SFT loss on one batch of the SFT start's "
        "own examples (replayed in the order SFT saw them), times this (InstructGPT's "
        "PPO-ptx): it pulls back what the step's prompts do not ask about. Measured on "
        "SmolLM2-135M at 1.0: single and abstention gains kept, multi-step chains still "
        "fell; with grpo_sft_replay_turn_weight 15 they held (docs/parts/cpu_backend.md). "
        "0: off.",
    )
    grpo_sft_replay_turn_weight: float = Field(
        default=1.0,
        ge=1,
        le=50,
        description="In the SFT replay, each assistant turn's first token (call a tool or "
        "answer; after a tool result, go on with a chain or stop) counts this many times: "
        "the one decision GRPO moved for every category at once (replay.py). Measured on "
        "SmolLM2-135M with coef 1.0 (docs/parts/cpu_backend.md): 15 kept multi-step chains "
        "but held the over-calling; in float32 4 kept them too, in bf16 they fell with 4 "
        "and held with 8 (exact call +19.8 and +16.9 points over the SFT start, two seeds).",
    )
    grpo_sft_replay_boundary_weight: float | None = Field(
        default=None,
        ge=1,
        le=100,
        description="In the SFT replay, the weight of the token after each </tool_call> "
        "(another call in the same turn, or end the turn): the parallel-call decision, which "
        "GRPO on single questions pushes towards 'stop after one call'. None: "
        "sft_call_boundary_weight, as SFT weighed it.",
    )
    grpo_micro_batches: int = Field(
        default=1,
        ge=1,
        le=64,
        description="A GRPO step's update in this many micro-batches of its rollouts, each "
        "backpropagated before the next is built (TRL's gradient accumulation over one "
        "generation): same gradient, a fraction of the graph. Measured on SmolLM2-135M "
        "bf16 with 2: one step of 16 rollouts added 2.9 GiB instead of 4.0, a whole run's "
        "GRPO peak fell from 8.86 to 8.39 GiB (docs/parts/cpu_backend.md). Must divide "
        "prompts_per_step x rollout.n.",
    )
    grpo_update_tokens: int | None = Field(
        default=None,
        ge=64,
        le=65536,
        description="Most trained tokens (the model's own sampled tokens) per backward pass "
        "of a GRPO update: each micro-batch's rollouts are cut, in order, into chunks within "
        "this budget, each backpropagated before the next is built (update_chunks.py), so a "
        "step of long rollouts builds no bigger graph than one of short rollouts. Same "
        "gradient up to rounding. None: one backward pass per micro-batch. Needs "
        "algorithm.entropy_coeff 0 (TRL's entropy bonus is a per-token mean).",
    )
    huge_pages: bool = Field(
        default=True,
        description="Start the training process with 2 MiB pages for its big tensors "
        "(torch's THP_MEM_ALLOC_ENABLE and glibc's malloc.hugetlb tunable; the job driver "
        "restarts itself with them, cpu_backend/huge_pages.py) where the kernel's "
        "transparent-huge-page mode is madvise. Measured (bf16, AMX): the trainer's SFT step "
        "0.88x (huge_pages_trainer.json); in the step benchmark SFT 0.78x, GRPO update 0.92x, "
        "same peak memory (huge_pages.json). false: 4 KiB pages, as before.",
    )
    malloc_mmap_threshold_mib: float | None = Field(
        default=None,
        ge=0.0625,
        le=32,
        description="Allocations of at least this many MiB get their own mmap, returned to "
        "the system when freed (glibc mallopt, memory.py `set_mmap_threshold`); fixing it "
        "also stops glibc from raising it as blocks are freed. None: glibc's default, "
        "under which a GRPO run's resident set climbs over its first steps. Measured "
        "(bf16, SmolLM2-135M, docs/parts/cpu_backend.md): over 8 GRPO steps the peak was "
        "10.12 GiB with the default, 8.93 with 1 MiB, 9.98 with 4 MiB; but at 1 MiB an SFT "
        "step took 1.36x and a GRPO update 1.43x as long (page faults on fresh pages), so "
        "it is for long runs on a host short of memory, not the time-bound demo.",
    )
    onednn_primitive_cache: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Room in oneDNN's primitive cache (ONEDNN_PRIMITIVE_CACHE_CAPACITY, set "
        "by the training process before its first matmul; a value already in the "
        "environment wins; cpu_backend/onednn_cache.py). A bf16 step builds about 65 new "
        "matmul primitives, so oneDNN's default of 1,024 fills in some 15 steps and then "
        "evicts. Measured (bf16, AMX): alone (bench_sft_step_drift.py) the SFT step grew "
        "1.13-1.20x over 60 steps with the default and stayed flat with 65,536; but in "
        "`make demo` 16,384 left the step's drift in place (6.2 -> 7.6 s) and raised the "
        "training peak to 9.0 GiB (7.4-7.6 before). None: oneDNN's default, kept for the "
        "demo. No effect on float32 (AVX2 hosts run MKL, not oneDNN).",
    )
    resample_rounds: int = Field(
        default=0,
        ge=0,
        le=8,
        description="Dynamic sampling: extra generation rounds per GRPO step that replace "
        "each group whose rollouts all scored alike (zero advantage, no signal) with a fresh "
        "train prompt's group that differs (cpu_backend/rollouts.py `Resampling`). 0: off.",
    )
    max_completion_length: int = Field(
        default=192,
        ge=16,
        description="Tokens per rollout after the prompt: every assistant turn and every "
        "tool response (TRL counts both). A cut rollout has no answer and scores low.",
    )
    max_truncated_fraction: float = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        description="Refuse the run when more than this share of train rows have a "
        "reference rollout longer than max_completion_length (cpu_backend/rollout_budget.py)"
        ": GRPO would punish exactly the correct calls of those rows.",
    )
    threads: int = Field(default=2, ge=1, description="torch threads.")
    seed: int = Field(default=0, description="Seed of SFT sampling, GRPO sampling and init.")
    sft_save_freq: int = Field(default=50, ge=1, description="SFT checkpoint every N steps.")
    continue_sft_steps: int = Field(
        default=0,
        ge=0,
        description="SFT steps when continuing from the champion (model.start_from: champion): "
        "0 skips SFT, the champion already knows the format.",
    )
    sft_short_steps: int = Field(
        default=0,
        ge=0,
        description="First SFT steps on prompts without the tool block (a curriculum: short "
        "sequences teach attention local patterns at a tenth of the cost); then full prompts.",
    )
    sft_min_lr_ratio: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="SFT cosine schedule floor as a share of sft_lr: the full-prompt steps "
        "come last in the curriculum and still need a learning rate to adapt.",
    )
    sft_category_weights: dict[Category, PositiveFloat] = Field(
        default_factory=dict,
        description="Relative chance that an SFT pass takes a row of each category (absent: "
        "1.0). A run shorter than one epoch sees more of the heavier ones; rows never repeat "
        "before every row has appeared once (cpu_backend/sft.py `sft_rows`).",
    )
    sft_max_length: int = Field(
        default=4_096, ge=256, description="SFT rows longer than this are dropped, never cut."
    )
    eval_rows: int = Field(
        default=64, ge=0, description="Held-out rows in the quick eval (0: skip it)."
    )
    eval_max_new_tokens: int = Field(default=96, ge=8, description="Tokens per eval turn.")
    eval_batch_size: int = Field(default=16, ge=1, description="Eval rows generated together.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="float32",
        description="Weights for compute. bfloat16: 4-8x faster matmuls on AVX512-BF16/AMX "
        "CPUs, with fp32 master weights in the optimizer (cpu_backend/precision.py), and ~10x "
        "slower than float32 where bf16 is emulated (AVX2 only). auto: bfloat16 where the CPU "
        "has it natively, else float32; pinned in the run dir (cpu_backend/compute_dtype.py).",
    )
    frozen_context: bool = Field(
        default=False,
        description="Gradients through the model's own tokens only; prompts, tool schemas "
        "and tool responses run once without gradient (cpu_backend/packed_loss.py). For a "
        "pretrained model; a model trained from scratch needs the gradient to learn to read.",
    )
    sft_question_gradient: bool = Field(
        default=False,
        description="With frozen_context: SFT gradients also through the user's question "
        "(~30 tokens a row; tool schemas and tool responses stay frozen), so the model can "
        "learn to read what its pretraining never saw, such as Chinese city names "
        "(cpu_backend/packed_loss.py `question_positions`).",
    )
    sft_call_boundary_weight: float = Field(
        default=1.0,
        ge=1.0,
        le=50.0,
        description="With frozen_context: the SFT loss weight of the token after each "
        "</tool_call>, where the model chooses between another call in the same turn "
        "(parallel calls) and ending the turn; every other assistant token weighs 1 "
        "(cpu_backend/packed_loss.py `boundary_weights`).",
    )
    mcp: Literal["embedded", "external"] = Field(
        default="embedded",
        description="embedded: start a mock-mode MCP server on a free loopback port for the "
        "run; external: use tools.server_url (a server that is already running).",
    )

    @field_validator("sft_format_guard", mode="before")
    @classmethod
    def _guard_off_is_yaml_false(cls, value: object) -> object:
        """YAML reads a bare `off` as false: take it as the word the user wrote."""
        return "off" if value is False else value

    @model_validator(mode="after")
    def _boundary_weight_needs_frozen_context(self) -> CpuSection:
        if self.sft_call_boundary_weight != 1.0 and not self.frozen_context:
            raise ValueError(
                "cpu.sft_call_boundary_weight applies to the frozen-context SFT loss only: "
                "set cpu.frozen_context: true, or leave the weight at 1.0"
            )
        if self.grpo_sft_replay_boundary_weight not in (None, 1.0) and not self.frozen_context:
            raise ValueError(
                "cpu.grpo_sft_replay_boundary_weight applies to the frozen-context SFT loss "
                "only: set cpu.frozen_context: true, or leave it unset"
            )
        if self.grpo_sft_replay_turn_weight != 1.0 and not self.frozen_context:
            raise ValueError(
                "cpu.grpo_sft_replay_turn_weight applies to the frozen-context SFT loss only: "
                "set cpu.frozen_context: true, or leave the weight at 1.0"
            )
        return self


class TrainingSpec(_Section):
    """The whole run. Sections mirror how a user thinks, not verl's key tree."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$", description="Run family name.")
    model: ModelSection
    data: DataSection
    algorithm: AlgorithmSection = Field(default_factory=AlgorithmSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    optim: OptimSection = Field(default_factory=OptimSection)
    batch: BatchSection = Field(default_factory=BatchSection)
    parallel: ParallelSection = Field(default_factory=ParallelSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    schedule: ScheduleSection = Field(default_factory=ScheduleSection)
    tools: ToolsSection = Field(default_factory=ToolsSection)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    judge: JudgeSection = Field(default_factory=JudgeSection)
    drift: DriftSection = Field(default_factory=DriftSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    cpu: CpuSection = Field(default_factory=CpuSection)
    verl_overrides: list[str] = Field(
        default_factory=list,
        description="Extra verl Hydra overrides (validated like the generated ones at plan).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TrainingSpec:
        if self.batch.ppo_mini_batch_size > self.data.train_batch_size:
            raise ValueError(
                f"batch.ppo_mini_batch_size ({self.batch.ppo_mini_batch_size}) must not exceed "
                f"data.train_batch_size ({self.data.train_batch_size})"
            )
        if self.data.train_batch_size % self.batch.ppo_mini_batch_size:
            raise ValueError(
                "data.train_batch_size must be a multiple of batch.ppo_mini_batch_size"
            )
        rollouts = self.cpu.prompts_per_step * self.rollout.n
        if rollouts % self.cpu.grpo_micro_batches:
            raise ValueError(
                f"cpu.grpo_micro_batches ({self.cpu.grpo_micro_batches}) must divide a GRPO "
                f"step's rollouts: cpu.prompts_per_step x rollout.n = {rollouts}"
            )
        if self.cpu.grpo_update_tokens is not None and self.algorithm.entropy_coeff > 0:
            raise ValueError(
                "cpu.grpo_update_tokens splits the GRPO loss by rollouts, which TRL's entropy "
                "bonus (a per-token mean) does not survive: set algorithm.entropy_coeff to 0 "
                "or unset cpu.grpo_update_tokens"
            )
        if self.algorithm.clip_ratio_high < self.algorithm.clip_ratio_low * 0.5:
            raise ValueError(
                "algorithm.clip_ratio_high is implausibly small next to clip_ratio_low"
            )
        return self

    def spec_hash(self) -> str:
        """Content hash of the spec (lineage): same settings, same hash."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class SpecError(ValueError):
    """A spec file that cannot be used; the message names the offending field."""


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()
    )


def load_spec(path: Path) -> TrainingSpec:
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read spec {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise SpecError(f"spec {path} must be a YAML mapping, got {type(raw).__name__}")
    try:
        return TrainingSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(f"invalid spec {path}: {_problems(exc)}") from exc


def with_settings(spec: TrainingSpec, assignments: Sequence[str]) -> TrainingSpec:
    """`spec` with `section.field=value` assignments applied (values read as YAML scalars),
    validated again: how a benchmark or the demo's time budget varies one spec without a
    second file. A bad key or value is a `SpecError` naming it."""
    raw = spec.model_dump(mode="json")
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        path = [part for part in key.strip().split(".") if part]
        if not sep or not path:
            raise SpecError(f"expected section.field=value, got {assignment!r}")
        target = raw
        for part in path[:-1]:
            child = target.get(part) if isinstance(target, dict) else None
            if not isinstance(child, dict):
                raise SpecError(f"{key}: {part!r} is not a section of the spec")
            target = child
        if path[-1] not in target:
            raise SpecError(f"{key}: no field {path[-1]!r} there")
        try:
            target[path[-1]] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(f"{key}: value {text!r} is not YAML: {exc}") from exc
    try:
        return TrainingSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(f"invalid setting ({', '.join(assignments)}): {_problems(exc)}") from exc
