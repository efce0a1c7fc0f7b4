"""MLflow logging of the CPU backend: fixed namespaces, nothing without a tracking URI, and
the DAG's run continued when MLFLOW_RUN_ID names one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from training.cpu_backend.tracking import LogCallback, Tracker
from training.spec.model import TrainingSpec

SPEC = TrainingSpec.model_validate(
    {
        "name": "track",
        "model": {"path": "tiny://hermes", "call_format": "hermes"},
        "data": {"train_files": ["a"], "test_files": ["b"], "train_batch_size": 4},
        "batch": {"ppo_mini_batch_size": 4},
        "tracking": {"experiment": "cpu-test"},
    }
)


def test_no_tracking_uri_logs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with Tracker(SPEC) as tracker:
        assert not tracker.enabled
        tracker.log({"train/x": 1.0}, step=1)  # a no-op, not an error


def test_metrics_land_in_fixed_namespaces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    with Tracker(SPEC) as tracker:
        callback = LogCallback(tracker, "train")
        state = SimpleNamespace(global_step=3)
        logs = {"reward": 0.5, "kl": 0.01, "format/malformed_rate": 0.25, "note": "text"}
        callback.on_log(None, state, None, logs=logs)
        tracker.log({"eval/sft/parseable_rate": 0.9, "eval/sft/bad": float("nan")}, step=3)
        run_id = mlflow.active_run().info.run_id  # type: ignore[union-attr]
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["backend"] == "cpu-trl"
    assert run.data.params["spec_hash"] == SPEC.spec_hash()
    metrics = run.data.metrics
    assert metrics["train/reward"] == 0.5
    assert metrics["train/format/malformed_rate"] == 0.25
    assert metrics["eval/sft/parseable_rate"] == 0.9
    assert "train/note" not in metrics and "eval/sft/bad" not in metrics

    # a second stage of the same DAG run continues that MLflow run
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    with Tracker(SPEC) as tracker:
        tracker.log({"eval/grpo/parseable_rate": 0.95}, step=5)
    assert client.get_run(run_id).data.metrics["eval/grpo/parseable_rate"] == 0.95


def test_the_env_uri_wins_over_one_an_earlier_caller_set_globally(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Seen in CI: a URI an earlier test set globally sent this run to a dead server."""
    import mlflow

    # recorded first, so teardown restores the real original: mlflow.set_tracking_uri also
    # writes the env var, and a later record would restore the dead URI for the next tests
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    dead = "http://127.0.0.1:9"  # nothing listens on the discard port
    mlflow.set_tracking_uri(dead)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    try:
        with Tracker(SPEC) as tracker:
            tracker.log({"train/reward": 1.0}, step=1)
            run_id = mlflow.active_run().info.run_id  # type: ignore[union-attr]
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.data.metrics["train/reward"] == 1.0
