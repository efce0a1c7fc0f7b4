"""Intents: what a user wants, how to say it (many phrasings, English and Chinese), and which
tool calls satisfy it. Every intent builds its calls through an `Executor`, which runs the
real tool implementations, so a later call can use an earlier call's result and the ground
truth is whatever the tools actually return.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from serving.tools import ToolContext, get_catalog
from serving.tools.providers import load_world
from training.data.schema import Category, Difficulty, ExpectedCall

Language = str  # "en" | "zh"


class Executor:
    """Runs expected calls step by step against the real tools, recording calls and results."""

    def __init__(self, session_id: str) -> None:
        self.context = ToolContext.reference(session_id=session_id)
        self.steps: list[list[ExpectedCall]] = []
        self.results: list[list[dict[str, Any]]] = []

    def step(self, *calls: ExpectedCall) -> list[dict[str, Any]]:
        catalog = get_catalog()
        outputs = [catalog.execute(c.name, c.arguments, self.context, mode="mock") for c in calls]
        self.steps.append(list(calls))
        self.results.append(outputs)
        return outputs


def call(name: str, free: tuple[str, ...] = (), **arguments: Any) -> ExpectedCall:
    return ExpectedCall(name=name, arguments=arguments, free_arguments=list(free))


@dataclass
class Draft:
    """What an intent returns: the slot values for its phrasing and the answer strings."""

    slots: dict[str, Any]
    answers: list[str] = field(default_factory=list)
    missing_argument: str | None = None


Builder = Callable[[random.Random, Executor, Language], Draft]


@dataclass(frozen=True)
class Intent:
    name: str
    category: Category
    difficulty: Difficulty
    phrasings: dict[Language, tuple[str, ...]]
    build: Builder


def num(value: Any) -> str:
    """Answer string for a number: integers without '.0', floats as the tool printed them."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# ---- world helpers ------------------------------------------------------------------------
def cities() -> list[dict[str, Any]]:
    return list(load_world()["cities"])


def countries() -> list[dict[str, Any]]:
    return list(load_world()["countries"])


def city_name(city: dict[str, Any], lang: Language) -> str:
    return str(city["name_zh"] if lang == "zh" else city["name"])


def capital_city(country: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in cities() if c["name"] == country["capital"]), None)


COUNTRY_ZH = {
    "France": "法国",
    "Germany": "德国",
    "Japan": "日本",
    "China": "中国",
    "United Kingdom": "英国",
    "United States": "美国",
    "Spain": "西班牙",
    "Italy": "意大利",
    "Canada": "加拿大",
    "Australia": "澳大利亚",
    "India": "印度",
    "Brazil": "巴西",
    "South Korea": "韩国",
    "Switzerland": "瑞士",
    "Mexico": "墨西哥",
    "Singapore": "新加坡",
    "Egypt": "埃及",
    "Russia": "俄罗斯",
    "Thailand": "泰国",
    "Sweden": "瑞典",
}
LANG_ZH = {
    "english": "英文",
    "chinese": "中文",
    "french": "法语",
    "spanish": "西班牙语",
    "german": "德语",
    "japanese": "日语",
}
UNIT_PAIRS = [
    ("km", "mile"),
    ("mile", "km"),
    ("kg", "pound"),
    ("pound", "kg"),
    ("degC", "degF"),
    ("degF", "degC"),
    ("meter", "foot"),
    ("foot", "meter"),
    ("liter", "gallon"),
    ("gallon", "liter"),
    ("inch", "cm"),
    ("cm", "inch"),
    ("hour", "minute"),
    ("km/hour", "mile/hour"),
    ("ounce", "gram"),
]
UNIT_WORDS = {
    "km": "kilometers",
    "mile": "miles",
    "kg": "kilograms",
    "pound": "pounds",
    "degC": "degrees Celsius",
    "degF": "degrees Fahrenheit",
    "meter": "meters",
    "foot": "feet",
    "liter": "liters",
    "gallon": "gallons",
    "inch": "inches",
    "cm": "centimeters",
    "hour": "hours",
    "minute": "minutes",
    "km/hour": "km/h",
    "mile/hour": "mph",
    "ounce": "ounces",
    "gram": "grams",
}
UNIT_ZH = {
    "km": "公里",
    "mile": "英里",
    "kg": "千克",
    "pound": "磅",
    "degC": "摄氏度",
    "degF": "华氏度",
    "meter": "米",
    "foot": "英尺",
    "liter": "升",
    "gallon": "加仑",
    "inch": "英寸",
    "cm": "厘米",
    "hour": "小时",
    "minute": "分钟",
    "km/hour": "公里每小时",
    "mile/hour": "英里每小时",
    "ounce": "盎司",
    "gram": "克",
}


def random_expression(rng: random.Random) -> str:
    shape = rng.randrange(5)
    a, b, c = rng.randint(2, 999), rng.randint(2, 999), rng.randint(2, 99)
    if shape == 0:
        return f"{a}*{b}"
    if shape == 1:
        return f"({a}+{b})*{c}"
    if shape == 2:
        return f"{a}/{rng.choice([2, 4, 5, 8, 10, 16, 20, 25])}"
    if shape == 3:
        return f"{rng.randint(2, 30)}**{rng.randint(2, 4)}-{c}"
    return f"sqrt({rng.randint(2, 200) ** 2})+{a}-{b}"


def pick_lang_unit(unit: str, lang: Language) -> str:
    return UNIT_ZH[unit] if lang == "zh" else UNIT_WORDS[unit]


def random_date(rng: random.Random) -> str:
    return f"{rng.randint(2020, 2027)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
