"""The part of a growing model reply that may be shown to a user *now*.

Streaming a tool-calling model token by token has one trap: a reply that will turn out to
be a tool call starts like prose (`<tool_c...`), and a stop string or a reasoning block
arrives a few characters at a time. Whatever reaches the client cannot be taken back, so
this filter releases text only when no later token can change its meaning:

- at a call marker (`<tool_call>`) the prose ends: the call is delivered whole, as
  `tool_calls`, once the reply is complete;
- at a stop string the reply ends (the caller stops generating);
- `<think>...</think>` blocks are never shown;
- a suffix that could still grow into a marker, a stop string or `<think>` (also across a
  reasoning block that is open or may be opening: removed, it joins what is on either
  side), a trailing U+FFFD (half of a multi-byte character) and trailing whitespace (the
  answer a user gets is trimmed) are held back until the next piece decides.

The engine server (`serving/engine/server.py`) filters its token stream with it, and the
agent loop filters every upstream's deltas with it, so a stream from vLLM, the CPU engine or
a model server without a tool parser shows the same prose. The invariant, tested with
arbitrary splits: the deltas joined equal `visible(full text)`, whatever the chunking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CALL_MARKERS: tuple[str, ...] = ("<tool_call", "<function=")
"""Where a hermes or qwen3_coder call begins: the prose before it is all that is shown."""
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_REPLACEMENT = "\ufffd"


def _held_suffix(text: str, watched: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a watched string."""
    longest = 0
    for word in watched:
        for size in range(min(len(word) - 1, len(text)), longest, -1):
            if text.endswith(word[:size]):
                longest = size
                break
    return longest


@dataclass
class Visible:
    """What `visible()` found: the showable prose and why it ended, if it did."""

    text: str
    ended_by: str | None = None
    """`call` (a call marker began), `stop` (a stop string matched), or None."""


def _without_reasoning(text: str, final: bool) -> tuple[str, bool]:
    """`text` with its closed reasoning blocks removed; the bool says an unclosed block was
    cut off (it may still close). With `final` an unclosed block is kept as plain text, as
    the agent's `final_text` keeps it."""
    kept: list[str] = []
    rest = text
    while (opened := rest.find(THINK_OPEN)) >= 0:
        closed = rest.find(THINK_CLOSE, opened + len(THINK_OPEN))
        if closed < 0:
            if final:
                break
            kept.append(rest[:opened])
            return "".join(kept), True
        kept.append(rest[:opened])
        rest = rest[closed + len(THINK_CLOSE) :]
    kept.append(rest)
    return "".join(kept), False


def visible(
    text: str,
    stops: Sequence[str] = (),
    markers: Sequence[str] = CALL_MARKERS,
    final: bool = False,
) -> Visible:
    """The showable prose of `text`. With `final` (no more text will come) nothing is held
    back for what a later piece might have completed."""
    prose, in_reasoning = _without_reasoning(text, final)
    prose = prose.lstrip()
    cut, ended_by = len(prose), None
    for word, reason in [*((m, "call") for m in markers), *((s, "stop") for s in stops)]:
        at = prose.find(word)
        if 0 <= at < cut:
            cut, ended_by = at, reason
    if ended_by is not None:
        return Visible(prose[:cut].rstrip(), ended_by)
    if not final:
        watched = [*markers, *stops]
        block_may_vanish = in_reasoning
        if not in_reasoning:
            held = _held_suffix(prose, [*watched, THINK_OPEN])
            block_may_vanish = held > 0 and THINK_OPEN.startswith(prose[len(prose) - held :])
            prose = prose[: len(prose) - held]
        if block_may_vanish:
            # a reasoning block that is removed joins what precedes it to what follows it:
            # `EN<think></think>D` ends at the stop `END`, so `EN` must wait for the block
            prose = prose[: len(prose) - _held_suffix(prose, watched)]
        # trailing whitespace waits even before an open reasoning block: a call marker may
        # follow the block, and the prose before a call is trimmed
        prose = prose.rstrip(_REPLACEMENT).rstrip()
    return Visible(prose)


@dataclass
class AnswerStream:
    """Feed the reply as it grows; get back only the newly showable text."""

    stops: Sequence[str] = ()
    markers: Sequence[str] = CALL_MARKERS
    text: str = ""
    sent: str = ""
    ended_by: str | None = None

    def feed(self, piece: str) -> str:
        """Add `piece` to the reply; the delta that may be shown now ('' if none)."""
        if self.ended_by is not None or not piece:
            return ""
        self.text += piece
        return self._advance(visible(self.text, self.stops, self.markers))

    def replace(self, whole: str) -> str:
        """The reply so far is `whole` (a re-decoded token sequence); the new delta."""
        if self.ended_by is not None:
            return ""
        self.text = whole
        return self._advance(visible(self.text, self.stops, self.markers))

    def finish(self) -> str:
        """The reply is complete: release what was held back for a continuation."""
        if self.ended_by is not None:
            return ""
        return self._advance(visible(self.text, self.stops, self.markers, final=True))

    def _advance(self, seen: Visible) -> str:
        self.ended_by = seen.ended_by
        if not seen.text.startswith(self.sent):
            return ""  # never contradict what was sent; the caller completes from the whole
        delta = seen.text[len(self.sent) :]
        self.sent = seen.text
        return delta
