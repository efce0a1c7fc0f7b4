"""Drawing slot values: one seeded draw per row, from a list, a range or a named pool, or
made from slots drawn before (a template, safe arithmetic, a lookup), or one of several.

Why a separate module: the check (`check.py`) and the generator must agree on what values a
slot can take, and the generator's draws must be reproducible from the seed alone (the
dataset version is a content hash), so both go through these functions. Nothing here
evaluates pack text as code: templates are filled by `refs.render_text` and `compute` goes
through `serving.tools.safe_math`, the same allow-list evaluator the math tool uses.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from serving.tools.safe_math import MathError, evaluate
from training.data.packs.model import IntentSpec, PackSpec
from training.data.packs.refs import RefError, render_text
from training.data.packs.slot_model import SlotSpec
from training.data.packs.spec_types import Values

MAX_DISTINCT_TRIES = 64


class SlotError(ValueError):
    """A slot that cannot give a value (unknown pool, no values for the language, ...)."""


def _for_language(values: Any, lang: str, what: str) -> Any:
    if not isinstance(values, dict):
        return values
    if lang not in values:
        raise SlotError(f"{what} has no values for language {lang!r} (has: {', '.join(values)})")
    return values[lang]


def candidates(spec: SlotSpec, pack: PackSpec, lang: str) -> Sequence[Any] | None:
    """Every value a drawn slot can take in `lang` (an integer range stays lazy); None for
    a slot whose values are not a list (decimals, templates, computed, looked up, one_of)."""
    if spec.range is not None:
        return spec.range.integers
    if spec.pool is not None:
        if spec.pool not in pack.pools:
            known = ", ".join(pack.pools) or "none"
            raise SlotError(f"unknown pool {spec.pool!r} (pools: {known})")
        values: Values = pack.pools[spec.pool]  # type: ignore[assignment]
        found = _for_language(values, lang, f"pool {spec.pool!r}")
        if not isinstance(found, list):
            raise SlotError(f"pool {spec.pool!r} was not read from its file")
        return found
    if spec.values is not None:
        return list(_for_language(spec.values, lang, "`values`"))
    if spec.one_of is not None:
        for alternative in spec.one_of:
            candidates(alternative, pack, lang)  # an unknown pool inside is an error too
    if spec.template is not None:
        _for_language(spec.template, lang, "`template`")
    return None


def _number(value: int | float) -> int | float:
    """A computed or decimal value: an integral float becomes an int (`sqrt(1600)` is 40,
    and a decimal draw of 12.0 reads "12" in a query, as the old generator's `num` wrote it)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def draw_value(
    spec: SlotSpec, pack: PackSpec, lang: str, rng: random.Random, drawn: Mapping[str, Any]
) -> Any:
    """One value of one slot, given the slots drawn before it."""
    if spec.range is not None and spec.range.round is not None:
        return _number(round(rng.uniform(spec.range.min, spec.range.max), spec.range.round))
    if spec.one_of is not None:
        return draw_value(spec.one_of[rng.randrange(len(spec.one_of))], pack, lang, rng, drawn)
    try:
        if spec.template is not None:
            texts = _for_language(spec.template, lang, "`template`")
            text = texts[rng.randrange(len(texts))] if isinstance(texts, list) else texts
            value = render_text(text, drawn)
            if spec.case == "lower":
                return value.lower()
            return value.upper() if spec.case == "upper" else value
        if spec.compute is not None:
            expression = render_text(spec.compute, drawn)
            try:
                result = evaluate(expression)
            except MathError as exc:
                raise SlotError(f"compute {expression!r}: {exc}") from None
            if spec.round is not None:
                result = round(result, spec.round)
            return _number(result)
        if spec.lookup is not None:
            base = drawn.get(spec.lookup.slot)
            key = render_text(spec.lookup.key, drawn)
            if not isinstance(base, Mapping) or key not in base:
                fields = ", ".join(sorted(base)) if isinstance(base, Mapping) else "none"
                raise SlotError(
                    f"lookup: slot {spec.lookup.slot!r} has no field {key!r} (fields: {fields})"
                )
            return base[key]
    except RefError as exc:
        raise SlotError(str(exc)) from None
    pool = candidates(spec, pack, lang)
    if pool is None or not len(pool):
        raise SlotError("no values")
    return pool[rng.randrange(len(pool))]


def _compared(value: Any, ref: str, drawn: Mapping[str, Any]) -> tuple[Any, Any]:
    """(this value, the other) as `distinct_from` compares them: whole, or one field each."""
    slot, _, field = ref.partition(".")
    other = drawn[slot]
    if not field:
        return value, other
    if not isinstance(value, Mapping) or not isinstance(other, Mapping):
        raise SlotError(f"distinct_from {ref!r}: the values have no fields")
    if field not in value or field not in other:
        raise SlotError(f"distinct_from {ref!r}: a value has no field {field!r}")
    return value[field], other[field]


def draw_slots(intent: IntentSpec, pack: PackSpec, lang: str, rng: random.Random) -> dict[str, Any]:
    """One value per slot, in declaration order; `distinct_from` slots are redrawn until they
    differ, an `after` slot below its partner swaps with it (SlotError, naming the intent
    and slot, when a slot cannot give a value)."""
    drawn: dict[str, Any] = {}
    for name, spec in intent.slots.items():
        try:
            refs = [o for o in spec.distinct_from if o.split(".", 1)[0] in drawn]
            for _ in range(MAX_DISTINCT_TRIES):
                value = draw_value(spec, pack, lang, rng, drawn)
                if all(a != b for a, b in (_compared(value, o, drawn) for o in refs)):
                    break
            else:
                raise SlotError(f"found no value distinct from {spec.distinct_from}")
            if spec.after is not None:
                try:
                    below = value < drawn[spec.after]
                except TypeError:
                    raise SlotError(
                        f"`after: {spec.after}`: {value!r} and {drawn[spec.after]!r} cannot "
                        "be ordered"
                    ) from None
                if below:
                    value, drawn[spec.after] = drawn[spec.after], value
        except SlotError as exc:
            raise SlotError(f"intent {intent.name!r}, slot {name!r}: {exc}") from None
        drawn[name] = value
    return drawn
