"""The field types of a task pack's model: names, language codes, numbers, value lists and
file references, each constrained to what a hand-written YAML pack may say.

Why apart: the slot specs (`slot_model`) and the intents and pack (`model`) share them, and
one definition of, say, a language code keeps a pack's `languages` and its phrasings alike.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
"""Slot, pool and intent names: they appear inside `{...}` templates and template ids."""
TemplateId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,32}$")]
LanguageCode = Annotated[str, StringConstraints(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")]
"""A BCP-47-ish language tag (`en`, `zh`, `pt-BR`): it becomes the row's `language`."""
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=128)]

MAX_PHRASING_CHARS = 1_000
MAX_VALUES = 10_000


class StrictModel(BaseModel):
    """Unknown keys refused (a misspelt key names itself), values frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Number = (
    Annotated[int, Field(strict=True)] | Annotated[float, Field(strict=True, allow_inf_nan=False)]
)
"""A YAML number: `"5"` (a string) and `.inf` are refused, not coerced."""
SlotRef = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63})?$")
]
"""A slot, or one field of a slot's mapping value (`city.timezone`)."""
MAX_ROUND_DIGITS = 6


Values = list[Any] | dict[LanguageCode, list[Any]]
"""A list of values, or one list per language (a phrasing in `zh` draws from `zh:`)."""
Templates = str | list[str] | dict[LanguageCode, str | list[str]]
"""A template, a list of them (one is drawn), or either per language."""

JsonFileName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\.json$")]
"""A plain file name: no directories, so no `..` and no absolute path can be written."""
JsonPath = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}$"),
]
