"""Task packs that cannot be used are refused with errors that say where and why: malformed
files, hostile YAML (size, nesting, alias bombs, tags, duplicate keys), and packs that do
not fit the real `mcp-server-time`'s tools (unknown tools, arguments that do not fill the
schema, chains that point nowhere, unknown slots). Also the safe reference evaluator."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from serving.mcp_client.stdio import StdioMcpClient
from training.data.packs.check import check_pack
from training.data.packs.loader import MAX_PACK_BYTES, PackError, load_pack, parse_pack_text
from training.data.packs.refs import ExecutedCall, RefError, fill, parse_ref, render_text
from training.data.packs.split import held_out

BUILTIN = Path(__file__).resolve().parents[2] / "training" / "data" / "packs" / "builtin"


@pytest.fixture(scope="module")
def time_tools() -> dict[str, Mapping[str, Any]]:
    """The real mcp-server-time's tools/list (name -> inputSchema)."""

    async def listed() -> list[dict[str, Any]]:
        async with StdioMcpClient("time", sys.executable, ["-m", "mcp_server_time"]) as client:
            return await client.list_tools()

    return {t["name"]: t["inputSchema"] for t in asyncio.run(listed())}


GOOD = """\
pack: t
server: time
pools:
  city:
    - {name: Tokyo, tz: Asia/Tokyo}
    - {name: Paris, tz: Europe/Paris}
intents:
  - name: now_then_convert
    category: multi_step
    slots:
      src: {pool: city}
      dst: {pool: city, distinct_from: [src]}
    phrasings:
      en:
        a: "Time in {src.name}, then in {dst.name}?"
        b: "What is the {src.name} time now in {dst.name}?"
    steps:
      - tool: get_current_time
        arguments: {timezone: "{src.tz}"}
      - tool: convert_time
        arguments:
          source_timezone: "{src.tz}"
          time: "$steps[0].result.datetime | hhmm"
          target_timezone: "{dst.tz}"
    answers: ["$steps[1].result.target.datetime | hhmm"]
"""


def problems_of(text: str, tools: Mapping[str, Mapping[str, Any]]) -> str:
    loaded = parse_pack_text(text, Path("pack.yaml"))
    return "\n".join(check_pack(loaded, tools))


def load_error(text: str) -> str:
    with pytest.raises(PackError) as caught:
        parse_pack_text(text, Path("pack.yaml"))
    return str(caught.value)


def test_the_shipped_packs_and_a_good_pack_pass(time_tools: dict[str, Any]) -> None:
    assert problems_of(GOOD, time_tools) == ""
    assert check_pack(load_pack(BUILTIN / "time.yaml"), time_tools) == []
    load_pack(BUILTIN / "memory.yaml")  # its server's check runs in the integration test


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("tool: convert_time", "tool: convert_times"), "unknown tool 'convert_times'"),
        (("$steps[0].result", "$steps[1].result"), "points to step 1, which is not an earlier"),
        (("$steps[0].result.datetime", "$steps[5].result.datetime"), "not an earlier step"),
        (
            ('answers: ["$steps[1]', 'answers: ["$steps[2]'),
            "points to step 2; the intent has 2 step(s)",
        ),
        (('{src.tz}"}', '{city.tz}"}'), "unknown slot {city}"),
        (('{dst.name}?"\n        b', '{dst.nom}?"\n        b'), "have no field 'nom'"),
        (("pool: city}\n      dst", "pool: cities}\n      dst"), "unknown pool 'cities'"),
        (('| hhmm"\n          target', '| shell"\n          target'), "unknown filter 'shell'"),
        (
            ('time: "$steps[0].result.datetime | hhmm"', 'time: "at ${steps[1].result.datetime}"'),
            "points to step 1, which is not an earlier",
        ),
        (('timezone: "{src.tz}"', "timezone: 7"), "7 is not of type 'string'"),
        (('timezone: "{src.tz}"', "zone: x"), "'timezone' is a required property"),
        (('        b: "What is the {src.name} time now in {dst.name}?"\n', ""), "one phrasing"),
        (("src: {pool: city}", "src: {range: {min: 0, max: 999999999999}}"), "range of integers"),
        (
            (
                'b: "What is the {src.name} time now in {dst.name}?"',
                'b: "TIME in {dst.name} then in {src.tz}!"',
            ),
            "template en/b has the same text as now_then_convert/en/a",
        ),
    ],
)
def test_pack_problems_name_the_line_intent_and_cause(
    time_tools: dict[str, Any], edit: tuple[str, str], expected: str
) -> None:
    old, new = edit
    assert old in GOOD
    report = problems_of(GOOD.replace(old, new, 1), time_tools)
    assert expected in report, report
    assert "pack.yaml:" in report and "intent 'now_then_convert'" in report


def test_a_typed_shape_error_names_file_line_and_field() -> None:
    message = load_error(GOOD.replace("phrasings:", "phrasing:"))
    assert "pack.yaml:8: intents[0] (now_then_convert)" in message
    assert "phrasing: Extra inputs are not permitted" in message
    assert "phrasings: Field required" in message
    message = load_error(GOOD.replace('a: "Time in {src.name}, then in {dst.name}?"', 'a: "  "'))
    assert "phrasings.en.a is empty" in message
    assert "exactly one of `values`, `range` or `pool`" in load_error(
        GOOD.replace("src: {pool: city}", "src: {pool: city, values: [1]}")
    )
    assert "has exactly one step" in load_error(GOOD.replace("multi_step", "single"))
    assert "no `steps`" in load_error(GOOD.replace("multi_step", "irrelevance"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &x [1, 2]\nb: *x\n", "aliases (*name) are not allowed"),
        (
            'a: &a ["lol","lol"]\nb: &b [*a,*a]\nc: &c [*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c]\n',
            "aliases",
        ),
        ("x: " + "[" * 5_000 + "]" * 5_000 + "\n", "nesting deeper than 32"),
        (
            "x: !!python/object/apply:os.system ['echo owned']\n",
            "could not determine a constructor",
        ),
        ("pack: a\npack: b\n", "duplicate key 'pack'"),
        ("- just\n- a list\n", "a pack is a mapping"),
        ("pack: [unclosed\n", "not a usable YAML pack"),
        ("", "a pack is a mapping"),
        ("? [a, b]\n: 1\n", "mapping key must be a plain value"),
    ],
)
def test_hostile_yaml_is_a_clear_error_fast(text: str, expected: str) -> None:
    started = time.monotonic()
    assert expected in load_error(text)
    assert time.monotonic() - started < 2.0


def test_huge_and_non_utf8_files_are_refused_before_parsing(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text("x: " + "a" * (MAX_PACK_BYTES + 1))
    with pytest.raises(PackError, match="over 1024 KiB"):
        load_pack(huge)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"pack: \xff\xfe\n")
    with pytest.raises(PackError, match="not UTF-8"):
        load_pack(binary)
    with pytest.raises(PackError, match="cannot read the pack"):
        load_pack(tmp_path / "missing.yaml")
    many = tmp_path / "many.yaml"
    many.write_text("x: [" + "0," * 150_000 + "0]\n")
    started = time.monotonic()
    with pytest.raises(PackError, match="more than 100000 YAML nodes"):
        load_pack(many)
    assert time.monotonic() - started < 10.0


def test_references_and_templates_fill_without_eval() -> None:
    steps = [
        [ExecutedCall({"timezone": "Asia/Tokyo"}, {"datetime": "2026-12-02T05:08:16+09:00"})],
        [
            ExecutedCall({}, {"value": [{"name": "Ada"}, {"name": "Grace"}]}),
            ExecutedCall({}, {"target": {"datetime": "2026-12-01T21:08:00+01:00"}}),
        ],
    ]
    assert fill("$steps[0].result.datetime | hhmm", {}, steps) == "05:08"
    assert fill("$steps[1].calls[0].result.value[*].name", {}, steps) == ["Ada", "Grace"]
    assert fill("$steps[1].calls[0].result.value[-1]['name'] | upper", {}, steps) == "GRACE"
    assert fill("$steps[0].arguments.timezone", {}, steps) == "Asia/Tokyo"
    assert fill({"n": "{count}", "s": "{h:02d}:{m:02d}"}, {"count": 3, "h": 7, "m": 5}) == {
        "n": 3,
        "s": "07:05",
    }
    assert fill("$$5 flat", {}) == "$5 flat" and fill("$5 flat", {}) == "$5 flat"
    spliced = (
        "${steps[0].result.datetime | hhmm} in {city}, ${steps[1].calls[0].result.value | len}"
    )
    assert fill(spliced, {"city": "Tokyo"}, steps) == "05:08 in Tokyo, 2"
    assert fill("${{not a ref}} {n}", {"n": 2.0}) == "${not a ref} 2.0"
    assert fill("${steps[0].arguments.timezone | lower}", {}, steps) == "asia/tokyo"
    assert render_text("{{literal}} {x}", {"x": 1}) == "{literal} 1"
    for hostile, message in [
        ("$steps[0].result.__class__", "no key '__class__'"),
        ("$steps[1].result.x", "has 2 calls; use .calls"),
        ("$steps[0].result.datetime | __import__", "unknown filter"),
        ("$steps[3].result", "has not run yet"),
        ("$os.system('x')", "a reference starts"),
    ]:
        with pytest.raises(RefError, match=message):
            fill(hostile, {}, steps)
    with pytest.raises(RefError, match="stray"):
        render_text("{x.__class__.__init__}", {"x": 1})
    with pytest.raises(RefError, match="stray"):
        render_text("{x:{y}}", {"x": 1, "y": 2})
    with pytest.raises(RefError, match="not allowed"):
        render_text("{x:!r}", {"x": 1})
    with pytest.raises(RefError, match="not allowed"):  # a gigabyte of padding
        render_text("{x:999999999d}", {"x": 1})
    assert parse_ref("$steps[2].calls[1].result.a[0]").step == 2


def test_a_quarter_of_each_intents_templates_is_held_out_stably() -> None:
    ids = [f"p/i/en/t{k}" for k in range(8)]
    test = held_out(ids)
    assert len(test) == 2
    assert held_out(list(reversed(ids))) == test
    assert len(held_out(ids[:2])) == 1 and held_out(ids[:1]) == set()
