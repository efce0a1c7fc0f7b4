"""Fixtures shared across test folders: real servers on loopback, started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.ray_head import RayHead, ray_head


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """A real Ray head (ray[default], Jobs API on 127.0.0.1, token auth on) for the session."""
    with ray_head(tmp_path_factory.mktemp("ray")) as head:
        yield head


@pytest.fixture(scope="session")
def ray_address(ray_cluster: RayHead) -> str:
    return ray_cluster.address


@pytest.fixture(scope="session")
def ray_token(ray_cluster: RayHead) -> str:
    return ray_cluster.token
