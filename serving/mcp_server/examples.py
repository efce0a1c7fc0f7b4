"""One valid call per catalog tool: shared by warm-up, conformance tests and the benchmark."""

from __future__ import annotations

from typing import Any, Final

EXAMPLE_CALLS: Final[dict[str, dict[str, Any]]] = {
    "calculate_math": {"expression": "256*37"},
    "unit_converter": {"value": 10, "from_unit": "km", "to_unit": "mile"},
    "get_current_weather": {"location": "Paris"},
    "get_current_time": {"timezone": "Asia/Shanghai"},
    "get_exchange_rate": {"from_currency": "USD", "to_currency": "EUR", "amount": 5},
    "translate_text": {"text": "thank you", "target_language": "french"},
    "search_knowledge": {"query": "capital of France"},
    "date_calculator": {"operation": "add_days", "start_date": "2025-06-15", "days": 30},
    "lookup_price": {"product": "laptop", "currency": "EUR"},
    "save_note": {"title": "plan", "content": "buy milk"},
    "read_note": {"title": "plan"},
}
"""In this order a session's `read_note` finds the note its `save_note` stored."""
