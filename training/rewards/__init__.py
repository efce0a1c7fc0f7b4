"""Rewards for tool-calling RL: the rule-based score verl calls per rollout, the RULER-style
group judge, and the format-drift signal the training guard watches."""

from training.rewards.config import JudgeConfig, RewardConfig, RuleWeights
from training.rewards.rule import RewardBreakdown, score_rollout
from training.rewards.score import compute_score

__all__ = [
    "JudgeConfig",
    "RewardBreakdown",
    "RewardConfig",
    "RuleWeights",
    "compute_score",
    "score_rollout",
]
