"""The project's reward, fed from TRL completions exactly as verl feeds it.

verl hands `compute_score` the whole multi-turn response decoded with special tokens
skipped: assistant text, the injected `user` turn with `<tool_response>` blocks, role words,
no `<|im_start|>`/`<|im_end|>`. TRL's `completion_ids` hold the same tokens (model turns
plus the tool-suffix tokens its loop appended), so decoding them the same way gives the same
`solution_str`, and the same `compute_score` scores both paths.

Decoding strips Qwen's *special* tokens only. In Qwen's own tokenizer `<tool_call>`,
`<tool_response>` and `<think>` are added tokens that are not special, so verl keeps them;
this strips by the production list instead of trusting the tokenizer's flags.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.model.tokenizer import QWEN_SPECIAL_TOKENS
from training.rewards.config import RewardConfig
from training.rewards.drift import format_drift, is_drifting
from training.rewards.score import compute_score

#: Tokens Qwen's tokenizer marks special (skipped by verl's decode); the tool-call, tool-
#: response and think tags are added tokens that are *not* special, and stay.
SKIPPED_TOKENS = tuple(t for t in QWEN_SPECIAL_TOKENS if "tool_" not in t and "think" not in t)
#: A rollout's text in `rollouts.jsonl` is cut here: enough to read what went wrong.
TRANSCRIPT_CHARS = 4_000


def strip_special(text: str) -> str:
    for token in SKIPPED_TOKENS:
        if token in text:
            text = text.replace(token, "")
    return text


def solution_str(tokenizer: Any, ids: Sequence[int]) -> str:
    """verl's `solution_str` for one rollout's response token ids."""
    return strip_special(str(tokenizer.decode(list(ids), skip_special_tokens=False)))


def _ground_truth(reward_model: object) -> object:
    if isinstance(reward_model, Mapping):
        return reward_model.get("ground_truth")
    return reward_model


def score_completions(
    tokenizer: Any,
    completion_ids: Sequence[Sequence[int]],
    truths: Sequence[object],
    config: RewardConfig,
) -> tuple[list[str], list[dict[str, Any]]]:
    """Each rollout's verl `solution_str` and its `compute_score` result (score plus
    components): the one place a CPU rollout is rewarded, by GRPO and the quick eval."""
    solutions = [solution_str(tokenizer, ids) for ids in completion_ids]
    scores = [
        compute_score("toolrl/synthetic", text, _ground_truth(truth), None, reward_config=config)
        for text, truth in zip(solutions, truths, strict=True)
    ]
    return solutions, scores


@dataclass
class ProjectReward:
    """A TRL reward function: `(prompts, completions, completion_ids, reward_model, ...)`
    -> one float per completion, from `training.rewards.score.compute_score`.

    It also keeps the per-step malformed-call rate (the format-drift signal) and the mean
    of each reward component of the last batch, for logging and the drift guard.

    With `transcript_path` every scored rollout is appended there as one JSON line (batch,
    row, reward, components, text): what RL rewarded is what a person debugging a run needs
    to read, and the mean reward alone hides it.
    """

    tokenizer: Any
    config: RewardConfig
    drift_threshold: float = 0.3
    drift_window: int = 3
    drift_margin_over_start: float | None = None
    malformed_history: list[float] = field(default_factory=list)
    last_components: dict[str, float] = field(default_factory=dict)
    transcript_path: Path | None = None

    def __post_init__(self) -> None:
        self.__name__ = "toolrl_reward"  # TRL names reward columns by `__name__`

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]],
        reward_model: Sequence[object] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        truths = list(reward_model or [None] * len(completion_ids))
        solutions, scores = score_completions(self.tokenizer, completion_ids, truths, self.config)
        drift = format_drift(solutions, self.config.call_format)
        self.malformed_history.append(drift.malformed_rate)
        components: dict[str, float] = {}
        for key in ("tool_alignment", "ground_truth_match", "format_penalty", "finished"):
            values = [float(s[key]) for s in scores]
            components[f"reward/{key}"] = sum(values) / max(len(values), 1)
        components.update(drift.to_metrics(prefix="format"))
        self.last_components = components
        if self.transcript_path is not None:
            self._append_transcript(solutions, scores, kwargs.get("extra_info"))
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for name, value in components.items():
                log_metric(name, value)
        return [float(s["score"]) for s in scores]

    def _append_transcript(
        self, solutions: list[str], scores: list[dict[str, Any]], extra_info: object
    ) -> None:
        assert self.transcript_path is not None
        batch = len(self.malformed_history) - 1
        infos = list(extra_info) if isinstance(extra_info, Sequence) else []
        with self.transcript_path.open("a", encoding="utf-8") as out:
            for i, (text, score) in enumerate(zip(solutions, scores, strict=True)):
                info = infos[i] if i < len(infos) and isinstance(infos[i], Mapping) else {}
                record = {
                    "batch": batch,
                    "row": info.get("index"),
                    "reward": float(score["score"]),
                    "components": {
                        k: v for k, v in score.items() if k != "score" and isinstance(v, float)
                    },
                    "text": text[:TRANSCRIPT_CHARS],
                }
                out.write(json.dumps(record, ensure_ascii=False) + "\n")

    @property
    def drifting(self) -> bool:
        return is_drifting(
            self.malformed_history,
            self.drift_threshold,
            self.drift_window,
            self.drift_margin_over_start,
        )
