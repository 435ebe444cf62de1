"""``alerting.slos``: service level objectives, as the config gives them.

::

    alerting:
      slos:
        - name: http_availability      # its alerts: check slo:http_availability, kind slo
          objective: 99.9              # percent of the events (or of the time) that are good
          window: 30d                  # over this long (1d to 366d)
          checks: "http*"              # globs on check names (or a list of them)...
          # rules: "disk_full*"        # ... or on rule names (the checks rule:NAME)
          hosts: "*"                   # globs on hostnames, site:GLOB, parent:GLOB
          per_host: true               # also an objective (and alerts) per host
          downtime_counts_as: good     # good, bad (as measured: the default) or excluded
          # sli: results               # results (each result counts) or time (the seconds
                                       # in each state); by default results for checks,
                                       # time for rules

:func:`parse` makes them :class:`Slo` values, refusing a bad one with one line naming it
(``slos[2] (http_availability): objective: expected 0 < objective < 100``). The alerting
config may instead type its ``slos`` as :class:`SloSpec` items (as its ``rules`` are
``RuleSpec``: each key checked and documented by the config's reference), whose
``validate`` compiles the item, refusing it as ``alerting.slos[2].objective: slo
http_availability: expected ...``; :func:`check_slos` checks them together. Either way a bad
SLO stops the sink at start, and :func:`of` gives a config's SLOs, compiled once per config
object.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from fleetwatch.config import setting
from sinks.alerting.series.config import Host, Selector, check_named, selector
from sinks.alerting.silences.rules import parse_duration

__all__ = ["Host", "Slo", "SloSpec", "check_slos", "interval", "of", "parse"]

#: an SLO's name: its alerts' check is ``slo:NAME``
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: the check name of SLO NAME's alerts (holds, silences and downtimes match it)
PREFIX = "slo:"
#: the check name prefix of a rule's results (sinks.alerting.series.config.PREFIX)
RULE = "rule:"
#: SLOs in one config at most
MAX_SLOS = 200
#: the shortest and the longest window
MIN_WINDOW, MAX_WINDOW = 86400.0, 366 * 86400.0
#: how a downtime's results (or time) count
DOWNTIME = ("good", "bad", "excluded")
#: what an event of the SLI is: one result, or one second in a state
SLIS = ("results", "time")
#: each setting of an item, and what it says (docs/operating/slo.md)
FIELDS = {
    "name": "letters, digits, _ . - (1 to 64): the alerts' check is slo:NAME",
    "objective": "the percent of events (or of time) that must be good, 0 < objective < 100",
    "window": "the period the objective holds over: a duration, 1d to 366d (30d)",
    "checks": "globs on the check names whose results count (a glob or a list)",
    "rules": "globs on rule names whose states count (instead of checks)",
    "hosts": "the hosts that count: globs on the hostname, site:GLOB, parent:GLOB",
    "per_host": "true: each host has the objective too, with its own burn-rate alerts",
    "downtime_counts_as": "good (allowed), bad (counted as measured) or excluded",
    "sli": "results (each result an event, good when OK) or time (the seconds in each "
           "state); by default results for checks, time for rules",
}
#: rule_interval when the config has none: seconds between two judgements of an SLO
INTERVAL = 30.0


@dataclass(frozen=True)
class Slo:
    """One SLO, checked."""

    name: str
    objective: float                    # percent
    window: float                       # seconds
    source: str                         # "checks" or "rules"
    patterns: tuple[str, ...]           # globs on the check names (rules: rule:GLOB)
    hosts: Selector = Selector()
    per_host: bool = False
    downtime: str = "bad"               # how a downtime's events count (DOWNTIME)
    sli: str = "results"                # SLIS

    @property
    def check(self) -> str:
        """The check name of its alerts: ``slo:NAME``."""
        return PREFIX + self.name

    @property
    def allowed(self) -> float:
        """The share of events that may be bad: the error budget, 0 < allowed < 1."""
        return 1.0 - self.objective / 100.0

    def counts(self, check: str) -> bool:
        """Whether results of check ``check`` are events of this SLO (a rule's only for an
        SLO over rules, and the reverse)."""
        if check.startswith(RULE) != (self.source == "rules"):
            return False
        return any(fnmatch.fnmatchcase(check, p) for p in self.patterns)

    def covers(self, host: Host) -> bool:
        return self.hosts(host)

    @property
    def where(self) -> str:
        """What its hosts are, where an alert names a host: ``all hosts``, or ``hosts``
        and its selector."""
        terms = self.hosts.terms
        return "all hosts" if terms == ("*",) else "hosts " + ",".join(terms)

    def spec(self) -> dict:
        """What the ``slos`` table keeps of it (:mod:`sinks.alerting.slo.store`)."""
        patterns = [p[len(RULE):] for p in self.patterns] if self.source == "rules" \
            else list(self.patterns)
        return {"name": self.name, "objective": self.objective,
                "window_seconds": self.window, "source": self.source, "sli": self.sli,
                "patterns": patterns, "hosts": list(self.hosts.terms),
                "per_host": self.per_host, "downtime": self.downtime}


def _globs(value: Any) -> tuple[str, ...]:
    globs = [value] if isinstance(value, str) else value
    if not isinstance(globs, list) or not globs or \
            not all(isinstance(g, str) and g.strip() and len(g) <= 255 for g in globs):
        raise ValueError("expected a glob or a list of them (1 to 255 characters each)")
    return tuple(globs)


def _one(item: Any) -> Slo:
    """One item, or ValueError ``KEY: what is wrong``."""
    if not isinstance(item, dict):
        raise ValueError("expected a mapping of settings (name, objective, window, checks...)")
    unknown = sorted(str(k) for k in item if k not in FIELDS)
    if unknown:
        raise ValueError(f"{unknown[0][:40]}: unknown setting (known here: "
                         f"{', '.join(sorted(FIELDS))})")
    for key in ("objective", "window"):
        if key not in item:
            raise ValueError(f"{key}: required setting missing")
    objective = item["objective"]
    if isinstance(objective, bool) or not isinstance(objective, (int, float)) \
            or not 0 < objective < 100:
        raise ValueError("objective: expected 0 < objective < 100 (a percent: 99.9)")
    window = item["window"]
    try:
        if isinstance(window, bool) or not isinstance(window, (int, float, str)):
            raise ValueError("expected a duration")
        seconds = float(window) if not isinstance(window, str) else parse_duration(window)
    except ValueError as e:
        raise ValueError(f"window: {e}") from None
    if not MIN_WINDOW <= seconds <= MAX_WINDOW:
        raise ValueError("window: expected a duration of 1d to 366d (30d)")
    if ("checks" in item) == ("rules" in item):
        raise ValueError("checks: give checks (globs on check names) or rules (globs on "
                         "rule names), one of them")
    source = "checks" if "checks" in item else "rules"
    try:
        patterns = _globs(item[source])
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    if source == "rules":
        patterns = tuple(RULE + p for p in patterns)
    elif any(p.startswith(RULE) for p in patterns):
        raise ValueError("checks: rule:NAME is a rule's: say rules: NAME instead")
    try:
        hosts = selector(item.get("hosts", "*"))
    except ValueError as e:
        raise ValueError(f"hosts: {e}") from None
    per_host = item.get("per_host", False)
    if not isinstance(per_host, bool):
        raise ValueError("per_host: expected true or false")
    downtime = item.get("downtime_counts_as", "bad")
    if downtime not in DOWNTIME:
        raise ValueError(f"downtime_counts_as: expected {', '.join(DOWNTIME)}")
    sli = item.get("sli", "results" if source == "checks" else "time")
    if sli not in SLIS:
        raise ValueError(f"sli: expected {' or '.join(SLIS)}")
    return Slo(item["name"], float(objective), seconds, source, patterns, hosts, per_host,
               downtime, sli)


@dataclass(frozen=True)
class SloSpec:
    """One ``alerting.slos`` item, as a config dataclass: :meth:`validate` compiles it."""

    name: str = setting(help=FIELDS["name"])
    objective: float = setting(help=FIELDS["objective"])
    window: Any = setting(help=FIELDS["window"])
    checks: Any = setting(None, FIELDS["checks"])
    rules: Any = setting(None, FIELDS["rules"])
    hosts: Any = setting("*", FIELDS["hosts"])
    per_host: bool = setting(False, FIELDS["per_host"])
    downtime_counts_as: str = setting("bad", FIELDS["downtime_counts_as"])
    sli: str = setting("", FIELDS["sli"] + " (empty: that default)")

    def item(self) -> dict:
        """The item as :func:`parse` reads it (the settings given)."""
        out = {"name": self.name, "objective": self.objective, "window": self.window,
               "hosts": self.hosts, "per_host": self.per_host,
               "downtime_counts_as": self.downtime_counts_as}
        for key in ("checks", "rules", "sli"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    def validate(self) -> None:
        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise ValueError(f"name: {str(self.name)[:70]!r}: expected 1 to 64 letters, "
                             "digits, _ . -")
        try:
            slo = _one(self.item())
        except ValueError as e:
            key, _, what = str(e).partition(": ")
            raise ValueError(f"{key}: slo {self.name}: {what}") from None
        object.__setattr__(self, "_slo", slo)

    def compiled(self) -> Slo:
        slo = self.__dict__.get("_slo")
        if slo is None:
            self.validate()
            slo = self.__dict__["_slo"]
        return slo


def check_slos(specs: list) -> None:
    """The SLOs together (:class:`SloSpec` items, each valid): names unique, not too many
    (ValueError ``slos: ...``)."""
    check_named(specs, "slos", "slo", "SLOs", MAX_SLOS)


def parse(items: list) -> list[Slo]:
    """The SLOs of ``alerting.slos`` (dicts as the YAML gives them; an :class:`Slo` is taken
    as it is); ValueError ``slos[I] (NAME): KEY: what is wrong`` for the first bad one."""
    if not isinstance(items, (list, tuple)):
        raise ValueError("slos: expected a list of SLOs")
    if len(items) > MAX_SLOS:
        raise ValueError(f"slos: {len(items)} SLOs; at most {MAX_SLOS}")
    out: list[Slo] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        if isinstance(item, Slo):
            out.append(item)
            continue
        if isinstance(item, SloSpec):
            item = item.item()
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not NAME.fullmatch(name):
            shown = f"{str(name)[:70]!r}: " if name is not None else ""
            raise ValueError(f"slos[{i}]: name: {shown}expected 1 to 64 letters, digits, "
                             "_ . -")
        try:
            slo = _one(item)
        except ValueError as e:
            raise ValueError(f"slos[{i}] ({name}): {e}") from None
        if name in seen:
            raise ValueError(f"slos[{i}] ({name}): name: given twice")
        seen.add(name)
        out.append(slo)
    return out


def of(config) -> list[Slo]:
    """The SLOs of an alerting config (its ``slos``: dicts, :class:`SloSpec` or
    :class:`Slo` items), compiled once per config object."""
    found = getattr(config, "__dict__", {}).get("_slos")
    if found is not None:
        return found
    found = parse(list(getattr(config, "slos", None) or ()))
    try:
        object.__setattr__(config, "_slos", found)
    except (AttributeError, TypeError):        # (a config without a __dict__)
        pass
    return found


def interval(config) -> float:
    """Seconds between two judgements of an SLO: the config's ``rule_interval``."""
    return float(getattr(config, "rule_interval", None) or INTERVAL)


def gap(config) -> float:
    """The longest span between two results of a rule that a time SLI counts (twice the
    config's ``rule_refresh``, the longest an OK rule goes without one): more is time no
    sink judged the rule, counted neither good nor bad."""
    return 2.0 * float(getattr(config, "rule_refresh", None) or 600.0)
