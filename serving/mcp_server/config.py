"""The MCP server's one typed config. Every knob lives here with its default and why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The wire names client and server share live in the lower package; named here as well,
# since they are the server's settings too.
from serving.mcp_client.base import DEFAULT_URL as DEFAULT_URL
from serving.mcp_client.base import SEQ_HEADER as SEQ_HEADER
from serving.mcp_client.base import SESSION_HEADER as SESSION_HEADER
from serving.mcp_client.base import SESSION_META_KEY as SESSION_META_KEY
from serving.mcp_client.base import TOKEN_ENV as TOKEN_ENV
from serving.mcp_client.base import URL_ENV as URL_ENV


class FaultConfig(BaseModel):
    """Fault injection of mock and replay mode (the same draws in both); never in real mode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Seed of the fault sequence; the same seed replays the same faults for the same calls."""
    failure_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Probability that a call fails with a realistic error instead of running the tool."""
    empty_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Probability that a successful-looking call returns an empty result."""
    latency_ms: float = Field(default=0.0, ge=0.0, le=60_000.0)
    """Mean injected latency per call (exponentially distributed); 0 turns latency off."""
    latency_max_ms: float = Field(default=2_000.0, ge=0.0, le=120_000.0)
    """Cap on one injected delay, so a long tail cannot stall a rollout turn indefinitely."""


class ServerConfig(BaseModel):
    """How one `toolrl mcp serve` process group runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["real", "mock", "replay", "live"] = "mock"
    """mock: the built-in catalog, frozen reference clock, offline providers, fault injection
    (training). replay: the tools and answers of a recording (`store`), with the same fault
    injection (training against a user's servers without touching them). real: the real
    clock and providers (production). live: pass-through to the tool sources in `sources`
    (sandboxes), recording into `store` when given; no faults."""
    store: Path | None = None
    """replay: the CallStore file whose recorded calls are served (required).
    live: the CallStore file every answered call is recorded into (optional; created)."""
    store_tools: Path | None = None
    """The recorded tools/list sidecar (replay reads it, live writes it); default: beside
    the store (`X.tools.json`)."""
    sources: Path | None = None
    """live: the tool-sources YAML (`servers:` / `mcpServers:`) whose servers are called."""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    """0 picks a free port (tests); the chosen port is reported by `run()`."""
    path: str = "/mcp"
    workers: int = Field(default=2, ge=1, le=64)
    """Processes, each with its own SO_REUSEPORT socket so the kernel spreads connections."""
    token: str | None = Field(default=None, repr=False)
    """Bearer token; None (and no TOOLRL_MCP_TOKEN) disables auth."""
    max_body_bytes: int = Field(default=256 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Requests with a larger body are refused with 413 before parsing."""
    call_timeout_s: float = Field(default=10.0, gt=0.0, le=600.0)
    """Upper bound on one tool execution; a hung tool answers a timeout tool error."""
    max_concurrent_calls: int = Field(default=256, ge=1, le=100_000)
    """Per-process cap on tool executions in flight; further calls wait for a slot."""
    execution: Literal["auto", "thread", "inline"] = "auto"
    """thread: tools run in a pool, bounded by call_timeout_s (a hung tool cannot block the
    loop). inline: on the event loop, no timeout, less overhead (pure CPU tools only).
    auto: inline for the catalog's own tools in mock mode, thread otherwise."""
    tool_threads: int = Field(default=16, ge=1, le=1024)
    """Threads per process that run tool implementations (they are synchronous)."""
    graceful_timeout_s: float = Field(default=15.0, gt=0.0, le=600.0)
    """On SIGTERM, how long in-flight calls get to finish before connections are dropped."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_calls: bool = False
    """One structured log line per call (debug aid; costs CPU at thousands of calls/s)."""
    otel_spans: bool = False
    """Keep the SDK's OpenTelemetry middleware (a span per request). Without an exporter it
    only costs CPU on every call (about 5-10% in profiles); turn on when tracing is wired."""
    tune_gc: bool = True
    """gc.freeze() after start-up and a high gen-0 threshold: full-heap passes dominate p99."""
    faults: FaultConfig = Field(default_factory=FaultConfig)

    @model_validator(mode="after")
    def _path_is_absolute(self) -> ServerConfig:
        if not self.path.startswith("/"):
            raise ValueError("path must start with '/'")
        return self

    @model_validator(mode="after")
    def _replay_has_a_store(self) -> ServerConfig:
        """A replay server without its recording cannot answer anything, and a store given
        to another mode would be silently ignored: both are refused here, naming the file.
        Whether the file really is a CallStore is checked when the server loads it."""
        if self.mode == "live":
            if self.sources is None or not self.sources.is_file():
                raise ValueError(
                    "mode 'live' needs `sources`: an existing tool-sources YAML"
                    + (f" ({self.sources} does not exist)" if self.sources else "")
                )
            return self
        if self.sources is not None:
            raise ValueError(f"sources is only read in live mode (mode is {self.mode!r})")
        if self.mode != "replay":
            if self.store is not None or self.store_tools is not None:
                raise ValueError(
                    f"store/store_tools are only read in replay and live mode "
                    f"(mode is {self.mode!r})"
                )
            return self
        if self.store is None:
            raise ValueError(
                "mode 'replay' needs `store`: the CallStore file of recorded calls "
                "(toolrl mcp serve --mode replay --store FILE)"
            )
        if not self.store.is_file():
            what = "does not exist" if not self.store.exists() else "is not a file"
            raise ValueError(f"replay store {self.store} {what}")
        if self.store_tools is not None and not self.store_tools.is_file():
            raise ValueError(f"replay tools file {self.store_tools} does not exist")
        return self

    def resolved_token(self) -> str | None:
        """The token in force: the explicit one, else the env var, else none (auth off)."""
        return self.token or os.environ.get(TOKEN_ENV) or None
