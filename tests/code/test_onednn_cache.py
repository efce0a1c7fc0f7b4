"""oneDNN's primitive cache is sized by the training process (`onednn_cache.py`): the
variable is set where none was chosen, a user's choice wins, a bad one is reported, and
(in a real process, with oneDNN's own verbose log) a primitive built 1,400 entries ago is
still cached only when the capacity was raised."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from testkit.processes import run_testkit_module
from training.cpu_backend.onednn_cache import (
    CAPACITY_VARIABLE,
    ONEDNN_DEFAULT,
    size_primitive_cache,
)
from training.spec.model import CpuSection

REPO = Path(__file__).resolve().parents[2]


def test_a_capacity_is_set_where_none_was_chosen() -> None:
    environ: dict[str, str] = {}
    assert size_primitive_cache(16_384, environ) == 16_384
    assert environ == {CAPACITY_VARIABLE: "16384"}


def test_a_capacity_the_user_chose_wins() -> None:
    environ = {CAPACITY_VARIABLE: "1024"}
    assert size_primitive_cache(16_384, environ) == 1024
    assert environ == {CAPACITY_VARIABLE: "1024"}


def test_none_leaves_onednn_its_default() -> None:
    environ: dict[str, str] = {}
    assert size_primitive_cache(None, environ) == ONEDNN_DEFAULT
    assert environ == {}


@pytest.mark.parametrize("value", ["lots", "", "1e4", "12; rm -rf /"])
def test_a_malformed_user_value_is_reported_and_left_alone(
    value: str, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {CAPACITY_VARIABLE: value}
    with caplog.at_level(logging.WARNING, logger="toolrl.cpu.onednn_cache"):
        assert size_primitive_cache(16_384, environ) == ONEDNN_DEFAULT
    assert environ == {CAPACITY_VARIABLE: value}  # never overwritten behind the user's back
    assert CAPACITY_VARIABLE in caplog.text and "whole number" in caplog.text


def test_the_spec_leaves_onednns_default_and_refuses_nonsense() -> None:
    assert CpuSection().onednn_primitive_cache is None  # the demo's peak memory (model.py)
    assert CpuSection(onednn_primitive_cache=65_536).onednn_primitive_cache == 65_536
    for bad in (0, -5, 10**9, "many", 2.5):
        with pytest.raises(ValidationError):
            CpuSection(onednn_primitive_cache=bad)


def _cached_again(argument: str) -> bool:
    """Run the probe process; whether its last convolution was a cache hit."""
    done = run_testkit_module(
        "onednn_cache_probe",
        argument,
        drop=[CAPACITY_VARIABLE],
        extra={"ONEDNN_VERBOSE": "profile_create"},
    )
    after = done.stdout.split("AGAIN", 1)[1]
    convolutions = [line for line in after.splitlines() if ",convolution," in line]
    assert convolutions, f"oneDNN built no convolution after the marker:\n{after[:2000]}"
    return "create:cache_hit" in convolutions[0]


def test_a_raised_capacity_keeps_a_primitive_the_default_evicts() -> None:
    """Real oneDNN, two processes: the control shows the default really evicts it, so the
    raised capacity is what keeps it."""
    assert not _cached_again("none")
    assert _cached_again("4096")
