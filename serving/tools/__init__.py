"""The tool catalog: one definition per tool, shared by data generation, the MCP server,
the reward and the evaluation. Import `get_catalog()`; everything else hangs off it."""

from serving.tools.base import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolError,
    ToolExecutionError,
    UnknownToolError,
)
from serving.tools.catalog import ToolCatalog, get_catalog

__all__ = [
    "Tool",
    "ToolArgumentError",
    "ToolCatalog",
    "ToolContext",
    "ToolError",
    "ToolExecutionError",
    "UnknownToolError",
    "get_catalog",
]
