"""The group judge against a real HTTP server on loopback that speaks the OpenAI chat API.

No LLM is available offline, so the server is SCRIPTED: each test sets what it answers
(scores, garbage, errors, delays). Everything else is real: sockets, HTTP, timeouts,
retries, concurrency limits, the cache.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from training.rewards.config import JudgeConfig, RuleWeights
from training.rewards.judge import GroupJudge, combine
from training.rewards.samples import render_hermes, tool_turn

pytestmark = pytest.mark.integration

Reply = tuple[int, str, float]  # status, body, delay before answering
Script = Callable[[dict[str, Any]], Reply]


def completion(content: str) -> str:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})


def ranked(body: dict[str, Any]) -> Reply:
    """Scores trajectories by a `quality=X` marker in their text; a real judge's shape."""
    user = body["messages"][-1]["content"]
    entries = [
        {"trajectory_id": tid, "explanation": f"quality {q}", "score": float(q)}
        for tid, q in re.findall(r'<trajectory id="(\d+)">\s*.*?quality=([0-9.]+)', user, re.S)
    ]
    return 200, completion("```json\n" + json.dumps({"scores": entries}) + "\n```"), 0.0


class ScriptedServer:
    def __init__(self) -> None:
        self.script: Script = ranked
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                with server._lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    status, text, delay = server.script(body)
                    time.sleep(delay)
                    payload = text.encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def log_message(self, *args: object) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer()
    yield scripted
    scripted.close()


def make_config(server: ScriptedServer, **overrides: Any) -> JudgeConfig:
    values: dict[str, Any] = {
        "base_url": server.url,
        "api_key": "test-key",
        "model": "judge-model",
        "timeout_s": 2.0,
        "max_retries": 1,
        "backoff_s": 0.01,
        "judge_weight": 1.0,
    }
    values.update(overrides)
    return JudgeConfig.model_validate(values)


PROMPT = "system: tools...\nuser: what is 256*37?\n"
GROUP = [f"<tool_call>calc</tool_call>\nanswer quality={q}" for q in ("0.9", "0.2", "0.5")]
RULE = [1.0, -1.0, 0.5]


def judge_group(config: JudgeConfig, group: list[str] = GROUP, rule: list[float] = RULE) -> Any:
    async def run() -> Any:
        async with GroupJudge(config) as judge:
            return await judge.score_group(PROMPT, group, rule), judge.stats

    return asyncio.run(run())


def test_judge_against_scripted_openai_server_scores_relative_with_reasons(
    server: ScriptedServer,
) -> None:
    result, stats = judge_group(make_config(server))
    assert result.judge_scores == [0.9, 0.2, 0.5]
    assert result.reasons == ["quality 0.9", "quality 0.2", "quality 0.5"]
    # judge_weight 1: scores are the judge's, scaled onto the rule clip [-3, 3]
    assert result.scores == pytest.approx([2.4, -1.8, 0.0])
    assert result.fallbacks == 0
    assert stats.fallbacks == 0
    request = server.requests[0]
    assert request["model"] == "judge-model"
    assert request["max_completion_tokens"] == 2048
    assert server.headers[0]["Authorization"] == "Bearer test-key"
    user = request["messages"][-1]["content"]
    # the shared prefix of the trajectories is sent once, in the context
    assert user.count("<tool_call>calc</tool_call>") == 1
    assert user.count("<trajectory id=") == 3


def test_judge_against_scripted_openai_server_cache_keyed_by_content(
    server: ScriptedServer,
) -> None:
    async def run() -> Any:
        async with GroupJudge(make_config(server)) as judge:
            first = await judge.score_group(PROMPT, GROUP, RULE)
            second = await judge.score_group(PROMPT, GROUP, RULE)
            changed = await judge.score_group(PROMPT, [*GROUP[:2], "other quality=0.1"], RULE)
            return first, second, changed, judge.stats

    first, second, changed, stats = asyncio.run(run())
    assert first.scores == second.scores
    assert changed.judge_scores == [0.9, 0.2, 0.1]
    assert len(server.requests) == 2
    assert stats.cache_hits == 1


OUT_OF_RANGE = json.dumps({"scores": [{"trajectory_id": str(i), "score": 7} for i in (1, 2, 3)]})


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (completion("I think the first one is best."), "bad_reply"),
        (completion('{"scores": [{"trajectory_id": "1", "score": 0.5}]}'), "bad_reply"),
        (completion(OUT_OF_RANGE), "bad_reply"),
        ('{"not": "a completion"}', "bad_reply"),
        ("<html>oops</html>", "bad_reply"),
    ],
)
def test_judge_against_scripted_openai_server_garbage_falls_back_to_rule_scores(
    server: ScriptedServer, reply: str, reason: str
) -> None:
    server.script = lambda body: (200, reply, 0.0)
    result, stats = judge_group(make_config(server))
    assert result.scores == RULE  # the rule score, never a silent zero
    assert result.judge_scores == [None, None, None]
    assert result.fallbacks == 3
    assert stats.fallbacks == 3
    assert stats.failures == {reason: 2}  # first try + one retry
    assert len(server.requests) == 2


def test_judge_against_scripted_openai_server_timeout_falls_back(server: ScriptedServer) -> None:
    server.script = lambda body: (200, completion("{}"), 5.0)  # far past the client timeout
    result, stats = judge_group(make_config(server, timeout_s=0.2, max_retries=1))
    assert result.scores == RULE
    assert stats.failures == {"timeout": 2}  # the client's timeout ended both tries
    assert len(server.requests) == 2


def test_judge_against_scripted_openai_server_retries_server_errors_with_backoff(
    server: ScriptedServer,
) -> None:
    calls: list[dict[str, Any]] = []

    def flaky(body: dict[str, Any]) -> Reply:
        calls.append(body)
        if len(calls) < 3:
            return (503 if len(calls) == 1 else 429), '{"error": "busy"}', 0.0
        return ranked(body)

    server.script = flaky
    result, stats = judge_group(make_config(server, max_retries=3, backoff_s=0.1))
    assert result.judge_scores == [0.9, 0.2, 0.5]
    assert stats.failures == {"http_503": 1, "http_429": 1}
    assert stats.retries == 2
    assert stats.backoff_waits == [0.1, 0.2]  # the second wait doubled


def test_judge_against_scripted_openai_server_client_errors_are_not_retried(
    server: ScriptedServer,
) -> None:
    server.script = lambda body: (401, '{"error": "bad key"}', 0.0)
    result, stats = judge_group(make_config(server, max_retries=3))
    assert result.scores == RULE
    assert len(server.requests) == 1
    assert stats.failures == {"http_401": 1}


def test_judge_against_scripted_openai_server_sub_batches_with_bounded_concurrency(
    server: ScriptedServer,
) -> None:
    server.script = lambda body: (*ranked(body)[:2], 0.2)
    group = [f"trajectory {i} quality=0.{i}" for i in range(7)]
    config = make_config(server, max_sub_batch=2, concurrent_chunks=2)
    result, _ = judge_group(config, group, [0.0] * 7)
    assert len(server.requests) == 4  # 2 + 2 + 2 + 1
    assert server.max_in_flight == 2
    assert result.judge_scores == pytest.approx([i / 10 for i in range(7)])


def test_judge_against_scripted_openai_server_unreachable_endpoint_falls_back() -> None:
    config = JudgeConfig(base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_s=0.01)
    result, stats = judge_group(config)
    assert result.scores == RULE
    assert stats.failures == {"transport": 2}


def test_judge_against_scripted_openai_server_batch_grouped_by_prompt(
    server: ScriptedServer,
) -> None:
    async def run() -> list[float]:
        async with GroupJudge(make_config(server, judge_weight=0.5)) as judge:
            return await judge.score_batch(
                ["p1", "p2", "p1", "p2"],
                ["a quality=1", "b quality=0", "c quality=0", "d quality=1"],
                [0.0, 0.0, 0.0, 0.0],
            )

    scores = asyncio.run(run())
    assert len(server.requests) == 2
    assert scores == pytest.approx([1.5, -1.5, -1.5, 1.5])


def test_combination_is_configurable() -> None:
    weights = RuleWeights()
    assert combine(2.0, 1.0, 0.0, weights) == 2.0
    assert combine(2.0, 0.5, 1.0, weights) == 0.0
    assert combine(2.0, None, 1.0, weights) == 2.0
    assert JudgeConfig.from_env({"RULER_CONCURRENT_CHUNKS": "3"}).concurrent_chunks == 3


# --- the judge inside verl's per-rollout reward calls (training.rewards.judged) -----------

GT = (
    '{"answers": ["9472"], "category": "single", "schema_version": 1, "steps": '
    '[[{"arguments": {"expression": "256*37"}, "name": "calculate_math"}]]}'
)


@pytest.fixture
def judged_env(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    from training.rewards import judged

    monkeypatch.setenv("RULER_BASE_URL", server.url)
    monkeypatch.setenv("RULER_JUDGE_WEIGHT", "1.0")
    monkeypatch.setenv("RULER_MAX_RETRIES", "0")
    monkeypatch.setenv("RULER_TIMEOUT_S", "2")
    judged._STATE.clear()
    yield server
    judged._STATE.clear()


def rollout(quality: str) -> str:
    call = render_hermes("calculate_math", {"expression": "256*37"})
    return f"{call}{tool_turn(['9472'])}It is 9472. quality={quality}"


def judged_scores(calls: list[tuple[int, str]], **kwargs: Any) -> list[dict[str, Any]]:
    from training.rewards.judged import compute_score_judged

    async def run() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(
                *(
                    compute_score_judged("d", rollout(q), GT, {"index": index}, **kwargs)
                    for index, q in calls
                )
            )
        )

    return asyncio.run(run())


def test_judged_reward_against_scripted_openai_server_judges_each_group_once(
    judged_env: ScriptedServer,
) -> None:
    calls = [(7, "0.9"), (8, "0.1"), (7, "0.3"), (8, "0.6")]
    out = judged_scores(calls, group_size=2, group_wait_s=5.0)
    assert len(judged_env.requests) == 2  # one request per prompt
    assert [o["judge_score"] for o in out] == [0.9, 0.1, 0.3, 0.6]
    assert [o["rule_score"] for o in out] == [3.0] * 4
    assert out[0]["score"] == pytest.approx(-3.0 + 0.9 * 6.0)
    assert all(o["judge_fallback"] == 0.0 for o in out)


def test_judged_reward_against_scripted_openai_server_partial_group_waits_then_judges(
    judged_env: ScriptedServer,
) -> None:
    from training.rewards.judged import compute_score_judged

    async def run() -> tuple[list[bool], int, list[dict[str, Any]]]:
        tasks = [
            asyncio.ensure_future(
                compute_score_judged(
                    "d", rollout(q), GT, {"index": 1}, group_size=8, group_wait_s=0.3
                )
            )
            for q in ("0.5", "0.7")
        ]
        for _ in range(5):  # let both submit; a full group would be judged right away
            await asyncio.sleep(0)
        pending, sent = [not t.done() for t in tasks], len(judged_env.requests)
        return pending, sent, list(await asyncio.gather(*tasks))

    pending, sent_before_the_wait, out = asyncio.run(run())
    assert pending == [True, True] and sent_before_the_wait == 0  # 2 of 8: it waits
    assert len(judged_env.requests) == 1  # then judges the partial group in one request
    assert [o["judge_score"] for o in out] == [0.5, 0.7]


def test_judged_reward_against_scripted_openai_server_falls_back_to_rule_scores(
    judged_env: ScriptedServer,
) -> None:
    judged_env.script = lambda body: (200, completion("no idea"), 0.0)
    out = judged_scores([(3, "0.5"), (3, "0.7")], group_size=2)
    assert [o["score"] for o in out] == [3.0, 3.0]
    assert [o["judge_fallback"] for o in out] == [1.0, 1.0]
    assert [o["judge_score"] for o in out] == [-1.0, -1.0]
