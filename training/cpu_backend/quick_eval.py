"""The quick held-out eval of the CPU training stage: the same episodes and the same
metrics as the evaluation harness, on the model in this process.

Each held-out row runs through the one agent loop (`episodes.py`: greedy, the MCP tools of
the run, up to `rollout.max_turns` turns) and is scored by the harness's own definitions
(`training.evaluation.scoring.score_case`, aggregated by `metrics.summarise`), so the
before / after-SFT / after-GRPO figures the training stage reports are the same measures as
the candidate's evaluation the DAG runs on a served model: a row of the demo's table means
one thing whichever column it is in. `mean_reward` adds the training reward of the same
episodes (`reward.score_completions`, verl's view of the transcript).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from serving.agent import Trajectory
from serving.renderer import ChatRenderer
from serving.toolcalls import active_registry
from training.cpu_backend.episodes import EpisodeJob, EpisodeSettings, run_episodes
from training.cpu_backend.reward import score_completions
from training.evaluation.cases import EvalCase, case_from_row
from training.evaluation.metrics import summarise
from training.evaluation.scoring import CaseResult, score_case
from training.rewards.config import RewardConfig

EXAMPLES = 3
"""Transcripts kept in the result, for a person to read what the model did."""
CASE_RESULTS = "case_results"
"""The block's per-row results (`CaseResult` dumps), kept in the stage's cache file so two
stages can be compared row by row (`candidate_choice.py`), left out of the run's report."""


def report_view(block: Mapping[str, Any]) -> dict[str, Any]:
    """A quick-eval block as the run's report keeps it: figures, not transcripts or rows."""
    return {key: value for key, value in block.items() if key not in ("examples", CASE_RESULTS)}


def case_results(block: Mapping[str, Any] | None) -> list[CaseResult]:
    """The per-row results a block holds; none from a block written before they were kept,
    or from one whose rows do not read as `CaseResult`s (a damaged cache file)."""
    rows = (block or {}).get(CASE_RESULTS)
    if not isinstance(rows, list):
        return []
    try:
        return [CaseResult.model_validate(row) for row in rows]
    except ValueError:
        return []


def score_block(cases: Sequence[EvalCase], trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The harness's metric block of these episodes (one per case, in order), with
    `by_category` and `rows`: what the quick eval reports, from `score_case`/`summarise`."""
    registry = active_registry()
    results: list[CaseResult] = []
    for case, trajectory in zip(cases, trajectories, strict=True):
        result = score_case(case.case_id, case.ground_truth_json, trajectory, registry)
        result.language = case.language
        results.append(result)
    by_category: dict[str, list[CaseResult]] = defaultdict(list)
    for result in results:
        by_category[result.category].append(result)
    block = summarise(results)
    block.update(
        rows=len(results),
        by_category={name: summarise(group) for name, group in sorted(by_category.items())},
    )
    block[CASE_RESULTS] = [result.model_dump(mode="json") for result in results]
    return block


def evaluate(
    model: Any,
    renderer: ChatRenderer,
    rows: Sequence[Mapping[str, Any]],
    mcp_url: str,
    settings: EpisodeSettings,
    reward_config: RewardConfig,
    threads: int,
    mcp_token: str | None = None,
) -> dict[str, Any]:
    """The harness's metric block for `rows` (dataset rows), plus `by_category`, `rows`,
    `mean_reward`, `seconds`, `generated_tokens` and a few `examples`."""
    started = time.perf_counter()
    cases = [case_from_row(index, row) for index, row in enumerate(rows)]
    jobs = [EpisodeJob(case.messages, f"eval-{case.case_id}") for case in cases]
    trajectories = run_episodes(model, renderer, mcp_url, jobs, settings, threads, mcp_token)
    block = score_block(cases, trajectories)
    solutions, scores = score_completions(
        renderer.tokenizer,
        [t.completion_ids for t in trajectories],
        [case.ground_truth_json for case in cases],
        reward_config,
    )
    block.update(
        mean_reward=round(sum(float(s["score"]) for s in scores) / max(len(scores), 1), 6),
        seconds=round(time.perf_counter() - started, 3),
        generated_tokens=sum(t.completion_tokens for t in trajectories),
        examples=[text[:400] for text in solutions[:EXAMPLES]],
    )
    return block
