"""The champion's side of the MLflow model registry: which version a `models:/` URI names
now, and its weights on local disk.

Serving needs only this read side (`toolrl serve` resolves `models:/NAME@champion`, downloads
the weights, and re-resolves to pick up a promotion); registering versions and moving aliases
is training's (`training.registry.registry`, which builds on these names). mlflow is imported
per call, so importing this module costs nothing.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

SAFE_NAME = re.compile(r"^[A-Za-z0-9_.:+\-@/ ]{1,250}$")
"""Model names and run keys the registry's filter strings may carry."""


class RegistryError(RuntimeError):
    """A registry operation that cannot proceed (missing model, alias, bad input)."""


class VersionInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    run_id: str | None
    source: str
    aliases: list[str]
    tags: dict[str, str]
    created: bool = False
    """False when an earlier registration with the same run key was returned."""


def mlflow_client(tracking_uri: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def version_info(version: Any, created: bool = False) -> VersionInfo:
    return VersionInfo(
        name=version.name,
        version=str(version.version),
        run_id=version.run_id,
        source=version.source,
        aliases=list(version.aliases or []),
        tags=dict(version.tags or {}),
        created=created,
    )


def check_name(name: str) -> str:
    if not SAFE_NAME.match(name) or "'" in name:
        raise RegistryError(f"unsupported model name {name[:60]!r}")
    return name


def resolve(tracking_uri: str, model_uri: str) -> VersionInfo:
    """`models:/NAME@alias` or `models:/NAME/VERSION` -> the version it names now."""
    match = re.fullmatch(r"models:/([^/@]+)(?:@([\w\-]+)|/(\d+))", model_uri)
    if match is None:
        raise RegistryError(
            f"expected models:/NAME@ALIAS or models:/NAME/VERSION, got {model_uri!r}"
        )
    name, alias, number = match.groups()
    client = mlflow_client(tracking_uri)
    from mlflow.exceptions import MlflowException

    try:
        if alias:
            return version_info(client.get_model_version_by_alias(check_name(name), alias))
        return version_info(client.get_model_version(check_name(name), number))
    except MlflowException as exc:
        hint = (
            f" No version of {name} carries @{alias} yet (the gate moves it on a promotion): "
            f"serve a registered version with --model-uri models:/{name}/N, or wait for one."
            if alias and exc.error_code in ("INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST")
            else ""
        )
        raise RegistryError(f"{model_uri}: {exc.message}{hint}") from exc


def download(tracking_uri: str, info: VersionInfo, dst: Path) -> Path:
    """Download a version's weights to `dst/NAME/VERSION` (reused if already complete)."""
    import mlflow

    target = dst / info.name / info.version
    if (target / ".complete").exists():
        return target
    staging = dst / info.name / f".{info.version}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    # the server is named per call: a process-wide set_tracking_uri would outlive this call
    # and send a later run's logging (the CPU backend's tracker reads the env) to this server
    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    source = client.get_model_version_download_uri(info.name, info.version)
    fetched = Path(
        mlflow.artifacts.download_artifacts(
            artifact_uri=source, dst_path=str(staging), tracking_uri=tracking_uri
        )
    )
    shutil.rmtree(target, ignore_errors=True)  # an earlier, interrupted download
    fetched.rename(target)
    shutil.rmtree(staging, ignore_errors=True)
    (target / ".complete").write_text(info.source)
    return target
