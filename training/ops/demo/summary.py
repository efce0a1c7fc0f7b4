"""What the demo prints at its end: the answer, the registry entry, the links, the
before/after table and the champion across scheduled runs."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from training.ops.demo.airflow_run import AirflowHandle
from training.ops.demo.common import BIN, DEMO_QUESTION, MODEL_NAME, console
from training.ops.demo.report import (
    answer_check,
    before_after_table,
    candidate_line,
    format_guard_line,
    job_dir,
    latest_run,
    start_line,
)
from training.registry.auth import Identity


def rejection_note(reasons: str, champion: str | None, budget_minutes: float) -> str:
    """What the demo says when its gate rejects the candidate: why, what is served now, and
    what to try. Within 20 minutes the model trains ~60 SFT steps and its right-tool rate
    lands either side of the demo gate's 45% (two of five runs on 2026-12-06 were rejected,
    at 43.2% and 44.6%); a longer budget buys SFT steps, which is what clears it."""
    kept = (
        f"the champion (version {champion}) is unchanged and answers the chat"
        if champion
        else "with no champion yet there is nothing to serve"
    )
    hint = (
        f" A longer time budget trains more SFT steps, which is what clears the demo gate: "
        f"{BIN / 'toolrl'} demo --budget-minutes {max(budget_minutes, 20.0) + 10.0:g}."
        if budget_minutes > 0
        else ""
    )
    return (
        f"the gate rejected the candidate: {reasons}. {kept}.{hint} The gate's thresholds: "
        "training/specs/thresholds_demo.yaml."
    )


def describe_answer(answer: dict[str, Any]) -> str:
    """The front door's reply in one line: the final text and the MCP calls the agent loop
    executed on the way (listed under the `toolrl` extension field; the final assistant
    message carries none, because the calls were already run)."""
    choices = answer.get("choices") if isinstance(answer.get("choices"), list) else None
    message = choices[0].get("message", {}) if choices and isinstance(choices[0], dict) else {}
    content = message.get("content") if isinstance(message, dict) else None
    extension = answer.get("toolrl")
    listed = extension.get("tool_calls") if isinstance(extension, dict) else None
    calls = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    if not calls:
        return f"{content!r} (answered without calling a tool)"
    rendered = ", ".join(
        f"{c.get('name')}({json.dumps(c.get('arguments'), ensure_ascii=False)})"
        + (" -> tool error" if c.get("is_error") else "")
        for c in calls
    )
    plural = "" if len(calls) == 1 else "s"
    return f"{content!r} after {len(calls)} real MCP tool call{plural}: {rendered}"


def current_champion(
    tracking_uri: str, name: str = MODEL_NAME, reader: Identity | None = None
) -> str | None:
    """The registry's `champion` version now (after this run's gate), or None if none yet:
    a rejected candidate leaves an earlier demo run's champion in place, and that one serves.
    Read as `reader` (the serving identity) when the registry has auth on."""
    from training.registry.registry import RegistryError, resolve

    with reader.acting() if reader else nullcontext():
        try:
            return resolve(tracking_uri, f"models:/{name}@champion").version
        except RegistryError:
            return None


def print_summary(
    workdir: Path,
    dataset: Path,
    env: dict[str, str],
    answer: dict[str, Any],
    elapsed: float,
    champion: str | None,
    promoted: bool,
    check: tuple[bool, str] | None = None,
    question: str = DEMO_QUESTION,
) -> None:
    """The closing report; `check` is the served answer's verdict (default: the built-in
    demo's weather check) on `question`, printed beside it so the verdict can be read."""
    name = env["TOOLRL_MODEL_NAME"]
    pipeline = workdir / "pipeline"
    reports = sorted(pipeline.rglob("candidate.html"))
    decisions = sorted(pipeline.rglob("gate_decision.json"))
    console.rule("[bold green]toolrl demo finished")
    console.print(f"total time            {elapsed / 60:.1f} min")
    console.print(f"dataset version       {dataset.name}  ({dataset})")
    console.print(f"validation page       {dataset / 'validation' / 'index.html'}")
    console.print(
        f"Data Docs             {dataset / 'validation' / 'data_docs' / 'index.html'} "
        "(great-expectations; its scripts need the network)"
    )
    if reports:
        console.print(f"eval report (HTML)    {reports[-1]}")
    if decisions:
        decision = json.loads(decisions[-1].read_text())
        console.print(
            f"gate decision         {decision['decision']} {decision.get('reasons') or ''}"
        )
    if champion:
        how = "promoted by this run" if promoted else "unchanged: this run's candidate rejected"
        entry = f"models:/{name}@champion = version {champion} ({how})"
    else:
        entry = f"{name}: candidate registered as rejected, no champion yet"
    console.print(f"registry              {entry} in {workdir / 'mlflow' / 'mlflow.db'}")
    console.print(
        f"MLflow UI (later)     {BIN / 'mlflow'} ui --backend-store-uri "
        f"sqlite:///{workdir / 'mlflow' / 'mlflow.db'}"
    )
    if answer:
        console.print(f"demo question         {question!r}")
        console.print(f"served answer         {describe_answer(answer)}")
        ok, why = check if check is not None else answer_check(answer)
        colour = "green" if ok else "yellow"
        console.print(
            f"demo question check   [{colour}]{'ok' if ok else 'not met'}: {why}[/{colour}]"
        )
    run_dir = latest_run(pipeline)
    if run_dir is not None:
        console.print(f"training              {start_line(run_dir)}")
        guarded = format_guard_line(run_dir)
        if guarded:
            console.print(f"format guard          [yellow]{guarded}[/yellow]")
        stepped_back = candidate_line(run_dir)
        if stepped_back:
            console.print(f"candidate             [yellow]{stepped_back}[/yellow]")
        plots = job_dir(run_dir) / "plots"
        if plots.is_dir():
            console.print(f"plots                 {plots}")
        table = before_after_table(run_dir)
        if table is not None:
            console.print(table)
    console.print(f"logs                  {workdir / 'logs'}")


def print_airflow_access(handle: AirflowHandle | None) -> None:
    if handle is None:
        return
    console.print(f"Airflow UI            {handle.api.base_url}  (user admin)")
    if handle.password_printed:
        console.print(
            f"Airflow login         admin / {handle.password_printed}  (printed once; kept in "
            f"{handle.layout.passwords}, mode 0600)"
        )
    else:
        console.print(f"Airflow login         user admin, password in {handle.layout.passwords}")


def champion_history_report(workdir: Path, tracking_uri: str, identity: Identity) -> None:
    """The champion's held-out figures after each retraining run in this workdir: a table
    here, JSON and a plot in `reports/`, and one MLflow run in `champion-history`."""
    from rich.table import Table

    from training.ops.demo.history import (
        FOLLOWED,
        VERSUS_CHAMPION_LABEL,
        champion_history,
        history_rows,
        log_history,
        write_history,
    )

    history = champion_history(workdir / "pipeline")
    if not history:
        return
    table = Table(title="the champion after each scheduled run (held-out, 90% interval)")
    for column in ("run", "champion", *(label for _, label in FOLLOWED), VERSUS_CHAMPION_LABEL):
        table.add_column(column)
    for row in history_rows(history):
        table.add_row(*row)
    console.print(table)
    files = write_history(history, workdir / "reports")
    try:
        run_id = log_history(tracking_uri, identity, history, files)
        console.print(f"champion history      {files[-1]} (MLflow run {run_id})")
    except Exception as exc:  # the figures are on disk; a registry hiccup must not end the demo
        console.print(f"[yellow]champion history not logged to MLflow: {exc}[/yellow]")
