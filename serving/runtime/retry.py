"""Retry with exponential backoff, one way for the whole project, over `tenacity`.

Why a wrapper and not tenacity at each call site: every caller wants the same three
choices (how many tries, the first wait that doubles per retry, which failures are worth
another try) and the same final error, one that says how many tries were made and what the
last problem was ("judge failed after 3 tries: timeout"), raised as the caller's own
exception type so that its callers catch what they always caught.

    reply = await retry_async(client.call_tool, name, arguments, attempts=3,
                              first_backoff_s=0.2, what=f"tools/call {name}")

A failure the predicate does not retry propagates at once, unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Required, TypedDict, TypeVar, TypeVarTuple, Unpack

import tenacity

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

Retryable = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""Which failures get another try: exception types, or a predicate over the exception."""
ErrorFactory = Callable[[str], BaseException]
"""Builds the final error from its message (an exception class taking one string fits)."""
OnRetry = Callable[[BaseException, float], None]
"""Told of each failure that is retried, with the seconds about to be waited."""


class RetryError(tenacity.RetryError):
    """Every try failed. The message is "<what> failed after N tries: <last problem>";
    `tries` and `last` (the last exception) are there for code. A subclass of tenacity's own
    `RetryError`, so `last_attempt` and `reraise()` work as tenacity documents them."""

    def __init__(self, message: str, tries: int, last_attempt: tenacity.Future) -> None:
        super().__init__(last_attempt)
        self.message = message
        self.tries = tries
        self.last = last_attempt.exception()

    def __str__(self) -> str:
        return self.message


def describe(exc: BaseException) -> str:
    """The default last-problem text: the exception's type and the start of its message."""
    text = str(exc)[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RetryOptions(TypedDict, total=False):
    """The keyword arguments of `retry_async` and `retry_call`."""

    attempts: Required[int]
    """Tries in all, the first included (1: no retry)."""
    first_backoff_s: Required[float]
    """The wait after the first failure; it doubles after each further one."""
    what: Required[str]
    """What is tried, as the final error names it ("tools/call x", a URL, "judge")."""
    retry_on: Retryable
    """Which failures get another try (default: any Exception)."""
    max_backoff_s: float | None
    """Cap on one wait (default: none)."""
    error: ErrorFactory | None
    """The final error's type, built from its message (default: `RetryError`)."""
    describe: Callable[[BaseException], str]
    """The last problem as the final message quotes it (default: `describe`)."""
    on_retry: OnRetry | None
    """Told of each retried failure and the wait before the next try (metrics, logs)."""


@dataclass(frozen=True)
class _Policy:
    """`RetryOptions` with their defaults, turned into tenacity's settings."""

    attempts: int
    first_backoff_s: float
    what: str
    retry_on: Retryable = Exception
    max_backoff_s: float | None = None
    error: ErrorFactory | None = None
    describe: Callable[[BaseException], str] = describe
    on_retry: OnRetry | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.first_backoff_s < 0:
            raise ValueError(f"first_backoff_s must be >= 0, got {self.first_backoff_s}")

    def tenacity_kwargs(self) -> dict[str, Any]:
        """The settings both tenacity loops take: stop after `attempts`, wait first_backoff_s
        x 2^(n-1) (capped), retry only the chosen failures, end with the caller's error."""
        retry_on = self.retry_on
        if isinstance(retry_on, type | tuple):
            retry: tenacity.retry_base = tenacity.retry_if_exception_type(retry_on)
        else:
            retry = tenacity.retry_if_exception(retry_on)
        wait = tenacity.wait_exponential(
            multiplier=self.first_backoff_s,
            exp_base=2,
            min=0,
            max=self.max_backoff_s if self.max_backoff_s is not None else float("inf"),
        )
        kwargs: dict[str, Any] = {
            "stop": tenacity.stop_after_attempt(self.attempts),
            "wait": wait,
            "retry": retry,
            "retry_error_callback": self._exhausted,
        }
        if self.on_retry is not None:
            kwargs["before_sleep"] = self._before_sleep
        return kwargs

    def _before_sleep(self, state: tenacity.RetryCallState) -> None:
        assert self.on_retry is not None and state.outcome is not None
        exc = state.outcome.exception()
        assert exc is not None
        self.on_retry(exc, state.next_action.sleep if state.next_action else 0.0)

    def _exhausted(self, state: tenacity.RetryCallState) -> NoReturn:
        """Called by tenacity once the last try failed: the final error, chained to it."""
        assert state.outcome is not None
        last = state.outcome.exception()
        assert last is not None
        tries = state.attempt_number
        message = f"{self.what} failed after {tries} {'try' if tries == 1 else 'tries'}: "
        message += self.describe(last)
        if self.error is None:
            raise RetryError(message, tries, state.outcome) from last
        raise self.error(message) from last


async def retry_async(
    fn: Callable[[*Ts], Awaitable[T]], *args: *Ts, **options: Unpack[RetryOptions]
) -> T:
    """`await fn(*args)`, tried up to `attempts` times; between tries waits first_backoff_s,
    then twice that, and so on (up to `max_backoff_s`). Only failures matching `retry_on`
    are retried; any other propagates unchanged. When every try failed, raises
    `error(message)` (or `RetryError`), chained to the last failure, with the message
    "<what> failed after N tries: <describe(last failure)>"."""
    policy = _Policy(**options)
    result: T = await tenacity.AsyncRetrying(**policy.tenacity_kwargs())(fn, *args)
    return result


def retry_call(fn: Callable[[*Ts], T], *args: *Ts, **options: Unpack[RetryOptions]) -> T:
    """`retry_async` for a blocking call (it sleeps the thread between tries)."""
    policy = _Policy(**options)
    result: T = tenacity.Retrying(**policy.tenacity_kwargs())(fn, *args)
    return result
