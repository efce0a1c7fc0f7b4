"""One definition of each metric: the same trajectories, scored through every consumer (the
evaluation harness, the CPU backend's quick eval, the demo's table and the benchmarks),
give the same numbers, and those numbers are the definitions `scoring.py` states.

The harness runs the trajectories for real through the agent loop: a replay backend hands
back each case's recorded model turns and a replay tool server its recorded results, so the
loop parses, executes and records them exactly as it does against a served model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from serving.agent import Agent, AgentConfig, Trajectory, Turn
from serving.agent.backends import EpisodeContext
from serving.toolcalls import catalog_registry
from testkit.benchmark_scripts import load_benchmark
from training.cpu_backend.quick_eval import score_block
from training.evaluation.cases import EvalCase, case_from_row
from training.evaluation.metrics import HEADLINE_METRICS, aggregate
from training.evaluation.runner import run_cases
from training.ops.demo.report import before_after_table


def _truth(
    category: str,
    steps: list[list[tuple[str, dict[str, Any]]]],
    answers: list[str],
    results: list[list[Any]] | None = None,
    missing: str | None = None,
) -> str:
    return json.dumps(
        {
            "schema_version": 1,
            "category": category,
            "steps": [
                [{"name": n, "arguments": a, "free_arguments": []} for n, a in step]
                for step in steps
            ],
            "results": results or [[{"ok": True} for _ in step] for step in steps],
            "answers": answers,
            "missing_argument": missing,
        }
    )


PARIS = ("get_current_weather", {"location": "Paris"})
OSLO = ("get_current_weather", {"location": "Oslo"})
MATH = ("calculate_math", {"expression": "256*37"})


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


#: (case id, category, ground truth, model turns as raw text, final answer)
SCRIPT: list[tuple[str, str, str, list[str]]] = [
    (
        "right",
        "single",
        _truth("single", [[MATH]], ["9472"]),
        [_call_text(*MATH), "The result is 9472."],
    ),
    (
        "extra_call",
        "single",
        _truth("single", [[MATH]], ["9472"]),
        [_call_text(*MATH) + "\n" + _call_text(*PARIS), "The result is 9472."],
    ),
    (
        "repeated",
        "single",
        _truth("single", [[MATH]], ["9472"]),
        [_call_text(*MATH), _call_text(*MATH), "The result is 9472."],
    ),
    (
        "wrong_tool",
        "single",
        _truth("single", [[MATH]], ["9472"]),
        [_call_text(*PARIS), "It is 21 degrees."],
    ),
    (
        "wrong_args",
        "single",
        _truth("single", [[MATH]], ["9472"]),
        [_call_text("calculate_math", {"expression": "256*38"}), "The result is 9728."],
    ),
    (
        "malformed",
        "single",
        _truth("single", [[MATH]], ["9472"]),
        [
            '<tool_call>\n{"name": "calculate_math", "arguments": {\n</tool_call>',
            _call_text(*MATH),
            "The result is 9472.",
        ],
    ),
    (
        "parallel_ok",
        "parallel",
        _truth("parallel", [[PARIS, OSLO]], []),
        [_call_text(*PARIS) + "\n" + _call_text(*OSLO), "Paris and Oslo: mild."],
    ),
    (
        "parallel_half",
        "parallel",
        _truth("parallel", [[PARIS, OSLO]], []),
        [_call_text(*PARIS), "Paris is mild."],
    ),
    (
        "irrelevant_ok",
        "irrelevance",
        _truth("irrelevance", [], []),
        ["I can answer this directly without any tool."],
    ),
    (
        "irrelevant_call",
        "irrelevance",
        _truth("irrelevance", [], []),
        [_call_text(*PARIS), "It is mild."],
    ),
    (
        "clarify_ok",
        "clarification",
        _truth("clarification", [], [], [], missing="location"),
        ["Could you tell me the location? I need it to do this."],
    ),
]


def _cases() -> list[EvalCase]:
    return [
        case_from_row(
            index,
            {
                "prompt": [{"role": "user", "content": f"case {case_id}"}],
                "reward_model": {"ground_truth": truth},
                "extra_info": {"index": case_id, "split": "test"},
                "category": category,
                "language": "en",
            },
        )
        for index, (case_id, category, truth, _) in enumerate(SCRIPT)
    ]


class ReplayBackend:
    """Hands back each case's recorded model turns, in order (the case is read from the
    user message); the loop parses them with the project's parser as raw text."""

    def __init__(self) -> None:
        self.turns = {f"case {case_id}": list(turns) for case_id, _, _, turns in SCRIPT}

    async def respond(
        self, context: EpisodeContext, overrides: Mapping[str, Any], on_text: Any
    ) -> Turn:
        text = self.turns[context.messages[0]["content"]].pop(0)
        return Turn(content=text, text=text, source="raw")


class ReplayTools:
    async def list_tools(self) -> list[dict[str, Any]]:
        return [
            {"name": n, "description": "", "inputSchema": {"type": "object"}}
            for n in ("calculate_math", "get_current_weather")
        ]

    async def call_tool(
        self, name: str, arguments: Any, session: Any = None, seq: Any = None
    ) -> Any:
        class Reply:
            text, is_error = json.dumps({"ok": True}), False

        return Reply()


def _trajectories_by_hand() -> list[Trajectory]:
    """The same episodes, assembled without the loop (the quick eval's input)."""
    agent = Agent(ReplayBackend(), ReplayTools(), AgentConfig(max_turns=8))

    async def run_all() -> list[Trajectory]:
        return [await agent.run(c.messages, session=c.case_id) for c in _cases()]

    return asyncio.run(run_all())


def test_every_consumer_reads_the_same_numbers(tmp_path: Path) -> None:
    cases = _cases()
    agent = Agent(ReplayBackend(), ReplayTools(), AgentConfig(max_turns=8))
    results = asyncio.run(
        run_cases([(c, 0) for c in cases], {0: agent}, catalog_registry(), 4, progress=False)
    )
    harness = aggregate(results, 1)
    quick = score_block(cases, _trajectories_by_hand())
    overall = harness["overall"]

    # the harness and the quick eval: every key of the block, overall and per category
    for key, value in overall.items():
        if "latency" not in key:
            assert quick[key] == value, key
    for category, block in harness["by_category"].items():
        for key in ("tool_selection_accuracy", "exact_call_accuracy", "pass_rate"):
            assert quick["by_category"][category][key] == block[key], (category, key)

    # the definitions themselves (scoring.py), case by case
    by_case = {r.case_id.removeprefix("test-"): r for r in results}
    selected = {k for k, r in by_case.items() if r.selection_ok}
    exact = {k for k, r in by_case.items() if r.exact_calls}
    # the right tools as a multiset: an extra call, a repeat or half a parallel pair is not
    assert selected == {"right", "wrong_args", "malformed", "parallel_ok"}
    # every expected call matched and no other attempt: a malformed try before the right
    # call, a repeat or an extra call all fail it
    assert exact == {"right", "parallel_ok"}
    assert overall["tool_selection_accuracy"] == pytest.approx(4 / 8)
    assert overall["exact_call_accuracy"] == pytest.approx(2 / 8)
    assert overall["abstention_rate"] == pytest.approx(2 / 3)
    assert overall["parseable_rate"] == pytest.approx(7 / 8)

    # the benchmarks count with the same function: the same rates, with intervals around them
    quality = load_benchmark("time_pack_quality")
    figures = quality.figures(results)
    for name, key in (
        ("tool_selection", "tool_selection_accuracy"),
        ("exact_call", "exact_call_accuracy"),
        ("abstention", "abstention_rate"),
    ):
        assert figures[name]["rate"] == pytest.approx(overall[key], abs=1e-4), name

    # the demo's table: a quick-eval column and an eval column of the same episodes agree
    job = tmp_path / "run" / "jobs" / "job-a1"
    job.mkdir(parents=True)
    (job / "result.json").write_text("{}")
    (job / "cpu_report.json").write_text(json.dumps({"evals": {"grpo": quick}}))
    (tmp_path / "run" / "eval").mkdir()
    (tmp_path / "run" / "eval" / "candidate.json").write_text(
        json.dumps({"metrics": {"overall": overall}})
    )
    table = before_after_table(tmp_path / "run")
    assert table is not None
    console = Console(width=200, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    for _, label in HEADLINE_METRICS:
        row = next(line for line in lines if line.strip("│ ").startswith(label))
        cells = [cell.strip() for cell in row.split("│") if cell.strip()]
        assert cells[1] == cells[2], row  # after GRPO (quick) == candidate (eval)
