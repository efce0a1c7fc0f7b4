"""serving/runtime/retry.py with a flaky callable: how many tries, the doubling backoff,
which failures are retried, and the final error's type and message."""

from __future__ import annotations

import asyncio

import pytest
import tenacity

from serving.runtime.retry import RetryError, retry_async, retry_call


class Flaky:
    """Fails `failures` times with `exc`, then answers its argument doubled."""

    def __init__(self, failures: int, exc: Exception | None = None) -> None:
        self.failures = failures
        self.exc = exc or ConnectionError("refused")
        self.calls = 0

    def __call__(self, value: int) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return value * 2

    async def call_async(self, value: int) -> int:
        await asyncio.sleep(0)
        return self(value)


def test_a_flaky_async_call_succeeds_within_its_attempts_and_backs_off_doubling() -> None:
    flaky, waits = Flaky(failures=3), []
    result = asyncio.run(
        retry_async(
            flaky.call_async,
            21,
            attempts=4,
            first_backoff_s=0.01,
            what="flaky",
            on_retry=lambda exc, wait: waits.append(wait),
        )
    )
    assert result == 42 and flaky.calls == 4
    assert waits == pytest.approx([0.01, 0.02, 0.04])


def test_the_final_error_says_how_many_tries_and_the_last_problem() -> None:
    flaky = Flaky(failures=10)
    with pytest.raises(RetryError) as caught:
        asyncio.run(
            retry_async(flaky.call_async, 1, attempts=3, first_backoff_s=0.0, what="tools/call x")
        )
    assert flaky.calls == 3
    assert str(caught.value) == "tools/call x failed after 3 tries: ConnectionError: refused"
    assert caught.value.tries == 3 and isinstance(caught.value.last, ConnectionError)
    assert caught.value.__cause__ is caught.value.last
    assert isinstance(caught.value, tenacity.RetryError)  # tenacity's own handlers see it


def test_the_caller_chooses_the_final_error_type_and_the_problem_text() -> None:
    class TransportError(Exception):
        pass

    with pytest.raises(TransportError, match=r"^judge failed after 2 tries: timeout$"):
        asyncio.run(
            retry_async(
                Flaky(failures=5, exc=TimeoutError()).call_async,
                1,
                attempts=2,
                first_backoff_s=0.0,
                what="judge",
                error=TransportError,
                describe=lambda exc: "timeout",
            )
        )


def test_a_failure_not_chosen_for_retry_propagates_at_once_unchanged() -> None:
    flaky = Flaky(failures=5, exc=ValueError("bad request"))
    with pytest.raises(ValueError, match="bad request"):
        retry_call(flaky, 1, attempts=5, first_backoff_s=0.0, what="x", retry_on=ConnectionError)
    assert flaky.calls == 1


def test_a_predicate_chooses_which_failures_are_retried() -> None:
    def busy(exc: BaseException) -> bool:
        return isinstance(exc, OSError) and exc.errno == 503

    def call(flaky: Flaky) -> int:
        return retry_call(flaky, 5, attempts=2, first_backoff_s=0.0, what="x", retry_on=busy)

    assert call(Flaky(failures=1, exc=OSError(503, "busy"))) == 10
    with pytest.raises(OSError, match="no"):
        call(Flaky(failures=1, exc=OSError(400, "no")))


def test_the_sync_form_caps_the_backoff_and_one_attempt_means_no_retry() -> None:
    waits: list[float] = []
    with pytest.raises(RetryError, match="after 4 tries"):
        retry_call(
            Flaky(failures=9),
            1,
            attempts=4,
            first_backoff_s=0.001,
            max_backoff_s=0.002,
            what="x",
            on_retry=lambda exc, wait: waits.append(wait),
        )
    assert waits == pytest.approx([0.001, 0.002, 0.002])
    once = Flaky(failures=1)
    with pytest.raises(RetryError, match="x failed after 1 try: ConnectionError"):
        retry_call(once, 1, attempts=1, first_backoff_s=1.0, what="x")
    assert once.calls == 1


def test_nonsense_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="attempts"):
        retry_call(Flaky(0), 1, attempts=0, first_backoff_s=0.0, what="x")
