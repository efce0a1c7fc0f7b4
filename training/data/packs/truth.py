"""Row truth checks for a pack dataset: the same flags as the built-in check, answered from
the dataset's own tool snapshot and call store instead of the project's catalog.

Why from the store, not by calling the server again: a third-party server's results may be
live (the current time) or stateful, so a second execution need not agree with the first;
the store is what training replays, so "every expected call is recorded, without error, with
exactly the result in the ground truth" is the property that matters. Arguments are checked
against the `inputSchema` the server listed at generation time (`tools.json`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.mcp_client.call_store import CallStore
from serving.toolcalls.registry import ToolRegistry, registry_from_file
from training.data.check_columns import TruthProblemError, row_truth_flags
from training.data.packs.arguments import schema_problems, validator_for
from training.data.packs.results import result_object
from training.data.schema import ExpectedCall, GroundTruth


def tool_snapshot_path(dataset_dir: Path) -> Path | None:
    """The tool snapshot (`tools.json`) of a pack dataset, None for a built-in one.

    Training and evaluation judge calls by it (`serving.toolcalls.using_registry`): the
    built-in catalog does not know a third-party server's tools, and the snapshot is the
    schemas the rows were generated and validated against. A parquet file's folder works
    as well as the dataset folder."""
    folder = dataset_dir if dataset_dir.is_dir() else dataset_dir.parent
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    generator = manifest.get("generator") if isinstance(manifest, dict) else None
    if not isinstance(generator, dict) or generator.get("kind") != "pack":
        return None
    path = folder / str(manifest.get("tools_file") or "tools.json")
    if not path.is_file():
        raise PackTruthError(f"pack dataset {folder} has no tool snapshot {path.name}")
    return path


def dataset_registry(data_file: Path) -> ToolRegistry | None:
    """The registry to judge a pack dataset's calls by (None: a built-in dataset keeps the
    catalog's, with its semantic validators)."""
    path = tool_snapshot_path(data_file)
    return registry_from_file(path) if path is not None else None


class PackTruthError(ValueError):
    """The dataset's pack files (tool snapshot, call store) are missing or unreadable."""


@dataclass
class PackTruth:
    """What a pack dataset's rows are checked against."""

    tools: list[dict[str, Any]]
    store: CallStore
    digest: str | None
    languages: list[str]

    @classmethod
    def open(cls, dataset_dir: Path, manifest: Mapping[str, Any]) -> PackTruth:
        tools_path = dataset_dir / str(manifest.get("tools_file") or "tools.json")
        store_info = manifest.get("call_store") or {}
        store_path = Path(str(store_info.get("path") or "calls.sqlite"))
        if not store_path.is_absolute():
            store_path = dataset_dir / store_path
        try:
            tools = json.loads(tools_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PackTruthError(f"tool snapshot {tools_path} unreadable: {exc}") from None
        if not store_path.is_file():
            raise PackTruthError(f"call store {store_path} is missing")
        languages = sorted((manifest.get("pack") or {}).get("languages") or {"en": 1.0})
        return cls(tools, CallStore(store_path), store_info.get("digest"), languages)

    def __post_init__(self) -> None:
        self._by_name = {str(t["name"]): t for t in self.tools}
        self._validators = {
            name: validator_for(t["inputSchema"]) for name, t in self._by_name.items()
        }

    @property
    def names(self) -> list[str]:
        return sorted(self._by_name)

    def openai_schemas(self) -> list[dict[str, Any]]:
        """The tools as the chat template renders them (for the prompt token budget)."""
        return [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description", ""),
                    "parameters": t["inputSchema"],
                },
            }
            for t in self.tools
        ]

    def close(self) -> None:
        self.store.close()

    def check_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A pack row's flags (`row_truth_flags`): its calls judged by the tool snapshot and
        their results read from the call store."""
        return row_truth_flags(row, self)

    recompute_mismatch = "the call store's results differ from the ground truth"

    def unknown_tools(self, names: list[str]) -> list[str]:
        return [name for name in names if name not in self._by_name]

    def argument_problems(self, calls: list[ExpectedCall]) -> list[str]:
        return [
            f"{c.name}: {problem}"
            for c in calls
            for problem in schema_problems(self._validators[c.name], c.arguments)
        ]

    def results(self, truth: GroundTruth, row: Mapping[str, Any]) -> list[list[Any]]:
        recorded: list[list[Any]] = []
        for step in truth.steps:
            objects = []
            for call in step:
                tool = self._by_name[call.name]
                found = self.store.lookup(
                    str(tool["server"]), str(tool["server_tool"]), call.arguments
                )
                if found is None or found.is_error:
                    state = "is not in the call store" if found is None else "is an error there"
                    raise TruthProblemError(
                        f"expected call {call.name}{call.arguments} {state}"[:200]
                    )
                objects.append(result_object(found.result))
            recorded.append(objects)
        return recorded
