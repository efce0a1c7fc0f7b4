"""The intent library: every task family the generator can produce, with its phrasings.

Phrasings are written by hand (several per intent, English and Chinese); the values in
them are sampled, and the calls are executed for real by the `Executor`.
"""

from __future__ import annotations

import random

from serving.tools.providers import load_world
from training.data.intents import (
    COUNTRY_ZH,
    LANG_ZH,
    UNIT_PAIRS,
    Draft,
    Executor,
    Intent,
    Language,
    call,
    capital_city,
    cities,
    city_name,
    countries,
    num,
    pick_lang_unit,
    random_date,
    random_expression,
)
from training.data.schema import Category, Difficulty

S, P, M = Category.SINGLE, Category.PARALLEL, Category.MULTI_STEP
IRR, CLAR = Category.IRRELEVANCE, Category.CLARIFICATION
EASY, MEDIUM, HARD = Difficulty.EASY, Difficulty.MEDIUM, Difficulty.HARD
CURRENCIES = sorted(load_world()["usd_rates"])


# ---- single ---------------------------------------------------------------------------------
def _math(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    expr = random_expression(rng)
    out = ex.step(call("calculate_math", expression=expr))
    return Draft({"expr": expr}, [out[0]["result"]])


def _unit(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    src, dst = rng.choice(UNIT_PAIRS)
    value = rng.choice([rng.randint(1, 500), round(rng.uniform(0.5, 300), 1)])
    out = ex.step(call("unit_converter", value=value, from_unit=src, to_unit=dst))
    return Draft(
        {"value": num(value), "src": pick_lang_unit(src, lang), "dst": pick_lang_unit(dst, lang)},
        [num(out[0]["result"])],
    )


def _weather(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    city = rng.choice(cities())
    out = ex.step(call("get_current_weather", location=city_name(city, lang)))
    return Draft({"city": city_name(city, lang)}, [num(out[0]["temperature_c"])])


def _time(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    city = rng.choice(cities())
    out = ex.step(call("get_current_time", timezone=city["timezone"]))
    return Draft({"tz": city["timezone"], "city": city_name(city, lang)}, [out[0]["time"]])


def _exchange(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    src, dst = rng.sample(CURRENCIES, 2)
    amount = rng.choice([rng.randint(1, 5000), rng.randint(1, 100) * 50])
    out = ex.step(call("get_exchange_rate", from_currency=src, to_currency=dst, amount=amount))
    return Draft({"amount": amount, "src": src, "dst": dst}, [num(out[0]["converted"])])


def _translate(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    entry = rng.choice(list(load_world()["phrasebook"].values()))
    source_lang, target = rng.sample(["english", "chinese", "french", "spanish", "german"], 2)
    text = entry[source_lang]
    out = ex.step(call("translate_text", text=text, target_language=target))
    return Draft(
        {"text": text, "lang": LANG_ZH[target] if lang == "zh" else target.title()},
        [out[0]["translation"]],
    )


def _capital(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    country = rng.choice(countries())
    name = COUNTRY_ZH[country["name"]] if lang == "zh" else country["name"]
    ex.step(call("search_knowledge", free=("query",), query=f"capital of {country['name']}"))
    capital = capital_city(country)
    answer = capital["name_zh"] if (lang == "zh" and capital) else country["capital"]
    return Draft({"country": name}, [answer])


def _date_add(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    start, days = random_date(rng), rng.randint(1, 1000)
    out = ex.step(call("date_calculator", operation="add_days", start_date=start, days=days))
    return Draft({"start": start, "days": days}, [out[0]["result"]])


def _date_between(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    a, b = sorted([random_date(rng), random_date(rng)])
    out = ex.step(call("date_calculator", operation="days_between", start_date=a, end_date=b))
    return Draft({"start": a, "end": b}, [num(out[0]["result"])])


def _price(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    product = rng.choice(load_world()["products"])
    currency = rng.choice(CURRENCIES)
    out = ex.step(call("lookup_price", product=product["key"], currency=currency))
    return Draft({"product": product["key"], "cur": currency}, [num(out[0]["price"])])


# ---- parallel -------------------------------------------------------------------------------
def _weather_two(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    a, b = rng.sample(cities(), 2)
    out = ex.step(
        call("get_current_weather", location=city_name(a, lang)),
        call("get_current_weather", location=city_name(b, lang)),
    )
    return Draft(
        {"a": city_name(a, lang), "b": city_name(b, lang)},
        [num(out[0]["temperature_c"]), num(out[1]["temperature_c"])],
    )


def _exchange_two(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    src, d1, d2 = rng.sample(CURRENCIES, 3)
    amount = rng.randint(1, 2000)
    out = ex.step(
        call("get_exchange_rate", from_currency=src, to_currency=d1, amount=amount),
        call("get_exchange_rate", from_currency=src, to_currency=d2, amount=amount),
    )
    return Draft(
        {"amount": amount, "src": src, "d1": d1, "d2": d2},
        [num(out[0]["converted"]), num(out[1]["converted"])],
    )


def _math_two(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    e1, e2 = random_expression(rng), random_expression(rng)
    out = ex.step(call("calculate_math", expression=e1), call("calculate_math", expression=e2))
    return Draft({"e1": e1, "e2": e2}, [out[0]["result"], out[1]["result"]])


def _time_two(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    a, b = rng.sample([c for c in cities()], 2)
    if a["timezone"] == b["timezone"]:
        b = next(c for c in cities() if c["timezone"] != a["timezone"])
    out = ex.step(
        call("get_current_time", timezone=a["timezone"]),
        call("get_current_time", timezone=b["timezone"]),
    )
    return Draft(
        {
            "a": city_name(a, lang),
            "b": city_name(b, lang),
            "tza": a["timezone"],
            "tzb": b["timezone"],
        },
        [out[0]["time"], out[1]["time"]],
    )


# ---- multi-step -----------------------------------------------------------------------------
def _capital_weather(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    country = rng.choice([c for c in countries() if capital_city(c)])
    capital = capital_city(country)
    assert capital is not None
    ex.step(call("search_knowledge", free=("query",), query=f"capital of {country['name']}"))
    out = ex.step(call("get_current_weather", location=capital["name"]))
    name = COUNTRY_ZH[country["name"]] if lang == "zh" else country["name"]
    return Draft({"country": name}, [num(out[0]["temperature_c"])])


def _capital_time(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    country = rng.choice(countries())
    ex.step(call("search_knowledge", free=("query",), query=f"capital of {country['name']}"))
    out = ex.step(call("get_current_time", timezone=country["timezone"]))
    name = COUNTRY_ZH[country["name"]] if lang == "zh" else country["name"]
    return Draft({"country": name}, [out[0]["time"]])


def _price_local(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    country = rng.choice(countries())
    product = rng.choice(load_world()["products"])
    ex.step(call("search_knowledge", free=("query",), query=f"currency of {country['name']}"))
    out = ex.step(call("lookup_price", product=product["key"], currency=country["currency"]))
    name = COUNTRY_ZH[country["name"]] if lang == "zh" else country["name"]
    return Draft({"country": name, "product": product["key"]}, [num(out[0]["price"])])


def _weather_fahrenheit(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    city = rng.choice(cities())
    weather = ex.step(call("get_current_weather", location=city_name(city, lang)))
    temp = weather[0]["temperature_c"]
    out = ex.step(call("unit_converter", value=temp, from_unit="degC", to_unit="degF"))
    return Draft({"city": city_name(city, lang)}, [num(out[0]["result"])])


def _exchange_split(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    src, dst = rng.sample(CURRENCIES, 2)
    amount, people = rng.randint(20, 3000), rng.randint(2, 9)
    rate = ex.step(call("get_exchange_rate", from_currency=src, to_currency=dst, amount=amount))
    out = ex.step(call("calculate_math", expression=f"{num(rate[0]['converted'])}/{people}"))
    return Draft({"amount": amount, "src": src, "dst": dst, "n": people}, [out[0]["result"]])


NOTE_FACTS = [
    ("wifi", "the password is tiger{n}"),
    ("parking", "level {n}, spot B"),
    ("locker", "code {n}"),
    ("meeting", "room {n} at 3pm"),
    ("gate", "gate A{n}"),
    ("hotel", "room {n}"),
    ("bike", "lock combination {n}"),
    ("flight", "seat {n}C"),
]


def _note_roundtrip(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    title, template = rng.choice(NOTE_FACTS)
    content = template.format(n=rng.randint(1, 9999))
    ex.step(call("save_note", title=title, content=content))
    out = ex.step(call("read_note", title=title))
    return Draft({"title": title, "content": content}, [out[0]["content"]])


def _days_from_today(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    days = rng.randint(2, 2000)
    now = ex.step(call("get_current_time", timezone="UTC"))
    out = ex.step(
        call("date_calculator", operation="add_days", start_date=now[0]["date"], days=days)
    )
    return Draft({"days": days}, [out[0]["result"]])


def _remember_weather(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    city = rng.choice(cities())
    weather = ex.step(call("get_current_weather", location=city_name(city, lang)))
    title = f"{city['name'].lower()} weather"
    ex.step(
        call(
            "save_note",
            free=("content",),
            title=title,
            content=f"{weather[0]['temperature_c']} C, {weather[0]['condition']}",
        )
    )
    return Draft(
        {"city": city_name(city, lang), "title": title}, [num(weather[0]["temperature_c"])]
    )


# ---- irrelevance and clarification -------------------------------------------------------
TOPICS_EN = [
    "autumn",
    "the ocean",
    "friendship",
    "a lost umbrella",
    "coffee",
    "city lights",
    "mountains",
    "a sleepy cat",
    "the first snow",
    "old letters",
    "trains",
    "gardens",
    "the moon",
    "rain on a window",
    "a quiet library",
    "spring rain",
    "the desert",
    "fireflies",
    "a lighthouse",
    "morning fog",
]
TOPICS_ZH = [
    "秋天",
    "大海",
    "友谊",
    "咖啡",
    "城市的夜晚",
    "高山",
    "一只猫",
    "初雪",
    "旧信",
    "火车",
    "花园",
    "月亮",
    "窗外的雨",
    "图书馆",
    "春雨",
    "沙漠",
    "萤火虫",
    "灯塔",
]
FORMS_EN = [
    "a haiku",
    "a short poem",
    "a limerick",
    "two sentences",
    "a tiny story",
    "a slogan",
    "a riddle",
    "a toast",
]
FORMS_ZH = ["一首俳句", "一首短诗", "两句话", "一个小故事", "一句口号", "一个谜语"]
CONCEPTS = [
    "recursion",
    "photosynthesis",
    "inflation",
    "gravity",
    "democracy",
    "entropy",
    "a black hole",
    "machine learning",
    "the water cycle",
    "compound interest",
    "supply and demand",
    "DNA",
    "an API",
    "a leap year",
    "jet lag",
    "a rainbow",
]
CONCEPTS_ZH = [
    "递归",
    "光合作用",
    "通货膨胀",
    "引力",
    "熵",
    "黑洞",
    "机器学习",
    "水循环",
    "复利",
    "供求关系",
    "闰年",
    "彩虹",
]


def _irrelevant_write(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    if lang == "zh":
        return Draft({"form": rng.choice(FORMS_ZH), "topic": rng.choice(TOPICS_ZH)})
    return Draft({"form": rng.choice(FORMS_EN), "topic": rng.choice(TOPICS_EN)})


def _irrelevant_explain(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    pool = CONCEPTS_ZH if lang == "zh" else CONCEPTS
    return Draft({"concept": rng.choice(pool), "n": rng.randint(1, 5), "age": rng.randint(5, 15)})


def _clarify_weather(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    whens = (
        ["今天", "现在", "今天早上", "此刻"]
        if lang == "zh"
        else ["today", "right now", "this morning", "at the moment", "this afternoon", "tonight"]
    )
    return Draft({"when": rng.choice(whens)}, missing_argument="location")


def _clarify_exchange(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    return Draft(
        {"amount": rng.randint(1, 5000), "dst": rng.choice(CURRENCIES)},
        missing_argument="from_currency",
    )


def _clarify_units(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    _, dst = rng.choice(UNIT_PAIRS)
    return Draft(
        {"value": rng.randint(1, 900), "dst": pick_lang_unit(dst, lang)},
        missing_argument="from_unit",
    )


def _clarify_date(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    return Draft({"days": rng.randint(2, 900)}, missing_argument="start_date")


def _clarify_translate(rng: random.Random, ex: Executor, lang: Language) -> Draft:
    target = rng.choice(["french", "spanish", "german", "japanese", "chinese"])
    return Draft(
        {
            "lang": LANG_ZH[target] if lang == "zh" else target.title(),
            "thing": rng.choice(
                ["这句话", "我的消息", "它", "这段文字"]
                if lang == "zh"
                else ["this", "my message", "the sentence", "it"]
            ),
        },
        missing_argument="text",
    )


def _intent(
    name: str,
    category: Category,
    difficulty: Difficulty,
    en: tuple[str, ...],
    zh: tuple[str, ...],
    build: object,
) -> Intent:
    return Intent(name, category, difficulty, {"en": en, "zh": zh}, build)  # type: ignore[arg-type]


INTENTS: tuple[Intent, ...] = (
    _intent(
        "math",
        S,
        EASY,
        (
            "What is {expr}?",
            "Calculate {expr} for me.",
            "Can you compute {expr}?",
            "I need the exact value of {expr}.",
            "Quick question: {expr} = ?",
            "Please evaluate the expression {expr}.",
            "Work out {expr}, please.",
        ),
        (
            "{expr} 等于多少？",
            "帮我算一下 {expr}。",
            "请计算 {expr} 的结果。",
            "{expr} 的值是多少？",
            "麻烦算算 {expr}。",
        ),
        _math,
    ),
    _intent(
        "unit",
        S,
        EASY,
        (
            "Convert {value} {src} to {dst}.",
            "How many {dst} is {value} {src}?",
            "What is {value} {src} in {dst}?",
            "I have {value} {src}; how much is that in {dst}?",
            "Please change {value} {src} into {dst}.",
            "{value} {src} equals how many {dst}?",
        ),
        (
            "把 {value} {src} 换算成{dst}。",
            "{value} {src} 等于多少{dst}？",
            "请问 {value} {src} 是多少{dst}？",
            "帮我把 {value}{src} 转换为{dst}。",
        ),
        _unit,
    ),
    _intent(
        "weather",
        S,
        EASY,
        (
            "What's the weather like in {city}?",
            "How hot is it in {city} right now?",
            "Tell me the current temperature in {city}.",
            "Is it warm in {city} today?",
            "Weather report for {city}, please.",
            "What is the temperature in {city} at the moment?",
            "I'm heading to {city}. What's the weather there?",
        ),
        (
            "{city}现在天气怎么样？",
            "{city}今天多少度？",
            "查一下{city}的天气。",
            "{city}现在的气温是多少？",
            "我要去{city}，那边天气如何？",
        ),
        _weather,
    ),
    _intent(
        "time",
        S,
        EASY,
        (
            "What time is it in {city}?",
            "Tell me the current local time in {city}.",
            "What's the time right now in the {tz} timezone?",
            "Do you know the time in {city}?",
            "Current time in {tz}?",
            "If I called someone in {city} now, what time would it be there?",
        ),
        (
            "{city}现在几点？",
            "现在{city}是几点钟？",
            "查一下 {tz} 时区的当前时间。",
            "{city}当地时间是多少？",
        ),
        _time,
    ),
    _intent(
        "exchange",
        S,
        EASY,
        (
            "How much is {amount} {src} in {dst}?",
            "Convert {amount} {src} to {dst}.",
            "What do I get for {amount} {src} in {dst}?",
            "Exchange {amount} {src} into {dst}.",
            "{amount} {src} is worth how much in {dst}?",
            "I want to change {amount} {src} to {dst}.",
        ),
        (
            "{amount} {src} 能换多少 {dst}？",
            "把 {amount} {src} 换成 {dst}。",
            "{amount} {src} 等于多少 {dst}？",
            "帮我算一下 {amount} {src} 兑换成 {dst} 是多少。",
        ),
        _exchange,
    ),
    _intent(
        "translate",
        S,
        EASY,
        (
            "Translate '{text}' into {lang}.",
            "How do you say '{text}' in {lang}?",
            "What is '{text}' in {lang}?",
            "Please give me the {lang} for '{text}'.",
            "Can you put '{text}' into {lang}?",
        ),
        ("把“{text}”翻译成{lang}。", "“{text}”用{lang}怎么说？", "请将“{text}”译为{lang}。"),
        _translate,
    ),
    _intent(
        "capital",
        S,
        EASY,
        (
            "What is the capital of {country}?",
            "Which city is the capital of {country}?",
            "Name the capital city of {country}.",
            "Look up the capital of {country} for me.",
            "{country}'s capital is which city?",
        ),
        ("{country}的首都是哪里？", "{country}的首都是哪个城市？", "查一下{country}的首都。"),
        _capital,
    ),
    _intent(
        "date_add",
        S,
        MEDIUM,
        (
            "What date is {days} days after {start}?",
            "Add {days} days to {start}.",
            "If I start on {start}, what's the date {days} days later?",
            "Which day is {days} days from {start}?",
            "{start} plus {days} days is what date?",
        ),
        (
            "{start} 之后 {days} 天是几号？",
            "从 {start} 开始加 {days} 天是哪一天？",
            "{start} 过 {days} 天是什么日期？",
        ),
        _date_add,
    ),
    _intent(
        "date_between",
        S,
        MEDIUM,
        (
            "How many days are there between {start} and {end}?",
            "Count the days from {start} to {end}.",
            "How long is it from {start} until {end}, in days?",
            "What's the number of days between {start} and {end}?",
        ),
        (
            "{start} 到 {end} 之间有多少天？",
            "从 {start} 到 {end} 一共几天？",
            "算一下 {start} 和 {end} 相差多少天。",
        ),
        _date_between,
    ),
    _intent(
        "price",
        S,
        EASY,
        (
            "How much does a {product} cost in {cur}?",
            "What's the price of the {product} in {cur}?",
            "Give me the {product} list price in {cur}.",
            "Price check: {product}, in {cur}.",
        ),
        (
            "{product} 用 {cur} 标价是多少？",
            "查一下 {product} 的价格，用 {cur} 表示。",
            "{product} 多少钱（{cur}）？",
        ),
        _price,
    ),
    _intent(
        "weather_two",
        P,
        MEDIUM,
        (
            "What's the weather in {a} and in {b}?",
            "Compare the temperatures of {a} and {b}.",
            "Give me the current weather for both {a} and {b}.",
            "Is it warmer in {a} or in {b} right now?",
            "Weather in {a}? And in {b}?",
        ),
        ("{a}和{b}的天气分别怎么样？", "比较一下{a}和{b}现在的气温。", "{a}和{b}哪里更热？"),
        _weather_two,
    ),
    _intent(
        "exchange_two",
        P,
        MEDIUM,
        (
            "Convert {amount} {src} into both {d1} and {d2}.",
            "How much is {amount} {src} in {d1}, and in {d2}?",
            "I have {amount} {src}. What is that in {d1} and in {d2}?",
        ),
        (
            "{amount} {src} 分别能换多少 {d1} 和 {d2}？",
            "把 {amount} {src} 换成 {d1} 和 {d2} 各是多少？",
        ),
        _exchange_two,
    ),
    _intent(
        "math_two",
        P,
        MEDIUM,
        (
            "Compute {e1} and {e2}.",
            "What are {e1} and {e2}?",
            "Two sums for you: {e1}; {e2}.",
            "Please evaluate both {e1} and {e2}.",
        ),
        ("分别计算 {e1} 和 {e2}。", "{e1} 和 {e2} 各等于多少？"),
        _math_two,
    ),
    _intent(
        "time_two",
        P,
        MEDIUM,
        (
            "What time is it in {a} and in {b}?",
            "Tell me the local time in {a} and {b}.",
            "Current time in both {a} and {b}, please.",
        ),
        ("{a}和{b}现在分别几点？", "查一下{a}和{b}的当地时间。"),
        _time_two,
    ),
    _intent(
        "capital_weather",
        M,
        HARD,
        (
            "What's the weather like in the capital of {country}?",
            "How warm is it right now in {country}'s capital?",
            "Find the capital of {country} and tell me its current temperature.",
            "I'm visiting the capital of {country}. What's the weather there?",
        ),
        (
            "{country}首都现在的天气怎么样？",
            "先查{country}的首都，再告诉我那里的气温。",
            "{country}的首都现在多少度？",
        ),
        _capital_weather,
    ),
    _intent(
        "capital_time",
        M,
        HARD,
        (
            "What time is it now in the capital of {country}?",
            "Look up {country}'s capital and tell me the local time there.",
            "If I phoned the capital of {country} now, what time would it be?",
        ),
        ("{country}首都现在几点？", "查一下{country}的首都，然后告诉我那里的当地时间。"),
        _capital_time,
    ),
    _intent(
        "price_local",
        M,
        HARD,
        (
            "How much does a {product} cost in the local currency of {country}?",
            "Find {country}'s currency and give me the {product} price in it.",
            "What would a {product} cost in {country}'s money?",
        ),
        (
            "{product} 用{country}的货币标价是多少？",
            "先查{country}用什么货币，再告诉我 {product} 的价格。",
        ),
        _price_local,
    ),
    _intent(
        "weather_fahrenheit",
        M,
        MEDIUM,
        (
            "What's the temperature in {city} in Fahrenheit? Convert it with the unit converter.",
            "Get the current temperature in {city} and convert it to degrees Fahrenheit.",
            "How hot is {city} right now, in °F?",
        ),
        ("{city}现在的气温换算成华氏度是多少？", "查{city}的气温，并换算成华氏度。"),
        _weather_fahrenheit,
    ),
    _intent(
        "exchange_split",
        M,
        HARD,
        (
            "Convert {amount} {src} to {dst}, then split it equally among {n} people. "
            "How much each?",
            "We have {amount} {src} to share between {n} friends, paid in {dst}. "
            "What does each get?",
            "{amount} {src} in {dst}, divided by {n}: how much is one share?",
        ),
        (
            "把 {amount} {src} 换成 {dst}，再平分给 {n} 个人，每人多少？",
            "{amount} {src} 兑换成 {dst} 后 {n} 人平分，每人能分到多少？",
        ),
        _exchange_split,
    ),
    _intent(
        "note_roundtrip",
        M,
        MEDIUM,
        (
            "Save a note titled '{title}' saying '{content}', then read it back to me.",
            "Remember this under '{title}': {content}. Then confirm by reading the note.",
            "Store '{content}' as my '{title}' note and read it back.",
        ),
        (
            "保存一条标题为“{title}”的笔记，内容是“{content}”，然后读给我听。",
            "记住“{title}”：{content}。再把这条笔记读出来确认一下。",
        ),
        _note_roundtrip,
    ),
    _intent(
        "days_from_today",
        M,
        MEDIUM,
        (
            "What date will it be {days} days from today?",
            "Today plus {days} days: which date is that?",
            "I leave in {days} days. What is the date then?",
        ),
        ("从今天起 {days} 天后是几号？", "今天往后数 {days} 天是哪一天？"),
        _days_from_today,
    ),
    _intent(
        "remember_weather",
        M,
        MEDIUM,
        (
            "Check the weather in {city} and save it in a note titled '{title}'.",
            "Look up {city}'s weather, then store it as the note '{title}'.",
            "Note down the current weather of {city} under '{title}'.",
        ),
        (
            "查一下{city}的天气，并保存成标题为“{title}”的笔记。",
            "把{city}现在的天气记到笔记“{title}”里。",
        ),
        _remember_weather,
    ),
    _intent(
        "irrelevant_write",
        IRR,
        EASY,
        (
            "Write {form} about {topic}.",
            "Could you compose {form} about {topic}?",
            "I'd love {form} on the theme of {topic}.",
            "Give me {form} inspired by {topic}.",
        ),
        ("写{form}，主题是{topic}。", "以{topic}为题写{form}。", "帮我写{form}，关于{topic}。"),
        _irrelevant_write,
    ),
    _intent(
        "irrelevant_explain",
        IRR,
        EASY,
        (
            "Explain {concept} in {n} sentences.",
            "Explain {concept} to a {age}-year-old.",
            "What is {concept}? Keep it to {n} short sentences.",
            "Give me {n} simple facts about {concept}.",
        ),
        (
            "用 {n} 句话解释一下{concept}。",
            "给一个 {age} 岁的孩子讲讲什么是{concept}。",
            "{concept}是什么？请用 {n} 句话说明。",
        ),
        _irrelevant_explain,
    ),
    _intent(
        "clarify_weather",
        CLAR,
        MEDIUM,
        (
            "What's the weather like {when}?",
            "Is it going to rain {when}?",
            "How warm is it outside {when}?",
        ),
        ("{when}天气怎么样？", "{when}外面冷不冷？"),
        _clarify_weather,
    ),
    _intent(
        "clarify_exchange",
        CLAR,
        MEDIUM,
        (
            "How much is {amount} in {dst}?",
            "Convert {amount} to {dst} for me.",
            "What's {amount} worth in {dst}?",
        ),
        ("{amount} 能换多少 {dst}？", "把 {amount} 换成 {dst}。"),
        _clarify_exchange,
    ),
    _intent(
        "clarify_units",
        CLAR,
        MEDIUM,
        ("Convert {value} into {dst}.", "How many {dst} is {value}?"),
        ("把 {value} 换算成{dst}。", "{value} 是多少{dst}？"),
        _clarify_units,
    ),
    _intent(
        "clarify_date",
        CLAR,
        MEDIUM,
        ("What date is {days} days after my start date?", "Add {days} days to the date, please."),
        ("我的开始日期之后 {days} 天是几号？", "帮我把那个日期加上 {days} 天。"),
        _clarify_date,
    ),
    _intent(
        "clarify_translate",
        CLAR,
        MEDIUM,
        ("Translate {thing} into {lang}.", "Can you put {thing} into {lang}?"),
        ("把{thing}翻译成{lang}。", "请把{thing}译成{lang}。"),
        _clarify_translate,
    ),
)
