"""Screenshots with the real headless Chromium: the pipeline's pages from file paths, and a
page on a loopback server that only renders its content for a request carrying a cookie
(what Airflow 3's UI does with its `_token` JWT)."""

from __future__ import annotations

import http.server
import logging
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from training.data.validation_page import write_validation_page
from training.evaluation.report import EvalReport, EvalSource, write_report
from training.ops.demo.screenshots import CHROMIUM_ENV, find_chromium, screenshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
needs_chromium = pytest.mark.skipif(
    find_chromium() is None, reason="no headless chromium on this machine (apt install chromium)"
)
try:  # pillow decodes the pictures when installed; else the PNG header and size must do
    from PIL import Image
except ImportError:  # pragma: no cover - pillow comes with matplotlib here
    Image = None  # type: ignore[assignment]

GREEN = (0, 160, 0)
RED = (200, 0, 0)
TOKEN = "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl"


def chromium_processes() -> list[str]:
    """Command lines of browsers started by `screenshot` (their profile dir names it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "toolrl-chromium-" in text:
            found.append(text)
    return found


def assert_real_picture(path: Path | None, size: tuple[int, int]) -> None:
    """A PNG of the asked size that is not one flat colour (a blank or failed render)."""
    assert path is not None and path.is_file()
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == size
    if Image is None:
        assert len(data) > 4_000, f"{path} is suspiciously small for a rendered page"
        return
    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 20, f"{path} is (nearly) a single colour"


def dominant(path: Path) -> tuple[int, int, int] | None:
    """The most common colour, or None without pillow."""
    if Image is None:
        return None
    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours
    _, colour = max(colours)
    assert isinstance(colour, tuple)
    return (int(colour[0]), int(colour[1]), int(colour[2]))


@pytest.fixture
def pages(tmp_path: Path) -> dict[str, Path]:
    validation = tmp_path / "ds" / "validation"
    report = {
        "dataset_dir": str(tmp_path / "ds"),
        "success": False,
        "rows": 600,
        "dataset_version": "a169afce8fd3c7cf",
        "checks": [
            {"name": "manifest_present", "success": True},
            {
                "name": "expect_column_values_to_be_unique(query)",
                "success": False,
                "detail": "2 unexpected value(s)",
                "examples": ["<script>alert(1)</script>"] * 2,
                "suite": "toolrl_dataset_rows",
                "expectation": "expect_column_values_to_be_unique",
                "column": "query",
                "unexpected_count": 2,
            },
            *[
                {
                    "name": f"expect_column_values_to_not_be_null({c})",
                    "success": True,
                    "suite": "toolrl_dataset_rows",
                    "expectation": "expect_column_values_to_not_be_null",
                    "column": c,
                    "unexpected_count": 0,
                }
                for c in ("query", "category", "difficulty", "language")
            ],
        ],
    }
    eval_json = write_report(
        EvalReport(
            created_at="2026-01-01T00:00:00Z",
            source=EvalSource(endpoint="http://127.0.0.1:8000/v1", model="candidate",
                              mode="chat", data_path="test.parquet", data_sha256="x",
                              max_turns=4),
            cases_total=96,
            metrics={
                "overall": {"cases": 96, "pass_rate": 0.4, "tool_selection_accuracy": 0.62,
                            "argument_accuracy": 0.55},
                "by_category": {"single": {"cases": 30, "pass_rate": 0.5},
                                "parallel": {"cases": 16, "pass_rate": 0.25}},
                "by_tool": {"weather": {"argument_accuracy": 0.7}},
            },
        ),
        tmp_path / "eval" / "candidate.json",
    )  # fmt: skip
    return {
        "validation": write_validation_page(report, validation),
        "eval": eval_json.with_suffix(".html"),
    }


@needs_chromium
@pytest.mark.parametrize("which", ["validation", "eval"])
def test_screenshot_of_a_page_from_a_file_path(
    pages: dict[str, Path], tmp_path: Path, which: str
) -> None:
    out = screenshot(pages[which], tmp_path / "shots" / f"{which}.png", width=1024, height=768)
    assert_real_picture(out, (1024, 768))
    assert not chromium_processes()


class _CookiePage(http.server.BaseHTTPRequestHandler):
    """Green with the token in large letters when the request carries `_token`, red with
    "NO COOKIE" otherwise; `/slow` never answers in time. Records each Cookie header."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(30)
            return
        cookie = self.headers.get("Cookie") or ""
        type(self).seen.append(cookie)
        if f"_token={TOKEN}" in cookie:
            colour, text = "rgb(0,160,0)", f"TOKEN {TOKEN[:12]}"
        else:
            colour, text = "rgb(200,0,0)", "NO COOKIE"
        body = (
            f"<!doctype html><html><body style='margin:0;background:{colour};color:#fff;"
            f"font:bold 72px sans-serif'><p style='margin:40px'>{text}</p></body></html>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep pytest's output clean


@pytest.fixture
def cookie_server() -> Iterator[str]:
    _CookiePage.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CookiePage)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@needs_chromium
def test_a_cookie_reaches_the_server_and_changes_the_picture(
    cookie_server: str, tmp_path: Path
) -> None:
    plain = screenshot(f"{cookie_server}/ui/dags", tmp_path / "plain.png", width=800, height=600)
    with_cookie = screenshot(  # a deep URL, as the Airflow UI's are
        f"{cookie_server}/ui/dags", tmp_path / "cookie.png", width=800, height=600,
        cookies={"_token": TOKEN},
    )  # fmt: skip
    assert_real_picture(plain, (800, 600))
    assert_real_picture(with_cookie, (800, 600))
    assert plain is not None and with_cookie is not None
    assert plain.read_bytes() != with_cookie.read_bytes()
    if Image is not None:
        assert dominant(plain) == RED
        assert dominant(with_cookie) == GREEN
    assert any(f"_token={TOKEN}" in c for c in _CookiePage.seen)
    assert not chromium_processes()


@needs_chromium
@pytest.mark.parametrize("cookies", [None, {"_token": TOKEN}], ids=["flags", "devtools"])
def test_a_page_that_never_loads_times_out_and_leaves_no_browser(
    cookie_server: str, tmp_path: Path, cookies: dict[str, str] | None
) -> None:
    started = time.monotonic()
    out = screenshot(f"{cookie_server}/slow", tmp_path / "slow.png", cookies=cookies, timeout_s=4)
    assert out is None and not (tmp_path / "slow.png").exists()
    assert time.monotonic() - started < 4 + 10  # the timeout, plus the kill grace period
    assert not chromium_processes()


def test_no_browser_means_none_and_a_reason_never_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(CHROMIUM_ENV, str(tmp_path / "no-such-chromium"))
    with caplog.at_level(logging.WARNING, logger="training.ops.demo.screenshots"):
        assert screenshot(tmp_path / "page.html", tmp_path / "x.png") is None
    assert "not installed" in caplog.text
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("cookies", [None, {"_token": TOKEN}], ids=["flags", "devtools"])
def test_a_browser_that_dies_at_once_gives_none_quickly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cookies: dict[str, str] | None
) -> None:
    monkeypatch.setenv(CHROMIUM_ENV, "false")  # exits 1 at once, closes the DevTools pipe
    started = time.monotonic()
    assert screenshot("about:blank", tmp_path / "x.png", cookies=cookies, timeout_s=30) is None
    assert time.monotonic() - started < 10
