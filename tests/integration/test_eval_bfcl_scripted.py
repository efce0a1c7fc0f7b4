"""BFCL through the harness: BFCL's own AST checker (bfcl-eval as a library) accepts BFCL's
possible answers when a scripted OpenAI-compatible server returns them as `tool_calls`, and
rejects known-wrong outputs with BFCL's error types."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from training.evaluation.bfcl import DEFAULT_CATEGORIES, evaluate_bfcl
from training.evaluation.bfcl_wheel import (
    BfclApi,
    BfclUnavailableError,
    load_bfcl,
    load_category,
    score_output,
)
from training.evaluation.report import load_report
from training.evaluation.scripted import Scripted, serve_in_thread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
Message = dict[str, Any]
LIMIT = 40


BFCL_DIR = Path(__file__).resolve().parents[2] / ".venv" / "bfcl-eval"
"""Where `make setup` (or this fixture, once) installs bfcl-eval without its dependencies."""


@pytest.fixture(scope="session")
def bfcl_root() -> Path | None:
    """bfcl-eval (data + checker) without its dependencies, in its own directory."""
    try:
        load_bfcl()
        return None
    except BfclUnavailableError:
        pass
    if (BFCL_DIR / "bfcl_eval").is_dir():
        return BFCL_DIR
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(BFCL_DIR),
         "bfcl-eval==2026.3.23"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"bfcl-eval could not be installed: {done.stderr[-300:]}")
    return BFCL_DIR


@pytest.fixture(scope="session")
def api(bfcl_root: Path | None) -> BfclApi:
    return load_bfcl(bfcl_root)


def pick(option: Any) -> Any:
    """A concrete value from one acceptable option: nested dicts list acceptable values
    per key too."""
    if isinstance(option, dict):
        chosen = {k: next((o for o in v if o != ""), None) for k, v in option.items()}
        return {k: pick(v) for k, v in chosen.items() if v is not None}
    if isinstance(option, list) and option and all(isinstance(i, dict) for i in option):
        return [pick(i) for i in option]
    return option


def first_acceptable(
    answer: dict[str, dict[str, list[Any]]], functions: list[dict[str, Any]]
) -> tuple[str, dict[str, Any]]:
    """One call built from a BFCL possible answer: the first acceptable value per parameter
    (optional parameters, with "" among their options, are left out unless the function
    doc requires them)."""
    name, params = next(iter(answer.items()))
    doc = next((f for f in functions if f["name"] == name), {"parameters": {}})
    required = set(doc["parameters"].get("required", []))
    arguments = {}
    for key, options in params.items():
        if "" in options and key not in required:
            continue  # optional: leaving it out is always accepted
        arguments[key] = pick(next(o for o in options if o != ""))
    return name.replace(".", "_"), arguments


def oracle(api: BfclApi, categories: Sequence[str]) -> dict[str, Scripted]:
    """The right reply per question text, from BFCL's possible answers."""
    replies = {}
    for category in categories:
        for entry, answer in load_category(api, category, LIMIT):
            key = entry["question"][0][-1]["content"]
            if answer is None:
                replies[key] = Scripted(content="I cannot help with that using these tools.")
            else:
                replies[key] = Scripted(
                    calls=[first_acceptable(a, entry["function"]) for a in answer]
                )
    return replies


@pytest.mark.parametrize("category", DEFAULT_CATEGORIES)
def test_bfcl_checker_accepts_possible_answers_and_rejects_wrong_ones(
    api: BfclApi, category: str
) -> None:
    for entry, answer in load_category(api, category, LIMIT):
        if answer is None:
            assert score_output(category, "plain text", entry["function"], None, api)["valid"]
            called = [{"some_function": {"x": 1}}]
            verdict = score_output(category, called, entry["function"], None, api)
            assert verdict == {"valid": False, "error_type": "irrelevance_error:decoder_success"}
            continue
        right = [
            {name: args} for name, args in (first_acceptable(a, entry["function"]) for a in answer)
        ]
        assert score_output(category, right, entry["function"], answer, api)["valid"], entry["id"]
        wrong = [{f"{name}_x": args} for call in right for name, args in call.items()]
        assert not score_output(category, wrong, entry["function"], answer, api)["valid"]
        assert not score_output(category, "no call", entry["function"], answer, api)["valid"]


def test_scripted_bfcl_oracle_scores_one_and_a_wrong_model_scores_known_values(
    api: BfclApi, bfcl_root: Path | None, tmp_path: Path
) -> None:
    categories = list(DEFAULT_CATEGORIES)
    replies = oracle(api, categories)

    def right(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        return replies[messages[-1]["content"]]

    with serve_in_thread(right) as url:
        report = evaluate_bfcl(url, "scripted", tmp_path / "bfcl.json", categories,
                               limit=LIMIT, progress=False, root=bfcl_root)  # fmt: skip
    by_category = report.metrics["by_category"]
    assert {c: m["accuracy"] for c, m in by_category.items()} == dict.fromkeys(categories, 1.0)
    assert report.metrics["overall"]["accuracy"] == 1.0
    assert load_report(tmp_path / "bfcl.json").source.benchmark == "bfcl"

    def always_calls(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        name = tools[0]["function"]["name"]
        return Scripted(calls=[(name, {})])

    with serve_in_thread(always_calls) as url:
        report = evaluate_bfcl(url, "scripted", tmp_path / "bad.json", categories,
                               limit=LIMIT, progress=False, root=bfcl_root)  # fmt: skip
    by_category = report.metrics["by_category"]
    assert by_category["irrelevance"]["accuracy"] == 0.0
    assert by_category["simple_python"]["accuracy"] == 0.0
    assert "simple_function_checker:missing_required" in by_category["simple_python"]["error_types"]
    assert by_category["parallel"]["error_types"] == {
        "parallel_function_checker_no_order:wrong_count": LIMIT
    }


def test_unknown_bfcl_category_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported BFCL categories"):
        evaluate_bfcl("http://127.0.0.1:9/v1", "m", tmp_path / "r.json", ["multi_turn_base"])


def test_scripted_bfcl_run_resumes_from_its_journal(
    api: BfclApi, bfcl_root: Path | None, tmp_path: Path
) -> None:
    replies = oracle(api, ["simple_python"])
    asked: list[str] = []

    def right(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        asked.append(messages[-1]["content"])
        return replies[messages[-1]["content"]]

    out = tmp_path / "bfcl.json"
    with serve_in_thread(right) as url:
        evaluate_bfcl(url, "scripted", out, ["simple_python"], limit=20, progress=False,
                      root=bfcl_root)  # fmt: skip
        journal = out.with_name(out.name + ".cases.jsonl")
        lines = journal.read_text().splitlines()
        journal.write_text("\n".join([*lines[:6], lines[6][:30]]))  # 5 done + a torn line
        asked.clear()
        report = evaluate_bfcl(url, "scripted", out, ["simple_python"], limit=20,
                               progress=False, root=bfcl_root)  # fmt: skip
    assert len(asked) == 15
    assert report.metrics["by_category"]["simple_python"] == {
        "cases": 20, "correct": 20, "accuracy": 1.0, "error_types": {}}  # fmt: skip
