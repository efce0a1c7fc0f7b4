"""The evaluation harness against a scripted OpenAI-compatible server on loopback and the real
MCP server (mock mode): known model outputs must give known scores."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from training.data.packs.generate import generate_builtin_dataset
from training.data.schema import GroundTruth
from training.evaluation.cases import EvalDataError, load_cases
from training.evaluation.report import load_report
from training.evaluation.runner import EvalConfig, JournalError, evaluate, journal_path
from training.evaluation.scripted import (
    Script,
    Scripted,
    _first_user,
    oracle_script,
    serve_in_thread,
    truths_from_parquet,
)
from training.model.tokenizer import build_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
Message = dict[str, Any]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data")
    generate_builtin_dataset(out, n=300, seed=3, progress=False)
    return out / "test.parquet"


@pytest.fixture(scope="module")
def truths(data: Path) -> dict[str, GroundTruth]:
    return truths_from_parquet(data)


@pytest.fixture(scope="module")
def mcp() -> Iterator[RunningServer]:
    with start(ServerConfig(port=0, workers=1, log_level="warning")) as running:
        yield running


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    build_tokenizer(out, "hermes", 8192)
    return out


def run(
    script: Script, data: Path, mcp: RunningServer, out: Path, **overrides: Any
) -> dict[str, Any]:
    with serve_in_thread(script) as url:
        config = EvalConfig(
            endpoint=url, model="scripted", data=data, out=out, mcp_url=mcp.url, **overrides
        )
        return evaluate(config, progress=False).metrics


def categories(data: Path) -> Counter[str]:
    return Counter(case.category for case in load_cases(data).cases)


def test_scripted_oracle_scores_perfectly_and_writes_json_and_html(
    data: Path, truths: dict[str, GroundTruth], mcp: RunningServer, tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    metrics = run(oracle_script(truths), data, mcp, out, samples=3, pass_k_cases=4)
    overall = metrics["overall"]
    for key in (
        "pass_rate",
        "tool_selection_accuracy",
        "argument_accuracy",
        "exact_call_accuracy",
        "answer_accuracy",
        "irrelevance_accuracy",
        "clarification_accuracy",
    ):
        assert overall[key] == 1.0, key
    assert overall["malformed_call_rate"] == 0.0
    assert overall["error_rate"] == 0.0
    counts = categories(data)
    no_call = counts["irrelevance"] + counts["clarification"]
    assert overall["tool_call_rate"] == pytest.approx(1 - no_call / sum(counts.values()), abs=1e-6)
    assert metrics["pass_hat_k"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    assert metrics["pass_hat_k_cases"] == 4
    assert overall["mean_prompt_tokens"] > 0
    report = load_report(out)
    assert report.schema_version == 1
    assert report.source.dataset_version is not None
    page = out.with_suffix(".html").read_text()
    assert "<svg" in page and "By category" in page


def flawed_script(truths: dict[str, GroundTruth]) -> Script:
    """Known flaws per category: single calls the wrong tool, parallel reverses the order
    (must still match), irrelevance calls a tool, multi_step sends broken JSON arguments."""
    oracle = oracle_script(truths)

    def reply(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        truth = truths[_first_user(messages)]
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        category = truth.category.value
        if category == "single" and turn == 0:
            name = truth.steps[0][0].name
            other = "get_current_time" if name != "get_current_time" else "calculate_math"
            return Scripted(calls=[(other, {"timezone": "UTC"})])
        if category == "single":
            return Scripted(content="done")
        if category == "parallel" and turn == 0:
            return Scripted(calls=[(c.name, c.arguments) for c in reversed(truth.steps[0])])
        if category == "irrelevance" and turn == 0:
            return Scripted(calls=[("calculate_math", {"expression": "1+1"})])
        if category == "multi_step" and turn == 0:
            return Scripted(calls=[(truth.steps[0][0].name, '{"broken": ')])
        if category == "multi_step":
            return Scripted(content="I could not finish.")
        return oracle(messages, tools)

    return reply


def test_scripted_known_flaws_give_known_scores(
    data: Path, truths: dict[str, GroundTruth], mcp: RunningServer, tmp_path: Path
) -> None:
    metrics = run(flawed_script(truths), data, mcp, tmp_path / "r.json")
    cats = metrics["by_category"]
    counts = categories(data)
    assert cats["single"]["tool_selection_accuracy"] == 0.0
    assert cats["single"]["argument_accuracy"] == 0.0
    assert cats["single"]["pass_rate"] == 0.0
    assert cats["parallel"]["exact_call_accuracy"] == 1.0  # order-free
    assert cats["parallel"]["pass_rate"] == 1.0
    assert cats["irrelevance"]["irrelevance_accuracy"] == 0.0
    assert cats["irrelevance"]["tool_call_rate"] == 1.0
    assert cats["clarification"]["clarification_accuracy"] == 1.0
    multi = cats["multi_step"]
    assert multi["malformed_by_kind"] == {"bad_json": counts["multi_step"]}
    assert multi["malformed_call_rate"] == 1.0
    assert multi["exact_call_accuracy"] == 0.0
    expected_pass = (counts["parallel"] + counts["clarification"]) / sum(counts.values())
    assert metrics["overall"]["pass_rate"] == pytest.approx(expected_pass, abs=1e-6)


def test_scripted_http_500_falls_back_to_raw_text_and_project_parser(
    data: Path,
    truths: dict[str, GroundTruth],
    mcp: RunningServer,
    tmp_path: Path,
    tokenizer_dir: Path,
) -> None:
    oracle = oracle_script(truths)

    def reply(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        if tools:  # the chat endpoint (completions passes no tools): the server's parser fails
            return Scripted(status=500, body='{"error": "unhandled parse error"}')
        return oracle(messages, tools)

    metrics = run(reply, data, mcp, tmp_path / "r.json", tokenizer=tokenizer_dir, limit=10)
    overall = metrics["overall"]
    assert overall["error_rate"] == 0.0
    assert overall["pass_rate"] == 1.0
    assert overall["fallback_turn_rate"] == 1.0


def test_scripted_raw_mode_parses_hermes_text(
    data: Path,
    truths: dict[str, GroundTruth],
    mcp: RunningServer,
    tmp_path: Path,
    tokenizer_dir: Path,
) -> None:
    metrics = run(
        oracle_script(truths), data, mcp, tmp_path / "r.json", mode="raw", tokenizer=tokenizer_dir
    )
    assert metrics["overall"]["pass_rate"] == 1.0
    assert metrics["overall"]["malformed_call_rate"] == 0.0


def test_scripted_transport_errors_are_reported_not_hidden(
    data: Path, mcp: RunningServer, tmp_path: Path
) -> None:
    seen: list[int] = []

    def unavailable(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        seen.append(1)
        return Scripted(status=503, body="overloaded")

    out = tmp_path / "r.json"
    metrics = run(unavailable, data, mcp, out, limit=2)
    assert metrics["overall"]["error_rate"] == 1.0
    assert metrics["overall"]["pass_rate"] == 0.0
    assert len(seen) == 2 * 4  # retried: 4 attempts per case
    failure = load_report(out).failures[0]
    assert "HTTP 503" in failure["error"] and failure["stop"] == "error"


def test_a_made_up_tool_is_a_tool_error_the_model_reads_not_a_transport_failure(
    data: Path, mcp: RunningServer, tmp_path: Path
) -> None:
    """The real MCP server refuses an unknown tool with a JSON-RPC error; that is its answer,
    so the episode goes on with the refusal as the call's result (naming the tools there are),
    untried again, and the case is scored as the wrong call it is, not as an error (before,
    the loop retried the refusal and ended the episode as a transport failure, which the
    gate's error_rate counts)."""
    results: list[str] = []

    def made_up_tool(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        answered = [m for m in messages if m["role"] == "tool"]
        if not answered:
            return Scripted(calls=[("get_weather", {"city": "Paris"})])
        results.extend(str(m["content"]) for m in answered)
        return Scripted(content="I could not find that.")

    out = tmp_path / "r.json"
    metrics = run(made_up_tool, data, mcp, out, limit=3)
    assert metrics["overall"]["error_rate"] == 0.0
    assert len(results) == 3  # one refusal read per case: no retries, no ended episodes
    assert all("Unknown tool 'get_weather'" in r and "get_current_weather" in r for r in results)
    assert all(r.startswith("Error: ") for r in results)
    assert metrics["overall"]["pass_rate"] == 0.0


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[]",
        '{"choices": []}',
        '{"choices": [{"message": {"content": 5, "tool_calls": "x"}}]}',
        '{"choices": [{"message": {"tool_calls": [{"function": {"name": 3, "arguments": [1]}}]}}]}',
    ],
)
def test_scripted_hostile_model_server_bodies_never_crash_the_eval(
    data: Path, mcp: RunningServer, tmp_path: Path, body: str
) -> None:
    metrics = run(
        lambda m, t: Scripted(status=200, body=body), data, mcp, tmp_path / "r.json", limit=3
    )
    assert metrics["overall"]["cases"] == 3
    assert metrics["overall"]["pass_rate"] == 0.0


def test_scripted_eval_resumes_after_a_crash(
    data: Path, truths: dict[str, GroundTruth], mcp: RunningServer, tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    full = run(oracle_script(truths), data, mcp, out)
    journal = journal_path(out)
    lines = journal.read_text().splitlines()
    total = len(lines) - 1
    journal.write_text("\n".join([*lines[:11], lines[11][:40]]))  # 10 done + a torn line
    asked: set[str] = set()
    oracle = oracle_script(truths)

    def counting(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        asked.add(_first_user(messages))
        return oracle(messages, tools)

    resumed = run(counting, data, mcp, out)
    assert len(asked) == total - 10
    assert resumed["overall"]["pass_rate"] == full["overall"]["pass_rate"] == 1.0
    assert resumed["overall"]["cases"] == total
    with pytest.raises(JournalError):
        run(counting, data, mcp, out, max_turns=3)  # different settings, same journal
    fresh = run(counting, data, mcp, out, max_turns=3, fresh=True)
    assert fresh["overall"]["cases"] == total


@pytest.mark.parametrize("content", [b"", b"PAR1garbage", b"not parquet at all"])
def test_unreadable_eval_data_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "test.parquet"
    path.write_bytes(content)
    with pytest.raises(EvalDataError, match=r"test\.parquet"):
        load_cases(path)
    with pytest.raises(EvalDataError, match="no such file"):
        load_cases(tmp_path / "missing.parquet")


def test_rows_with_broken_ground_truth_are_skipped_and_counted(data: Path, tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.read_parquet(data)
    frame.at[0, "reward_model"] = {"style": "rule", "ground_truth": "{}"}  # type: ignore[assignment]
    path = tmp_path / "test.parquet"
    frame.to_parquet(path)
    case_set = load_cases(path)
    assert len(case_set.cases) == len(frame) - 1
    assert case_set.skipped[0].startswith("row 0:")


def test_scripted_eval_cli_writes_the_report_and_fails_clearly_on_bad_data(
    data: Path,
    truths: dict[str, GroundTruth],
    mcp: RunningServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import typer
    from typer.testing import CliRunner

    from training.evaluation.cli import register_cli

    app = typer.Typer()
    register_cli(app)
    monkeypatch.setenv("TOOLRL_MCP_URL", mcp.url)
    out = tmp_path / "cli" / "report.json"
    with serve_in_thread(oracle_script(truths)) as url:
        base = ["eval", "--endpoint", url, "--model", "scripted", "--out", str(out), "--quiet"]
        result = CliRunner().invoke(app, [*base, "--data", str(data)])
        assert result.exit_code == 0, result.output
        assert '"pass_rate": 1.0' in result.output
        assert load_report(out).metrics["overall"]["pass_rate"] == 1.0
        missing = CliRunner().invoke(app, [*base, "--data", str(tmp_path / "none.parquet")])
        assert missing.exit_code == 2 and "no such file" in missing.output
        both = CliRunner().invoke(app, [*base, "--data", str(data), "--bfcl", "simple_python"])
        assert both.exit_code != 0 and "exactly one" in both.output


def test_the_harness_sends_the_tool_servers_token(
    data: Path, truths: dict[str, GroundTruth], tmp_path: Path
) -> None:
    """Deployments run the MCP servers with a bearer token. The pipeline's evaluation sent
    none (the compose stack's would have scored every tool call as a 401); with the token
    an oracle scores perfectly, without it the same oracle's calls are refused."""
    from pydantic import SecretStr

    with start(ServerConfig(port=0, workers=1, log_level="warning", token="s3cret")) as locked:
        right = run(
            oracle_script(truths), data, locked, tmp_path / "t.json", limit=12,
            mcp_token=SecretStr("s3cret"),
        )  # fmt: skip
        refused = run(oracle_script(truths), data, locked, tmp_path / "n.json", limit=12)
    assert right["overall"]["exact_call_accuracy"] == 1.0
    assert right["overall"]["error_rate"] == 0.0
    assert refused["overall"]["pass_rate"] < 1.0
