"""A rule's expression, its levels and durations: parsed once at start (no ``eval``),
evaluated over one host's series (:mod:`.window`) at each slot.

The grammar::

    expr     = term (("+" | "-") term)*
    term     = unary (("*" | "/") unary)*
    unary    = "-" unary | atom
    atom     = NUMBER | DURATION | "(" expr ")" | call | SERIES
    call     = FUNC "(" SERIES "," WINDOW ")"            avg min max last sum count
                                                         delta rate absent
             | "predict" "(" SERIES "," WINDOW "," HORIZON ")"
             | "timeleft" "(" SERIES "," WINDOW "," THRESHOLD ")"
    SERIES   = NODE ("." NODE)*      NODE: [A-Za-z0-9_-]+, the first starting with a letter
                                     or _ (a Graphite path after PREFIX.HOST.)
    DURATION = (NUMBER ("s" | "m" | "h" | "d" | "w"))+     2h30m: 9000 seconds

WINDOW, HORIZON and THRESHOLD are constant expressions (numbers and durations, a
duration being its number of seconds); a window is above 0. A bare SERIES is
``last(SERIES, stale_after)``. A ``-`` right after a series name is part of the name
(``checks.http-api.time``): write ``a - b`` to subtract.

Evaluation (:meth:`Expr.evaluate`) raises, and the rule's result is then UNKNOWN:

- :class:`NoSeries`: a series the expression reads (outside ``absent``) was never seen
  for the host (a rule matching no series).
- :class:`Stale`: such a series has no point within ``stale_after`` of ``now`` (in
  ``(now - stale_after, now]``), whatever the windows: a series that stopped arriving is
  never silently OK. ``absent`` reads its series without either check.
- :class:`NoValue`: a function had too few points in its window (a window shorter than
  ``stale_after``, a ``rate`` with one point), a division by zero, or a result that is not
  a number (``inf - inf``). Infinity itself is a value (``timeleft`` of a line that never
  reaches its threshold) and compares as such with a level.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from typing import Callable

from sinks.alerting.series.window import WINDOWED, WITH_ARGUMENT, Points

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<duration>(?:\d+(?:\.\d+)?[smhdw])+)(?![A-Za-z0-9_.])
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?![A-Za-z0-9_.])
  | (?P<name>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)(?![.A-Za-z0-9_-])
  | (?P<op>[-+*/(),])
""", re.X)
#: the function names, for the error that names an unknown one
KNOWN = tuple(sorted([*WINDOWED, *WITH_ARGUMENT]))
#: the third argument's name, per function that takes one
ARGUMENT = {"predict": "HORIZON", "timeleft": "THRESHOLD"}
MAX_LENGTH = 2000
#: parentheses and unary minuses nested at most this deep
MAX_DEPTH = 50


class ExprError(ValueError):
    """An expression that does not parse: the message names the column (from 1)."""

    def __init__(self, column: int, message: str) -> None:
        super().__init__(f"column {column}: {message}")
        self.column = column


class EvalError(Exception):
    """Why an expression has no value for a host now (its rule is UNKNOWN)."""


class NoSeries(EvalError):
    """A series the expression reads was never seen for the host."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no series {name} on this host")
        self.name = name


class Stale(EvalError):
    """A series the expression reads has no point within ``stale_after``: ``last`` is the
    time of its newest point at or before ``now`` (None: none)."""

    def __init__(self, name: str, last: float | None, *, now: float | None = None,
                 stale_after: float | None = None) -> None:
        if last is None:
            text = f"series {name} is stale: no point yet"
        elif now is None:
            text = f"series {name} is stale: its last point is at {last:.0f}"
        else:
            text = f"series {name} is stale: its last point is {format_duration(now - last)} old"
        if stale_after is not None:
            text += f" (stale after {format_duration(stale_after)})"
        super().__init__(text)
        self.name = name
        self.last = last


class NoValue(EvalError):
    """A function without enough points in its window, a division by zero, a result that is
    not a number."""


# ------------------------------------------------------------------ durations and levels

def parse_duration(value: str | int | float) -> float:
    """Seconds of ``value``: a number (seconds), or ``90s``, ``10m``, ``4h``, ``1d``,
    ``1w``, ``2h30m``, ``1.5h`` (ValueError otherwise; never below 0)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{value!r}: expected a duration such as 90s, 10m, 4h, 1d, 1w or "
                         "2h30m, or a number of seconds")
    if not isinstance(value, str):
        seconds = float(value)
    else:
        text = value.strip()
        if _NUMBER.fullmatch(text):
            seconds = float(text)
        elif _DURATION.fullmatch(text):
            seconds = sum(float(n) * UNITS[u] for n, u in _PART.findall(text))
        else:
            raise ValueError(f"{value[:40]!r}: expected a duration such as 90s, 10m, 4h, 1d, "
                             "1w or 2h30m, or a number of seconds")
    if not 0 <= seconds < math.inf:
        raise ValueError(f"{value!r}: expected a duration of 0 or more seconds")
    return seconds


def format_duration(seconds: float) -> str:
    """``seconds`` as :func:`parse_duration` reads it: ``9000`` -> ``2h30m``, ``0.5`` ->
    ``0.5s``, ``-90`` -> ``-1m30s``."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == math.inf:
        return "inf"
    whole = int(seconds)
    if whole != seconds or whole == 0:
        return f"{seconds:g}s"
    parts = []
    for unit in "wdhms":
        n, whole = divmod(whole, int(UNITS[unit]))
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
    "==": operator.eq, "!=": operator.ne}
_LEVEL = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\S.*?)\s*")


@dataclass(frozen=True)
class Level:
    """A level a value meets or not: ``op`` one of :data:`OPERATORS`, ``value`` the
    threshold (a duration as seconds), ``text`` the threshold as written."""

    op: str
    value: float
    text: str
    test: Callable[[float, float], bool] = field(repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "test", OPERATORS[self.op])

    def __call__(self, value: float) -> bool:
        return self.test(value, self.value)

    def __str__(self) -> str:
        return f"{self.op} {self.text}"


def parse_level(text: str) -> Level:
    """``"> 90"``, ``">= 100"``, ``"< 4h"``, ``"== 1"``, ``"!= 0"``, ``"< -5"`` (ValueError
    otherwise)."""
    match = _LEVEL.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"{str(text)[:40]!r}: expected a level: > >= < <= == or != and a "
                         "number or a duration, e.g. '> 90' or '< 4h'")
    op, operand = match.groups()
    sign, magnitude = (-1.0, operand[1:].strip()) if operand.startswith("-") else \
        (1.0, operand)
    try:
        value = sign * parse_duration(magnitude)
    except ValueError:
        raise ValueError(f"{text.strip()[:40]!r}: {operand[:30]!r} is not a number or a "
                         "duration (90, 2.5, 1e9, 10m, 4h)") from None
    return Level(op, value, operand)


# ------------------------------------------------------------------ the tree

class Node:
    __slots__ = ()

    def value(self, lookup, now: float, stale_after: float) -> float:
        raise NotImplementedError


class Const(Node):
    __slots__ = ("number", "text")

    def __init__(self, number: float, text: str) -> None:
        self.number = number
        self.text = text

    def value(self, lookup, now, stale_after):
        return self.number

    def __str__(self) -> str:
        return self.text


class Neg(Node):
    __slots__ = ("operand",)

    def __init__(self, operand: Node) -> None:
        self.operand = operand

    def value(self, lookup, now, stale_after):
        return -self.operand.value(lookup, now, stale_after)

    def __str__(self) -> str:
        return f"-{self.operand}"


def _divide(a: float, b: float) -> float:
    if b == 0:
        raise NoValue("division by zero")
    return a / b


_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide}


class Binary(Node):
    __slots__ = ("op", "left", "right", "apply")

    def __init__(self, op: str, left: Node, right: Node) -> None:
        self.op = op
        self.left = left
        self.right = right
        self.apply = _ARITHMETIC[op]

    def value(self, lookup, now, stale_after):
        return self.apply(self.left.value(lookup, now, stale_after),
                          self.right.value(lookup, now, stale_after))

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


class Call(Node):
    """``FUNC(SERIES, WINDOW[, ARGUMENT])``; ``window`` None: a bare series, read as
    ``last(SERIES, stale_after)``."""

    __slots__ = ("func", "series", "window", "argument", "apply")

    def __init__(self, func: str, series: str, window: float | None,
                 argument: float | None = None) -> None:
        self.func = func
        self.series = series
        self.window = window
        self.argument = argument
        self.apply = WINDOWED.get(func) or WITH_ARGUMENT[func]

    def value(self, lookup, now, stale_after):
        points = lookup(self.series)
        if self.func == "absent":
            return self.apply(points, now, self.window)
        if points is None:
            raise NoSeries(self.series)
        last = points.before(now)
        if last is None or last <= now - stale_after:
            raise Stale(self.series, last, now=now, stale_after=stale_after)
        window = stale_after if self.window is None else self.window
        if self.argument is None:
            result = self.apply(points, now, window)
        else:
            result = self.apply(points, now, window, self.argument)
        if result is None:
            needs = "no point" if self.func in ("avg", "min", "max", "last", "sum",
                                               "count") else "fewer than two points"
            raise NoValue(f"{self}: {needs} in the last {format_duration(window)}")
        return result

    def __str__(self) -> str:
        if self.window is None:
            return self.series
        args = [self.series, format_duration(self.window)]
        if self.argument is not None:
            args.append(format_duration(self.argument) if self.func == "predict"
                        else f"{self.argument:g}")
        return f"{self.func}({', '.join(args)})"


class Expr:
    """A parsed expression: :attr:`text` as written, :attr:`series` the names it reads,
    :attr:`calls` its function calls,
    :attr:`keep` per name the longest window a call over it needs (0 for a bare name:
    the engine keeps each series at least ``max(keep[name], stale_after)`` plus its
    evaluation lag)."""

    __slots__ = ("text", "root", "series", "keep", "calls")

    def __init__(self, text: str, root: Node) -> None:
        self.text = text
        self.root = root
        #: the calls, left to right (a bare series is a Call with window None)
        self.calls: tuple[Call, ...] = tuple(_calls(root))
        keep: dict[str, float] = {}
        for call in self.calls:
            keep[call.series] = max(keep.get(call.series, 0.0), call.window or 0.0)
        self.series = frozenset(keep)
        self.keep = keep

    def evaluate(self, lookup: Callable[[str], Points | None], now: float,
                 stale_after: float) -> float:
        """The expression's value for the host whose series ``lookup`` gives at ``now``
        (raises :class:`NoSeries`, :class:`Stale`, :class:`NoValue`)."""
        result = self.root.value(lookup, now, stale_after)
        if result != result:
            raise NoValue(f"{self.text}: not a number")
        return result

    def __str__(self) -> str:
        text = str(self.root)
        return text[1:-1] if isinstance(self.root, Binary) else text

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"


def _calls(node: Node):
    if isinstance(node, Call):
        yield node
    elif isinstance(node, Neg):
        yield from _calls(node.operand)
    elif isinstance(node, Binary):
        yield from _calls(node.left)
        yield from _calls(node.right)


# ------------------------------------------------------------------ the parser

def _tokens(text: str) -> list[tuple[str, str, int]]:
    """``(kind, text, column)``, ending with ``("end", "", column)``."""
    out = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            bad = re.match(r"[^\s(),+*/]+|\S", text[pos:]).group()
            if bad[0] in "<>=!":
                raise ExprError(pos + 1, f"unexpected {bad[:30]!r}: a comparison goes in the "
                                         "rule's warning and critical levels, not in expr")
            raise ExprError(pos + 1, f"unexpected {bad[:30]!r}")
        if match.lastgroup != "space":
            out.append((match.lastgroup, match.group(), pos + 1))
        pos = match.end()
    out.append(("end", "", len(text) + 1))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.depth = 0

    def deeper(self, column: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(column, f"nested more than {MAX_DEPTH} deep")

    @property
    def token(self) -> tuple[str, str, int]:
        return self.tokens[self.at]

    def take(self) -> tuple[str, str, int]:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def expect(self, op: str, why: str) -> None:
        kind, text, column = self.take()
        if (kind, text) != ("op", op):
            found = "the end" if kind == "end" else repr(text)
            raise ExprError(column, f"expected {op!r} {why}, found {found}")

    def expr(self) -> Node:
        node = self.term()
        while self.token[:2] in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            node = _fold(Binary(op, node, self.term()), self.token[2])
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.token[:2] in (("op", "*"), ("op", "/")):
            op = self.take()[1]
            node = _fold(Binary(op, node, self.unary()), self.token[2])
        return node

    def unary(self) -> Node:
        if self.token[:2] == ("op", "-"):
            self.deeper(self.take()[2])
            operand = self.unary()
            self.depth -= 1
            if isinstance(operand, Const):
                return Const(-operand.number, f"-{operand.text}")
            return Neg(operand)
        return self.atom()

    def atom(self) -> Node:
        kind, text, column = self.take()
        if kind == "number":
            return Const(float(text), text)
        if kind == "duration":
            return Const(parse_duration(text), text)
        if (kind, text) == ("op", "("):
            self.deeper(column)
            node = self.expr()
            self.expect(")", f"to close the '(' of column {column}")
            self.depth -= 1
            return node
        if kind == "name":
            if self.token[:2] == ("op", "("):
                return self.call(text, column)
            return Call("last", text, None)
        found = "the end" if kind == "end" else repr(text)
        raise ExprError(column, f"expected a number, a series or a function, found {found}")

    def call(self, func: str, column: int) -> Call:
        if func not in KNOWN:
            raise ExprError(column, f"unknown function {func!r} (known: {', '.join(KNOWN)})")
        usage = f"{func}(SERIES, WINDOW" + (f", {ARGUMENT[func]})" if func in ARGUMENT
                                            else ")")
        self.take()                                         # (
        kind, series, at = self.take()
        if kind != "name" or self.token[0] == "op" and self.token[1] in "+-*/(":
            raise ExprError(at, f"{func}: the first argument must be a series name: {usage}")
        args: list[float] = []
        while self.token[:2] == ("op", ","):
            self.take()
            at = self.token[2]
            arg = self.expr()
            if not isinstance(arg, Const):
                raise ExprError(at, f"{func}: {'WINDOW' if not args else ARGUMENT[func]} "
                                    "must be a number or a duration, not a series")
            args.append(arg.number)
        kind, text, at = self.token
        if (kind, text) != ("op", ")"):
            found = "the end" if kind == "end" else repr(text)
            raise ExprError(at, f"{func}: expected ',' or ')', found {found}: {usage}")
        self.take()
        wanted = 2 if func in ARGUMENT else 1
        if not args:
            raise ExprError(column, f"{func} needs a window: {usage}")
        if len(args) < wanted:
            raise ExprError(column, f"{func} needs a {ARGUMENT[func].lower()}: {usage}")
        if len(args) > wanted:
            raise ExprError(column, f"{func} takes {wanted + 1} arguments: {usage}")
        if not 0 < args[0] < math.inf:
            raise ExprError(column, f"{func}: the window must be above 0")
        return Call(func, series, args[0], args[1] if wanted == 2 else None)


def _fold(node: Binary, column: int) -> Node:
    """A constant operation done now (so a window may read ``1h + 30m``)."""
    if isinstance(node.left, Const) and isinstance(node.right, Const):
        try:
            number = node.apply(node.left.number, node.right.number)
        except NoValue:
            raise ExprError(column, f"division by zero in {node}") from None
        return Const(number, f"{number:g}")
    return node


def parse(text: str) -> Expr:
    """The :class:`Expr` of ``text`` (:class:`ExprError`, a ValueError, when it does not
    parse)."""
    if not isinstance(text, str):
        raise ExprError(1, f"expected an expression as a string, not {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExprError(MAX_LENGTH, f"longer than {MAX_LENGTH} characters")
    if not text.strip():
        raise ExprError(1, "empty expression")
    parser = _Parser(text)
    root = parser.expr()
    kind, found, column = parser.token
    if kind != "end":
        raise ExprError(column, f"expected an operator or the end, found {found!r}")
    return Expr(text.strip(), root)
