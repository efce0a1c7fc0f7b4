"""The verl-path format-drift guard: reward workers record, the driver watches and stops."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from training.jobs.drift_guard import DRIFT_DIR_ENV, DriftWatcher, record_sample
from training.jobs.entry import supervise
from training.rewards import drift_log
from training.rewards.score import compute_score

MALFORMED = '<tool_call>{"name": "get_current_weather", "arguments": {"location": </tool_call>'
GOOD = '<tool_call>{"name": "get_current_weather", "arguments": {"location": "Paris"}}</tool_call>'
TRUTH = json.dumps(
    {
        "category": "single",
        "steps": [[{"name": "get_current_weather", "arguments": {"location": "Paris"}}]],
    }
)


@pytest.fixture(autouse=True)
def fresh_sink() -> None:
    drift_log._sink = None


def test_reward_records_samples_only_when_enabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compute_score(solution_str=GOOD, ground_truth=TRUTH)
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(DRIFT_DIR_ENV, str(tmp_path))
    compute_score(solution_str=GOOD, ground_truth=TRUTH)
    compute_score(solution_str=MALFORMED, ground_truth=TRUTH)
    [log] = list(tmp_path.glob("*.jsonl"))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [{"calls": 1, "malformed": 0}, {"calls": 1, "malformed": 1}]


def write(directory: Path, name: str, samples: list[tuple[int, int]], tail: str = "") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / name).open("a") as handle:
        for calls, malformed in samples:
            handle.write(json.dumps({"calls": calls, "malformed": malformed}) + "\n")
        handle.write(tail)


def test_watcher_groups_samples_into_steps_and_fires_after_the_window(tmp_path: Path) -> None:
    watcher = DriftWatcher(tmp_path, samples_per_step=4, threshold=0.3, window=2)
    write(tmp_path, "1.jsonl", [(1, 0)] * 4)  # step 1: clean
    write(tmp_path, "2.jsonl", [(2, 1)] * 3, tail='{"calls": 2, "malf')  # a line mid-write
    assert watcher.poll() is False
    assert watcher.history == [0.0]
    write(tmp_path, "2.jsonl", [], tail='ormed": 1}\nnot json\n')  # completes step 2 at 50%
    assert watcher.poll() is False  # one bad step is noise
    write(tmp_path, "1.jsonl", [(1, 1)] * 4)  # step 3: 100%
    assert watcher.poll() is True
    assert watcher.history == [0.0, 0.5, 1.0]
    assert watcher.summary()["last_malformed_rate"] == 1.0


@pytest.mark.timeout(60)  # the child alone would run 100 s
def test_supervise_stops_a_collapsing_run(tmp_path: Path) -> None:
    drift_dir = tmp_path / "drift"
    script = textwrap.dedent(f"""
        import json, os, time
        os.makedirs({str(drift_dir)!r}, exist_ok=True)
        with open(os.path.join({str(drift_dir)!r}, "w.jsonl"), "a", buffering=1) as f:
            for i in range(10_000):
                f.write(json.dumps({{"calls": 1, "malformed": 1}}) + "\\n")
                time.sleep(0.01)
    """)
    watcher = DriftWatcher(drift_dir, samples_per_step=5, threshold=0.5, window=3)
    summary = supervise([sys.executable, "-c", script], {}, watcher, poll_s=0.2)
    assert summary is not None and summary["steps_observed"] >= 3
    written = len((drift_dir / "w.jsonl").read_text().splitlines())
    assert written < 10_000  # the child was stopped, not waited for


def test_supervise_lets_a_healthy_run_finish_and_reports_failures(tmp_path: Path) -> None:
    watcher = DriftWatcher(tmp_path / "none", samples_per_step=5, threshold=0.5, window=3)
    assert supervise([sys.executable, "-c", "print('ok')"], {}, watcher, poll_s=0.1) is None
    with pytest.raises(subprocess.CalledProcessError):
        supervise([sys.executable, "-c", "raise SystemExit(4)"], {}, watcher, poll_s=0.1)


def test_record_sample_is_a_no_op_without_the_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DRIFT_DIR_ENV, raising=False)
    record_sample({"num_calls": 3, "malformed_calls": 1})
    assert drift_log._sink is None


def test_watcher_judges_drift_from_the_first_steps_rate(tmp_path: Path) -> None:
    """A run that starts at 50% malformed is not stopped for staying there; climbing past
    its start plus the margin, it is."""
    watcher = DriftWatcher(
        tmp_path, samples_per_step=2, threshold=0.3, window=2, margin_over_start=0.1
    )
    write(tmp_path, "1.jsonl", [(2, 1)] * 6)  # three steps at 50%
    assert watcher.poll() is False
    assert watcher.history == [0.5, 0.5, 0.5]
    write(tmp_path, "1.jsonl", [(4, 3)] * 4)  # two steps at 75%
    assert watcher.poll() is True
