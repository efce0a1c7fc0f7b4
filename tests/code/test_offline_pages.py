"""Every page the pipeline writes renders with no network: the checker, and the pages.

The machines here are offline; a page that loads one script from a CDN shows up as bare
links and an empty table. The checker is tested on a crafted page first, so "zero external
references" below means something.
"""

from __future__ import annotations

import shutil
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from training.data.validation_page import page_path, render_validation_page
from training.evaluation.report import EvalReport, EvalSource, render_html, write_report
from training.ops.pages.offline import (
    css_urls,
    external_references,
    external_references_in_file,
    is_external,
    references,
)

EVIL = "<script>alert(1)</script>"

CRAFTED = """<!doctype html><html><head>
<link rel="stylesheet" href="https://cdn.example/bootstrap.css">
<link rel="icon" href="//cdn.example/favicon.ico">
<link rel="canonical" href="https://example.org/page">
<script src="HTTPS://cdn.example/jquery.js"></script>
<meta http-equiv="refresh" content="30; url=http://example.net/next">
<style>
/* url(https://commented.example/out.png) is not a reference */
@import "https://fonts.example/css";
body { background: url('https://img.example/bg.png') }
.local { background: url(static/ok.png) }
</style>
<script>fetch("https://api.example/data"); var rel = "//cdn.example/x.js"; // a comment</script>
</head><body style="background-image:url(&quot;http://img.example/inline.png&quot;)">
<p>text that mentions https://example.com is not a reference</p>
<img src="h&#116;tps://img.example/a.png" srcset="local.png 1x, https://img.example/b.png 2x">
<img src="data:image/png;base64,iVBORw0KGgo=">
<iframe src="ht\ttps://frame.example/"></iframe>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">
<image xlink:href="https://img.example/svg.png"/></svg>
<video poster="https://img.example/poster.png"></video>
<object data="ftp://files.example/x.swf"></object>
<a href="https://docs.example/help">help</a> <a href="report.json">local</a>
</body></html>"""

EXPECTED_LOADS = {
    ("link", "href", "https://cdn.example/bootstrap.css"),
    ("link", "href", "//cdn.example/favicon.ico"),
    ("script", "src", "HTTPS://cdn.example/jquery.js"),
    ("meta", "content", "http://example.net/next"),
    ("style", "@import", "https://fonts.example/css"),
    ("style", "url()", "https://img.example/bg.png"),
    ("script", "text", "https://api.example/data"),
    ("script", "text", "//cdn.example/x.js"),
    ("body", "url()", "http://img.example/inline.png"),
    ("img", "src", "https://img.example/a.png"),
    ("img", "srcset", "https://img.example/b.png"),
    ("iframe", "src", "https://frame.example/"),
    ("image", "xlink:href", "https://img.example/svg.png"),
    ("video", "poster", "https://img.example/poster.png"),
    ("object", "data", "ftp://files.example/x.swf"),
}


def test_the_checker_finds_every_kind_of_external_reference_in_a_crafted_page() -> None:
    found = {(r.tag, r.attr, r.url) for r in external_references(CRAFTED)}
    assert found == EXPECTED_LOADS
    links = {r.url for r in external_references(CRAFTED, include_links=True) if not r.loads}
    assert links == {"https://example.org/page", "https://docs.example/help"}
    local = {r.url for r in references(CRAFTED) if not r.external}
    assert {"static/ok.png", "local.png", "report.json"} <= local
    assert any(u.startswith("data:image/png") for u in local)
    # each reference says where it is: the @import is on line 9 of the page
    lines = {r.url: r.line for r in references(CRAFTED)}
    assert lines["https://fonts.example/css"] == 9
    assert lines["https://img.example/bg.png"] == 10


@pytest.mark.parametrize(
    ("url", "external"),
    [
        ("https://x.example/a.js", True),
        ("  HTTP://x.example ", True),
        ("//x.example/a.js", True),
        ("\\\\x.example\\a.js", True),
        ("wss://x.example/socket", True),
        ("static/a.css", False),
        ("/static/a.css", False),
        ("#section-1", False),
        ("data:text/css,body{}", False),
        ("file:///tmp/a.html", False),
        ("mailto:someone@example.org", False),
    ],
)
def test_what_counts_as_external(url: str, external: bool) -> None:
    assert is_external(url) is external


def test_css_urls_reads_imports_urls_and_strings_but_not_comments() -> None:
    css = (
        "/* @import 'https://no.example/x.css'; */ @import url(https://a.example/x.css);"
        " .x{background:image-set('https://b.example/y.png' 1x)} .y{src:url(\"f.woff\")}"
    )
    kinds = {(kind, url) for kind, url, _ in css_urls(css)}
    assert kinds == {
        ("@import", "https://a.example/x.css"),
        ("text", "https://b.example/y.png"),
        ("url()", "f.woff"),
    }


# ---- the validation page -------------------------------------------------------------------
class _Tags(HTMLParser):
    """The start tags and the text of a page, as a browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


def hostile_report() -> dict[str, Any]:
    """A report whose every field a dataset (or a broken manifest) could control is markup."""
    return {
        "dataset_dir": f"/data/{EVIL}",
        "success": False,
        "rows": 600,
        "dataset_version": EVIL,
        "data_docs": None,
        "page": None,
        "checks": [
            {"name": "manifest_present", "success": True, "detail": "", "examples": []},
            {
                "name": "expect_table_row_count_to_be_between(toolrl_dataset_rows)",
                "success": False,
                "detail": f"observed {EVIL}",
                "examples": [],
                "suite": "toolrl_dataset_rows",
                "expectation": "expect_table_row_count_to_be_between",
                "column": None,
                "observed": EVIL,
                "unexpected_count": None,
            },
            {
                "name": "expect_column_values_to_be_in_set(language)",
                "success": False,
                "detail": "1 unexpected value(s)",
                "examples": ["<img src=x onerror=alert(2)>", EVIL],
                "suite": "toolrl_dataset_rows",
                "expectation": "expect_column_values_to_be_in_set",
                "column": f"lang{EVIL}",
                "observed": {"values": [EVIL, "'\"&"]},
                "unexpected_count": 1,
            },
        ],
    }


def test_validation_page_escapes_hostile_values_and_loads_nothing() -> None:
    page = render_validation_page(hostile_report(), links=[("report.json", "report.json")])
    parsed = parse(page)
    tag_names = {tag for tag, _ in parsed.tags}
    assert "script" not in tag_names and "img" not in tag_names
    assert not any(name.startswith("on") for _, attrs in parsed.tags for name in attrs)
    text = "".join(parsed.text)
    assert text.count(EVIL) >= 5  # version, directory, observed, detail, column, examples
    assert "<img src=x onerror=alert(2)>" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert external_references(page, include_links=True) == []
    assert "FAILED" in text and "Failed checks (2)" in text
    # a browser may load nothing from it at all, even if escaping ever broke
    csp = [a for t, a in parsed.tags if t == "meta" and a.get("http-equiv")]
    assert csp and "default-src 'none'" in str(csp[0]["content"])


def test_validation_page_of_an_old_report_without_structured_fields_still_renders() -> None:
    report = {
        "success": True,
        "rows": 3,
        "checks": [{"name": "expect_column_values_to_be_unique(query)", "success": True}],
    }
    page = render_validation_page(report)
    assert "expect_column_values_to_be_unique" in page and "All 1 checks passed" in page
    assert external_references(page, include_links=True) == []


# ---- the pages of a real validation run ----------------------------------------------------
@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One good and one hostile dataset version, validated by the real pipeline code."""
    pytest.importorskip("great_expectations")
    from training.data.config import ValidationConfig
    from training.data.packs.generate import generate_builtin_dataset
    from training.data.validate import validate_dataset

    root = tmp_path_factory.mktemp("offline")
    good = root / "good"
    generate_builtin_dataset(good, n=600, seed=11, progress=False)
    bad = root / "bad"
    shutil.copytree(good, bad)
    train = pd.read_parquet(bad / "train.parquet")
    train.loc[0, "query"] = EVIL
    train.loc[1, "query"] = EVIL
    train.loc[2, "language"] = "<img src=x onerror=alert(2)>"
    train.to_parquet(bad / "train.parquet", index=False)
    fast = ValidationConfig(check_verl_dataset=False)
    return {"good": validate_dataset(good, fast), "bad": validate_dataset(bad, fast)}


def test_validation_writes_a_self_contained_page_and_points_to_it(
    validated: dict[str, Any],
) -> None:
    import json

    report = validated["good"]
    assert report.success
    page = Path(report.page)
    assert page == page_path(Path(report.dataset_dir)) and page.is_file()
    assert external_references_in_file(page, include_links=True) == []
    saved = json.loads((page.parent / "report.json").read_text())
    assert saved["page"] == str(page) and saved["data_docs"] == report.data_docs
    assert report.summary().index("Validation page:") < report.summary().index("Data Docs:")
    # its links are relative and each one lands on a file beside it
    local = [r.url for r in references(page.read_text()) if not r.url.startswith("data:")]
    assert "data_docs/index.html" in local and "report.json" in local
    assert any(u.startswith("data_docs/validations/toolrl_dataset_rows/") for u in local)
    assert all((page.parent / u).is_file() for u in local)


def test_hostile_dataset_rows_are_escaped_on_the_page(validated: dict[str, Any]) -> None:
    report = validated["bad"]
    assert not report.success
    text = Path(report.page).read_text()
    parsed = parse(text)
    assert "script" not in {tag for tag, _ in parsed.tags}
    assert "img" not in {tag for tag, _ in parsed.tags}
    assert EVIL in "".join(parsed.text)  # shown, as text, among the unique(query) examples
    assert "<img src=x onerror=alert(2)>" in "".join(parsed.text)
    assert external_references(text, include_links=True) == []


def test_a_dataset_that_cannot_be_read_still_gets_a_page(
    validated: dict[str, Any], tmp_path: Path
) -> None:
    from training.data.config import ValidationConfig
    from training.data.validate import validate_dataset

    broken = tmp_path / "broken"
    shutil.copytree(Path(validated["good"].dataset_dir), broken)
    shutil.rmtree(broken / "validation")
    (broken / "train.parquet").unlink()
    report = validate_dataset(broken, ValidationConfig(check_verl_dataset=False))
    assert not report.success and report.page
    text = Path(report.page).read_text()
    assert "train_file_readable" in text and "FAILED" in text
    assert external_references(text, include_links=True) == []


def test_great_expectations_data_docs_need_the_network_so_people_get_the_page(
    validated: dict[str, Any],
) -> None:
    """Documents a limitation, not a wish: great-expectations 1.x ships only CSS, fonts and
    images; jQuery, Bootstrap, bootstrap-table and Vega come from CDNs and its index's table
    is filled by bootstrap-table, so offline it is two links and an empty table. That is why
    `report.page` (checked above to load nothing) is what the summary names first. If this
    starts failing, the Data Docs became self-contained: drop the warning on the page."""
    docs = Path(validated["good"].data_docs)
    loads = external_references_in_file(docs)
    assert any(r.tag == "script" and "jquery" in r.url for r in loads)
    assert any(r.tag == "link" and "bootstrap" in r.url for r in loads)
    assert "needs the network" in validated["good"].summary()


# ---- the eval report -----------------------------------------------------------------------
def tiny_png() -> bytes:
    """A valid 2x2 PNG, built by hand so the test needs no imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def eval_report() -> EvalReport:
    return EvalReport(
        created_at="2026-01-01T00:00:00Z",
        source=EvalSource(endpoint="http://127.0.0.1:8000/v1", model="candidate", mode="chat",
                          data_path="/data/test.parquet", data_sha256="x", max_turns=4),
        cases_total=96,
        metrics={
            "overall": {"cases": 96, "pass_rate": 0.4, "tool_selection_accuracy": 0.6},
            "by_category": {"single": {"cases": 30, "pass_rate": 0.5}},
            "by_tool": {"weather": {"argument_accuracy": 0.7}},
            "pass_hat_k": {"1": 0.4, "2": 0.3},
        },
        failures=[{"answer": "see https://example.com/docs " + EVIL}],
    )  # fmt: skip


def test_eval_report_html_loads_nothing_even_with_figures_and_urls_in_answers(
    tmp_path: Path,
) -> None:
    figure = tmp_path / "reward_curve.png"
    figure.write_bytes(tiny_png())
    path = write_report(eval_report(), tmp_path / "eval" / "candidate.json", [figure])
    page = path.with_suffix(".html")
    assert page.name == "candidate.html"
    text = page.read_text()
    assert external_references_in_file(page, include_links=True) == []
    # the checker did look: the inline figure and the SVG charts are there, found as local
    assert any(r.tag == "img" and r.url.startswith("data:image/png") for r in references(text))
    assert "<svg" in text
    assert external_references(render_html(eval_report()), include_links=True) == []
