"""Corpus of malformed outputs reported in practice, with the error kinds and scores expected.

Sources: verl issue 6252 (Qwen3.5/3.6 agent RL collapse: garbage glued to function names,
stray `v2=""` attributes on closing tags, JSON tool schemas next to XML calls) and the
MiniMind agent-RL notes (unclosed tags, JSON that fails to parse, no tool call at all, the
worked failure example). Each case is a whole rollout as verl hands it to the reward.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from serving.toolcalls import ToolRegistry
from training.data.schema import Category, ExpectedCall, GroundTruth
from training.rewards import RewardConfig, score_rollout
from training.rewards.drift import format_drift
from training.rewards.samples import render_hermes, tool_turn

WEB_TOOLS = ToolRegistry.from_openai_schemas(
    [
        {
            "name": "search_web",
            "parameters": {
                "type": "object",
                "properties": {"queries": {"type": "array"}},
                "required": ["queries"],
            },
        },
        {
            "name": "fetch_web",
            "parameters": {
                "type": "object",
                "properties": {"urls": {"type": "array"}},
                "required": ["urls"],
            },
        },
    ]
)
GDP_QUERIES = [
    "Japan annual GDP latest year nominal GDP official statistic",
    "Japan nominal GDP 2024 2025 government statistic",
]
GDP_TRUTH = GroundTruth(
    category=Category.SINGLE,
    steps=[[ExpectedCall(name="search_web", arguments={"queries": GDP_QUERIES})]],
    answers=["4.2"],
).to_json()
XRP_QUERIES = [
    "XRP latest news January 2026",
    "Ripple SEC case update January 2026 XRP",
    "XRP ETF speculation January 2026",
    "XRP on-chain activity exchange inflows January 2026",
]
XRP_TRUTH = GroundTruth(
    category=Category.SINGLE,
    steps=[[ExpectedCall(name="search_web", arguments={"queries": XRP_QUERIES})]],
    answers=["XRP"],
).to_json()
MATH_TRUTH = GroundTruth(
    category=Category.SINGLE,
    steps=[[ExpectedCall(name="calculate_math", arguments={"expression": "256*37"})]],
    answers=["9472"],
).to_json()
MATH_CALL = render_hermes("calculate_math", {"expression": "256*37"})
QUOTED = '["' + '", "'.join(GDP_QUERIES) + '"]'
XRP_QUOTED = '["' + '", "'.join(XRP_QUERIES) + '"]'


@dataclass(frozen=True)
class Case:
    name: str
    transcript: str
    truth: str
    kinds: dict[str, int]
    score: float
    malformed: int
    web: bool = False
    call_format: str = "auto"


CASES = [
    Case(
        "6252 example 1: garbage glued to the function name, then an answer",
        "I need a recent source that states the nominal GDP value and year so I can cite it "
        "directly.</think><tool_call>\n<function=search_web英文明确>\n<parameter=queries>\n"
        f"{QUOTED}\n</parameter>\n</function>\n</tool_call>"
        + tool_turn(["Unknown function 'search_web英文明确'. Available tools: ['search_web']"])
        + "Japan's nominal GDP was about 4.2 trillion USD in 2024.",
        GDP_TRUTH,
        {"garbage_in_name": 1},
        # format -0.5, alignment -0.5 x (1 missing + 1 invalid), answer +2.5
        1.0,
        1,
        web=True,
        call_format="qwen3_coder",
    ),
    Case(
        "6252 example 2: stray v2 attributes on closing tags; the run stops there",
        "but first I need fresh evidence.</think><tool_call>\n<function=search_web>\n"
        f'<parameter=queries>\n{XRP_QUOTED}\n</parameter v2="">\n</function v2="">\n'
        "</tool_call>",
        XRP_TRUTH,
        {"stray_attribute": 2},
        # format -1.0, alignment -1.0, unfinished -0.5
        -2.5,
        1,
        web=True,
        call_format="qwen3_coder",
    ),
    Case(
        "6252: the same call without the attributes is clean",
        "fresh evidence.</think><tool_call>\n<function=search_web>\n"
        f"<parameter=queries>\n{XRP_QUOTED}\n</parameter>\n</function>\n</tool_call>"
        + tool_turn(['{"results": ["XRP rallied"]}'])
        + "XRP rallied this week.",
        XRP_TRUTH,
        {},
        3.0,
        0,
        web=True,
        call_format="qwen3_coder",
    ),
    Case(
        "6252 concern: a JSON call where the XML format is expected",
        '<tool_call>\n{"name": "search_web", "arguments": {"queries": ["XRP"]}}\n</tool_call>',
        XRP_TRUTH,
        {"wrong_format": 1},
        -2.0,
        1,
        web=True,
        call_format="qwen3_coder",
    ),
    Case(
        "MiniMind worked failure: unclosed tag, an extra call, no final answer",
        MATH_CALL
        + '\n<tool_call>\n{"name": "calculate_math", "arguments": {"expression": "1"}}'
        + tool_turn(['{"result": "9472"}']),
        MATH_TRUTH,
        {"unclosed_tag": 1},
        -1.5,
        1,
    ),
    Case(
        "MiniMind diagnosis: JSON that fails to parse (verl skips it, the loop ends)",
        '<tool_call>\n{"name": "calculate_math", "arguments": {"expression": 256*37}}\n'
        "</tool_call>",
        MATH_TRUTH,
        {"bad_json": 1},
        -2.0,
        1,
    ),
    Case(
        "MiniMind diagnosis: never calls a tool, answers from memory",
        "256 times 37 is 9472.",
        MATH_TRUTH,
        {},
        2.0,
        0,
    ),
    Case(
        "MiniMind worked success",
        MATH_CALL + tool_turn(['{"result": "9472"}']) + "256*37=9472",
        MATH_TRUTH,
        {},
        3.0,
        0,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_has_expected_kinds_and_score(case: Case) -> None:
    config = RewardConfig.model_validate({"call_format": case.call_format})
    registry = WEB_TOOLS if case.web else None
    result = score_rollout(case.transcript, case.truth, config, registry)
    assert result.error_kinds == case.kinds
    assert result.malformed_calls == case.malformed
    assert result.score == pytest.approx(case.score)


def test_drift_signal_over_the_corpus_counts_malformed_calls_by_kind() -> None:
    web = [c.transcript for c in CASES if c.web]
    report = format_drift(web, "qwen3_coder", WEB_TOOLS)
    assert report.calls == 4
    assert report.malformed_calls == 3
    assert report.malformed_rate == pytest.approx(0.75)
    assert report.errors_by_kind == {"garbage_in_name": 1, "stray_attribute": 2, "wrong_format": 1}
