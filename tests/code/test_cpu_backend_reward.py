"""The reward adapter: a TRL multi-turn completion (token ids as TRL's tool loop builds them)
becomes verl's `solution_str` and is scored by the project's own `compute_score`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from training.cpu_backend.reward import ProjectReward, solution_str
from training.data.schema import Category, ExpectedCall, GroundTruth
from training.rewards.config import RewardConfig
from training.rewards.samples import render_hermes, tool_turn
from training.rewards.score import compute_score

RESULT = {"expression": "256*37", "result": "9472"}
TRUTH = GroundTruth(
    category=Category.SINGLE,
    steps=[[ExpectedCall(name="calculate_math", arguments={"expression": "256*37"})]],
    results=[[RESULT]],
    answers=["9472"],
).to_json()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from training.model.tokenizer import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("tok"), "hermes", 8_192)


def trl_completion_ids(tokenizer: Any, call: str, tool_text: str, answer: str) -> list[int]:
    """Turn ids + TRL's own tool-suffix ids + answer ids, as `_tool_call_loop` joins them."""
    from trl.chat_template_utils import get_training_chat_template
    from trl.trainer.grpo_trainer import GRPOTrainer

    trainer = SimpleNamespace(  # what GRPOTrainer sets for Qwen3 (not prefix-preserving)
        processing_class=tokenizer,
        _tokenizer=tokenizer,
        chat_template=get_training_chat_template(tokenizer),
        chat_template_kwargs={"enable_thinking": False},
        _is_vlm=False,
    )
    suffix = GRPOTrainer._get_tool_suffix_ids(
        trainer, [{"role": "tool", "name": "calculate_math", "content": tool_text}]
    )
    first = tokenizer.encode(call + "<|im_end|>", add_special_tokens=False)
    last = tokenizer.encode(answer + "<|im_end|>", add_special_tokens=False)
    return [*first, *suffix, *last]


def test_solution_str_is_what_verl_decodes(tokenizer: Any) -> None:
    call = render_hermes("calculate_math", {"expression": "256*37"})
    tool_text = json.dumps(RESULT)
    ids = trl_completion_ids(tokenizer, call, tool_text, "The result is 9472.")
    text = solution_str(tokenizer, ids)
    # verl skips <|im_start|>/<|im_end|> but keeps <tool_call>/<tool_response> (not special)
    assert "<|im_end|>" not in text and "<|im_start|>" not in text
    assert text.startswith(call)
    assert "\nuser\n<tool_response>\n" + tool_text + "\n</tool_response>" in text
    assert text.endswith("The result is 9472.")
    # and the same reward as the canonical verl-shaped transcript of that rollout
    canonical = call + tool_turn([tool_text]) + "The result is 9472."
    ours = compute_score("toolrl/synthetic", text, TRUTH, None, call_format="hermes")
    verl = compute_score("toolrl/synthetic", canonical, TRUTH, None, call_format="hermes")
    assert ours["score"] == verl["score"]
    assert ours["matched_calls"] == 1.0 and ours["ground_truth_match"] > 0


def test_reward_function_ranks_rollouts_and_tracks_drift(tokenizer: Any) -> None:
    good = trl_completion_ids(
        tokenizer,
        render_hermes("calculate_math", {"expression": "256*37"}),
        json.dumps(RESULT),
        "The result is 9472.",
    )
    wrong_args = trl_completion_ids(
        tokenizer,
        render_hermes("calculate_math", {"expression": "256*38"}),
        json.dumps({"expression": "256*38", "result": "9728"}),
        "The result is 9728.",
    )
    broken = tokenizer.encode(
        '<tool_call>\n{"name": "calculate_math", "arguments": {"expression": 256*37}}\n'
        "</tool_call><|im_end|>",
        add_special_tokens=False,
    )
    reward = ProjectReward(tokenizer, RewardConfig(call_format="hermes"), 0.3, 2)
    logged: dict[str, float] = {}
    rows = [{"ground_truth": TRUTH}] * 3
    scores = reward(
        prompts=[[]] * 3,
        completions=[[]] * 3,
        completion_ids=[good, wrong_args, broken],
        reward_model=rows,
        log_metric=logged.__setitem__,
    )
    assert scores[0] > scores[1] > scores[2]
    assert reward.malformed_history == [pytest.approx(1 / 3)]
    assert logged["format/malformed_rate"] == pytest.approx(1 / 3)
    assert not reward.drifting  # one step above the threshold is not a trend
    reward(
        prompts=[[]],
        completions=[[]],
        completion_ids=[broken],
        reward_model=rows[:1],
        log_metric=logged.__setitem__,
    )
    assert reward.drifting  # two steps in a row above 0.3


def test_reward_never_raises_on_garbage(tokenizer: Any, tmp_path: Path) -> None:
    reward = ProjectReward(tokenizer, RewardConfig(call_format="hermes"))
    junk = tokenizer.encode("<tool_response>\n}}}</tool_call>", add_special_tokens=False)
    scores = reward([[]], [[]], [junk], [{"ground_truth": "not json"}])
    assert len(scores) == 1 and scores[0] <= 0


def test_every_scored_rollout_is_written_to_the_transcript(tokenizer: Any, tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    reward = ProjectReward(tokenizer, RewardConfig(call_format="hermes"), transcript_path=path)
    good = tokenizer.encode(
        render_hermes("calculate_math", {"expression": "256*37"}) + "<|im_end|>",
        add_special_tokens=False,
    )
    junk = tokenizer.encode("}}}</tool_call>" * 2_000, add_special_tokens=False)
    rows = [{"ground_truth": TRUTH}] * 2
    first = reward([[]] * 2, [[]] * 2, [good, junk], rows, extra_info=[{"index": 7}, "x"])
    second = reward([[]], [[]], [good], rows[:1])  # TRL passes no extra_info: row unknown
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [(r["batch"], r["row"]) for r in lines] == [(0, 7), (0, None), (1, None)]
    assert [r["reward"] for r in lines] == [*first, *second]
    assert "calculate_math" in lines[0]["text"]
    assert len(lines[1]["text"]) <= 4_000  # a runaway rollout does not bloat the file
    assert "tool_alignment" in lines[0]["components"]
