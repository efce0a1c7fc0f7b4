"""The `mcp` command group: `serve` as a real process (SIGTERM -> clean exit) and
`tool-config` (added by training's verl bridge) against it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import typer
import yaml
from typer.testing import CliRunner

from serving.mcp_server.cli import register_cli
from serving.runtime.ports import free_port
from training.verl_bridge.cli import register_cli as register_tool_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]
LAUNCH = (
    "import sys, typer; from serving.mcp_server.cli import register_cli\n"
    "app = typer.Typer()\n"
    "@app.callback()\n"
    "def main() -> None: pass\n"
    "register_cli(app); app(sys.argv[1:])\n"
)


def cli_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """test root"""

    register_tool_config(register_cli(app))
    return app


def test_serve_then_tool_config_then_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "TOOLRL_MCP_TOKEN": "tok"}
    args = ["mcp", "serve", "--port", str(port), "--workers", "2", "--log-level", "warning"]
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, *args], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            assert proc.poll() is None, "server exited"
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        out = tmp_path / "tool_config.yaml"
        runner = CliRunner()
        denied = runner.invoke(
            cli_app(),
            ["mcp", "tool-config", "--url", url, "--out", str(out)],
            env={"TOOLRL_MCP_TOKEN": ""},
        )
        assert denied.exit_code == 2 and "401" in denied.output
        result = runner.invoke(
            cli_app(), ["mcp", "tool-config", "--url", url, "--out", str(out), "--token", "tok"]
        )
        assert result.exit_code == 0, result.output
        assert "flattened for verl" in result.output
        document = yaml.safe_load(out.read_text())
        assert len(document["tools"]) == 11
        assert document["tools"][0]["config"]["url"] == url
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0


def test_serve_rejects_bad_options() -> None:
    result = CliRunner().invoke(cli_app(), ["mcp", "serve", "--mode", "fake", "--port", "0"])
    assert result.exit_code != 0
    assert "Input should be 'real', 'mock'" in result.output and "'replay'" in result.output
