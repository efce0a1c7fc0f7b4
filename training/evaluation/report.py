"""The evaluation report: a versioned JSON document and its HTML summary.

The JSON is the contract the gate, the registry (a version tag and an artifact) and the DAG
read, so it is a pydantic model with a `schema_version`; a reader refuses a newer major
version instead of guessing. The HTML has inline SVG bar charts and no scripts or external
assets (it is opened from an artifact store), and every string in it is escaped.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

REPORT_SCHEMA_VERSION = 1
MAX_REPORT_BYTES = 64 * 1024 * 1024


class ReportError(ValueError):
    """A report file that cannot be read; the message names the file and the problem."""


class EvalSource(BaseModel):
    """What was evaluated, on which data, how: the gate compares candidates only when the
    data fingerprints agree."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str
    model: str
    mode: str
    data_path: str
    data_sha256: str
    dataset_version: str | None = None
    max_turns: int
    samples: int = 1
    benchmark: str = "toolrl"
    """`toolrl` for the held-out split, `bfcl` for the external benchmark."""


class EvalReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = REPORT_SCHEMA_VERSION
    kind: Literal["toolrl-eval-report"] = "toolrl-eval-report"
    created_at: str
    source: EvalSource
    cases_total: int
    cases_skipped: list[str] = Field(default_factory=list)
    metrics: dict[str, Any]
    """`overall`, `by_category`, `by_tool`, `pass_hat_k` (see training/evaluation/metrics.py)."""
    failures: list[dict[str, Any]] = Field(default_factory=list)
    """Up to 50 failed cases with what went wrong, for a human reading the report."""
    harness: dict[str, float] = Field(default_factory=dict)
    """wall_s, cases_per_s: how long the evaluation took."""


def write_report(report: EvalReport, path: Path, figures: Sequence[Path] = ()) -> Path:
    """Write JSON atomically (a crash never leaves half a report) and the HTML beside it,
    with `figures` (PNG files, e.g. the training stage's plots) embedded in it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False))
    os.replace(tmp, path)
    path.with_suffix(".html").write_text(render_html(report, figures))
    return path


MAX_FIGURE_BYTES = 2 * 1024 * 1024


def _figures_html(figures: Sequence[Path]) -> str:
    """PNGs inline as data URIs: the page opens from an artifact store with nothing else.
    A missing, oversized or non-PNG file is skipped (named), never a broken report."""
    parts = []
    for figure in figures:
        try:
            data = figure.read_bytes()
        except OSError:
            parts.append(f"<p>figure {html.escape(figure.name)} is missing</p>")
            continue
        if len(data) > MAX_FIGURE_BYTES or not data.startswith(b"\x89PNG"):
            parts.append(f"<p>figure {html.escape(figure.name)} is not a small PNG; skipped</p>")
            continue
        encoded = base64.b64encode(data).decode("ascii")
        label = html.escape(figure.stem.replace("_", " "))
        parts.append(
            f"<figure><img alt='{label}' style='max-width:100%' "
            f"src='data:image/png;base64,{encoded}'><figcaption>{label}</figcaption></figure>"
        )
    return "<h2>Training</h2>" + "".join(parts) if parts else ""


def load_report(path: Path) -> EvalReport:
    """Read and validate a report; ReportError on anything unreadable or foreign."""
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            raise ReportError(f"{path}: larger than {MAX_REPORT_BYTES} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, ReportError):
            raise
        raise ReportError(f"{path}: not a readable JSON file ({exc})") from exc
    if not isinstance(data, dict):
        raise ReportError(f"{path}: not a JSON object")
    version = data.get("schema_version")
    if isinstance(version, int) and version > REPORT_SCHEMA_VERSION:
        raise ReportError(f"{path}: schema_version {version} is newer than this reader")
    try:
        return EvalReport.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ReportError(f"{path}: invalid report at {where}: {first['msg']}") from exc


def wilson_interval(rate: float, n: int, z: float = 1.645) -> tuple[float, float]:
    """The 90% Wilson score interval of a rate over `n` cases: what a reader needs to tell
    a difference from sampling noise (96 cases move a rate by about +-8 points)."""
    if n <= 0:
        return (0.0, 1.0)
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_bootstrap(
    before: Sequence[float], after: Sequence[float], draws: int = 4000, seed: int = 0
) -> dict[str, float]:
    """Mean of (after - before) over the same cases and its 90% percentile interval: two
    models scored on one case set differ by less than their separate intervals suggest,
    because the cases they share move both."""
    if not before:
        return {"cases": 0}
    differences = [a - b for a, b in zip(after, before, strict=True)]
    rng = random.Random(seed)
    n = len(differences)
    means = sorted(sum(differences[rng.randrange(n)] for _ in range(n)) / n for _ in range(draws))
    return {
        "cases": n,
        "before": round(sum(before) / n, 4),
        "after": round(sum(after) / n, 4),
        "difference": round(sum(differences) / n, 4),
        "ci90_low": round(means[int(0.05 * draws)], 4),
        "ci90_high": round(means[int(0.95 * draws) - 1], 4),
    }


def rate_denominators(metrics: dict[str, Any]) -> dict[str, int]:
    """How many cases each per-case headline rate is over (per-call rates are left out)."""
    overall, by_category = metrics.get("overall", {}), metrics.get("by_category", {})

    def cases(*categories: str) -> int:
        return sum(int(by_category.get(c, {}).get("cases", 0) or 0) for c in categories)

    total, tool_cases = int(overall.get("cases", 0) or 0), cases("single", "parallel", "multi_step")
    return {
        "pass_rate": total,
        "tool_call_rate": total,
        "error_rate": total,
        "tool_selection_accuracy": tool_cases,
        "exact_call_accuracy": tool_cases,
        "answer_accuracy": tool_cases,
        "irrelevance_accuracy": cases("irrelevance"),
        "clarification_accuracy": cases("clarification"),
    }


def _bars(title: str, values: dict[str, float | None], counts: dict[str, int] | None = None) -> str:
    rows = [(k, v) for k, v in values.items() if isinstance(v, int | float)]
    height = 22 * len(rows) + 30
    parts = [
        f'<svg width="820" height="{height}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="0" y="16" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, (label, value) in enumerate(rows):
        y = 28 + 22 * i
        width = max(0.0, min(1.0, float(value))) * 360
        parts.append(
            f'<text x="0" y="{y + 13}" font-size="12">{html.escape(label)}</text>'
            f'<rect x="220" y="{y}" width="{width:.1f}" height="16" fill="#4a7ebb"/>'
            f'<text x="{226 + width:.1f}" y="{y + 13}" font-size="12">{float(value):.3f}'
            f"{_interval_label(float(value), (counts or {}).get(label, 0))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _interval_label(value: float, n: int) -> str:
    if n <= 0:
        return ""
    low, high = wilson_interval(value, n)
    return f" [{low:.2f}, {high:.2f}] of {n}"


def _table(rows: dict[str, dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["", *columns])
    body = []
    for name, values in rows.items():
        cells = "".join(f"<td>{html.escape(str(values.get(c)))}</td>" for c in columns)
        body.append(f"<tr><th>{html.escape(name)}</th>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


_RATES = (
    "pass_rate",
    "tool_call_rate",
    "tool_selection_accuracy",
    "argument_accuracy",
    "exact_call_accuracy",
    "answer_accuracy",
    "irrelevance_accuracy",
    "clarification_accuracy",
    "malformed_call_rate",
    "error_rate",
)


def render_html(report: EvalReport, figures: Sequence[Path] = ()) -> str:
    """A self-contained HTML summary: charts for rates, tables for categories and tools,
    and the training plots when given."""
    overall = report.metrics.get("overall", {})
    by_category = report.metrics.get("by_category", {})
    by_tool = report.metrics.get("by_tool", {})
    src = report.source
    kinds = overall.get("malformed_by_kind")
    charts = [
        _bars(
            "Overall (90% interval, cases)",
            {k: overall.get(k) for k in _RATES},
            rate_denominators(report.metrics),
        ),
        _bars("Pass rate by category", {c: m.get("pass_rate") for c, m in by_category.items()}),
        _bars(
            "Argument accuracy by tool",
            {t: m.get("argument_accuracy") for t, m in by_tool.items()},
        ),
    ]
    pass_k = report.metrics.get("pass_hat_k") or {}
    if pass_k:
        charts.append(_bars("pass^k", {f"k={k}": v for k, v in pass_k.items()}))
    failures = "".join(
        f"<li><code>{html.escape(json.dumps(f, ensure_ascii=False)[:400])}</code></li>"
        for f in report.failures[:50]
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>toolrl eval</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;"
        "border-bottom:1px solid #ddd;text-align:right}</style></head><body>"
        f"<h1>Evaluation of {html.escape(src.model)}</h1>"
        f"<p>{html.escape(src.benchmark)} data {html.escape(src.data_path)} "
        f"(version {html.escape(str(src.dataset_version))}), endpoint "
        f"{html.escape(src.endpoint)}, mode {html.escape(src.mode)}, "
        f"{report.cases_total} cases, {len(report.cases_skipped)} skipped, "
        f"created {html.escape(report.created_at)}</p>"
        + "".join(f"<div>{c}</div>" for c in charts)
        + _figures_html(figures)
        + "<h2>By category</h2>"
        + _table(by_category, ["cases", *_RATES, "mean_turns", "latency_p95_s"])
        + "<h2>By tool</h2>"
        + _table(by_tool, ["cases", "selection_recall", "argument_accuracy", "unexpected_calls"])
        + "<h2>Latency and tokens</h2>"
        + _table(
            {"overall": overall},
            [
                "latency_p50_s",
                "latency_p95_s",
                "model_latency_p50_s",
                "model_latency_p95_s",
                "mean_prompt_tokens",
                "mean_completion_tokens",
            ],
        )
        + f"<h2>Malformed calls by kind</h2><p>{html.escape(str(kinds))}</p>"
        + f"<h2>Failures (first 50)</h2><ul>{failures}</ul></body></html>"
    )
