"""The spec says which tools a run trains against, and the lineage records it: the tool mode,
and in replay the digest of the recording served (a missing or corrupt one fails the plan)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from serving.mcp_client.call_store import CallStore
from serving.mcp_client.recording import tools_path_for, write_recorded_tools
from training.pipeline.retraining_stage import StageError, tool_lineage
from training.registry.registry import TAG, Lineage
from training.spec.model import TrainingSpec

TOOL = {
    "name": "get_current_time",
    "description": "Current time in a time zone.",
    "inputSchema": {
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
    },
}


def spec(**tools: Any) -> TrainingSpec:
    return TrainingSpec.model_validate(
        {
            "name": "t",
            "model": {"path": "Qwen/Qwen3.5-4B"},
            "data": {"train_files": ["/d/a.parquet"], "test_files": ["/d/b.parquet"]},
            "batch": {"ppo_mini_batch_size": 4},
            "tools": tools,
        }
    )


def recording(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "calls.sqlite"
    with CallStore(path) as store:
        store.record_one("time", "get_current_time", {"timezone": "UTC"}, "12:00", False)
        digest = store.digest()
    write_recorded_tools(tools_path_for(path), "time", [TOOL], prefix="time_")
    return path, digest


def test_the_spec_requires_a_store_exactly_in_replay() -> None:
    assert spec().tools.mode == "mock"
    with pytest.raises(ValidationError, match=re.escape("needs tools.store")):
        spec(mode="replay")
    with pytest.raises(
        ValidationError, match=re.escape("only used with tools.mode 'replay' or 'live'")
    ):
        spec(mode="mock", store="calls.sqlite")
    with pytest.raises(ValidationError, match=re.escape("needs tools.sources")):
        spec(mode="live")
    with pytest.raises(ValidationError, match=re.escape("only used with tools.mode 'live'")):
        spec(mode="mock", sources="tools.yaml")
    with pytest.raises(ValidationError):
        spec(mode="live-ish")
    assert tool_lineage(spec(mode="live", sources="s.yaml")) == {
        "tool_mode": "live",
        "tool_store_digest": None,
    }


def test_lineage_records_the_mode_and_the_store_digest(tmp_path: Path) -> None:
    path, digest = recording(tmp_path)
    assert tool_lineage(spec()) == {"tool_mode": "mock", "tool_store_digest": None}
    planned = tool_lineage(spec(mode="replay", store=str(path)))
    assert planned == {"tool_mode": "replay", "tool_store_digest": digest}
    lineage = Lineage(run_key="r1", dataset_version="v1", **planned)
    tags = {f"{TAG}{k}": str(v) for k, v in lineage.model_dump().items() if v is not None}
    assert tags["toolrl.tool_mode"] == "replay"
    assert tags["toolrl.tool_store_digest"] == digest
    with pytest.raises(ValidationError):
        Lineage(run_key="r1", dataset_version="v1", tool_store_digest="not-a-digest")


def test_a_missing_or_corrupt_store_fails_the_plan_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(StageError, match=re.escape(f"replay store {missing} does not exist")):
        tool_lineage(spec(mode="replay", store=str(missing)))
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"\x00garbage" * 64)
    with pytest.raises(StageError, match=re.escape(f"{corrupt} is not a CallStore")):
        tool_lineage(spec(mode="replay", store=str(corrupt)))
