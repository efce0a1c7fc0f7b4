"""What the MCP endpoint answers, apart from the transport: the `tools/list` entries and the
refusal of an unknown tool. The HTTP app (`app.py`) and the in-process server
(`inprocess.py`) both answer with these, so they cannot differ.

Why not in `app.py`: that module loads the MCP SDK's server (about a second of imports);
the in-process server, which dataset generation uses, needs only these two.
"""

from __future__ import annotations

import mcp_types as types

from serving.mcp_server.calls import CallRunner
from serving.tools import ToolCatalog


def tool_list(catalog: ToolCatalog) -> list[types.Tool]:
    """`tools/list` straight from the catalog: the same schemas the dataset and policy see."""
    return [
        types.Tool(name=t.name, description=t.description, input_schema=dict(t.parameters))
        for t in catalog
    ]


def unknown_tool(runner: CallRunner, name: str) -> str | None:
    """The message for a call to a tool the catalog does not have (counted), or None.

    The spec makes an unknown tool a protocol error (JSON-RPC invalid params), not a tool
    result; the message still teaches, naming the tools there are."""
    if name in runner.catalog:
        return None
    runner.metrics.record(name, 0.0, "unknown_tool")
    return f"Unknown tool {name[:60]!r}; available tools: {', '.join(runner.catalog.names)}"
