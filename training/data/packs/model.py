"""The typed shape of a task pack: what a YAML pack may say, and nothing else.

Why a strict model (`extra="forbid"` everywhere): a pack is written by hand by someone who
does not read this code; a misspelt key (`phrasing:` for `phrasings:`) must be an error that
names it, not a silently empty intent. Checks that need the server's tool schemas (unknown
tools, arguments that do not fill the schema) live in `check.py`; this module checks only
what the file alone can tell.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, StringConstraints, Tag, model_validator

from training.data.packs.language_defaults import Decorations
from training.data.packs.slot_model import PoolFile, SlotSpec
from training.data.packs.spec_types import (
    MAX_PHRASING_CHARS,
    MAX_VALUES,
    Identifier,
    LanguageCode,
    StrictModel,
    TemplateId,
    ToolName,
    Values,
)
from training.data.schema import Category, Difficulty


class CallSpec(StrictModel):
    """One expected call. Argument strings may hold slot templates (`"{city.tz}"`) or a
    reference into an earlier step's result (`"$steps[0].result.datetime | hhmm"`)."""

    tool: ToolName = Field(description="The tool's name as its server lists it (no prefix).")
    arguments: dict[str, Any] = Field(default_factory=dict)
    free_arguments: list[str] = Field(
        default_factory=list,
        description="Free-text arguments (a search query): present, not compared exactly.",
    )


class ParallelSpec(StrictModel):
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


class MissingSpec(StrictModel):
    """For clarification intents: the call the user would need and the argument left out."""

    tool: ToolName
    argument: str = Field(min_length=1)


class IntentSpec(StrictModel):
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


class ProjectServerSource(StrictModel):
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


class PackSpec(StrictModel):
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
