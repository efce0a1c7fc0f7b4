"""Structured (one JSON object per line) logging for the MCP server processes."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"color_message"}


class JsonFormatter(logging.Formatter):
    """Renders a record and its `extra=` fields as one JSON line (never a multi-line trace)."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": os.getpid(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False, default=str)


def configure_logging(level: str) -> None:
    """Send `toolrl.*`, `uvicorn*` and `mcp*` logs to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    numeric = getattr(logging, level.upper(), logging.INFO)
    for name in ("toolrl", "uvicorn", "uvicorn.error", "mcp"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(numeric if name != "mcp" else max(numeric, logging.WARNING))
        log.propagate = False
