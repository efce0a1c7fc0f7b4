"""Format-error kinds: the vocabulary shared by the parser, the reward and the drift signal.

Why an enum: the drift guard breaks the malformed-call rate down by kind, and a dashboard of
free-text messages cannot be aggregated. Each error keeps a short human detail for logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FormatErrorKind(StrEnum):
    UNCLOSED_TAG = "unclosed_tag"
    """An opening tag (`<tool_call>`, `<function=`, `<parameter=`) with no matching close."""
    STRAY_CLOSING_TAG = "stray_closing_tag"
    """A closing tag with no opening tag before it."""
    STRAY_ATTRIBUTE = "stray_attribute"
    """Attributes where the format has none, e.g. `</parameter v2="">` (verl issue 6252)."""
    BAD_JSON = "bad_json"
    """hermes: the body of `<tool_call>` is not one JSON value."""
    BAD_STRUCTURE = "bad_structure"
    """The body parses but is not a call: no name, arguments not an object, junk between tags."""
    WRONG_FORMAT = "wrong_format"
    """A call in the other format than the one the rollout parser expects (JSON vs XML)."""
    BARE_CALL = "bare_call"
    """`<function=...>` outside any `<tool_call>`: verl never executes it."""
    GARBAGE_IN_NAME = "garbage_in_name"
    """A name that is not an identifier, e.g. `search_web英文明确` (verl issue 6252)."""
    UNKNOWN_FUNCTION = "unknown_function"
    """A clean identifier that names no tool in the catalog."""
    SCHEMA_VIOLATION = "schema_violation"
    """Arguments that fail the tool's JSON schema or its semantic checks."""
    TEXT_AFTER_CALL = "text_after_call"
    """Prose after the last call of a turn: the model answers before it sees the result."""
    CALL_AFTER_ANSWER = "call_after_answer"
    """A call that follows answer prose written after an earlier call in the same turn."""
    HALLUCINATED_TOOL_RESPONSE = "hallucinated_tool_response"
    """`<tool_response>` written by the model itself rather than injected by the loop."""


#: Kinds that mean the model broke the text protocol (as opposed to calling with wrong
#: content). The reward's format penalty counts these; MiniMind's "unclosed pair" is the
#: first of them.
SYNTAX_KINDS: frozenset[FormatErrorKind] = frozenset(
    {
        FormatErrorKind.UNCLOSED_TAG,
        FormatErrorKind.STRAY_CLOSING_TAG,
        FormatErrorKind.STRAY_ATTRIBUTE,
        FormatErrorKind.BAD_JSON,
        FormatErrorKind.BAD_STRUCTURE,
        FormatErrorKind.WRONG_FORMAT,
        FormatErrorKind.BARE_CALL,
        FormatErrorKind.GARBAGE_IN_NAME,
        FormatErrorKind.TEXT_AFTER_CALL,
        FormatErrorKind.CALL_AFTER_ANSWER,
        FormatErrorKind.HALLUCINATED_TOOL_RESPONSE,
    }
)


@dataclass(frozen=True, slots=True)
class FormatError:
    """One problem found in model output. `call_index` ties it to a call attempt (None when
    the problem belongs to the turn, such as text after the last call)."""

    kind: FormatErrorKind
    detail: str
    call_index: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind.value, "detail": self.detail, "call_index": self.call_index}
