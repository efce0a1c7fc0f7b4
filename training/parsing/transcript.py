"""Split a multi-turn rollout, as verl hands it to the reward, into model turns and tool output.

verl decodes the whole response with special tokens skipped, so a two-turn rollout reads

    <tool_call>...</tool_call>
    user
    <tool_response>
    {"temperature_c": 21}
    </tool_response>
    assistant
    It is 21 °C in Paris.

(`<|im_start|>`/`<|im_end|>` are gone, the role words stay). Tool output must never count as
the model's answer or its calls, so a `<tool_response>` block is taken as the environment's
only where the loop could have injected it: after the role word `user` (or `tool`) and after a
turn that made a call. Anything else is the model writing a response itself, reported as
`hallucinated_tool_response` and kept as model text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from training.parsing.errors import FormatError, FormatErrorKind

RESP_OPEN, RESP_CLOSE = "<tool_response>", "</tool_response>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_NEXT_ROLE = "assistant"


@dataclass(slots=True)
class Transcript:
    """Model turns in order; `tool_responses[i]` are the responses injected after turn i."""

    turns: list[str]
    tool_responses: list[list[str]] = field(default_factory=list)
    errors: list[FormatError] = field(default_factory=list)
    ended_in_tool_response: bool = False
    truncated_tool_response: bool = False


_SPACE = re.compile(r"\s*")
_ROLE_WINDOW = 48


def _skip_space(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _role_start(text: str, lo: int, block: int) -> int:
    """Start of the role word directly before an injected block, or -1 when none is there
    (so the loop cannot have injected it). Looks back a few characters only."""
    window_start = max(lo, block - _ROLE_WINDOW)
    window = text[window_start:block].rstrip()
    for role in ("user", "tool"):
        if window.endswith(role):
            start = window_start + len(window) - len(role)
            if start == lo or text[start - 1].isspace() or text[start - 1] == ">":
                return start
    return -1


def split_transcript(text: str) -> Transcript:
    """Split a decoded rollout into model turns and injected tool responses. Never raises.
    Linear in the text length, whatever it contains: the search for a call mark in the
    current turn resumes where it stopped (`scanned`), so many model-written blocks in one
    turn do not rescan it. (`str.find` plus a small look-back window per block: measured
    faster than one regex over the whole text.)"""
    if RESP_OPEN not in text:
        return Transcript(turns=[text])
    result = Transcript(turns=[])
    size = len(text)
    turn_start = search = scanned = 0
    called = False
    while True:
        block = text.find(RESP_OPEN, search)
        if block < 0:
            result.turns.append(text[turn_start:])
            return result
        role = _role_start(text, turn_start, block)
        if role >= 0 and not called and role > scanned:
            lo = max(turn_start, scanned - 16)  # a mark may straddle the old boundary
            called = (
                text.find("<tool_call", lo, role) >= 0 or text.find("<function=", lo, role) >= 0
            )
            scanned = role
        if role < 0 or not called:
            result.errors.append(
                FormatError(
                    FormatErrorKind.HALLUCINATED_TOOL_RESPONSE,
                    "<tool_response> written by the model",
                )
            )
            close = text.find(RESP_CLOSE, block)
            if close < 0:
                result.turns.append(text[turn_start:])
                return result
            search = close + len(RESP_CLOSE)
            continue
        responses: list[str] = []
        pos = block
        while text.startswith(RESP_OPEN, pos):
            close = text.find(RESP_CLOSE, pos)
            if close < 0:
                responses.append(text[pos + len(RESP_OPEN) :])
                result.truncated_tool_response = True
                pos = size
                break
            responses.append(text[pos + len(RESP_OPEN) : close].strip())
            pos = _skip_space(text, close + len(RESP_CLOSE))
        result.turns.append(text[turn_start:role])
        result.tool_responses.append(responses)
        if text.startswith(_NEXT_ROLE, pos):
            pos += len(_NEXT_ROLE)
        if _skip_space(text, pos) >= size:
            result.ended_in_tool_response = True
            return result
        turn_start = search = scanned = pos
        called = False


def visible_text(turn: str) -> str:
    """What the user sees of a turn: reasoning (`<think>...</think>`) removed. A turn that
    starts inside reasoning (thinking-mode prompts end with `<think>`) drops everything up to
    the first `</think>`."""
    if THINK_CLOSE not in turn and THINK_OPEN not in turn:
        return turn
    first_close = turn.find(THINK_CLOSE)
    first_open = turn.find(THINK_OPEN)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        turn = turn[first_close + len(THINK_CLOSE) :]
    parts: list[str] = []
    pos = 0
    while True:
        start = turn.find(THINK_OPEN, pos)
        if start < 0:
            parts.append(turn[pos:])
            break
        parts.append(turn[pos:start])
        end = turn.find(THINK_CLOSE, start)
        if end < 0:
            break
        pos = end + len(THINK_CLOSE)
    return "".join(parts)
