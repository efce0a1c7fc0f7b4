"""Replay mode: serve a recording (a `CallStore` plus its tools/list sidecar) as if it were the
recorded servers, so training rollouts never touch a user's production tools.

Why it answers like a tool and never like a transport: the policy is trained on what it reads.
A recorded call gets the recorded text (recorded tool errors stay errors). A call nobody
recorded gets a tool error that says what the tool takes, the way a real server answers
arguments it cannot serve, so the model learns to fix its call instead of meeting a
protocol failure that never happens in production. Arguments are checked against the
recorded schema first, with the same messages as mock mode, and the same seeded faults
apply (they are decided in `calls.CallRunner` for mock and replay alike).

Why everything is loaded into memory at start-up: the content served must be the content
whose digest goes into the lineage tags, even if someone records more into the file while
training runs. A dict lookup also costs nothing next to the HTTP path (the throughput target
is mock mode's), and workers inherit the table through fork instead of each opening the
SQLite file. Stores are small (one row per distinct call of a dataset); `MAX_ROWS` bounds
what a mistaken path could make each worker hold.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.mcp_client.call_store import (
    CallStoreError,
    RecordedCall,
    canonical_arguments,
    digest_of,
)
from serving.mcp_client.recording import (
    RecordedToolsError,
    read_recorded_tools,
    tools_path_for,
)
from serving.mcp_client.schemas import EXPOSED_NAME, ToolSchemaError, validate_tools
from serving.tools import Tool, ToolArgumentError, ToolCatalog, ToolExecutionError
from serving.tools.schema import JSON_TYPES, check_value, json_type_name

MAX_ROWS = 2_000_000
"""Most recorded calls one replay server loads (each worker holds them all)."""
_COLUMNS = ("server", "tool", "arguments", "result", "is_error")


class ReplayError(ValueError):
    """The store or its sidecar cannot be served; the message names the file and why."""


def _describe(schema: Mapping[str, Any]) -> str:
    """`a (string, required), b (integer)`: what the not-recorded error tells the model."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parts = []
    for name, prop in properties.items():
        kind = prop.get("type", "any") if isinstance(prop, Mapping) else "any"
        kind = "/".join(kind) if isinstance(kind, list) else str(kind)
        parts.append(f"{name} ({kind}{', required' if name in required else ''})")
    return ", ".join(parts) or "no arguments"


@dataclass(frozen=True)
class RecordedTool(Tool):
    """A tool of another MCP server (recorded, or live behind live mode), under the name the
    catalog exposed it with.

    Validation follows the recorded schema with mock mode's messages. Properties in the
    subset the project validator knows (one JSON type) are checked as in mock mode; a type
    list is checked by type only; anything richer (`anyOf`, `$ref`, no type) is left to the
    lookup, since no recorded call can match a value the real server would have refused.
    """

    server: str = ""
    source_name: str = ""
    """The tool's own name on its server (the name the store records)."""

    def validate(self, arguments: Any) -> dict[str, Any]:
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(
                self.name, [f"arguments for '{self.name}' must be a JSON object"]
            )
        schema = self.parameters
        properties: Mapping[str, Any] = schema.get("properties") or {}
        problems: list[str] = []
        if not schema.get("additionalProperties"):
            allowed = ", ".join(sorted(properties)) or "none"
            for key in arguments:
                if key not in properties:
                    problems.append(f"unexpected argument {str(key)[:40]!r} (allowed: {allowed})")
        for key in schema.get("required") or ():
            if arguments.get(key) is None:
                problems.append(f"missing required argument '{key}'")
        cleaned: dict[str, Any] = {}
        for key, prop in properties.items():
            value = arguments.get(key)
            prop = prop if isinstance(prop, Mapping) else {}
            if value is None:
                if "default" in prop:
                    cleaned[key] = prop["default"]
                continue
            kind = prop.get("type")
            error: str | None = None
            if isinstance(kind, str) and kind in JSON_TYPES:
                value, error = check_value(key, value, prop)
            elif isinstance(kind, list):
                actual = json_type_name(value)
                if actual not in kind and not (actual == "integer" and "number" in kind):
                    error = f"argument '{key}' must be {' or '.join(map(str, kind))}, got {actual}"
            if error:
                problems.append(error)
            else:
                cleaned[key] = value
        for key, value in arguments.items():
            if key not in properties and key not in cleaned:
                cleaned[str(key)] = value  # allowed by additionalProperties
        if problems:
            raise ToolArgumentError(self.name, problems)
        return cleaned


def not_served(arguments: dict[str, Any], _context: Any) -> dict[str, Any]:
    """The implementation slot of a tool another server runs: never called (replay answers
    from the recording, live mode calls the source)."""
    raise ToolExecutionError("this tool is answered by its recording or its own server")


@dataclass
class ReplaySet:
    """A loaded recording: the catalog to list and the answers to serve."""

    store_path: Path
    tools_path: Path
    catalog: ToolCatalog
    digest: str
    """`CallStore.digest()` of the content served (goes into the lineage tags)."""
    rows: int
    answers: dict[str, dict[str, tuple[str, bool]]] = field(default_factory=dict)
    """Exposed tool name -> canonical arguments -> (result text, is_error)."""
    orphans: int = 0
    """Recorded calls of tools the sidecar does not list (cannot be called, not served)."""

    def find(
        self, tool: str, arguments: Mapping[str, Any], cleaned: Mapping[str, Any]
    ) -> tuple[str, bool] | None:
        """The recorded answer for a call, trying the arguments as sent and then with the
        schema's defaults filled in (a recording may have spelled a default out or not).
        Raises CallStoreError for arguments that have no canonical form."""
        table = self.answers.get(tool)
        if not table:
            canonical_arguments(arguments)  # still refuse what has no canonical form
            return None
        found = table.get(canonical_arguments(arguments))
        if found is None and cleaned != arguments:
            found = table.get(canonical_arguments(cleaned))
        return found

    def not_recorded(self, tool: RecordedTool, arguments: Mapping[str, Any]) -> str:
        """The error text of a call the recording cannot answer."""
        shown = ", ".join(f"{k}={v!r}"[:80] for k, v in list(arguments.items())[:6])
        return (
            f"Error: {tool.source_name} on {tool.server} found no result for these "
            f"arguments ({shown or 'none'}). It takes: {_describe(tool.parameters)}. "
            "Check each value against the tool's description (names, spelling, formats), "
            "then call again, or answer without this tool."
        )

    def health(self) -> dict[str, Any]:
        return {"store": str(self.store_path), "store_digest": self.digest, "recorded": self.rows}


def _read_rows(path: Path) -> list[RecordedCall]:
    if not path.is_file():
        what = "does not exist" if not path.exists() else "is not a file"
        raise ReplayError(f"replay store {path} {what}")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise ReplayError(f"replay store {path} cannot be opened: {exc}") from exc
    try:
        try:
            columns = tuple(row[1] for row in db.execute("PRAGMA table_info(calls)"))
        except sqlite3.DatabaseError as exc:
            raise ReplayError(
                f"replay store {path} is not a CallStore (not a SQLite database: {exc})"
            ) from exc
        if columns != _COLUMNS:
            raise ReplayError(
                f"replay store {path} is not a CallStore (no `calls` table with columns "
                f"{', '.join(_COLUMNS)}); record one with serving.mcp_client.recording"
            )
        count = int(db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])
        if count > MAX_ROWS:
            raise ReplayError(f"replay store {path} holds {count} calls (at most {MAX_ROWS})")
        rows = db.execute(
            "SELECT server, tool, arguments, result, is_error FROM calls "
            "ORDER BY server, tool, arguments"
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        raise ReplayError(f"replay store {path} cannot be read: {exc}") from exc
    finally:
        db.close()
    return [RecordedCall(str(s), str(t), str(a), str(r), bool(e)) for s, t, a, r, e in rows]


def load_replay(store_path: Path, tools_path: Path | None = None) -> ReplaySet:
    """Read and check a recording; every problem is a ReplayError naming its file."""
    tools_path = tools_path or tools_path_for(store_path)
    rows = _read_rows(store_path)
    try:
        servers = read_recorded_tools(tools_path)
    except RecordedToolsError as exc:
        raise ReplayError(str(exc)) from exc
    if not servers:
        raise ReplayError(f"{tools_path} lists no servers: nothing to replay")
    tools: list[Tool] = []
    routes: dict[tuple[str, str], str] = {}
    for server in servers.values():
        try:
            definitions = validate_tools(server.name, list(server.tools))
        except ToolSchemaError as exc:
            raise ReplayError(f"{tools_path}: {exc}") from exc
        for definition in definitions:
            exposed = server.prefix + definition.name
            if not EXPOSED_NAME.fullmatch(exposed):
                raise ReplayError(
                    f"{tools_path}: server '{server.name}', tool '{definition.name}': exposed "
                    f"name {exposed!r} is not 1-64 characters of A-Z a-z 0-9 _ -"
                )
            if any(t.name == exposed for t in tools):
                raise ReplayError(
                    f"{tools_path}: tool name clash on '{exposed}'; give the servers prefixes"
                )
            routes[(server.name, definition.name)] = exposed
            tools.append(
                RecordedTool(
                    name=exposed,
                    description=definition.description,
                    parameters=definition.input_schema,
                    implementation=not_served,
                    server=server.name,
                    source_name=definition.name,
                )
            )
    replay = ReplaySet(
        store_path=store_path,
        tools_path=tools_path,
        catalog=ToolCatalog(tools),
        digest=digest_of(rows),
        rows=len(rows),
    )
    for call in rows:
        exposed_name = routes.get((call.server, call.tool))
        if exposed_name is None:
            replay.orphans += 1
            continue
        replay.answers.setdefault(exposed_name, {})[call.arguments] = (call.result, call.is_error)
    return replay


__all__ = ["CallStoreError", "RecordedTool", "ReplayError", "ReplaySet", "load_replay"]
