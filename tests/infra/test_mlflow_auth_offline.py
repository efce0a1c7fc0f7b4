"""infra/docker/mlflow_auth.py, the toolrl-mlflow image's entrypoint, run here without a
container: the auth config it writes is read back with MLflow's own reader (the mlflow
package the project pins), `serve` refuses to start MLflow with auth off, and `create-users`
is checked against a stand-in MLflow REST API on loopback (create, then set the password of
a user that exists, and fail loudly on anything else)."""

from __future__ import annotations

import base64
import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from infra_files import DOCKER_DIR

SCRIPT = DOCKER_DIR / "mlflow_auth.py"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


entrypoint = _load("toolrl_mlflow_entrypoint", SCRIPT)


def _mlflow_auth_config_reader() -> Any:
    """MLflow's own `read_auth_config`, loaded from its file: importing the package
    mlflow.server.auth would start building the whole server app (seconds)."""
    spec = importlib.util.find_spec("mlflow")
    assert spec and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "server" / "auth" / "config.py"
    return _load("mlflow_auth_config", path).read_auth_config


def _server_env(tmp_path: Path) -> dict[str, str]:
    return {
        "MLFLOW_AUTH_CONFIG_PATH": str(tmp_path / "auth" / "basic_auth.ini"),
        # a URL-encoded password: configparser would read a bare % as interpolation
        "MLFLOW_AUTH_DATABASE_URI": "postgresql+psycopg2://mlflow:p%40ss%25w0rd@pg:5432/mlflow_auth",
        "MLFLOW_AUTH_ADMIN_USERNAME": "admin",
        "MLFLOW_AUTH_ADMIN_PASSWORD": "admin-password-123",
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "f" * 64,
    }


def test_written_config_is_what_mlflows_own_reader_expects_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_auth_config = _mlflow_auth_config_reader()
    env = _server_env(tmp_path)
    path = entrypoint.write_auth_config(env)
    assert path.stat().st_mode & 0o777 == 0o600, "the file holds a database password"
    assert env["MLFLOW_AUTH_ADMIN_PASSWORD"] not in path.read_text(encoding="utf-8")
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(path))
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_PASSWORD", raising=False)
    config = read_auth_config()
    assert config.default_permission == "READ"
    assert config.database_uri == env["MLFLOW_AUTH_DATABASE_URI"]
    assert config.admin_username == "admin"
    assert config.authorization_function == ("mlflow.server.auth:authenticate_request_basic_auth")


def test_serve_refuses_to_run_mlflow_with_auth_off_offline(tmp_path: Path) -> None:
    env = _server_env(tmp_path)
    args = ["--backend-store-uri=sqlite:///x.db", "--port=5000"]
    with pytest.raises(entrypoint.SetupError, match="--app-name=basic-auth"):
        entrypoint.serve(args, env)
    with pytest.raises(entrypoint.SetupError, match="--app-name=basic-auth"):
        entrypoint.serve(["--app-name", "basic-auth-typo", *args], env)
    short = {**env, "MLFLOW_AUTH_ADMIN_PASSWORD": "short"}
    with pytest.raises(entrypoint.SetupError, match="at least 12"):
        entrypoint.serve(["--app-name=basic-auth", *args], short)
    for missing in ("MLFLOW_FLASK_SERVER_SECRET_KEY", "MLFLOW_AUTH_DATABASE_URI"):
        partial = {k: v for k, v in env.items() if k != missing}
        with pytest.raises(entrypoint.SetupError, match=missing):
            entrypoint.serve(["--app-name=basic-auth", *args], partial)
    assert not Path(env["MLFLOW_AUTH_CONFIG_PATH"]).exists(), "nothing written on refusal"
    command = entrypoint.serve(["--app-name", "basic-auth", *args], env)
    assert command == ["mlflow", "server", "--app-name", "basic-auth", *args]
    assert Path(env["MLFLOW_AUTH_CONFIG_PATH"]).is_file()


def test_main_execs_mlflow_server_or_exits_nonzero_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, list[str]]] = []

    def fake_exec(file: str, argv: list[str]) -> None:
        calls.append((file, argv))

    monkeypatch.setattr(entrypoint.os, "execvp", fake_exec)
    env = _server_env(tmp_path)
    entrypoint.main(["serve", "--app-name=basic-auth", "--port=5000"], env)
    assert calls == [("mlflow", ["mlflow", "server", "--app-name=basic-auth", "--port=5000"])]
    assert entrypoint.main(["serve", "--port=5000"], env) == 2
    assert entrypoint.main(["frobnicate"], env) == 64
    assert SCRIPT.read_text(encoding="utf-8").startswith("#!/opt/venv/bin/python\n")


class _FakeMlflow(BaseHTTPRequestHandler):
    """The slice of MLflow's auth REST API the script uses."""

    users: dict[str, str]
    admin = ("admin", "admin-password-123")

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self) -> bool:
        expected = base64.b64encode(":".join(self.admin).encode()).decode()
        return self.headers.get("Authorization") == f"Basic {expected}"

    def do_GET(self) -> None:
        self._reply(200 if self.path == "/health" else 404, {})

    def _body(self) -> dict[str, str]:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_POST(self) -> None:
        if not self._authorised():
            return self._reply(401, {"error": "unauthorized"})
        body = self._body()
        if self.path != "/api/2.0/mlflow/users/create":
            return self._reply(404, {})
        if body["username"] in self.users:
            return self._reply(400, {"error_code": "RESOURCE_ALREADY_EXISTS"})
        self.users[body["username"]] = body["password"]
        return self._reply(200, {"user": {"username": body["username"]}})

    def do_PATCH(self) -> None:
        if not self._authorised():
            return self._reply(401, {"error": "unauthorized"})
        body = self._body()
        if self.path != "/api/2.0/mlflow/users/update-password":
            return self._reply(404, {})
        self.users[body["username"]] = body["password"]
        return self._reply(200, {})


@pytest.fixture
def fake_mlflow() -> Iterator[tuple[str, dict[str, str]]]:
    users: dict[str, str] = {}
    handler = type("Handler", (_FakeMlflow,), {"users": users})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", users
    finally:
        server.shutdown()
        server.server_close()


CLIENT_ENV = {
    "MLFLOW_AUTH_ADMIN_USERNAME": "admin",
    "MLFLOW_AUTH_ADMIN_PASSWORD": "admin-password-123",
    "MLFLOW_PIPELINE_PASSWORD": "pipeline-password-1",
    "MLFLOW_SERVING_PASSWORD": "serving-password-1",
}


def test_create_users_is_idempotent_and_applies_a_rotated_password_offline(
    fake_mlflow: tuple[str, dict[str, str]],
) -> None:
    url, users = fake_mlflow
    done = entrypoint.create_users(url, CLIENT_ENV, wait_s=5)
    assert done == ["created toolrl-pipeline", "created toolrl-serving"]
    assert users == {
        "toolrl-pipeline": "pipeline-password-1",
        "toolrl-serving": "serving-password-1",
    }
    rotated = {**CLIENT_ENV, "MLFLOW_SERVING_PASSWORD": "serving-password-2"}
    done = entrypoint.create_users(url + "/", rotated, wait_s=5)
    assert all("exists; password set" in line for line in done)
    assert users["toolrl-serving"] == "serving-password-2"


def test_create_users_fails_loudly_offline(fake_mlflow: tuple[str, dict[str, str]]) -> None:
    url, _ = fake_mlflow
    wrong_admin = {**CLIENT_ENV, "MLFLOW_AUTH_ADMIN_PASSWORD": "not-the-admin-password"}
    with pytest.raises(entrypoint.SetupError, match="HTTP 401"):
        entrypoint.create_users(url, wrong_admin, wait_s=5)
    with pytest.raises(entrypoint.SetupError, match="MLFLOW_PIPELINE_PASSWORD needs at least"):
        entrypoint.create_users(url, {**CLIENT_ENV, "MLFLOW_PIPELINE_PASSWORD": "short"})
    with pytest.raises(entrypoint.SetupError, match="MLFLOW_SERVING_PASSWORD"):
        entrypoint.create_users(
            url, {k: v for k, v in CLIENT_ENV.items() if k != "MLFLOW_SERVING_PASSWORD"}
        )
    with pytest.raises(entrypoint.SetupError, match="http"):
        entrypoint.create_users("mlflow:5000", CLIENT_ENV)
    with pytest.raises(entrypoint.SetupError, match="did not answer"):
        entrypoint.create_users("http://127.0.0.1:9", CLIENT_ENV, wait_s=0)
