"""Data providers behind the tools that would need the internet (weather, exchange rates,
translation). Offline providers read a bundled snapshot and are the default everywhere:
tests, dataset generation, mock mode. An online provider implements the same Protocol and
is plugged in through `ToolContext.providers` in real mode."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Protocol

import httpx

from serving.tools.base import ToolExecutionError


@cache
def load_world() -> dict[str, Any]:
    """The bundled snapshot (countries, cities, USD rates, phrasebook, products)."""
    text = resources.files("serving.data").joinpath("world.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@lru_cache(maxsize=65_536)
def normalise_key(text: str) -> str:
    """Case-, accent- and punctuation-insensitive key, so 'São Paulo!' finds 'sao paulo'."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    kept = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    cleaned = "".join(ch if ch.isalnum() or ch.isspace() or ch == "'" else " " for ch in kept)
    return " ".join(cleaned.split())


class WeatherProvider(Protocol):
    def current(self, location: str) -> dict[str, Any]: ...


class RatesProvider(Protocol):
    def usd_rate(self, currency: str) -> float: ...

    def currencies(self) -> list[str]: ...


class TranslationProvider(Protocol):
    def translate(self, text: str, target_language: str) -> str: ...


@cache
def _city_index() -> dict[str, dict[str, Any]]:
    index: dict[str, dict[str, Any]] = {}
    for city in load_world()["cities"]:
        index[normalise_key(city["name"])] = city
        index[normalise_key(city["name_zh"])] = city
    return index


@cache
def _phrase_index() -> dict[str, dict[str, str]]:
    return {
        normalise_key(variant): entry
        for entry in load_world()["phrasebook"].values()
        for variant in entry.values()
    }


@dataclass(frozen=True)
class OfflineWeather:
    """Current conditions from the bundled snapshot; accepts English or Chinese city names."""

    def current(self, location: str) -> dict[str, Any]:
        city = _city_index().get(normalise_key(location))
        if city is not None:
            return {
                "location": city["name"],
                "country": city["country"],
                "temperature_c": city["temperature_c"],
                "condition": city["condition"],
                "humidity_pct": city["humidity"],
                "wind_kph": city["wind_kph"],
            }
        known = ", ".join(c["name"] for c in load_world()["cities"][:8])
        raise ToolExecutionError(
            f"no weather data for location {location[:60]!r}; try a major city such as {known}"
        )


@dataclass(frozen=True)
class OfflineRates:
    def usd_rate(self, currency: str) -> float:
        rates: dict[str, float] = load_world()["usd_rates"]
        code = currency.strip().upper()
        if code not in rates:
            raise ToolExecutionError(
                f"unknown currency code {currency[:20]!r}; supported: {', '.join(sorted(rates))}"
            )
        return float(rates[code])

    def currencies(self) -> list[str]:
        return sorted(load_world()["usd_rates"])


@dataclass(frozen=True)
class OfflineTranslation:
    """Phrasebook translation: exact phrases in six languages, matched in any of them."""

    def translate(self, text: str, target_language: str) -> str:
        entry = _phrase_index().get(normalise_key(text))
        if entry is not None:
            return str(entry[target_language])
        raise ToolExecutionError(
            "the offline phrasebook has no translation for this text; "
            "try a common phrase such as 'hello' or 'thank you'"
        )


@dataclass(frozen=True)
class HttpJsonWeather:
    """Online provider: GET `url_template.format(location=...)`, expecting our JSON shape.
    A thin adapter; deployments point it at their own weather gateway."""

    url_template: str
    timeout_s: float = 5.0

    def current(self, location: str) -> dict[str, Any]:
        try:
            response = httpx.get(
                self.url_template.format(location=location), timeout=self.timeout_s
            )
            response.raise_for_status()
            payload: dict[str, Any] = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ToolExecutionError(f"weather service unavailable: {type(exc).__name__}") from exc
        return payload


DEFAULT_PROVIDERS: dict[str, Any] = {
    "weather": OfflineWeather(),
    "rates": OfflineRates(),
    "translation": OfflineTranslation(),
}
