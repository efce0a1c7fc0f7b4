"""The CPU training job's tool server and its clients agree on the bearer token.

On a deployment's Ray node TOOLRL_MCP_TOKEN is set (a Secret): the job's embedded mock server
takes it from there, and the job's own clients sent none, so the first job on the compose
stack failed at `tools/list` with HTTP 401. `served_tools` now hands its clients the token
the server it started requires (or, for the spec's external server, the project's token)."""

from __future__ import annotations

import pytest
import yaml

from serving.mcp_client.base import TOKEN_ENV, McpClientError
from testkit.pipeline_specs import tiny_spec
from training.cpu_backend.episodes import list_tools
from training.cpu_backend.run import served_tools
from training.spec.model import TrainingSpec


def _spec() -> TrainingSpec:
    return TrainingSpec.model_validate(yaml.safe_load(yaml.safe_dump(tiny_spec("token-tiny"))))


def test_the_embedded_server_and_its_clients_share_the_nodes_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "node-secret")
    with served_tools(_spec()) as (url, token, _usage):
        assert token == "node-secret"
        assert {tool["function"]["name"] for tool in list_tools(url, token)} >= {"calculate_math"}
        with pytest.raises(McpClientError, match="401"):
            list_tools(url, None)


def test_without_a_token_in_the_environment_the_private_server_is_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with served_tools(_spec()) as (url, token, _usage):
        assert token is None
        assert list_tools(url, token)
