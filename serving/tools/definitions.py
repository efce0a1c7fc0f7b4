"""The built-in tools, in catalog order: schema, semantic checks and implementation of each
live in `serving.tools.builtin` (grouped by what they need).

Each implementation returns a small JSON object. Results are deterministic given the
`ToolContext` (clock, providers, notes), which is what lets dataset generation compute
ground truth by executing the very code the MCP server runs.
"""

from __future__ import annotations

from serving.tools.base import Tool
from serving.tools.builtin.compute import (
    calculate_math_tool,
    date_calculator_tool,
    unit_converter_tool,
)
from serving.tools.builtin.knowledge import search_knowledge_tool
from serving.tools.builtin.notes import read_note_tool, save_note_tool
from serving.tools.builtin.world import (
    current_time_tool,
    current_weather_tool,
    exchange_rate_tool,
    lookup_price_tool,
    translate_text_tool,
)


def build_tools() -> list[Tool]:
    """The project's 11 tools; the order is the catalog's (and so the prompts')."""
    return [
        calculate_math_tool(),
        unit_converter_tool(),
        current_weather_tool(),
        current_time_tool(),
        exchange_rate_tool(),
        translate_text_tool(),
        search_knowledge_tool(),
        date_calculator_tool(),
        lookup_price_tool(),
        save_note_tool(),
        read_note_tool(),
    ]
