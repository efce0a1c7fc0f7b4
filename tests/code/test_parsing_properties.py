"""Property tests: the parser, the transcript split and the reward never raise, stay within
their contracts and never hang, whatever a policy emits."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.toolcalls import parse_tool_calls, split_transcript
from training.rewards import compute_score
from training.rewards.drift import format_drift
from training.rewards.samples import make_samples, render_hermes, render_xml, tool_turn

GT = make_samples(1, seed=3)[0].ground_truth
FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<tool_call", "</tool_call", "<function=", "</function>",
    "<parameter=", "</parameter>", ' v2="">', ">", "<", "\n", "{", "}", '"name"', '"arguments"',
    ":", ",", "calculate_math", "get_current_weather", "search_web英文明确", "<think>",
    "</think>", "<tool_response>", "</tool_response>", "user\n", "assistant\n", "null", "[",
    "]", "1e400", "NaN", "\x00", "\ud7ff", "😀", "ℌ",
]  # fmt: skip
tagged_text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=60
).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_reward(text: str) -> None:
    out = compute_score("d", text, GT)
    score = out["score"]
    assert isinstance(score, float)
    assert math.isfinite(score)
    assert -3.0 <= score <= 3.0
    assert out["error"] == ""


@SETTINGS
@given(st.text(max_size=400))
def test_arbitrary_text_never_raises(text: str) -> None:
    for fmt in ("hermes", "qwen3_coder", "auto"):
        result = parse_tool_calls(text, fmt)
        assert result.malformed_count <= len(result.calls)
    split_transcript(text)
    check_reward(text)


@SETTINGS
@given(tagged_text)
def test_tag_soup_never_raises_and_errors_point_at_real_calls(text: str) -> None:
    result = parse_tool_calls(text)
    for error in result.errors:
        assert error.call_index is None or 0 <= error.call_index < len(result.calls)
    for call in result.calls:
        assert 0 <= call.start <= call.end <= len(text)
        assert call.valid == (call.cleaned is not None)
    check_reward(text)


@SETTINGS
@given(st.text(max_size=30), json_values)
def test_arbitrary_json_inside_a_call_never_raises(name: str, arguments: object) -> None:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    check_reward(f"<tool_call>\n{body}\n</tool_call>")
    check_reward(f"<tool_call>\n{json.dumps(arguments)}\n</tool_call>")
    check_reward(render_xml(name.replace(">", ""), {"p": arguments}))


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_every_truncation_of_a_real_rollout_is_handled(seed: int) -> None:
    sample = make_samples(1, seed=seed, malformed_share=0.0)[0].transcript
    for cut in range(0, len(sample), max(1, len(sample) // 60)):
        text = sample[:cut]
        check_reward(text)
        # a well-formed rollout cut anywhere is unfinished or unchanged, never a crash
        assert compute_score("d", text, GT)["finished"] in (0.0, 1.0)


def survives(text: str) -> None:
    """Every consumer of model output takes the text without raising; how long they take on
    these inputs is benchmarks/bench_hostile_inputs.py's figure, the test's timeout only
    catches a hang."""
    for fmt in ("hermes", "qwen3_coder"):
        parse_tool_calls(text, fmt)  # never raises, by contract
    check_reward(text)
    assert format_drift([text]).rollouts == 1


@pytest.mark.timeout(300)
def test_one_megabyte_outputs_are_handled() -> None:
    call = render_hermes("calculate_math", {"expression": "1+1"})
    cases = [
        "a" * 1_000_000,
        "word " * 200_000,
        (call + "\n") * 12_000,
        "<tool_call>" * 90_000,
        "</tool_call>" * 80_000,
        "<function=" * 100_000,
        "<tool_call>\n<function=f>\n" + "<parameter=x>\n" * 70_000,
        ("<tool_call>" + call + tool_turn(["ok"])) * 5_000,
        "天气很好" * 250_000,
    ]
    for text in cases:
        survives(text)


@pytest.mark.timeout(120)
def test_deeply_nested_json_does_not_recurse_out() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    survives(f'<tool_call>{{"name": "calculate_math", "arguments": {deep}}}</tool_call>')
    survives(render_xml("f", {"p": "x"}).replace("x", deep))
    nested = "{" + '"a":{' * 50_000 + "}" * 50_001
    survives(f"<tool_call>{nested}</tool_call>")


def same_parse(text: str) -> None:
    for fmt in ("hermes", "qwen3_coder", "auto"):
        fast = parse_tool_calls(text, fmt)
        slow = parse_tool_calls(text, fmt, fast_path=False)
        assert repr(fast) == repr(slow), (fmt, text)


@SETTINGS
@given(tagged_text)
def test_fast_path_equals_full_scanner_on_tag_soup(text: str) -> None:
    same_parse(text)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.data())
def test_fast_path_equals_full_scanner_on_real_and_mutated_turns(
    seed: int, data: st.DataObject
) -> None:
    for sample in make_samples(3, seed=seed, malformed_share=0.5):
        for turn in split_transcript(sample.transcript).turns:
            same_parse(turn)
            cut = data.draw(st.integers(min_value=0, max_value=len(turn)))
            insert = data.draw(st.sampled_from(FRAGMENTS))
            same_parse(turn[:cut] + insert + turn[cut:])
            same_parse(turn[:cut])
