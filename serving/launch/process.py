"""One model-server process: start in its own process group, wait until healthy, stop.

Why a process group: vLLM and `transformers serve` spawn workers; stopping only the parent
leaves them holding the GPU (or the port). SIGTERM to the group, then SIGKILL after a grace
period. The log goes to a file so a failed start can say why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from serving.engine.signals import ALONE_SIGNAL, SHARE_SIGNAL
from serving.launch.commands import BackendConfig, build_command, health_path
from serving.runtime.processes import start_process_group, stop_process_group


class ServerStartError(RuntimeError):
    """The backend exited or did not become healthy in time; carries the log tail."""


class ModelServer:
    """A started backend. `base_url` is its OpenAI-compatible `/v1` URL."""

    def __init__(self, config: BackendConfig, log_dir: Path) -> None:
        self.config = config
        self.log_path = log_dir / f"{config.backend}-{config.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.config.port}/v1"

    def start(self, timeout_s: float = 600.0) -> ModelServer:
        """Launch and block until GET /health answers 200 (or raise ServerStartError)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = start_process_group(build_command(self.config), stdout=log, stderr=log)
        url = f"http://{self.config.host}:{self.config.port}{health_path(self.config.backend)}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(f"backend exited ({self.process.returncode}): {self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise ServerStartError(f"backend not healthy after {timeout_s:.0f} s: {self.tail()}")

    def share_cores(self, shared: bool) -> None:
        """Tell a cpu engine that another one shares its cores (or no longer does); other
        backends have cores or a GPU of their own and are left alone."""
        process = self.process
        if self.config.backend != "cpu" or process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, SHARE_SIGNAL if shared else ALONE_SIGNAL)

    def tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL after `grace_s`. Safe to call twice."""
        if self.process is not None:
            stop_process_group(self.process, grace_s)
