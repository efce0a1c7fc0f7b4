"""A safe arithmetic evaluator: parses with `ast` and walks an allow-list of nodes.

No `eval`, no attribute access, no names beyond a fixed table of constants and functions.
Every way to make Python burn CPU or memory is bounded: expression length, nesting depth,
node count, exponent size, factorial argument, integer size of every intermediate result,
and a wall-clock deadline checked while walking.
"""

from __future__ import annotations

import ast
import math
import operator
import time
from collections.abc import Callable
from typing import Any

MAX_EXPRESSION_CHARS = 500
MAX_DEPTH = 100
MAX_NODES = 400
MAX_EXPONENT = 1_000
MAX_FACTORIAL = 170
MAX_INT_BITS = 4_096
DEADLINE_SECONDS = 0.5

Number = int | float


class MathError(ValueError):
    """The expression is not allowed or cannot be evaluated; the text says why."""


def _factorial(x: Number) -> Number:
    if isinstance(x, float):
        if not x.is_integer():
            raise MathError("factorial() needs a whole number")
        x = int(x)
    if x < 0:
        raise MathError("factorial() needs a non-negative number")
    if x > MAX_FACTORIAL:
        raise MathError(f"factorial() argument too large (max {MAX_FACTORIAL})")
    return math.factorial(x)


def _checked_pow(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise MathError(f"exponent too large (|exponent| <= {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exponent, int) and exponent >= 0:
        bits = max(abs(base), 1).bit_length() * exponent
        if bits > MAX_INT_BITS:
            raise MathError("result too large")
    if base == 0 and exponent < 0:
        raise MathError("division by zero")
    result: object = operator.pow(base, exponent)
    if not isinstance(result, int | float):
        raise MathError("result is not a real number")
    return result


def _checked_div(a: Number, b: Number) -> Number:
    if b == 0:
        raise MathError("division by zero")
    return a / b


def _checked_floordiv(a: Number, b: Number) -> Number:
    if b == 0:
        raise MathError("division by zero")
    return a // b


def _checked_mod(a: Number, b: Number) -> Number:
    if b == 0:
        raise MathError("modulo by zero")
    return a % b


def _checked_mult(a: Number, b: Number) -> Number:
    both_int = isinstance(a, int) and isinstance(b, int)
    if both_int and abs(int(a)).bit_length() + abs(int(b)).bit_length() > MAX_INT_BITS:
        raise MathError("result too large")
    return a * b


def _domain(fn: Callable[[float], float], name: str) -> Callable[..., Number]:
    def wrapped(*args: Number) -> Number:
        try:
            return fn(*args)
        except (ValueError, OverflowError) as exc:
            raise MathError(f"{name}() is undefined or too large for this input") from exc

    return wrapped


BINARY_OPS: dict[type[ast.operator], Callable[[Any, Any], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _checked_mult,
    ast.Div: _checked_div,
    ast.FloorDiv: _checked_floordiv,
    ast.Mod: _checked_mod,
    ast.Pow: _checked_pow,
}
UNARY_OPS: dict[type[ast.unaryop], Callable[[Any], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": _domain(math.sqrt, "sqrt"),
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": _domain(math.log, "log"),
    "log10": _domain(math.log10, "log10"),
    "log2": _domain(math.log2, "log2"),
    "exp": _domain(math.exp, "exp"),
    "sin": _domain(math.sin, "sin"),
    "cos": _domain(math.cos, "cos"),
    "tan": _domain(math.tan, "tan"),
    "factorial": _factorial,
    "min": min,
    "max": max,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}


class _Evaluator:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.nodes = 0

    def visit(self, node: ast.AST, depth: int) -> Number:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise MathError(f"expression too complex (more than {MAX_NODES} parts)")
        if depth > MAX_DEPTH:
            raise MathError(f"expression nested too deeply (max depth {MAX_DEPTH})")
        if time.monotonic() > self.deadline:
            raise MathError("expression took too long to evaluate")
        result = self._visit(node, depth + 1)
        if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
            raise MathError("result too large")
        return result

    def _visit(self, node: ast.AST, depth: int) -> Number:
        if isinstance(node, ast.Expression):
            return self.visit(node.body, depth)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise MathError(f"only numbers are allowed, not {type(node.value).__name__}")
            return node.value
        if isinstance(node, ast.BinOp):
            op = BINARY_OPS.get(type(node.op))
            if op is None:
                raise MathError(f"operator {type(node.op).__name__} is not allowed")
            left = self.visit(node.left, depth)
            right = self.visit(node.right, depth)
            try:
                return op(left, right)
            except OverflowError as exc:
                raise MathError("result too large") from exc
        if isinstance(node, ast.UnaryOp):
            uop = UNARY_OPS.get(type(node.op))
            if uop is None:
                raise MathError(f"operator {type(node.op).__name__} is not allowed")
            return uop(self.visit(node.operand, depth))
        if isinstance(node, ast.Name):
            if node.id in CONSTANTS:
                return CONSTANTS[node.id]
            raise MathError(f"unknown name '{node.id[:40]}'")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                allowed = ", ".join(sorted(FUNCTIONS))
                raise MathError(f"only these functions are allowed: {allowed}")
            if node.keywords or not node.args or len(node.args) > 8:
                raise MathError(f"{node.func.id}() takes 1 to 8 positional numbers")
            args = [self.visit(arg, depth) for arg in node.args]
            try:
                return FUNCTIONS[node.func.id](*args)
            except TypeError as exc:
                raise MathError(f"wrong number of arguments for {node.func.id}()") from exc
            except OverflowError as exc:
                raise MathError("result too large") from exc
        raise MathError(f"{type(node).__name__} is not allowed in a math expression")


def normalise_expression(expression: str) -> str:
    """Accept the notations people and models write: ×, ÷, ^ for power, unicode minus."""
    return (
        expression.replace("×", "*")
        .replace("÷", "/")
        .replace("^", "**")
        .replace("−", "-")
        .replace("（", "(")
        .replace("）", ")")
    )


def evaluate(expression: str, *, deadline_seconds: float = DEADLINE_SECONDS) -> Number:
    """Evaluate an arithmetic expression safely, or raise MathError with a clear reason."""
    if not isinstance(expression, str):
        raise MathError("expression must be a string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise MathError(
            f"expression too long ({len(expression)} chars, max {MAX_EXPRESSION_CHARS})"
        )
    text = normalise_expression(expression).strip()
    if not text:
        raise MathError("expression is empty")
    if text.count("(") > MAX_DEPTH:
        raise MathError(f"expression nested too deeply (max depth {MAX_DEPTH})")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise MathError(f"could not parse expression: {type(exc).__name__}") from exc
    result = _Evaluator(time.monotonic() + deadline_seconds).visit(tree, 0)
    if isinstance(result, float) and not math.isfinite(result):
        raise MathError("result is not a finite number")
    return result


def format_number(value: Number) -> str:
    """Render a result the way a person would read it: integers exact, floats to 10
    significant digits with no float noise (0.1+0.2 -> 0.3)."""
    if isinstance(value, int):
        return str(value)  # <= MAX_INT_BITS, well under Python's int->str digit limit
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}"
