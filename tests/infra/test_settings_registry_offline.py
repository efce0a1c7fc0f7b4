"""serving/settings.py: the registry is self-consistent and ServiceSettings behaves as promised.

The drift test trusts the registry, so the registry itself must not contradict the typed model
(a field without a registered key, or a key the model cannot hold, would slip past it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from serving import settings as s

ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def test_registry_names_are_unique_and_well_formed() -> None:
    names = [v.name for v in s.ENV_VARS]
    assert len(names) == len(set(names))
    assert all(ENV_NAME.match(n) for n in names)
    conn_ids = [c.conn_id for c in s.CONNECTIONS]
    assert len(conn_ids) == len(set(conn_ids))
    assert all(re.fullmatch(r"toolrl_[a-z0-9_]+", c) for c in conn_ids)
    assert all(v.doc and len(v.doc) <= 100 for v in s.ENV_VARS), "one-line docs"


def test_every_registered_env_var_is_a_service_settings_field_and_back() -> None:
    aliases = {f.alias for f in s.ServiceSettings.model_fields.values()}
    assert aliases == {v.name for v in s.ENV_VARS}


def test_secret_keys_are_secret_typed_so_they_never_print() -> None:
    fields = {f.alias: f for f in s.ServiceSettings.model_fields.values()}
    for var in s.ENV_VARS:
        is_secret_type = "SecretStr" in str(fields[var.name].annotation)
        assert is_secret_type == var.secret, var.name
    settings = s.ServiceSettings.from_env({"TOOLRL_MCP_TOKEN": "hunter2-token"})
    assert "hunter2-token" not in repr(settings)
    assert isinstance(settings.mcp_token, SecretStr)
    assert settings.mcp_token.get_secret_value() == "hunter2-token"


def test_defaults_build_the_embedded_setup() -> None:
    settings = s.ServiceSettings.from_env({})
    assert settings.mlflow_tracking_uri == "http://127.0.0.1:5000"
    assert settings.mcp_url == "http://127.0.0.1:8000/mcp"
    assert settings.champion_uri == "models:/toolrl-tool-caller@champion"
    assert settings.judge_enabled is False
    assert settings.mcp_token is None


def test_env_values_override_defaults_and_empty_means_unset() -> None:
    env = {
        "TOOLRL_MODEL_NAME": "qwen-tools",
        "TOOLRL_JUDGE_URL": "https://judge.example/v1",
        "TOOLRL_JUDGE_MODEL": "judge-1",
        "MLFLOW_S3_ENDPOINT_URL": "",
        "PATH": "/usr/bin",  # unrelated variables are ignored, not rejected
    }
    settings = s.ServiceSettings.from_env(env)
    assert settings.champion_uri == "models:/qwen-tools@champion"
    assert settings.judge_enabled is True
    assert settings.mlflow_s3_endpoint_url == "http://127.0.0.1:9000"  # empty -> default


def test_require_for_names_every_missing_required_key_of_that_component() -> None:
    with pytest.raises(ValueError) as err:
        s.ServiceSettings.from_env({"TOOLRL_S3_BUCKET": "b-1"}, require_for="ray")
    message = str(err.value)
    assert "MLFLOW_TRACKING_URI" in message
    assert "TOOLRL_MCP_URL" in message
    assert "TOOLRL_S3_BUCKET" not in message
    assert "TOOLRL_MODEL_NAME" not in message  # not read by ray
    assert "RAY_AUTH_TOKEN" in message  # a deployed Ray node runs with token auth
    assert "MLFLOW_TRACKING_PASSWORD" in message  # and logs to MLflow as a user
    complete = {
        "MLFLOW_TRACKING_URI": "http://mlflow:5000",
        "MLFLOW_TRACKING_USERNAME": "toolrl-pipeline",
        "MLFLOW_TRACKING_PASSWORD": "pipeline-password",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": "ray-token",
        "TOOLRL_MCP_URL": "http://mcp-mock:8000/mcp",
        "TOOLRL_MCP_TOKEN": "mcp-token",
        "TOOLRL_S3_BUCKET": "toolrl",
    }
    assert s.ServiceSettings.from_env(complete, require_for="ray").mcp_url.endswith("/mcp")


def test_control_plane_credentials_are_required_secrets() -> None:
    """A deployment that leaves a control plane's credential out fails the drift test (it is
    required), and the credential never rides in a Ray job's runtime_env (it is secret)."""
    expected = {
        "RAY_AUTH_TOKEN": {"ray"},
        "MLFLOW_TRACKING_PASSWORD": {"ray", "serving"},
        "TOOLRL_MCP_TOKEN": {"ray", "serving", "mcp"},
        "TOOLRL_FRONTDOOR_API_KEY": {"serving"},
    }
    for name, components in expected.items():
        var = s.env_var(name)
        assert var.required and var.secret, name
        assert components <= var.read_by, name
        assert name in s.secret_keys()
    assert s.env_var("RAY_AUTH_MODE").required
    assert s.env_var("MLFLOW_TRACKING_USERNAME").required
    assert not s.env_var("MLFLOW_TRACKING_USERNAME").secret  # a user name, set as plain value
    for component in ("ray", "serving"):
        assert "MLFLOW_TRACKING_USERNAME" in s.keys_read_by(component, required_only=True)
    assert "TOOLRL_FRONTDOOR_API_KEY" in s.keys_read_by("serving", required_only=True)


def test_invalid_values_and_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValidationError):
        s.ServiceSettings.from_env({"TOOLRL_MCP_URL": "mcp-mock:8000"})  # no scheme
    with pytest.raises(ValidationError):
        s.ServiceSettings.from_env({"TOOLRL_S3_BUCKET": "x"})  # too short for S3
    good = s.ServiceSettings.from_env({}).model_dump(by_alias=True)
    with pytest.raises(ValidationError):
        s.ServiceSettings.model_validate({**good, "TOOLRL_MCP_ULR": "http://x/mcp"})


def test_lookup_of_an_unregistered_key_fails_loudly() -> None:
    assert s.env_var("TOOLRL_MCP_URL").required is True
    with pytest.raises(KeyError, match="not a registered toolrl setting"):
        s.env_var("TOOLRL_MCP_ULR")


def test_airflow_keys_are_connection_and_variable_env_names() -> None:
    keys = s.keys_read_by("airflow")
    assert "AIRFLOW_CONN_TOOLRL_RAY" in keys
    assert "AIRFLOW_VAR_TOOLRL_TRAINING_SPEC" in keys
    required = s.keys_read_by("airflow", required_only=True)
    assert "AIRFLOW_CONN_TOOLRL_JUDGE" not in required  # the judge is optional
    assert "MLFLOW_TRACKING_URI" not in keys  # Airflow reaches MLflow through toolrl_mlflow


def test_settings_module_has_no_import_time_side_effects() -> None:
    """Importing must read nothing: no os.environ, no files, no logging set-up at module level."""
    source = Path(s.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign)):
            for sub in ast.walk(node):
                assert not (isinstance(sub, ast.Attribute) and sub.attr in {"environ", "getenv"})
                assert not (isinstance(sub, ast.Name) and sub.id in {"open", "print"})
    assert "import os" not in source
