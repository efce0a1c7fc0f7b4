"""Blue/green switching: requests never see a restart window when a new champion arrives.

The front door holds the current `Upstream`. A reload starts the new backend, health-checks
it, builds its agent, swaps the reference (new requests go to it at once), waits for the
old upstream's in-flight requests to finish, then stops the old backend. If the new one
fails to start, the old one keeps serving and the reload is retried on the next check.
While two backends run, both are told they share the machine (`Upstream.share`): two CPU
engines each using every core would slow each other down several times over.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class Upstream:
    """A serving backend and what the front door needs to use it."""

    version: str
    """Which model version it serves (registry version, or any label)."""
    agent: Any
    """The `serving.agent.Agent` bound to this backend."""
    stop: Callable[[], Awaitable[None]]
    """Stops the backend (and closes the agent's clients)."""
    share: Callable[[bool], None] | None = None
    """Told True while a second backend runs beside this one on the same machine and False
    when it is gone (a CPU engine then gives up half its threads); None: nothing to share."""
    inflight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def sharing(self, shared: bool) -> None:
        if self.share is not None:
            self.share(shared)

    def enter(self) -> None:
        self.inflight += 1
        self.idle.clear()

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.idle.set()


class Switchboard:
    """The current upstream and the reload procedure."""

    def __init__(self, upstream: Upstream, drain_timeout_s: float = 300.0) -> None:
        self.current = upstream
        self.drain_timeout_s = drain_timeout_s
        self.reloads = 0
        self._lock = asyncio.Lock()

    async def reload(self, launch: Callable[[], Awaitable[Upstream]]) -> bool:
        """Start a new upstream, switch to it, drain and stop the old one. Returns False
        (old upstream kept) if the launch fails."""
        async with self._lock:
            self.current.sharing(True)
            try:
                fresh = await launch()
            except Exception:
                self.current.sharing(False)
                logger.exception("new backend failed to start; keeping %s", self.current.version)
                return False
            fresh.sharing(True)
            old, self.current = self.current, fresh
            self.reloads += 1
            logger.info("switched from %s to %s", old.version, fresh.version)
        try:
            await asyncio.wait_for(old.idle.wait(), self.drain_timeout_s)
        except TimeoutError:
            logger.warning("old backend %s still busy after drain timeout", old.version)
        await old.stop()
        if self.current is fresh:
            fresh.sharing(False)
        return True

    async def watch(
        self,
        latest: Callable[[], Awaitable[str | None]],
        launch: Callable[[str], Awaitable[Upstream]],
        interval_s: float,
    ) -> None:
        """Poll `latest()` (the champion's version); reload when it changes. Runs forever."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                version = await latest()
            except Exception:
                logger.exception("champion lookup failed; keeping %s", self.current.version)
                continue
            if version is not None and version != self.current.version:
                await self.reload(functools.partial(launch, version))
