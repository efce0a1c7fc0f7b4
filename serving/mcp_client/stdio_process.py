"""One stdio MCP server child as the client sees it: its process, pending requests and the
state of its connection, and the sink that drains its stderr.

Why apart from the client: a child is replaced on every restart while the client stays;
what belongs to one child (its pending futures, the garbage it wrote, why it broke) goes
with it. The stderr sink is the client's, so one log file (and its rotation) spans restarts.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from pathlib import Path
from typing import IO, Any

STDERR_TAIL_BYTES = 4_096
"""How much of the server's latest stderr an error message quotes."""


class ServerProcess:
    """One running child: its pipes, reader tasks and pending requests. Replaced on restart."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.garbage: deque[str] = deque(maxlen=3)
        self.garbage_count = 0
        self.broken: str | None = None
        """Why the connection is unusable although the process may still run."""
        self.exited = asyncio.Event()
        self.ready = False
        """The handshake completed: a disconnect is a crash, not a failed start."""

    @property
    def alive(self) -> bool:
        return self.broken is None and self.proc.returncode is None and not self.exited.is_set()

    def describe_exit(self, stderr_tail: str) -> str:
        """Why the connection ended, for an error message: broken, exit code, the stdout
        garbage it wrote, its last stderr."""
        parts = []
        if self.broken:
            parts.append(self.broken)
        code = self.proc.returncode
        if code is not None:
            parts.append(f"exited with code {code}")
        if self.garbage_count:
            sample = "; ".join(repr(line) for line in self.garbage)
            parts.append(
                f"wrote {self.garbage_count} stdout line(s) that are not JSON-RPC "
                f"(e.g. {sample}); an MCP stdio server must log to stderr only"
            )
        if stderr_tail:
            parts.append(f"stderr: {stderr_tail[-600:]}")
        return "; ".join(parts) or "the connection closed"


class StderrSink:
    """Drains a server's stderr (a full pipe would block the child): a bounded tail for error
    messages, and optionally a log file that rotates at `max_log_bytes`."""

    def __init__(self, log_path: Path | None, max_log_bytes: int) -> None:
        self.log_path = log_path
        self.max_log_bytes = max_log_bytes
        self._tail = bytearray()

    def tail(self) -> str:
        """The last lines the server wrote to stderr (bounded)."""
        text = self._tail.decode("utf-8", "replace").strip()
        return text[-STDERR_TAIL_BYTES:]

    def clear(self) -> None:
        """Forget the tail: a new child starts."""
        self._tail.clear()

    async def drain(self, stderr: asyncio.StreamReader) -> None:
        """Read `stderr` to its end."""
        log: IO[bytes] | None = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = self.log_path.open("ab")
        try:
            while chunk := await stderr.read(8192):
                self._tail += chunk
                del self._tail[: -STDERR_TAIL_BYTES * 2]
                if log is not None:
                    log = self._write_log(log, chunk)
        finally:
            if log is not None:
                log.close()

    def _write_log(self, log: IO[bytes], chunk: bytes) -> IO[bytes]:
        """Append to the log; past `max_log_bytes` the file moves to `.1` and a new one starts
        (two files at most, so a chatty server cannot fill the disk)."""
        assert self.log_path is not None
        log.write(chunk)
        log.flush()
        if log.tell() > self.max_log_bytes:
            log.close()
            os.replace(self.log_path, self.log_path.with_name(self.log_path.name + ".1"))
            log = self.log_path.open("ab")
        return log
