"""The tools answered by the context's providers and the world data: `get_current_weather`,
`get_current_time`, `get_exchange_rate`, `translate_text`, `lookup_price`.

Why through providers: the offline providers make every result a function of the
`ToolContext` (clock, rates, phrasebook), so dataset generation computes ground truth by
running this very code; a deployment swaps in live providers without touching a tool.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from serving.tools.base import Tool, ToolContext, ToolExecutionError
from serving.tools.builtin.common import object_schema, provider, rounded, string_property
from serving.tools.providers import (
    RatesProvider,
    TranslationProvider,
    WeatherProvider,
    load_world,
    normalise_key,
)

LANGUAGES = ["english", "chinese", "french", "spanish", "german", "japanese"]
_CURRENCY_RE = re.compile(r"^[A-Za-z]{3}$")


# --- get_current_weather ----------------------------------------------------------------------
def _weather(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    weather: WeatherProvider = provider(context, "weather")
    report = dict(weather.current(args["location"]))
    if args.get("unit") == "fahrenheit" and "temperature_c" in report:
        report["temperature_f"] = rounded(report.pop("temperature_c") * 9 / 5 + 32, 1)
    return report


def current_weather_tool() -> Tool:
    return Tool(
        "get_current_weather",
        "Get the current weather for a city.",
        object_schema(
            {
                "location": string_property("City name, e.g. 'Paris' or '北京'", 80),
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
    )


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


def current_time_tool() -> Tool:
    return Tool(
        "get_current_time",
        "Get the current date and time in a timezone.",
        object_schema(
            {
                "timezone": string_property(
                    "IANA timezone such as 'Asia/Shanghai'", 60, default="UTC"
                )
            },
            [],
        ),
        _current_time,
        check=_check_timezone,
        result_fields=("time", "date"),
    )


# --- get_exchange_rate ------------------------------------------------------------------------
def _check_currencies(args: dict[str, Any]) -> list[str]:
    return [
        f"argument '{key}' must be a 3-letter ISO currency code such as 'USD'"
        for key in ("from_currency", "to_currency")
        if not _CURRENCY_RE.match(args[key])
    ]


def _exchange(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    rates: RatesProvider = provider(context, "rates")
    source, target = args["from_currency"].upper(), args["to_currency"].upper()
    rate = rates.usd_rate(target) / rates.usd_rate(source)
    amount = float(args.get("amount", 1.0))
    return {
        "from_currency": source,
        "to_currency": target,
        "rate": rounded(rate, 6),
        "amount": amount,
        "converted": rounded(amount * rate, 2),
    }


def exchange_rate_tool() -> Tool:
    currencies = sorted(load_world()["usd_rates"])
    return Tool(
        "get_exchange_rate",
        "Get the exchange rate between two currencies and optionally convert an amount.",
        object_schema(
            {
                "from_currency": string_property(
                    "ISO code of the source currency", 3, examples=currencies[:4]
                ),
                "to_currency": string_property("ISO code of the target currency", 3),
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
    )


# --- translate_text ---------------------------------------------------------------------------
def _translate(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    translation: TranslationProvider = provider(context, "translation")
    translated = translation.translate(args["text"], args["target_language"])
    return {"target_language": args["target_language"], "translation": translated}


def translate_text_tool() -> Tool:
    return Tool(
        "translate_text",
        "Translate a short text into another language.",
        object_schema(
            {
                "text": string_property("The text to translate", 1000),
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
    )


# --- lookup_price ------------------------------------------------------------------------------
def _price(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    wanted = normalise_key(args["product"])
    for product in load_world()["products"]:
        if wanted in (normalise_key(product["key"]), normalise_key(product["name"])):
            rates: RatesProvider = provider(context, "rates")
            currency = args.get("currency", "USD").upper()
            price = product["price_usd"] * rates.usd_rate(currency)
            return {"product": product["name"], "currency": currency, "price": rounded(price, 2)}
    keys = ", ".join(p["key"] for p in load_world()["products"][:6])
    raise ToolExecutionError(f"no product matching {args['product'][:40]!r}; try e.g. {keys}")


def _check_price_currency(args: dict[str, Any]) -> list[str]:
    return _check_currencies({"from_currency": args.get("currency", "USD"), "to_currency": "USD"})


def lookup_price_tool() -> Tool:
    return Tool(
        "lookup_price",
        "Look up the list price of a product, in any currency.",
        object_schema(
            {
                "product": string_property("Product name, e.g. 'laptop'", 80),
                "currency": string_property("ISO currency code", 3, default="USD"),
            },
            ["product"],
        ),
        _price,
        check=_check_price_currency,
        result_fields=("price",),
    )
