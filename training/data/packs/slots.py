"""Drawing slot values: one seeded draw per row, from a list, a range or a named pool.

Why a separate module: the check (`check.py`) and the generator must agree on what values a
slot can take, and the generator's draws must be reproducible from the seed alone (the
dataset version is a content hash), so both go through these functions.
"""

from __future__ import annotations

import random
from typing import Any

from training.data.packs.model import IntentSpec, PackSpec, SlotSpec, Values

MAX_DISTINCT_TRIES = 64


class SlotError(ValueError):
    """A slot that cannot give a value (unknown pool, no values for the language, ...)."""


def _for_language(values: Values, lang: str, what: str) -> list[Any]:
    if isinstance(values, list):
        return values
    if lang not in values:
        raise SlotError(f"{what} has no values for language {lang!r} (has: {', '.join(values)})")
    return values[lang]


def candidates(spec: SlotSpec, pack: PackSpec, lang: str) -> list[Any] | range:
    """Every value the slot can take in `lang` (a `range` stays lazy)."""
    if spec.range is not None:
        return range(spec.range.min, spec.range.max + 1, spec.range.step)
    if spec.pool is not None:
        if spec.pool not in pack.pools:
            known = ", ".join(pack.pools) or "none"
            raise SlotError(f"unknown pool {spec.pool!r} (pools: {known})")
        return _for_language(pack.pools[spec.pool], lang, f"pool {spec.pool!r}")
    assert spec.values is not None
    return _for_language(spec.values, lang, "`values`")


def draw_slots(intent: IntentSpec, pack: PackSpec, lang: str, rng: random.Random) -> dict[str, Any]:
    """One value per slot, in declaration order; `distinct_from` slots are redrawn until they
    differ (SlotError when they cannot)."""
    drawn: dict[str, Any] = {}
    for name, spec in intent.slots.items():
        pool = candidates(spec, pack, lang)
        if not len(pool):
            raise SlotError(f"slot {name!r} has no values")
        others = [drawn[o] for o in spec.distinct_from if o in drawn]
        for _ in range(MAX_DISTINCT_TRIES):
            value = pool[rng.randrange(len(pool))]
            if value not in others:
                break
        else:
            raise SlotError(f"slot {name!r} found no value distinct from {spec.distinct_from}")
        drawn[name] = value
    return drawn
