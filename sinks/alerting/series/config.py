"""``alerting.rules``: rules on the series the agents send, as the config gives them.

::

    alerting:
      rule_interval: 30            # seconds between two evaluations of every rule
      rule_refresh: 600            # an OK rule's result is written again at least this often
      rules:
        - name: disk_full_soon                       # its check: rule:disk_full_soon
          hosts: ["web*", "site:paris", "parent:sw-3"]
          expr: "timeleft(disk.root.used_percent, 1h, 100)"
          critical: "< 4h"
          warning: "< 1d"
          for: 10m
          keep_firing_for: 0
          stale_after: 5m

A :class:`RuleSpec` is what the YAML says; its :meth:`RuleSpec.validate` compiles it (the
expression, the levels, the durations, the host selector) into the :class:`Rule` the engine
(:mod:`sinks.alerting.series.engine`) runs, so a bad rule stops the sink at start with one
line naming the rule and what is wrong.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from fleetwatch.config import setting
from sinks.alerting.series import expr as expression

#: a rule's name: its check is ``rule:NAME``
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: the check name of rule NAME
PREFIX = "rule:"
#: rules in one config at most
MAX_RULES = 1000


@dataclass(frozen=True)
class Host:
    """What the registry knows of an agent, as a rule's selector reads it."""

    hostname: str
    site: str | None = None
    parents: tuple[str, ...] = ()

    @classmethod
    def of(cls, row) -> "Host":
        """The host of an ``agents`` row (uuid, hostname, site, parents): its hostname, else
        its uuid; the parents that are strings."""
        return cls(row.hostname or row.uuid, row.site,
                   tuple(p for p in row.parents or () if isinstance(p, str)))


@dataclass(frozen=True)
class Selector:
    """Which hosts a rule applies to: any of its terms, each a glob on the hostname,
    ``site:GLOB`` (the site router a host is behind) or ``parent:GLOB`` (a declared
    parent, ``HOST`` or ``HOST/CHECK``)."""

    terms: tuple[str, ...] = ("*",)

    def __call__(self, host: Host) -> bool:
        for term in self.terms:
            kind, colon, glob = term.partition(":")
            if colon and kind == "site":
                if host.site is not None and fnmatch.fnmatchcase(host.site, glob):
                    return True
            elif colon and kind == "parent":
                if any(fnmatch.fnmatchcase(p, glob) for p in host.parents):
                    return True
            elif fnmatch.fnmatchcase(host.hostname, term):
                return True
        return False


def selector(value: Any) -> Selector:
    """The :class:`Selector` of a config's ``hosts`` (a string or a list of strings)."""
    terms = [value] if isinstance(value, str) else value
    if not isinstance(terms, list) or not terms or \
            not all(isinstance(t, str) and t.strip() for t in terms):
        raise ValueError("expected a glob or a list of them (site:GLOB, parent:GLOB too)")
    for term in terms:
        kind, colon, glob = term.partition(":")
        if colon and kind in ("site", "parent") and not glob:
            raise ValueError(f"{term!r}: {kind}: needs a glob after it")
    return Selector(tuple(terms))


@dataclass(frozen=True)
class Rule:
    """A compiled rule, as the engine runs it."""

    name: str
    hosts: Selector
    expr: Any                       # sinks.alerting.series.expr.Expr
    text: str                       # the expression as written
    warning: Any = None             # a Level, or None
    critical: Any = None
    hold: float = 0.0               # ``for``
    keep_firing: float = 0.0        # ``keep_firing_for``
    stale_after: float = 300.0
    max_attempts: int = 1

    @property
    def check(self) -> str:
        return PREFIX + self.name


@dataclass(frozen=True)
class RuleSpec:
    """One ``alerting.rules`` item."""

    name: str = setting(help="the rule's name (letters, digits, _ . -): its check is "
                             "rule:NAME on each host it applies to")
    expr: str = setting(help="the expression over the host's own series, e.g. "
                             "avg(load.5, 10m) or timeleft(disk.root.used_percent, 1h, 100) "
                             "(docs/operating/rules.md)")
    hosts: Any = setting("*", "the hosts it applies to: a glob on the hostname, site:GLOB, "
                              "parent:GLOB, or a list of them (any matches)")
    warning: str = setting("", "the level at which the rule is WARNING, e.g. '> 80' or "
                               "'< 4h'; empty: none")
    critical: str = setting("", "the level at which the rule is CRITICAL; empty: none")
    hold_for: Any = setting(0, "how long the level must be met before the rule's result "
                               "says so (a duration: 90s, 10m, 1h)", key="for")
    keep_firing_for: Any = setting(0, "how long a problem stays after its level is no "
                                      "longer met (a duration)")
    stale_after: Any = setting("5m", "a series with no point for this long makes the rule "
                                     "UNKNOWN (stale)")
    max_check_attempts: int = setting(1, "results at a level before the problem is HARD "
                                         "(the `for` duration is the usual way to wait)")

    def validate(self) -> None:
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise ValueError(f"name: {str(self.name)[:70]!r}: expected 1 to 64 letters, "
                             "digits, _ . -")
        where = f"rule {self.name}"
        compiled = {}
        for key, parse in (("expr", expression.parse), ("warning", _level),
                           ("critical", _level), ("for", _duration),
                           ("keep_firing_for", _duration), ("stale_after", _duration),
                           ("hosts", selector)):
            field = "hold_for" if key == "for" else key
            try:
                compiled[field] = parse(getattr(self, field))
            except (ValueError, expression.ExprError) as e:
                raise ValueError(f"{key}: {where}: {e}") from None
        if compiled["warning"] is None and compiled["critical"] is None:
            raise ValueError(f"critical: {where}: give a warning or a critical level "
                             "(or both)")
        if compiled["stale_after"] <= 0:
            raise ValueError(f"stale_after: {where}: expected a duration above 0")
        if not 1 <= self.max_check_attempts <= 100:
            raise ValueError(f"max_check_attempts: {where}: expected 1 to 100")
        object.__setattr__(self, "_rule", Rule(
            self.name, compiled["hosts"], compiled["expr"], self.expr.strip(),
            compiled["warning"], compiled["critical"], compiled["hold_for"],
            compiled["keep_firing_for"], compiled["stale_after"], self.max_check_attempts))

    def compiled(self) -> Rule:
        rule = self.__dict__.get("_rule")
        if rule is None:
            self.validate()
            rule = self.__dict__["_rule"]
        return rule


def _level(text: str):
    if not isinstance(text, str):
        raise ValueError("expected a level such as '> 90' or '< 4h'")
    return expression.parse_level(text) if text.strip() else None


def _duration(value) -> float:
    seconds = expression.parse_duration(value)
    if seconds < 0:
        raise ValueError("expected a duration of 0 or more")
    return seconds


def check_rules(specs: list[RuleSpec]) -> None:
    """The rules together: names unique, not too many (ValueError ``rules: ...``)."""
    check_named(specs, "rules", "rule", "rules", MAX_RULES)


def check_named(specs: list, key: str, noun: str, plural: str, limit: int) -> None:
    """Items of config list ``key`` (each with a ``name``) together: at most ``limit``,
    names unique (ValueError ``KEY: ...``, the alerting config's way)."""
    if len(specs) > limit:
        raise ValueError(f"{key}: {len(specs)} {plural}; at most {limit}")
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ValueError(f"{key}: {noun} {spec.name}: the name is given twice")
        seen.add(spec.name)


def for_demo() -> list[dict]:
    """The demo's rules (``fleetwatch demo``): a disk filling, a load, a perfdata series and
    a metric gone absent, each on every demo host, judged every few seconds."""
    return [
        {"name": "disk_full_soon", "hosts": "*",
         "expr": "timeleft(disk.root.used_percent, 30m, 100)",
         "critical": "< 4h", "for": "5m"},
        {"name": "load_high", "hosts": "*", "expr": "avg(load.1, 5m)",
         "warning": "> 8", "critical": "> 16", "for": "1m"},
        {"name": "carbon_slow", "hosts": "*", "expr": "max(checks.carbon_port.time, 5m)",
         "warning": "> 0.2", "critical": "> 0.5"},
        {"name": "stats_absent", "hosts": "*", "expr": "absent(cpu.percent, 1m)",
         "critical": "== 1"},
    ]
