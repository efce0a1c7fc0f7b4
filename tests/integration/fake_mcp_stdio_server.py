"""A fake MCP stdio server for the transport's hostile cases (not a mock of the client: a real
process on real pipes). `python fake_mcp_stdio_server.py MODE`:

- ok: a well-behaved server. tools/list is paged (two pages via nextCursor); `echo` answers
  after `delay_s`, `crash` kills the process mid-call, `get_current_time` clashes with ours.
- banner: prints a line of non-JSON on stdout first, then behaves like ok.
- garbage: answers nothing, prints non-JSON lines on stdout.
- silent: reads everything, answers nothing.
- exit: writes a reason on stderr and exits 3 at once.
- bad_schemas: tools/list returns hostile tool definitions.
- loop_cursor: tools/list always returns the same nextCursor.
- dotted: lists `ns.echo`, a valid MCP name that no OpenAI client accepts.
- chatty: writes 3 MiB to stderr at start, then behaves like ok.
- stubborn: ignores SIGTERM and the end of stdin (only SIGKILL stops it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
_write_lock = threading.Lock()

GOOD_TOOLS = [
    {
        "name": "echo",
        "description": "Echo the text back.\nSecond line of the description.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "delay_s": {"type": "number"}},
            "required": ["text"],
        },
    },
    {
        "name": "crash",
        "description": "Exit the server process without answering.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "get_current_time",
        "description": "A fake clock.",
        "inputSchema": {
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
        },
    },
]


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


BAD_TOOLS = [
    {"name": "has space", "inputSchema": {"type": "object"}},
    {"name": "not_object", "description": "x", "inputSchema": {"type": "string"}},
    {"name": "int_description", "description": 42, "inputSchema": {"type": "object"}},
    {"name": "huge_description", "description": "x" * 100_000, "inputSchema": {"type": "object"}},
    {"name": "too_deep", "description": "x", "inputSchema": _nested(40)},
    {"name": "bad_type", "description": "x", "inputSchema": {"type": "object", "required": 5}},
]


def send(message: dict[str, Any]) -> None:
    with _write_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def handle(message: dict[str, Any]) -> None:
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        return  # notifications
    params = message.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": f"fake-{MODE}", "version": "0"},
        }
    elif method == "tools/list" and MODE == "bad_schemas":
        result = {"tools": BAD_TOOLS}
    elif method == "tools/list" and MODE == "dotted":
        result = {"tools": [{**GOOD_TOOLS[0], "name": "ns.echo"}]}
    elif method == "tools/list" and MODE == "loop_cursor":
        result = {"tools": GOOD_TOOLS[:1], "nextCursor": "again"}
    elif method == "tools/list":
        result = (
            {"tools": GOOD_TOOLS[1:]}
            if params.get("cursor") == "page-2"
            else {"tools": GOOD_TOOLS[:1], "nextCursor": "page-2"}
        )
    elif method == "tools/call" and params.get("name") == "crash":
        sys.stderr.write("fake: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(7)
    elif method == "tools/call" and params.get("name") == "echo":
        arguments = params.get("arguments") or {}
        time.sleep(float(arguments.get("delay_s", 0)))
        result = {"content": [{"type": "text", "text": str(arguments.get("text", ""))}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "12:00"}]}
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": method}})
        return
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def main() -> None:
    if MODE == "exit":
        sys.stderr.write("fake: refusing to start (no licence key)\n")
        sys.exit(3)
    if MODE == "chatty":
        sys.stderr.write(("fake: chatty log line " + "x" * 100 + "\n") * 24_000)
        sys.stderr.flush()
    if MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE == "banner":
        sys.stdout.write("Fake server v0 starting...\n")
        sys.stdout.flush()
    for line in sys.stdin:
        if MODE == "garbage":
            sys.stdout.write("this is not json-rpc\n")
            sys.stdout.flush()
            continue
        if MODE == "silent":
            continue
        message = json.loads(line)
        # Calls run in threads so concurrent requests overlap (answers come back out of order).
        threading.Thread(target=handle, args=(message,), daemon=True).start()
    if MODE == "stubborn":
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
