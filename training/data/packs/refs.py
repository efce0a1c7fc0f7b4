"""The two kinds of placeholder a pack string may hold, parsed and filled without `eval`.

- Slot templates: `{city}`, `{city.tz}`, `{hour:02d}`, `{{` / `}}` for literal braces. A
  field is a key lookup in a slot's mapping value, never an attribute (`str.format` would
  let `{x.__class__}` walk Python objects); the optional spec goes to `format()` with a value
  that is a str, int, float or bool, which cannot reach anything either. An argument that is
  exactly one placeholder keeps the slot value's type (`{count}` fills an integer argument).
- Result references: a string starting with `$` points into an earlier call of the same
  row, e.g. `$steps[0].result.datetime | hhmm` or `$steps[1].calls[0].result.entities[*].name`.
  Grammar: `$steps[I]` then optionally `.calls[J]`, then `.result` or `.arguments`, then any
  of `.key`, `[N]`, `["key"]`, `[*]` (apply the rest to each element), then `| filter`s from
  a fixed list (`FILTERS`). A string starting with `$$` is literal (one `$` dropped), and
  `$` followed by anything but a letter is plain text. The step index is known statically,
  so a pack check can refuse a reference to the same or a later step before anything runs.
  Inside a longer string a reference is written `${steps[0].result.converted | num}` (a
  number without a trailing `.0`), e.g. `"${steps[0].result.converted}/{people}"`; a
  literal `${x}` is written `${{x}}`, as braces are everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_REF_CHARS = 300
MAX_SPEC_CHARS = 16


class RefError(ValueError):
    """A template or reference that does not parse, or finds nothing when filled."""


# ---- slot templates ---------------------------------------------------------------------
_PLACEHOLDER = re.compile(
    r"\{\{|\}\}|\{(?P<slot>[A-Za-z_][A-Za-z0-9_]*)(?:\.(?P<field>[A-Za-z_][A-Za-z0-9_]*))?"
    r"(?::(?P<spec>[^{}]*))?\}|\{|\}"
)


@dataclass(frozen=True, slots=True)
class Placeholder:
    slot: str
    field: str | None
    spec: str | None


def placeholders(template: str) -> list[Placeholder]:
    """Every `{slot...}` in `template`; RefError for a stray brace or a bad spec."""
    found = []
    for match in _PLACEHOLDER.finditer(template):
        text = match.group(0)
        if text in ("{{", "}}"):
            continue
        if match.group("slot") is None:
            raise RefError(
                f"stray {text!r} in {template!r}: write {{slot}} or {{slot.field}}, and "
                f"{text * 2!r} for a literal brace"
            )
        spec = match.group("spec")
        if spec is not None and (
            len(spec) > MAX_SPEC_CHARS
            or not re.fullmatch(r"[\w<>^=+ ,.%-]*", spec)
            or re.search(r"\d{3,}", spec)  # a width of 10**9 would allocate a gigabyte
        ):
            raise RefError(f"format spec {spec!r} in {template!r} is not allowed")
        found.append(Placeholder(match.group("slot"), match.group("field"), spec))
    return found


def _slot_value(placeholder: Placeholder, slots: Mapping[str, Any]) -> Any:
    if placeholder.slot not in slots:
        raise RefError(f"unknown slot {{{placeholder.slot}}}")
    value = slots[placeholder.slot]
    if placeholder.field is not None:
        if not isinstance(value, Mapping) or placeholder.field not in value:
            raise RefError(
                f"{{{placeholder.slot}.{placeholder.field}}}: the slot's value has no field "
                f"{placeholder.field!r}"
            )
        value = value[placeholder.field]
    return value


def _formatted(placeholder: Placeholder, value: Any) -> str:
    if not isinstance(value, str | int | float | bool) and value is not None:
        raise RefError(
            f"{{{placeholder.slot}}} is a {type(value).__name__}: put a field in the "
            f"template ({{{placeholder.slot}.FIELD}})"
        )
    if placeholder.spec:
        try:
            return format(value, placeholder.spec)
        except (ValueError, TypeError) as exc:
            raise RefError(
                f"format spec {placeholder.spec!r} does not fit {value!r}: {exc}"
            ) from None
    return "" if value is None else str(value)


def render_text(template: str, slots: Mapping[str, Any]) -> str:
    """Fill every placeholder of `template` with the slots' values."""

    def replace(match: re.Match[str]) -> str:
        text = match.group(0)
        if text == "{{":
            return "{"
        if text == "}}":
            return "}"
        if match.group("slot") is None:
            raise RefError(f"stray {text!r} in {template!r}")
        placeholder = Placeholder(match.group("slot"), match.group("field"), match.group("spec"))
        return _formatted(placeholder, _slot_value(placeholder, slots))

    placeholders(template)  # refuses bad specs before any value is formatted
    return _PLACEHOLDER.sub(replace, template)


def _whole_placeholder(template: str) -> Placeholder | None:
    """The placeholder when `template` is nothing but one (its value keeps its type)."""
    match = _PLACEHOLDER.fullmatch(template)
    if match and match.group("slot") is not None and match.group("spec") is None:
        return Placeholder(match.group("slot"), match.group("field"), None)
    return None


# ---- result references ------------------------------------------------------------------
def _hhmm(value: Any) -> str:
    match = re.search(r"(\d{2}):(\d{2})", str(value))
    if not match:
        raise RefError(f"hhmm: no HH:MM in {str(value)[:60]!r}")
    return f"{match.group(1)}:{match.group(2)}"


def _date(value: Any) -> str:
    match = re.search(r"\d{4}-\d{2}-\d{2}", str(value))
    if not match:
        raise RefError(f"date: no YYYY-MM-DD in {str(value)[:60]!r}")
    return match.group(0)


def _sequence(name: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise RefError(f"{name}: expects a list, got {type(value).__name__}")
    if not value and name in ("first", "last"):
        raise RefError(f"{name}: the list is empty")
    return value


def _int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        raise RefError(f"int: {str(value)[:60]!r} is not a number") from None


FILTERS: dict[str, Callable[[Any], Any]] = {
    "hhmm": _hhmm,
    "date": _date,
    "str": lambda v: v if isinstance(v, str) else str(v),
    "int": _int,
    "lower": lambda v: str(v).lower(),
    "upper": lambda v: str(v).upper(),
    "first": lambda v: _sequence("first", v)[0],
    "last": lambda v: _sequence("last", v)[-1],
    "len": lambda v: len(v) if isinstance(v, list | str | dict) else _sequence("len", v),
    "join": lambda v: ", ".join(str(x) for x in _sequence("join", v)),
    "num": lambda v: _num(v),
}
"""What a reference may apply to the value it found; nothing else runs."""

_HEAD = re.compile(
    r"\$steps\[(?P<step>\d{1,2})\](?:\.calls\[(?P<call>\d{1,2})\])?\.(?P<root>result|arguments)"
)
_SEGMENT = re.compile(
    r"\.(?P<key>[A-Za-z_][A-Za-z0-9_-]*)|\[(?P<index>-?\d{1,6})\]|\[(?P<quoted>\"[^\"]*\"|'[^']*')\]|(?P<star>\[\*\])"
)


@dataclass(frozen=True, slots=True)
class ResultRef:
    """A parsed `$steps[...]` reference."""

    text: str
    step: int
    call: int | None
    root: str
    """`result` or `arguments`."""
    path: tuple[str | int | None, ...]
    """Keys, indices, and None for `[*]`."""
    filters: tuple[str, ...]


_INLINE = re.compile(r"\$\{([^{}]{1,300})\}")
"""`${steps[0].result.x | num}` inside a longer string."""


def is_reference(value: Any) -> bool:
    """A string that is one whole reference (`$` then a letter: `$steps[...]`)."""
    return isinstance(value, str) and len(value) > 1 and value[0] == "$" and value[1].isalpha()


def has_reference(value: Any) -> bool:
    """A string whose value comes (wholly or partly) from an earlier result."""
    return is_reference(value) or (isinstance(value, str) and bool(_INLINE.search(value)))


def _num(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _split_inline(text: str) -> list[tuple[bool, str]]:
    """The text as (is_reference, piece) parts; literal pieces keep their slot templates."""
    parts: list[tuple[bool, str]] = []
    position = 0
    for match in _INLINE.finditer(text):
        parts.append((False, text[position : match.start()]))
        parts.append((True, "$" + match.group(1).strip()))
        position = match.end()
    parts.append((False, text[position:]))
    return parts


def parse_ref(text: str) -> ResultRef:
    if len(text) > MAX_REF_CHARS:
        raise RefError(f"reference over {MAX_REF_CHARS} characters")
    body, *filters = [part.strip() for part in text.split("|")]
    head = _HEAD.match(body)
    if not head:
        raise RefError(
            f"{text!r}: a reference starts $steps[I].result, $steps[I].arguments or "
            "$steps[I].calls[J].result"
        )
    path: list[str | int | None] = []
    position = head.end()
    while position < len(body):
        segment = _SEGMENT.match(body, position)
        if not segment:
            raise RefError(f"{text!r}: cannot read the path from {body[position:]!r}")
        if segment.group("key") is not None:
            path.append(segment.group("key"))
        elif segment.group("index") is not None:
            path.append(int(segment.group("index")))
        elif segment.group("quoted") is not None:
            path.append(segment.group("quoted")[1:-1])
        else:
            path.append(None)
        position = segment.end()
    unknown = [f for f in filters if f not in FILTERS]
    if unknown:
        raise RefError(f"{text!r}: unknown filter {unknown[0]!r} (known: {', '.join(FILTERS)})")
    call = head.group("call")
    return ResultRef(
        text,
        int(head.group("step")),
        None if call is None else int(call),
        head.group("root"),
        tuple(path),
        tuple(filters),
    )


@dataclass(frozen=True, slots=True)
class ExecutedCall:
    """What a reference can see of an earlier call."""

    arguments: Mapping[str, Any]
    result: Any


def _walk(value: Any, path: Sequence[str | int | None], ref: ResultRef) -> Any:
    for position, part in enumerate(path):
        if part is None:
            if not isinstance(value, list):
                raise RefError(f"{ref.text}: [*] needs a list, found {type(value).__name__}")
            return [_walk(item, path[position + 1 :], ref) for item in value]
        if isinstance(part, int):
            if not isinstance(value, list) or not -len(value) <= part < len(value):
                raise RefError(f"{ref.text}: no element [{part}] in the result")
            value = value[part]
        else:
            if not isinstance(value, Mapping) or part not in value:
                keys = ", ".join(sorted(value)) if isinstance(value, Mapping) else ""
                raise RefError(
                    f"{ref.text}: the result has no key {part!r}"
                    + (f" (it has: {keys[:120]})" if keys else "")
                )
            value = value[part]
    return value


def resolve_ref(ref: ResultRef, steps: Sequence[Sequence[ExecutedCall]]) -> Any:
    """The value `ref` points at in the executed steps so far; RefError if none."""
    if ref.step >= len(steps):
        raise RefError(f"{ref.text}: step {ref.step} has not run yet")
    calls = steps[ref.step]
    if ref.call is None and len(calls) != 1:
        raise RefError(f"{ref.text}: step {ref.step} has {len(calls)} calls; use .calls[J]")
    index = ref.call or 0
    if index >= len(calls):
        raise RefError(f"{ref.text}: step {ref.step} has no call {index}")
    source = calls[index].result if ref.root == "result" else calls[index].arguments
    value = _walk(source, ref.path, ref)
    for name in ref.filters:
        value = FILTERS[name](value)
    if value is None:
        raise RefError(f"{ref.text}: found null")
    return value


# ---- filling a whole value --------------------------------------------------------------
def fill(value: Any, slots: Mapping[str, Any], steps: Sequence[Sequence[ExecutedCall]] = ()) -> Any:
    """An argument (or answer) with its templates and references filled, recursively."""
    if isinstance(value, str):
        if is_reference(value):
            return resolve_ref(parse_ref(value), steps)
        if value.startswith("$$"):
            value = value[1:]
        if _INLINE.search(value):
            return "".join(
                _num(resolve_ref(parse_ref(piece), steps)) if is_ref else render_text(piece, slots)
                for is_ref, piece in _split_inline(value)
            )
        whole = _whole_placeholder(value)
        if whole is not None:
            return _slot_value(whole, slots)
        return render_text(value, slots)
    if isinstance(value, Mapping):
        return {str(k): fill(v, slots, steps) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, slots, steps) for v in value]
    return value


def references_in(value: Any) -> list[ResultRef]:
    """Every result reference inside a (nested) value; RefError for one that does not parse."""
    if is_reference(value):
        return [parse_ref(value)]
    if isinstance(value, str):
        return [parse_ref(piece) for is_ref, piece in _split_inline(value) if is_ref]
    if isinstance(value, Mapping):
        return [ref for v in value.values() for ref in references_in(v)]
    if isinstance(value, list):
        return [ref for v in value for ref in references_in(v)]
    return []


def slots_in(value: Any) -> list[Placeholder]:
    """Every slot placeholder inside a (nested) value; RefError for a malformed one."""
    if isinstance(value, str):
        if is_reference(value):
            return []
        text = value[1:] if value.startswith("$$") else value
        return [
            p for is_ref, piece in _split_inline(text) if not is_ref for p in placeholders(piece)
        ]
    if isinstance(value, Mapping):
        return [p for v in value.values() for p in slots_in(v)]
    if isinstance(value, list):
        return [p for v in value for p in slots_in(v)]
    return []
