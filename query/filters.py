"""What the lists' filters share (:class:`query.problems.Filter`, :class:`query.alerts.
AlertFilter`): reading a URL query's values, each checked, and writing a filter back as the
short URL query of its view."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace

#: how long a filter's text may be
TEXT_MAX = 255


def words(params: Mapping, name: str, allowed: tuple[str, ...],
          case: Callable[[str], str] = str.upper) -> tuple[str, ...]:
    """The values of ``name`` (repeated, or comma-separated) in ``case``, once each, in
    the order given; a ValueError naming the first that is not ``allowed``."""
    getall = getattr(params, "getlist", None)
    found: list[str] = []
    for value in (getall(name) if getall else [params.get(name) or ""]):
        found += [case(s.strip()) for s in str(value).split(",") if s.strip()]
    for s in found:
        if s not in allowed:
            raise ValueError(f"{name} {s[:20]!r}: expected one of {', '.join(allowed)}")
    return tuple(dict.fromkeys(found))


def line(params: Mapping, name: str) -> str:
    """The value of ``name``: one line of at most :data:`TEXT_MAX` characters, stripped;
    a ValueError for anything else."""
    value = str(params.get(name) or "")
    if len(value) > TEXT_MAX or any(ord(c) < 32 for c in value):
        raise ValueError(f"{name}: expected one line of at most {TEXT_MAX} characters")
    return value.strip()


def order(value: str, sorts: tuple[str, ...]) -> str:
    """``value`` if it is one of ``sorts`` (``-NAME``: the other way); a ValueError."""
    if value.lstrip("-") not in sorts:
        raise ValueError(f"sort {value[:20]!r}: expected one of {', '.join(sorts)} "
                         f"(-NAME: the other way)")
    return value


def url_query(shown, names: Mapping[str, str], **changes) -> list[tuple[str, str]]:
    """The URL query of the filter ``shown`` (a dataclass; with ``changes``): each field
    that is not its default, under its URL name (``names``: field -> name; a field not
    named there is not in a URL), a tuple comma-separated."""
    shown = replace(shown, **changes)
    out = []
    for f in fields(shown):
        value = getattr(shown, f.name)
        if value == f.default or f.name not in names:
            continue
        out.append((names[f.name], ",".join(value) if isinstance(value, tuple) else value))
    return out
