"""The dataset validation result as one self-contained HTML page, `DIR/validation/index.html`.

great-expectations' Data Docs load Bootstrap, jQuery, bootstrap-table and Vega from seven
CDNs, and its index fills its table with bootstrap-table; opened where there is no network
(every machine here) it shows two links and an empty table. This page is rendered from the
same results (`report.json`): every check with its suite, column, observed value, unexpected
count and examples, failures first. It has inline CSS only, no scripts and no URL outside its
own folder, and a Content-Security-Policy that forbids loading anything, so it reads the same
offline, from an artifact store or as a screenshot. Every value is HTML-escaped: the examples
are dataset rows, and a dataset is exactly the input that must not be trusted.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PAGE_NAME = "index.html"
"""The page's file name inside `DIR/validation/` (beside `report.json` and `data_docs/`)."""

MAX_VALUE_CHARS = 400
MAX_EXAMPLES = 5

#: Suites in the order they are shown; checks without a suite are made in Python.
SUITE_TITLES = {
    "toolrl_dataset_rows": "Rows (schema, values, ground truth, overlap)",
    "toolrl_dataset_coverage": "Coverage (category shares, rows per tool)",
}
NO_SUITE_TITLE = "Files, manifest and verl"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;
 max-width:1240px;padding:0 16px;color:#1f2328;background:#fff}
h1{font-size:24px;margin:0 0 12px}h2{font-size:18px;margin:28px 0 8px}
.badge{display:inline-block;padding:2px 12px;border-radius:4px;color:#fff;font-weight:600;
 vertical-align:middle;font-size:16px}
.pass{background:#1a7f37}.fail{background:#cf222e}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
table.facts{width:auto}table.facts th{background:none;padding-right:24px}
tr.failed td{background:#ffebe9}
td.status{font-weight:600;white-space:nowrap}tr.failed td.status{color:#cf222e}
tr.passed td.status{color:#1a7f37}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;
 white-space:pre-wrap;word-break:break-word}
ul.examples{margin:0;padding-left:18px}
p.note{color:#57606a}
"""
#: Nothing may be fetched or run: if escaping ever failed, a row's markup still could not
#: load a script, an image or a font from anywhere.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def page_path(dataset_dir: Path) -> Path:
    """Where the page of a dataset version lies."""
    return Path(dataset_dir) / "validation" / PAGE_NAME


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _value(value: Any) -> str:
    """A result value (a number, a list, a dict from great-expectations) as short text."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > MAX_VALUE_CHARS:
        text = text[:MAX_VALUE_CHARS] + " ..."
    return text


def _check_row(check: Mapping[str, Any]) -> str:
    success = bool(check.get("success"))
    name = str(check.get("name", ""))
    expectation = check.get("expectation") or name.split("(", 1)[0]
    column = check.get("column") or ""
    examples = check.get("examples") or []
    if not isinstance(examples, list):
        examples = [examples]
    items = "".join(f"<li><code>{_e(_value(x))}</code></li>" for x in examples[:MAX_EXAMPLES])
    more = len(examples) - MAX_EXAMPLES
    if more > 0:
        items += f"<li>{more} more</li>"
    unexpected = check.get("unexpected_count")
    return (
        f"<tr class='{'passed' if success else 'failed'}'>"
        f"<td class='status'>{'pass' if success else 'FAIL'}</td>"
        f"<td><code>{_e(expectation)}</code></td><td><code>{_e(column)}</code></td>"
        f"<td><code>{_e(_value(check.get('observed')))}</code></td>"
        f"<td class='num'>{_e('' if unexpected is None else unexpected)}</td>"
        f"<td>{_e(check.get('detail') or '')}</td>"
        f"<td>{f'<ul class=examples>{items}</ul>' if items else ''}</td></tr>"
    )


def _checks_table(checks: Sequence[Mapping[str, Any]]) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("Status", "Check", "Column", "Observed", "Unexpected", "Detail", "Examples")
    )
    return f"<table><tr>{head}</tr>{''.join(_check_row(c) for c in checks)}</table>"


def _links_html(links: Sequence[tuple[str, str]]) -> str:
    if not links:
        return ""
    items = "".join(f"<li><a href='{_e(href)}'>{_e(label)}</a></li>" for label, href in links)
    return (
        "<h2>Other files</h2><ul>" + items + "</ul><p class='note'>great-expectations' own "
        "Data Docs load their styles and scripts from CDNs: with no network their index shows "
        "an empty table, and the validation result pages read as unstyled text.</p>"
    )


def render_validation_page(
    report: Mapping[str, Any],
    *,
    links: Sequence[tuple[str, str]] = (),
    created_at: str | None = None,
) -> str:
    """The page for a validation report in `ValidationReport.to_dict()` form (what
    `report.json` holds, so an old report can be re-rendered). `links` are `(label, href)`
    pairs to files beside the page; hrefs must be relative, the page links nowhere else."""
    raw_checks = report.get("checks") or []
    checks = [c for c in raw_checks if isinstance(c, Mapping)]
    failed = [c for c in checks if not c.get("success")]
    success = bool(report.get("success"))
    created = created_at or datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    status = "PASSED" if success else "FAILED"
    facts = (
        ("Dataset version", report.get("dataset_version") or "unknown"),
        ("Directory", report.get("dataset_dir") or ""),
        ("Rows", report.get("rows")),
        ("Checks passed", f"{len(checks) - len(failed)} of {len(checks)}"),
        ("Page written", created),
    )
    facts_html = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    if failed:
        failed_html = f"<h2>Failed checks ({len(failed)})</h2>" + _checks_table(failed)
    else:
        failed_html = f"<p>All {len(checks)} checks passed.</p>"
    groups: dict[str | None, list[Mapping[str, Any]]] = {}
    for check in checks:
        suite = check.get("suite")
        groups.setdefault(suite if isinstance(suite, str) else None, []).append(check)
    order: list[str | None] = [s for s in SUITE_TITLES if s in groups]
    order += [s for s in groups if s not in SUITE_TITLES and s is not None]
    order += [None] if None in groups else []
    sections = "".join(
        f"<h2>{_e(SUITE_TITLES.get(suite or '', suite or NO_SUITE_TITLE))}"
        f"{f' <code>{_e(suite)}</code>' if suite else ''}</h2>" + _checks_table(groups[suite])
        for suite in order
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{_CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>Dataset validation {status}: {_e(report.get('dataset_version') or '')}</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1>Dataset validation <span class='badge {'pass' if success else 'fail'}'>"
        f"{status}</span></h1>"
        f"<table class='facts'>{facts_html}</table>"
        + failed_html
        + sections
        + _links_html(links)
        + "</body></html>"
    )


def _relative(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target, start)).as_posix()


def _neighbour_links(validation_dir: Path) -> list[tuple[str, str]]:
    """Links to the files beside the page that exist: report.json, the Data Docs index and
    the newest great-expectations result page of each suite (readable without scripts)."""
    links: list[tuple[str, str]] = []
    if (validation_dir / "report.json").is_file():
        links.append(("report.json (these results as JSON)", "report.json"))
    docs = validation_dir / "data_docs"
    if (docs / "index.html").is_file():
        links.append(("great-expectations Data Docs", "data_docs/index.html"))
    results = docs / "validations"
    if results.is_dir():
        for suite_dir in sorted(p for p in results.iterdir() if p.is_dir()):
            pages = sorted(suite_dir.rglob("*.html"))
            if pages:
                href = _relative(pages[-1], validation_dir)
                links.append((f"great-expectations result page: {suite_dir.name}", href))
    return links


def write_validation_page(report: Mapping[str, Any], validation_dir: Path) -> Path:
    """Render the page into `validation_dir/index.html` (atomically: a reader never sees half
    a page) with links to whatever lies beside it; returns the page's path."""
    validation_dir = Path(validation_dir)
    validation_dir.mkdir(parents=True, exist_ok=True)
    page = validation_dir / PAGE_NAME
    tmp = page.with_name(page.name + ".tmp")
    tmp.write_text(
        render_validation_page(report, links=_neighbour_links(validation_dir)), encoding="utf-8"
    )
    os.replace(tmp, page)
    return page
