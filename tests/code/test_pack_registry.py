"""Which tools calls are judged by: the built-in catalog for built-in data, a pack dataset's
tool snapshot for pack data (the catalog has no `convert_time`); and the demo's check that a
served answer came from the third-party server's tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.toolcalls import (
    active_registry,
    catalog_registry,
    parse_tool_calls,
    registry_from_file,
    using_registry,
)
from serving.toolcalls.registry import SNAPSHOT_ENV
from training.data.packs.truth import PackTruthError, dataset_registry, tool_snapshot_path
from training.ops.demo.pack import pack_answer_check

TIME_TOOLS = [
    {
        "name": "convert_time",
        "server": "time",
        "server_tool": "convert_time",
        "description": "Convert time between timezones",
        "inputSchema": {
            "type": "object",
            "properties": {
                "source_timezone": {"type": "string"},
                "time": {"type": "string"},
                "target_timezone": {"type": "string"},
            },
            "required": ["source_timezone", "time", "target_timezone"],
        },
    }
]
CALL = (
    '<tool_call>{"name": "convert_time", "arguments": {"source_timezone": "Asia/Tokyo", '
    '"time": "10:00", "target_timezone": "Europe/Paris"}}</tool_call>'
)


def _pack_dataset(root: Path) -> Path:
    (root / "tools.json").write_text(json.dumps(TIME_TOOLS))
    manifest = {"generator": {"kind": "pack"}, "tools_file": "tools.json"}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_a_pack_dataset_is_judged_by_its_snapshot_and_a_built_in_one_by_the_catalog(
    tmp_path: Path,
) -> None:
    (tmp_path / "pack").mkdir()
    dataset = _pack_dataset(tmp_path / "pack")
    registry = dataset_registry(dataset / "train.parquet")  # a file's folder works too
    assert registry is not None and list(registry.schemas) == ["convert_time"]
    assert not parse_tool_calls(CALL, "hermes").calls[0].valid  # the catalog lacks it
    with using_registry(registry):
        assert active_registry() is registry
        assert parse_tool_calls(CALL, "hermes").calls[0].valid
    assert active_registry() is catalog_registry()
    built_in = tmp_path / "builtin"
    built_in.mkdir()
    (built_in / "manifest.json").write_text(json.dumps({"generator": {"kind": "intents"}}))
    assert dataset_registry(built_in) is None
    assert tool_snapshot_path(tmp_path / "nowhere") is None


def test_the_snapshot_reaches_other_processes_by_env_and_a_missing_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = _pack_dataset(tmp_path)
    monkeypatch.setenv(SNAPSHOT_ENV, str(dataset / "tools.json"))
    assert active_registry() is registry_from_file(dataset / "tools.json")
    (dataset / "tools.json").unlink()
    with pytest.raises(PackTruthError, match=r"tools\.json"):
        tool_snapshot_path(dataset)


def _answer(calls: list[dict[str, object]]) -> dict[str, object]:
    return {
        "choices": [{"message": {"role": "assistant", "content": "It is 10:00."}}],
        "toolrl": {"tool_calls": calls},
    }


def test_the_demo_check_wants_an_error_free_call_to_the_expected_tool() -> None:
    good = {"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"},
            "result": '{"datetime": "2026-12-01T10:00:00+09:00"}', "is_error": False}  # fmt: skip
    ok, why = pack_answer_check(_answer([good]), ["get_current_time"])
    assert ok and "get_current_time" in why and "Asia/Tokyo" in why
    ok, why = pack_answer_check(_answer([]), ["get_current_time"])
    assert not ok and "no tool" in why
    ok, why = pack_answer_check(_answer([{**good, "is_error": True}]), ["get_current_time"])
    assert not ok and "tool error" in why
    assert pack_answer_check({"toolrl": "junk"}, ["get_current_time"])[0] is False
