"""Process management: N workers, each with its own SO_REUSEPORT socket, one port.

Why not `uvicorn --workers N`: it shares one listening socket, and measured here every
keep-alive connection ended up on one worker. With one socket per process bound with
SO_REUSEPORT, the kernel hashes each new connection to a listener, which spreads a pool
of persistent client connections over all workers.

Why GC tuning: Python's full-heap collections (35-85 ms measured) dominate the p99 of a
server that allocates per request. After start-up the long-lived heap (catalog, SDK
models, pint registry) is frozen out of collection and gen-0 runs less often; memory stays
flat because request garbage is acyclic and freed by reference counting.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any

import uvicorn

from serving.mcp_server.app import McpApp
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.examples import EXAMPLE_CALLS
from serving.mcp_server.live import LiveTools
from serving.mcp_server.logs import configure_logging
from serving.mcp_server.metrics import Metrics
from serving.mcp_server.notes import SqliteNotesStore
from serving.mcp_server.replay import ReplaySet, load_replay
from serving.tools import ToolCatalog, get_catalog
from serving.tools.base import ToolContext

logger = logging.getLogger("toolrl.mcp.server")
_FORK = multiprocessing.get_context("fork")
CLEAN_EXIT = frozenset({0, -signal.SIGTERM, -signal.SIGINT})
"""Exit codes of a worker that shut down gracefully (uvicorn re-raises the signal it got)."""


def bind_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one port (the first one picks it when port is 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
            sock.listen(2048)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def warm_up(catalog: ToolCatalog) -> None:
    """Build lazy caches (unit registry, knowledge index, time zones) before serving, so the
    first calls are not slow and the caches end up in the frozen heap."""
    context = ToolContext.reference("warm-up")
    for tool in catalog:
        example = EXAMPLE_CALLS.get(tool.name)
        if example is None or tool.stateful:
            continue
        with contextlib.suppress(Exception):
            tool.run(example, context, "mock")


def tune_gc() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


async def _serve(
    server: uvicorn.Server, sock: socket.socket, ready: Event, tune: bool, parent: int
) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if server.started:
        if tune:
            tune_gc()
        ready.set()
    while not task.done():
        if os.getppid() != parent:  # the supervisor died without stopping us: drain and go
            server.should_exit = True
        await asyncio.wait({task}, timeout=1.0)
    await task


def _worker_main(
    index: int,
    sockets: list[socket.socket],
    config: ServerConfig,
    catalog: ToolCatalog,
    metrics: Metrics,
    notes_path: str | None,
    ready: Event,
    replay: ReplaySet | None = None,
    live: LiveTools | None = None,
) -> None:
    # Own process group: a terminal's Ctrl-C reaches only the supervisor, which then sends
    # exactly one SIGTERM (a second signal would make uvicorn drop in-flight calls).
    os.setpgrp()
    parent = os.getppid()
    for i, other in enumerate(sockets):
        if i != index:
            other.close()  # else a dead worker's socket would keep taking connections
    sock = sockets[index]
    configure_logging(config.log_level)
    metrics.bind_worker(index)
    notes = SqliteNotesStore(notes_path) if notes_path else None
    app = McpApp(config, catalog, metrics, notes, replay, live)
    if replay is None and live is None:  # recordings and live sources have nothing to warm
        warm_up(catalog)
    loop = "asyncio"
    with contextlib.suppress(ImportError):
        import uvloop

        loop = "uvloop"
    uv_config = uvicorn.Config(
        app,
        lifespan="on",
        loop=loop,
        http="auto",
        access_log=False,
        log_config=None,
        log_level=config.log_level,
        timeout_graceful_shutdown=int(config.graceful_timeout_s),
        timeout_keep_alive=60,
    )
    server = uvicorn.Server(uv_config)
    logger.info("worker started", extra={"worker": index, "mode": config.mode})
    if loop == "uvloop":
        import uvloop

        uvloop.run(_serve(server, sock, ready, config.tune_gc, parent))
    else:
        asyncio.run(_serve(server, sock, ready, config.tune_gc, parent))
    logger.info("worker stopped", extra={"worker": index})


@dataclass
class RunningServer:
    """Handle on a started server group: its URL, and a graceful `stop()`."""

    config: ServerConfig
    port: int
    processes: list[BaseProcess]
    metrics: Metrics
    _scratch: str | None = None
    replay: ReplaySet | None = None
    """The recording served (replay mode): its digest names what rollouts saw."""
    _stopped: bool = field(default=False, init=False)

    @property
    def url(self) -> str:
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self.port}{self.config.path}"

    @property
    def base_url(self) -> str:
        return self.url[: -len(self.config.path)]

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.processes)

    def stop(self, timeout: float | None = None) -> list[int | None]:
        """SIGTERM every worker (in-flight calls finish), wait, then kill stragglers."""
        if not self._stopped:
            self._stopped = True
            for proc in self.processes:
                if proc.pid is not None and proc.is_alive():
                    os.kill(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + (timeout or self.config.graceful_timeout_s + 5)
            for proc in self.processes:
                proc.join(max(0.0, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
            if self._scratch:
                shutil.rmtree(self._scratch, ignore_errors=True)
        return [p.exitcode for p in self.processes]

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(
    config: ServerConfig, catalog: ToolCatalog | None = None, ready_timeout: float = 30.0
) -> RunningServer:
    """Bind, fork the workers, wait until every one of them is serving.

    `catalog` lets tests serve extra tools (e.g. one that hangs) without touching the
    shared catalog; workers inherit it through fork. In replay mode the catalog is the
    recording's (loaded and checked here, before any worker starts, so a missing or corrupt
    store is one `ReplayError` naming the file, not N dying workers). In live mode the
    sources are listed here, once (a failing source is a `CatalogError` naming it).
    """
    replay = live = None
    if config.mode == "replay":
        assert config.store is not None  # ServerConfig refuses replay without a store
        replay = load_replay(config.store, config.store_tools)
        catalog = replay.catalog
    elif config.mode == "live":
        assert config.sources is not None  # ServerConfig refuses live without sources
        live = LiveTools.load(config.sources, config.store, config.store_tools)
        catalog = live.served_catalog()
    catalog = catalog if catalog is not None else get_catalog()
    sockets = bind_sockets(config.host, config.port, config.workers)
    port = sockets[0].getsockname()[1]
    metrics = Metrics(catalog.names, config.workers)
    scratch = None
    notes_path = None
    if config.workers > 1:
        shm = "/dev/shm"  # noqa: S108 (private mkdtemp inside it; RAM-backed scratch)
        base = shm if os.path.isdir(shm) else None
        scratch = tempfile.mkdtemp(prefix="toolrl-mcp-", dir=base)
        notes_path = os.path.join(scratch, "notes.sqlite")
        SqliteNotesStore(notes_path).titles("init")  # create the schema once, before forking
    events = [_FORK.Event() for _ in range(config.workers)]
    processes: list[BaseProcess] = []
    for index in range(config.workers):
        proc = _FORK.Process(
            target=_worker_main,
            args=(
                index,
                sockets,
                config,
                catalog,
                metrics,
                notes_path,
                events[index],
                replay,
                live,
            ),
            name=f"toolrl-mcp-{index}",
            daemon=True,
        )
        proc.start()
        processes.append(proc)
    for sock in sockets:
        sock.close()
    handle = RunningServer(config, port, processes, metrics, scratch, replay)
    deadline = time.monotonic() + ready_timeout
    for event, worker in zip(events, processes, strict=True):
        while not event.wait(0.05):
            if not worker.is_alive() or time.monotonic() > deadline:
                handle.stop(timeout=2)
                raise RuntimeError(f"MCP worker {worker.name} failed to start")
    return handle


def run(config: ServerConfig) -> int:
    """Serve until SIGTERM/SIGINT, then shut down gracefully. Returns an exit status.

    A worker that dies on its own takes the group down (non-zero exit): the orchestrator
    restarts the service, rather than this process half-serving a port.
    """
    configure_logging(config.log_level)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        handle = start(config)
        logger.info(
            "serving",
            extra={
                "url": handle.url,
                "mode": config.mode,
                "workers": config.workers,
                "auth": config.resolved_token() is not None,
                **(handle.replay.health() if handle.replay else {}),
            },
        )
        if handle.replay is not None and handle.replay.orphans:
            logger.warning(
                "recorded calls of tools the sidecar does not list are not served",
                extra={"calls": handle.replay.orphans, "tools_file": str(handle.replay.tools_path)},
            )
        while not stop.wait(0.5):
            if not handle.alive():
                logger.error("a worker exited unexpectedly; stopping")
                handle.stop()
                return 1
        logger.info("shutting down")
        codes = handle.stop()
        return 0 if all(code in CLEAN_EXIT for code in codes) else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
