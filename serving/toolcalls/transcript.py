"""Split a multi-turn rollout, as verl hands it to the reward, into model turns and tool output.

verl decodes the whole response with special tokens skipped, so a two-turn rollout reads

    <tool_call>...</tool_call>
    user
    <tool_response>
    {"temperature_c": 21}
    </tool_response>
    assistant
    It is 21 °C in Paris.

(`<|im_start|>`/`<|im_end|>` are gone, the role words stay; the engine's decoded rollouts
and `training.rewards.samples.tool_turn` build the same text). Tool output must
never count as the model's answer or its calls, so a `<tool_response>` block is taken as the
environment's only where the loop could have injected it: after the role word `user` (or
`tool`) and after a turn that made a call. Anything else is the model writing a response
itself, reported as `hallucinated_tool_response` and kept as model text.

Where an injected response ends: tool output is arbitrary text (a tool may return user text
that itself contains `</tool_response>`), so the first `</tool_response>` is not trusted. A
response ends at the first `</tool_response>` that is followed, after optional whitespace, by
what the loop writes next: another `<tool_response>`, the `assistant` role line, or the end of
the text. A block with no such close runs to the end of the text (a rollout cut inside tool
output). The one text this cannot tell apart is tool output that itself contains
`</tool_response>` followed by an `assistant` line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from serving.toolcalls.errors import FormatError, FormatErrorKind

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
#: What may follow the `</tool_response>` that ends an injected response (see module doc).
_AFTER_RESPONSE = re.compile(r"\s*(?:<tool_response>|assistant(?:\s|\Z)|\Z)")
#: The two layouts verl's decoding produces, tested before the regex (the common case).
_NEXT_BLOCK, _ROLE_LINE = "\n" + RESP_OPEN, "\n" + _NEXT_ROLE + "\n"
_USER_LINE = "\nuser\n"
_ROLE_WINDOW = 48
_CLOSE_LEN, _OPEN_LEN = len(RESP_CLOSE), len(RESP_OPEN)


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


def _response_end(text: str, start: int) -> int:
    """The `</tool_response>` ending the injected response whose body starts at `start`:
    the first one followed by another block, the `assistant` line or the end of the text
    (module doc); -1 when there is none. Each close is looked at once: linear."""
    close = text.find(RESP_CLOSE, start)
    while close >= 0:
        after = close + _CLOSE_LEN
        if (
            text.startswith(_ROLE_LINE, after)
            or text.startswith(_NEXT_BLOCK, after)
            or _AFTER_RESPONSE.match(text, after)
        ):
            return close
        close = text.find(RESP_CLOSE, after)
    return -1


def split_transcript(text: str) -> Transcript:
    """Split a decoded rollout into model turns and injected tool responses. Never raises.
    Linear in the text length, whatever it contains: the search for a call mark in the
    current turn resumes where it stopped (`scanned`), so many model-written blocks in one
    turn do not rescan it, and each `</tool_response>` is examined once. (`str.find` plus a
    small look-back window per block: measured faster than one regex over the whole text.
    verl's own layout, `\nuser\n<tool_response>`, `</tool_response>\n<tool_response>` and
    `</tool_response>\nassistant\n`, is recognised with `startswith` before the general
    rules, which give the same answer on it.)"""
    if RESP_OPEN not in text:
        return Transcript([text])
    turns: list[str] = []
    blocks: list[list[str]] = []
    result = Transcript(turns, blocks)
    find, startswith = text.find, text.startswith
    size = len(text)
    turn_start = search = scanned = 0
    called = False
    while True:
        block = find(RESP_OPEN, search)
        if block < 0:
            turns.append(text[turn_start:])
            return result
        if block - 6 >= turn_start and startswith(_USER_LINE, block - 6):
            role = block - 5
        else:
            role = _role_start(text, turn_start, block)
        if role >= 0 and not called and role > scanned:
            lo = max(turn_start, scanned - 16)  # a mark may straddle the old boundary
            called = find("<tool_call", lo, role) >= 0 or find("<function=", lo, role) >= 0
            scanned = role
        if role < 0 or not called:
            # the model's own block: it ends at its first close, and the turn goes on
            result.errors.append(
                FormatError(
                    FormatErrorKind.HALLUCINATED_TOOL_RESPONSE,
                    "<tool_response> written by the model",
                )
            )
            close = find(RESP_CLOSE, block)
            if close < 0:
                turns.append(text[turn_start:])
                return result
            search = close + _CLOSE_LEN
            continue
        turns.append(text[turn_start:role])
        responses: list[str] = []
        blocks.append(responses)
        pos = block
        while True:  # one injected response per iteration; `pos` is at its `<tool_response>`
            body = pos + _OPEN_LEN
            close = find(RESP_CLOSE, body)
            after = close + _CLOSE_LEN
            if close >= 0 and startswith(_NEXT_BLOCK, after):
                responses.append(text[body:close].strip())
                pos = after + 1
                continue
            if close >= 0 and startswith(_ROLE_LINE, after):
                responses.append(text[body:close].strip())
                pos = after + len(_ROLE_LINE) - 1  # at the newline that ends the role line
                break
            close = _response_end(text, body)
            if close < 0:
                responses.append(text[body:])
                result.truncated_tool_response = True
                result.ended_in_tool_response = True
                return result
            responses.append(text[body:close].strip())
            pos = _skip_space(text, close + _CLOSE_LEN)
            if not startswith(RESP_OPEN, pos):
                if startswith(_NEXT_ROLE, pos):
                    pos += len(_NEXT_ROLE)
                break
        if pos + 1 < size and not text[pos + 1].isspace() and text[pos].isspace():
            pass  # the next turn has text: the common case, without the regex below
        elif _skip_space(text, pos) >= size:
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
