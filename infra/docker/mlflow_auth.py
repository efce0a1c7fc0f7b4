#!/opt/venv/bin/python
"""The toolrl-mlflow image's entrypoint: MLflow's server with its basic-auth app, and the
one-shot that creates toolrl's two MLflow users.

    toolrl-mlflow serve ARGS...       write $MLFLOW_AUTH_CONFIG_PATH, then exec `mlflow server ARGS`
    toolrl-mlflow create-users URL    create toolrl-pipeline and toolrl-serving (idempotent)

Why a file is written at start: MLflow reads the auth app's settings (default permission, user
database, admin name) from an ini file only, and its `database_uri` holds a database password,
so that file can live neither in Git nor in a ConfigMap. It is written from the environment
(a Secret, or compose's .env) inside the container, readable by the server's user only.

`serve` refuses to start a server without `--app-name basic-auth` or without the admin
password and the Flask secret: MLflow without its auth app lets anyone move the `champion`
alias, which decides what users are served.

`create-users` is idempotent: a user that already exists gets the password from the
environment again (the admin's password update), so rerunning it after rotating a Secret
brings MLflow in line. Only the standard library is used (the image has no toolrl code).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

USERS = (
    ("toolrl-pipeline", "MLFLOW_PIPELINE_PASSWORD"),  # logs runs, registers, moves aliases
    ("toolrl-serving", "MLFLOW_SERVING_PASSWORD"),  # reads (the default permission)
)
SERVER_ENV = (
    "MLFLOW_AUTH_CONFIG_PATH",  # where this script writes the ini MLflow reads
    "MLFLOW_AUTH_DATABASE_URI",  # the user store (never written anywhere but that ini)
    "MLFLOW_AUTH_ADMIN_USERNAME",  # the admin MLflow creates on its first start
    "MLFLOW_AUTH_ADMIN_PASSWORD",  # read by MLflow itself, never written to the file
    "MLFLOW_FLASK_SERVER_SECRET_KEY",  # read by MLflow itself; equal on every replica
)
MIN_PASSWORD = 12  # MLflow rejects shorter passwords


class SetupError(RuntimeError):
    """Misconfiguration or a refused request; the message names what to fix."""


def _require(env: Mapping[str, str], names: Sequence[str]) -> None:
    missing = [name for name in names if not env.get(name)]
    if missing:
        raise SetupError(f"set {', '.join(missing)} (from a Secret or compose's .env)")


def _ini_value(value: str) -> str:
    """MLflow reads the file with configparser's interpolation: a literal % is written %%."""
    if "\n" in value or "\r" in value:
        raise SetupError("auth settings must be single-line values")
    return value.replace("%", "%%")


def auth_config(env: Mapping[str, str]) -> str:
    """The ini text of MLflow's basic-auth app: everyone signed in may read, nobody more,
    unless granted; users live in MLFLOW_AUTH_DATABASE_URI, a database that persists."""
    return (
        "[mlflow]\n"
        "default_permission = READ\n"
        f"database_uri = {_ini_value(env['MLFLOW_AUTH_DATABASE_URI'])}\n"
        f"admin_username = {_ini_value(env['MLFLOW_AUTH_ADMIN_USERNAME'])}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        "grant_default_workspace_access = false\n"
    )


def write_auth_config(env: Mapping[str, str]) -> Path:
    _require(env, SERVER_ENV)
    path = Path(env["MLFLOW_AUTH_CONFIG_PATH"])
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(auth_config(env))
    path.chmod(0o600)
    return path


def uses_basic_auth(args: Sequence[str]) -> bool:
    """`--app-name=basic-auth` or `--app-name basic-auth` among `mlflow server`'s arguments."""
    for i, arg in enumerate(args):
        if arg == "--app-name=basic-auth":
            return True
        if arg == "--app-name" and i + 1 < len(args) and args[i + 1] == "basic-auth":
            return True
    return False


def serve(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Check and write everything, and return the command to exec."""
    if not uses_basic_auth(args):
        raise SetupError("refusing to run MLflow without its auth app: pass --app-name=basic-auth")
    if len(env.get("MLFLOW_AUTH_ADMIN_PASSWORD", "")) < MIN_PASSWORD:
        raise SetupError(f"MLFLOW_AUTH_ADMIN_PASSWORD needs at least {MIN_PASSWORD} characters")
    write_auth_config(env)
    return ["mlflow", "server", *args]


def _request(
    url: str, method: str, body: dict[str, str] | None, admin: tuple[str, str], timeout_s: float
) -> tuple[int, str]:
    basic = base64.b64encode(f"{admin[0]}:{admin[1]}".encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - http(s) only
    request.add_header("Authorization", f"Basic {basic}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def wait_until_up(base_url: str, wait_s: float, timeout_s: float = 5.0) -> None:
    """MLflow's /health answers without credentials once the server is up."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=timeout_s):  # noqa: S310
                return
        except (urllib.error.URLError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise SetupError(
                    f"MLflow at {base_url} did not answer in {wait_s:.0f}s: {exc}"
                ) from exc
            time.sleep(2)


def create_users(
    base_url: str, env: Mapping[str, str], wait_s: float = 300, timeout_s: float = 10
) -> list[str]:
    """Create (or re-password) each toolrl user as the admin; returns what was done."""
    _require(
        env, ["MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD", *(v for _, v in USERS)]
    )
    for _, var in USERS:
        if len(env[var]) < MIN_PASSWORD:
            raise SetupError(f"{var} needs at least {MIN_PASSWORD} characters")
    if not base_url.startswith(("http://", "https://")):
        raise SetupError(f"expected the MLflow server's http(s):// URL, got {base_url!r}")
    base_url = base_url.rstrip("/")
    admin = (env["MLFLOW_AUTH_ADMIN_USERNAME"], env["MLFLOW_AUTH_ADMIN_PASSWORD"])
    wait_until_up(base_url, wait_s)
    done = []
    for username, var in USERS:
        body = {"username": username, "password": env[var]}
        status, text = _request(
            f"{base_url}/api/2.0/mlflow/users/create", "POST", body, admin, timeout_s
        )
        if status == 200:
            done.append(f"created {username}")
            continue
        if "RESOURCE_ALREADY_EXISTS" not in text and "already exists" not in text:
            raise SetupError(f"creating MLflow user {username}: HTTP {status} {text[:300]}")
        status, text = _request(
            f"{base_url}/api/2.0/mlflow/users/update-password", "PATCH", body, admin, timeout_s
        )
        if status != 200:
            raise SetupError(f"updating MLflow user {username}: HTTP {status} {text[:300]}")
        done.append(f"{username} exists; password set from {var}")
    return done


def main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    try:
        if argv[:1] == ["serve"]:
            command = serve(argv[1:], env)
            os.execvp(command[0], command)  # noqa: S606 - replaces this process
        if argv[:1] == ["create-users"] and len(argv) == 2:
            for line in create_users(argv[1], env):
                print(line, flush=True)
            return 0
    except SetupError as exc:
        print(f"toolrl-mlflow: {exc}", file=sys.stderr)
        return 2
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
