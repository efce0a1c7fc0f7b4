"""The shipped `toolrl` pack (the built-in 11 tools), the default dataset: `generate` runs the
project's MCP server in-process in mock mode (`serving.mcp_server.inprocess`), executes every
expected call through it, and the dataset passes the project's validation suite. The
results are what a training rollout in mock mode sees (the same tools, run in the reference
context, agree call by call), the notes rows ran in sessions of their own, the same seed
with the same store gives the same dataset version, and generating against a running
`toolrl mcp serve` over HTTP gives the same rows and the same call store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from serving.mcp_client.call_store import CallStore
from serving.mcp_server.config import FaultConfig, ServerConfig
from serving.mcp_server.replay import load_replay
from serving.mcp_server.server import start
from serving.tools import ToolContext, get_catalog
from training.cli import app
from training.data.packs.generate import PackDataset, generate_from_sources
from training.data.packs.loader import load_pack, resolve_pack
from training.data.schema import GroundTruth
from training.data.validate import validate_dataset

N = 300


def rows_of(out: Path) -> pd.DataFrame:
    return pd.concat(
        [pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "test.parquet")],
        ignore_index=True,
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PackDataset]:
    out = tmp_path_factory.mktemp("toolrl-pack")
    made = generate_from_sources(load_pack(resolve_pack("toolrl")), out, n=N, progress=False)
    return out, made


def test_rows_from_the_project_server_pass_the_project_suite(
    dataset: tuple[Path, PackDataset],
) -> None:
    out, made = dataset
    manifest = made.manifest
    assert manifest["rows"] == N and manifest["pack"]["invalid_rows"] == 0, manifest["pack"]
    # the catalog's own results in the reference context: judged by the catalog, trained
    # against mock mode (a third-party pack's dataset is `pack`: its snapshot and replay)
    assert manifest["generator"]["kind"] == "builtin" and manifest["pack"]["server"] == "toolrl"
    assert set(manifest["pack"]["data_files"]) == {"world.json"}
    assert set(manifest["tools"]) == set(get_catalog().names)
    assert min(manifest["tools"].values()) >= 1  # every one of the 11 tools is expected
    assert set(manifest["category"]) == {
        "single",
        "parallel",
        "multi_step",
        "irrelevance",
        "clarification",
    }
    report = validate_dataset(out)
    assert report.success, report.summary()
    assert not report.failed and len(report.checks) >= 30
    assert any(c.name.endswith("(gt_recomputes)") and c.success for c in report.checks)


def test_results_are_what_a_mock_mode_rollout_sees(dataset: tuple[Path, PackDataset]) -> None:
    """Each row's calls, re-run in-process on the catalog in the reference context (mock
    mode, frozen clock, a fresh notes session per row, as a rollout has), give exactly the
    results the server returned over MCP."""
    out, _ = dataset
    catalog = get_catalog()
    checked = 0
    for index, row in rows_of(out).iterrows():
        truth = GroundTruth.from_json(row["reward_model"]["ground_truth"])
        context = ToolContext.reference(session_id=f"check-{index}")
        for step, results in zip(truth.steps, truth.results, strict=True):
            for call, result in zip(step, results, strict=True):
                again = catalog.execute(call.name, call.arguments, context, mode="mock")
                assert json.loads(json.dumps(again)) == result, (row["query"], call)
                checked += 1
    assert checked > N


def test_notes_rows_run_in_their_own_session(dataset: tuple[Path, PackDataset]) -> None:
    out, _ = dataset
    frame = rows_of(out)
    notes = frame[frame["template_id"].str.contains("/note_roundtrip/|/remember_weather/")]
    assert len(notes) >= 10
    for _, row in notes.iterrows():
        truth = GroundTruth.from_json(row["reward_model"]["ground_truth"])
        saved = next(
            (c, r)
            for step, results in zip(truth.steps, truth.results, strict=True)
            for c, r in zip(step, results, strict=True)
            if c.name == "save_note"
        )
        assert saved[1] == {"saved": saved[0].arguments["title"], "notes_stored": 1}
        if "/note_roundtrip/" in row["template_id"]:
            assert truth.results[1][0]["content"] == saved[0].arguments["content"]
            assert truth.answers == [saved[0].arguments["content"]]


def test_the_store_replays_and_the_same_seed_gives_the_same_version(
    dataset: tuple[Path, PackDataset], tmp_path: Path
) -> None:
    out, made = dataset
    replay = load_replay(out / "calls.sqlite")
    assert set(replay.catalog.names) == set(get_catalog().names)
    with CallStore(out / "calls.sqlite") as store:
        assert store.digest() == made.manifest["call_store"]["digest"]
    again = generate_from_sources(
        load_pack(resolve_pack("toolrl")),
        tmp_path / "again",
        n=N,
        store_path=tmp_path / "copy.sqlite",
        progress=False,
    )
    assert again.manifest["dataset_version"] == made.manifest["dataset_version"]


def test_in_process_is_the_server_over_http(
    dataset: tuple[Path, PackDataset], tmp_path: Path
) -> None:
    """The in-process server answers as `toolrl mcp serve --mode mock` does over HTTP: the
    same seed gives the same rows (dataset version), the same tool snapshot and the same
    call store; only the kind differs (a server reached through sources is a `pack`)."""
    out, made = dataset
    config = ServerConfig(
        mode="mock", port=0, workers=1, faults=FaultConfig(), tune_gc=False, log_level="warning"
    )
    with start(config) as server:
        sources = tmp_path / "sources.yaml"
        sources.write_text(f"servers:\n  toolrl: {{url: {json.dumps(server.url)}}}\n")
        over_http = generate_from_sources(
            load_pack(resolve_pack("toolrl")), tmp_path / "http", sources, n=N, progress=False
        )
    manifest = over_http.manifest
    assert manifest["dataset_version"] == made.manifest["dataset_version"]
    assert manifest["call_store"]["digest"] == made.manifest["call_store"]["digest"]
    assert (tmp_path / "http" / "tools.json").read_text() == (out / "tools.json").read_text()
    assert manifest["generator"]["kind"] == "pack"


def test_the_clis_generate_the_pack(tmp_path: Path) -> None:
    runner = CliRunner()
    checked = runner.invoke(app, ["tools", "pack", "validate", "toolrl"])
    assert checked.exit_code == 0, checked.output
    assert "pack OK" in checked.output
    made = runner.invoke(app, ["data", "generate", "--n", "60", "--out", str(tmp_path / "d")])
    assert made.exit_code == 0, made.output
    manifest: dict[str, Any] = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["rows"] == 60 and manifest["pack"]["name"] == "toolrl"  # the default
    validated = runner.invoke(app, ["data", "validate", str(tmp_path / "d")])
    assert validated.exit_code == 0, validated.output
    english_only = ["--chinese-fraction", "0", "--out", str(tmp_path / "en")]
    english = runner.invoke(
        app, ["data", "generate", "--pack", "toolrl", "--n", "60", *english_only]
    )
    assert english.exit_code == 0, english.output
    manifest = json.loads((tmp_path / "en" / "manifest.json").read_text())
    assert manifest["language"] == {"en": 60} and manifest["generator"]["chinese_fraction"] == 0


def test_synthesized_notes_tasks_run_in_a_session_of_their_own(tmp_path: Path) -> None:
    """LLM synthesis on the toolrl pack (a scripted stand-in for the endpoint): proposals that
    save then read a note are kept, each with the server's answers from its own session (one
    note stored, not two: they run concurrently, so a shared session would count both); a
    proposal that reads a note it never saved gets the server's error, a rejected tool error."""
    from training.data.packs.synthesis.config import SynthesisConfig
    from training.data.packs.synthesis.run import synthesize_from_sources
    from training.evaluation.scripted import Scripted, serve_in_thread

    def note(tool: str, **arguments: str) -> dict[str, Any]:
        return {"tool": tool, "arguments": arguments}

    reply = {
        "tasks": [
            {
                "query": "Save a note called umbrella saying by the door, then read it to me.",
                "language": "en",
                "steps": [
                    [note("save_note", title="umbrella", content="by the door")],
                    [note("read_note", title="umbrella")],
                ],
                "answers": ["$steps[1].result.content"],
            },
            {
                "query": "Write down that my keys hang on the hook, then read that note back.",
                "language": "en",
                "steps": [
                    [note("save_note", title="keys", content="on the hook")],
                    [note("read_note", title="keys")],
                ],
                "answers": ["$steps[1].result.content"],
            },
            {
                "query": "Read me my note called passport drawer.",
                "language": "en",
                "steps": [[note("read_note", title="passport drawer")]],
            },
        ]
    }
    with serve_in_thread(lambda _m, _t: Scripted(content=json.dumps(reply))) as url:
        llm = SynthesisConfig(url=url, proposals=3, per_request=3, retries=0)
        dataset = synthesize_from_sources(
            load_pack(resolve_pack("toolrl")), tmp_path / "d", llm, n=120, progress=False
        )
    report = dataset.manifest["synthesis"]
    assert report["accepted"] == 2 and report["rejected"] == {"tool_error": 1}, report
    kept = [
        GroundTruth.from_json(r["reward_model"]["ground_truth"]).results
        for r in dataset.rows
        if r["template_id"].startswith("llm-")
    ]
    assert sorted(kept, key=lambda results: str(results[0][0]["saved"])) == [
        [[{"saved": "keys", "notes_stored": 1}], [{"title": "keys", "content": "on the hook"}]],
        [
            [{"saved": "umbrella", "notes_stored": 1}],
            [{"title": "umbrella", "content": "by the door"}],
        ],
    ]
