"""The catalog: the union of every tool source's `tools/list`, and the router for calls.

Why one object that is itself a client: the agent loop, the verl bridge and the front door take
one `ToolExecutor`; given a `ToolCatalog` they see every configured server's tools under the
names the model uses, and each call goes to the server that owns the tool, with the prefix
stripped. Loading is all-or-nothing: a catalog with a server silently missing would train a
model on a different tool set than the one it is served with.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.mcp_client.base import McpClient, McpClientError, McpProtocolError, ToolCallResult
from serving.mcp_client.schemas import EXPOSED_NAME, ToolDefinition, ToolSchemaError, validate_tools
from serving.mcp_client.sources import (
    HttpSource,
    StdioSource,
    ToolSources,
    child_env,
    resolve_command,
)


class CatalogError(McpClientError):
    """One or more sources failed (down, slow, invalid schemas, name clash); every problem
    is a line of the message, each naming its server."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One tool as the model sees it, and where it really lives."""

    server: str
    name: str
    """The name the model calls (prefix included)."""
    tool: ToolDefinition
    """The tool as its server defines it (its own name)."""

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def required(self) -> tuple[str, ...]:
        return self.tool.required

    def as_mcp(self) -> dict[str, Any]:
        """The MCP tool dict (`name`, `description`, `inputSchema`) under the exposed name."""
        return {
            "name": self.name,
            "description": self.tool.description,
            "inputSchema": self.tool.input_schema,
        }


def open_client(
    name: str,
    source: HttpSource | StdioSource,
    environ: Mapping[str, str],
    base_dir: Path,
    log_dir: Path | None = None,
) -> McpClient:
    """The transport client for one source (nothing is started or connected yet)."""
    if isinstance(source, HttpSource):
        from serving.mcp_client.http import McpHttpClient

        token = environ.get(source.token_env) if source.token_env else None
        return McpHttpClient(source.url, token or None, source.timeout_s, max_concurrency=64)
    from serving.mcp_client.stdio import StdioMcpClient

    env, problems = child_env(name, source, environ)
    if problems:
        raise CatalogError(problems)
    cwd = Path(source.cwd).expanduser() if source.cwd else None
    return StdioMcpClient(
        name,
        resolve_command(source.command, base_dir, env.get("PATH")),
        source.args,
        env=env,
        cwd=(cwd if cwd is None or cwd.is_absolute() else base_dir / cwd),
        timeout_s=source.timeout_s,
        log_path=(log_dir / f"{name}.stderr.log") if log_dir else None,
    )


class ToolCatalog:
    """Every configured server's tools as one client (see the module docstring).

    `clients` replaces the transports built from `sources` (tests, or a caller that already
    holds a pooled client); the catalog closes only the clients it built.
    """

    def __init__(
        self,
        sources: ToolSources,
        environ: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
        clients: Mapping[str, McpClient] | None = None,
    ) -> None:
        self.sources = sources
        self._environ = dict(os.environ if environ is None else environ)
        self._base_dir = base_dir or Path.cwd()
        self._given = dict(clients or {})
        self._clients: dict[str, McpClient] = {}
        self._entries: dict[str, CatalogEntry] | None = None
        self._lock = asyncio.Lock()

    def _client(self, name: str) -> McpClient:
        client = self._clients.get(name) or self._given.get(name)
        if client is None:
            log_dir = Path(self.sources.log_dir) if self.sources.log_dir else None
            source = self.sources.servers[name]
            client = open_client(name, source, self._environ, self._base_dir, log_dir)
            self._clients[name] = client
        return client

    def _where(self, name: str) -> str:
        source = self.sources.servers[name]
        target = source.url if isinstance(source, HttpSource) else source.command
        return f"MCP server '{name}' ({target})"

    async def _list_one(self, name: str) -> list[ToolDefinition]:
        source = self.sources.servers[name]
        client = self._client(name)
        slow = McpClientError(
            f"{self._where(name)} did not list its tools within {source.timeout_s:g} s"
        )
        try:
            # The transports enforce `timeout_s` per request (with better messages); this
            # bounds the whole start + handshake + pages sequence as a backstop.
            raw = await asyncio.wait_for(client.list_tools(), source.timeout_s * 3)
        except TimeoutError:
            raise slow from None
        except McpClientError as exc:
            if isinstance(exc.__cause__, TimeoutError):
                raise slow from exc
            message = str(exc)
            if f"'{name}'" not in message:  # the HTTP client does not know the server's name
                message = f"{self._where(name)}: {message}"
            token_env = source.token_env if isinstance(source, HttpSource) else None
            if token_env and "401" in message and not self._environ.get(token_env):
                message += f" (the token comes from ${token_env}, which is not set)"
            raise McpClientError(message) from exc
        return validate_tools(name, raw)

    async def load(self) -> list[CatalogEntry]:
        """List every server at once, validate, merge; `CatalogError` names each failure."""
        async with self._lock:
            if self._entries is not None:
                return list(self._entries.values())
            names = list(self.sources.servers)
            problems: list[str] = []
            listed: dict[str, list[ToolDefinition]] = {}
            results = await asyncio.gather(
                *(self._list_one(name) for name in names), return_exceptions=True
            )
            for name, result in zip(names, results, strict=True):
                if isinstance(result, McpClientError | ToolSchemaError):
                    problems.append(str(result))
                elif isinstance(result, BaseException):
                    problems.append(f"{self._where(name)}: {type(result).__name__}: {result}")
                else:
                    listed[name] = result
            entries = self._merge(listed, problems)
            if problems:
                raise CatalogError(problems)
            self._entries = entries
            return list(entries.values())

    def _merge(
        self, listed: Mapping[str, list[ToolDefinition]], problems: list[str]
    ) -> dict[str, CatalogEntry]:
        entries: dict[str, CatalogEntry] = {}
        for server, tools in listed.items():
            prefix = self.sources.servers[server].prefix or ""
            for tool in tools:
                exposed = prefix + tool.name
                if not EXPOSED_NAME.fullmatch(exposed):
                    problems.append(
                        f"MCP server '{server}', tool '{tool.name}': the name the model would "
                        f"see, {exposed!r}, is not 1-64 characters of A-Z a-z 0-9 _ - "
                        "(OpenAI's function-name rule)"
                    )
                    continue
                other = entries.get(exposed)
                if other is not None:
                    problems.append(
                        f"tool name clash: '{exposed}' is offered by MCP servers "
                        f"'{other.server}' and '{server}'; set `prefix` on one of them"
                    )
                    continue
                entries[exposed] = CatalogEntry(server, exposed, tool)
        return entries

    @property
    def entries(self) -> list[CatalogEntry]:
        if self._entries is None:
            raise RuntimeError("the catalog is not loaded: await load() first")
        return list(self._entries.values())

    async def list_tools(self) -> list[dict[str, Any]]:
        return [entry.as_mcp() for entry in await self.load()]

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        seq: int | None = None,
    ) -> ToolCallResult:
        """Route to the owning server under its own name; an unknown name is a protocol
        error the model can read, as the project's server answers it."""
        if self._entries is None:
            await self.load()
        assert self._entries is not None
        entry = self._entries.get(name)
        if entry is None:
            raise McpProtocolError(-32602, f"Unknown tool: {name}")
        return await self._client(entry.server).call_tool(entry.tool.name, arguments, session, seq)

    async def close(self) -> None:
        """Close the clients the catalog built (stdio servers are stopped)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()


def open_tools(
    sources: ToolSources | None,
    base_dir: Path | None,
    mcp_url: str,
    token: str | None = None,
) -> McpClient:
    """The tools an agent uses: the configured servers as one catalog, or, with no sources,
    the project's own server at `mcp_url` (the pooled HTTP client, no catalog in between)."""
    if sources is None:
        from serving.mcp_client.http import McpHttpClient

        return McpHttpClient(mcp_url, token)
    return ToolCatalog(sources, base_dir=base_dir)
