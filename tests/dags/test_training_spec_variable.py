"""The `toolrl_training_spec` and `toolrl_gate_thresholds` Variables switch which TrainingSpec
scheduled runs train and which gate bars judge them.

The spec Variable was declared (serving/settings.py, compose, the Helm values) but no task
read it, so setting it changed nothing. The thresholds Variable came with the stack run that
trained the CPU demo spec: a run the Asset event starts has no params, so without it that spec
was judged by production's bars. Read through Airflow's environment secrets backend, as the
compose stack and the Helm chart set them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from toolrl_plugins.connections import gate_thresholds_variable, training_spec_variable

from serving.settings import VARIABLES

READERS: dict[str, Callable[[], str]] = {
    "toolrl_training_spec": training_spec_variable,
    "toolrl_gate_thresholds": gate_thresholds_variable,
}


def env_of(key: str) -> str:
    return next(v.env_var for v in VARIABLES if v.key == key)


def test_every_declared_variable_has_its_reader() -> None:
    assert {v.key for v in VARIABLES} == set(READERS)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("toolrl_training_spec", "training/specs/cpu_tiny.yaml"),
        ("toolrl_gate_thresholds", "training/specs/thresholds_demo.yaml"),
    ],
)
def test_the_variable_names_the_file_scheduled_runs_use(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    for other in READERS:
        monkeypatch.delenv(env_of(other), raising=False)
    monkeypatch.setenv(env_of(key), f" {value} ")
    assert READERS[key]() == value
    assert all(read() == "" for name, read in READERS.items() if name != key)


@pytest.mark.parametrize("key", sorted(READERS))
@pytest.mark.parametrize("value", [None, "", "   "])
def test_unset_or_blank_leaves_the_pipeline_configs_file(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(env_of(key), raising=False)
    else:
        monkeypatch.setenv(env_of(key), value)
    assert READERS[key]() == ""
