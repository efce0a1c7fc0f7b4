"""The `toolrl_training_spec` Variable switches which TrainingSpec scheduled runs train.

It was declared (serving/settings.py, compose, the Helm values) but no task read it, so
setting it changed nothing. Read through Airflow's environment secrets backend, as the
compose stack and the Helm chart set it."""

from __future__ import annotations

import pytest
from toolrl_plugins.connections import training_spec_variable

from serving.settings import VARIABLES

ENV = next(v.env_var for v in VARIABLES if v.key == "toolrl_training_spec")


def test_the_variable_names_the_spec_scheduled_runs_train(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, " training/specs/cpu_tiny.yaml ")
    assert training_spec_variable() == "training/specs/cpu_tiny.yaml"


@pytest.mark.parametrize("value", [None, "", "   "])
def test_unset_or_blank_leaves_the_pipeline_configs_spec(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    assert training_spec_variable() == ""
