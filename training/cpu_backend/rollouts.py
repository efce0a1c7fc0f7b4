"""GRPO rollouts through the one agent loop: TRL's `rollout_func` hook, fed by `episodes.py`.

TRL's `GRPOTrainer` calls `rollout_func(prompts, trainer)` for each batch (every prompt
already repeated `num_generations` times) and trains on what it returns: the prompt tokens,
the completion tokens, and `env_mask`, 1 on the tokens the model wrote and 0 on the ones
the environment placed (tool results, the template's turn headers), which the loss skips.
So TRL keeps the optimisation (advantages, GSPO/PPO loss, KL, checkpoints) and the episodes
are the project's own: the same loop, parser, renderer and MCP client as serving and
evaluation, on the engine's continuous batching in this process.

Each rollout gets its own tool session (`row-<index>/<process>-<n>`): the notes tools
remember per session, so the rollouts of one group never read each other's notes, and the
mock server's seeded faults are drawn per session.

Dynamic sampling (`Resampling`, as DAPO and ToolExpander do): a group whose rollouts all
scored alike has zero advantage and teaches nothing; with a small model most groups are
like that (75% in a 2026-12-03 demo run). Such a group is replaced by a fresh train prompt's
group that does differ, drawn in up to `rounds` extra rounds. The replacement's ground
truth reaches the reward function through TRL's extra rollout fields (`reward_model`,
`extra_info` override the batch rows' own), so the reward scores what was generated.
"""

from __future__ import annotations

import itertools
import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serving.agent import Trajectory
from serving.renderer import ChatRenderer
from training.cpu_backend.episodes import EpisodeJob, EpisodeSettings, run_episodes

logger = logging.getLogger(__name__)

#: Rewards closer than this count as alike (a group with no spread).
SPREAD = 1e-6


class RolloutError(RuntimeError):
    """A batch could not be rolled out (the tool server is down): training stops here
    rather than learn from episodes that never saw a tool."""


def _row_index(row: Mapping[str, Any]) -> str:
    extra = row.get("extra_info")
    return str(extra.get("index", "x")) if isinstance(extra, Mapping) else "x"


@dataclass
class Resampling:
    """Dynamic sampling: replace groups without reward spread by groups that have some."""

    pool: Sequence[Mapping[str, Any]]
    """Train rows to draw replacements from (`prompt_pool.prompt_pool`: prompt, reward_model,
    extra_info)."""
    score: Callable[[Sequence[Sequence[int]], Sequence[object]], list[float]]
    """Rewards of completions given their ground truths (the run's reward function)."""
    rounds: int = 1
    """Extra generation rounds per batch at most; each draws one prompt per flat group."""
    seed: int = 0
    _random: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def draw(self, count: int, exclude: set[str]) -> list[Mapping[str, Any]]:
        """`count` pool rows not in `exclude` (row indices), without repeats."""
        fresh = [row for row in self.pool if _row_index(row) not in exclude]
        return self._random.sample(fresh, min(count, len(fresh)))


def flat_groups(rewards: Sequence[float], group: int) -> list[int]:
    """The groups (consecutive runs of `group` rollouts) whose rewards are all alike."""
    return [
        start // group
        for start in range(0, len(rewards), group)
        if max(rewards[start : start + group]) - min(rewards[start : start + group]) < SPREAD
    ]


@dataclass
class EpisodeRollouts:
    """`rollout_func` for TRL: every prompt of the batch as one episode of the agent loop."""

    renderer: ChatRenderer
    mcp_url: str
    settings: EpisodeSettings
    threads: int
    mcp_token: str | None = None
    tool_timeout_s: float = 30.0
    process: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    """Per-process session prefix: a restarted run never reuses a session the server
    remembers."""
    resampling: Resampling | None = None
    last: list[Trajectory] = field(default_factory=list)
    """The trajectories of the latest batch (for logging and tests)."""
    last_stats: dict[str, float] = field(default_factory=dict)
    """Dynamic sampling figures of the latest batch: flat groups before and after, extra
    rollouts generated."""
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def jobs(self, prompts: Sequence[Any], rows: Sequence[Mapping[str, Any]]) -> list[EpisodeJob]:
        return [
            EpisodeJob(list(prompt), f"row-{_row_index(row)}/{self.process}-{next(self._counter)}")
            for prompt, row in zip(prompts, rows, strict=True)
        ]

    def _episodes(
        self, model: Any, prompts: Sequence[Any], rows: Sequence[Mapping[str, Any]]
    ) -> list[Trajectory]:
        trajectories = run_episodes(
            model,
            self.renderer,
            self.mcp_url,
            self.jobs(prompts, rows),
            self.settings,
            self.threads,
            self.mcp_token,
            self.tool_timeout_s,
        )
        unusable = [t for t in trajectories if not t.prompt_ids or not t.completion_ids]
        if unusable:
            raise RolloutError(
                f"{len(unusable)} of {len(trajectories)} rollouts produced no tokens; the first "
                f"said: {unusable[0].error or unusable[0].stop}. Is the MCP server at "
                f"{self.mcp_url} up?"
            )
        return trajectories

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        rows = list(getattr(trainer, "toolrl_batch_rows", None) or [{}] * len(prompts))
        model = trainer.accelerator.unwrap_model(trainer.model)
        trajectories = self._episodes(model, prompts, rows)
        if self.resampling is not None:
            group = int(getattr(trainer, "num_generations", 1) or 1)
            trajectories, rows = self._resample(model, trajectories, rows, group)
            metrics = getattr(trainer, "_metrics", None)
            if isinstance(metrics, Mapping) and "train" in metrics:
                for name, value in self.last_stats.items():
                    metrics["train"][f"dynamic_sampling/{name}"].append(value)
        self.last = trajectories
        return {
            "prompt_ids": [t.prompt_ids for t in trajectories],
            "completion_ids": [t.completion_ids for t in trajectories],
            "env_mask": [t.model_token_mask for t in trajectories],
            "logprobs": None,
            # the rows actually rolled out (replacements included): the reward reads these
            "reward_model": [row.get("reward_model") for row in rows],
            "extra_info": [row.get("extra_info") for row in rows],
        }

    def _resample(
        self,
        model: Any,
        trajectories: list[Trajectory],
        rows: list[Mapping[str, Any]],
        group: int,
    ) -> tuple[list[Trajectory], list[Mapping[str, Any]]]:
        """Replace flat groups by drawn groups with reward spread, up to `rounds` rounds."""
        assert self.resampling is not None
        resampling = self.resampling

        def rewards(
            batch: Sequence[Trajectory], truths: Sequence[Mapping[str, Any]]
        ) -> list[float]:
            return resampling.score(
                [t.completion_ids for t in batch], [r.get("reward_model") for r in truths]
            )

        flat = flat_groups(rewards(trajectories, rows), group)
        before, extra = len(flat), 0
        seen = {_row_index(row) for row in rows}
        for _ in range(resampling.rounds):
            if not flat:
                break
            drawn = resampling.draw(len(flat), seen)
            if not drawn:
                break
            seen.update(_row_index(row) for row in drawn)
            new_rows = [row for row in drawn for _ in range(group)]
            fresh = self._episodes(model, [row["prompt"] for row in new_rows], new_rows)
            extra += len(fresh)
            useful = set(range(len(drawn))) - set(flat_groups(rewards(fresh, new_rows), group))
            for target, source in zip(flat, sorted(useful), strict=False):
                span, taken = (
                    slice(target * group, (target + 1) * group),
                    slice(source * group, (source + 1) * group),
                )
                trajectories[span], rows[span] = fresh[taken], new_rows[taken]
            flat = flat[len(useful) :]
        self.last_stats = {
            "flat_groups_drawn": float(before),
            "flat_groups_kept": float(len(flat)),
            "extra_rollouts": float(extra),
        }
        logger.info(
            "dynamic sampling: %d of %d groups had no reward spread, %d replaced (%d extra "
            "rollouts)",
            before,
            len(rows) // group,
            before - len(flat),
            extra,
        )
        return trajectories, rows
