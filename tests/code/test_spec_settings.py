"""`with_settings`: one spec varied by `section.field=value` assignments (benchmarks, the
demo's budget), validated again; malformed and hostile assignments are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.spec.model import SpecError, load_spec, with_settings

SPEC = load_spec(Path(__file__).resolve().parents[2] / "training" / "specs" / "cpu_smollm2.yaml")


def test_assignments_change_only_their_fields() -> None:
    changed = with_settings(SPEC, ["cpu.sft_steps=40", "cpu.resample_rounds=1"])
    assert (changed.cpu.sft_steps, changed.cpu.resample_rounds) == (40, 1)
    assert changed.model_copy(update={"cpu": SPEC.cpu}) == SPEC
    assert with_settings(SPEC, []) == SPEC


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("cpu.nope=1", "no field 'nope'"),
        ("cpu.sft_steps=-1", "greater than or equal to 0"),
        ("x", "expected section.field=value"),
        ("=3", "expected section.field=value"),
        ("cpu.sft_steps.x=1", "is not a section"),
        ("cpu.sft_steps=[", "is not YAML"),
        ("cpu.sft_steps=!!python/object:os.system ls", "is not YAML"),  # never constructed
        ("cpu.resample_rounds=99", "less than or equal to 8"),
    ],
)
def test_bad_assignments_are_clear_errors(assignment: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        with_settings(SPEC, [assignment])
