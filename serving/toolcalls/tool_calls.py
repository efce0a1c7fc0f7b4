"""Parse tool calls out of one assistant turn, in the `hermes` or `qwen3_coder` format.

Why a hand-written scanner instead of verl's regexes: the reward must say *what* is wrong
(the drift guard counts error kinds) and must stay linear-time on anything a policy emits,
including 1 MB outputs and unbalanced tags. It uses `str.find` only, never raises, and on
well-formed output returns the same calls as verl's `hermes` / `qwen3_coder` parsers
(tested against them on a corpus). Turns whose every tag is well formed take a faster path
(`fast_path.py`) that gives identical results; this scanner handles everything else.

    hermes:       <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>
    qwen3_coder:  <tool_call><function=f><parameter=a>1</parameter></function></tool_call>
"""

from __future__ import annotations

import json

from serving.toolcalls.calls import (
    CLOSE,
    FUNC_CLOSE,
    FUNC_OPEN,
    OPEN,
    PARAM_CLOSE,
    PARAM_OPEN,
    CallFormat,
    ParsedCall,
    ParseResult,
    Scan,
    check_call,
)
from serving.toolcalls.errors import FormatError, FormatErrorKind
from serving.toolcalls.fast_path import parse_well_formed
from serving.toolcalls.registry import ToolRegistry, active_registry
from serving.toolcalls.values import convert_value

__all__ = ["CallFormat", "ParseResult", "ParsedCall", "parse_tool_calls"]

#: Longest tag header (`<function=NAME attrs>`) looked at; longer is garbage, and the bound
#: keeps every search linear in the output length.
MAX_HEADER = 256
_K = FormatErrorKind


class _Next:
    """The next occurrence of `needle` at or after a position that only moves forward.
    Remembers the last answer, so a closing tag that is missing is searched for once, not
    once per opening tag (which would make `"<tool_call>" * n` quadratic)."""

    __slots__ = ("end", "found", "needle", "text")

    def __init__(self, text: str, needle: str, end: int) -> None:
        self.text, self.needle, self.end, self.found = text, needle, end, -2

    def at_or_after(self, start: int) -> int:
        if self.found == -1 or self.found >= start:
            return self.found
        self.found = self.text.find(self.needle, start, self.end)
        return self.found


def _tag_end(text: str, after: int, limit: int) -> tuple[int, bool]:
    """Where a tag whose name ends at `after` closes: (index past '>', had_attributes).
    Returns (-1, ...) when there is no '>' within MAX_HEADER or before the next tag."""
    if after < limit and text[after] == ">":
        return after + 1, False
    limit = min(limit, after + MAX_HEADER)
    gt = text.find(">", after, limit)
    if gt < 0:
        return -1, True
    lt = text.find("<", after, gt)
    if lt >= 0:
        return -1, True
    return gt + 1, True


def _split_header(raw: str) -> tuple[str, bool]:
    """`search_web v2=""` -> ("search_web", True): the name and whether attributes followed."""
    for sep in (" ", "\t"):
        if sep in raw:
            head, _, rest = raw.partition(sep)
            if "=" in rest or '"' in rest:
                return head, True
    return raw, False


def _parse_params(scan: Scan, call: ParsedCall, body: str) -> None:
    properties = scan.registry.properties(call.name)
    pos, size = 0, len(body)
    closes = _Next(body, PARAM_CLOSE, size)
    while True:
        start = body.find(PARAM_OPEN, pos)
        junk = body[pos : start if start >= 0 else size]
        if junk.strip():
            if PARAM_CLOSE in junk:
                scan.fail(call, _K.STRAY_CLOSING_TAG, "</parameter> without <parameter=")
            else:
                scan.fail(call, _K.BAD_STRUCTURE, f"text outside parameters: {junk.strip()[:40]!r}")
        if start < 0:
            return
        name_at = start + len(PARAM_OPEN)
        if name_at >= size or body[name_at] != "=":
            scan.fail(call, _K.BAD_STRUCTURE, "parameter tag without '='")
        gt = body.find(">", name_at, min(size, name_at + MAX_HEADER))
        newline = body.find("\n", name_at, gt if gt >= 0 else min(size, name_at + MAX_HEADER))
        if gt < 0 or newline >= 0:
            scan.fail(call, _K.UNCLOSED_TAG, "unterminated <parameter= header")
            return
        pname, had_attrs = _split_header(body[name_at + 1 : gt])
        if had_attrs:
            scan.fail(call, _K.STRAY_ATTRIBUTE, f"attributes in <parameter={pname} ...>")
        close = closes.at_or_after(gt)
        following = body.find(PARAM_OPEN, gt)
        if close < 0 or 0 <= following < close:
            scan.fail(call, _K.UNCLOSED_TAG, f"<parameter={pname[:40]}> not closed")
            value_end = following if following >= 0 else size
            pos = value_end
        else:
            value_end = close
            end, had_attrs = _tag_end(body, close + len(PARAM_CLOSE), size)
            if had_attrs:
                scan.fail(call, _K.STRAY_ATTRIBUTE, "attributes in </parameter ...>")
            pos = end if end >= 0 else size
        value = body[gt + 1 : value_end]
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        if pname in call.arguments:
            scan.fail(call, _K.BAD_STRUCTURE, f"parameter {pname[:40]!r} given twice")
        call.arguments[pname] = convert_value(value, pname, properties)


def _parse_xml(scan: Scan, body: str, offset: int, end: int, wrapped: bool) -> None:
    """Parse every `<function=...>` block in `body` (the inside of one `<tool_call>`)."""
    pos, size, count = 0, len(body), 0
    closes = _Next(body, FUNC_CLOSE, size)
    while True:
        start = body.find(FUNC_OPEN, pos)
        junk = body[pos : start if start >= 0 else size].strip()
        if start < 0:
            if count == 0:
                call = scan.new_call(offset, end, "qwen3_coder")
                scan.fail(call, _K.BAD_STRUCTURE, "no <function=...> inside <tool_call>")
            elif junk and scan.calls:
                scan.fail(
                    scan.calls[-1], _K.BAD_STRUCTURE, f"text after </function>: {junk[:40]!r}"
                )
            return
        call = scan.new_call(offset if wrapped else offset + start, end, "qwen3_coder")
        if junk:
            scan.fail(call, _K.BAD_STRUCTURE, f"text before <function=: {junk[:40]!r}")
        if count and wrapped:
            scan.fail(call, _K.BAD_STRUCTURE, "more than one <function=> in one <tool_call>")
        count += 1
        name_at = start + len(FUNC_OPEN)
        if name_at >= size or body[name_at] != "=":
            scan.fail(call, _K.BAD_STRUCTURE, "function tag without '='")
        header_end = min(size, name_at + MAX_HEADER)
        gt = body.find(">", name_at, header_end)
        newline = body.find("\n", name_at, gt if gt >= 0 else header_end)
        if gt < 0 or newline >= 0:
            stop = newline if newline >= 0 else header_end
            call.name = body[name_at + 1 : stop].strip()[:200]
            scan.fail(call, _K.UNCLOSED_TAG, "unterminated <function= header")
            return
        call.name, had_attrs = _split_header(body[name_at + 1 : gt])
        if had_attrs:
            scan.fail(call, _K.STRAY_ATTRIBUTE, f"attributes in <function={call.name[:40]} ...>")
        close = closes.at_or_after(gt)
        following = body.find(FUNC_OPEN, gt)
        if close < 0 or 0 <= following < close:
            scan.fail(call, _K.UNCLOSED_TAG, f"<function={call.name[:40]}> not closed")
            body_end = following if following >= 0 else size
            pos = body_end
        else:
            body_end = close
            tag_end, had_attrs = _tag_end(body, close + len(FUNC_CLOSE), size)
            if had_attrs:
                scan.fail(call, _K.STRAY_ATTRIBUTE, "attributes in </function ...>")
            pos = tag_end if tag_end >= 0 else size
        _parse_params(scan, call, body[gt + 1 : body_end])


def _parse_hermes(scan: Scan, body: str, start: int, end: int) -> None:
    call = scan.new_call(start, end, "hermes")
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:
        scan.fail(call, _K.BAD_JSON, f"invalid JSON in <tool_call>: {str(exc)[:60]}")
        return
    if not isinstance(obj, dict):
        scan.fail(call, _K.BAD_STRUCTURE, "tool call JSON is not an object")
        return
    name, arguments = obj.get("name"), obj.get("arguments")
    call.name = name[:200] if isinstance(name, str) else ""
    if not isinstance(name, str):
        scan.fail(call, _K.BAD_STRUCTURE, "tool call without a string 'name'")
    if not isinstance(arguments, dict):
        got = "missing" if "arguments" not in obj else type(arguments).__name__
        scan.fail(call, _K.BAD_STRUCTURE, f"'arguments' must be a JSON object (got {got})")
        return
    call.arguments = arguments


def _parse_body(scan: Scan, body: str, start: int, end: int) -> None:
    stripped = body.strip()
    is_json = stripped.startswith("{")
    is_xml = not is_json and FUNC_OPEN in stripped
    before = len(scan.calls)
    if is_xml:
        _parse_xml(scan, body, start, end, wrapped=True)
    elif is_json or scan.call_format == "hermes":
        _parse_hermes(scan, stripped, start, end)
    else:
        call = scan.new_call(start, end, None)
        scan.fail(call, _K.BAD_STRUCTURE, f"no call inside <tool_call>: {stripped[:40]!r}")
        return
    expected = scan.call_format
    syntax = "qwen3_coder" if is_xml else "hermes"
    if expected != "auto" and syntax != expected:
        for call in scan.calls[before:]:
            scan.fail(call, _K.WRONG_FORMAT, f"{syntax} call where {expected} is expected")


def _scan_outside(scan: Scan, lo: int, hi: int) -> None:
    """Between tool-call blocks: stray closing tags and bare `<function=` blocks."""
    text = scan.text
    close = text.find(CLOSE, lo, hi)
    while close >= 0:
        scan.turn_error(_K.STRAY_CLOSING_TAG, "</tool_call> without <tool_call>", None)
        close = text.find(CLOSE, close + len(CLOSE), hi)
    bare = text.find(FUNC_OPEN + "=", lo, hi)
    if bare >= 0:
        before = len(scan.calls)
        _parse_xml(scan, text[bare:hi], bare, hi, wrapped=False)
        for call in scan.calls[before:]:
            scan.fail(call, _K.BARE_CALL, "<function=...> outside <tool_call>")


def _find_blocks(scan: Scan) -> None:
    text, size, pos = scan.text, len(scan.text), 0
    closes = _Next(text, CLOSE, size)
    while True:
        start = text.find(OPEN, pos)
        _scan_outside(scan, pos, start if start >= 0 else size)
        if start < 0:
            return
        body_start, had_attrs = _tag_end(text, start + len(OPEN), size)
        following = text.find(OPEN, start + len(OPEN))
        if body_start < 0:
            body_start = start + len(OPEN)
        close = closes.at_or_after(body_start)
        unclosed = close < 0 or 0 <= following < close
        if unclosed:
            body_end = following if following >= 0 else size
            pos = body_end
        else:
            body_end = close
            tag_end, close_attrs = _tag_end(text, close + len(CLOSE), size)
            had_attrs = had_attrs or close_attrs
            pos = tag_end if tag_end >= 0 else size
        before = len(scan.calls)
        _parse_body(scan, text[body_start:body_end], start, pos)
        for call in scan.calls[before:]:
            if had_attrs:
                scan.fail(call, _K.STRAY_ATTRIBUTE, "attributes in <tool_call> tag")
            if unclosed:
                scan.fail(call, _K.UNCLOSED_TAG, "<tool_call> not closed")


def _check_names_and_arguments(scan: Scan) -> None:
    for call in scan.calls:
        check_call(scan, call)


def _check_turn_shape(scan: Scan) -> None:
    """Reasoning may come before the calls; answer prose between or after calls may not."""
    text, calls = scan.text, scan.calls
    previous = calls[0]
    for index in range(1, len(calls)):
        call = calls[index]
        gap = text[previous.end : call.start]  # empty when the spans overlap
        if gap and not gap.isspace():  # `gap.strip()` non-empty, without building it
            scan.turn_error(_K.CALL_AFTER_ANSWER, f"call after prose: {gap.strip()[:40]!r}", index)
        previous = call
    tail = text[previous.end :]
    if tail and not tail.isspace():
        tail = tail.strip()
        scan.turn_error(_K.TEXT_AFTER_CALL, f"text after the last call: {tail[:40]!r}", None)


def parse_tool_calls(
    text: str,
    call_format: CallFormat = "auto",
    registry: ToolRegistry | None = None,
    fast_path: bool = True,
) -> ParseResult:
    """Every call attempt in one assistant turn, with structured format errors. Never raises.

    `fast_path=False` skips the regex fast path for well-formed turns; results are identical
    either way (a property test holds them equal), it only exists for that test."""
    if not isinstance(text, str):
        return ParseResult([], [FormatError(_K.BAD_STRUCTURE, "output is not a string")])
    if OPEN not in text and CLOSE not in text and FUNC_OPEN not in text:
        return ParseResult([], [])
    registry = registry or active_registry()
    scan = parse_well_formed(text, call_format, registry) if fast_path else None
    if scan is None:  # anything unusual: the full scanner, which names every problem
        scan = Scan(text, call_format, registry)
        _find_blocks(scan)
        _check_names_and_arguments(scan)
    if scan.calls:
        _check_turn_shape(scan)
    return ParseResult(scan.calls, scan.errors)
