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
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serving.agent import Trajectory
from serving.renderer import ChatRenderer
from training.cpu_backend.episodes import EpisodeJob, EpisodeSettings, run_episodes


class RolloutError(RuntimeError):
    """A batch could not be rolled out (the tool server is down): training stops here
    rather than learn from episodes that never saw a tool."""


def _row_index(row: Mapping[str, Any]) -> str:
    extra = row.get("extra_info")
    return str(extra.get("index", "x")) if isinstance(extra, Mapping) else "x"


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
    last: list[Trajectory] = field(default_factory=list)
    """The trajectories of the latest batch (for logging and tests)."""
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def jobs(self, prompts: Sequence[Any], rows: Sequence[Mapping[str, Any]]) -> list[EpisodeJob]:
        return [
            EpisodeJob(list(prompt), f"row-{_row_index(row)}/{self.process}-{next(self._counter)}")
            for prompt, row in zip(prompts, rows, strict=True)
        ]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        rows = getattr(trainer, "toolrl_batch_rows", None) or [{}] * len(prompts)
        model = trainer.accelerator.unwrap_model(trainer.model)
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
        self.last = trajectories
        return {
            "prompt_ids": [t.prompt_ids for t in trajectories],
            "completion_ids": [t.completion_ids for t in trajectories],
            "env_mask": [t.model_token_mask for t in trajectories],
            "logprobs": None,
        }
