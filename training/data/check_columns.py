"""The check columns of a dataset: row-level facts that need project code (the ground truth
re-computes by executing the real tools, arguments pass the catalog's validator, no
train/test overlap, the prompt fits), computed into columns of one flat frame.

Why columns: great-expectations then asserts on them beside the raw columns, so every check
appears in one suite, one result and one Data Docs report (`training.data.validate`). The
LLM synthesis screens its rows on the same columns, so a synthetic row is judged by the
very checks a template row is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import pandas as pd

from serving.tools import ToolContext, ToolError, get_catalog
from training.data.config import GenerationConfig
from training.data.queries import normalise_query, query_shape
from training.data.schema import Category, ExpectedCall, GroundTruth
from training.data.tokens import prompt_tokens

TRUTH_FLAGS = ("gt_parses", "tools_known", "args_valid", "gt_recomputes", "calls_consistent")
"""The flags of `row_truth_flags`, in the order they are judged: each must hold on every row."""
MUST_BE_TRUE_COLUMNS = set(TRUTH_FLAGS)


class RowTruthSource(Protocol):
    """Where a dataset's rows are judged when not by the project's catalog: a pack dataset's
    tool snapshot and call store (`training.data.packs.truth.PackTruth`)."""

    def check_row(self, row: Mapping[str, Any]) -> dict[str, Any]: ...

    def openai_schemas(self) -> list[dict[str, Any]]: ...


class TruthProblemError(Exception):
    """An expected call gives no result to compare (it fails, or nothing recorded it)."""


class TruthJudge(Protocol):
    """What `row_truth_flags` asks of the tools a row is judged by."""

    recompute_mismatch: str
    """The problem named when the results differ from the ground truth."""

    def unknown_tools(self, names: list[str]) -> list[str]: ...

    def argument_problems(self, calls: list[ExpectedCall]) -> list[str]: ...

    def results(self, truth: GroundTruth, row: Mapping[str, Any]) -> list[list[Any]]:
        """The expected calls' results, step by step; TruthProblemError when there are none."""
        ...


def row_truth_flags(row: Mapping[str, Any], judge: TruthJudge) -> dict[str, Any]:
    """Parse a row's ground truth and check it against `judge`'s tools; one flag per
    property (`MUST_BE_TRUE_COLUMNS`) and the first problem found."""
    flags: dict[str, Any] = dict.fromkeys(TRUTH_FLAGS, False)
    flags["problem"] = None
    try:
        truth = GroundTruth.from_json(row["reward_model"]["ground_truth"])
    except (ValueError, TypeError, KeyError) as exc:
        flags["problem"] = f"ground truth does not parse: {str(exc)[:120]}"
        return flags
    flags["gt_parses"] = True
    unknown = judge.unknown_tools([c.name for c in truth.expected_calls])
    flags["tools_known"] = not unknown
    if unknown:
        flags["problem"] = f"unknown tool(s): {', '.join(unknown)}"
        return flags
    invalid = judge.argument_problems(list(truth.expected_calls))
    flags["args_valid"] = not invalid
    if invalid:
        flags["problem"] = invalid[0][:200]
        return flags
    try:
        expected_calls = json.loads(row["expected_calls"])
    except (TypeError, ValueError):
        expected_calls = None
    flags["calls_consistent"] = expected_calls == [
        [c.model_dump() for c in step] for step in truth.steps
    ]
    try:
        results = judge.results(truth, row)
    except TruthProblemError as exc:
        flags["problem"] = str(exc)
        return flags
    blob = json.dumps(results, ensure_ascii=False)
    missing = [a for a in truth.answers if a not in blob]
    flags["gt_recomputes"] = results == truth.results and not missing
    if results != truth.results:
        flags["problem"] = judge.recompute_mismatch
    elif missing:
        flags["problem"] = f"answer(s) not produced by the tools: {missing[:3]}"
    elif not flags["calls_consistent"]:
        flags["problem"] = "expected_calls column disagrees with the ground truth"
    return flags


class _CatalogJudge:
    """The project's catalog: its validator, and its tools executed in mock mode."""

    recompute_mismatch = "re-executing the expected calls gives different results"

    def unknown_tools(self, names: list[str]) -> list[str]:
        catalog = get_catalog()
        return [name for name in names if name not in catalog]

    def argument_problems(self, calls: list[ExpectedCall]) -> list[str]:
        catalog = get_catalog()
        invalid: list[str] = []
        for c in calls:
            try:
                catalog.validate(c.name, c.arguments)
            except ToolError as exc:
                invalid.append(str(exc))
        return invalid

    def results(self, truth: GroundTruth, row: Mapping[str, Any]) -> list[list[Any]]:
        catalog = get_catalog()
        context = ToolContext.reference(session_id=f"validate-{row['extra_index']}")
        try:
            return [
                [catalog.execute(c.name, c.arguments, context, mode="mock") for c in step]
                for step in truth.steps
            ]
        except ToolError as exc:
            raise TruthProblemError(f"expected call fails when executed: {str(exc)[:160]}") from exc


def check_row_truth(row: Mapping[str, Any]) -> dict[str, Any]:
    """A built-in row's flags: its ground truth re-executed on the project's catalog."""
    return row_truth_flags(row, _CatalogJudge())


def derive_frame(
    splits: dict[str, pd.DataFrame], pack_truth: RowTruthSource | None = None
) -> pd.DataFrame:
    """One flat frame (both splits) with the raw columns and the computed check columns.
    `pack_truth`: a pack dataset's rows are checked against its own tool snapshot and call
    store (`RowTruthSource`) instead of the project's catalog."""
    check_row = pack_truth.check_row if pack_truth is not None else check_row_truth
    schemas = pack_truth.openai_schemas() if pack_truth is not None else None
    parts = []
    for split, frame in splits.items():
        part = pd.DataFrame(
            {
                "file_split": split,
                "split": frame["extra_split"],
                "index": frame["extra_index"],
                "data_source": frame["data_source"],
                "agent_name": frame["agent_name"],
                "query": frame["query"],
                "category": frame["category"],
                "difficulty": frame["difficulty"],
                "language": frame["language"],
                "template_id": frame["template_id"],
                "num_steps": frame["num_steps"],
                "prompt_roles": frame["prompt"].map(lambda p: ",".join(m["role"] for m in p)),
                "user_matches_query": [
                    p[-1]["content"] == q
                    for p, q in zip(frame["prompt"], frame["query"], strict=True)
                ],
                "tools_used": frame["tools_used"].map(lambda t: list(t) if t is not None else []),
            }
        )
        part["prompt_tokens"] = prompt_tokens([list(p) for p in frame["prompt"]], schemas)
        flags = [check_row({str(k): v for k, v in row.items()}) for row in frame.to_dict("records")]
        part = pd.concat([part, pd.DataFrame(flags, index=part.index)], axis=1)
        parts.append(part)
    derived = pd.concat(parts, ignore_index=True)
    derived["split_consistent"] = derived["split"] == derived["file_split"]
    derived["query_norm"] = derived["query"].map(normalise_query)
    derived["query_shape"] = derived["query"].map(query_shape)
    derived["template_split"] = derived["template_id"].astype(str) + "|" + derived["file_split"]
    for column, name in (
        ("query_norm", "overlap_exact"),
        ("query_shape", "overlap_shape"),
        ("template_id", "overlap_template"),
    ):
        train_values = set(derived.loc[derived.file_split == "train", column])
        derived[name] = (derived.file_split == "test") & derived[column].isin(train_values)
    return derived


def coverage_frame(
    derived: pd.DataFrame,
    generation: GenerationConfig | None,
    tool_names: list[str] | None = None,
) -> pd.DataFrame:
    """One row per category (share vs target) and per tool (row count), for bounds checks.
    `tool_names`: the tools that must be covered (default: the project's catalog)."""
    total = max(len(derived), 1)
    mix = generation.category_mix if generation else {}
    rows = []
    for category in Category:
        share = float((derived["category"] == category.value).sum()) / total
        target = float(mix.get(category, share))
        rows.append(
            {
                "kind": "category",
                "key": category.value,
                "count": int(share * total),
                "deviation": abs(share - target),
            }
        )
    tool_counts = derived["tools_used"].explode().value_counts()
    for name in get_catalog().names if tool_names is None else tool_names:
        rows.append(
            {"kind": "tool", "key": name, "count": int(tool_counts.get(name, 0)), "deviation": 0.0}
        )
    return pd.DataFrame(rows)
