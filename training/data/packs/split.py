"""Which templates are held out for test: decided per template id, so no test query shares
a phrasing with a training query.

Why not one hash bit per template (the rule of the generator before packs): with the
handful of phrasings a hand-written intent has, a coin per template leaves many intents with
no test template and some categories far under a quarter held out. Here each intent and
language ranks its template ids by the same SHA-1 and holds out the first quarter (at least
one): the share is exact, the choice still depends only on the ids (reordering the YAML
moves nothing), and adding a template moves at most one other.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

TEST_SHARE = 0.25


def template_id(pack: str, intent: str, lang: str, tid: str) -> str:
    return f"{pack}/{intent}/{lang}/{tid}"


def _rank(template: str) -> bytes:
    return hashlib.sha1(template.encode(), usedforsecurity=False).digest()


def held_out(template_ids: Sequence[str]) -> set[str]:
    """The test templates among one intent-language's templates (none if there is only one:
    the pack check refuses that case)."""
    if len(template_ids) < 2:
        return set()
    count = max(1, math.ceil(len(template_ids) * TEST_SHARE))
    return set(sorted(template_ids, key=_rank)[:count])
