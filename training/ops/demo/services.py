"""Local services for the embedded default, each a subprocess in its own process group.

Whatever happens (success, an exception, Ctrl-C, SIGTERM), every service this stack started
is stopped: SIGTERM to its group, then SIGKILL after a grace period. A service is "up" only
when its health URL answers, so later stages never race a half-started server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Protocol

from rich.console import Console

from serving.runtime.processes import start_process_group, stop_process_group

console = Console(stderr=True)


class ServiceError(RuntimeError):
    """A service did not start or died; the message says which and where its log is."""


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """The server answers: any status below 500 counts (a 401 from a service with auth on,
    such as Ray's Jobs API with token auth, still means it is up)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - loopback
            return 200 <= int(response.status) < 500
    except urllib.error.HTTPError as exc:
        return 200 <= int(exc.code) < 500
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class ManagedService:
    name: str
    command: Sequence[str]
    health_url: str
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    start_timeout_s: float = 120.0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.process = start_process_group(
            self.command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while not http_ok(self.health_url):
            if self.process.poll() is not None:
                raise ServiceError(
                    f"{self.name} exited with {self.process.returncode}; see {self.log_path}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(
                    f"{self.name} not healthy after {self.start_timeout_s:.0f}s "
                    f"({self.health_url}); see {self.log_path}"
                )
            time.sleep(0.5)

    def stop(self, grace_s: float = 20.0) -> None:
        if self.process is not None:
            stop_process_group(self.process, grace_s)


class Stoppable(Protocol):
    name: str

    def stop(self) -> None: ...


class ServiceStack:
    """Start services in order; stop them in reverse, on every exit path."""

    def __init__(self) -> None:
        self.services: list[Stoppable] = []

    def adopt(self, service: Stoppable) -> None:
        """Something started elsewhere (Airflow's services) that stops with this stack."""
        self.services.append(service)

    def detach(self) -> list[Stoppable]:
        """Leave everything running (`--keep-running`); the caller records how to stop it."""
        detached, self.services = self.services, []
        return detached

    def start(self, service: ManagedService) -> ManagedService:
        started = time.monotonic()
        with console.status(f"starting {service.name} ..."):
            service.start()
        self.services.append(service)
        console.print(
            f"[green]up[/green] {service.name} at {service.health_url} "
            f"({time.monotonic() - started:.0f}s)"
        )
        return service

    def stop_all(self) -> None:
        while self.services:
            service = self.services.pop()
            service.stop()
            console.print(f"stopped {service.name}")


@contextlib.contextmanager
def service_stack() -> Iterator[ServiceStack]:
    """A stack that also turns SIGTERM into a clean shutdown (Ctrl-C is KeyboardInterrupt)."""
    stack = ServiceStack()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield stack
    finally:
        stack.stop_all()
        signal.signal(signal.SIGTERM, previous)
