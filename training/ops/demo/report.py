"""What the demo shows a person at the end: where the run started, the before/after table,
and whether the served answer did what the demo question needs.

Everything is read from files the pipeline already writes (the run's `start.json`, the
training job's `cpu_report.json`, the DAG's eval reports), so the demo adds no coupling to
the stages' code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rich.table import Table

from training.cpu_backend.plots import STAGES
from training.evaluation.metrics import HEADLINE_METRICS


def _read(path: Path) -> dict[str, Any] | None:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def latest_run(pipeline: Path) -> Path | None:
    """The newest retraining run folder (the one holding the last gate decision)."""
    decisions = sorted(pipeline.rglob("gate_decision.json"), key=lambda p: p.stat().st_mtime)
    return decisions[-1].parent.parent if decisions else None


def job_dir(run_dir: Path) -> Path:
    """The training job's workdir (one folder per Ray submission; the newest wins)."""
    jobs = sorted((run_dir / "jobs").glob("*/result.json"), key=lambda p: p.stat().st_mtime)
    return jobs[-1].parent if jobs else run_dir / "jobs"


def start_line(run_dir: Path) -> str:
    start = _read(run_dir / "start.json") or {}
    where = str(start.get("start") or "base")
    why = start.get("why")
    if where == "base":
        return f"started from the base model ({start.get('base_model', '?')})" + (
            f": {why}" if why else ""
        )
    return f"continued from {where} (GRPO on the fresh data; the registry records the parent)"


def format_guard_line(run_dir: Path) -> str | None:
    """What the training job's format guard did, when it acted (`format_guard.py`): the
    reason and how the run ended. None when GRPO ran as planned or nothing is recorded."""
    guard = (_read(job_dir(run_dir) / "cpu_report.json") or {}).get("format_guard")
    if not isinstance(guard, dict) or guard.get("action") not in ("extend", "stop"):
        return None
    ended = "an SFT-only candidate" if guard["action"] == "extend" else "GRPO skipped"
    return f"{ended}: {guard.get('reason') or 'no reason recorded'}"


def candidate_line(run_dir: Path) -> str | None:
    """Why the candidate is the SFT model, when GRPO's came out measurably worse than it
    (`candidate_choice.py`); None when GRPO's model is the candidate or nothing is recorded."""
    choice = (_read(job_dir(run_dir) / "cpu_report.json") or {}).get("candidate")
    if not isinstance(choice, dict) or choice.get("stage") != "sft":
        return None
    return str(choice.get("reason") or "the SFT model (no reason recorded)")


def _percent(value: Any) -> str:
    return "-" if not isinstance(value, int | float) else f"{float(value):.0%}"


def before_after_table(run_dir: Path) -> Table | None:
    """Quick evals of the training job (base, after SFT, after GRPO) beside the DAG's
    evaluation of the candidate and the champion it was compared with. Every column is a
    `metrics.summarise` block of the same definitions, so a row is one measure."""
    report = _read(job_dir(run_dir) / "cpu_report.json") or {}
    evals = report.get("evals") or {}
    candidate = _read(run_dir / "eval" / "candidate.json") or {}
    champion = _read(run_dir / "eval" / "champion.json") or {}
    if not evals and not candidate:
        return None
    table = Table(title="held-out templates: before and after", title_justify="left")
    table.add_column("metric")
    columns: list[tuple[str, dict[str, Any]]] = []
    start = str((_read(run_dir / "start.json") or {}).get("start") or "base")
    first = "base" if start == "base" else start  # a continued run starts from the champion
    for key, stage in STAGES:  # the plots' stages and labels, the start named as it is
        label = first if key == "before" else stage
        if evals.get(key):
            columns.append((f"{label} (quick, {evals[key].get('cases', '?')})", evals[key]))
    for name, payload in (("candidate", candidate), ("champion", champion)):
        overall = (payload.get("metrics") or {}).get("overall") or {}
        if overall:
            columns.append((f"{name} (eval, {overall.get('cases', '?')})", overall))
    for title, _ in columns:
        table.add_column(title, justify="right")
    for key, label in HEADLINE_METRICS:
        table.add_row(label, *(_percent(data.get(key)) for _, data in columns))
    return table


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def answer_check(answer: dict[str, Any], city: str = "Paris") -> tuple[bool, str]:
    """Did the served answer call get_current_weather for `city` and state the temperature
    the tool returned? Returns (ok, one line saying what happened)."""
    extension = answer.get("toolrl") if isinstance(answer.get("toolrl"), dict) else {}
    listed = (extension or {}).get("tool_calls")
    calls = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    weather = [
        c
        for c in calls
        if c.get("name") == "get_current_weather"
        and isinstance(c.get("arguments"), dict)
        and str(c["arguments"].get("location", "")).strip().lower() == city.lower()
    ]
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else {}
    message = first.get("message") if isinstance(first, dict) else None
    content = str(message.get("content") or "") if isinstance(message, dict) else ""
    if not weather:
        called = ", ".join(str(c.get("name")) for c in calls) or "no tool"
        return False, f"expected get_current_weather({city}); the model called {called}"
    temperature = _tool_temperature(weather[-1])
    if temperature is None:
        return False, "get_current_weather returned no temperature"
    stated = temperature in _NUMBER.findall(content)
    verdict = "states" if stated else "does not state"
    return stated, f"called get_current_weather({city}) -> {temperature} C; the reply {verdict} it"


def _tool_temperature(call: dict[str, Any]) -> str | None:
    result = call.get("result")
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            found = re.search(r'"temperature_c":\s*(-?\d+(?:\.\d+)?)', result)
            return found.group(1) if found else None
    if isinstance(result, dict) and isinstance(result.get("temperature_c"), int | float):
        value = result["temperature_c"]
        return str(int(value)) if float(value).is_integer() else str(value)
    return None
