"""The pack features the built-in tools' port needs, fed good and hostile input: pools read
from shipped JSON files (bad names, traversal, symlinks out, wrong shapes), decimal ranges,
template / computed / lookup / one_of slots, field-wise `distinct_from`, `after`, session
tools and the project-server source. Every refusal is a PackError or a check problem that
names the pack line, intent and slot; nothing crashes and nothing is evaluated as code.

Tool schemas come from the project's own catalog (what its MCP server lists), in-process.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from serving.tools import get_catalog
from serving.tools.providers import load_world
from training.data.packs.check import check_pack
from training.data.packs.loader import PackError, load_pack, parse_pack_text
from training.data.packs.plan import with_chinese_fraction
from training.data.packs.pool_files import MAX_POOL_FILE_BYTES, PROJECT_DATA_DIR
from training.data.packs.server import pack_sources
from training.data.packs.slot_model import PoolFile
from training.data.packs.slots import SlotError, draw_slots

HEAD = """\
pack: t
server: toolrl
pools:
{pools}
intents:
  - name: probe
    category: single
    slots:
{slots}
    phrasings:
      en:
        a: "{text}"
        b: "Please: {text}"
    steps:
      - tool: {tool}
        arguments: {arguments}
"""


def tools() -> dict[str, Any]:
    return {
        s["function"]["name"]: s["function"]["parameters"] for s in get_catalog().openai_schemas()
    }


def pack_text(
    slots: str,
    text: str = "Weather in {city}?",
    arguments: str = '{location: "{city}"}',
    tool: str = "get_current_weather",
    pools: str = "  city: {file: world.json, path: cities}",
) -> str:
    return HEAD.format(pools=pools, slots=slots, text=text, arguments=arguments, tool=tool)


CITY_SLOTS = '      c: {pool: city}\n      city: {template: "{c.name}"}'


def load(text: str, folder: Path | None = None) -> Any:
    path = (folder or Path("/nonexistent-pack-dir")) / "pack.yaml"
    return parse_pack_text(text, path)


def load_error(text: str, folder: Path | None = None) -> str:
    with pytest.raises(PackError) as caught:
        load(text, folder)
    return str(caught.value)


def draws(text: str, n: int = 200, lang: str = "en") -> list[dict[str, Any]]:
    loaded = load(text)
    rng = random.Random(0)
    return [draw_slots(loaded.spec.intents[0], loaded.spec, lang, rng) for _ in range(n)]


# ---- pools from files ------------------------------------------------------------------------
def test_a_file_pool_is_the_shipped_world_data_and_its_digest_is_kept() -> None:
    loaded = load(pack_text(CITY_SLOTS))
    assert loaded.spec.pools["city"] == load_world()["cities"]
    assert set(loaded.data_files) == {"world.json"} and len(loaded.data_files["world.json"]) == 64
    assert check_pack(loaded, tools()) == []
    keys = load(pack_text(CITY_SLOTS, pools=CITY_POOL + "\n  cur: " + CUR_POOL))
    assert keys.spec.pools["cur"] == list(load_world()["usd_rates"])


CITY_POOL = "  city: {file: world.json, path: cities}"
CUR_POOL = "{file: world.json, path: usd_rates, items: keys}"


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        ("{file: ../serving/data/world.json, path: cities}", "pools.city.file"),
        ("{file: /etc/passwd.json, path: cities}", "String should match pattern"),
        ("{file: .hidden.json, path: cities}", "String should match pattern"),
        ("{file: world.yaml, path: cities}", "String should match pattern"),
        ("{file: missing.json, path: cities}", "no file 'missing.json'"),
        ("{file: world.json, path: towns}", "world.json has no key 'towns' at the top level"),
        ("{file: world.json, path: cities.name}", "has no key 'name' at cities"),
        ("{file: world.json, path: usd_rates}", "is a mapping; say `items: keys`"),
        ("{file: world.json, path: cities, items: keys}", "is a list; `items:` is for mappings"),
        ("{file: world.json, path: snapshot}", "is a str, not a list or mapping"),
        ("{file: world.json, path: cities, items: all}", "Input should be 'keys' or 'values'"),
        ("{file: world.json, path: cities, where: x}", "Extra inputs are not permitted"),
        ("{file: world.json, path: 'a..b'}", "String should match pattern"),
    ],
)
def test_a_bad_file_pool_is_refused_naming_the_pool(pool: str, expected: str) -> None:
    message = load_error(pack_text(CITY_SLOTS, pools=f"  city: {pool}"))
    assert expected in message, message
    assert "pack.yaml:" in message and "pools.city" in message


def test_a_file_pool_is_read_only_inside_the_pack_folder_or_the_project_data(
    tmp_path: Path,
) -> None:
    (tmp_path / "mine.json").write_text(json.dumps({"towns": [{"name": "Paris"}]}))
    loaded = load(pack_text(CITY_SLOTS, pools="  city: {file: mine.json, path: towns}"), tmp_path)
    assert loaded.spec.pools["city"] == [{"name": "Paris"}]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps({"towns": [{"name": "x"}]}))
    pack_dir = tmp_path / "pack"
    pack_dir.mkdir()
    (pack_dir / "link.json").symlink_to(outside / "secret.json")
    message = load_error(
        pack_text(CITY_SLOTS, pools="  city: {file: link.json, path: towns}"), pack_dir
    )
    assert "resolves outside" in message and "pools.city" in message
    (pack_dir / "bad.json").write_text("{not json")
    assert "is not JSON text" in load_error(
        pack_text(CITY_SLOTS, pools="  city: {file: bad.json, path: towns}"), pack_dir
    )
    (pack_dir / "big.json").write_bytes(b" " * (MAX_POOL_FILE_BYTES + 1))
    assert "over" in load_error(
        pack_text(CITY_SLOTS, pools="  city: {file: big.json, path: towns}"), pack_dir
    )
    (pack_dir / "empty.json").write_text(json.dumps({"towns": []}))
    assert "is empty" in load_error(
        pack_text(CITY_SLOTS, pools="  city: {file: empty.json, path: towns}"), pack_dir
    )
    (pack_dir / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "is not JSON text" in load_error(
        pack_text(CITY_SLOTS, pools="  city: {file: deep.json, path: towns}"), pack_dir
    )
    assert (PROJECT_DATA_DIR / "world.json").is_file()
    assert PoolFile(file="world.json", path="cities").items is None


# ---- ranges --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("slot", "expected"),
    [
        ('{range: {min: "5", max: 9}}', "slots.v.range.min"),
        ("{range: {min: abc, max: 9}}", "Input should be a valid"),
        ("{range: {min: 1, max: .inf, round: 1}}", "finite number"),
        ("{range: {min: true, max: 9}}", "Input should be a valid"),
        ("{range: {min: 0.5, max: 9}}", "range min 0.5 is not an integer"),
        ("{range: {min: 1, max: 9, round: 1, step: 2}}", "a `round` range has no step"),
        ("{range: {min: 1, max: 9, round: 40}}", "less than or equal to 6"),
        ("{range: {min: 9, max: 1}}", "range max (1) is below min (9)"),
        ("{range: {min: 1, max: 9}, round: 2}", "`round` here is only for `compute`"),
    ],
)
def test_a_bad_range_is_refused_naming_the_slot(slot: str, expected: str) -> None:
    text = pack_text(
        f"      v: {slot}",
        "Convert {v} km.",
        '{value: "{v}", from_unit: km, to_unit: mile}',
        "unit_converter",
    )
    message = load_error(text)
    assert expected in message, message
    assert "intents[0] (probe).slots.v" in message


def test_a_decimal_range_draws_rounded_values_in_bounds() -> None:
    text = pack_text(
        "      v: {range: {min: 0.5, max: 3, round: 1}}",
        "Convert {v} km.",
        '{value: "{v}", from_unit: km, to_unit: mile}',
        "unit_converter",
    )
    values = [d["v"] for d in draws(text, 500)]
    assert all(0.5 <= v <= 3 and round(v, 1) == v for v in values)
    assert {type(v) for v in values} == {int, float}  # 1.0, 2.0, 3.0 come back as integers
    assert all(isinstance(v, int) for v in values if float(v).is_integer())
    assert len(set(values)) > 15
    assert check_pack(load(text), tools()) == []


# ---- slots made from slots -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("slots", "expected"),
    [
        (
            '      city: {template: "{c.name}"}\n      c: {pool: city}',
            "slot 'city' is made from {c}",
        ),
        ('      city: {template: "{zz}"}', "{zz} (no such slot)"),
        ('      city: {template: "{city}x"}', "slot 'city' is made from itself"),
        ('      city: {compute: "{n}+1"}', "{n} (no such slot)"),
        ("      city: {lookup: {slot: c, key: name}}", "{c} (no such slot)"),
        ('      city: {template: "{c"}', "stray '{'"),
        ('      city: {template: "{c:99999d}"}', "is not allowed"),
        ("      city: {template: []}", "`template` has an empty list"),
        ('      city: {template: "x", case: title}', "Input should be 'lower' or 'upper'"),
        ("      city: {values: [a], case: lower}", "`case` is only for `template`"),
        ("      city: {one_of: [{values: [a]}]}", "at least 2 items"),
        (
            "      city: {one_of: [{values: [a]}, {values: [b], distinct_from: [x]}]}",
            "a `one_of` alternative is a plain source",
        ),
        ("      city: {values: [a], after: later}\n      later: {values: [b]}", "`after: later`"),
        ("      city: {pool: city, template: x}", "exactly one of `values`, `range` or `pool`"),
        ("      city: {eval: '1+1'}", "Extra inputs are not permitted"),
    ],
)
def test_a_slot_made_from_unknown_or_later_slots_is_refused(slots: str, expected: str) -> None:
    message = load_error(pack_text(slots))
    assert expected in message, message
    assert "pack.yaml:" in message and "(probe)" in message


def test_templates_computes_lookups_and_one_of_draw_from_earlier_slots() -> None:
    slots = "\n".join(
        [
            "      r: {range: {min: 2, max: 200}}",
            '      square: {compute: "{r}**2"}',
            '      half: {compute: "{r}/3", round: 2}',
            "      pick: {one_of: [{values: [x]}, {range: {min: 50, max: 100, step: 50}}]}",
            '      expr: {template: ["sqrt({square})+1", "{r}*{r}"]}',
            "      lang: {values: [{key: french}, {key: german}]}",
            "      phrase: {pool: phrase}",
            '      word: {lookup: {slot: phrase, key: "{lang.key}"}}',
            '      shout: {template: "{word}!", case: upper}',
        ]
    )
    text = pack_text(
        slots,
        "What is {expr}? Say {shout}",
        '{expression: "{expr}"}',
        "calculate_math",
        pools="  phrase: {file: world.json, path: phrasebook, items: values}",
    )
    drawn = draws(text, 300)
    assert all(d["square"] == d["r"] ** 2 and isinstance(d["square"], int) for d in drawn)
    assert all(d["half"] == round(d["r"] / 3, 2) for d in drawn)
    assert Counter(str(d["pick"]) for d in drawn).keys() == {"x", "50", "100"}
    assert {d["expr"] == f"sqrt({d['square']})+1" for d in drawn} == {True, False}
    assert all(d["word"] == d["phrase"][d["lang"]["key"]] for d in drawn)
    assert all(d["shout"] == f"{d['word']}!".upper() for d in drawn)
    assert check_pack(load(text), tools()) == []


@pytest.mark.parametrize(
    ("compute", "expected"),
    [
        ("__import__('os').system('true')", "only these functions are allowed"),
        ("{r}**99999", "exponent too large"),
        ("{r}/0", "division by zero"),
        ("().__class__", "compute"),
    ],
)
def test_a_hostile_compute_is_a_slot_error_not_code(compute: str, expected: str) -> None:
    text = pack_text(
        f'      r: {{range: {{min: 2, max: 9}}}}\n      v: {{compute: "{compute}"}}',
        "What is {v}?",
        '{expression: "{v}"}',
        "calculate_math",
    )
    loaded = load(text)
    with pytest.raises(SlotError) as caught:
        draw_slots(loaded.spec.intents[0], loaded.spec, "en", random.Random(0))
    assert "intent 'probe', slot 'v'" in str(caught.value) and expected in str(caught.value)
    problems = "\n".join(check_pack(loaded, tools()))
    assert "slot 'v'" in problems and "pack.yaml:" in problems


def test_a_lookup_of_a_missing_field_names_the_slot() -> None:
    text = pack_text(
        "      lang: {values: [{key: klingon}]}\n      phrase: {pool: phrase}\n"
        '      city: {lookup: {slot: phrase, key: "{lang.key}"}}',
        pools="  phrase: {file: world.json, path: phrasebook, items: values}",
    )
    with pytest.raises(
        SlotError, match=r"slot 'city': lookup: slot 'phrase' has no field 'klingon'"
    ):
        draws(text, 1)
    assert "no field 'klingon'" in "\n".join(check_pack(load(text), tools()))


def test_a_field_of_a_template_slot_is_a_check_problem() -> None:
    text = pack_text(CITY_SLOTS, "Weather in {city.name}?")
    problems = "\n".join(check_pack(load(text), tools()))
    assert "slot 'city' is a template (a text), which have no fields" in problems
    unknown = pack_text(CITY_SLOTS.replace("{pool: city}", "{pool: city, distinct_from: [x.tz]}"))
    problems = "\n".join(check_pack(load(unknown), tools()))
    assert "slot 'c': distinct_from names unknown slot 'x.tz'" in problems


def test_distinct_from_a_field_and_after_order_the_draws() -> None:
    slots = "\n".join(
        [
            "      ca: {pool: city}",
            "      cb: {pool: city, distinct_from: [ca.timezone]}",
            '      city: {template: "{ca.name}"}',
            "      d1: {range: {min: 1, max: 50}}",
            "      d2: {range: {min: 1, max: 50}, after: d1}",
        ]
    )
    drawn = draws(pack_text(slots), 400)
    assert all(d["ca"]["timezone"] != d["cb"]["timezone"] for d in drawn)
    assert all(d["d1"] <= d["d2"] for d in drawn)
    # two independent draws, sorted: the pair's order statistics (mean 17 and 34 of 1..50)
    assert sum(d["d1"] for d in drawn) / 400 < 21 < 30 < sum(d["d2"] for d in drawn) / 400
    bad = "      a: {values: [1]}\n      city: {values: [x], after: a}"
    with pytest.raises(SlotError, match="cannot be ordered"):
        draws(pack_text(bad), 1)
    single = "\n".join(
        [
            "      c: {pool: city}",
            "      d: {pool: city, distinct_from: [c.timezone]}",
            '      city: {template: "{c.name}"}',
        ]
    )
    one_city = "  city: [{name: Paris, timezone: Europe/Paris}]"
    with pytest.raises(SlotError, match="slot 'd': found no value distinct"):
        draws(pack_text(single, pools=one_city), 1)


# ---- sessions and the project's server -----------------------------------------------------
def test_session_tools_must_be_server_tools_and_not_on_a_stateful_pack() -> None:
    text = pack_text(CITY_SLOTS).replace("pools:", "session_tools: [save_note, read_notes]\npools:")
    problems = "\n".join(check_pack(load(text), tools()))
    assert "session_tools names unknown tool 'read_notes'" in problems
    stateful = pack_text(CITY_SLOTS).replace(
        "pools:", "stateful: true\nsession_tools: [save_note]\npools:"
    )
    assert "a `stateful: true` pack already sends every call" in load_error(stateful)


def test_the_project_server_source_is_typed() -> None:
    base = pack_text(CITY_SLOTS)
    assert "Input should be 'mock'" in load_error(
        base.replace("pools:", "source: {project_server: real}\npools:")
    )
    loaded = load(base.replace("pools:", "source: {project_server: mock}\npools:"))
    with pytest.raises(PackError, match="the project's own MCP server"):
        pack_sources(loaded, None)  # only `pack_client` runs it (in-process)


def test_the_shipped_toolrl_pack_checks_clean_against_the_catalog() -> None:
    loaded = load_pack(Path("training/data/packs/builtin/toolrl.yaml").resolve())
    assert loaded.spec.source is not None and loaded.spec.session_tools == [
        "save_note",
        "read_note",
    ]
    assert set(loaded.data_files) == {"world.json"}
    assert check_pack(loaded, tools()) == []


def test_a_chinese_fraction_rescales_the_languages() -> None:
    """`--chinese-fraction` (and the pipeline's `chinese_fraction`) on a pack: Chinese gets
    the share, the other languages the rest in their ratio; a zero share drops a language."""
    toolrl = load_pack(Path("training/data/packs/builtin/toolrl.yaml").resolve())
    assert with_chinese_fraction(toolrl, None) is toolrl
    assert with_chinese_fraction(toolrl, 0.0).spec.languages == {"en": 1.0}
    assert with_chinese_fraction(toolrl, 0.5).spec.languages == {"en": 0.5, "zh": 0.5}
    assert with_chinese_fraction(toolrl, 1.0).spec.languages == {"zh": 1.0}
    assert toolrl.spec.languages == {"en": 0.7, "zh": 0.3}  # the loaded pack is not changed
    with pytest.raises(ValueError, match="between 0 and 1"):
        with_chinese_fraction(toolrl, 1.5)
    english = load(pack_text(CITY_SLOTS))
    with pytest.raises(PackError, match="no Chinese"):
        with_chinese_fraction(english, 0.3)
