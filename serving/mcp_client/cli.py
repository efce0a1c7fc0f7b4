"""`toolrl tools list`: the catalog the loop will see, from the configured tool sources.

Registered by training/cli.py with `register_cli(app, default_sources)`: the default sources
come from the pipeline config, which lives in `training` (and `serving` never imports
`training`), so the composition root injects them. Only typer is imported at load time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from serving.mcp_client.catalog import CatalogEntry
    from serving.mcp_client.sources import ToolSources

DefaultSources = Callable[[], "tuple[ToolSources, Path]"]
"""Returns the sources to use without `--sources`, and the directory relative paths in them
are taken from."""


def _first_line(text: str, width: int = 80) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _as_json(entries: list[CatalogEntry], sources: ToolSources) -> str:
    return json.dumps(
        {
            "servers": {
                name: {
                    "transport": source.transport,
                    "prefix": source.prefix,
                    "tools": sum(1 for entry in entries if entry.server == name),
                }
                for name, source in sources.servers.items()
            },
            "tools": [
                {
                    "name": entry.name,
                    "server": entry.server,
                    "server_tool": entry.tool.name,
                    "description": entry.description,
                    "required": list(entry.required),
                    "inputSchema": entry.tool.input_schema,
                }
                for entry in entries
            ],
        },
        indent=2,
        ensure_ascii=False,
    )


def _print_table(entries: list[CatalogEntry], sources: ToolSources) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(entries)} tools from {len(sources.servers)} MCP server(s)")
    for column in ("server", "tool", "description", "required"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        shown = entry.name if entry.name == entry.tool.name else f"{entry.name} ({entry.tool.name})"
        table.add_row(
            entry.server, shown, _first_line(entry.description), ", ".join(entry.required)
        )
    Console().print(table)


async def _load(sources: ToolSources, base_dir: Path) -> list[CatalogEntry]:
    from serving.mcp_client.catalog import ToolCatalog

    catalog = ToolCatalog(sources, base_dir=base_dir)
    try:
        return await catalog.load()
    finally:
        await catalog.close()


def register_cli(app: typer.Typer, default_sources: DefaultSources) -> typer.Typer:
    """Add the `tools` command group to `app`; returns it, so the composition root can add
    the groups that live in `training` (`tools pack`)."""
    tools_app = typer.Typer(
        help="The tool catalog: every configured MCP server's tools, as the model sees them.",
        no_args_is_help=True,
    )
    app.add_typer(tools_app, name="tools")

    @tools_app.command("list")
    def list_tools(
        sources_file: Annotated[
            Path | None,
            typer.Option(
                "--sources",
                help="YAML with `servers:` (or an MCP client's `mcpServers:` block). "
                "Default: `tool_sources` of the pipeline config ($TOOLRL_PIPELINE_CONFIG), "
                "else the project's own MCP server.",
            ),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Machine-readable output (schemas included).")
        ] = False,
    ) -> None:
        """Print the catalog the loop will see: every tool source's tools, validated.

        Starts (stdio) or reaches (HTTP) every configured server, then prints
        each tool: server, name (prefixed, then the server's own), first line
        of its description, required arguments. Exits 2, naming the server,
        when one is down, slow, returns invalid schemas or clashes with another.
        """
        from pydantic import ValidationError

        from serving.mcp_client.base import McpClientError
        from serving.mcp_client.sources import load_tool_sources

        try:
            if sources_file is not None:
                sources, base_dir = load_tool_sources(sources_file), sources_file.parent
            else:
                sources, base_dir = default_sources()
        except (OSError, ValueError, ValidationError) as exc:
            typer.secho(f"tool sources unreadable: {exc}", fg="red", err=True)
            raise typer.Exit(2) from exc
        try:
            entries = asyncio.run(_load(sources, base_dir.resolve()))
        except McpClientError as exc:
            typer.secho(f"tool catalog failed:\n{exc}", fg="red", err=True)
            raise typer.Exit(2) from exc
        if as_json:
            typer.echo(_as_json(entries, sources))
        else:
            _print_table(entries, sources)

    return tools_app
