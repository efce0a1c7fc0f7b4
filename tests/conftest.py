"""Fixtures shared across test folders: real servers on loopback, started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.ray_head import ray_head


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Ray head (ray[default], Jobs API on 127.0.0.1) for the whole session."""
    with ray_head(tmp_path_factory.mktemp("ray")) as address:
        yield address
