"""`search_knowledge`: a ranked lookup over the world data (countries, cities, products).

Why a hand-rolled ranking over a small fixed corpus: its results must be deterministic and
cheap, since dataset generation runs it for ground truth and every rollout runs it again.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from serving.tools.base import Tool, ToolContext
from serving.tools.builtin.common import object_schema, string_property
from serving.tools.providers import load_world, normalise_key


def _zh_name(city: str) -> str | None:
    return next((c["name_zh"] for c in load_world()["cities"] if c["name"] == city), None)


@cache
def _knowledge_records() -> tuple[dict[str, Any], ...]:
    world = load_world()
    records: list[dict[str, Any]] = []
    for country in world["countries"]:
        records.append(
            {
                "title": country["name"],
                "text": (
                    f"{country['name']} is a country. Its capital is {country['capital']}. "
                    f"Currency: {country['currency']}. Time zone of the capital: "
                    f"{country['timezone']}. Language: {country['language']}. Population: "
                    f"{country['population_millions']} million."
                ),
                "facts": {
                    **{k: v for k, v in country.items() if k != "name"},
                    "capital_zh": _zh_name(country["capital"]),
                },
            }
        )
    for city in world["cities"]:
        records.append(
            {
                "title": city["name"],
                "text": (
                    f"{city['name']} ({city['name_zh']}) is a city in {city['country']}. "
                    f"Time zone: {city['timezone']}. Elevation: {city['elevation_m']} m."
                ),
                "facts": {
                    "country": city["country"],
                    "timezone": city["timezone"],
                    "elevation_m": city["elevation_m"],
                    "name_zh": city["name_zh"],
                },
            }
        )
    for product in world["products"]:
        records.append(
            {
                "title": product["name"],
                "text": (
                    f"{product['name']} ({product['key']}), list price {product['price_usd']} USD."
                ),
                "facts": {"product": product["key"], "price_usd": product["price_usd"]},
            }
        )
    return tuple(records)


_STOP = {"the", "of", "a", "an", "is", "what", "in", "for", "which", "and", "to", "s"}


@cache
def _knowledge_index() -> tuple[tuple[str, frozenset[str], dict[str, Any]], ...]:
    return tuple(
        (normalise_key(r["title"]), frozenset(normalise_key(r["text"]).split()), r)
        for r in _knowledge_records()
    )


def _search(args: dict[str, Any], _: ToolContext) -> dict[str, Any]:
    """Rank records by query-term overlap, with a bonus when a record's title is named."""
    query = normalise_key(args["query"])
    terms = {t for t in query.split() if t not in _STOP}
    scored: list[tuple[float, int, dict[str, Any]]] = []
    for position, (title, words, record) in enumerate(_knowledge_index()):
        score = len(terms & words) + (3.0 if title in query else 0.0)
        if score > 0:
            scored.append((score, -position, record))
    scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
    hits = [record for _, _, record in scored[: args.get("top_k", 3)]]
    return {"query": args["query"], "results": hits}


def search_knowledge_tool() -> Tool:
    return Tool(
        "search_knowledge",
        "Search a knowledge base of countries, cities and products "
        "(capitals, currencies, time zones, populations, list prices).",
        object_schema(
            {
                "query": string_property("What to look up, e.g. 'capital of France'", 200),
                "top_k": {
                    "type": "integer",
                    "description": "How many results",
                    "default": 3,
                    "minimum": 1,
                    "maximum": 10,
                },
            },
            ["query"],
        ),
        _search,
        result_fields=("results",),
    )
