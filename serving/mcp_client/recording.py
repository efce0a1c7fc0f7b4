"""A client that records every call it forwards: ground truth by execution, and what the
replay server later serves.

Why a wrapper and not a mode of each transport: data generation, sandboxes and the front door
hold an `McpClient` (stdio, HTTP, or a whole `ToolCatalog`); wrapping it records any of them
the same way, and the caller's code does not change. Every answered `tools/call` (tool errors
included: a replayed model must meet the same errors) goes into the `CallStore` under the
server name given here, keyed by the canonical arguments. Transport failures are not
answers, so they are raised and not recorded.

The replay server must also list exactly the tools the recording saw, so the server's
`tools/list` goes into a sidecar JSON beside the store (`tools_path_for`), one entry per
recorded server with the prefix the catalog exposes its tools under. Several recording
clients (one per server) can write into one sidecar: each write merges its own entry.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.mcp_client.base import McpClient, ToolCallResult
from serving.mcp_client.call_store import CallStore, CallStoreError, RecordedCall
from serving.mcp_client.call_store import canonical_arguments as _canonical

logger = logging.getLogger("toolrl.mcp.recording")

TOOLS_FORMAT = "toolrl.recorded-tools/1"
"""The sidecar's `format` value; a reader refuses any other."""
TOOLS_SUFFIX = ".tools.json"


def tools_path_for(store_path: Path) -> Path:
    """Where the tools/list sidecar of a store lives by default: `calls.sqlite` ->
    `calls.tools.json`, beside it, so that copying the two files moves a whole recording."""
    return store_path.with_name(store_path.stem + TOOLS_SUFFIX)


class RecordedToolsError(ValueError):
    """The sidecar is missing, unreadable or not in TOOLS_FORMAT; the message names it."""


@dataclass(frozen=True, slots=True)
class RecordedServer:
    """One recorded server's tools/list, as the server itself named its tools."""

    name: str
    prefix: str
    """What the catalog prepends to each tool name for the model ("" for none)."""
    tools: tuple[dict[str, Any], ...]


def read_recorded_tools(path: Path) -> dict[str, RecordedServer]:
    """The sidecar's servers; RecordedToolsError (naming `path`) for anything unusable.
    The tool definitions themselves are validated by whoever serves them."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordedToolsError(
            f"{path} does not exist: replay needs the recorded servers' tools/list, which "
            "RecordingClient.write_schemas writes beside the store"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RecordedToolsError(f"{path} is not a readable JSON file: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != TOOLS_FORMAT:
        raise RecordedToolsError(f"{path} is not a recorded-tools file (format {TOOLS_FORMAT})")
    servers = raw.get("servers")
    if not isinstance(servers, dict):
        raise RecordedToolsError(f"{path}: `servers` must be an object")
    out: dict[str, RecordedServer] = {}
    for name, entry in servers.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("tools"), list):
            raise RecordedToolsError(f"{path}: server {name!r} needs a `tools` list")
        prefix = entry.get("prefix") or ""
        if not isinstance(prefix, str):
            raise RecordedToolsError(f"{path}: server {name!r} has a non-string prefix")
        tools = tuple(t for t in entry["tools"] if isinstance(t, dict))
        out[str(name)] = RecordedServer(str(name), prefix, tools)
    return out


def write_recorded_tools(
    path: Path, server: str, tools: list[dict[str, Any]], prefix: str = ""
) -> None:
    """Merge one server's tools/list into the sidecar (atomic replace: a reader never sees a
    half-written file; other servers' entries are kept)."""
    entries: dict[str, Any] = {}
    if path.exists():
        try:
            current = read_recorded_tools(path)
        except RecordedToolsError:
            current = {}  # an unusable sidecar is replaced, not merged into
        entries = {s.name: {"prefix": s.prefix, "tools": list(s.tools)} for s in current.values()}
    entries[server] = {"prefix": prefix, "tools": tools}
    payload = {"format": TOOLS_FORMAT, "servers": dict(sorted(entries.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, ensure_ascii=False, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RecordingClient:
    """Forwards to `inner` and records each answered call into `store` under `server`.

    `prefix` is the catalog prefix of this server's tools (written to the sidecar, so the
    replay server lists them as the model saw them); calls and records use the server's
    own names. `batch_size` > 1 buffers rows and writes them in one transaction per batch
    (faster, but rows not yet flushed are lost on a crash); `flush()` and `close()` write
    the rest. Calls whose arguments have no canonical form (NaN, nesting too deep) are
    forwarded but cannot be recorded (no lookup could find them): they are counted in
    `skipped` and logged.
    """

    def __init__(
        self,
        inner: McpClient,
        store: CallStore,
        server: str,
        *,
        prefix: str = "",
        batch_size: int = 1,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.inner = inner
        self.store = store
        self.server = server
        self.prefix = prefix
        self.batch_size = batch_size
        self.recorded = 0
        self.skipped = 0
        self._pending: list[RecordedCall] = []
        self._tools: list[dict[str, Any]] | None = None

    async def list_tools(self) -> list[dict[str, Any]]:
        tools = await self.inner.list_tools()
        self._tools = [dict(tool) for tool in tools]
        return tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        seq: int | None = None,
    ) -> ToolCallResult:
        key: str | None = None
        reason = ""
        try:
            key = _canonical(arguments)
        except CallStoreError as exc:
            reason = str(exc)
        result = await self.inner.call_tool(name, arguments, session, seq)
        if key is None:
            self.skipped += 1
            logger.warning(
                "call not recorded", extra={"server": self.server, "tool": name, "why": reason}
            )
            return result
        self._pending.append(RecordedCall(self.server, name, key, result.text, result.is_error))
        if len(self._pending) >= self.batch_size:
            self.flush()
        return result

    def flush(self) -> int:
        """Write the buffered rows (one transaction); returns how many."""
        pending, self._pending = self._pending, []
        if not pending:
            return 0
        written = self.store.record(pending)
        self.recorded += written
        return written

    async def write_schemas(self, path: Path | None = None) -> Path:
        """Write this server's tools/list into the sidecar (default: beside the store) and
        return its path. Lists the tools first if `list_tools` was not called yet."""
        if self._tools is None:
            await self.list_tools()
        assert self._tools is not None
        target = path or tools_path_for(self.store.path)
        write_recorded_tools(target, self.server, self._tools, self.prefix)
        return target

    async def close(self) -> None:
        """Flush, then close the inner client (the store stays open: the caller owns it)."""
        try:
            self.flush()
        finally:
            await self.inner.close()
