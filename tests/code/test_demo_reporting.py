"""What the demo prints: training milestones from the checkpoint folder while the DAG waits,
and the served answer with the MCP calls the front door ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.checkpoints.layout import PROGRESS_FILE
from training.ops.demo.progress import CheckpointWatcher
from training.ops.demo.summary import describe_answer, rejection_note


def test_watcher_counts_to_the_steps_the_job_pinned_not_the_demos_estimate(
    tmp_path: Path,
) -> None:
    """The demo estimates 81 SFT steps from its table; the job times its steps where it runs
    and pins its own plan (79): the milestones count to the pinned plan. A broken pin falls
    back to the estimate, never a crash."""
    run = tmp_path / "manual__1" / "checkpoints"
    said: list[str] = []
    watcher = CheckpointWatcher(tmp_path, said.append, totals={"sft": 81, "grpo": 2})
    (run / "sft" / "global_step_50").mkdir(parents=True)
    (run / "budget_plan.json").write_text(json.dumps({"sft_steps": 79, "grpo_steps": 2}))
    assert watcher.poll() == ["SFT checkpoint: step 50/79"]
    (run / "budget_plan.json").write_text("{not json")
    (run / "sft" / "global_step_60").mkdir()
    assert watcher.poll() == ["SFT checkpoint: step 60/81"]


def test_watcher_reports_each_milestone_once_in_order(tmp_path: Path) -> None:
    run = tmp_path / "manual__1" / "checkpoints"
    said: list[str] = []
    watcher = CheckpointWatcher(tmp_path, said.append, totals={"sft": 700, "grpo": 10})
    assert watcher.poll() == []
    (run / "sft" / "global_step_100").mkdir(parents=True)
    (run / "eval_before.json").write_text(
        json.dumps({"parseable_rate": 0, "tool_selection_accuracy": 0.2})
    )
    assert watcher.poll() == [
        "SFT checkpoint: step 100/700",
        "quick eval base model: parseable 0%, right tool 20%",
    ]
    (run / "sft" / "global_step_200").mkdir()
    (run / "global_step_5").mkdir()
    (run / "eval_sft.json").write_text(
        json.dumps({"parseable_rate": 0.97, "tool_selection_accuracy": 0.4})
    )
    assert watcher.poll() == [
        "SFT checkpoint: step 200/700",
        "GRPO checkpoint: step 5/10",
        "quick eval after SFT: parseable 97%, right tool 40%",
    ]
    assert watcher.poll() == []
    assert said == [
        "SFT checkpoint: step 100/700",
        "quick eval base model: parseable 0%, right tool 20%",
        "SFT checkpoint: step 200/700",
        "GRPO checkpoint: step 5/10",
        "quick eval after SFT: parseable 97%, right tool 40%",
    ]


def test_watcher_reports_the_format_guards_extension(tmp_path: Path) -> None:
    """SFT did not learn the format; GRPO's minutes went to more SFT (format_guard.py): the
    user sees the weak eval, the extension's steps and checkpoint, and its eval."""
    run = tmp_path / "manual__1" / "checkpoints"
    said: list[str] = []
    watcher = CheckpointWatcher(tmp_path, said.append, totals={"sft": 74, "grpo": 2})
    (run / "sft" / "global_step_66").mkdir(parents=True)
    (run / "eval_sft.json").write_text(
        json.dumps({"parseable_rate": 0.24, "tool_selection_accuracy": 0.39})
    )
    (run / PROGRESS_FILE).write_text(
        json.dumps({"phase": "sft_extension", "step": 4, "of": 16, "loss": 0.41})
    )
    assert watcher.poll() == [
        "SFT checkpoint: step 66/74",
        "more SFT (format guard) step 4/16, loss 0.41",
        "quick eval after SFT: parseable 24%, right tool 39%",
    ]
    (run / "sft_extension" / "global_step_16").mkdir(parents=True)
    (run / "eval_sft_extended.json").write_text(
        json.dumps({"parseable_rate": 0.71, "tool_selection_accuracy": 0.5})
    )
    assert watcher.poll() == [
        "more SFT checkpoint: step 16",
        "quick eval after more SFT: parseable 71%, right tool 50%",
    ]


def test_watcher_reports_a_running_phase_at_each_tenth_between_checkpoints(
    tmp_path: Path,
) -> None:
    """A 58-step SFT runs 15 minutes between checkpoints on AVX2: the progress file the
    trainer callback writes on every log is reported once per tenth of the phase."""
    run = tmp_path / "manual__1" / "checkpoints"
    run.mkdir(parents=True)
    said: list[str] = []
    watcher = CheckpointWatcher(tmp_path, said.append)
    progress = run / PROGRESS_FILE

    def logged(phase: str, step: int, of: int, **figures: float) -> list[str]:
        progress.write_text(json.dumps({"phase": phase, "step": step, "of": of, **figures}))
        return watcher.poll()

    assert logged("sft", 6, 58, loss=5.81) == ["SFT step 6/58, loss 5.81"]
    assert logged("sft", 8, 58, loss=1.2) == []  # the same tenth
    assert logged("sft", 12, 58, loss=0.61) == ["SFT step 12/58, loss 0.61"]
    assert logged("sft", 58, 58, loss=0.2) == []  # the end is the checkpoint's line
    assert logged("grpo", 1, 3, reward=-0.45, loss=0.0) == ["GRPO step 1/3, reward -0.45"]
    assert logged("grpo", 2, 3) == ["GRPO step 2/3"]


@pytest.mark.parametrize(
    "content", ["", "{", "[]", '{"phase": "sft", "step": "x", "of": 5}', '{"step": 1}', "\x00"]
)
def test_a_torn_or_hostile_progress_file_is_skipped(tmp_path: Path, content: str) -> None:
    run = tmp_path / "r" / "checkpoints"
    run.mkdir(parents=True)
    (run / PROGRESS_FILE).write_text(content)
    assert CheckpointWatcher(tmp_path, [].append).poll() == []


@pytest.mark.parametrize("content", ["", "{", "[]", '{"parseable_rate": "x"}', "\x00\xff"])
def test_watcher_survives_half_written_or_hostile_eval_files(tmp_path: Path, content: str) -> None:
    run = tmp_path / "r" / "checkpoints"
    run.mkdir(parents=True)
    (run / "eval_grpo.json").write_text(content, encoding="utf-8", errors="surrogateescape")
    (run / "global_step_x").mkdir()  # not a step folder: ignored
    said: list[str] = []
    assert CheckpointWatcher(tmp_path, said.append).poll() == [
        "quick eval after GRPO: done (eval_grpo.json)"
    ]


def test_watcher_thread_stops_on_exit_and_skips_earlier_runs(tmp_path: Path) -> None:
    earlier = tmp_path / "earlier" / "checkpoints"
    (earlier / "sft" / "global_step_700").mkdir(parents=True)
    (earlier / "eval_sft.json").write_text("{}")
    said: list[str] = []
    with CheckpointWatcher(tmp_path, said.append, interval_s=0.01) as watcher:
        (tmp_path / "a" / "checkpoints" / "global_step_1").mkdir(parents=True)
        for _ in range(500):
            if said:
                break
            watcher._stop.wait(0.01)
    assert said == ["GRPO checkpoint: step 1"]
    assert watcher._thread is not None and not watcher._thread.is_alive()


def reply(toolrl: Any) -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", "content": "It is 18 C."}}],
        "toolrl": toolrl,
    }


def test_answer_lists_the_calls_the_front_door_executed() -> None:
    calls = [{"name": "get_current_weather", "arguments": {"location": "Paris"}, "is_error": False}]
    line = describe_answer(reply({"tool_calls": calls}))
    assert line == (
        '\'It is 18 C.\' after 1 real MCP tool call: get_current_weather({"location": "Paris"})'
    )
    calls.append({"name": "get_current_time", "arguments": {}, "is_error": True})
    assert "2 real MCP tool calls" in describe_answer(reply({"tool_calls": calls}))
    assert "get_current_time({}) -> tool error" in describe_answer(reply({"tool_calls": calls}))


@pytest.mark.parametrize(
    "answer",
    [{}, {"choices": []}, {"choices": "x"}, reply(None), reply({"tool_calls": "x"}), reply([])],
)
def test_answer_without_calls_or_malformed_says_so(answer: dict[str, Any]) -> None:
    assert describe_answer(answer).endswith("(answered without calling a tool)")


def _served(calls: list[dict[str, Any]], content: str) -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", "content": content}}],
        "toolrl": {"tool_calls": calls},
    }


WEATHER = {
    "name": "get_current_weather",
    "arguments": {"location": "Paris"},
    "is_error": False,
    "result": '{"location": "Paris", "temperature_c": 21, "condition": "sunny"}',
}


def test_the_demo_answer_must_call_the_weather_tool_for_paris_and_state_its_temperature() -> None:
    from training.ops.demo.report import answer_check

    assert answer_check(_served([WEATHER], "It is 21 C in Paris.")) == (
        True,
        "called get_current_weather(Paris) -> 21 C; the reply states it",
    )
    ok, why = answer_check(_served([WEATHER], "It is 16 degrees."))
    assert not ok and "does not state" in why
    brasilia = {**WEATHER, "arguments": {"location": "Brasilia"}}
    ok, why = answer_check(_served([brasilia], "The result is 21."))  # issue 13's answer
    assert not ok and "expected get_current_weather(Paris)" in why
    ok, why = answer_check(_served([], "Paris is nice."))
    assert not ok and "no tool" in why
    broken = {**WEATHER, "result": "Error: unknown city"}
    assert answer_check(_served([broken], "21"))[0] is False
    assert answer_check({"choices": "junk", "toolrl": "junk"})[0] is False


def test_the_before_after_table_reads_the_run_folders(tmp_path: Path) -> None:
    from rich.console import Console

    from training.ops.demo.report import before_after_table, start_line

    run = tmp_path / "manual__1"
    job = run / "jobs" / "toolrl-x-a1"
    job.mkdir(parents=True)
    (job / "result.json").write_text("{}")
    quick = {"cases": 48, "parseable_rate": 0.0, "tool_selection_accuracy": 0.0}
    (job / "cpu_report.json").write_text(
        json.dumps({"evals": {"before": quick, "sft": {**quick, "tool_selection_accuracy": 0.6}}})
    )
    (run / "eval").mkdir()
    overall = {"cases": 96, "tool_selection_accuracy": 0.74, "pass_rate": 0.67}
    (run / "eval" / "candidate.json").write_text(json.dumps({"metrics": {"overall": overall}}))
    (run / "start.json").write_text(json.dumps({"start": "champion v3", "parent_version": "3"}))
    table = before_after_table(run)
    assert table is not None
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "champion v3 (quick, 48)" in text and "candidate (eval, 96)" in text
    assert "74%" in text and "60%" in text
    assert "continued from champion v3" in start_line(run)
    assert before_after_table(tmp_path / "nothing") is None


def job_report(tmp_path: Path) -> tuple[Path, Path]:
    """A retraining run folder with one finished job: (the run, its job's cpu_report.json)."""
    run = tmp_path / "manual__1"
    job = run / "jobs" / "toolrl-x-a1"
    job.mkdir(parents=True)
    (job / "result.json").write_text("{}")
    return run, job / "cpu_report.json"


def test_the_closing_report_names_what_the_format_guard_did(tmp_path: Path) -> None:
    from training.ops.demo.report import format_guard_line

    run, report = job_report(tmp_path)
    reason = "SFT did not learn the call format: 24% parseable"
    report.write_text(json.dumps({"format_guard": {"action": "extend", "reason": reason}}))
    assert format_guard_line(run) == f"an SFT-only candidate: {reason}"
    report.write_text(json.dumps({"format_guard": {"action": "stop", "reason": reason}}))
    assert format_guard_line(run) == f"GRPO skipped: {reason}"
    for quiet in ({"format_guard": {"action": "grpo"}}, {}, {"format_guard": "junk"}):
        report.write_text(json.dumps(quiet))
        assert format_guard_line(run) is None
    report.write_text("{torn")
    assert format_guard_line(run) is None


def test_the_closing_report_prints_the_question_beside_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from training.ops.demo import summary as demo_summary

    printed = Console(record=True, width=200)
    monkeypatch.setattr(demo_summary, "console", printed)
    dataset = tmp_path / "datasets" / "abc"
    dataset.mkdir(parents=True)
    answer = {"content": "It is 10:10.", "tool_calls": []}
    demo_summary.print_summary(
        tmp_path,
        dataset,
        {"TOOLRL_MODEL_NAME": "toolrl-demo-time"},
        answer,
        60.0,
        "1",
        True,
        (False, "get_current_time returned a tool error"),
        "Tell me the local time in Istanbul.",
    )
    text = printed.export_text()
    assert "demo question         'Tell me the local time in Istanbul.'" in text
    assert "not met: get_current_time returned a tool error" in text


def test_the_trainer_callback_writes_what_the_watcher_reads(tmp_path: Path) -> None:
    """`ProgressCallback` on the trainer's log: phase, step, of, a finite loss; the file is
    replaced whole, so the watcher never reads half of it."""
    from types import SimpleNamespace

    from training.cpu_backend.tracking import ProgressCallback

    run = tmp_path / "r" / "checkpoints"
    callback = ProgressCallback(run, "sft")
    state = SimpleNamespace(global_step=20, max_steps=58)
    callback.on_log(None, state, None, logs={"loss": 0.2086, "grad_norm": 2.6})
    assert json.loads((run / PROGRESS_FILE).read_text()) == {
        "phase": "sft",
        "step": 20,
        "of": 58,
        "loss": 0.2086,
    }
    callback.on_log(None, state, None, logs={"loss": float("nan")})
    assert "loss" not in json.loads((run / PROGRESS_FILE).read_text())
    assert CheckpointWatcher(tmp_path, [].append).poll() == ["SFT step 20/58"]
    assert sorted(p.name for p in run.iterdir()) == [PROGRESS_FILE]


def test_a_rejection_says_why_what_is_served_and_what_to_try() -> None:
    reasons = "overall.tool_selection_accuracy min: 0.4458 >= 0.45 required"
    first = rejection_note(reasons, None, 20.0)
    assert reasons in first and "nothing to serve" in first
    assert "demo --budget-minutes 30" in first  # a longer budget: more SFT steps
    assert "thresholds_demo.yaml" in first
    kept = rejection_note(reasons, "3", 35.0)
    assert "champion (version 3) is unchanged" in kept and "--budget-minutes 45" in kept
    # no budget (the spec's steps as written): no budget to lengthen
    assert "--budget-minutes" not in rejection_note(reasons, None, 0.0)


def test_the_closing_report_says_when_the_candidate_is_the_sft_model(tmp_path: Path) -> None:
    """GRPO's model measurably worse than its SFT start: the candidate is the SFT model, and
    the demo's last screen says so with the reason (`candidate_choice.py`)."""
    from training.ops.demo.report import candidate_line

    run, report = job_report(tmp_path)
    reason = "GRPO's model came out worse than its SFT start on the quick eval (parseable ...)"
    report.write_text(json.dumps({"candidate": {"stage": "sft", "reason": reason}}))
    assert candidate_line(run) == reason
    for quiet in ({"candidate": {"stage": "grpo", "reason": "x"}}, {"candidate": None}, {}):
        report.write_text(json.dumps(quiet))
        assert candidate_line(run) is None
    report.write_text("{torn")
    assert candidate_line(run) is None
