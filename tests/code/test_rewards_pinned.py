"""Pinned scores: the rule reward's output on a fixed corpus of rollouts must not move.

`fixtures/reward_pinned.json.gz` holds 545 rollouts with their ground truths and the score
dicts `compute_score` returned for them before the speed work of issue 4: rows of
`benchmarks/bench_reward.py` (every malformation it makes, in the `auto`, `hermes` and
`qwen3_coder` call formats), `make_samples` rollouts, rows with tags and numbers inserted at
random, truncated rows, and irrelevance, clarification, free-argument, text-answer and
invalid ground truths. Every format-error kind occurs. The reward is tuned for speed, and a
speed-up must not change a score by even one bit: floats are compared by `repr`.

A deliberate change of the reward regenerates the expected dicts from the current code
(`python tests/code/test_rewards_pinned.py`) and says why in its commit.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from serving.toolcalls import catalog_registry
from training.rewards import RewardConfig, compute_score, score_rollout
from training.rewards import rule as rule_module

CORPUS = Path(__file__).parent / "fixtures" / "reward_pinned.json.gz"


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(gzip.decompress(CORPUS.read_bytes()))
    return data


def score(data: dict[str, Any], case: dict[str, Any]) -> dict[str, float | str]:
    truth = data["truths"][case["truth"]]
    return compute_score(
        "toolrl/synthetic", case["text"], truth, {}, call_format=case["call_format"]
    )


def clear_caches() -> None:
    catalog_registry().parse_cache.clear()
    rule_module.clear_truth_cache()


def test_scores_of_the_pinned_corpus_are_unchanged_with_caches_cold_and_warm() -> None:
    data = load()
    assert len(data["cases"]) == 545
    clear_caches()
    for attempt in ("cold", "warm"):  # first pass fills the ground-truth and call caches
        for index, case in enumerate(data["cases"]):
            got, expected = score(data, case), case["expected"]
            config = RewardConfig(call_format=case["call_format"])
            truth = data["truths"][case["truth"]]
            assert score_rollout(case["text"], truth, config).as_dict() == got, (attempt, index)
            assert set(got) == set(expected), (attempt, index)
            assert {k: repr(v) for k, v in got.items()} == {
                k: repr(v) for k, v in expected.items()
            }, (attempt, index, case["text"][:200])


if __name__ == "__main__":  # regenerate after a deliberate change of the reward
    corpus = load()
    for item in corpus["cases"]:
        item["expected"] = score(corpus, item)
    raw = json.dumps(corpus, ensure_ascii=False, sort_keys=True).encode()
    CORPUS.write_bytes(gzip.compress(raw, mtime=0))
