"""Types every tool shares: the tool definition, the execution context, the error family."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from serving.tools.schema import validate_arguments

ToolMode = Literal["real", "mock"]

#: The frozen "now" that mock mode and dataset generation use, so ground truth computed at
#: generation time equals what the mock server returns during training rollouts.
REFERENCE_NOW = dt.datetime(2025, 6, 15, 9, 30, 0, tzinfo=dt.UTC)


class ToolError(Exception):
    """Base of every error a tool reports; its text is meant to be shown to the model."""

    kind = "tool_error"


class UnknownToolError(ToolError):
    kind = "unknown_tool"


class ToolArgumentError(ToolError):
    """The call's arguments failed the tool's schema or semantic checks."""

    kind = "invalid_arguments"

    def __init__(self, tool: str, problems: list[str]) -> None:
        self.tool = tool
        self.problems = problems
        super().__init__(f"Invalid arguments for {tool}: " + "; ".join(problems))


class ToolExecutionError(ToolError):
    """The arguments were valid but the tool could not produce a result (e.g. no data)."""

    kind = "execution_error"


class NotesStore:
    """Per-session key/value memory behind the notes tools. Thread-safe; bounded in size."""

    MAX_NOTES_PER_SESSION = 200
    MAX_SESSIONS = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, str]] = {}

    def put(self, session: str, title: str, content: str) -> int:
        with self._lock:
            if session not in self._data and len(self._data) >= self.MAX_SESSIONS:
                self._data.pop(next(iter(self._data)))
            notes = self._data.setdefault(session, {})
            if title not in notes and len(notes) >= self.MAX_NOTES_PER_SESSION:
                raise ToolExecutionError(
                    f"note limit reached ({self.MAX_NOTES_PER_SESSION}); delete a note first"
                )
            notes[title] = content
            return len(notes)

    def get(self, session: str, title: str) -> str | None:
        with self._lock:
            return self._data.get(session, {}).get(title)

    def titles(self, session: str) -> list[str]:
        with self._lock:
            return sorted(self._data.get(session, {}))


@dataclass
class ToolContext:
    """What a tool may depend on besides its arguments: the clock, the data providers, the
    notes memory and the session. Injected so that real mode, mock mode and dataset
    generation run the same implementation with different surroundings."""

    now: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    session_id: str = "default"
    notes: NotesStore = field(default_factory=NotesStore)
    providers: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def reference(cls, session_id: str = "default") -> ToolContext:
        """The deterministic context used for ground truth and mock mode."""
        return cls(now=lambda: REFERENCE_NOW, session_id=session_id)


Implementation = Callable[[dict[str, Any], ToolContext], dict[str, Any]]


@dataclass(frozen=True)
class Tool:
    """One tool: schema (OpenAI function format), validation, real implementation.

    `mock` is the deterministic behaviour used for training; it defaults to the real
    implementation run in the reference context (offline providers, frozen clock), which is
    what makes dataset ground truth and rollout observations agree.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    implementation: Implementation
    check: Callable[[dict[str, Any]], list[str]] | None = None
    mock: Implementation | None = None
    result_fields: tuple[str, ...] = ()
    stateful: bool = False

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Return normalised arguments or raise ToolArgumentError listing every problem."""
        cleaned, problems = validate_arguments(self.name, self.parameters, arguments)
        if not problems and self.check is not None:
            problems = self.check(cleaned)
        if problems:
            raise ToolArgumentError(self.name, problems)
        return cleaned

    def run(self, arguments: Any, context: ToolContext, mode: ToolMode = "real") -> dict[str, Any]:
        cleaned = self.validate(arguments)
        impl = self.mock if (mode == "mock" and self.mock is not None) else self.implementation
        return impl(cleaned, context)
