"""Paths and loaders for the deployment files under infra/, shared by the offline infra tests.

No container engine or Kubernetes runs where these tests run, so they check the files
themselves: schemas, linters, and the settings they set against serving/settings.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
COMPOSE_FILE = INFRA / "compose" / "compose.yaml"
K8S_DIR = INFRA / "k8s"
HELM_VALUES = INFRA / "helm" / "airflow-values.yaml"
DOCKER_DIR = INFRA / "docker"


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """All non-empty documents of a YAML file (anchors and merge keys resolved, as compose,
    kubectl and helm resolve them)."""
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]
