"""An MCP client over stdio: the project starts the server as a subprocess and supervises it.

Most MCP servers in use (the reference servers among them) speak stdio only: newline-delimited
JSON-RPC on the child's stdin/stdout, logs on its stderr. Why our own implementation, not the
SDK's `stdio_client`: the SDK runs a session object with anyio task groups and memory streams
per connection (about 1 ms of CPU per call, the same cost that made the HTTP side write its own
client), and it does not restart a crashed server. This client is one reader task and a dict of
futures keyed by request id, so concurrent calls multiplex on one pipe.

Supervision:
- The server is started on first use: `initialize`, then `notifications/initialized`.
- A server that exits fails every call in flight with an error that names it, its exit code
  and the tail of its stderr; the next call starts it again.
- Each request has a deadline; a late answer is dropped and the server is told
  (`notifications/cancelled`). A server that never completes the handshake is killed.
- Stdout lines that are not JSON-RPC are counted and shown in errors (some servers print a
  banner); past `MAX_GARBAGE_LINES` the server is declared broken and stopped.
- Stderr is always drained (a full pipe would block the child), kept as a bounded tail for
  error messages, and optionally written to a log file that rotates at `max_log_bytes`.
- `close()` closes stdin (the spec's shutdown), then terminates, then kills the process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from serving.mcp_client.base import (
    CLIENT_INFO,
    KNOWN_VERSIONS,
    PROTOCOL_VERSION,
    McpClientError,
    McpProtocolError,
    ToolCallResult,
    call_result,
)
from serving.mcp_client.stdio_process import ServerProcess, StderrSink
from serving.runtime.processes import signal_process_group, stop_process_group_async

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Longest stdout line (one JSON-RPC message) accepted; a longer one breaks the connection."""
MAX_GARBAGE_LINES = 64
"""Non-JSON-RPC stdout lines tolerated before the server is declared broken."""
MAX_PAGES = 100
"""tools/list pages followed before a server is considered to loop on its cursor."""
SHUTDOWN_GRACE_S = 2.0
"""Time given to exit after stdin closes, and again after SIGTERM, before SIGKILL."""


class StdioMcpClient:
    """A supervised MCP server subprocess; implements `serving.mcp_client.base.McpClient`.

    Bound to the event loop that first uses it (asyncio subprocesses are), like the HTTP
    client's pools. `session`/`seq` are accepted for the interface and not sent: they are
    the project server's headers, which a third-party server would not understand.
    """

    def __init__(
        self,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout_s: float = 30.0,
        log_path: Path | None = None,
        max_log_bytes: int = 1024 * 1024,
    ) -> None:
        self.name = name
        self.command = command
        self.args = list(args)
        self.env = dict(env) if env is not None else None
        self.cwd = str(cwd) if cwd is not None else None
        self.timeout_s = timeout_s
        self.starts = 0
        """How many times the server process was started (1 + restarts)."""
        self.server_info: dict[str, Any] = {}
        self.protocol_version: str | None = None
        self._ids = itertools.count(1)
        self._current: ServerProcess | None = None
        self._start_lock = asyncio.Lock()
        self._stderr = StderrSink(log_path, max_log_bytes)
        self._closed = False

    # --- lifecycle ---------------------------------------------------------------------------
    def _where(self) -> str:
        return f"MCP server '{self.name}' ({self.command})"

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr (bounded), for error messages."""
        return self._stderr.tail()

    def _describe_exit(self, current: ServerProcess) -> str:
        return current.describe_exit(self.stderr_tail())

    async def _ensure_started(self) -> ServerProcess:
        current = self._current
        if current is not None and current.alive:
            return current
        async with self._start_lock:
            current = self._current
            if current is not None and current.alive:
                return current
            if self._closed:
                raise McpClientError(f"{self._where()}: the client is closed")
            if current is not None:
                await self._stop(current)
            current = await self._spawn()
            self._current = current
            try:
                await self._handshake(current)
            except BaseException:
                await self._stop(current)
                raise
            return current

    async def _spawn(self) -> ServerProcess:
        self._stderr.clear()
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                limit=MAX_MESSAGE_BYTES,
                start_new_session=True,  # its own process group: close() stops its children too
            )
        except FileNotFoundError as exc:
            missing = self.cwd if self.cwd and not Path(self.cwd).is_dir() else self.command
            raise McpClientError(
                f"{self._where()}: cannot start: {missing!r} not found (is the server "
                "installed? `make setup` installs the optional ones)"
            ) from exc
        except PermissionError as exc:
            raise McpClientError(f"{self._where()}: cannot start: permission denied") from exc
        except OSError as exc:
            raise McpClientError(f"{self._where()}: cannot start: {exc}") from exc
        self.starts += 1
        current = ServerProcess(proc)
        stderr = proc.stderr
        assert stderr is not None
        current.tasks = [
            asyncio.create_task(self._read_stdout(current), name=f"mcp-{self.name}-stdout"),
            asyncio.create_task(self._stderr.drain(stderr), name=f"mcp-{self.name}-stderr"),
        ]
        return current

    async def _handshake(self, current: ServerProcess) -> None:
        result = await self._request_on(
            current,
            "initialize",
            {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO},
        )
        version = str(result.get("protocolVersion", ""))
        if version not in KNOWN_VERSIONS:
            raise McpClientError(
                f"{self._where()}: answered initialize with protocol version {version!r}; "
                f"this client speaks {', '.join(sorted(KNOWN_VERSIONS))}"
            )
        self.protocol_version = version
        info = result.get("serverInfo")
        self.server_info = dict(info) if isinstance(info, Mapping) else {}
        await self._send(current, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        current.ready = True

    # --- pipes -------------------------------------------------------------------------------
    async def _send(self, current: ServerProcess, message: Mapping[str, Any]) -> None:
        stdin = current.proc.stdin
        if stdin is None or stdin.is_closing():
            raise McpClientError(f"{self._where()}: {self._describe_exit(current)}")
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            stdin.write(line.encode())
            await stdin.drain()
        except (ConnectionError, BrokenPipeError) as exc:
            await asyncio.sleep(0)  # let the reader see EOF and the exit code
            raise McpClientError(f"{self._where()}: {self._describe_exit(current)}") from exc

    async def _read_stdout(self, current: ServerProcess) -> None:
        stdout = current.proc.stdout
        assert stdout is not None
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:  # LimitOverrunError: one line above MAX_MESSAGE_BYTES
                    current.broken = f"sent a message over {MAX_MESSAGE_BYTES} bytes"
                    break
                if not line:
                    break
                await self._dispatch(current, line)
                if current.broken:
                    break
        finally:
            await self._on_disconnect(current)

    async def _dispatch(self, current: ServerProcess, line: bytes) -> None:
        text = line.strip()
        if not text:
            return
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        messages = message if isinstance(message, list) else [message]
        for item in messages:
            if not isinstance(item, dict) or item.get("jsonrpc") != "2.0":
                current.garbage_count += 1
                current.garbage.append(text[:80].decode("utf-8", "replace"))
                if current.garbage_count > MAX_GARBAGE_LINES:
                    current.broken = "kept writing non-JSON-RPC output on stdout"
                return
            if "method" in item:
                await self._answer_server_request(current, item)
                continue
            request_id = item.get("id")
            future = current.pending.pop(request_id, None) if isinstance(request_id, int) else None
            if future is not None and not future.done():
                future.set_result(item)

    async def _answer_server_request(self, current: ServerProcess, message: dict[str, Any]) -> None:
        """Server-to-client traffic: notifications are ignored, `ping` is answered, anything
        else is refused (no sampling, roots or elicitation capability was declared)."""
        if "id" not in message:
            return
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if message.get("method") == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": -32601, "message": "Method not found"}
        with contextlib.suppress(McpClientError):
            await self._send(current, reply)

    async def _on_disconnect(self, current: ServerProcess) -> None:
        """Stdout closed or broke: wait briefly for the exit code, then fail what is pending."""
        if current.broken is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(current.proc.wait(), 1.0)
            await asyncio.wait(current.tasks[1:], timeout=0.5)  # its last words on stderr
        current.exited.set()
        reason = self._describe_exit(current)
        if current.ready:
            error = McpClientError(
                f"{self._where()} stopped while the call was in flight: {reason}; "
                "it is started again on the next call"
            )
        else:
            error = McpClientError(f"{self._where()} failed to start: {reason}")
        for future in current.pending.values():
            if not future.done():
                future.set_exception(error)
        current.pending.clear()
        if current.broken is not None and current.proc.returncode is None:
            signal_process_group(current.proc.pid, signal.SIGKILL)

    # --- requests ----------------------------------------------------------------------------
    async def _request_on(
        self, current: ServerProcess, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        current.pending[request_id] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._send(current, message)
            reply = await asyncio.wait_for(future, self.timeout_s)
        except TimeoutError:
            current.pending.pop(request_id, None)
            with contextlib.suppress(McpClientError):
                await self._send(
                    current,
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": "timeout"},
                    },
                )
            detail = self._describe_exit(current) if current.garbage_count else ""
            raise McpClientError(
                f"{self._where()} did not answer {method} within {self.timeout_s:g} s"
                + (f" ({detail})" if detail else "")
            ) from None
        finally:
            current.pending.pop(request_id, None)
        error = reply.get("error")
        if isinstance(error, Mapping):
            raise McpProtocolError(int(error.get("code", 0)), str(error.get("message", "")))
        result = reply.get("result")
        if not isinstance(result, dict):
            raise McpClientError(f"{self._where()}: reply to {method} without a result object")
        return result

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One JSON-RPC request; starts (or restarts) the server first when needed."""
        current = await self._ensure_started()
        return await self._request_on(current, method, params)

    async def initialize(self) -> None:
        """Start the server and complete the handshake now (else the first call does)."""
        await self._ensure_started()

    async def list_tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            result = await self.request("tools/list", {"cursor": cursor} if cursor else None)
            page = result.get("tools")
            if not isinstance(page, list):
                raise McpClientError(f"{self._where()}: tools/list reply has no `tools` list")
            tools.extend(page)
            cursor = result.get("nextCursor")
            if not cursor:
                return tools
            if not isinstance(cursor, str) or cursor in seen:
                raise McpClientError(f"{self._where()}: tools/list repeats cursor {cursor!r}")
            seen.add(cursor)
        raise McpClientError(f"{self._where()}: tools/list has more than {MAX_PAGES} pages")

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        seq: int | None = None,
    ) -> ToolCallResult:
        result = await self.request(
            "tools/call", {"name": name, "arguments": dict(arguments or {})}
        )
        return call_result(result)

    # --- shutdown ----------------------------------------------------------------------------
    async def _stop(self, current: ServerProcess) -> None:
        proc = current.proc
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()  # the spec's shutdown: most servers exit on end of input
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), SHUTDOWN_GRACE_S)
        await stop_process_group_async(proc, SHUTDOWN_GRACE_S, kill_wait_s=SHUTDOWN_GRACE_S)
        for task in current.tasks:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, SHUTDOWN_GRACE_S)

    async def close(self) -> None:
        """Stop the server: close stdin, then SIGTERM, then SIGKILL (its process group)."""
        self._closed = True
        current, self._current = self._current, None
        if current is not None:
            await self._stop(current)

    async def __aenter__(self) -> StdioMcpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
