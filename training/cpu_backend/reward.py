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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from training.model.tokenizer import QWEN_SPECIAL_TOKENS
from training.rewards.config import RewardConfig
from training.rewards.drift import format_drift, is_drifting
from training.rewards.score import compute_score

#: Tokens Qwen's tokenizer marks special (skipped by verl's decode); the tool-call, tool-
#: response and think tags are added tokens that are *not* special, and stay.
SKIPPED_TOKENS = tuple(t for t in QWEN_SPECIAL_TOKENS if "tool_" not in t and "think" not in t)


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


@dataclass
class ProjectReward:
    """A TRL reward function: `(prompts, completions, completion_ids, reward_model, ...)`
    -> one float per completion, from `training.rewards.score.compute_score`.

    It also keeps the per-step malformed-call rate (the format-drift signal) and the mean
    of each reward component of the last batch, for logging and the drift guard.
    """

    tokenizer: Any
    config: RewardConfig
    drift_threshold: float = 0.3
    drift_window: int = 3
    malformed_history: list[float] = field(default_factory=list)
    last_components: dict[str, float] = field(default_factory=dict)

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
        solutions = [solution_str(self.tokenizer, ids) for ids in completion_ids]
        scores = [
            compute_score(
                "toolrl/synthetic", text, _ground_truth(truth), None, reward_config=self.config
            )
            for text, truth in zip(solutions, truths, strict=True)
        ]
        drift = format_drift(solutions, self.config.call_format)
        self.malformed_history.append(drift.malformed_rate)
        components: dict[str, float] = {}
        for key in ("tool_alignment", "ground_truth_match", "format_penalty", "finished"):
            values = [float(s[key]) for s in scores]
            components[f"reward/{key}"] = sum(values) / max(len(values), 1)
        components.update(drift.to_metrics(prefix="format"))
        self.last_components = components
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for name, value in components.items():
                log_metric(name, value)
        return [float(s["score"]) for s in scores]

    @property
    def drifting(self) -> bool:
        return is_drifting(self.malformed_history, self.drift_threshold, self.drift_window)
