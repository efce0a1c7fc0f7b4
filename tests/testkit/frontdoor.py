"""The front door on its own event-loop thread, in front of any OpenAI-compatible upstream:
what the front-door tests and the load benchmark call as users do."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from serving.agent import Agent, ChatClient, EndpointBackend
from serving.frontdoor.app import FrontDoorConfig, build_app
from serving.launch.switch import Switchboard, Upstream
from serving.mcp_client.http import McpHttpClient
from training.evaluation.scripted import Scripted


class Door:
    """The front door app on its own event loop thread."""

    def __init__(self, config: FrontDoorConfig) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.switchboard: Switchboard | None = None
        self.runner: web.AppRunner | None = None
        self.url = ""

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def open(self, upstream: Upstream) -> str:
        async def go() -> str:
            self.switchboard = Switchboard(upstream, drain_timeout_s=30)
            self.runner = web.AppRunner(build_app(self.switchboard, self.config))
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", 0).start()
            return f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1"

        self.url = self.call(go())
        return self.url

    def close(self) -> None:
        async def go() -> None:
            if self.runner is not None:
                await self.runner.cleanup()
            if self.switchboard is not None:
                await self.switchboard.current.stop()

        self.call(go())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def upstream_for(url: str, mcp_url: str, version: str, on_stop: Any = None) -> Upstream:
    chat = ChatClient(url, "scripted")
    tools = McpHttpClient(mcp_url)

    async def stop() -> None:
        await chat.close()
        await tools.close()
        if on_stop is not None:
            await asyncio.to_thread(on_stop)

    return Upstream(version=version, agent=Agent(EndpointBackend(chat), tools), stop=stop)


def weather_then_answer(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> Scripted:
    """A scripted model: call the weather tool for Paris, then answer with its result."""
    results = [m for m in messages if m.get("role") == "tool"]
    if not results:
        return Scripted(calls=[("get_current_weather", {"location": "Paris"})])
    return Scripted(content=f"It is {results[-1]['content'][:60]}")
