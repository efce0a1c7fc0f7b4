"""PNG screenshots of the pipeline's pages (and of web UIs) with Debian's headless Chromium.

The demo shows a person what the pipeline wrote (the validation page, the eval report) and
the UIs it ran (Airflow, MLflow), so the pictures are taken with a real browser rather than
described. Two ways in:

* no cookies: Chromium's own `--screenshot` flag, the simplest thing that works;
* cookies (Airflow 3's UI only renders for a request carrying its `_token` JWT cookie, and
  no command-line flag sets a cookie): the DevTools protocol over `--remote-debugging-pipe`,
  i.e. NUL-terminated JSON on file descriptors 3 and 4. A pipe, not a port, so no websocket
  client library is needed, nothing listens on a socket and nothing else can attach.

A screenshot is an illustration, never a step that may break what takes it: every failure
(Chromium not installed, a page that does not load, a timeout) is logged and answered with
None. The browser runs in its own process group with a throw-away profile, and the group is
killed on every way out, so no Chromium outlives the call.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import re
import select
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serving.runtime.processes import stop_process_group

logger = logging.getLogger(__name__)

#: Set to a browser binary to use that one (and nothing else); empty means "look on PATH".
CHROMIUM_ENV = "TOOLRL_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: Headless, root-safe (containers run as root: no sandbox), no GPU, no first-run noise,
#: no background traffic (the machines are offline; nothing may wait on the network).
_COMMON_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-sync",
    "--disable-component-update",
    "--mute-audio",
    "--hide-scrollbars",
)
#: Virtual time Chromium's `--screenshot` lets a page run before the picture (SPAs render).
VIRTUAL_TIME_BUDGET_MS = 5000
#: After the load event, how long to wait for the network to go quiet (an SPA fetching its
#: data), then how long to let it paint.
NETWORK_IDLE_WAIT_S = 10.0
SETTLE_S = 0.5
_KILL_GRACE_S = 3.0


class _ScreenshotError(RuntimeError):
    """Why a screenshot was not taken; caught in `screenshot` and logged."""


def find_chromium() -> str | None:
    """The browser to use: `$TOOLRL_CHROMIUM` when set (only that), else the first Chromium
    or Chrome on PATH; None when there is none."""
    override = os.environ.get(CHROMIUM_ENV)
    if override:
        found = shutil.which(override)
        return found if found else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]+:")


def page_url(url_or_path: str | Path) -> str:
    """A URL as given, or a local file as a `file://` URL (relative paths from the cwd)."""
    if isinstance(url_or_path, str) and _SCHEME.match(url_or_path):
        return url_or_path
    return Path(url_or_path).resolve().as_uri()


def screenshot(
    url_or_path: str | Path,
    out_png: str | Path,
    *,
    width: int = 1280,
    height: int = 900,
    cookies: dict[str, str] | None = None,
    timeout_s: float = 60,
) -> Path | None:
    """Save a `width` x `height` PNG of a page (a URL, or a local HTML file) to `out_png`.

    `cookies` (name -> value) are set for the page's URL before it is loaded, e.g.
    `{"_token": jwt}` for Airflow 3. Everything, browser start to file written, is bounded by
    `timeout_s`. Returns the PNG's path, or None (with the reason logged) when Chromium is
    missing or the page could not be captured; never raises for either.
    """
    if width <= 0 or height <= 0 or timeout_s <= 0:
        raise ValueError("width, height and timeout_s must be positive")
    browser = find_chromium()
    if browser is None:
        where = os.environ.get(CHROMIUM_ENV) or " or ".join(CHROMIUM_NAMES)
        logger.warning("screenshot skipped: no browser found (%s is not installed)", where)
        return None
    url = page_url(url_or_path)
    out = Path(out_png)
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="toolrl-chromium-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        try:
            if cookies:
                data = _capture_devtools(browser, url, width, height, cookies, work, deadline)
            else:
                data = _capture_cli(browser, url, width, height, work, deadline)
            if not data.startswith(PNG_MAGIC):
                raise _ScreenshotError("the browser wrote something that is not a PNG")
            out.parent.mkdir(parents=True, exist_ok=True)
            partial = out.with_name(out.name + ".tmp")
            partial.write_bytes(data)
            os.replace(partial, out)
        except (_ScreenshotError, OSError, KeyError, ValueError) as exc:
            said = _tail(work / "chromium.log")
            logger.warning("screenshot of %s failed: %s: %s%s", url, type(exc).__name__, exc, said)
            return None
    return out


# ---- the browser process ------------------------------------------------------------------
def _spawn(argv: list[str], log_path: Path, fd_map: dict[int, int]) -> int:
    """Start `argv` as the leader of a new session and process group, stdin from /dev/null,
    stdout and stderr to `log_path`, and `fd_map` (child fd -> our fd) in place. posix_spawn
    maps the descriptors between fork and exec, which subprocess can only do with a
    thread-unsafe preexec_fn."""
    opened: list[int] = []
    try:
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        opened.append(log_fd)
        null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        opened.append(null_fd)
        wanted = {0: null_fd, 1: log_fd, 2: log_fd, **fd_map}
        # each source first gets a number above every target, so no dup2 overwrites another's
        # source; dup2 onto a different number also clears close-on-exec for the child's copy
        high: dict[int, int] = {}
        for fd in set(wanted.values()):
            high[fd] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            opened.append(high[fd])
        actions = [(os.POSIX_SPAWN_DUP2, high[src], dst) for dst, src in wanted.items()]
        return os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True)
    finally:
        for fd in opened:
            os.close(fd)


def _wait(pid: int, deadline: float) -> int | None:
    """The exit status of `pid` if it exits before `deadline`, else None (still running)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _stop_group(pid: int) -> None:
    """The browser's whole process group (renderers, GPU and zygote helpers too): SIGTERM,
    SIGKILL whatever is left after a grace period, the leader reaped."""
    stop_process_group(pid, _KILL_GRACE_S, kill_wait_s=_KILL_GRACE_S)


def _tail(path: Path, chars: int = 600) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return f"; chromium said: ...{text[-chars:]}" if text else ""


def _browser_argv(browser: str, width: int, height: int, work: Path) -> list[str]:
    return [
        browser,
        *_COMMON_FLAGS,
        f"--user-data-dir={work / 'profile'}",
        f"--window-size={width},{height}",
    ]


# ---- without cookies: --screenshot ---------------------------------------------------------
def _capture_cli(
    browser: str, url: str, width: int, height: int, work: Path, deadline: float
) -> bytes:
    shot = work / "shot.png"
    argv = [
        *_browser_argv(browser, width, height, work),
        f"--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}",
        "--run-all-compositor-stages-before-draw",
        f"--screenshot={shot}",
        url,
    ]
    pid = _spawn(argv, work / "chromium.log", {})
    try:
        code = _wait(pid, deadline)
    finally:
        _stop_group(pid)
    if code is None:
        raise _ScreenshotError("timed out before the browser wrote the screenshot")
    if not shot.is_file() or shot.stat().st_size == 0:
        raise _ScreenshotError(f"the browser exited ({code}) without writing a screenshot")
    return shot.read_bytes()


# ---- with cookies: the DevTools protocol over a pipe ----------------------------------------
class _DevTools:
    """A DevTools connection over `--remote-debugging-pipe`: NUL-terminated JSON messages,
    commands on the browser's fd 3, responses and events from its fd 4."""

    def __init__(self, to_browser: int, from_browser: int) -> None:
        self._out = to_browser
        self._in = from_browser
        self._buffer = bytearray()
        self._events: deque[dict[str, Any]] = deque()
        self._next_id = 0

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        deadline: float,
    ) -> dict[str, Any]:
        """Send one command and wait (until `deadline`) for its response's result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            os.write(self._out, json.dumps(message).encode() + b"\0")
        except OSError as exc:
            raise _ScreenshotError(f"the browser closed its DevTools pipe ({exc})") from exc
        while True:
            reply = self._read(deadline)
            if reply is None:
                raise _ScreenshotError(f"timed out waiting for DevTools {method}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise _ScreenshotError(f"DevTools {method} failed: {reply['error']}")
                result: dict[str, Any] = reply.get("result") or {}
                return result
            if "method" in reply:
                self._events.append(reply)

    def wait_event(
        self, matches: Callable[[dict[str, Any]], bool], deadline: float
    ) -> dict[str, Any] | None:
        """The first event (already received or arriving before `deadline`) that matches."""
        for event in list(self._events):
            if matches(event):
                self._events.remove(event)
                return event
        while True:
            message = self._read(deadline)
            if message is None:
                return None
            if "method" in message and matches(message):
                return message
            if "method" in message:
                self._events.append(message)

    def _read(self, deadline: float) -> dict[str, Any] | None:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self._in], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise _ScreenshotError("the browser closed its DevTools pipe")
            self._buffer += chunk
        end = self._buffer.index(b"\0")
        raw = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        try:
            message: dict[str, Any] = json.loads(raw)
        except ValueError as exc:
            raise _ScreenshotError(f"unreadable DevTools message: {raw[:200]!r}") from exc
        return message


def _lifecycle(name: str, loader: str | None, session: str) -> Callable[[dict[str, Any]], bool]:
    def matches(event: dict[str, Any]) -> bool:
        params = event.get("params") or {}
        return (
            event.get("method") == "Page.lifecycleEvent"
            and event.get("sessionId") == session
            and params.get("name") == name
            and (loader is None or params.get("loaderId") == loader)
        )

    return matches


def _capture_devtools(
    browser: str,
    url: str,
    width: int,
    height: int,
    cookies: dict[str, str],
    work: Path,
    deadline: float,
) -> bytes:
    commands_r, commands_w = os.pipe()
    replies_r, replies_w = os.pipe()
    argv = [*_browser_argv(browser, width, height, work), "--remote-debugging-pipe"]
    pid: int | None = None
    try:
        try:
            pid = _spawn(argv, work / "chromium.log", {3: commands_r, 4: replies_w})
        finally:
            os.close(commands_r)  # the browser holds its ends now; ours would hide its exit
            os.close(replies_w)
        tools = _DevTools(commands_w, replies_r)
        target = tools.call("Target.createTarget", {"url": "about:blank"}, deadline=deadline)
        attached = tools.call(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            deadline=deadline,
        )
        session = str(attached["sessionId"])

        def page(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
            return tools.call(method, params, session=session, deadline=deadline)

        page("Page.enable")
        page("Page.setLifecycleEventsEnabled", {"enabled": True})
        page("Network.enable")
        page(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        for name, value in cookies.items():  # for the whole site, as a login would set it
            cookie = {"name": name, "value": value, "url": url, "path": "/"}
            result = page("Network.setCookie", cookie)
            if result.get("success") is False:
                raise _ScreenshotError(f"the browser refused cookie {name!r} for {url}")
        navigated = page("Page.navigate", {"url": url})
        if navigated.get("errorText"):
            raise _ScreenshotError(f"navigation failed: {navigated['errorText']}")
        loader = navigated.get("loaderId")
        if tools.wait_event(_lifecycle("load", loader, session), deadline) is None:
            raise _ScreenshotError("timed out waiting for the page's load event")
        idle_by = min(deadline, time.monotonic() + NETWORK_IDLE_WAIT_S)
        tools.wait_event(_lifecycle("networkIdle", loader, session), idle_by)
        time.sleep(max(0.0, min(SETTLE_S, deadline - time.monotonic())))
        shot = page("Page.captureScreenshot", {"format": "png"})
        data = base64.b64decode(shot.get("data") or "")
        with contextlib.suppress(_ScreenshotError):  # it is killed below either way
            tools.call("Browser.close", deadline=min(deadline, time.monotonic() + 2))
        return data
    finally:
        os.close(commands_w)
        os.close(replies_r)
        if pid is not None:
            _stop_group(pid)
