"""Normal forms of a query, shared by the generator (a planned query is refused if its form
was drawn before, or its shape is in the other split) and the validation's overlap checks.

Why a module of its own: both sides must compare the same forms, and the pack generator,
the pack check and the validation sit at different levels (the validation reads pack
datasets through `packs.truth`, which uses `packs.check`); here, at the bottom, all of them
can import it without a cycle.
"""

from __future__ import annotations

import re
import unicodedata

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_DIGITS = re.compile(r"\d+(?:\.\d+)?")


def normalise_query(text: str) -> str:
    """Lowercase, width-folded, punctuation-free, single-spaced: catches trivial re-spellings."""
    folded = unicodedata.normalize("NFKC", str(text)).casefold()
    return " ".join(_PUNCT.sub(" ", folded).split())


def query_shape(text: str) -> str:
    """The normalised query with numbers masked: two queries with the same shape differ only
    in their numbers, i.e. are near-duplicates."""
    return _DIGITS.sub("#", normalise_query(text))
