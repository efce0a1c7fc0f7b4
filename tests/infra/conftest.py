"""Fixtures over the deployment files under infra/ (loaders live in infra_files.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from infra_files import COMPOSE_FILE, HELM_VALUES, K8S_DIR, load_yaml_documents


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    """The compose file as compose sees it after YAML parsing (before ${VAR} interpolation)."""
    (doc,) = load_yaml_documents(COMPOSE_FILE)
    return doc


@pytest.fixture(scope="session")
def k8s_documents() -> list[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes object under infra/k8s, with the file it came from."""
    paths = sorted(K8S_DIR.glob("*.yaml"))
    docs = [(path, doc) for path in paths for doc in load_yaml_documents(path)]
    assert docs, "no manifests found under infra/k8s"
    return docs


@pytest.fixture(scope="session")
def helm_values() -> dict[str, Any]:
    """The values file for the official Airflow chart."""
    (doc,) = load_yaml_documents(HELM_VALUES)
    return doc
