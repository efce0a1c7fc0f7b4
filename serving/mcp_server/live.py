"""Live mode: the project's MCP server passes calls through to the configured tool sources,
optionally recording every answer into a CallStore (the recording replay mode serves).

Why a server mode when the client layer can call the sources directly: a sandbox or a staging
run wants the training path unchanged. Rollouts, the verl bridge and evaluation talk to one
HTTP endpoint with session and sequence headers, whatever the tools are. Pointing that
endpoint at live tools, and recording on the way, is then a flag and not a code change:
`--mode live --sources S.yaml --store R.sqlite` records, and `--mode replay --store
R.sqlite` serves the same tools from the recording.

Start-up lists every source once in the parent (all-or-nothing, as `ToolCatalog.load`):
the tools served and the metrics rows must be known before the workers fork, and a source
that is down is one error naming it rather than N dying workers. Each worker then opens its
own clients (stdio servers are per worker process) and its own store connection on first
use, because event loops, pipes and SQLite handles do not survive a fork.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.mcp_client.base import McpClient, ToolCallResult
from serving.mcp_client.call_store import CallStore
from serving.mcp_client.catalog import CatalogEntry, ToolCatalog, open_client
from serving.mcp_client.recording import RecordingClient, tools_path_for, write_recorded_tools
from serving.mcp_client.sources import ToolSources, load_tool_sources
from serving.mcp_server.replay import RecordedTool, not_served
from serving.tools import Tool
from serving.tools import ToolCatalog as ServedCatalog


@dataclass
class LiveTools:
    """The sources, the tools they listed at start-up, and (per worker) the live clients."""

    sources: ToolSources
    base_dir: Path
    entries: list[CatalogEntry]
    store_path: Path | None = None
    tools_path: Path | None = None
    _catalog: ToolCatalog | None = field(default=None, init=False, repr=False)
    _store: CallStore | None = field(default=None, init=False, repr=False)
    _recorders: list[McpClient] = field(default_factory=list, init=False, repr=False)
    _lock: asyncio.Lock | None = field(default=None, init=False, repr=False)

    @classmethod
    def load(
        cls, sources_path: Path, store_path: Path | None = None, tools_path: Path | None = None
    ) -> LiveTools:
        """List every source (raises `CatalogError` naming each failing server); with a
        store, write the recorded-tools sidecar now, so the recording is replayable even if
        the server is stopped before its first call."""
        sources = load_tool_sources(sources_path)
        base_dir = sources_path.resolve().parent

        async def listed() -> list[CatalogEntry]:
            catalog = ToolCatalog(sources, base_dir=base_dir)
            try:
                return await catalog.load()
            finally:
                await catalog.close()

        entries = asyncio.run(listed())
        live = cls(sources, base_dir, entries, store_path, None)
        if store_path is not None:
            live.tools_path = tools_path or tools_path_for(store_path)
            for server in sources.servers:
                tools = [
                    {
                        "name": e.tool.name,
                        "description": e.tool.description,
                        "inputSchema": e.tool.input_schema,
                    }
                    for e in entries
                    if e.server == server
                ]
                prefix = sources.servers[server].prefix or ""
                write_recorded_tools(live.tools_path, server, tools, prefix)
        return live

    def served_catalog(self) -> ServedCatalog:
        """The tools the server lists, validated against their own schemas like replay's."""
        tools: list[Tool] = [
            RecordedTool(
                name=entry.name,
                description=entry.tool.description,
                parameters=entry.tool.input_schema,
                implementation=not_served,
                server=entry.server,
                source_name=entry.tool.name,
            )
            for entry in self.entries
        ]
        return ServedCatalog(tools)

    async def _worker_catalog(self) -> ToolCatalog:
        if self._catalog is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._catalog is None:
                    self._catalog = self._open()
        return self._catalog

    def _open(self) -> ToolCatalog:
        clients: dict[str, McpClient] = {}
        if self.store_path is not None:
            self._store = CallStore(self.store_path)
            log_dir = Path(self.sources.log_dir) if self.sources.log_dir else None
            for name, source in self.sources.servers.items():
                inner = open_client(name, source, os.environ, self.base_dir, log_dir)
                clients[name] = RecordingClient(
                    inner, self._store, name, prefix=source.prefix or ""
                )
            self._recorders = list(clients.values())
        return ToolCatalog(self.sources, base_dir=self.base_dir, clients=clients)

    async def call(
        self, name: str, arguments: dict[str, Any], session: str, seq: int | None
    ) -> ToolCallResult:
        """One call on the owning source (transport errors raise `McpClientError`)."""
        catalog = await self._worker_catalog()
        return await catalog.call_tool(name, arguments, session, seq)

    async def close(self) -> None:
        catalog, self._catalog = self._catalog, None
        if catalog is not None:
            await catalog.close()  # the clients it built
            recorders, self._recorders = self._recorders, []
            for client in recorders:  # the recording wrappers it was handed: flush, stop
                await client.close()
        if self._store is not None:
            self._store.close()
            self._store = None
