"""Shared integration fixtures: real servers on loopback, always stopped."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.runtime.ports import free_port
from serving.runtime.processes import start_process_group, stop_process_group


@contextlib.contextmanager
def _mlflow(root: Path, artifacts: str, env: dict[str, str]) -> Iterator[str]:
    """A real `mlflow server` on 127.0.0.1 in its own process group; yields its URI."""
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    command = [
        str(mlflow), "server", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
        "--artifacts-destination", artifacts, "--host", "127.0.0.1",
        "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    log = (root / "server.log").open("wb")
    full_env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **env}
    process = start_process_group(command, env=full_env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"mlflow server did not start; see {root / 'server.log'}")
            time.sleep(0.3)
        yield url
    finally:
        stop_process_group(process, grace_s=20)
        log.close()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `mlflow server` (SQLite backend, local artifact store) on 127.0.0.1; yields
    its tracking URI. Started in its own process group and stopped with it."""
    root = tmp_path_factory.mktemp("mlflow")
    with _mlflow(root, str(root / "artifacts"), {}) as url:
        yield url


S3_BUCKET = "toolrl-models"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
          "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


@pytest.fixture(scope="session")
def mlflow_s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """MLflow whose artifact store is S3 (moto's S3-compatible emulator server on loopback,
    through boto3); yields (tracking URI, S3 endpoint)."""
    import boto3
    from moto.server import ThreadedMotoServer

    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port())
    s3.start()
    endpoint = f"http://127.0.0.1:{s3._port}"
    boto3.client("s3", endpoint_url=endpoint, **_boto(S3_ENV)).create_bucket(Bucket=S3_BUCKET)
    root = tmp_path_factory.mktemp("mlflow-s3")
    env = {**S3_ENV, "MLFLOW_S3_ENDPOINT_URL": endpoint}
    try:
        with _mlflow(root, f"s3://{S3_BUCKET}/mlflow", env) as url:
            yield url, endpoint
    finally:
        s3.stop()


def _boto(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_DEFAULT_REGION"],
    }


@pytest.fixture
def no_tracking(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run in this process logs nowhere: an MLflow URI another test left in the environment
    would send it retrying against a server that is gone. Modules whose runs train in
    process ask for it (`pytestmark = pytest.mark.usefixtures("no_tracking")`)."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
