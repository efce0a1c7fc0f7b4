"""A second, independent client: the openai Node SDK (pinned in tests/clients/node, installed
by `make node-client`) calls the front door, plain and streaming, and gets a refusal as the
SDK's BadRequestError. The upstream is the scripted model server (a stand-in for a GPU
model); the MCP server is real."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.frontdoor.app import FrontDoorConfig
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import start
from testkit.frontdoor import Door, upstream_for, weather_then_answer
from training.evaluation.scripted import serve_in_thread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CLIENT = Path(__file__).resolve().parents[1] / "clients" / "node"
NODE = shutil.which("node")


@pytest.fixture(scope="module")
def front_door_url() -> Iterator[str]:
    with (
        start(ServerConfig(port=0, workers=1, log_level="warning")) as mcp,
        serve_in_thread(weather_then_answer) as backend,
    ):
        door = Door(FrontDoorConfig(api_key="node-key"))
        try:
            yield door.open(upstream_for(backend, mcp.url, "3"))
        finally:
            door.close()


@pytest.mark.skipif(NODE is None, reason="node is not installed on this machine")
def test_the_openai_node_sdk_reads_replies_streams_and_refusals(front_door_url: str) -> None:
    assert (CLIENT / "node_modules" / "openai").is_dir(), "run `make node-client` (npm ci)"
    assert NODE is not None
    done = subprocess.run(
        [NODE, str(CLIENT / "chat.mjs"), front_door_url, "node-key"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    plain, stream, refused = summary["plain"], summary["stream"], summary["refused"]
    assert plain["finish"] == "stop" and "Paris" in plain["content"]
    assert plain["toolrl"]["model_version"] == "3"
    assert [c["name"] for c in plain["toolrl"]["tool_calls"]] == ["get_current_weather"]
    assert stream["content"] == plain["content"]  # the same scripted episode, streamed
    assert stream["events"] == ["tool_call", "tool_result"]
    assert stream["finishes"] == ["stop"] and stream["ids"] == 1
    assert stream["usage"]["total_tokens"] == 240
    assert refused["status"] == 400 and refused["name"] == "BadRequestError"
    assert "n must be 1" in refused["message"]
