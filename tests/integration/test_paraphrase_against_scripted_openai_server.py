"""The optional LLM paraphraser against a real HTTP server on loopback that speaks the OpenAI
chat API with scripted replies (no LLM is available offline)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from training.data.config import GenerationConfig
from training.data.generate import generate_rows
from training.data.paraphrase import ParaphraseConfig, paraphrase_rows

Reply = Callable[[str], tuple[int, str]]


@pytest.fixture
def scripted_server() -> Iterator[Callable[[Reply], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(reply: Reply) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][-1]["content"]
                status, payload = reply(prompt.rsplit("Request: ", 1)[-1])
                data = payload.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def completion(text: str) -> str:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})


def test_faithful_paraphrases_are_accepted(scripted_server: Callable[[Reply], str]) -> None:
    url = scripted_server(lambda q: (200, completion(f"Could you tell me: {q}")))
    rows = generate_rows(GenerationConfig(n=40, seed=1), progress=False)
    stats = paraphrase_rows(rows, ParaphraseConfig(url=url, concurrency=4), progress=False)
    assert stats.accepted == stats.attempted == 40
    assert all(r["query"].startswith("Could you tell me:") for r in rows)
    assert all(r["prompt"][-1]["content"] == r["query"] for r in rows)


def test_paraphrase_that_drops_a_value_is_rejected(scripted_server: Callable[[Reply], str]) -> None:
    url = scripted_server(lambda q: (200, completion("Some vague question without numbers")))
    rows = [
        r
        for r in generate_rows(GenerationConfig(n=60, seed=2), progress=False)
        if r["category"] == "single" and any(ch.isdigit() for ch in r["query"])
    ]
    originals = [r["query"] for r in rows]
    stats = paraphrase_rows(rows, ParaphraseConfig(url=url), progress=False)
    assert stats.rejected == len(rows) > 0
    assert [r["query"] for r in rows] == originals


@pytest.mark.parametrize(
    "reply",
    [
        lambda q: (500, "oops"),
        lambda q: (200, "not json"),
        lambda q: (200, json.dumps({"x": 1})),
        lambda q: (429, completion("rate limited")),
    ],
)
def test_endpoint_failures_keep_the_template_query(
    scripted_server: Callable[[Reply], str], reply: Reply
) -> None:
    url = scripted_server(reply)
    rows = generate_rows(GenerationConfig(n=10, seed=3), progress=False)
    originals = [r["query"] for r in rows]
    stats = paraphrase_rows(rows, ParaphraseConfig(url=url, retries=1, timeout_s=5), progress=False)
    assert stats.failed == 10 and stats.accepted == 0
    assert [r["query"] for r in rows] == originals


def test_unreachable_endpoint_is_counted_not_raised() -> None:
    rows = generate_rows(GenerationConfig(n=10, seed=3), progress=False)
    stats = paraphrase_rows(
        rows, ParaphraseConfig(url="http://127.0.0.1:9/v1", retries=0, timeout_s=2), progress=False
    )
    assert stats.failed == 10
