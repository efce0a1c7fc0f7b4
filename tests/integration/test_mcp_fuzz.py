"""Hypothesis fuzzing of every tool's arguments against a live server: whatever arrives,
the answer is one well-formed JSON-RPC response, quickly, and the server stays up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from serving.tools import get_catalog

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-06-18",
}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=60)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
tricky_text = st.sampled_from(
    [
        "",
        " ",
        "NaN",
        "1e999",
        "10**10**10",
        "factorial(100000)",
        "9" * 500,
        "北京",
        "'; DROP",
        "\x00",
        "2025-02-30",
        "-1",
        "Europe/Atlantis",
        "XXX",
        "%s%s%n",
        "🙂" * 50,
    ]
) | st.text(max_size=120)


def argument_dicts(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Mostly the schema's own keys with plausible or hostile values, sometimes extra keys."""
    properties: dict[str, Any] = schema.get("properties", {})
    per_key: dict[str, st.SearchStrategy[Any]] = {}
    for key, prop in properties.items():
        typed: st.SearchStrategy[Any]
        if prop.get("type") == "string":
            typed = tricky_text | st.sampled_from(prop.get("enum") or [""])
        elif prop.get("type") in ("number", "integer"):
            typed = st.integers(-(10**13), 10**13) | st.floats(
                allow_nan=False, allow_infinity=False
            )
        else:
            typed = json_values
        per_key[key] = typed | json_values
    known = st.fixed_dictionaries({}, optional=per_key)
    extra = st.dictionaries(st.text(max_size=10), json_values, max_size=2)
    return st.tuples(known, extra).map(lambda pair: {**pair[1], **pair[0]})


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = ServerConfig(port=0, workers=2, log_level="error")
    with start(config) as running:
        yield running


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def post_call(http: httpx.Client, url: str, name: str, arguments: Any) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    # the client's 10 s timeout catches a hang
    response = http.post(url, json=body, headers=HEADERS)
    assert response.status_code < 500, response.text
    assert "Traceback" not in response.text
    payload: dict[str, Any] = response.json()
    assert payload["id"] == 7
    return payload


@pytest.mark.parametrize("tool", get_catalog().names)
def test_fuzzed_arguments_never_crash_or_hang(
    server: RunningServer, http: httpx.Client, tool: str
) -> None:
    schema = dict(get_catalog().get(tool).parameters)

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(arguments=argument_dicts(schema))
    def check(arguments: dict[str, Any]) -> None:
        payload = post_call(http, server.url, tool, arguments)
        result = payload["result"]
        assert isinstance(result["isError"], bool)
        assert result["content"] and isinstance(result["content"][0]["text"], str)
        if result["isError"]:
            assert result["content"][0]["text"].strip()

    check()
    assert server.alive()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(name=st.text(max_size=40), arguments=json_values)
def test_fuzzed_names_and_argument_shapes_get_protocol_answers(
    server: RunningServer, http: httpx.Client, name: str, arguments: Any
) -> None:
    payload = post_call(http, server.url, name, arguments)
    assert ("result" in payload) != ("error" in payload)
    if "error" in payload:
        assert isinstance(payload["error"]["code"], int) and payload["error"]["message"]
