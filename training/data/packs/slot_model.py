"""Where a pack's slot values come from: a value list, a range, a pool (in the pack or a
JSON file), or a template, computation or lookup over earlier slots, or alternatives.

Why checked here: what the file alone can tell about a slot (one source, ordered bounds,
references to earlier slots only) is refused when the pack is read, with the key's name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from training.data.packs.refs import RefError, placeholders
from training.data.packs.spec_types import (
    MAX_ROUND_DIGITS,
    Identifier,
    JsonFileName,
    JsonPath,
    Number,
    SlotRef,
    StrictModel,
    Templates,
    Values,
)


class RangeSpec(StrictModel):
    """Integers from `min` to `max` inclusive, every `step`; with `round: N`, decimals drawn
    uniformly from [min, max] and rounded to N digits (`round: 1`: 0.5 .. 300.0; a draw that
    rounds to a whole number is that integer)."""

    min: Number
    max: Number
    step: int | None = Field(default=None, ge=1, strict=True)
    round: int | None = Field(default=None, ge=0, le=MAX_ROUND_DIGITS, strict=True)

    @model_validator(mode="after")
    def _ordered(self) -> RangeSpec:
        if self.max < self.min:
            raise ValueError(f"range max ({self.max}) is below min ({self.min})")
        if self.round is None:
            floats = [k for k in ("min", "max") if isinstance(getattr(self, k), float)]
            if floats:
                raise ValueError(
                    f"range {floats[0]} {getattr(self, floats[0])} is not an integer: a range "
                    "without `round` draws integers; add `round: N` for decimals"
                )
        elif self.step is not None:
            raise ValueError("`step` is for integer ranges; a `round` range has no step")
        return self

    @property
    def integers(self) -> range | None:
        """The integer values (lazy), None for a decimal range."""
        if self.round is not None:
            return None
        return range(int(self.min), int(self.max) + 1, self.step or 1)


class PoolFile(StrictModel):
    """A pool read from a JSON file that ships beside the pack or with the project's data
    (`serving/data`, e.g. `world.json`), so world data is not copied into the pack.

    `path` is dotted keys into the document; the node found is a list, or a mapping whose
    `items: keys` or `items: values` are the pool."""

    file: JsonFileName
    path: JsonPath
    items: Literal["keys", "values"] | None = Field(
        default=None, description="For a mapping node: its keys or its values."
    )


class LookupSpec(StrictModel):
    """A field of an earlier slot's mapping value, chosen by a template: the phrase
    `{phrase}` in the language `{source.key}` names."""

    slot: Identifier
    key: str = Field(min_length=1, max_length=200)


SLOT_SOURCES = ("values", "range", "pool", "template", "compute", "one_of", "lookup")


class SlotSpec(StrictModel):
    """Where a slot's value comes from: exactly one of `values`, `range`, `pool` (drawn),
    or `template`, `compute`, `lookup` (made from slots declared before it), or `one_of`
    (alternatives, one drawn uniformly)."""

    values: Values | None = None
    range: RangeSpec | None = None
    pool: Identifier | None = None
    template: Templates | None = Field(
        default=None,
        description="A string built from earlier slots (`{a}*{b}`); a list: one is drawn.",
    )
    compute: str | None = Field(
        default=None,
        max_length=500,
        description="Arithmetic over earlier slots (`{root}**2`), evaluated by the safe "
        "evaluator (`serving.tools.safe_math`, no `eval`): the value is the number.",
    )
    one_of: list[SlotSpec] | None = Field(
        default=None,
        min_length=2,
        description="Alternative sources; each row draws one uniformly, then its value.",
    )
    lookup: LookupSpec | None = None
    case: Literal["lower", "upper"] | None = Field(
        default=None, description="For `template`: the text lower- or upper-cased."
    )
    round: int | None = Field(
        default=None, ge=0, le=MAX_ROUND_DIGITS, strict=True, description="For `compute`."
    )
    distinct_from: list[SlotRef] = Field(
        default_factory=list,
        description="Slots of the same intent this one must differ from (two different "
        "cities); `a.timezone` compares that field of both values.",
    )
    after: Identifier | None = Field(
        default=None,
        description="An earlier slot this one must not be below: if it is, the two values "
        "are swapped, so the pair is two independent draws in sorted order.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SlotSpec:
        given = [k for k in SLOT_SOURCES if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "a slot takes its values from exactly one of `values`, `range` or `pool` "
                "(drawn), or `template`, `compute`, `lookup`, `one_of` (made from other slots)"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if isinstance(self.values, list) and not self.values:
            raise ValueError("`values` is empty")
        if isinstance(self.values, dict) and any(not v for v in self.values.values()):
            raise ValueError("`values` has an empty list for a language")
        lists = list(self.template.values()) if isinstance(self.template, dict) else [self.template]
        if any(isinstance(t, list) and not t for t in lists):
            raise ValueError("`template` has an empty list")
        if self.case is not None and self.template is None:
            raise ValueError("`case` is only for `template` slots")
        if self.round is not None and self.compute is None:
            raise ValueError("`round` here is only for `compute` slots (a range has its own)")
        for alternative in self.one_of or []:
            if alternative.distinct_from or alternative.after or alternative.one_of:
                raise ValueError(
                    "a `one_of` alternative is a plain source: put `distinct_from`/`after` "
                    "on the slot itself, and do not nest `one_of`"
                )
        return self

    def uses(self) -> list[str]:
        """The slots this one is made from (they must be declared before it)."""
        texts: list[str] = []
        if self.template is not None:
            for entry in (
                self.template.values() if isinstance(self.template, dict) else [self.template]
            ):
                texts.extend(entry if isinstance(entry, list) else [entry])
        if self.compute is not None:
            texts.append(self.compute)
        names: list[str] = []
        if self.lookup is not None:
            names.append(self.lookup.slot)
            texts.append(self.lookup.key)
        for alternative in self.one_of or []:
            names.extend(alternative.uses())
        for text in texts:
            try:
                names.extend(p.slot for p in placeholders(text))
            except RefError as exc:
                raise ValueError(str(exc)) from None
        return list(dict.fromkeys(names))
