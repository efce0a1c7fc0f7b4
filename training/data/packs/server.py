"""Reaching a pack's server: which tool sources to use, and its tools as the pack sees them.

Why the pack may carry its own `source`: the packs that ship with the project name the
server they were written for (`mcp-server-time`), so `toolrl tools pack generate time.yaml`
works without a sources file. A `--sources` file (the pipeline's own `tool_sources`) wins,
so the same pack can target a staging copy of the server, under a prefix. The project's own
server (`source: {project_server: mock}`, the `toolrl` pack) runs in this process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from serving.mcp_client.base import McpClient
from serving.mcp_client.catalog import ToolCatalog
from serving.mcp_client.schemas import validate_tools
from serving.mcp_client.sources import ToolSources, load_tool_sources
from training.data.packs.execute import ServerTool
from training.data.packs.loader import LoadedPack, PackError
from training.data.packs.model import ProjectServerSource


def pack_sources(loaded: LoadedPack, sources_file: Path | None) -> tuple[ToolSources, Path]:
    """The sources to reach the pack's server, and the directory relative paths start from."""
    pack = loaded.spec
    if sources_file is not None:
        sources = load_tool_sources(sources_file)
        if pack.server not in sources.servers:
            raise PackError(
                [
                    f"{sources_file}: no server {pack.server!r} (the pack's `server:`); it has "
                    f"{', '.join(sources.servers)}"
                ]
            )
        return sources, sources_file.parent.resolve()
    if pack.source is None:
        raise PackError(
            [
                f"{loaded.path}: the pack has no `source:`; pass --sources with a server "
                f"named {pack.server!r}"
            ]
        )
    if isinstance(pack.source, ProjectServerSource):
        raise PackError(
            [
                f"{loaded.path}: the pack's server is the project's own MCP server "
                "(`source: {project_server: mock}`), run in-process by `pack_client`; "
                f"to use one already running, pass --sources with a server named {pack.server!r}"
            ]
        )
    sources = ToolSources.model_validate({"servers": {pack.server: pack.source}})
    return sources, loaded.path.parent.resolve()


@asynccontextmanager
async def pack_client(loaded: LoadedPack, sources_file: Path | None) -> AsyncIterator[McpClient]:
    """A client of the pack's server alone, closed after the block (stdio servers stopped).

    A pack whose `source:` is the project's own server (and no `--sources`) gets the server
    in this process (`serving.mcp_server.inprocess`): the call path `toolrl mcp serve` runs,
    in mock mode, without a worker process, a port or HTTP per call."""
    pack = loaded.spec
    client: McpClient
    if sources_file is None and isinstance(pack.source, ProjectServerSource):
        from serving.mcp_server.inprocess import InProcessServer

        client = InProcessServer(pack.source.project_server)
    else:
        sources, base_dir = pack_sources(loaded, sources_file)
        only = sources.model_copy(update={"servers": {pack.server: sources.servers[pack.server]}})
        client = ToolCatalog(only, base_dir=base_dir)
    try:
        yield client
    finally:
        await client.close()


async def server_tools(client: McpClient, server: str) -> dict[str, ServerTool]:
    """The server's tools under their own names, with the names the model calls them by
    (a catalog's prefix) and their input schemas."""
    if isinstance(client, ToolCatalog):
        entries = await client.load()
        return {
            e.tool.name: ServerTool(e.tool.name, e.name, e.tool.input_schema, e.tool.description)
            for e in entries
            if e.server == server
        }
    tools = validate_tools(server, await client.list_tools())
    return {t.name: ServerTool(t.name, t.name, t.input_schema, t.description) for t in tools}


def tools_snapshot(client_tools: dict[str, ServerTool], server: str) -> list[dict[str, Any]]:
    """`tools.json` of a dataset: the tools as the model sees them, and where they live."""
    return [
        {
            "name": tool.exposed,
            "server": server,
            "server_tool": tool.name,
            "description": tool.description,
            "inputSchema": dict(tool.input_schema),
        }
        for tool in sorted(client_tools.values(), key=lambda t: t.exposed)
    ]
