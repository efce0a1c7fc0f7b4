"""The checks of one intent of a pack: its slots, phrasings, calls, answers and `missing`
argument, and the arguments its sampled slot draws fill, against the server's schemas.

Why per intent: every problem is reported with the intent's file line and name, and an
intent's checks read only the intent, the pack's shared pools and the server's tools.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jsonschema.protocols import Validator

from training.data.packs.arguments import blank_references, reference_paths, schema_problems
from training.data.packs.loader import LoadedPack
from training.data.packs.model import CallSpec, IntentSpec, PackSpec, step_calls
from training.data.packs.refs import (
    RefError,
    ResultRef,
    fill,
    placeholders,
    references_in,
    slots_in,
)
from training.data.packs.slot_model import SlotSpec
from training.data.packs.slots import SlotError, candidates, draw_slots

SAMPLE_DRAWS = 12
"""Slot draws per intent and language whose filled arguments are schema-checked."""


class ProblemReport:
    """The problems found so far, each once, as `file:line: label: message`."""

    def __init__(self, loaded: LoadedPack) -> None:
        self.loaded = loaded
        self.problems: list[str] = []

    def add(self, location: Sequence[str | int], label: str, message: str) -> None:
        line = self.loaded.where(location)
        entry = f"{line}: {label}: {message}"
        if entry not in self.problems:
            self.problems.append(entry)


def _check_slot_fields(
    report: ProblemReport,
    intent: IntentSpec,
    pack: PackSpec,
    lang: str,
    used: Iterable[Any],
    location: Sequence[str | int],
    label: str,
) -> None:
    for placeholder in used:
        spec = intent.slots.get(placeholder.slot)
        if spec is None:
            known = ", ".join(intent.slots) or "none"
            report.add(location, label, f"unknown slot {{{placeholder.slot}}} (slots: {known})")
            continue
        if placeholder.field is None:
            continue
        kind = next(
            (k for k in ("range", "template", "compute") if getattr(spec, k) is not None), None
        )
        if kind is not None:
            what = {
                "range": "range of integers" if spec.range and spec.range.round is None else "",
                "template": "template (a text)",
                "compute": "computed number",
            }[kind] or "range of decimals"
            report.add(
                location,
                label,
                f"{{{placeholder.slot}.{placeholder.field}}}: slot {placeholder.slot!r} is a "
                f"{what}, which have no fields",
            )
            continue
        try:
            values = candidates(spec, pack, lang)
        except SlotError:
            continue  # reported with the slot itself
        if values is None:
            continue  # looked up or one_of: checked when drawn
        lacking = [v for v in values if not isinstance(v, Mapping) or placeholder.field not in v]
        if lacking:
            report.add(
                location,
                label,
                f"{{{placeholder.slot}.{placeholder.field}}}: {len(lacking)} value(s) of the "
                f"slot have no field {placeholder.field!r}, e.g. {str(lacking[0])[:80]}",
            )


def _slot_texts(spec: SlotSpec) -> list[str]:
    """The templates a slot is made from (`template`, `compute`, a `lookup` key)."""
    texts: list[str] = []
    if spec.template is not None:
        entries = spec.template.values() if isinstance(spec.template, dict) else [spec.template]
        for entry in entries:
            texts.extend(entry if isinstance(entry, list) else [entry])
    if spec.compute is not None:
        texts.append(spec.compute)
    if spec.lookup is not None:
        texts.append(spec.lookup.key)
    for alternative in spec.one_of or []:
        texts.extend(_slot_texts(alternative))
    return texts


def _check_call_index(
    report: ProblemReport,
    ref: ResultRef,
    step_sizes: Sequence[int],
    location: Sequence[str | int],
    label: str,
) -> None:
    """A reference into an existing step names one of its calls: `.calls[J]` when the step
    holds several, and J within them."""
    size = step_sizes[ref.step]
    if ref.call is None and size != 1:
        report.add(location, label, f"{ref.text}: step {ref.step} has {size} calls; use .calls[J]")
    elif ref.call is not None and ref.call >= size:
        report.add(location, label, f"{ref.text}: step {ref.step} has no call {ref.call}")


def check_call(
    report: ProblemReport,
    call: CallSpec,
    tools: Mapping[str, Mapping[str, Any]],
    step_index: int,
    step_sizes: Sequence[int],
    location: Sequence[str | int],
    label: str,
) -> None:
    if call.tool not in tools:
        report.add(
            location,
            label,
            f"unknown tool {call.tool!r}: the server lists {', '.join(sorted(tools)) or 'none'}",
        )
    for name in call.free_arguments:
        if name not in call.arguments:
            report.add(location, label, f"free argument {name!r} is not among the arguments")
    try:
        refs = references_in(call.arguments)
    except RefError as exc:
        report.add(location, label, str(exc))
        return
    for ref in refs:
        if ref.step >= step_index:
            report.add(
                location,
                label,
                f"{ref.text} points to step {ref.step}, which is not an earlier step (this "
                f"is step {step_index}; a reference reads only results already produced)",
            )
            continue
        _check_call_index(report, ref, step_sizes, location, label)


def _check_slots(
    report: ProblemReport, base: list[str | int], label: str, intent: IntentSpec, pack: PackSpec
) -> None:
    """Each slot: its values exist in every language, the placeholders of its templates name
    known slots and fields, `distinct_from` names a known slot."""
    for name, spec in intent.slots.items():
        where = [*base, "slots", name]
        for lang in pack.languages:
            try:
                candidates(spec, pack, lang)
            except SlotError as exc:
                report.add(where, label, f"slot {name!r}: {exc}")
        for text in _slot_texts(spec):
            try:
                used = placeholders(text)
            except RefError as exc:
                report.add(where, label, f"slot {name!r}: {exc}")
                continue
            for lang in pack.languages:
                _check_slot_fields(report, intent, pack, lang, used, where, label)
        for other in spec.distinct_from:
            if other.split(".", 1)[0] not in intent.slots:
                report.add(
                    where, label, f"slot {name!r}: distinct_from names unknown slot {other!r}"
                )


def _check_phrasings(
    report: ProblemReport, base: list[str | int], label: str, intent: IntentSpec, pack: PackSpec
) -> None:
    """Every language of the pack has at least two phrasings (one can be held out for test),
    whose placeholders name known slots and fields."""
    for lang in pack.languages:
        texts = intent.phrasings.get(lang)
        if not texts:
            report.add(
                [*base, "phrasings"], label, f"no phrasings in {lang!r}, which `languages` asks for"
            )
            continue
        if len(texts) < 2:
            report.add(
                [*base, "phrasings", lang],
                label,
                f"{lang}: one phrasing only; give at least 2 so one can be held out for test",
            )
        for tid, text in texts.items():
            where = [*base, "phrasings", lang, tid]
            try:
                used = placeholders(text)
            except RefError as exc:
                report.add(where, label, str(exc))
                continue
            _check_slot_fields(report, intent, pack, lang, used, where, label)


def _check_steps(
    report: ProblemReport,
    base: list[str | int],
    label: str,
    intent: IntentSpec,
    pack: PackSpec,
    tools: Mapping[str, Mapping[str, Any]],
) -> None:
    """Each call of each step: a listed tool, references to earlier calls only, slots that
    exist."""
    step_sizes = [len(step_calls(s)) for s in intent.steps]
    for s_index, step in enumerate(intent.steps):
        for c_index, call in enumerate(step_calls(step)):
            at: list[str | int] = [*base, "steps", s_index]
            if step_sizes[s_index] > 1:
                at += ["parallel", c_index]
            check_call(report, call, tools, s_index, step_sizes, at, label)
            try:
                used_slots = slots_in(call.arguments)
            except RefError as exc:
                report.add(at, label, str(exc))
                continue
            for lang in pack.languages:
                _check_slot_fields(report, intent, pack, lang, used_slots, at, label)


def _check_answers(
    report: ProblemReport, base: list[str | int], label: str, intent: IntentSpec, pack: PackSpec
) -> None:
    """Each expected answer: its references point to a call the intent makes, its slots
    exist."""
    step_sizes = [len(step_calls(s)) for s in intent.steps]
    for a_index, answer in enumerate(intent.answers):
        where = [*base, "answers", a_index]
        try:
            refs = references_in(answer)
            used_slots = slots_in(answer)
        except RefError as exc:
            report.add(where, label, str(exc))
            continue
        for ref in refs:
            if ref.step >= len(step_sizes):
                report.add(
                    where,
                    label,
                    f"{ref.text} points to step {ref.step}; the intent has "
                    f"{len(step_sizes)} step(s)",
                )
            else:
                _check_call_index(report, ref, step_sizes, where, label)
        for lang in pack.languages:
            _check_slot_fields(report, intent, pack, lang, used_slots, where, label)


def _check_missing(
    report: ProblemReport,
    base: list[str | int],
    label: str,
    intent: IntentSpec,
    tools: Mapping[str, Mapping[str, Any]],
) -> None:
    """A clarification intent's `missing` argument is a required argument of a listed tool."""
    if intent.missing is None:
        return
    where = [*base, "missing"]
    schema = tools.get(intent.missing.tool)
    if schema is None:
        report.add(where, label, f"unknown tool {intent.missing.tool!r} in `missing`")
    elif intent.missing.argument not in (schema.get("required") or []):
        report.add(
            where,
            label,
            f"`missing.argument` {intent.missing.argument!r} is not a required argument of "
            f"{intent.missing.tool} (required: "
            f"{', '.join(schema.get('required') or []) or 'none'})",
        )


def check_intent(
    report: ProblemReport,
    index: int,
    intent: IntentSpec,
    pack: PackSpec,
    tools: Mapping[str, Mapping[str, Any]],
    validators: Mapping[str, Validator],
) -> None:
    """Every problem of one intent, in the order of its YAML keys."""
    base: list[str | int] = ["intents", index]
    label = f"intent {intent.name!r}"
    _check_slots(report, base, label, intent, pack)
    _check_phrasings(report, base, label, intent, pack)
    _check_steps(report, base, label, intent, pack, tools)
    _check_answers(report, base, label, intent, pack)
    _check_missing(report, base, label, intent, tools)
    _check_filled_arguments(report, index, intent, pack, validators, label)


def _check_filled_arguments(
    report: ProblemReport,
    index: int,
    intent: IntentSpec,
    pack: PackSpec,
    validators: Mapping[str, Validator],
    label: str,
) -> None:
    """Fill the arguments from sampled slot draws and validate them against the schemas."""
    rng = random.Random(f"check/{intent.name}")
    for lang in pack.languages:
        for _ in range(SAMPLE_DRAWS):
            try:
                slots = draw_slots(intent, pack, lang, rng)
            except SlotError as exc:
                report.add(["intents", index, "slots"], label, str(exc))
                return
            for s_index, step in enumerate(intent.steps):
                calls = step_calls(step)
                for c_index, call in enumerate(calls):
                    if call.tool not in validators:
                        continue
                    where: list[str | int] = ["intents", index, "steps", s_index]
                    if len(calls) > 1:
                        where += ["parallel", c_index]
                    try:
                        filled = fill(blank_references(call.arguments), slots)
                    except RefError as exc:
                        report.add(where, label, str(exc))
                        continue
                    for problem in schema_problems(
                        validators[call.tool], filled, reference_paths(call.arguments)
                    ):
                        report.add(
                            [*where, "arguments"],
                            label,
                            f"{call.tool} arguments do not fit its inputSchema: {problem}",
                        )
