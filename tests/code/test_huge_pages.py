"""2 MiB pages for the training process (`training/cpu_backend/huge_pages.py`): the kernel's
mode and the process's huge-page memory read from procfs (and from hostile files), the
environment a restart adds, when a restart happens, and a real restart of a real process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.processes import run_testkit_module
from training.cpu_backend.huge_pages import (
    GLIBC_HUGETLB,
    RESTARTED,
    TORCH_SWITCH,
    TUNABLES,
    anon_huge_pages_kib,
    huge_page_env,
    huge_page_note,
    should_restart,
    thp_mode,
)
from training.jobs.entry import wants_huge_pages
from training.spec.model import CpuSection

REPO = Path(__file__).resolve().parents[2]
DEMO_SPEC = REPO / "training" / "specs" / "cpu_smollm2.yaml"
BOTH = {TORCH_SWITCH: "1", TUNABLES: f"{GLIBC_HUGETLB}=1"}


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never\n", "always"),
        ("always madvise [never]\n", "never"),
        ("", None),
        ("no brackets here", None),
        ("] backwards [", None),
        ("\x00\x01[", None),
    ],
)
def test_the_kernel_mode_is_read_from_its_brackets(tmp_path: Path, text: str, mode: str) -> None:
    setting = tmp_path / "enabled"
    setting.write_text(text)
    assert thp_mode(str(setting)) == mode


def test_no_kernel_file_reads_as_no_mode(tmp_path: Path) -> None:
    assert thp_mode(str(tmp_path / "missing")) is None
    assert thp_mode(str(tmp_path)) is None  # a directory
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe[madvise]")
    assert thp_mode(str(binary)) is None  # not ASCII: unreadable, not a crash


@pytest.mark.parametrize(
    ("text", "kib"),
    [
        ("Rss: 10 kB\nAnonHugePages:   4096 kB\n", 4096),
        ("Rss: 10 kB\n", 0),
        ("AnonHugePages: lots kB\n", None),
        ("AnonHugePages:\n", None),
    ],
)
def test_huge_page_memory_is_read_or_refused(tmp_path: Path, text: str, kib: int | None) -> None:
    rollup = tmp_path / "smaps_rollup"
    rollup.write_text(text)
    assert anon_huge_pages_kib(str(rollup)) == kib


def test_this_process_reports_a_number_where_there_is_procfs() -> None:
    value = anon_huge_pages_kib()
    assert value is None or value >= 0
    assert anon_huge_pages_kib("/nonexistent/smaps_rollup") is None


def test_an_empty_environment_gets_both_switches() -> None:
    assert huge_page_env({}) == BOTH


def test_an_environment_with_both_needs_nothing() -> None:
    assert huge_page_env(BOTH) == {}
    assert (
        huge_page_env({TORCH_SWITCH: "1", TUNABLES: f"glibc.malloc.arena_max=2:{GLIBC_HUGETLB}=1"})
        == {}
    )


def test_a_users_other_tunables_are_kept_and_an_off_switch_is_turned_on() -> None:
    env = {TORCH_SWITCH: "0", TUNABLES: f"glibc.malloc.arena_max=2:{GLIBC_HUGETLB}=0"}
    assert huge_page_env(env) == {
        TORCH_SWITCH: "1",
        TUNABLES: f"glibc.malloc.arena_max=2:{GLIBC_HUGETLB}=1",
    }
    # stray separators are not kept as empty tunables
    assert huge_page_env({TORCH_SWITCH: "1", TUNABLES: "::"}) == {TUNABLES: f"{GLIBC_HUGETLB}=1"}


@pytest.mark.parametrize(
    ("wanted", "environ", "mode", "restart"),
    [
        (True, {}, "madvise", True),
        (False, {}, "madvise", False),  # the spec said no
        (True, {}, "always", False),  # the kernel gives huge pages unasked
        (True, {}, "never", False),  # the kernel refuses them: a restart buys nothing
        (True, {}, None, False),  # no such kernel file (not Linux, a container without sysfs)
        (True, BOTH, "madvise", False),  # started with them
        (True, {RESTARTED: "1"}, "madvise", False),  # never a second restart
        (True, {TORCH_SWITCH: "1"}, "madvise", True),  # glibc's is read at start only
    ],
)
def test_a_restart_happens_only_where_it_can_help(
    wanted: bool, environ: dict[str, str], mode: str | None, restart: bool
) -> None:
    assert should_restart(wanted, environ, mode) is restart


def test_a_process_started_without_them_is_told_how(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TORCH_SWITCH, raising=False)
    monkeypatch.delenv(TUNABLES, raising=False)
    monkeypatch.delenv(RESTARTED, raising=False)
    note = huge_page_note(True)
    if thp_mode() == "madvise":
        assert note is not None and f"{TORCH_SWITCH}=1" in note and "cpu.huge_pages" in note
    else:
        assert note is None
    assert huge_page_note(False) is None


def test_the_spec_asks_for_them_by_default_and_takes_a_plain_no() -> None:
    assert CpuSection().huge_pages is True
    assert CpuSection.model_validate({"huge_pages": False}).huge_pages is False
    with pytest.raises(ValueError, match="huge_pages"):
        CpuSection.model_validate({"huge_pages": "sometimes"})


def test_only_a_cpu_job_whose_spec_asks_restarts(tmp_path: Path) -> None:
    common = ["--run-key", "k", "--workdir", str(tmp_path)]
    assert wants_huge_pages(["--spec", str(DEMO_SPEC), "--backend", "cpu", *common])
    assert not wants_huge_pages(["--spec", str(DEMO_SPEC), "--backend", "verl", *common])
    off = tmp_path / "off.yaml"
    off.write_text(
        DEMO_SPEC.read_text().replace("  mcp: embedded\n", "  mcp: embedded\n  huge_pages: false\n")
    )
    assert not wants_huge_pages(["--spec", str(off), "--backend", "cpu", *common])
    # a spec that does not load: no restart here, the driver's own run reports the error
    assert not wants_huge_pages(
        ["--spec", str(tmp_path / "missing.yaml"), "--backend", "cpu", *common]
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("cpu: [unclosed\n")
    assert not wants_huge_pages(["--spec", str(broken), "--backend", "cpu", *common])


def _probe(argument: str) -> list[dict[str, object]]:
    done = run_testkit_module(
        "huge_page_probe", argument, drop=[TORCH_SWITCH, TUNABLES, RESTARTED], timeout_s=120
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.skipif(thp_mode() != "madvise", reason="the kernel's THP mode is not madvise here")
def test_a_real_process_restarts_itself_once_with_both_switches() -> None:
    lines = _probe("on")
    starts = [line for line in lines if line["phase"] == "start"]
    working = [line for line in lines if line["phase"] == "working"]
    assert len(starts) == 2 and len(working) == 1  # started, restarted once, then worked
    assert starts[0]["pid"] == starts[1]["pid"] == working[0]["pid"]  # replaced, not forked
    assert working[0]["restarted"] is True
    assert working[0]["torch_switch"] is True and working[0]["glibc_hugetlb"] is True
    assert working[0]["sum"] == 64 * 2**20 / 4  # the restarted process did its work


def test_a_process_that_does_not_ask_is_left_alone() -> None:
    lines = _probe("off")
    assert [line["phase"] for line in lines] == ["start", "working"]
    assert lines[1]["restarted"] is False and lines[1]["torch_switch"] is False


def test_a_binary_rollup_reads_as_unknown(tmp_path: Path) -> None:
    rollup = tmp_path / "smaps_rollup"
    rollup.write_bytes(b"AnonHugePages: \xff\xfe kB\n")
    assert anon_huge_pages_kib(str(rollup)) is None
