"""The judge's reply parser and request builder, without a server: whatever the judge
says, the result is either one valid score per trajectory or a JudgeReplyError (which the
judge turns into a counted fallback)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from training.rewards.config import JudgeConfig
from training.rewards.judge import JudgeReplyError, build_messages, common_prefix, parse_reply

json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), json_values.map(json.dumps)), st.integers(1, 5))
def test_any_reply_is_scores_or_a_reply_error(content: str, count: int) -> None:
    try:
        scores, reasons = parse_reply(content, count)
    except JudgeReplyError:
        return
    assert len(scores) == len(reasons) == count
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_well_formed_reply_in_a_code_fence_with_ids_as_numbers() -> None:
    reply = "```json\n" + json.dumps(
        {"scores": [{"trajectory_id": 2, "explanation": "b", "score": 0.1},
                    {"trajectory_id": "1", "explanation": "a", "score": 1}]}
    ) + "\n```"  # fmt: skip
    assert parse_reply(reply, 2) == ([1.0, 0.1], ["a", "b"])
    with pytest.raises(JudgeReplyError):
        parse_reply(reply, 3)
    huge = '{"scores": [{"trajectory_id": "1", "score": 1' + "0" * 400 + "}]}"
    with pytest.raises(JudgeReplyError):
        parse_reply(huge, 1)


def test_common_prefix_is_cut_at_a_line_start_and_sent_once() -> None:
    group = ["shared line\nalpha", "shared line\nbeta", "shared line\nbet"]
    assert common_prefix(group) == "shared line\n"
    assert common_prefix(["only one"]) == ""
    messages = build_messages(JudgeConfig(), "PROMPT\n", group)
    user = messages[1]["content"]
    assert user.count("shared line") == 1
    assert '<trajectory id="3">\nbet\n</trajectory>' in user
