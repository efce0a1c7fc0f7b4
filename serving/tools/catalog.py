"""The catalog: tools by name, their OpenAI schemas, validation and execution in one place."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from serving.tools.base import Tool, ToolContext, ToolMode, UnknownToolError
from serving.tools.definitions import build_tools


class ToolCatalog:
    def __init__(self, tools: list[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        if len(self._tools) != len(tools):
            raise ValueError("duplicate tool names in catalog")

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool:
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            available = ", ".join(self._tools)
            raise UnknownToolError(f"unknown tool {str(name)[:60]!r}; available tools: {available}")
        return tool

    def openai_schemas(self) -> list[dict[str, Any]]:
        return [tool.openai_schema() for tool in self._tools.values()]

    def validate(self, name: str, arguments: Any) -> dict[str, Any]:
        return self.get(name).validate(arguments)

    def execute(
        self, name: str, arguments: Any, context: ToolContext, mode: ToolMode = "real"
    ) -> dict[str, Any]:
        """Validate and run a call. Raises a ToolError subclass whose text is model-facing."""
        return self.get(name).run(arguments, context, mode)


@cache
def get_catalog() -> ToolCatalog:
    return ToolCatalog(build_tools())
