"""`toolrl mcp tool-config`: verl's tool-config YAML from a live MCP server's tools/list.

It lives in training because it writes the verl bridge's config (`tool_config.py`);
`training/cli.py` adds it to the `mcp` group that `serving.mcp_server.cli` registers, so the
command line is unchanged and serving never imports training. Heavy imports happen inside
the command, so that `toolrl --help` stays instant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from serving.mcp_client.base import DEFAULT_URL, TOKEN_ENV, URL_ENV


def register_cli(mcp_app: typer.Typer) -> None:
    """Add `tool-config` to the `mcp` command group."""

    @mcp_app.command("tool-config")
    def tool_config(
        out: Annotated[Path, typer.Option("--out", help="YAML file to write.")],
        url: Annotated[
            str | None, typer.Option(help=f"MCP endpoint (default: ${URL_ENV} or {DEFAULT_URL}).")
        ] = None,
        token: Annotated[
            str | None, typer.Option(help=f"Bearer token (default: ${TOKEN_ENV}).")
        ] = None,
        embed_url: Annotated[
            bool, typer.Option(help="Write the URL into the config (else workers use the env).")
        ] = True,
        timeout_s: Annotated[float, typer.Option(help="Per-call timeout for the bridge.")] = 30.0,
    ) -> None:
        """Read tools/list and write verl's native tool-config YAML for the bridge."""
        from serving.mcp_client.base import McpClientError
        from training.verl_bridge.tool_config import write_tool_config

        endpoint = url or os.environ.get(URL_ENV) or DEFAULT_URL
        secret = token or os.environ.get(TOKEN_ENV) or None
        try:
            report = write_tool_config(endpoint, out, secret, embed_url, timeout_s)
        except (McpClientError, OSError) as exc:
            typer.secho(f"tool-config failed: {exc}", fg="red", err=True)
            raise typer.Exit(2) from exc
        typer.echo(f"wrote {out}")
        if report.changes:
            typer.echo("flattened for verl (kept only type/description/enum):")
            for line in report.changes:
                typer.echo(f"  {line}")
