"""The engine on its own thread, fed by many callers (HTTP handlers).

One thread owns the model and runs `Engine.step` while any request is in flight; callers
hand requests over through a queue and are told about every token and the finish from the
engine thread. The shared prefix follows the traffic: while the engine is idle, a request
whose system turn differs from the cached prefix re-seeds it with its own (the system
prompt and tool list, rendered by the caller), so the next requests with the same tools
reuse it; a request that arrives mid-flight shares whatever part of the prefix it has in
common.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from serving.engine.engine import Engine, Request

logger = logging.getLogger(__name__)


@dataclass
class Job:
    request: Request
    prefix_hint: Sequence[int] | None = None


class EngineWorker:
    """Runs `engine` on a daemon thread until `close()`; or, made with `own_thread=False`,
    in whichever thread calls `run_here`.

    Why the second way: torch's OpenMP pool is fast only for the thread that made it.
    Measured (`benchmarks/bench_engine_thread.py`, bf16, 2 cores): in a process whose main
    thread has already run torch (a trainer has), the engine on a second thread decoded at
    less than half the speed, on 1.2 cores, against the same requests with the engine on the
    main thread. So an in-process caller that owns the main thread (the trainer's rollouts
    and quick evals) steps the engine there and runs its episodes elsewhere."""

    def __init__(
        self, engine: Engine, threads: int | None = None, *, own_thread: bool = True
    ) -> None:
        self.engine = engine
        self.threads = threads
        self.full_threads = threads or torch.get_num_threads()
        self.wanted_threads = self.full_threads
        """Set from any thread (`share_cores`); the engine thread applies it before its next
        step (torch's thread count belongs to the thread that runs the ops)."""
        self._inbox: queue.Queue[Job | None] = queue.Queue()
        self._in_flight: list[Request] = []
        self._stopped = threading.Event()
        self.failures = 0
        self._thread: threading.Thread | None = None
        if own_thread:
            self._thread = threading.Thread(target=self._run, name="toolrl-engine", daemon=True)
            self._thread.start()

    def run_here(self) -> None:
        """Step the engine in the calling thread until another thread calls `close()` (a
        worker made with `own_thread=False`; one with its own thread refuses)."""
        if self._thread is not None:
            raise RuntimeError("this engine already runs on its own thread")
        self._run()

    def submit(self, request: Request, prefix_hint: Sequence[int] | None = None) -> None:
        if self._stopped.is_set():
            raise RuntimeError("the engine is shut down")
        self._inbox.put(Job(request, prefix_hint))

    async def generate_async(
        self,
        request: Request,
        prefix_hint: Sequence[int] | None = None,
        timeout_s: float = 600.0,
        caller_gone: Callable[[], bool] | None = None,
        poll_s: float = 0.5,
    ) -> Request:
        """Submit `request` and wait for it from an event loop (the engine thread settles
        it). `caller_gone` is asked every `poll_s`: when the caller has left (a client that
        disconnected), or the deadline passes, the request is cancelled and the engine
        drops it at its next step, so abandoned work stops taking rows."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Request] = loop.create_future()

        def settle(finished: Request) -> None:
            if not done.done():
                done.set_result(finished)

        def finished(finished_request: Request) -> None:
            loop.call_soon_threadsafe(settle, finished_request)

        request.on_finish = finished
        self.submit(request, prefix_hint)
        deadline = loop.time() + timeout_s
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                finished_in_time, _ = await asyncio.wait({done}, timeout=min(poll_s, remaining))
                if finished_in_time:
                    return done.result()
                if caller_gone is not None and caller_gone():
                    raise asyncio.CancelledError  # the caller is gone
        except (TimeoutError, asyncio.CancelledError):
            request.cancelled = True
            raise

    def share_cores(self, shared: bool) -> None:
        """Half the threads while another engine runs on the same cores (a blue/green
        reload), all of them again when it is gone. Two engines each spinning on every core
        slow each other down several times over (OpenMP threads busy-wait for cores the
        other holds): measured 7.4 -> 1.1 decode steps/s each."""
        self.wanted_threads = max(1, self.full_threads // 2) if shared else self.full_threads

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet finished (a streaming caller that left is gone
        from here within one poll: the figure tests and operators watch)."""
        return len(self._in_flight) + self._inbox.qsize()

    def close(self) -> None:
        self._stopped.set()
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _admit(self, job: Job) -> None:
        engine = self.engine
        hint = list(job.prefix_hint or [])
        if engine.idle and len(hint) >= 16 and hint != engine.kv.prefix_tokens:
            engine.set_prefix(hint[: len(job.request.prompt) - 1])
        engine.submit(job.request)
        self._in_flight.append(job.request)

    def _run(self) -> None:
        torch.set_num_threads(self.full_threads)
        while not self._stopped.is_set():
            if torch.get_num_threads() != self.wanted_threads:
                torch.set_num_threads(self.wanted_threads)
                logger.info("engine now runs on %d thread(s)", self.wanted_threads)
            try:
                if self.engine.idle:
                    job = self._inbox.get()
                    if job is None:
                        break
                    self._admit(job)
                while True:
                    try:
                        job = self._inbox.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        return
                    self._admit(job)
                self.engine.step()
            except Exception as exc:  # one bad step must not kill the server
                self.failures += 1
                logger.exception("engine step failed; failing the requests in flight")
                self._fail_all(f"{type(exc).__name__}: {str(exc)[:200]}")
            self._notify_finished()

    def _notify_finished(self) -> None:
        still: list[Request] = []
        for request in self._in_flight:
            if request.finish is None:
                still.append(request)
            elif request.on_finish is not None:
                request.on_finish(request)
        self._in_flight = still

    def _fail_all(self, reason: str) -> None:
        for request in self._in_flight:
            if request.finish is None:
                request.finish = "error"
                request.error = reason
        self.engine.reset()
