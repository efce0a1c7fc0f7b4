"""The group judge inside verl: an async `compute_score` that gathers a prompt's rollouts.

verl 0.9's reward loop scores one rollout per call (`NaiveRewardManager.run_single`), but
many run concurrently on one event loop and a coroutine `compute_score` is awaited there.
So this entry point computes the rule score, then parks the rollout in a per-prompt group
(keyed by `extra_info["index"]`, the dataset row) until `group_size` rollouts have arrived
or `group_wait_s` has passed, and judges the group in one request. A partial group is
judged as it is; a failed judge falls back to the rule scores (counted). Every rollout gets
its answer, nothing waits forever.

Wire it with `reward.custom_reward_function.name=compute_score_judged` plus
`+reward.custom_reward_function.reward_kwargs.group_size=<rollout.n>` (and optionally
`group_wait_s`, `call_format`); the endpoint, model and knobs come from `RULER_*` variables
(`JudgeConfig.from_env`), which reach Ray workers through the job's `runtime_env`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from training.rewards.config import JudgeConfig
from training.rewards.judge import GroupJudge
from training.rewards.score import compute_score


@dataclass
class _Group:
    prompt: str
    trajectories: list[str] = field(default_factory=list)
    rule_scores: list[float] = field(default_factory=list)
    waiters: list[asyncio.Future[tuple[float, float | None, bool]]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class GroupBatcher:
    """Collects concurrent rollouts per prompt and judges each group once."""

    def __init__(self, judge: GroupJudge, group_size: int, wait_s: float) -> None:
        self.judge, self.group_size, self.wait_s = judge, group_size, wait_s
        self._groups: dict[str, _Group] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(
        self, key: str, prompt: str, trajectory: str, rule_score: float
    ) -> tuple[float, float | None, bool]:
        """(combined score, judge score or None, fell back) for one rollout."""
        loop = asyncio.get_running_loop()
        group = self._groups.setdefault(key, _Group(prompt))
        future: asyncio.Future[tuple[float, float | None, bool]] = loop.create_future()
        group.trajectories.append(trajectory)
        group.rule_scores.append(rule_score)
        group.waiters.append(future)
        if len(group.trajectories) >= self.group_size:
            self._flush(key)
        elif group.timer is None:
            group.timer = loop.call_later(self.wait_s, self._flush, key)
        return await future

    def _flush(self, key: str) -> None:
        group = self._groups.pop(key, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._judge(group))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _judge(self, group: _Group) -> None:
        try:
            result = await self.judge.score_group(
                group.prompt, group.trajectories, group.rule_scores
            )
            answers = [
                (score, judged, judged is None)
                for score, judged in zip(result.scores, result.judge_scores, strict=True)
            ]
        except Exception:  # never strand a rollout: fall back to its rule score
            self.judge.stats.fallbacks += len(group.trajectories)
            answers = [(rule, None, True) for rule in group.rule_scores]
        for waiter, answer in zip(group.waiters, answers, strict=True):
            if not waiter.done():
                waiter.set_result(answer)


_STATE: dict[str, Any] = {}


def _batcher(group_size: int, wait_s: float) -> GroupBatcher:
    """One judge and batcher per event loop (the HTTP client and futures belong to it)."""
    loop = asyncio.get_running_loop()
    if _STATE.get("loop") is not loop:
        _STATE.update(loop=loop, batcher=None)
    batcher: GroupBatcher | None = _STATE.get("batcher")
    if batcher is None or batcher.group_size != group_size or batcher.wait_s != wait_s:
        judge = _STATE.get("judge") or GroupJudge(JudgeConfig.from_env())
        _STATE["judge"] = judge
        batcher = GroupBatcher(judge, group_size, wait_s)
        _STATE["batcher"] = batcher
    return batcher


def judge_context(ground_truth: object, extra_info: Mapping[str, Any] | None) -> str:
    """What the judge is told about the task: the user's query when the row carries it, and
    the reference behaviour (expected calls and answers) from the ground truth."""
    parts = []
    if extra_info and extra_info.get("query"):
        parts.append(f"User request: {extra_info['query']}")
    reference = ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth)
    parts.append(f"Reference behaviour (expected calls and answers): {reference[:2000]}")
    return "\n".join(parts) + "\n"


async def compute_score_judged(
    data_source: str | None = None,
    solution_str: str = "",
    ground_truth: object = None,
    extra_info: Mapping[str, Any] | None = None,
    group_size: int = 8,
    group_wait_s: float = 30.0,
    **kwargs: Any,
) -> dict[str, float | str]:
    """The rule reward's dict, with `score` replaced by the judge/rule combination and
    `rule_score`, `judge_score` (-1 when none), `judge_fallback` added."""
    out: dict[str, float | str] = dict(
        compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    )
    rule = float(out["score"])
    out.update(rule_score=rule, judge_score=-1.0, judge_fallback=1.0)
    if out["error"]:  # a broken ground truth is not the judge's business
        return out
    key = str((extra_info or {}).get("index", ground_truth))
    batcher = _batcher(max(1, int(group_size)), float(group_wait_s))
    combined, judged, fell_back = await batcher.submit(
        key, judge_context(ground_truth, extra_info), solution_str, rule
    )
    out.update(score=combined, judge_fallback=float(fell_back))
    if judged is not None:
        out["judge_score"] = judged
    return out
