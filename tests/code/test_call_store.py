"""The recorded-call store: one row per meaning of the arguments, nothing lost or half
written, a content digest that names what a dataset was built from, and hostile arguments
refused with a clear error instead of stored in some form no lookup can find."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.mcp_client.call_store import (
    CallStore,
    CallStoreError,
    RecordedCall,
    canonical_arguments,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


def test_the_same_meaning_finds_the_same_row(tmp_path: Path) -> None:
    with CallStore(tmp_path / "calls.sqlite") as store:
        store.record_one(
            "time", "get_current_time", {"timezone": "Europe/Paris", "n": 2.0}, "12:00", False
        )
        found = store.lookup("time", "get_current_time", {"n": 2, "timezone": "Europe/Paris"})
        assert found is not None and found.result == "12:00" and not found.is_error
        assert store.lookup("time", "get_current_time", {"timezone": "Europe/Rome"}) is None
        assert (
            store.lookup("other", "get_current_time", {"n": 2, "timezone": "Europe/Paris"}) is None
        )


@given(st.dictionaries(st.text(max_size=6), JSON, max_size=4))
def test_canonical_form_ignores_key_order_and_is_stable(arguments: dict[str, object]) -> None:
    reordered = dict(reversed(list(arguments.items())))
    assert canonical_arguments(arguments) == canonical_arguments(reordered)
    assert canonical_arguments(arguments) == canonical_arguments(
        __import__("json").loads(canonical_arguments(arguments))
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"x": math.nan}, "non-finite"),
        ({"x": math.inf}, "non-finite"),
        ({"x": object()}, "JSON cannot"),
        ({"x": {1: "a"}}, "keys must be strings"),
    ],
)
def test_arguments_without_a_canonical_form_are_refused(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(CallStoreError, match=message):
        canonical_arguments(arguments)


def test_nesting_too_deep_is_refused_and_never_matches(tmp_path: Path) -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(100):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    with pytest.raises(CallStoreError, match="too deeply"):
        canonical_arguments(deep)
    with CallStore(tmp_path / "c.sqlite") as store:
        assert store.lookup("s", "t", deep) is None


def test_digest_names_the_content_not_the_order_of_recording(tmp_path: Path) -> None:
    calls = [
        RecordedCall("s", "t", canonical_arguments({"i": i}), str(i), False) for i in range(20)
    ]
    with CallStore(tmp_path / "a.sqlite") as a, CallStore(tmp_path / "b.sqlite") as b:
        a.record(calls)
        b.record(reversed(calls))
        assert a.digest() == b.digest() and len(a) == 20
        b.record_one("s", "t", {"i": 3}, "changed", True)
        assert a.digest() != b.digest() and len(b) == 20


def test_a_failed_batch_leaves_no_half_of_it(tmp_path: Path) -> None:
    with CallStore(tmp_path / "c.sqlite") as store:
        good = RecordedCall("s", "t", "{}", "ok", False)
        bad = RecordedCall("s", "t", '{"x":1}', None, False)  # type: ignore[arg-type]
        with pytest.raises(Exception):  # noqa: B017 - sqlite's own NOT NULL error
            store.record([good, bad])
        assert len(store) == 0
    with CallStore(tmp_path / "c.sqlite") as reopened:
        reopened.record([good])
    with CallStore(tmp_path / "c.sqlite") as again:
        assert [c.result for c in again] == ["ok"]
