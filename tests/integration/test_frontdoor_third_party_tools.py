"""`toolrl frontdoor --tool-sources FILE`, as users start it: the front door answers by
calling a tool of an MCP server no one here wrote (`mcp-server-time`, stdio, started and
supervised by the front door). The model is the scripted model server (a stand-in for a
trained model, which would need training first); the tool, its process and its answer
are real."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from serving.runtime.ports import free_port
from testkit.mcp_servers import TIME_SERVER_COMMAND
from training.evaluation.scripted import Scripted, serve_in_thread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
TOOLRL = str(Path(sys.executable).with_name("toolrl"))
seen_tools: list[list[str]] = []


def time_then_answer(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> Scripted:
    """Call the time server's tool under its configured prefix, then quote its result."""
    seen_tools.append([t["function"]["name"] for t in tools])
    results = [m for m in messages if m.get("role") == "tool"]
    if not results:
        return Scripted(calls=[("clock_get_current_time", {"timezone": "Asia/Tokyo"})])
    return Scripted(content=f"In Tokyo: {results[-1]['content'][:200]}")


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text(errors="replace")[-2000:]
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"front door not healthy: {log.read_text(errors='replace')[-2000:]}")


def test_the_front_door_answers_with_a_third_party_stdio_tool(tmp_path: Path) -> None:
    sources = tmp_path / "sources.yaml"
    command, *args = TIME_SERVER_COMMAND
    sources.write_text(
        json.dumps({"servers": {"clock": {"command": command, "args": args, "prefix": "clock_"}}}),
        encoding="utf-8",
    )
    port, log = free_port(), tmp_path / "frontdoor.log"
    with serve_in_thread(time_then_answer) as upstream, log.open("wb") as out:
        door = subprocess.Popen(
            [TOOLRL, "frontdoor", "--upstream", upstream, "--model", "scripted",
             "--port", str(port), "--tool-sources", str(sources)],
            stdout=out, stderr=out,
        )  # fmt: skip
        try:
            _wait_healthy(f"http://127.0.0.1:{port}/health", door, log)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
            reply = client.chat.completions.create(
                model="toolrl",
                messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
            )
        finally:
            door.terminate()
            door.wait(20)
    answer = reply.choices[0].message.content or ""
    trace = (reply.model_extra or {})["toolrl"]["tool_calls"]
    assert [c["name"] for c in trace] == ["clock_get_current_time"]
    assert not trace[0]["is_error"], trace[0]["result"]
    result = json.loads(trace[0]["result"])
    assert result["timezone"] == "Asia/Tokyo" and "+09:00" in result["datetime"]
    assert answer.startswith("In Tokyo:") and result["datetime"][:10] in answer
    assert "clock_convert_time" in seen_tools[0]  # the model was shown the server's tools


def test_a_broken_sources_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    sources = tmp_path / "sources.yaml"
    sources.write_text("servers:\n  clock: {url: 'http://x', command: 'y'}\n", encoding="utf-8")
    done = subprocess.run(
        [TOOLRL, "frontdoor", "--upstream", "http://127.0.0.1:9/v1", "--model", "m",
         "--tool-sources", str(sources)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--tool-sources" in done.stderr and "clock" in done.stderr
