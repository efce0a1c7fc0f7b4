"""The project's MCP server without its transport: `tools/list` and `tools/call` answered in
this process by the code the HTTP app runs (`protocol.tool_list`, `protocol.unknown_tool`,
`calls.CallRunner`), behind the `McpClient` interface.

Why: dataset generation executes every expected call of the built-in tools, and the test
suite generates datasets often. Starting `toolrl mcp serve` for that costs a forked worker,
a port and an HTTP round trip per call, for the same answers: the runner validates,
executes and formats exactly as it does behind the HTTP endpoint (the same text, the same
tool errors, the same notes sessions), so a dataset generated here is byte for byte the one
generated against a running mock-mode server (`tests/integration/test_toolrl_pack.py`).
Only the catalog's own modes (mock, real) run here; replay and live need the server's
start-up (a recording, sources) and stay behind `serving.mcp_server.server.start`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import mcp_types as types

from serving.mcp_client.base import McpProtocolError, ToolCallResult
from serving.mcp_server.calls import CallRunner
from serving.mcp_server.config import FaultConfig, ServerConfig
from serving.mcp_server.metrics import Metrics
from serving.mcp_server.protocol import tool_list, unknown_tool
from serving.tools import get_catalog


class InProcessServer:
    """An `McpClient` whose server is this process: the shared catalog in `mode` (mock: the
    frozen reference clock and offline providers), faults off unless `faults` says so."""

    def __init__(
        self, mode: Literal["mock", "real"] = "mock", faults: FaultConfig | None = None
    ) -> None:
        catalog = get_catalog()
        self.mode = mode
        config = ServerConfig(mode=mode, faults=faults or FaultConfig(), log_level="warning")
        self.runner = CallRunner(catalog, config, Metrics(catalog.names))
        self._listed = [
            tool.model_dump(mode="json", by_alias=True, exclude_none=True)
            for tool in tool_list(catalog)
        ]

    async def list_tools(self) -> list[dict[str, Any]]:
        return [dict(tool) for tool in self._listed]

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        seq: int | None = None,
    ) -> ToolCallResult:
        unknown = unknown_tool(self.runner, name)
        if unknown is not None:
            raise McpProtocolError(types.INVALID_PARAMS, unknown)
        outcome = await self.runner.call(name, dict(arguments or {}), session, seq)
        return ToolCallResult(outcome.text, outcome.is_error, outcome.result)

    async def close(self) -> None:
        await self.runner.aclose()
        self.runner.close()
