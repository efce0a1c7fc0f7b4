"""Comparisons the rule reward makes: call against expected call, answer against truth.

Arguments are compared schema-typed, after validation fills defaults (a model that spells out
`unit="celsius"` matches a ground truth that left the default out): numbers by value
(100 == 100.0), strings case-insensitive with all whitespace removed (city, currency and unit
names; "New York" == "new york", "256 * 37" == "256*37"), lists in order, objects by key.
Calls within a turn are matched as a multiset, so parallel calls are order-free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Canon = tuple[Any, ...]
#: (name, argument, value, argument, value, ...), arguments sorted (see `call_key`)
CallKey = tuple[Any, ...]

#: CJK characters count as one token each (Chinese/Japanese/Korean are written without
#: spaces); any other run of non-space characters is a word.
_TOKEN = re.compile(
    r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\s\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]+"
)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _number(value: float) -> Canon:
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range: compare it exactly
        return ("n", str(value))
    return ("n", round(number, 6) if math.isfinite(number) else str(number))


def canonical(value: Any) -> Canon:
    """A hashable form of a JSON value under the matching rules above."""
    kind = type(value)  # exact-type checks first: this runs for every argument of every call
    if kind is str:
        return ("s", "".join(value.casefold().split()))
    if kind is float or kind is int:
        return _number(value)
    if value is None:
        return ("z",)
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, str):
        return ("s", "".join(value.casefold().split()))
    if isinstance(value, list | tuple):
        return ("l", *(canonical(item) for item in value))
    if isinstance(value, Mapping):
        return ("d", *sorted((str(key), canonical(item)) for key, item in value.items()))
    return ("?", repr(value)[:200])


_FREE: Canon = ("free",)


def call_key(
    name: str, arguments: Mapping[str, Any], free: frozenset[str] = frozenset()
) -> CallKey:
    """The matching key of a call: its name, then each argument name followed by the
    `canonical` form of its value, arguments in sorted order. Flat on purpose: one tuple per
    call instead of two per argument, which is faster to build and leaves far fewer objects
    for the garbage collector (keys live in the reward's caches). At this level a string's
    form is the normalised string itself and a finite number's the rounded float itself
    (not `("s", ...)`/`("n", ...)`): a form here only ever meets the form of the same
    argument of another call, and a string, a float and a tuple never compare equal, so
    equality is the same as with `canonical`. Arguments named in `free` (free text such as
    a search query, `ExpectedCall.free_arguments`) only need to be present and non-empty."""
    try:
        order = sorted(arguments)  # tool arguments have string keys: the old `str` order
    except TypeError:
        order = sorted(arguments, key=str)
    parts: list[Any] = [name]
    for key in order:
        value = arguments[key]
        if free and key in free and value is not None and value != "":
            canon: Any = _FREE
        elif isinstance(value, str):
            canon = "".join(value.casefold().split())
        elif isinstance(value, int | float) and not isinstance(value, bool):
            try:  # `_number` without its tuple
                number = float(value)
            except OverflowError:
                canon = ("n", str(value))
            else:
                canon = round(number, 6) if math.isfinite(number) else ("n", str(number))
        else:
            canon = canonical(value)
        parts.append(key if type(key) is str else str(key))
        parts.append(canon)
    return tuple(parts)


def match_calls(actual: Iterable[CallKey], expected: Iterable[CallKey]) -> tuple[int, int]:
    """(full matches by name and arguments, further matches by name only); order-free.

    Greedy removal is an exact multiset intersection (keys are compared for equality only),
    and it is cheaper than Counters for the handful of calls a turn has; the work is
    len(actual) x len(expected), and `expected` is small."""
    actual, remaining = list(actual), list(expected)
    if actual == remaining:  # the common case, and the cheap one
        return len(actual), 0
    full, leftovers = 0, []
    for key in actual:
        if key in remaining:
            remaining.remove(key)
            full += 1
        else:
            leftovers.append(key)
    names = [key[0] for key in remaining]
    name_only = 0
    for key in leftovers:
        if key[0] in names:
            names.remove(key[0])
            name_only += 1
    return full, name_only


def _normalise_text(text: str) -> str:
    return " ".join(text.casefold().split())


def _parse_number(text: str) -> float | None:
    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _decimals(token: str) -> int:
    mantissa = token.lower().split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def numbers_in(text: str) -> list[tuple[float, int]]:
    """Numbers written in `text` with their decimal places ("9,472" -> 9472, 0 places)."""
    found: list[tuple[float, int]] = []
    for match in _NUMBER.finditer(text):
        token = match.group(0)
        value = _parse_number(token)
        if value is not None:
            found.append((value, _decimals(token)))
    return found


def number_matches(
    written: float, places: int, truth: float, rel_tol: float, rounding_rel_tol: float
) -> bool:
    """Equal within `rel_tol`, or a rounding of the truth to the written decimal places that
    is also within `rounding_rel_tol` (7.21 for 7.2134; not 7 for 7.21 at 1%)."""
    diff = abs(written - truth)
    if diff <= max(1e-9, rel_tol * abs(truth)):
        return True
    return diff <= 0.5 * 10.0**-places + 1e-12 and diff <= rounding_rel_tol * abs(truth)


def answer_matches(
    answer: str,
    truth: str,
    answer_numbers: list[tuple[float, int]],
    rel_tol: float,
    rounding_rel_tol: float,
) -> bool:
    """A numeric match for numeric truths ("21" is not found in "121"), else containment
    of the truth in the answer, case- and space-insensitive."""
    value = _parse_number(truth)
    if value is None:
        return _normalise_text(truth) in _normalise_text(answer)
    return any(
        number_matches(written, places, value, rel_tol, rounding_rel_tol)
        for written, places in answer_numbers
    )


PreparedAnswer = tuple[str, float | None, str]


def prepare_answer(truth: str) -> PreparedAnswer:
    """A ground-truth answer in matching form (normalised text, number or None, the number
    as written); done once per ground truth and cached with it."""
    return _normalise_text(truth), _parse_number(truth), truth.strip()


def _written_exactly(answer: str, literal: str) -> bool:
    """The number appears in the answer as its own token, spelled as in the truth (the
    common case, checked without extracting every number)."""
    start = answer.find(literal)
    while start >= 0:
        end = start + len(literal)
        before = answer[start - 1] if start else " "
        after = answer[end : end + 2]
        if not (before.isalnum() or before in "._-,") and not (
            after[:1].isdigit() or (after[:1] in ".," and after[1:2].isdigit())
        ):
            return True
        start = answer.find(literal, start + 1)
    return False


def count_answer_hits(
    answer: str, truths: Sequence[PreparedAnswer], rel_tol: float, rounding_rel_tol: float
) -> int:
    """How many prepared truths `answer` contains (the rules of `answer_matches`)."""
    normalised: str | None = None
    numbers: list[tuple[float, int]] | None = None
    hits = 0
    for text, value, literal in truths:
        if value is None:
            if normalised is None:
                normalised = _normalise_text(answer)
            hits += text in normalised
            continue
        if literal and _written_exactly(answer, literal):
            hits += 1
            continue
        if numbers is None:
            numbers = numbers_in(answer)
        hits += any(
            number_matches(written, places, value, rel_tol, rounding_rel_tol)
            for written, places in numbers
        )
    return hits


def repetition_rate(text: str, n: int, min_ngrams: int) -> float:
    """Share of repeated n-grams in `text` (0 = none). Tokens are words, and single CJK
    characters, so "天气很好天气很好天气很好" counts as repetitive."""
    tokens: list[str] = text.split() if text.isascii() else _TOKEN.findall(text)
    count = len(tokens) - n + 1
    if count < min_ngrams:
        return 0.0
    if n == 3:  # the default, spelled out: about twice as fast as the generic zip
        unique = len(set(zip(tokens, tokens[1:], tokens[2:], strict=False)))
    else:
        unique = len(set(zip(*(tokens[i:] for i in range(n)), strict=False)))
    return 1.0 - unique / count
