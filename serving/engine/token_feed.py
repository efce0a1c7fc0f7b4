"""One engine request whose tokens reach the event loop as they are generated.

The engine thread appends to `request.tokens` and calls the request's hooks; here each hook
only sets an event on the server's loop (`call_soon_threadsafe`), so a streaming handler
wakes once per engine step however many tokens arrived, re-reads the tokens, and checks
between wake-ups that its caller is still there and its deadline has not passed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from aiohttp import web

from serving.engine.engine import Request
from serving.engine.worker import EngineWorker
from serving.sse import ClientGoneError

POLL_S = 0.5
"""How often a quiet request checks that its caller is still connected."""


class TokenFeed:
    """Submits `request` to `worker`; `wait()` returns when there is something new."""

    def __init__(
        self,
        worker: EngineWorker,
        request: Request,
        prefix_hint: Sequence[int] | None,
        timeout_s: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.request = request
        self._news = asyncio.Event()
        self._deadline = loop.time() + timeout_s

        def wake(*_: object) -> None:
            loop.call_soon_threadsafe(self._news.set)

        request.on_token = wake
        request.on_finish = wake
        worker.submit(request, prefix_hint)

    async def wait(self, http: web.Request) -> None:
        """Until a new token or the finish; TimeoutError after the deadline, ClientGoneError
        if the caller left. Either way the request is cancelled (the engine frees its row)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                transport = http.transport
                if transport is None or transport.is_closing():
                    raise ClientGoneError  # checked on every wake: a busy row wakes often
                if self._news.is_set():
                    break
                remaining = self._deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._news.wait(), min(POLL_S, remaining))
        except (TimeoutError, ClientGoneError, asyncio.CancelledError):
            self.request.cancelled = True
            raise
        self._news.clear()

    def cancel(self) -> None:
        self.request.cancelled = True
