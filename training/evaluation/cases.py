"""Evaluation cases from a dataset split (`test.parquet`): the prompt and the ground truth.

Unreadable input (missing file, not parquet, missing columns, a ground truth that does not
parse) raises `EvalDataError` with the file and the first problem, never a stack trace from
pyarrow. Rows with a broken ground truth are counted and skipped: one bad row must not hide
the other 4,999 results, but the report says how many were skipped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from training.data.schema import GroundTruth

REQUIRED_COLUMNS = ("prompt", "reward_model", "extra_info", "category")


class EvalDataError(ValueError):
    """The evaluation data cannot be used; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class EvalCase:
    case_id: str
    category: str
    messages: list[dict[str, Any]]
    truth: GroundTruth
    ground_truth_json: str
    language: str = ""


@dataclass(frozen=True, slots=True)
class CaseSet:
    cases: list[EvalCase]
    skipped: list[str]
    """`row N: reason` for each row that could not be turned into a case."""
    data_sha256: str
    dataset_version: str | None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _dataset_version(path: Path) -> str | None:
    manifest = path.parent / "manifest.json"
    try:
        version = json.loads(manifest.read_text()).get("dataset_version")
    except (OSError, ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None


def _messages(prompt: Any) -> list[dict[str, Any]]:
    messages = [dict(m) for m in prompt] if prompt is not None else []
    if not messages or any(
        not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str)
        for m in messages
    ):
        raise ValueError("prompt is not a list of {role, content} messages")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def case_from_row(index: int, row: Mapping[str, Any]) -> EvalCase:
    """One dataset row as a case; ValueError (or a pydantic error) when it cannot be."""
    reward = row.get("reward_model") or {}
    text = reward.get("ground_truth") if isinstance(reward, dict) else None
    if not isinstance(text, str):
        raise ValueError("reward_model.ground_truth is missing")
    truth = GroundTruth.from_json(text)
    extra = row.get("extra_info") or {}
    raw_id = extra.get("index") if isinstance(extra, dict) else None
    case_id = f"{extra.get('split', 'row')}-{raw_id}" if raw_id is not None else f"row-{index}"
    return EvalCase(
        case_id=case_id,
        category=truth.category.value,
        messages=_messages(row.get("prompt")),
        truth=truth,
        ground_truth_json=text,
        language=str(row.get("language") or ""),
    )


def load_cases(path: Path, limit: int | None = None) -> CaseSet:
    """Read a dataset split into cases (first `limit` rows when given)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise EvalDataError(f"{path}: no such file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise EvalDataError(f"{path}: not a readable parquet file ({exc})") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise EvalDataError(f"{path}: missing columns {missing}")
    extra = [c for c in ("language",) if c in table.column_names]
    rows = table.select([*REQUIRED_COLUMNS, *extra])
    if limit is not None:
        rows = rows.slice(0, limit)
    cases: list[EvalCase] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for index, row in enumerate(rows.to_pylist()):
        try:
            case = case_from_row(index, row)
        except (ValidationError, ValueError, TypeError, AttributeError) as exc:
            skipped.append(f"row {index}: {str(exc).splitlines()[0][:200]}")
            continue
        if case.case_id in seen:
            skipped.append(f"row {index}: duplicate case id {case.case_id}")
            continue
        seen.add(case.case_id)
        cases.append(case)
    if not cases:
        reason = skipped[0] if skipped else "no rows"
        raise EvalDataError(f"{path}: no usable cases ({reason})")
    return CaseSet(cases, skipped, file_sha256(path), _dataset_version(path))
