"""Fixtures shared across test folders: real servers on loopback, started once per session,
and inputs that several modules build the same way (a dataset, a tiny model), built once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(scope="session")
def builtin_data_300(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A built-in dataset of 300 rows (seed 0), generated once for the tests that read one."""
    from training.data.packs.generate import generate_builtin_dataset

    out = tmp_path_factory.mktemp("builtin-data")
    generate_builtin_dataset(out, n=300, seed=0, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3 with the real tokenizer and template (`tiny://hermes`), built once."""
    from training.model.tiny import TinyModelConfig, build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("tiny"), TinyModelConfig(hidden_size=64, num_layers=2)
    )
