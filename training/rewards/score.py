"""verl's reward entry point: `compute_score(data_source, solution_str, ground_truth, ...)`.

verl 0.9 calls it once per rollout with `solution_str` = the whole multi-turn response decoded
with special tokens skipped, and `ground_truth` = the row's `reward_model.ground_truth` (our
`GroundTruth` JSON). It returns a dict: verl takes `score` as the reward and logs every other
key as reward extra info, so the keys are the same for every rollout. Options come through
`reward.custom_reward_function.reward_kwargs` (`call_format`, `reward_config`). It never
raises: a bug here would kill a training step, so it is logged and scored low instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from training.rewards.config import RewardConfig
from training.rewards.drift_log import record_sample
from training.rewards.rule import DEFAULT_CONFIG, RewardBreakdown, score_dict

logger = logging.getLogger(__name__)


@lru_cache(maxsize=64)
def _config_from_json(text: str) -> RewardConfig:
    return RewardConfig.model_validate_json(text)


_BY_FORMAT = {fmt: RewardConfig(call_format=fmt) for fmt in ("hermes", "qwen3_coder", "auto")}


def _plain(value: Any) -> Any:
    """verl hands reward_kwargs over as OmegaConf containers: turn nested mappings and
    sequences into plain dicts and lists so they validate (and hash) like JSON."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or (
        hasattr(value, "__iter__")
        and hasattr(value, "__len__")
        and not isinstance(value, str | bytes)
    ):
        return [_plain(v) for v in value]
    return value


def resolve_config(
    reward_config: Mapping[str, Any] | RewardConfig | None = None, call_format: str | None = None
) -> RewardConfig:
    """The config from verl's reward_kwargs; validated once per distinct value (cached)."""
    if isinstance(reward_config, RewardConfig) and call_format is None:
        return reward_config
    if reward_config is None:
        if call_format is None:
            return DEFAULT_CONFIG
        if call_format in _BY_FORMAT:  # the production case: only `call_format` is set
            return _BY_FORMAT[call_format]
    values: dict[str, Any] = {}
    if isinstance(reward_config, RewardConfig):
        values = reward_config.model_dump()
    elif reward_config is not None:
        values = {str(key): _plain(value) for key, value in dict(reward_config).items()}
    if call_format is not None:
        values["call_format"] = call_format
    return _config_from_json(json.dumps(values, sort_keys=True, default=str))


def compute_score(
    data_source: str | None = None,
    solution_str: str = "",
    ground_truth: object = None,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float | str]:
    """Rule-based reward for one rollout, as a dict with `score` and its components."""
    del data_source, extra_info  # the ground truth carries everything this reward needs
    try:
        config = (
            resolve_config(kwargs.get("reward_config"), kwargs.get("call_format"))
            if kwargs
            else DEFAULT_CONFIG
        )
    except (ValidationError, ValueError, TypeError) as exc:
        # a bad config is an operator error: fail loudly, never train on a wrong reward
        raise ValueError(f"invalid reward config in reward_kwargs: {exc}") from exc
    try:
        scored = score_dict(solution_str, ground_truth, config)
    except Exception as exc:
        logger.exception("reward failed; scoring the rollout as broken")
        broken = RewardBreakdown(
            score=config.weights.clip_low, error=f"internal: {type(exc).__name__}"
        )
        return broken.as_dict()
    record_sample(scored)  # feeds the job driver's format-drift guard when enabled
    return scored
