"""Globs in SQL: the patterns downtimes, silences and the console's filters name hosts and
checks by (``web-*``, ``db-[0-9]?``, ``disk_*``), matched in the database as Python's
:func:`fnmatch.fnmatchcase` matches them in the sinks.

SQLite's ``GLOB`` has fnmatch's syntax but for a class's negation (``[^...]`` there,
``[!...]`` here) and an unclosed ``[`` (a literal here, no match there); PostgreSQL has no
glob, so the pattern becomes an anchored POSIX regular expression (``~``). Case-folded
(``fold``: the host globs, which match hostnames and uuids ignoring case) both sides are
lowered: SQLite's ``lower()`` folds ASCII letters only, so on SQLite a non-ASCII hostname
matches a fold pattern only in its own case.
"""

from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.sql.elements import ColumnElement

#: what a regular expression reads as an operator, outside a class
_REGEX_SPECIAL = frozenset("\\.^$+(){}|[]*?")


def has_wildcards(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


def _parts(pattern: str):
    """fnmatch's reading of ``pattern``: ('*',), ('?',), ('class', negated, body) or
    ('char', c), in order (an unclosed ``[`` is a literal, as fnmatch reads it)."""
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        i += 1
        if ch in "*?":
            yield (ch,)
        elif ch == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                yield ("char", "[")
                continue
            body = pattern[i:j]
            negated = body.startswith("!")
            yield ("class", negated, body[1:] if negated else body)
            i = j + 1
        else:
            yield ("char", ch)


def to_sqlite(pattern: str) -> str:
    """``pattern`` in SQLite's GLOB syntax."""
    out = []
    for part in _parts(pattern):
        if part[0] in "*?":
            out.append(part[0])
        elif part[0] == "class":
            body = part[2]
            if body.startswith("^") and not part[1] and body[1:2] != "-":
                # a literal ^ first (fnmatch's), which GLOB would read as "not": moved last
                body = body[1:] + "^" if body[1:] else None
            out.append("^" if body is None else "[" + ("^" if part[1] else "") + body + "]")
        else:
            out.append("[" + part[1] + "]" if part[1] in "*?[" else part[1])
    return "".join(out)


def to_regex(pattern: str) -> str:
    """``pattern`` as an anchored POSIX regular expression (PostgreSQL's ``~``)."""
    out = ["^"]
    for part in _parts(pattern):
        if part[0] == "*":
            out.append(".*")
        elif part[0] == "?":
            out.append(".")
        elif part[0] == "class":
            body = part[2].replace("\\", "\\\\")
            if body.startswith("^") and not part[1]:
                body = "\\" + body
            out.append("[" + ("^" if part[1] else "") + body + "]")
        else:
            out.append("\\" + part[1] if part[1] in _REGEX_SPECIAL else part[1])
    return "".join(out) + "$"


def glob(column, pattern: str, dialect: str, fold: bool = False) -> ColumnElement:
    """Whether ``column`` matches the glob ``pattern`` (NULL: not), in ``dialect``
    (``sqlite`` or ``postgresql``); ``fold``: ignoring case."""
    if fold:
        column, pattern = func.lower(column), pattern.lower()
    if dialect == "sqlite":
        return column.op("GLOB")(to_sqlite(pattern))
    return column.op("~")(to_regex(pattern))
