"""`cpu.dtype: auto`: bf16 only where the CPU multiplies it natively, pinned per run.

Measured reason (`benchmarks/results/sft_step_avx2.json`): on an AVX2-only CPU the demo's SFT
step took 343 s in emulated bf16 against 27 s in float32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from training.cpu_backend.compute_dtype import PIN_FILE, choose, cpu_flags, pinned_choice
from training.cpu_backend.precision import torch_dtype
from training.spec.model import CpuSection

AVX2 = frozenset({"fpu", "sse4_2", "avx", "avx2", "fma"})
SAPPHIRE_RAPIDS = AVX2 | {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}


def test_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma\n\n"
        "processor\t: 1\nflags\t\t: fpu avx avx2 fma amx_bf16\n",
        encoding="utf-8",
    )
    assert cpu_flags(info) == {"fpu", "avx", "avx2", "fma"}  # the first processor's
    assert cpu_flags(tmp_path / "absent") == frozenset()  # not Linux: nothing native
    (tmp_path / "garbage").write_bytes(b"\xff\xfe no flags line \x00")
    assert cpu_flags(tmp_path / "garbage") == frozenset()


def test_auto_takes_bf16_only_where_it_is_native() -> None:
    assert choose("auto", SAPPHIRE_RAPIDS).dtype == "bfloat16"
    assert choose("auto", AVX2 | {"avx512_bf16"}).dtype == "bfloat16"
    emulated = choose("auto", AVX2)
    assert emulated.dtype == "float32" and "no native bf16" in emulated.reason
    assert choose("auto", frozenset()).dtype == "float32"


def test_an_explicit_dtype_is_kept_and_emulated_bf16_says_so() -> None:
    assert choose("float32", SAPPHIRE_RAPIDS).dtype == "float32"
    forced = choose("bfloat16", AVX2)
    assert forced.dtype == "bfloat16" and "emulated" in forced.reason and "auto" in forced.reason
    assert "emulated" not in choose("bfloat16", SAPPHIRE_RAPIDS).reason
    with pytest.raises(ValueError, match="auto, float32 or bfloat16"):
        choose("float16", AVX2)


def test_the_choice_is_pinned_when_a_run_starts_and_kept_on_resume(tmp_path: Path) -> None:
    first = pinned_choice("auto", tmp_path, SAPPHIRE_RAPIDS)
    assert first.dtype == "bfloat16"
    assert json.loads((tmp_path / PIN_FILE).read_text())["dtype"] == "bfloat16"
    # resumed on a machine without native bf16: the checkpoints' dtype wins
    assert pinned_choice("auto", tmp_path, AVX2) == first
    assert pinned_choice("bfloat16", tmp_path, AVX2) == first


def test_a_pin_that_contradicts_the_spec_is_refused(tmp_path: Path) -> None:
    pinned_choice("auto", tmp_path, AVX2)  # float32
    with pytest.raises(ValueError, match=r"started in float32.*new checkpoint\.run_dir"):
        pinned_choice("bfloat16", tmp_path, SAPPHIRE_RAPIDS)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"requested": "auto"}',
        '{"requested": "auto", "dtype": "float64", "reason": "x"}',
        '{"requested": "auto", "dtype": ["bfloat16"], "reason": "x"}',
    ],
)
def test_a_damaged_pin_is_a_clear_error(tmp_path: Path, content: str) -> None:
    (tmp_path / PIN_FILE).write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=PIN_FILE):
        pinned_choice("auto", tmp_path, AVX2)


def test_the_spec_accepts_auto_and_nothing_unresolved_reaches_torch() -> None:
    assert CpuSection(dtype="auto").dtype == "auto"
    with pytest.raises(ValidationError):
        CpuSection(dtype="float16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not resolved"):
        torch_dtype("auto")
