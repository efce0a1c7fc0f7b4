"""The registry with MLflow's basic-auth app on loopback, as the demo and deployments run it:
anonymous requests get 401, the serving identity may read but gets 403 when it tries to move
an alias, the pipeline identity registers, promotes and rolls back, and a wrong password is
refused without changing anything."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from serving.runtime.ports import free_port
from testkit.pipeline_specs import model_dir
from training.ops.demo.run import mlflow_service
from training.registry.auth import Identity, RegistryCredentials, provision
from training.registry.registry import Lineage, promote, register_candidate, resolve, rollback

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
NAME = "toolrl-auth-test"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, RegistryCredentials]]:
    root = tmp_path_factory.mktemp("mlflow-auth")
    credentials = RegistryCredentials.generate()
    port = free_port()
    server = mlflow_service(root, port, root / "mlflow.log", {}, credentials)
    server.start()
    try:
        url = f"http://127.0.0.1:{port}"
        provision(url, credentials)
        provision(url, credentials)  # idempotent: a second demo run in the same workdir
        yield url, credentials
    finally:
        server.stop()


@pytest.fixture
def as_identity(monkeypatch: pytest.MonkeyPatch) -> Callable[[Identity], None]:
    def use(identity: Identity) -> None:
        for key, value in identity.client_env().items():
            monkeypatch.setenv(key, value)

    return use


def _lineage(key: str) -> Lineage:
    return Lineage(run_key=key, dataset_version="d41d8cd9", dataset_validation="passed")


def test_anonymous_requests_get_401(registry: tuple[str, RegistryCredentials]) -> None:
    url, _ = registry
    response = httpx.get(f"{url}/api/2.0/mlflow/registered-models/search", timeout=30)
    assert response.status_code == 401
    wrong = httpx.get(
        f"{url}/api/2.0/mlflow/registered-models/search",
        auth=("toolrl-serving", "not-the-password"),
        timeout=30,
    )
    assert wrong.status_code == 401


def test_pipeline_registers_and_promotes_serving_reads_but_cannot_move_champion(
    registry: tuple[str, RegistryCredentials],
    as_identity: Callable[[Identity], None],
    tmp_path: Path,
) -> None:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    url, creds = registry
    use = as_identity
    use(creds.pipeline)
    first = register_candidate(url, NAME, model_dir(tmp_path, "one"), _lineage("run-1"))
    promote(url, NAME, first.version)
    second = register_candidate(url, NAME, model_dir(tmp_path, "two"), _lineage("run-2"))
    promote(url, NAME, second.version)
    assert resolve(url, f"models:/{NAME}@champion").version == second.version

    use(creds.serving)
    assert resolve(url, f"models:/{NAME}@champion").version == second.version  # reads
    client = MlflowClient(url)
    with pytest.raises(MlflowException) as refused:
        client.set_registered_model_alias(NAME, "champion", first.version)
    assert refused.value.get_http_status_code() == 403
    with pytest.raises(MlflowException) as refused_register:
        register_candidate(url, NAME, model_dir(tmp_path, "three"), _lineage("run-3"))
    assert refused_register.value.get_http_status_code() == 403
    assert resolve(url, f"models:/{NAME}@champion").version == second.version  # untouched

    use(creds.pipeline)  # rollback goes through the gate's identity, as promotion does
    assert rollback(url, NAME).version == first.version


def test_credentials_file_is_private_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    made = RegistryCredentials.load_or_generate(path)
    assert os.stat(path).st_mode & 0o077 == 0
    assert RegistryCredentials.load_or_generate(path) == made
    assert len(made.pipeline.password) >= 12
