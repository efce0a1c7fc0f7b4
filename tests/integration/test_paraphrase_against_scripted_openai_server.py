"""The optional LLM paraphraser against a real HTTP server on loopback that speaks the OpenAI
chat API with scripted replies (no LLM is available offline)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from testkit.dataset_rows import builtin_rows
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
    rows = builtin_rows(40, seed=1)
    stats = paraphrase_rows(rows, ParaphraseConfig(url=url, concurrency=4), progress=False)
    assert stats.accepted == stats.attempted == 40
    assert all(r["query"].startswith("Could you tell me:") for r in rows)
    assert all(r["prompt"][-1]["content"] == r["query"] for r in rows)


def test_paraphrase_that_drops_a_value_is_rejected(scripted_server: Callable[[Reply], str]) -> None:
    url = scripted_server(lambda q: (200, completion("Some vague question without numbers")))
    rows = [
        r
        for r in builtin_rows(60, seed=2)
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
    rows = builtin_rows(10, seed=3)
    originals = [r["query"] for r in rows]
    stats = paraphrase_rows(rows, ParaphraseConfig(url=url, retries=1, timeout_s=5), progress=False)
    assert stats.failed == 10 and stats.accepted == 0
    assert [r["query"] for r in rows] == originals


def test_unreachable_endpoint_is_counted_not_raised() -> None:
    rows = builtin_rows(10, seed=3)
    stats = paraphrase_rows(
        rows, ParaphraseConfig(url="http://127.0.0.1:9/v1", retries=0, timeout_s=2), progress=False
    )
    assert stats.failed == 10


def test_data_generate_paraphrases_and_writes_the_new_version(
    scripted_server: Callable[[Reply], str], tmp_path: Path
) -> None:
    """`toolrl data generate --paraphrase-url`: the written rows hold the paraphrases, the
    manifest the new version and the counts; ground truth and call store stay."""
    from typer.testing import CliRunner

    from training.cli import app

    url = scripted_server(lambda q: (200, completion(f"Could you tell me: {q}")))
    out = tmp_path / "d"
    args = ["data", "generate", "--n", "30", "--seed", "4", "--quiet", "--out", str(out)]
    plain = CliRunner().invoke(app, [*args[:-1], str(tmp_path / "plain")])
    made = CliRunner().invoke(app, [*args, "--paraphrase-url", url])
    assert plain.exit_code == 0 and made.exit_code == 0, made.output
    assert "paraphrased 30/30 queries" in made.output
    manifest = json.loads((out / "manifest.json").read_text())
    before = json.loads((tmp_path / "plain" / "manifest.json").read_text())
    assert manifest["paraphrase"] | {"url": url} == {
        "url": url, "model": "default", "attempted": 30, "accepted": 30, "rejected": 0, "failed": 0
    }  # fmt: skip
    assert manifest["call_store"]["digest"] == before["call_store"]["digest"]
    assert manifest["dataset_version"] != before["dataset_version"]
    frame = pd.concat([pd.read_parquet(out / f"{s}.parquet") for s in ("train", "test")])
    assert len(frame) == 30 and frame["query"].str.startswith("Could you tell me:").all()
    assert (frame["query"] == frame["prompt"].map(lambda p: p[-1]["content"])).all()
