"""The MLflow registry with basic auth: who may move `champion`, and who may only read.

Why: serving follows `models:/NAME@champion`, so whoever can set that alias chooses what
users are served. MLflow ships a basic-auth app (`mlflow server --app-name basic-auth`)
with users and per-resource permissions. Three identities, least privilege:

- `admin`: the MLflow UI and user management only (created by the server on first start);
- `pipeline`: registers versions and moves aliases. It creates the registered model, so it
  holds MANAGE on it; the gate and rollback run as this identity and nothing else does;
- `serving`: reads (the server's default permission is READ): it resolves and downloads the
  champion, and gets 403 if it tries to move an alias.

Anonymous requests get 401. Credentials reach clients as MLflow's own
MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (from a Secret, or from the login and
password of the Airflow connection `toolrl_mlflow`), never inside a tracking URI, which
MLflow would record in run metadata.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

USERNAME_VAR, PASSWORD_VAR = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"


class RegistryAuthError(RuntimeError):
    """Setting up or using the registry's identities failed; the message says which."""


@dataclass(frozen=True)
class Identity:
    username: str
    password: str

    def client_env(self) -> dict[str, str]:
        """What an MLflow client process needs in its environment to act as this identity."""
        return {USERNAME_VAR: self.username, PASSWORD_VAR: self.password}

    @contextmanager
    def acting(self) -> Iterator[None]:
        """This process's MLflow client acts as this identity inside the block (the
        environment variables MLflow reads are set, then restored as they were)."""
        saved = {key: os.environ.get(key) for key in (USERNAME_VAR, PASSWORD_VAR)}
        os.environ.update(self.client_env())
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@dataclass(frozen=True)
class RegistryCredentials:
    admin: Identity
    pipeline: Identity
    serving: Identity

    @classmethod
    def generate(cls) -> RegistryCredentials:
        """Fresh random passwords (MLflow asks for at least 12 characters)."""

        def make(name: str) -> Identity:
            return Identity(name, secrets.token_urlsafe(24))

        return cls(make("admin"), make("toolrl-pipeline"), make("toolrl-serving"))

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(self), handle, indent=2)
        path.chmod(0o600)
        return path

    @classmethod
    def load(cls, path: Path) -> RegistryCredentials:
        try:
            raw = json.loads(path.read_text())
            return cls(**{role: Identity(**raw[role]) for role in ("admin", "pipeline", "serving")})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RegistryAuthError(
                f"cannot read the registry credentials at {path}: {exc}"
            ) from exc

    @classmethod
    def load_or_generate(cls, path: Path) -> RegistryCredentials:
        """The same identities across demo runs in one workdir (the auth DB keeps users)."""
        if path.is_file():
            return cls.load(path)
        created = cls.generate()
        created.save(path)
        return created


def server_env(credentials: RegistryCredentials, root: Path) -> dict[str, str]:
    """The environment of `mlflow server --app-name basic-auth`: its config file (user DB
    beside the tracking DB, default permission READ), the admin to create on first start,
    and the Flask secret the app requires."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "basic_auth.ini"
    config.write_text(
        "[mlflow]\n"
        "default_permission = READ\n"
        f"database_uri = sqlite:///{root / 'basic_auth.db'}\n"
        f"admin_username = {credentials.admin.username}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        "grant_default_workspace_access = false\n"
    )
    config.chmod(0o600)
    return {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_USERNAME": credentials.admin.username,
        "MLFLOW_AUTH_ADMIN_PASSWORD": credentials.admin.password,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32),
    }


def provision(tracking_uri: str, credentials: RegistryCredentials, timeout_s: float = 30) -> None:
    """Create the pipeline and serving users as the admin (idempotent)."""
    admin = (credentials.admin.username, credentials.admin.password)
    with httpx.Client(base_url=tracking_uri, auth=admin, timeout=timeout_s) as http:
        for identity in (credentials.pipeline, credentials.serving):
            response = http.post(
                "/api/2.0/mlflow/users/create",
                json={"username": identity.username, "password": identity.password},
            )
            if response.status_code == 200:
                continue
            if "RESOURCE_ALREADY_EXISTS" in response.text or "already exists" in response.text:
                continue
            raise RegistryAuthError(
                f"creating MLflow user {identity.username} failed: "
                f"{response.status_code} {response.text[:300]}"
            )
