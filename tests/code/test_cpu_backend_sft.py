"""SFT warm-start data: every target trajectory is a perfect rollout by the project's own
reward, batches share their tool prompt, and the labels cover assistant tokens only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from serving.tools import get_catalog
from testkit.dataset_rows import builtin_rows
from training.cpu_backend.episodes import cpu_renderer
from training.cpu_backend.sft import sft_rows, tokenize_rows, trajectory
from training.rewards.config import RewardConfig
from training.rewards.rule import score_rollout
from training.rewards.samples import render_hermes, tool_turn


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rows = builtin_rows(160, seed=3)
    return pd.DataFrame([r for r in rows if r["extra_info"]["split"] == "train"])


def as_verl_transcript(messages: list[dict[str, Any]]) -> str:
    """The assistant/tool part of a trajectory as verl decodes a rollout."""
    parts: list[str] = []
    responses: list[str] = []
    for message in messages[2:]:
        if message["role"] == "tool":
            responses.append(message["content"])
            continue
        if responses:
            parts.append(tool_turn(responses))
            responses = []
        calls = message.get("tool_calls") or []
        rendered = [render_hermes(c["function"]["name"], c["function"]["arguments"]) for c in calls]
        parts.append("\n".join(rendered) or message["content"])
    return "".join(parts)


def test_every_sft_target_earns_the_full_reward(frame: pd.DataFrame) -> None:
    config = RewardConfig(call_format="hermes")
    weights = config.weights
    categories = set()
    for record in frame.to_dict("records"):
        messages = trajectory(record)
        result = score_rollout(as_verl_transcript(messages), record["reward_model"]["ground_truth"])
        categories.add(result.category)
        assert result.tool_alignment == weights.alignment_bonus, (record["query"], result)
        assert result.ground_truth_match == pytest.approx(weights.ground_truth_max), record["query"]
        assert result.format_penalty == 0 and result.finished
    assert categories == {"single", "parallel", "multi_step", "irrelevance", "clarification"}


def test_tool_messages_are_the_mock_server_text(frame: pd.DataFrame) -> None:
    record = next(r for r in frame.to_dict("records") if r["category"] == "single")
    tool = next(m for m in trajectory(record) if m["role"] == "tool")
    truth = json.loads(record["reward_model"]["ground_truth"])
    assert json.loads(tool["content"]) == truth["results"][0][0]
    assert tool["content"] == json.dumps(truth["results"][0][0], ensure_ascii=False)


def test_batches_share_a_system_prompt(frame: pd.DataFrame) -> None:
    rows = sft_rows(frame, steps=12, batch_size=4, seed=0)
    assert len(rows) == 48
    for start in range(0, len(rows), 4):
        systems = {row[0]["content"] for row in rows[start : start + 4]}
        assert len(systems) == 1
    assert rows == sft_rows(frame, steps=12, batch_size=4, seed=0)  # resumable order


def test_labels_cover_assistant_turns_only_and_long_rows_are_dropped(
    frame: pd.DataFrame, tmp_path: Path
) -> None:
    from training.model.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(tmp_path, "hermes", 8_192)
    schemas = get_catalog().openai_schemas()
    multi = [r for r in frame.to_dict("records") if r["category"] == "multi_step"][:2]
    rows, dropped = tokenize_rows(
        cpu_renderer(tokenizer, False), [trajectory(r) for r in multi], schemas, 8192
    )
    assert dropped == 0 and len(rows) == 2
    learned = tokenizer.decode([t for t in rows[0]["labels"] if t != -100])
    assert learned.count("<tool_call>") == 2 and "<tool_response>" not in learned
    assert "null" not in learned  # no arguments of other tools leak into the calls
    assert "# Tools" not in learned and multi[0]["query"] not in learned
    _, dropped = tokenize_rows(
        cpu_renderer(tokenizer, False), [trajectory(r) for r in multi], schemas, 300
    )
    assert dropped == 2  # never truncated: the tool prompt alone is longer than 300 tokens


def test_curriculum_rows_come_first_without_the_tool_block(
    frame: pd.DataFrame, tmp_path: Path
) -> None:
    from training.model.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(tmp_path, "hermes", 8_192)
    schemas = get_catalog().openai_schemas()
    trajectories = [trajectory(r) for r in frame.to_dict("records")[:3]]
    rows, _ = tokenize_rows(
        cpu_renderer(tokenizer, False), trajectories, schemas, 8192, short_rows=2
    )
    texts = [tokenizer.decode(row["input_ids"]) for row in rows]
    assert ["# Tools" in text for text in texts] == [False, False, True]
    assert len(rows[0]["input_ids"]) < 1_000 < len(rows[2]["input_ids"])


def _categories(rows: list[list[dict[str, Any]]], frame: pd.DataFrame) -> list[str]:
    by_query = {
        str(r["prompt"][-1]["content"]): str(r["category"]) for r in frame.to_dict("records")
    }
    return [by_query[next(m["content"] for m in row if m["role"] == "user")] for row in rows]


def test_category_weights_bias_a_partial_pass_toward_heavier_categories(
    frame: pd.DataFrame,
) -> None:
    steps, batch = 6, 4  # 24 of the split's rows: a partial pass, as in the demo
    plain = _categories(sft_rows(frame, steps, batch, seed=0), frame)
    heavy = _categories(
        sft_rows(frame, steps, batch, seed=0, category_weights={"parallel": 50.0}), frame
    )
    share = sum(c == "parallel" for c in frame["category"]) / len(frame)
    assert sum(c == "parallel" for c in heavy) > max(
        sum(c == "parallel" for c in plain), share * 24
    )
    assert heavy == _categories(
        sft_rows(frame, steps, batch, seed=0, category_weights={"parallel": 50.0}), frame
    )  # still a seeded, resumable order


def test_weighted_pass_repeats_no_row_before_every_row_has_appeared(frame: pd.DataFrame) -> None:
    english = frame[frame["language"] == "en"]  # one tool prompt: one group, one pass order
    assert len({str(r["prompt"][0]["content"]) for r in english.to_dict("records")}) == 1
    steps = len(english) // 4
    rows = sft_rows(english, steps, 4, seed=1, category_weights={"parallel": 3.0, "single": 0.5})
    queries = [next(m["content"] for m in row if m["role"] == "user") for row in rows]
    assert len(set(queries)) == len(queries) == steps * 4


def test_call_boundary_needs_the_closing_tag_as_one_token(tmp_path: Path) -> None:
    """The prepared tokenizer has `</tool_call>` as one token; one that splits it has no
    single place where a call ends, and the weight is refused with the fix named."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from training.cpu_backend.sft import call_close_token
    from training.model.tokenizer import build_tokenizer

    prepared = build_tokenizer(tmp_path, "hermes", 8_192)
    token = call_close_token(prepared)
    assert prepared.convert_ids_to_tokens(token) == "</tool_call>"

    characters = sorted(set("</tool_call>"))
    raw = Tokenizer(models.WordLevel({c: i for i, c in enumerate(["?", *characters])}, "?"))
    raw.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    splitting = PreTrainedTokenizerFast(tokenizer_object=raw)
    with pytest.raises(ValueError, match=r"one token.*toolrl model prepare"):
        call_close_token(splitting)


def test_call_boundary_weight_is_bounded_and_needs_the_frozen_context() -> None:
    from pydantic import ValidationError

    from training.spec.model import CpuSection

    assert CpuSection().sft_call_boundary_weight == 1.0  # off unless a spec asks
    assert CpuSection(frozen_context=True, sft_call_boundary_weight=5).sft_call_boundary_weight == 5
    for bad in (0.5, 0.0, -3, 51, float("nan"), "heavy"):
        with pytest.raises(ValidationError):
            CpuSection(frozen_context=True, sft_call_boundary_weight=bad)
    with pytest.raises(ValidationError, match="frozen-context SFT loss only"):
        CpuSection(frozen_context=False, sft_call_boundary_weight=5)
