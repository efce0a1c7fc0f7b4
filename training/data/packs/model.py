"""The typed shape of a task pack: what a YAML pack may say, and nothing else.

Why a strict model (`extra="forbid"` everywhere): a pack is written by hand by someone who
does not read this code; a misspelt key (`phrasing:` for `phrasings:`) must be an error that
names it, not a silently empty intent. Checks that need the server's tool schemas (unknown
tools, arguments that do not fill the schema) live in `check.py`; this module checks only
what the file alone can tell.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    model_validator,
)

from training.data.packs.refs import RefError, placeholders
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


Number = (
    Annotated[int, Field(strict=True)] | Annotated[float, Field(strict=True, allow_inf_nan=False)]
)
"""A YAML number: `"5"` (a string) and `.inf` are refused, not coerced."""
SlotRef = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63})?$")
]
"""A slot, or one field of a slot's mapping value (`city.timezone`)."""
MAX_ROUND_DIGITS = 6


class RangeSpec(_Strict):
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


class PoolFile(_Strict):
    """A pool read from a JSON file that ships beside the pack or with the project's data
    (`serving/data`, e.g. `world.json`), so world data is not copied into the pack.

    `path` is dotted keys into the document; the node found is a list, or a mapping whose
    `items: keys` or `items: values` are the pool."""

    file: JsonFileName
    path: JsonPath
    items: Literal["keys", "values"] | None = Field(
        default=None, description="For a mapping node: its keys or its values."
    )


class LookupSpec(_Strict):
    """A field of an earlier slot's mapping value, chosen by a template: the phrase
    `{phrase}` in the language `{source.key}` names."""

    slot: Identifier
    key: str = Field(min_length=1, max_length=200)


SLOT_SOURCES = ("values", "range", "pool", "template", "compute", "one_of", "lookup")


class SlotSpec(_Strict):
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
    def _slots_in_order(self) -> IntentSpec:
        """A slot made from others (`template`, `compute`, `lookup`, `after`) reads only slots
        declared before it: draws run in declaration order, and a cycle cannot be written.
        (`distinct_from` may name a later slot: the later one's draw does the comparing;
        unknown names are a check problem, `check.py`.)"""
        declared: list[str] = []
        for name, spec in self.slots.items():
            earlier = ", ".join(declared) or "none"
            for used in spec.uses():
                if used == name or used not in declared:
                    what = "itself" if used == name else f"{{{used}}}"
                    where = "" if used == name or used in self.slots else " (no such slot)"
                    raise ValueError(
                        f"slot {name!r} is made from {what}{where}: it may use only slots "
                        f"declared before it ({earlier})"
                    )
            if spec.after is not None and spec.after not in declared:
                raise ValueError(
                    f"slot {name!r}: `after: {spec.after}` names no slot declared before it "
                    f"({earlier})"
                )
            declared.append(name)
        return self

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


SYSTEM_PROMPTS: dict[str, str] = {
    "en": (
        "You are a helpful assistant with access to tools. Call a tool when the question "
        "needs live data, lookups or exact computation; you may call several tools, in "
        "parallel or one after another. Answer directly when no tool is needed. If a required "
        "detail is missing, ask the user for it instead of guessing."
    ),
    "zh": (
        "你是一个可以调用工具的助手。问题需要实时数据、查询或精确计算时调用工具，可以并行或依次调用多个工具。"
        "不需要工具时直接回答。缺少必要信息时请向用户询问，不要猜测。"
    ),
}
"""The project's system prompts: a pack's `system_prompts` default, per language."""
DECORATIONS: dict[str, Decorations] = {
    "en": Decorations(
        prefixes=["", "", "Hi! ", "Hey, ", "Hello. ", "Please help: ", "Quick one: "],
        suffixes=["", "", " Thanks!", " Thank you.", " No rush.", " Cheers."],
    ),
    "zh": Decorations(
        prefixes=["", "", "你好，", "请问，", "麻烦一下，", "嗨，"],
        suffixes=["", "", "谢谢！", "多谢。", "辛苦了。"],
    ),
}
"""The project's openers and closers: a pack's `decorations` default, per language (other
languages: none)."""


class ProjectServerSource(_Strict):
    """`source: {project_server: mock}`: the project's own MCP server (`toolrl mcp serve`'s
    call path), run in-process in mock mode (frozen clock, offline providers, faults off),
    so results are what training rollouts see (`serving.mcp_server.inprocess`)."""

    project_server: Literal["mock"]


def _pool_kind(data: Any) -> str:
    if isinstance(data, PoolFile) or (isinstance(data, dict) and "file" in data):
        return "file"
    return "values"


PoolSpec = Annotated[
    Annotated[Values, Tag("values")] | Annotated[PoolFile, Tag("file")],
    Discriminator(_pool_kind),
]
"""A pool: values in the pack, or `{file: NAME.json, path: KEYS}`."""


def _source_kind(data: Any) -> str:
    if isinstance(data, ProjectServerSource) or (
        isinstance(data, dict) and "project_server" in data
    ):
        return "project"
    return "sources"


SourceSpec = Annotated[
    Annotated[ProjectServerSource, Tag("project")] | Annotated[dict[str, Any], Tag("sources")],
    Discriminator(_source_kind),
]


class PackSpec(_Strict):
    """One task pack: the tasks for one MCP server."""

    pack: Identifier = Field(description="The pack's name: prefix of every template id.")
    server: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")] = Field(
        description="The server's name in the tool sources (`servers:` key)."
    )
    description: str = ""
    source: SourceSpec | None = Field(
        default=None,
        description="How to reach the server when no `--sources` file is given: one "
        "`servers:` entry (`command`/`args`/`env` or `url`), or `{project_server: mock}`.",
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
    session_tools: list[ToolName] = Field(
        default_factory=list,
        description="Tools that keep state per conversation session on an otherwise "
        "stateless server (the project's notes): each row runs in its own session, calls to "
        "them are always sent in it, never shared with another row, and a result that "
        "differs from the recorded one makes the row invalid (`store_conflict`).",
    )
    pools: dict[Identifier, PoolSpec] = Field(
        default_factory=dict,
        description="Named value lists that slots draw from (`pool:`), inline or from a "
        "JSON file (`{file: world.json, path: cities}`).",
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
        if self.stateful and self.session_tools:
            raise ValueError(
                "`session_tools` is for a stateless server with a few stateful tools; a "
                "`stateful: true` pack already sends every call"
            )
        for name, values in self.pools.items():
            if isinstance(values, PoolFile):
                continue  # read and checked when the pack is loaded (`pool_files.py`)
            lists = values.values() if isinstance(values, dict) else [values]
            if any(not v for v in lists):
                raise ValueError(f"pools.{name} is empty")
            if sum(len(v) for v in lists) > MAX_VALUES:
                raise ValueError(f"pools.{name} holds more than {MAX_VALUES} values")
        return self
