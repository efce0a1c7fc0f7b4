"""The tools themselves: schema, semantic checks and implementation, side by side.

Each implementation returns a small JSON object. Results are deterministic given the
`ToolContext` (clock, providers, notes), which is what lets dataset generation compute
ground truth by executing the very code the MCP server runs.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import cache, lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import pint

from serving.tools.base import Tool, ToolContext, ToolExecutionError
from serving.tools.providers import (
    DEFAULT_PROVIDERS,
    RatesProvider,
    TranslationProvider,
    WeatherProvider,
    load_world,
    normalise_key,
)
from serving.tools.safe_math import MathError, evaluate, format_number

LANGUAGES = ["english", "chinese", "french", "spanish", "german", "japanese"]
_CURRENCY_RE = re.compile(r"^[A-Za-z]{3}$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _provider(context: ToolContext, key: str) -> Any:
    return context.providers.get(key) or DEFAULT_PROVIDERS[key]


def _round(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}f}")


# --- calculate_math -----------------------------------------------------------------------
def _calculate(args: dict[str, Any], _: ToolContext) -> dict[str, Any]:
    try:
        value = evaluate(args["expression"])
    except MathError as exc:
        raise ToolExecutionError(f"cannot evaluate expression: {exc}") from exc
    return {"expression": args["expression"], "result": format_number(value)}


# --- unit_converter -------------------------------------------------------------------------
@cache
def unit_registry() -> pint.UnitRegistry:  # type: ignore[type-arg]
    """One registry per process: building it costs ~100 ms, conversions then cost µs."""
    return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


_UNIT_ALIASES = {
    "celsius": "degC",
    "°c": "degC",
    "c": "degC",
    "fahrenheit": "degF",
    "°f": "degF",
    "f": "degF",
    "kelvin": "kelvin",
    "k": "kelvin",
    "miles": "mile",
    "mph": "mile/hour",
    "kph": "km/hour",
    "km/h": "km/hour",
    "kmh": "km/hour",
    "lbs": "pound",
    "lb": "pound",
    "kgs": "kg",
    "feet": "foot",
    "ft": "foot",
    "inches": "inch",
    "in": "inch",
    "litres": "liter",
    "liters": "liter",
    "l": "liter",
    "gallons": "gallon",
    "oz": "ounce",
}


@lru_cache(maxsize=1024)
def _unit(name: str) -> pint.Unit:
    """Resolve a unit name; cached because pint's parser dominates conversion time."""
    stripped = name.strip()
    candidates = [_UNIT_ALIASES.get(stripped.lower(), stripped), stripped.lower()]
    for key in candidates:
        try:
            return unit_registry().Unit(key)
        except Exception:  # noqa: S112 - pint's parser raises a zoo of types on garbage input
            continue
    raise ToolExecutionError(f"unknown unit {name[:30]!r}")


def _convert_units(args: dict[str, Any], _: ToolContext) -> dict[str, Any]:
    source, target = _unit(args["from_unit"]), _unit(args["to_unit"])
    registry = unit_registry()
    try:
        converted = registry.Quantity(args["value"], source).to(target).magnitude
    except pint.errors.DimensionalityError as exc:
        raise ToolExecutionError(
            f"cannot convert {args['from_unit']} to {args['to_unit']}: different kinds of quantity"
        ) from exc
    return {
        "value": args["value"],
        "from_unit": args["from_unit"],
        "to_unit": args["to_unit"],
        "result": _round(float(converted)),
    }


# --- get_current_weather ----------------------------------------------------------------------
def _weather(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    provider: WeatherProvider = _provider(context, "weather")
    report = dict(provider.current(args["location"]))
    if args.get("unit") == "fahrenheit" and "temperature_c" in report:
        report["temperature_f"] = _round(report.pop("temperature_c") * 9 / 5 + 32, 1)
    return report


# --- get_current_time -------------------------------------------------------------------------
@cache
def _timezones() -> frozenset[str]:
    return frozenset(available_timezones())


def _check_timezone(args: dict[str, Any]) -> list[str]:
    zone = args.get("timezone", "UTC")
    if zone not in _timezones():
        return [f"unknown timezone {zone[:40]!r}; use an IANA name such as 'Asia/Shanghai'"]
    return []


def _current_time(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    try:
        zone = ZoneInfo(args.get("timezone", "UTC"))
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolExecutionError("unknown timezone") from exc
    local = context.now().astimezone(zone)
    return {
        "timezone": str(zone),
        "datetime": local.isoformat(timespec="seconds"),
        "date": local.date().isoformat(),
        "time": local.strftime("%H:%M"),
        "weekday": local.strftime("%A"),
    }


# --- get_exchange_rate ------------------------------------------------------------------------
def _check_currencies(args: dict[str, Any]) -> list[str]:
    return [
        f"argument '{key}' must be a 3-letter ISO currency code such as 'USD'"
        for key in ("from_currency", "to_currency")
        if not _CURRENCY_RE.match(args[key])
    ]


def _exchange(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    rates: RatesProvider = _provider(context, "rates")
    source, target = args["from_currency"].upper(), args["to_currency"].upper()
    rate = rates.usd_rate(target) / rates.usd_rate(source)
    amount = float(args.get("amount", 1.0))
    return {
        "from_currency": source,
        "to_currency": target,
        "rate": _round(rate, 6),
        "amount": amount,
        "converted": _round(amount * rate, 2),
    }


# --- translate_text ---------------------------------------------------------------------------
def _translate(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    provider: TranslationProvider = _provider(context, "translation")
    translated = provider.translate(args["text"], args["target_language"])
    return {"target_language": args["target_language"], "translation": translated}


# --- search_knowledge -------------------------------------------------------------------------
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


# --- date_calculator ---------------------------------------------------------------------------
def _parse_date(name: str, value: str) -> dt.date:
    if not _DATE_RE.match(value):
        raise ToolExecutionError(f"argument '{name}' must be a date as YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ToolExecutionError(f"argument '{name}' is not a real calendar date") from exc


def _check_dates(args: dict[str, Any]) -> list[str]:
    operation = args["operation"]
    if operation == "add_days" and "days" not in args:
        return ["operation 'add_days' needs the argument 'days'"]
    if operation == "days_between" and "end_date" not in args:
        return ["operation 'days_between' needs the argument 'end_date'"]
    return []


def _dates(args: dict[str, Any], _: ToolContext) -> dict[str, Any]:
    start = _parse_date("start_date", args["start_date"])
    if args["operation"] == "add_days":
        try:
            result = start + dt.timedelta(days=args["days"])
        except OverflowError as exc:
            raise ToolExecutionError("resulting date is out of range") from exc
        return {
            "start_date": start.isoformat(),
            "days": args["days"],
            "result": result.isoformat(),
            "weekday": result.strftime("%A"),
        }
    end = _parse_date("end_date", args["end_date"])
    return {
        "start_date": start.isoformat(),
        "end_date": end.isoformat(),
        "result": (end - start).days,
    }


# --- lookup_price ------------------------------------------------------------------------------
def _price(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    wanted = normalise_key(args["product"])
    for product in load_world()["products"]:
        if wanted in (normalise_key(product["key"]), normalise_key(product["name"])):
            rates: RatesProvider = _provider(context, "rates")
            currency = args.get("currency", "USD").upper()
            price = product["price_usd"] * rates.usd_rate(currency)
            return {"product": product["name"], "currency": currency, "price": _round(price, 2)}
    keys = ", ".join(p["key"] for p in load_world()["products"][:6])
    raise ToolExecutionError(f"no product matching {args['product'][:40]!r}; try e.g. {keys}")


# --- notes -------------------------------------------------------------------------------------
def _save_note(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    count = context.notes.put(context.session_id, args["title"].strip(), args["content"])
    return {"saved": args["title"].strip(), "notes_stored": count}


def _read_note(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    title = args["title"].strip()
    content = context.notes.get(context.session_id, title)
    if content is None:
        titles = context.notes.titles(context.session_id)
        listing = ", ".join(repr(t) for t in titles[:10]) or "none yet"
        raise ToolExecutionError(f"no note titled {title[:40]!r}; saved notes: {listing}")
    return {"title": title, "content": content}


def _string(description: str, max_length: int = 200, **extra: Any) -> dict[str, Any]:
    return {
        "type": "string",
        "description": description,
        "maxLength": max_length,
        "minLength": 1,
        **extra,
    }


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def build_tools() -> list[Tool]:
    currencies = sorted(load_world()["usd_rates"])
    return [
        Tool(
            "calculate_math",
            "Evaluate an arithmetic expression (+ - * / // % **, sqrt, "
            "log, sin, cos, factorial, round, min, max, pi, e) and return the exact result.",
            _object(
                {"expression": _string("The expression, e.g. '256*37' or 'sqrt(2)*10'", 500)},
                ["expression"],
            ),
            _calculate,
            result_fields=("result",),
        ),
        Tool(
            "unit_converter",
            "Convert a value between units of the same kind (length, mass, "
            "temperature, volume, speed, time, ...).",
            _object(
                {
                    "value": {"type": "number", "description": "The value to convert"},
                    "from_unit": _string("Unit of the value, e.g. 'km', 'degF', 'pound'", 40),
                    "to_unit": _string("Target unit, e.g. 'mile', 'degC', 'kg'", 40),
                },
                ["value", "from_unit", "to_unit"],
            ),
            _convert_units,
            result_fields=("result",),
        ),
        Tool(
            "get_current_weather",
            "Get the current weather for a city.",
            _object(
                {
                    "location": _string("City name, e.g. 'Paris' or '北京'", 80),
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "default": "celsius",
                        "description": "Temperature unit",
                    },
                },
                ["location"],
            ),
            _weather,
            result_fields=("temperature_c", "condition"),
        ),
        Tool(
            "get_current_time",
            "Get the current date and time in a timezone.",
            _object(
                {"timezone": _string("IANA timezone such as 'Asia/Shanghai'", 60, default="UTC")},
                [],
            ),
            _current_time,
            check=_check_timezone,
            result_fields=("time", "date"),
        ),
        Tool(
            "get_exchange_rate",
            "Get the exchange rate between two currencies and optionally convert an amount.",
            _object(
                {
                    "from_currency": _string(
                        "ISO code of the source currency", 3, examples=currencies[:4]
                    ),
                    "to_currency": _string("ISO code of the target currency", 3),
                    "amount": {
                        "type": "number",
                        "description": "Amount to convert",
                        "default": 1.0,
                        "minimum": 0,
                        "maximum": 1e12,
                    },
                },
                ["from_currency", "to_currency"],
            ),
            _exchange,
            check=_check_currencies,
            result_fields=("rate", "converted"),
        ),
        Tool(
            "translate_text",
            "Translate a short text into another language.",
            _object(
                {
                    "text": _string("The text to translate", 1000),
                    "target_language": {
                        "type": "string",
                        "enum": LANGUAGES,
                        "description": "Language to translate into",
                    },
                },
                ["text", "target_language"],
            ),
            _translate,
            result_fields=("translation",),
        ),
        Tool(
            "search_knowledge",
            "Search a knowledge base of countries, cities and products "
            "(capitals, currencies, time zones, populations, list prices).",
            _object(
                {
                    "query": _string("What to look up, e.g. 'capital of France'", 200),
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
        ),
        Tool(
            "date_calculator",
            "Add days to a date, or count the days between two dates.",
            _object(
                {
                    "operation": {
                        "type": "string",
                        "enum": ["add_days", "days_between"],
                        "description": "What to compute",
                    },
                    "start_date": _string("Start date, YYYY-MM-DD", 10),
                    "days": {
                        "type": "integer",
                        "description": "Days to add (add_days)",
                        "minimum": -100000,
                        "maximum": 100000,
                    },
                    "end_date": _string("End date, YYYY-MM-DD (days_between)", 10),
                },
                ["operation", "start_date"],
            ),
            _dates,
            check=_check_dates,
            result_fields=("result",),
        ),
        Tool(
            "lookup_price",
            "Look up the list price of a product, in any currency.",
            _object(
                {
                    "product": _string("Product name, e.g. 'laptop'", 80),
                    "currency": _string("ISO currency code", 3, default="USD"),
                },
                ["product"],
            ),
            _price,
            check=lambda a: _check_currencies(
                {"from_currency": a.get("currency", "USD"), "to_currency": "USD"}
            ),
            result_fields=("price",),
        ),
        Tool(
            "save_note",
            "Save a note to memory under a title, to recall later in the conversation.",
            _object(
                {"title": _string("Short title", 80), "content": _string("Note text", 2000)},
                ["title", "content"],
            ),
            _save_note,
            stateful=True,
            result_fields=("saved",),
        ),
        Tool(
            "read_note",
            "Read a note previously saved under a title.",
            _object({"title": _string("Title of the note", 80)}, ["title"]),
            _read_note,
            stateful=True,
            result_fields=("content",),
        ),
    ]
