"""`toolrl mcp serve`. The lead's CLI calls `register_cli(app)` and adds the verl bridge's
`tool-config` to the group it returns (`training/verl_bridge/cli.py`): serving never
imports training.

Heavy imports (uvicorn, the MCP SDK) happen inside the commands, so that `toolrl --help`
stays instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from serving.mcp_server.config import TOKEN_ENV

ModeOption = Annotated[
    str,
    typer.Option(
        help="mock: the built-in tools, frozen clock, fault injection (training). "
        "replay: serve a recording (--store) of other MCP servers' calls, with the "
        "same fault injection (training without touching them). live: pass-through "
        "to --sources, recording into --store when given (sandboxes). real: production."
    ),
]

StoreOption = Annotated[
    Path | None,
    typer.Option(
        help="replay: the CallStore file of recorded calls (serving.mcp_client."
        "recording.RecordingClient or --mode live writes it). live: record into it.",
        dir_okay=False,
    ),
]

StoreToolsOption = Annotated[
    Path | None,
    typer.Option(
        help="replay: the recorded tools/list JSON (default: beside the store, "
        "STORE_STEM.tools.json); live: where it is written.",
        dir_okay=False,
    ),
]

SourcesOption = Annotated[
    Path | None,
    typer.Option(
        help="live: tool-sources YAML (servers: / mcpServers:) to pass calls to.",
        dir_okay=False,
    ),
]

HostOption = Annotated[str, typer.Option(help="Interface to bind.")]

PortOption = Annotated[int, typer.Option(help="TCP port (0: pick a free one).")]

WorkersOption = Annotated[int, typer.Option(help="Processes (own SO_REUSEPORT sockets).")]

TokenOption = Annotated[
    str | None,
    typer.Option(help=f"Bearer token required on /mcp (default: ${TOKEN_ENV})."),
]

SeedOption = Annotated[int, typer.Option(help="Fault seed (mock, replay).")]

FailureRateOption = Annotated[float, typer.Option(help="Mock, replay: share of calls that fail.")]

EmptyRateOption = Annotated[float, typer.Option(help="Mock, replay: share of empty results.")]

LatencyMsOption = Annotated[float, typer.Option(help="Mock, replay: mean injected latency.")]

CallTimeoutSOption = Annotated[float, typer.Option(help="Bound on one tool call.")]

MaxBodyBytesOption = Annotated[int, typer.Option(help="Largest request body.")]

LogLevelOption = Annotated[str, typer.Option(help="debug|info|warning|error")]

LogCallsOption = Annotated[bool, typer.Option(help="One log line per call.")]


def serve(
    mode: ModeOption = "mock",
    store: StoreOption = None,
    store_tools: StoreToolsOption = None,
    sources: SourcesOption = None,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    workers: WorkersOption = 2,
    token: TokenOption = None,
    seed: SeedOption = 0,
    failure_rate: FailureRateOption = 0.0,
    empty_rate: EmptyRateOption = 0.0,
    latency_ms: LatencyMsOption = 0.0,
    call_timeout_s: CallTimeoutSOption = 10.0,
    max_body_bytes: MaxBodyBytesOption = 256 * 1024,
    log_level: LogLevelOption = "info",
    log_calls: LogCallsOption = False,
) -> None:
    """Serve the tool catalog (or, in replay mode, a recording) over MCP streamable HTTP
    at /mcp, plus /healthz and /metrics."""
    from pydantic import ValidationError

    from serving.mcp_client.base import McpClientError
    from serving.mcp_server.config import FaultConfig, ServerConfig
    from serving.mcp_server.replay import ReplayError
    from serving.mcp_server.server import run

    try:
        config = ServerConfig.model_validate(
            {
                "mode": mode,
                "store": store,
                "store_tools": store_tools,
                "sources": sources,
                "host": host,
                "port": port,
                "workers": workers,
                "token": token,
                "call_timeout_s": call_timeout_s,
                "max_body_bytes": max_body_bytes,
                "log_level": log_level,
                "log_calls": log_calls,
                "faults": FaultConfig(
                    seed=seed,
                    failure_rate=failure_rate,
                    empty_rate=empty_rate,
                    latency_ms=latency_ms,
                ),
            }
        )
    except ValidationError as exc:
        raise typer.BadParameter(str(exc.errors()[0]["msg"])) from exc
    try:
        status = run(config)
    except ReplayError as exc:
        typer.secho(f"cannot serve the recording: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    except (McpClientError, ValidationError, ValueError, OSError) as exc:
        if config.mode != "live":
            raise
        typer.secho(f"cannot serve the tool sources {sources}: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(status)


def register_cli(app: typer.Typer) -> typer.Typer:
    """Add the `mcp` command group to `app`; returns it, so the composition root can add
    the commands that live in `training` (`mcp tool-config`)."""
    mcp_app = typer.Typer(help="MCP tool server and the verl bridge config.", no_args_is_help=True)
    app.add_typer(mcp_app, name="mcp")
    mcp_app.command("serve")(serve)
    return mcp_app
