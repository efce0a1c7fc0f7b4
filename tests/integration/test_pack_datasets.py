"""Datasets from task packs against the real third-party servers: `mcp-server-time` (PyPI,
stdio) and `@modelcontextprotocol/server-memory` (npm, stdio). Rows pass the project's
great-expectations suite unchanged, chains carry an earlier result into a later call,
held-out templates never reach train, every expected call is in the call store the manifest
names (by digest), and a call that errors on the server makes its row invalid, counted and
reported, never emitted."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from serving.mcp_client.call_store import CallStore
from testkit.mcp_servers import MEMORY_SERVER_BIN
from training.cli import app
from training.data.config import ValidationConfig
from training.data.packs.generate import generate_from_sources
from training.data.packs.loader import load_pack, parse_pack_text
from training.data.packs.plan import GenerationError, template_pools
from training.data.schema import GroundTruth
from training.data.validate import validate_dataset

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
BUILTIN = Path(__file__).resolve().parents[2] / "training" / "data" / "packs" / "builtin"
FAST = ValidationConfig(check_verl_dataset=False)


def rows_of(out: Path) -> pd.DataFrame:
    return pd.concat(
        [pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "test.parquet")],
        ignore_index=True,
    )


def hhmm(text: str) -> str:
    match = re.search(r"T(\d{2}:\d{2})", text)
    assert match, text
    return match.group(1)


@pytest.fixture(scope="module")
def time_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("time_pack")
    dataset = generate_from_sources(
        load_pack(BUILTIN / "time.yaml"), out, n=400, seed=3, progress=False
    )
    return out, dataset.manifest


def test_time_pack_rows_pass_the_project_suite(time_dataset: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = time_dataset
    report = validate_dataset(out, FAST)
    assert report.success, report.summary()
    assert report.dataset_version == manifest["dataset_version"]
    assert manifest["rows"] == 400 and manifest["pack"]["invalid_rows"] == 0
    assert set(manifest["language"]) == {"en", "zh"}
    assert {"pack_call_store_digest", "expect_column_values_to_be_in_set(gt_recomputes)"} <= {
        c.name for c in report.checks
    }


def test_chains_carry_the_first_result_into_the_second_call(
    time_dataset: tuple[Path, dict[str, Any]],
) -> None:
    frame = rows_of(time_dataset[0])
    chained = frame[
        frame.template_id.str.startswith(("time/now_then_convert/", "time/convert_chain/"))
    ]
    assert len(chained) >= 40
    for raw in chained["reward_model"]:
        truth = GroundTruth.from_json(raw["ground_truth"])
        first, second = truth.results[0][0], truth.steps[1][0]
        carried = first["datetime"] if "datetime" in first else first["target"]["datetime"]
        assert second.name == "convert_time"
        assert second.arguments["time"] == hhmm(carried)
        assert truth.answers[-1] == hhmm(truth.results[1][0]["target"]["datetime"])


def test_held_out_templates_never_appear_in_train(
    time_dataset: tuple[Path, dict[str, Any]],
) -> None:
    out, manifest = time_dataset
    frame = rows_of(out)
    split = frame["extra_info"].map(lambda info: info["split"])
    train, test = set(frame.template_id[split == "train"]), set(frame.template_id[split == "test"])
    assert test and not train & test
    pools = template_pools(load_pack(BUILTIN / "time.yaml").spec)
    held = {t for pool in pools.values() for t in pool["test"]}
    assert test <= held and not train & held
    for category, counts in manifest["pack"]["templates"].items():
        assert counts["test"] / (counts["train"] + counts["test"]) >= 0.25, category


def test_every_expected_call_is_in_the_store_the_manifest_names(
    time_dataset: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, manifest = time_dataset
    info = manifest["call_store"]
    tools = {t["name"]: t for t in json.loads((out / "tools.json").read_text())}
    with CallStore(out / info["path"]) as store:
        assert store.digest() == info["digest"] and len(store) == info["calls"]
        for raw in rows_of(out)["reward_model"]:
            truth = GroundTruth.from_json(raw["ground_truth"])
            for step, results in zip(truth.steps, truth.results, strict=True):
                for call, result in zip(step, results, strict=True):
                    tool = tools[call.name]
                    found = store.lookup(tool["server"], tool["server_tool"], call.arguments)
                    assert found is not None and not found.is_error
                    assert json.loads(found.result) == result
    assert info["sent"] == info["calls"]  # each distinct call went to the server once
    # the replay server (serving/mcp_server/replay.py) serves this store as it is
    from serving.mcp_server.replay import load_replay

    replay = load_replay(out / info["path"])
    assert replay.digest == info["digest"] and replay.orphans == 0
    served = 0
    for raw in rows_of(out)["reward_model"]:
        for call in GroundTruth.from_json(raw["ground_truth"]).expected_calls:
            answer = replay.find(call.name, call.arguments, call.arguments)
            assert answer is not None and answer[1] is False
            served += 1
    assert served > 300
    assert info["shared_in_flight"] + info["from_store"] > 0
    # the same seed and the same store give the same rows (live results are fixed there)
    again = generate_from_sources(
        load_pack(BUILTIN / "time.yaml"),
        tmp_path / "again",
        n=400,
        seed=3,
        store_path=out / info["path"],
        progress=False,
    )
    assert again.manifest["dataset_version"] == manifest["dataset_version"]
    assert again.manifest["call_store"]["sent"] == 0


def test_a_call_the_server_refuses_makes_the_row_invalid_and_reported(tmp_path: Path) -> None:
    pack = yaml.safe_load((BUILTIN / "time.yaml").read_text())
    pack["pools"]["city"].append(
        {"name": "Olympus Mons", "name_zh": "奥林匹斯山", "tz": "Mars/Olympus"}
    )
    path = tmp_path / "mars.yaml"
    path.write_text(yaml.safe_dump(pack, allow_unicode=True))
    loaded = parse_pack_text(path.read_text(), path)
    with pytest.raises(GenerationError, match=r"rows are invalid .*tool_error"):
        generate_from_sources(
            loaded, tmp_path / "strict", n=300, progress=False, max_invalid_fraction=0.0
        )
    dataset = generate_from_sources(
        loaded, tmp_path / "lenient", n=300, progress=False, max_invalid_fraction=1.0
    )
    info = dataset.manifest["pack"]
    assert (
        info["invalid_rows"] > 0 and info["invalid_reasons"]["tool_error"] == info["invalid_rows"]
    )
    assert dataset.manifest["rows"] == 300 - info["invalid_rows"]
    assert (
        "Mars/Olympus" in info["invalid_examples"][0]
        or "Invalid timezone" in info["invalid_examples"][0]
    )
    frame = rows_of(tmp_path / "lenient")
    assert not frame.expected_calls.str.contains("Mars/").any()
    assert sorted(e["index"] for e in frame.extra_info) == list(range(len(frame)))
    with CallStore(tmp_path / "lenient" / "calls.sqlite") as store:
        assert any(call.is_error for call in store)  # the refused calls are recorded too
    assert validate_dataset(tmp_path / "lenient", FAST).success


@pytest.fixture
def memory_sources(tmp_path: Path) -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the npm MCP server cannot run")
    assert MEMORY_SERVER_BIN.exists(), "run `make mcp-servers` (installs server-memory)"
    path = tmp_path / "sources.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "servers": {
                    "memory": {
                        "command": str(MEMORY_SERVER_BIN),
                        "env": {"MEMORY_FILE_PATH": str(tmp_path / "g.jsonl")},
                    }
                }
            }
        )
    )
    return path


def test_memory_pack_dataset_validates_and_chains_use_created_entities(
    memory_sources: Path, tmp_path: Path
) -> None:
    out = tmp_path / "memory"
    dataset = generate_from_sources(
        load_pack(BUILTIN / "memory.yaml"), out, memory_sources, n=120, seed=1, progress=False
    )
    manifest = dataset.manifest
    assert manifest["pack"]["stateful"] and manifest["pack"]["invalid_rows"] == 0
    for category, counts in manifest["pack"]["templates"].items():
        assert counts["test"] / (counts["train"] + counts["test"]) >= 0.25, category
    report = validate_dataset(out, FAST)
    assert report.success, report.summary()
    frame = rows_of(out)
    opened = frame[frame.template_id.str.startswith("memory/create_then_open/")]
    searched = frame[frame.template_id.str.startswith("memory/create_then_search/")]
    assert len(opened) and len(searched)
    for raw in opened["reward_model"]:
        truth = GroundTruth.from_json(raw["ground_truth"])
        created = [e["name"] for e in truth.results[0][0]["value"]]
        assert truth.steps[1][0].arguments == {"names": created}
        assert truth.results[1][0]["entities"][0]["name"] == created[0]
    for raw in searched["reward_model"]:
        truth = GroundTruth.from_json(raw["ground_truth"])
        # each row starts from an empty graph: the search finds exactly the row's person
        assert [e["name"] for e in truth.results[1][0]["entities"]] == truth.answers
    with CallStore(out / "calls.sqlite") as store:
        assert store.digest() == manifest["call_store"]["digest"]


def test_pack_cli_init_validate_generate(memory_sources: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["tools", "pack", "validate", "time"])
    assert ok.exit_code == 0, ok.output
    assert "pack OK" in ok.output and "held out for test" in ok.output
    ok = runner.invoke(
        app,
        [
            "tools",
            "pack",
            "validate",
            str(BUILTIN / "memory.yaml"),
            "--sources",
            str(memory_sources),
        ],
    )
    assert ok.exit_code == 0, ok.output
    started = tmp_path / "memory_pack.yaml"
    made = runner.invoke(
        app,
        [
            "tools",
            "pack",
            "init",
            "--server",
            "memory",
            "--sources",
            str(memory_sources),
            "--out",
            str(started),
        ],
    )
    assert made.exit_code == 0, made.output
    text = started.read_text()
    assert "create_entities" in text and "TODO" in text and "read_graph" in text
    checked = runner.invoke(
        app, ["tools", "pack", "validate", str(started), "--sources", str(memory_sources)]
    )
    assert checked.exit_code == 0, checked.output
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace("tool: search_nodes", "tool: search_nodez"))
    refused = runner.invoke(
        app, ["tools", "pack", "validate", str(broken), "--sources", str(memory_sources)]
    )
    assert refused.exit_code == 2
    assert re.search(
        r"broken\.yaml:\d+: intent 'search_nodes': unknown tool 'search_nodez'", refused.output
    ), refused.output
    out = tmp_path / "from_cli"
    generated = runner.invoke(
        app, ["data", "generate", "--pack", "time", "--n", "80", "--out", str(out), "--quiet"]
    )
    assert generated.exit_code == 0, generated.output
    assert "from pack 'time'" in generated.output and "recorded in calls.sqlite" in generated.output
    validated = runner.invoke(app, ["data", "validate", str(out), "--skip-verl"])
    assert validated.exit_code == 0, validated.output


FAKE = Path(__file__).with_name("fake_mcp_stdio_server.py")
CRASHING_PACK = """\
pack: fake
server: fake
source: {command: %(python)s, args: [%(fake)s, ok]}
intents:
  - name: echo
    category: single
    slots:
      word: {values: [alpha, bravo, charlie, delta, echo, foxtrot, golf, hotel, india, juliett]}
    phrasings:
      en: {a: "Echo {word}.", b: "Say {word} back to me.", c: "Repeat {word}.", d: "{word}, again"}
    steps:
      - tool: echo
        arguments: {text: "{word}"}
    answers: ["{word}"]
  - name: crash
    category: single
    slots:
      n: {range: {min: 1, max: 99}}
    phrasings:
      en: {a: "Crash number {n}.", b: "Please crash ({n})."}
    steps:
      - tool: crash
"""


def test_a_server_crash_is_not_recorded_as_a_result(tmp_path: Path) -> None:
    import sys

    path = tmp_path / "fake.yaml"
    path.write_text(CRASHING_PACK % {"python": sys.executable, "fake": FAKE})
    loaded = load_pack(path)
    with pytest.raises(GenerationError, match="transport"):
        generate_from_sources(loaded, tmp_path / "strict", n=12, progress=False)
    # one call at a time: a crash then fails only its own call (concurrent calls in flight
    # die with the process, which is the same rule: invalid, not recorded)
    dataset = generate_from_sources(
        loaded,
        tmp_path / "lenient",
        n=12,
        progress=False,
        max_invalid_fraction=1.0,
        concurrency=1,
    )
    info = dataset.manifest["pack"]
    crashes = sum(1 for e in info["invalid_examples"] if e.startswith("fake/crash/"))
    assert info["invalid_reasons"] == {"transport": info["invalid_rows"]} and crashes >= 1
    assert dataset.rows and all(r["template_id"].startswith("fake/echo/") for r in dataset.rows)
    assert len(dataset.rows) + info["invalid_rows"] == 12
    with CallStore(tmp_path / "lenient" / "calls.sqlite") as store:
        recorded = list(store)
    assert recorded and all(c.tool == "echo" and not c.is_error for c in recorded)


def test_a_pack_in_another_language_validates(tmp_path: Path) -> None:
    pack = yaml.safe_load((BUILTIN / "time.yaml").read_text())
    pack["languages"] = {"en": 0.5, "fr": 0.5}
    pack["system_prompts"] = {"fr": "Tu es un assistant qui peut appeler des outils."}
    pack["decorations"] = {
        "fr": {"prefixes": ["", "Bonjour ! ", "Salut, "], "suffixes": ["", " Merci."]}
    }
    french = {
        "current_time": {
            "f1": "Quelle heure est-il à {city.name} ?",
            "f2": "Donne-moi l'heure locale de {city.name}.",
            "f3": "Il est quelle heure à {city.name} en ce moment ?",
        },
    }
    for values in pack["pools"].values():
        if isinstance(values, dict):
            values["fr"] = list(values["en"])
    for intent in pack["intents"]:
        for slot in intent.get("slots", {}).values():
            if isinstance(slot.get("values"), dict):
                slot["values"]["fr"] = list(slot["values"]["en"])
        intent["phrasings"] = {
            "en": intent["phrasings"]["en"],
            "fr": french.get(intent["name"])
            or {
                f"f{i}": f"(fr) {text}" for i, text in enumerate(intent["phrasings"]["en"].values())
            },
        }
    path = tmp_path / "fr.yaml"
    path.write_text(yaml.safe_dump(pack, allow_unicode=True))
    out = tmp_path / "fr"
    dataset = generate_from_sources(load_pack(path), out, n=150, progress=False)
    assert set(dataset.manifest["language"]) == {"en", "fr"}
    report = validate_dataset(out, FAST)
    assert report.success, report.summary()
    prompts = [r["prompt"][0]["content"] for r in dataset.rows if r["language"] == "fr"]
    assert prompts and set(prompts) == {"Tu es un assistant qui peut appeler des outils."}


def test_a_prefixed_server_gives_prefixed_rows_and_a_tampered_store_fails(tmp_path: Path) -> None:
    import sys

    sources = tmp_path / "sources.yaml"
    sources.write_text(
        yaml.safe_dump(
            {
                "servers": {
                    "time": {
                        "command": sys.executable,
                        "args": ["-m", "mcp_server_time"],
                        "prefix": "clock_",
                    }
                }
            }
        )
    )
    out = tmp_path / "prefixed"
    dataset = generate_from_sources(
        load_pack(BUILTIN / "time.yaml"), out, sources, n=80, progress=False
    )
    used = {t for r in dataset.rows for t in r["tools_used"]}
    assert used == {"clock_get_current_time", "clock_convert_time"}
    assert set(dataset.rows[0]["extra_info"]["tools_kwargs"]) == used
    with CallStore(out / "calls.sqlite") as store:
        assert {c.tool for c in store} == {"get_current_time", "convert_time"}  # own names
        store.record_one("time", "get_current_time", {"timezone": "Etc/UTC"}, "{}", False)
    report = validate_dataset(out, FAST)  # the digest no longer matches the manifest
    assert {c.name for c in report.failed} == {"pack_call_store_digest"}
    (out / "calls.sqlite").unlink()
    report = validate_dataset(out, FAST)
    assert "pack_call_store_readable" in {c.name for c in report.failed}
    assert not report.success
