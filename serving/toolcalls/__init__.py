"""Tool-call parsing for rewards, evaluation and the drift guard: calls plus structured
format errors, for the `hermes` and `qwen3_coder` formats, and the multi-turn transcript
split that keeps tool output apart from what the model wrote."""

from serving.toolcalls.calls import CallFormat, ParsedCall, ParseResult
from serving.toolcalls.errors import SYNTAX_KINDS, FormatError, FormatErrorKind
from serving.toolcalls.registry import (
    ToolRegistry,
    active_registry,
    catalog_registry,
    registry_from_file,
    snapshot_registry,
    using_registry,
)
from serving.toolcalls.tool_calls import parse_tool_calls
from serving.toolcalls.transcript import Transcript, split_transcript, visible_text

__all__ = [
    "SYNTAX_KINDS",
    "CallFormat",
    "FormatError",
    "FormatErrorKind",
    "ParseResult",
    "ParsedCall",
    "ToolRegistry",
    "Transcript",
    "active_registry",
    "catalog_registry",
    "parse_tool_calls",
    "registry_from_file",
    "snapshot_registry",
    "split_transcript",
    "using_registry",
    "visible_text",
]
