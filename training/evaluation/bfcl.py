"""BFCL (Berkeley Function Calling Leaderboard) AST categories, scored by BFCL's own checker.

Data and checker come from the `bfcl-eval` wheel, used as a library (`bfcl_wheel`): its loaders
(`load_dataset_entry`, `load_ground_truth_entry`, with BFCL's language hints), its
`ast_checker` and its output-format checks. The wheel cannot join the project's environment
(it pins numpy 1.26 and pulls vendor SDKs), so it is installed without dependencies into its
own directory (`pip install --no-deps --target DIR bfcl-eval`) and put on the path; the only
module of it that needs those SDKs (`constants.model_config`, read by the checker for one
flag) is replaced by a stub that says what BFCL says for OpenAI-compatible function-calling
models: names with "." were sent as "_" (`underscore_to_dot`).

The prompt is built as BFCL builds it for function-calling models: the question's messages,
no system prompt, and the functions converted to OpenAI tools exactly as BFCL's
`convert_to_tool` does (reimplemented in `bfcl_wheel` because its module imports tree-sitter). Each
case is one model response through the project's agent loop (turn limit 1, nothing
executed), decoded as BFCL's FC handler decodes it: `[{name: arguments}]`, or the text when
there is no call. Accuracy per category = valid / total, as BFCL reports it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import time
import types
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from serving.agent import Agent, AgentConfig, ChatClient, EndpointBackend
from training.evaluation.bfcl_wheel import (
    BfclApi,
    load_bfcl,
    load_category,
    score_output,
    to_openai_tools,
)
from training.evaluation.report import EvalReport, EvalSource, write_report

DEFAULT_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
SUPPORTED = (
    *DEFAULT_CATEGORIES,
    "simple_java",
    "simple_javascript",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
)
_DECODE_FAILURES = frozenset({"bad_json", "bad_structure"})


class _StaticTools:
    """A tool executor that lists BFCL's functions and executes nothing (AST categories are
    judged on the first response)."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self._mcp = [
            {"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "inputSchema": t["function"]["parameters"]}
            for t in tools
        ]  # fmt: skip

    async def list_tools(self) -> list[dict[str, Any]]:
        return self._mcp

    async def call_tool(
        self, name: str, arguments: Any, session: str | None = None, seq: int | None = None
    ) -> Any:
        return types.SimpleNamespace(text="(not executed)", is_error=False)


async def _run_case(
    chat: ChatClient, api: BfclApi, category: str, entry: dict[str, Any], answer: Any
) -> dict[str, Any]:
    tools = to_openai_tools(entry["prompt_function"], api)
    agent = Agent(EndpointBackend(chat), _StaticTools(tools), AgentConfig(max_turns=1))
    trajectory = await agent.run(entry["question"][0], session=f"bfcl-{entry['id']}")
    if trajectory.error is not None:
        return {
            "id": entry["id"],
            "valid": False,
            "error_type": "transport",
            "error": trajectory.error,
        }
    calls = trajectory.calls
    if calls and not any(_DECODE_FAILURES.intersection(c.error_kinds) for c in calls):
        model_result: Any = [{c.name: c.arguments} for c in calls]
    else:
        model_result = trajectory.turns[0].content if trajectory.turns else ""
    verdict = score_output(category, model_result, entry["function"], answer, api)
    return {"id": entry["id"], **verdict}


def _read_journal(path: Path | None, key: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Verdicts of an earlier run with the same key (a torn last line is re-run)."""
    if path is None or not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if not lines or lines[0] != key:
        raise ValueError(f"{path} holds another BFCL run; delete it to start over")
    done = {}
    for line in lines[1:]:
        try:
            item = json.loads(line)
            done[(str(item["category"]), str(item["id"]))] = item
        except (ValueError, KeyError, TypeError):
            continue
    return done


async def run_bfcl(
    chat: ChatClient,
    api: BfclApi,
    categories: Sequence[str],
    concurrency: int = 16,
    limit: int | None = None,
    progress: bool = True,
    journal: Path | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Verdicts per category; bounded concurrency; finished cases appended to `journal`
    (first line: the run's key), so a restarted run skips them."""
    key = json.dumps({"bfcl": api.version, "categories": list(categories), "limit": limit,
                      "model": chat.model})  # fmt: skip
    done = _read_journal(journal, key)
    work = [
        (c, e, a)
        for c in categories
        for e, a in load_category(api, c, limit)
        if (c, str(e["id"])) not in done
    ]
    slots = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(work), disable=not progress, desc="bfcl", unit="case")
    sink = None
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)
        sink = journal.open("a" if done else "w", encoding="utf-8")
        sink.write("\n" if done else key + "\n")

    async def one(category: str, entry: dict[str, Any], answer: Any) -> None:
        async with slots:
            verdict = await _run_case(chat, api, category, entry, answer)
        case_id = str(entry["id"])
        item: dict[str, Any] = {
            "category": category,
            "id": case_id,
            "valid": bool(verdict["valid"]),
            "error_type": verdict.get("error_type"),
            "error": str(verdict.get("error", ""))[:300],
        }
        done[(category, case_id)] = item
        if sink is not None:
            sink.write(json.dumps(item) + "\n")
            sink.flush()
        bar.update(1)

    try:
        await asyncio.gather(*(one(*item) for item in work))
    finally:
        bar.close()
        if sink is not None:
            sink.close()
    verdicts: dict[str, list[dict[str, Any]]] = {c: [] for c in categories}
    for (category, _), item in done.items():
        if category in verdicts:
            verdicts[category].append(item)
    return verdicts


def bfcl_metrics(verdicts: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per-category accuracy as BFCL reports it, plus their unweighted mean."""
    by_category: dict[str, dict[str, Any]] = {}
    for category, items in verdicts.items():
        correct = sum(bool(v.get("valid")) for v in items)
        errors = Counter(str(v.get("error_type")) for v in items if not v.get("valid"))
        by_category[category] = {
            "cases": len(items),
            "correct": correct,
            "accuracy": round(correct / len(items), 6) if items else None,
            "error_types": dict(sorted(errors.items())),
        }
    accuracies = [m["accuracy"] for m in by_category.values() if m["accuracy"] is not None]
    cases = sum(m["cases"] for m in by_category.values())
    overall = {
        "cases": cases,
        "accuracy": round(sum(accuracies) / len(accuracies), 6) if accuracies else None,
        "error_rate": round(
            sum(v.get("error_type") == "transport" for vs in verdicts.values() for v in vs)
            / cases, 6) if cases else None,
    }  # fmt: skip
    return {"overall": overall, "by_category": by_category}


def evaluate_bfcl(
    endpoint: str,
    model: str,
    out: Path,
    categories: Sequence[str],
    concurrency: int = 16,
    limit: int | None = None,
    progress: bool = True,
    root: Path | None = None,
    max_tokens: int = 1024,
) -> EvalReport:
    unknown = [c for c in categories if c not in SUPPORTED]
    if unknown:
        raise ValueError(
            f"unsupported BFCL categories {unknown}; supported: {', '.join(SUPPORTED)}"
        )
    api = load_bfcl(root)
    chat = ChatClient(endpoint, model, sampling={"temperature": 0.0, "max_tokens": max_tokens})

    async def go() -> dict[str, list[dict[str, Any]]]:
        try:
            journal = out.with_name(out.name + ".cases.jsonl")
            return await run_bfcl(chat, api, categories, concurrency, limit, progress, journal)
        finally:
            await chat.close()

    started = time.perf_counter()
    verdicts = asyncio.run(go())
    wall = time.perf_counter() - started
    key = json.dumps({"bfcl": api.version, "categories": list(categories), "limit": limit})
    failures = [
        {"category": c, **v} for c, vs in verdicts.items() for v in vs if not v.get("valid")
    ]
    report = EvalReport(
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        source=EvalSource(endpoint=endpoint, model=model, mode="chat",
                          data_path=f"bfcl-eval {api.version}: {','.join(categories)}",
                          data_sha256=hashlib.sha256(key.encode()).hexdigest(),
                          dataset_version=f"bfcl-eval=={api.version}", max_turns=1,
                          benchmark="bfcl"),
        cases_total=sum(len(v) for v in verdicts.values()),
        metrics=bfcl_metrics(verdicts),
        failures=[{k: str(v)[:300] for k, v in f.items()} for f in failures[:50]],
        harness={"wall_s": round(wall, 3)},
    )  # fmt: skip
    write_report(report, out)
    return report
