"""The fields of an OpenAI chat-completions request, each checked by one rule for every
endpoint that takes one: the front door (`serving/frontdoor/request.py`) and the CPU engine
server (`serving/engine/server.py`).

Why one place: the front door forwards a client's sampling fields to the engine, so a value
one of them accepts the other must accept too, and a client that calls either one reads the
same error for the same mistake. Why by hand and not one pydantic model: OpenAI's own error
for a bad request names the field and says what it must be ("temperature must be a number
between 0 and 2"); client code and people read that sentence, so each field has one rule
and one sentence. Unknown fields are left alone, as OpenAI ignores them; what an endpoint
does with a valid value (forward it, cap it, refuse a feature it lacks) stays with it.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

MAX_STOPS = 4
"""OpenAI's limit on stop sequences."""


class OpenAIRequestError(Exception):
    """A request the endpoint refuses: the HTTP `status`, OpenAI's error `kind` and a
    `message` that names the field and what it must be."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.status, self.kind = message, status, kind


class StreamFlags(NamedTuple):
    stream: bool
    include_usage: bool
    """`stream_options.include_usage`: a last chunk with the token counts is wanted."""


def bad(name: str, rule: str) -> OpenAIRequestError:
    """The error for field `name` that breaks `rule` ("must be ...")."""
    return OpenAIRequestError(f"{name} {rule}")


def is_number(value: Any) -> bool:
    """A JSON number (true and false are not numbers, although Python says they are)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def json_object(raw: bytes | str) -> dict[str, Any]:
    """The request body as a JSON object. Invalid JSON, JSON nested past the parser's
    recursion limit (a cheap way to make a server raise) and any other JSON value are 400s."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise OpenAIRequestError("the request body is not valid JSON") from exc
    return require_object(body)


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise OpenAIRequestError("the request body must be a JSON object")
    return body


def message_list(body: dict[str, Any], max_messages: int | None = None) -> list[Any]:
    """`messages` as a non-empty list (each endpoint checks the items it needs)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "must be a non-empty list")
    if max_messages is not None and len(messages) > max_messages:
        raise OpenAIRequestError(f"at most {max_messages} messages")
    return messages


def number(
    body: dict[str, Any], name: str, low: float, high: float, *, low_open: bool = False
) -> float | None:
    """A number in [low, high] (or (low, high] with `low_open`); None when absent."""
    value = body.get(name)
    if value is None:
        return None
    low_ok = is_number(value) and (value > low if low_open else value >= low)
    if not low_ok or not value <= high:
        if low_open:
            raise bad(name, f"must be a number in ({low:g}, {high:g}]")
        raise bad(name, f"must be a number between {low:g} and {high:g}")
    return float(value)


def temperature(body: dict[str, Any]) -> float | None:
    return number(body, "temperature", 0.0, 2.0)


def top_p(body: dict[str, Any]) -> float | None:
    """(0, 1]: zero would leave no token to sample from."""
    return number(body, "top_p", 0.0, 1.0, low_open=True)


def max_tokens(body: dict[str, Any], limit: int | None = None) -> int | None:
    """The output-token budget: `max_completion_tokens` (the newer name) wins over
    `max_tokens`; both are checked when both are given. Each is an integer from 1 up to
    `limit` (no upper bound without one: the endpoint caps it itself). None when absent."""
    chosen = None
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not is_int(value) or value < 1 or (limit is not None and value > limit):
            rule = (
                f"an integer between 1 and {limit}" if limit is not None else "a positive integer"
            )
            raise bad(name, f"must be {rule}")
        chosen = value if chosen is None else chosen
    return chosen


def stop(body: dict[str, Any]) -> list[str]:
    """Stop sequences: a string or a list of up to four non-empty strings; [] when absent."""
    value = body.get("stop")
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOPS
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise bad("stop", f"must be a string or a list of up to {MAX_STOPS} non-empty strings")
    return list(stops)


def seed(body: dict[str, Any]) -> int | None:
    value = body.get("seed")
    if value is not None and not is_int(value):
        raise bad("seed", "must be an integer")
    return value


def single_choice(body: dict[str, Any], why: str = "") -> None:
    """`n` (choices per request) must be 1 where an endpoint produces one; `why` says why."""
    n = body.get("n")
    if n is None:
        return
    if not is_int(n):
        raise bad("n", "must be an integer")
    if n != 1:
        raise bad("n", f"must be 1: {why}" if why else "must be 1")


def stream_flags(body: dict[str, Any]) -> StreamFlags:
    """`stream` (a boolean, default false) and `stream_options`, which only a streamed
    request may carry."""
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad("stream", "must be a boolean")
    options = body.get("stream_options")
    if options is None:
        return StreamFlags(stream, False)
    if not stream:
        raise bad("stream_options", "is only allowed when stream is true")
    if not isinstance(options, dict):
        raise bad("stream_options", "must be an object")
    usage = options.get("include_usage", False)
    if not isinstance(usage, bool):
        raise bad("stream_options.include_usage", "must be a boolean")
    return StreamFlags(True, usage)


def tool_choice(body: dict[str, Any]) -> str:
    """'auto' (also when absent), 'none', 'required', or the name of the one function the
    model must call (from {'type': 'function', 'function': {'name': ...}})."""
    choice = body.get("tool_choice")
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required"):
        return str(choice)
    function = choice.get("function") if isinstance(choice, dict) else None
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and function["name"]
    ):
        return str(function["name"])
    raise bad(
        "tool_choice",
        "must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}",
    )
