"""The shipped `toolrl` pack is a port of `training/data/intent_library.py` (the default
generator): the same intents with the same categories and difficulties, every old phrasing
verbatim under the id `t<old index>`, the same languages and system prompts, and, for the
same n and seed, category, language and intent shares close to the old generator's. Rows
are not identical (a different random-number order, template ids and held-out rule:
docs/parts/packs.md records why), so the test compares distributions and value domains.

Planning needs no server (queries and slots come from the seed alone); the old generator
runs its tools in-process, as it always does.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from serving.tools.providers import load_world
from training.data.config import GenerationConfig
from training.data.generate import DECORATIONS, generate_rows
from training.data.intent_library import INTENTS
from training.data.packs.generate import pack_config, plan_rows
from training.data.packs.loader import LoadedPack, load_pack
from training.data.packs.refs import render_text

PACK = (
    Path(__file__).resolve().parents[2] / "training" / "data" / "packs" / "builtin" / "toolrl.yaml"
)
N = 600


@pytest.fixture(scope="module")
def pack() -> LoadedPack:
    return load_pack(PACK)


@pytest.fixture(scope="module")
def old_rows() -> list[dict[str, Any]]:
    return generate_rows(GenerationConfig(n=N, seed=0), progress=False)


@pytest.fixture(scope="module")
def planned(pack: LoadedPack) -> list[Any]:
    return plan_rows(pack.spec, pack_config(pack.spec, N, 0, 0.1))


def test_same_intents_categories_difficulties_and_every_old_phrasing(pack: LoadedPack) -> None:
    new = {intent.name: intent for intent in pack.spec.intents}
    assert [i.name for i in INTENTS] == list(new)  # all 29, in the same order
    for old in INTENTS:
        port = new[old.name]
        assert (port.category, port.difficulty) == (old.category, old.difficulty), old.name
        assert set(port.phrasings) == set(old.phrasings) == {"en", "zh"}
        for lang, texts in old.phrasings.items():
            assert port.phrasings[lang] == {f"t{i}": text for i, text in enumerate(texts)}
        if old.category.value == "clarification":
            assert port.missing is not None
    assert pack.spec.languages == {"en": 0.7, "zh": 0.3}
    assert pack.spec.category_mix is None  # the project's default mix, as the old generator
    assert not pack.spec.system_prompts and not pack.spec.decorations  # the project's own


def _shares(values: list[str]) -> dict[str, float]:
    counts = Counter(values)
    return {key: count / len(values) for key, count in counts.items()}


def test_category_language_and_intent_shares_match_the_old_generator(
    old_rows: list[dict[str, Any]], planned: list[Any]
) -> None:
    old_category = _shares([r["category"] for r in old_rows])
    new_category = _shares([p.intent.category.value for p in planned])
    assert old_category.keys() == new_category.keys()
    assert all(abs(old_category[c] - new_category[c]) <= 0.01 for c in old_category)
    old_zh = _shares([r["language"] for r in old_rows])["zh"]
    new_zh = _shares([p.lang for p in planned])["zh"]
    assert abs(old_zh - new_zh) <= 0.06 and abs(new_zh - 0.3) <= 0.06
    old_intent = _shares([r["template_id"].split("/")[0] for r in old_rows])
    new_intent = _shares([p.intent.name for p in planned])
    assert old_intent.keys() == new_intent.keys() == {i.name for i in INTENTS}
    assert all(abs(old_intent[i] - new_intent[i]) <= 0.015 for i in old_intent), {
        i: (round(old_intent[i], 3), round(new_intent[i], 3)) for i in old_intent
    }
    old_split = _shares([r["extra_info"]["split"] for r in old_rows])["test"]
    new_split = _shares([p.split for p in planned])["test"]
    assert abs(old_split - new_split) <= 0.04


def test_queries_use_the_old_decorations_and_value_domains(planned: list[Any]) -> None:
    world = load_world()
    names = {c["name"] for c in world["cities"]} | {c["name_zh"] for c in world["cities"]}
    by_intent: dict[str, list[Any]] = {}
    for row in planned:
        by_intent.setdefault(row.intent.name, []).append(row)
    used: set[str] = set()
    for row in planned:
        prefixes, suffixes = DECORATIONS[row.lang]
        body = render_text(
            row.intent.phrasings[row.lang][row.template.rsplit("/", 1)[1]], row.slots
        )
        prefix, _, suffix = row.query.partition(body)
        assert prefix in prefixes and suffix in suffixes, row.query
        used |= {prefix, suffix}
    assert used == {d for lang in ("en", "zh") for part in DECORATIONS[lang] for d in part}
    assert all(row.slots["city"] in names for row in by_intent["weather"])
    shapes = "^({})$".format(  # the five shapes of `random_expression`
        "|".join(
            [
                r"\d+\*\d+",
                r"\(\d+\+\d+\)\*\d+",
                r"\d+/(2|4|5|8|10|16|20|25)",
                r"\d+\*\*[234]-\d+",
                r"sqrt\(\d+\)\+\d+-\d+",
            ]
        )
    )
    assert all(re.match(shapes, r.slots["expr"]) for r in by_intent["math"])
    assert all(r.slots["start"] <= r.slots["end"] for r in by_intent["date_between"])
    assert all(
        r.slots["ca"]["timezone"] != r.slots["cb"]["timezone"] for r in by_intent["time_two"]
    )
    currencies = set(world["usd_rates"])
    for row in by_intent["exchange"]:
        assert {row.slots["src"], row.slots["dst"]} <= currencies
        assert row.slots["src"] != row.slots["dst"] and 1 <= row.slots["amount"] <= 5000
    for row in by_intent["unit"]:
        value = row.slots["value"]
        assert (isinstance(value, int) and 1 <= value <= 500) or 0.5 <= value <= 300
    for row in by_intent["translate"]:
        assert row.slots["text"] in row.slots["phrase"].values()
        assert row.slots["source"] != row.slots["target"]
