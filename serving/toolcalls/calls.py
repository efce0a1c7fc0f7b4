"""The parser's data types: a call attempt, a turn's parse result, and the scan state.

Kept apart from the scanners so the regex fast path and the full scanner build the same
objects without importing each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from serving.toolcalls.errors import FormatError, FormatErrorKind
from serving.toolcalls.registry import ToolRegistry

CallFormat = Literal["hermes", "qwen3_coder", "auto"]
CallSyntax = Literal["hermes", "qwen3_coder"]

OPEN, CLOSE = "<tool_call", "</tool_call"
FUNC_OPEN, FUNC_CLOSE = "<function", "</function"
PARAM_OPEN, PARAM_CLOSE = "<parameter", "</parameter"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
_K = FormatErrorKind


@dataclass(slots=True)
class ParsedCall:
    """One call attempt. `arguments` are what the tool would receive (XML values converted
    by the schema); `cleaned` holds the validated, default-filled arguments when valid.
    Both may be shared with other calls of the same text (parse cache): read-only."""

    index: int
    name: str
    arguments: dict[str, Any]
    start: int
    end: int
    syntax: CallSyntax | None
    errors: list[FormatError] = field(default_factory=list)
    cleaned: dict[str, Any] | None = None
    shared: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Memo for values derived from the call's text (e.g. the reward's matching key); the
    same dict for every call parsed from the same cached text."""

    @property
    def valid(self) -> bool:
        return not self.errors


@dataclass(slots=True)
class ParseResult:
    """Calls in order of appearance, and every error (call-level and turn-level)."""

    calls: list[ParsedCall]
    errors: list[FormatError]

    @property
    def valid_calls(self) -> list[ParsedCall]:
        return [call for call in self.calls if not call.errors]

    @property
    def malformed_count(self) -> int:
        return sum(1 for call in self.calls if call.errors)


class Scan:
    """Mutable state of one parse: the output lists and the call being built."""

    __slots__ = ("call_format", "calls", "errors", "registry", "text")

    def __init__(self, text: str, call_format: CallFormat, registry: ToolRegistry) -> None:
        self.text = text
        self.call_format = call_format
        self.registry = registry
        self.calls: list[ParsedCall] = []
        self.errors: list[FormatError] = []

    def new_call(self, start: int, end: int, syntax: CallSyntax | None) -> ParsedCall:
        call = ParsedCall(
            len(self.calls), name="", arguments={}, start=start, end=end, syntax=syntax
        )
        self.calls.append(call)
        return call

    def fail(self, call: ParsedCall, kind: FormatErrorKind, detail: str) -> None:
        error = FormatError(kind, detail, call.index)
        call.errors.append(error)
        self.errors.append(error)

    def turn_error(self, kind: FormatErrorKind, detail: str, call_index: int | None) -> None:
        self.errors.append(FormatError(kind, detail, call_index))


def check_call(scan: Scan, call: ParsedCall) -> None:
    """Name and argument checks once the call's syntax is read: unknown or garbled names,
    then the tool's schema (only for calls with no error so far)."""
    registry = scan.registry
    if call.name not in registry:
        if call.name and _IDENTIFIER.fullmatch(call.name):
            kind, detail = _K.UNKNOWN_FUNCTION, f"unknown function {call.name!r}"
        else:
            kind, detail = _K.GARBAGE_IN_NAME, f"not a function name: {call.name[:60]!r}"
        if not (kind is _K.GARBAGE_IN_NAME and not call.name and call.errors):
            scan.fail(call, kind, detail)
        return
    if call.errors:
        return
    cleaned, problems = registry.validate(call.name, call.arguments)
    if problems:
        scan.fail(call, _K.SCHEMA_VIOLATION, "; ".join(problems)[:300])
    else:
        call.cleaned = cleaned
