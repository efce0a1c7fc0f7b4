"""Realistic rollouts for tests and the benchmark: well-formed calls rendered exactly as the
Qwen chat templates render them, multi-turn transcripts as verl decodes them, and the
malformed variants seen in practice (verl issue 6252, the MiniMind notes).

Why in the package: the verl-agreement test, the property tests and `benchmarks/
bench_reward.py` must exercise the same shapes, and the CLI can print an example.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from training.data.schema import Category, ExpectedCall, GroundTruth

Call = tuple[str, dict[str, Any]]

#: Argument sets that pass the catalog's validation, per tool.
VALID_ARGUMENTS: dict[str, list[dict[str, Any]]] = {
    "calculate_math": [{"expression": "256*37"}, {"expression": "sqrt(2)*10"}],
    "unit_converter": [
        {"value": 12.5, "from_unit": "km", "to_unit": "mile"},
        {"value": 100, "from_unit": "degF", "to_unit": "degC"},
    ],
    "get_current_weather": [
        {"location": "Paris"},
        {"location": "北京", "unit": "fahrenheit"},
        {"location": "New York", "unit": "celsius"},
    ],
    "get_current_time": [{"timezone": "Asia/Shanghai"}, {"timezone": "Europe/Paris"}],
    "get_exchange_rate": [
        {"from_currency": "USD", "to_currency": "EUR", "amount": 100},
        {"from_currency": "GBP", "to_currency": "JPY"},
    ],
    "translate_text": [
        {"text": "Good morning,\nhow are you?", "target_language": "french"},
        {"text": "谢谢", "target_language": "english"},
    ],
    "search_knowledge": [{"query": "capital of France", "top_k": 2}, {"query": "laptop price"}],
    "date_calculator": [
        {"operation": "add_days", "start_date": "2025-06-15", "days": 30},
        {"operation": "days_between", "start_date": "2025-01-01", "end_date": "2025-12-25"},
    ],
    "lookup_price": [{"product": "laptop", "currency": "EUR"}, {"product": "phone"}],
    "save_note": [{"title": "trip", "content": "Flight at 9am, gate B12."}],
    "read_note": [{"title": "trip"}],
}


def render_hermes(name: str, arguments: Mapping[str, Any], ascii_only: bool = False) -> str:
    """As `qwen3.jinja` renders an assistant tool call."""
    args = json.dumps(arguments, ensure_ascii=ascii_only)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def render_xml(name: str, arguments: Mapping[str, Any]) -> str:
    """As `qwen3_6.jinja` renders it: strings raw, everything else as JSON."""
    params = "".join(
        f"<parameter={key}>\n"
        f"{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
        "\n</parameter>\n"
        for key, value in arguments.items()
    )
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def render_calls(calls: list[Call], fmt: str) -> str:
    render = render_xml if fmt == "qwen3_coder" else render_hermes
    return "\n".join(render(name, args) for name, args in calls)


def tool_turn(responses: list[str]) -> str:
    """The injected user turn as it reads after special tokens are skipped."""
    body = "".join(f"\n<tool_response>\n{text}\n</tool_response>" for text in responses)
    return f"\nuser{body}\nassistant\n"


@dataclass(frozen=True)
class Sample:
    transcript: str
    ground_truth: str
    well_formed: bool


_ANSWERS = [
    "The result is 9472.",
    "It is 21 degrees and sunny in Paris right now.",
    "100 USD is about 92.35 EUR at today's rate.",
]

_MALFORMED = [
    # verl issue 6252: garbage glued to the function name
    "<tool_call>\n<function=get_current_weather英文明确>\n<parameter=location>\nParis\n"
    "</parameter>\n</function>\n</tool_call>",
    # verl issue 6252: stray attributes on closing tags
    "<tool_call>\n<function=get_current_weather>\n<parameter=location>\nParis\n"
    '</parameter v2="">\n</function v2="">\n</tool_call>',
    # MiniMind: unclosed tag
    '<tool_call>\n{"name": "calculate_math", "arguments": {"expression": "256*37"}}\n',
    # bad JSON
    '<tool_call>\n{"name": "calculate_math", "arguments": {"expression": 256*37}}\n</tool_call>',
    # arguments failing the schema
    '<tool_call>\n{"name": "get_exchange_rate", "arguments": {"from_currency": "dollars"}}\n'
    "</tool_call>",
]


def make_samples(count: int, seed: int = 0, malformed_share: float = 0.3) -> list[Sample]:
    """`count` multi-turn rollouts (1-3 tool turns, parallel calls, reasoning, answers) with
    their ground truth; about `malformed_share` of them carry a malformed call."""
    rng = random.Random(seed)
    names = sorted(VALID_ARGUMENTS)
    samples: list[Sample] = []
    for _ in range(count):
        fmt = rng.choice(["hermes", "qwen3_coder"])
        steps: list[list[Call]] = []
        for _ in range(rng.randint(1, 3)):
            step = [
                (name, dict(rng.choice(VALID_ARGUMENTS[name])))
                for name in rng.sample(names, rng.randint(1, 2))
            ]
            steps.append(step)
        answer = rng.choice(_ANSWERS)
        parts = ["<think>\nI should use the tools for this.\n</think>\n\n"]
        well_formed = rng.random() >= malformed_share
        for index, step in enumerate(steps):
            calls = render_calls(step, fmt)
            if not well_formed and index == len(steps) - 1:
                calls = rng.choice(_MALFORMED)
            parts.append(("Let me check.\n" if index else "") + calls)
            parts.append(tool_turn([json.dumps({"result": 42, "source": "mock"})] * len(step)))
        parts.append(answer)
        truth = GroundTruth(
            category=Category.PARALLEL if len(steps[0]) > 1 else Category.MULTI_STEP,
            steps=[[ExpectedCall(name=n, arguments=a) for n, a in step] for step in steps],
            answers=[answer.split()[-1].rstrip(".")],
        )
        samples.append(Sample("".join(parts), truth.to_json(), well_formed))
    return samples
