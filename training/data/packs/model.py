"""The typed shape of a task pack: what a YAML pack may say, and nothing else.

Why a strict model (`extra="forbid"` everywhere): a pack is written by hand by someone who
does not read this code; a misspelt key (`phrasing:` for `phrasings:`) must be an error that
names it, not a silently empty intent. Checks that need the server's tool schemas (unknown
tools, arguments that do not fill the schema) live in `check.py`; this module checks only
what the file alone can tell.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    model_validator,
)

from training.data.schema import Category, Difficulty

Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
"""Slot, pool and intent names: they appear inside `{...}` templates and template ids."""
TemplateId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,32}$")]
LanguageCode = Annotated[str, StringConstraints(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")]
"""A BCP-47-ish language tag (`en`, `zh`, `pt-BR`): it becomes the row's `language`."""
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=128)]

MAX_PHRASING_CHARS = 1_000
MAX_VALUES = 10_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RangeSpec(_Strict):
    """Integers from `min` to `max` inclusive, every `step`."""

    min: int
    max: int
    step: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> RangeSpec:
        if self.max < self.min:
            raise ValueError(f"range max ({self.max}) is below min ({self.min})")
        return self


Values = list[Any] | dict[LanguageCode, list[Any]]
"""A list of values, or one list per language (a phrasing in `zh` draws from `zh:`)."""


class SlotSpec(_Strict):
    """Where a slot's value comes from: exactly one of `values`, `range`, `pool`."""

    values: Values | None = None
    range: RangeSpec | None = None
    pool: Identifier | None = None
    distinct_from: list[Identifier] = Field(
        default_factory=list,
        description="Slots of the same intent this one must differ from (two different cities).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SlotSpec:
        given = [k for k in ("values", "range", "pool") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "a slot takes its values from exactly one of `values`, `range` or `pool`"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if isinstance(self.values, list) and not self.values:
            raise ValueError("`values` is empty")
        if isinstance(self.values, dict) and any(not v for v in self.values.values()):
            raise ValueError("`values` has an empty list for a language")
        return self


class CallSpec(_Strict):
    """One expected call. Argument strings may hold slot templates (`"{city.tz}"`) or a
    reference into an earlier step's result (`"$steps[0].result.datetime | hhmm"`)."""

    tool: ToolName = Field(description="The tool's name as its server lists it (no prefix).")
    arguments: dict[str, Any] = Field(default_factory=dict)
    free_arguments: list[str] = Field(
        default_factory=list,
        description="Free-text arguments (a search query): present, not compared exactly.",
    )


class ParallelSpec(_Strict):
    """Several independent calls in one assistant turn (order-free)."""

    parallel: list[CallSpec] = Field(min_length=2)


def _step_kind(data: Any) -> str:
    if isinstance(data, BaseModel):
        return "parallel" if isinstance(data, ParallelSpec) else "call"
    return "parallel" if isinstance(data, dict) and "parallel" in data else "call"


StepSpec = Annotated[
    Annotated[CallSpec, Tag("call")] | Annotated[ParallelSpec, Tag("parallel")],
    Discriminator(_step_kind),
]
"""A step is one call (`tool:`) or a `parallel:` list of calls."""


def step_calls(step: CallSpec | ParallelSpec) -> list[CallSpec]:
    return list(step.parallel) if isinstance(step, ParallelSpec) else [step]


class MissingSpec(_Strict):
    """For clarification intents: the call the user would need and the argument left out."""

    tool: ToolName
    argument: str = Field(min_length=1)


class IntentSpec(_Strict):
    """What a user wants, how they say it, and the calls that satisfy it."""

    name: Identifier
    category: Category
    difficulty: Difficulty = Difficulty.EASY
    slots: dict[Identifier, SlotSpec] = Field(default_factory=dict)
    phrasings: dict[LanguageCode, dict[TemplateId, str]] = Field(
        min_length=1,
        description="language -> template id -> text. The id names the template for good: "
        "it decides train/test, so edit the text, keep the id.",
    )
    steps: list[StepSpec] = Field(default_factory=list, max_length=8)
    answers: list[str] = Field(
        default_factory=list,
        description="What the final answer must contain: templates or result references.",
    )
    missing: MissingSpec | None = None

    @model_validator(mode="after")
    def _category_shape(self) -> IntentSpec:
        for lang, texts in self.phrasings.items():
            if not texts:
                raise ValueError(f"phrasings.{lang} is empty")
            for tid, text in texts.items():
                if not isinstance(text, str) or not text.strip():
                    raise ValueError(f"phrasings.{lang}.{tid} is empty")
                if len(text) > MAX_PHRASING_CHARS:
                    raise ValueError(f"phrasings.{lang}.{tid} is over {MAX_PHRASING_CHARS} chars")
        calls = [len(step_calls(s)) for s in self.steps]
        category = self.category
        if category in (Category.IRRELEVANCE, Category.CLARIFICATION) and self.steps:
            raise ValueError(f"a {category.value} intent has no `steps` (no tool is called)")
        if category is Category.CLARIFICATION and self.missing is None:
            raise ValueError("a clarification intent names the `missing` tool and argument")
        if category is not Category.CLARIFICATION and self.missing is not None:
            raise ValueError("`missing` is only for clarification intents")
        if category is Category.SINGLE and calls != [1]:
            raise ValueError("a single intent has exactly one step with one call")
        if category is Category.PARALLEL and (len(calls) != 1 or calls[0] < 2):
            raise ValueError("a parallel intent has one step of `parallel:` calls (2 or more)")
        if category is Category.MULTI_STEP and len(calls) < 2:
            raise ValueError("a multi_step intent has two or more steps")
        return self


class Decorations(_Strict):
    """Openers and closers put around a query ("Hi! ... Thanks!"): more distinct prompts
    from one template. An empty string is a plain query; repeat it to weight it."""

    prefixes: list[str] = Field(default_factory=lambda: [""], min_length=1)
    suffixes: list[str] = Field(default_factory=lambda: [""], min_length=1)


class PackSpec(_Strict):
    """One task pack: the tasks for one MCP server."""

    pack: Identifier = Field(description="The pack's name: prefix of every template id.")
    server: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")] = Field(
        description="The server's name in the tool sources (`servers:` key)."
    )
    description: str = ""
    source: dict[str, Any] | None = Field(
        default=None,
        description="How to reach the server when no `--sources` file is given: one "
        "`servers:` entry (`command`/`args`/`env` or `url`).",
    )
    languages: dict[LanguageCode, float] = Field(
        default_factory=lambda: {"en": 1.0},
        min_length=1,
        description="Share of rows per language; every intent needs phrasings in each.",
    )
    category_mix: dict[Category, float] | None = Field(
        default=None,
        description="Target share per category (sums to 1). Unset: the project's default "
        "mix over the categories the pack has.",
    )
    system_prompts: dict[LanguageCode, str] = Field(
        default_factory=dict,
        description="System prompt per language; `en` and `zh` default to the project's.",
    )
    decorations: dict[LanguageCode, Decorations] = Field(default_factory=dict)
    stateful: bool = Field(
        default=False,
        description="The server keeps state between calls (a knowledge graph): rows are "
        "executed one at a time, each after the `reset` calls, and calls are not answered "
        "from earlier rows.",
    )
    reset: list[CallSpec] = Field(
        default_factory=list,
        description="Calls that return a stateful server to a clean state before each row "
        "(later ones may reference earlier ones' results as `$steps[I]`); not recorded.",
    )
    pools: dict[Identifier, Values] = Field(
        default_factory=dict, description="Named value lists that slots draw from (`pool:`)."
    )
    intents: list[IntentSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> PackSpec:
        if abs(sum(self.languages.values()) - 1.0) > 1e-6 or min(self.languages.values()) < 0:
            raise ValueError("languages: shares must be >= 0 and sum to 1")
        if self.category_mix is not None:
            mix = self.category_mix
            if abs(sum(mix.values()) - 1.0) > 1e-6 or min(mix.values()) < 0:
                raise ValueError("category_mix: shares must be >= 0 and sum to 1")
        names = [intent.name for intent in self.intents]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"intent names must be unique: {', '.join(duplicates)}")
        for name, values in self.pools.items():
            lists = values.values() if isinstance(values, dict) else [values]
            if any(not v for v in lists):
                raise ValueError(f"pools.{name} is empty")
            if sum(len(v) for v in lists) > MAX_VALUES:
                raise ValueError(f"pools.{name} holds more than {MAX_VALUES} values")
        return self
