"""Where the third-party MCP servers the project installs live, for the tests that start
them: `mcp-server-time` from the `byo-mcp` extra, `server-memory` from `make mcp-servers`."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MEMORY_SERVER_BIN = REPO / "infra" / "mcp-servers" / "node_modules" / ".bin" / "mcp-server-memory"
TIME_SERVER_COMMAND = (sys.executable, "-m", "mcp_server_time")
