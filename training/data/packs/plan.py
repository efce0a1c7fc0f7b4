"""The plan of a pack's dataset: every row's split, intent, language, template, slots and
query, drawn from the seed alone.

Why a plan apart from execution: queries and slot values depend only on the seed, so the
plan is deterministic and cheap; only the arguments that point into earlier results need the
server (`generate.execute_plan`), and a complete plan lets all rows' calls run concurrently.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from training.data.config import DEFAULT_MIX, GenerationConfig
from training.data.packs.language_defaults import DECORATIONS
from training.data.packs.loader import LoadedPack, PackError
from training.data.packs.model import IntentSpec, PackSpec
from training.data.packs.refs import render_text
from training.data.packs.slots import draw_slots
from training.data.packs.split import held_out, template_id
from training.data.queries import normalise_query, query_shape
from training.data.schema import Category


class GenerationError(RuntimeError):
    """Generation could not satisfy the settings (the template space is too small for n, too
    many rows are invalid)."""


@dataclass(frozen=True)
class PlannedRow:
    split: str
    intent: IntentSpec
    lang: str
    template: str
    query: str
    slots: dict[str, Any]


def with_chinese_fraction(loaded: LoadedPack, fraction: float | None) -> LoadedPack:
    """The pack with `fraction` of its rows in Chinese (`zh`) and the other languages' shares
    scaled to the rest (None: the pack as written). A language left with no share is dropped,
    so a fraction of 0 gives a dataset without Chinese rows."""
    pack = loaded.spec
    if fraction is None:
        return loaded
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the Chinese fraction must be between 0 and 1 (got {fraction})")
    if "zh" not in pack.languages:
        raise PackError(
            [f"{loaded.path}: the pack has no Chinese (`zh`) phrasings to give a fraction to"]
        )
    others = {lang: share for lang, share in pack.languages.items() if lang != "zh"}
    rest = sum(others.values())
    if fraction < 1.0 and rest <= 0:
        raise PackError([f"{loaded.path}: the pack has only Chinese rows (`languages`)"])
    languages = {lang: share / rest * (1.0 - fraction) for lang, share in others.items()}
    languages["zh"] = fraction
    languages = {lang: share for lang, share in languages.items() if share > 0}
    return replace(loaded, spec=pack.model_copy(update={"languages": languages}))


def pack_config(pack: PackSpec, n: int, seed: int, test_fraction: float) -> GenerationConfig:
    """The generator settings recorded in the manifest (the validation reads the category
    mix from them). Without a `category_mix`, the project's default mix over the pack's
    categories."""
    mix = pack.category_mix
    if mix is None:
        present = {intent.category for intent in pack.intents}
        total = sum(share for c, share in DEFAULT_MIX.items() if c in present)
        mix = {c: share / total for c, share in DEFAULT_MIX.items() if c in present}
    return GenerationConfig(
        n=n,
        seed=seed,
        test_fraction=test_fraction,
        chinese_fraction=pack.languages.get("zh", 0.0),
        category_mix={c: s for c, s in mix.items() if s > 0},
    )


def category_plan(config: GenerationConfig, rng: random.Random) -> list[Category]:
    """The category of every row: the target mix in exact counts (largest remainder), in a
    seeded random order.

    Independent weighted draws miss the mix by a binomial error: at 120 rows a share of 0.33
    is off by more than the validation's 0.08 tolerance about one run in twenty, and the
    dataset DAG (a new seed every run) then refuses its own output.
    """
    mix = {c: share for c, share in config.category_mix.items() if share > 0}
    total = sum(mix.values())
    exact = {c: config.n * share / total for c, share in mix.items()}
    counts = {c: int(value) for c, value in exact.items()}
    by_remainder = sorted(mix, key=lambda c: (counts[c] - exact[c], list(mix).index(c)))
    for category in by_remainder[: config.n - sum(counts.values())]:
        counts[category] += 1
    plan = [c for c, count in counts.items() for _ in range(count)]
    rng.shuffle(plan)
    return plan


def template_pools(pack: PackSpec) -> dict[tuple[str, str], dict[str, list[str]]]:
    """(intent, language) -> split -> template keys (`lang/tid`)."""
    pools: dict[tuple[str, str], dict[str, list[str]]] = {}
    for intent in pack.intents:
        for lang in pack.languages:
            ids = [template_id(pack.pack, intent.name, lang, t) for t in intent.phrasings[lang]]
            test = held_out(ids)
            pools[(intent.name, lang)] = {
                "train": [i for i in ids if i not in test],
                "test": [i for i in ids if i in test],
            }
    return pools


class _IntentDecks:
    """Intents dealt from a shuffled deck per category, not drawn with replacement:
    independent draws leave a rare intent (and the only tool it uses) out of a small dataset
    now and then, which the coverage check rightly refuses; a deck visits every intent of a
    category before any repeats."""

    def __init__(self, pack: PackSpec, rng: random.Random) -> None:
        self._rng = rng
        self._by_category: dict[Category, list[IntentSpec]] = {}
        for intent in pack.intents:
            self._by_category.setdefault(intent.category, []).append(intent)
        self._decks: dict[Category, list[IntentSpec]] = {}

    def deal(self, category: Category) -> IntentSpec:
        deck = self._decks.get(category)
        if not deck:
            deck = list(self._by_category[category])
            self._rng.shuffle(deck)
            self._decks[category] = deck
        return deck.pop()


def _decorated(pack: PackSpec, lang: str, body: str, rng: random.Random) -> str:
    """The query: the rendered phrasing between a random prefix and suffix of the language."""
    decorations = pack.decorations.get(lang) or DECORATIONS.get(lang)
    prefixes, suffixes = (
        (decorations.prefixes, decorations.suffixes) if decorations else ([""], [""])
    )
    return f"{rng.choice(prefixes)}{body}{rng.choice(suffixes)}"


def plan_rows(pack: PackSpec, config: GenerationConfig) -> list[PlannedRow]:
    """Every row's split, intent, language, template, slots and query, from the seed alone.

    A query must be new (normalised) and its shape must not appear in the other split, so a
    held-out row never shares a phrasing with train; a row that finds none within
    `max_attempts_per_row` draws fails the generation."""
    rng = random.Random(f"{pack.pack}/{config.seed}")
    plan = category_plan(config, rng)
    decks = _IntentDecks(pack, rng)
    pools = template_pools(pack)
    languages, weights = list(pack.languages), list(pack.languages.values())
    seen: set[str] = set()
    shapes: dict[str, set[str]] = {"train": set(), "test": set()}
    rows: list[PlannedRow] = []
    for index in range(config.n):
        split = "test" if rng.random() < config.test_fraction else "train"
        other = "train" if split == "test" else "test"
        category = plan[index]
        for _attempt in range(config.max_attempts_per_row):
            intent = decks.deal(category)
            lang = rng.choices(languages, weights)[0]
            template = rng.choice(pools[(intent.name, lang)][split])
            slots = draw_slots(intent, pack, lang, rng)
            body = render_text(intent.phrasings[lang][template.rsplit("/", 1)[1]], slots)
            query = _decorated(pack, lang, body, rng)
            norm, shape = normalise_query(query), query_shape(query)
            if norm in seen or shape in shapes[other]:
                continue
            seen.add(norm)
            shapes[split].add(shape)
            rows.append(PlannedRow(split, intent, lang, template, query, slots))
            break
        else:
            raise GenerationError(
                f"no new unique prompt after {config.max_attempts_per_row} attempts at row "
                f"{index} ({category.value}): the pack's templates and slot values are "
                "exhausted; lower n or add phrasings or values"
            )
    return rows
