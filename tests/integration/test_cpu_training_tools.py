"""The MCP tools as TRL sees them, against a real mock-mode MCP server on loopback: one
session per rollout, errors as text, and the server's own schemas in the prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from serving.tools import get_catalog
from serving.tools.base import ToolContext
from training.cpu_backend.tools import McpToolRunner, environment_class, render_with_schemas

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def runner() -> Iterator[McpToolRunner]:
    server: RunningServer
    with start(ServerConfig(mode="mock", port=0, workers=1, log_level="warning")) as server:
        client = McpToolRunner(server.url, timeout_s=10)
        try:
            yield client
        finally:
            client.close()


def test_tools_list_is_the_catalog(runner: McpToolRunner) -> None:
    schemas = runner.list_tools()
    assert [s["function"]["name"] for s in schemas] == get_catalog().names
    by_name = {s["function"]["name"]: s for s in schemas}
    catalog = {s["function"]["name"]: s for s in get_catalog().openai_schemas()}
    assert (
        by_name["get_exchange_rate"]["function"]["parameters"]
        == (catalog["get_exchange_rate"]["function"]["parameters"])
    )


def test_environment_calls_the_server_one_session_per_rollout(runner: McpToolRunner) -> None:
    tools = environment_class(runner, runner.list_tools())
    first, second = tools(), tools()
    first.reset(prompt=[], extra_info={"index": 7})
    second.reset(prompt=[], extra_info={"index": 7})  # same row, another rollout
    assert first.session != second.session
    saved: Any = first.save_note(title="trip", content="gate B12")  # type: ignore[attr-defined]
    assert "error" not in saved.lower()
    assert "gate B12" in first.read_note(title="trip")  # type: ignore[attr-defined]
    assert "gate B12" not in second.read_note(title="trip")  # type: ignore[attr-defined]
    result = json.loads(first.calculate_math(expression="256*37"))  # type: ignore[attr-defined]
    truth = get_catalog().execute(
        "calculate_math", {"expression": "256*37"}, ToolContext.reference("t"), "mock"
    )
    assert result == truth


def test_bad_arguments_come_back_as_text_the_model_reads(runner: McpToolRunner) -> None:
    tools = environment_class(runner, runner.list_tools())()
    text = tools.get_exchange_rate(from_currency="dollars")  # type: ignore[attr-defined]
    # the validator's message, as text the model reads, not an exception
    assert "missing required argument 'to_currency'" in text
    assert "'from_currency' is too long (7 characters, max 3)" in text
    unknown = tools.calculate_math(expresion="1+1")  # type: ignore[attr-defined]
    assert "unexpected argument 'expresion' (allowed: expression)" in unknown


def test_unreachable_server_is_an_error_message_not_a_crash() -> None:
    dead = McpToolRunner("http://127.0.0.1:9/mcp", timeout_s=2)
    try:
        assert dead.call("calculate_math", {"expression": "1"}, "s").startswith("Error:")
    finally:
        dead.close()


def test_prompt_shows_the_server_schemas(runner: McpToolRunner, tmp_path: Path) -> None:
    from training.model.tokenizer import build_tokenizer

    schemas = runner.list_tools()
    tokenizer = render_with_schemas(build_tokenizer(tmp_path, "hermes", 8_192), schemas)
    tools = environment_class(runner, schemas)()
    methods = [getattr(tools, s["function"]["name"]) for s in schemas]
    messages = [{"role": "user", "content": "hi"}]
    via_callables = tokenizer.apply_chat_template(messages, tools=methods, tokenize=False)
    via_schemas = tokenizer.apply_chat_template(messages, tools=schemas, tokenize=False)
    assert via_callables == via_schemas
    assert json.dumps(schemas[0], ensure_ascii=False) in via_callables
