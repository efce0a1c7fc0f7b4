"""The format-drift signal the training guard uses to stop a collapsing run."""

from __future__ import annotations

import pytest

from training.rewards.drift import format_drift, is_drifting
from training.rewards.samples import make_samples, render_hermes, render_xml, tool_turn

GOOD = render_hermes("get_current_time", {"timezone": "UTC"}) + tool_turn(["{}"]) + "It is 9:30."
GARBAGE = render_xml("get_current_time英文", {"timezone": "UTC"})
STRAY = render_xml("get_current_time", {"timezone": "UTC"}).replace(
    "</parameter>", '</parameter v2="">'
)


def test_rate_and_breakdown_by_kind() -> None:
    report = format_drift([GOOD, GARBAGE, STRAY, "no calls at all"])
    assert report.rollouts == 4
    assert report.calls == 3
    assert report.malformed_calls == 2
    assert report.rollouts_with_malformed == 2
    assert report.malformed_rate == pytest.approx(2 / 3)
    assert report.errors_by_kind == {"garbage_in_name": 1, "stray_attribute": 1}
    metrics = report.to_metrics()
    assert metrics["train/format/malformed_rate"] == pytest.approx(2 / 3)
    assert metrics["train/format/error_rate/stray_attribute"] == pytest.approx(1 / 3)
    assert metrics["train/format/rollouts_with_malformed"] == 0.5


def test_tool_output_is_not_counted_as_model_calls() -> None:
    echoed = GOOD.replace("{}", GARBAGE)  # a tool echoing a malformed call back
    report = format_drift([echoed])
    assert report.calls == 1
    assert report.malformed_calls == 0


def test_empty_batch_and_batches_without_calls_have_zero_rate() -> None:
    assert format_drift([]).malformed_rate == 0.0
    assert format_drift(["hello"]).to_metrics()["train/format/malformed_rate"] == 0.0


def test_rate_tracks_the_malformed_share_of_a_generated_batch() -> None:
    clean = format_drift(s.transcript for s in make_samples(200, seed=1, malformed_share=0.0))
    drifted = format_drift(s.transcript for s in make_samples(200, seed=1, malformed_share=0.6))
    assert clean.malformed_rate == 0.0
    assert drifted.malformed_rate > 0.15


def test_stop_rule_needs_a_sustained_climb() -> None:
    assert not is_drifting([0.5, 0.01, 0.5, 0.5], threshold=0.2, patience=3)
    assert is_drifting([0.01, 0.3, 0.4, 0.5], threshold=0.2, patience=3)
    assert not is_drifting([0.9, 0.9], threshold=0.2, patience=3)


def test_with_a_margin_the_bar_is_a_climb_from_where_the_run_started() -> None:
    """The time pack's weak seed-1 start: 65-67% malformed from its first GRPO step, which
    the absolute 0.6 bar stopped after 3 steps while GRPO was working it down."""
    weak_start = [0.647, 0.667, 0.667]
    assert is_drifting(weak_start, threshold=0.6, patience=3)  # the absolute bar alone
    assert not is_drifting(weak_start, threshold=0.6, patience=3, margin_over_start=0.1)
    # the same start climbing past its own rate plus the margin is drift
    assert is_drifting([0.647, 0.76, 0.8, 0.85], 0.6, 3, margin_over_start=0.1)
    # a clean start: the margin is below the threshold, so the threshold is the bar
    assert is_drifting([0.05, 0.65, 0.7, 0.75], 0.6, 3, margin_over_start=0.1)
    assert not is_drifting([0.05, 0.55, 0.58, 0.59], 0.6, 3, margin_over_start=0.1)
    assert not is_drifting([], 0.6, 3, margin_over_start=0.1)


def test_the_margin_is_bounded_and_can_be_turned_off() -> None:
    from pydantic import ValidationError

    from training.spec.model import DriftSection

    assert DriftSection().margin_over_start == 0.1
    assert DriftSection(margin_over_start=None).margin_over_start is None
    for bad in (-0.1, 1.5, "wide"):
        with pytest.raises(ValidationError):
            DriftSection(margin_over_start=bad)
