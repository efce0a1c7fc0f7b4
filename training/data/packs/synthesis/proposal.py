"""Gate 1, the format: an LLM's reply parsed (bounded size, JSON) into tasks whose calls
name real tools with arguments that validate against the tool's `inputSchema`, each as a
pack intent.

Why so strict: the reply is untrusted input (malformed, huge, naming tools that do not
exist, carrying chat-template markers); whatever passes here becomes pack data and prompt
text, so every string is checked and every literal escaped.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from training.data.packs.arguments import reference_paths, schema_problems
from training.data.packs.execute import ServerTool
from training.data.packs.model import IntentSpec
from training.data.packs.refs import RefError, has_reference, references_in
from training.data.packs.synthesis.config import SynthesisConfig
from training.data.packs.synthesis.report import ProposalError
from training.data.schema import Category, Difficulty

MAX_QUERY_CHARS = 1_000
MAX_STEPS = 8
MAX_CALLS_PER_STEP = 8
MAX_ARGUMENT_CHARS = 4_000

_UNSAFE = re.compile(
    r"<\|[^|>]{0,40}\|>|</?(?:tool_call|tool_response|tools|think|function|system)\b|"
    r"im_start|im_end|<\s*/?\s*s\s*>",
    re.IGNORECASE,
)
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F)}
_CJK = re.compile(r"[\u4e00-\u9fff]")
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class ProposedCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tool: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tool", mode="before")
    @classmethod
    def _string(cls, value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError("tool must be a string")
        return value


class ProposedTask(BaseModel):
    """One task as the LLM writes it (extra keys, such as an explanation, are ignored)."""

    model_config = ConfigDict(extra="ignore")

    query: str = Field(min_length=4, max_length=MAX_QUERY_CHARS)
    language: str | None = Field(default=None, max_length=16)
    steps: list[list[ProposedCall]] = Field(min_length=1, max_length=MAX_STEPS)
    answers: list[str] = Field(default_factory=list, max_length=8)

    @field_validator("steps", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> Any:
        """A step may be one call object instead of a list; `name` is read as `tool`."""
        if not isinstance(value, list):
            return value
        steps = []
        for step in value:
            calls = step if isinstance(step, list) else [step]
            if not 1 <= len(calls) <= MAX_CALLS_PER_STEP:
                raise ValueError(f"a step holds 1 to {MAX_CALLS_PER_STEP} calls")
            steps.append(
                [
                    {"tool": c.get("name"), **c} if isinstance(c, dict) and "tool" not in c else c
                    for c in calls
                ]
            )
        return steps


def reply_tasks(content: str, config: SynthesisConfig) -> list[Any]:
    """The task items of one reply (unvalidated), or ProposalError for the whole reply."""
    if len(content) > config.max_reply_chars:
        raise ProposalError("too_large", f"{len(content)} characters")
    fenced = _FENCE.match(content)
    text = fenced.group(1) if fenced else content.strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProposalError("malformed_json", f"{str(exc)[:80]}: {text[:80]!r}") from None
    if isinstance(data, dict) and "tasks" in data:
        data = data["tasks"]
    elif isinstance(data, dict) and "query" in data:
        data = [data]
    if not isinstance(data, list) or not data:
        raise ProposalError("bad_shape", f"no task list in {text[:80]!r}")
    return data


def _unsafe(text: str) -> str | None:
    """Why a string cannot go into a prompt or a call (control or bidi characters, chat
    template markers), or None."""
    if _UNSAFE.search(text):
        return f"chat-template marker in {text[:60]!r}"
    for char in text:
        if char in _BIDI or (unicodedata.category(char) == "Cc" and char not in "\n\t"):
            return f"control character U+{ord(char):04X} in {text[:60]!r}"
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _literal(value: Any) -> Any:
    """An LLM's value as pack data: references (`$steps...`) stay, every other string is
    escaped so its braces or `$` are text, never a slot template."""
    if isinstance(value, str):
        if has_reference(value) and "steps" in value:
            return value
        escaped = value.replace("{", "{{").replace("}", "}}")
        return "$" + escaped if escaped.startswith("$") else escaped
    if isinstance(value, Mapping):
        return {str(k): _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def _category(task: ProposedTask) -> Category:
    if len(task.steps) >= 2:
        return Category.MULTI_STEP
    return Category.PARALLEL if len(task.steps[0]) >= 2 else Category.SINGLE


DIFFICULTY = {
    Category.SINGLE: Difficulty.EASY,
    Category.PARALLEL: Difficulty.MEDIUM,
    Category.MULTI_STEP: Difficulty.HARD,
}


def _language(task: ProposedTask, languages: Sequence[str]) -> str:
    has_cjk = bool(_CJK.search(task.query))
    lang = task.language or ("zh" if has_cjk and "zh" in languages else languages[0])
    if lang not in languages:
        raise ProposalError("language", f"{lang!r} is not one of the pack's {list(languages)}")
    if (lang == "en" and has_cjk) or (lang == "zh" and not has_cjk):
        raise ProposalError("language", f"the query is not in {lang!r}: {task.query[:60]!r}")
    return lang


def _pack_call(
    call: ProposedCall,
    position: int,
    own_names: Mapping[str, str],
    validators: Mapping[str, Any],
) -> dict[str, Any]:
    """One proposed call of step `position` as a pack call: a real tool, arguments within
    bounds, references only to earlier steps, the rest valid against the tool's schema."""
    own = own_names.get(call.tool)
    if own is None:
        raise ProposalError("unknown_tool", f"{call.tool[:60]!r}")
    if len(json.dumps(call.arguments, default=str)) > MAX_ARGUMENT_CHARS:
        raise ProposalError("bad_shape", f"{call.tool}: arguments over limit")
    try:
        refs = references_in(call.arguments)
    except RefError as exc:
        raise ProposalError("reference", str(exc)[:160]) from None
    if any(r.step >= position for r in refs):
        raise ProposalError("reference", f"{call.tool}: points to a step not yet run")
    skip = reference_paths(call.arguments)
    problems = schema_problems(validators[own], call.arguments, skip)
    if problems:
        raise ProposalError("schema", f"{own}: {problems[0]}"[:200])
    return {"tool": own, "arguments": _literal(call.arguments)}


def _pack_steps(
    task: ProposedTask, tools: Mapping[str, ServerTool], validators: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The task's steps as pack steps (a lone call, or `parallel` calls), tools named by the
    server's own names (the LLM may use either the exposed or the server's name)."""
    own_names = {t.exposed: t.name for t in tools.values()}
    own_names |= {t.name: t.name for t in tools.values()}
    steps: list[dict[str, Any]] = []
    for position, step in enumerate(task.steps):
        calls = [_pack_call(call, position, own_names, validators) for call in step]
        steps.append(calls[0] if len(calls) == 1 else {"parallel": calls})
    return steps


def proposal_intent(
    item: Any,
    tools: Mapping[str, ServerTool],
    validators: Mapping[str, Any],
    languages: Sequence[str],
) -> tuple[IntentSpec, str, str]:
    """The format check: one task item as a pack intent (no slots, one phrasing), its
    language and query; ProposalError names the first thing wrong."""
    try:
        task = ProposedTask.model_validate(item)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProposalError("bad_shape", f"{where}: {first['msg']}") from None
    query = task.query.strip()
    for text in (
        query,
        *task.answers,
        *(s for step in task.steps for c in step for s in _strings(c.arguments)),
    ):
        problem = _unsafe(text)
        if problem:
            raise ProposalError("unsafe_text", problem)
    lang = _language(task, languages)
    steps = _pack_steps(task, tools, validators)
    category = _category(task)
    try:
        intent = IntentSpec.model_validate(
            {
                "name": f"llm_{category.value}",
                "category": category,
                "difficulty": DIFFICULTY[category],
                "phrasings": {lang: {"llm": query.replace("{", "{{").replace("}", "}}")}},
                "steps": steps,
                "answers": [_literal(a) for a in task.answers],
            }
        )
    except ValidationError as exc:
        raise ProposalError("bad_shape", str(exc.errors(include_url=False)[0]["msg"])) from None
    return intent, lang, query
