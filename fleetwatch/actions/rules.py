"""The rules on series as the console shows and tries them: what a rule's graph draws, and a
draft of a rule made into the policy ``fleetwatch rules backtest`` replays.

**A draft** (:class:`Draft`: what the console's form says) replaces the declared rule of its
name in the rules the alerting sinks declared (the ``rules`` table, :mod:`query.rules`);
:func:`policy` makes them the ``alerting:`` section a backtest reads (``--rules``), checked
as a sink checks its config at start: a bad expression, level or duration is one line
naming it (ValueError), and nothing is run. The declared table holds the rules only, not
the sinks' other settings (channels, dependencies, host timeouts, ``rule_interval``): the
policy starts from their defaults, or from the ``alerting:`` section of the sink config
``rules.alerting_config`` names in the operator config (:func:`base_section`).

**The answer** of ``rules backtest --json`` (:mod:`fleetwatch.cli.rules`: pages per subject
and host, those added and avoided, its times in ISO 8601) is cut to the draft's rule by
:func:`would_be`, each time in epoch seconds.

**The graph** of a rule: the series its expression reads (:func:`graphed`), a counter read by
``rate`` drawn as its rate; its levels drawn across when its value is in its series' unit
(one call of ``avg``, ``min``, ``max``, ``last``, ``predict`` or ``rate``, or a series
alone), not otherwise (``timeleft`` is seconds, ``absent`` 0 or 1, arithmetic anything).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from fleetwatch.config import ConfigError, build, read, to_dict

#: a rule's check: ``rule:NAME``
PREFIX = "rule:"
#: the functions whose value is in their series' unit (a rate: per second of it)
SAME_UNIT = frozenset({"avg", "min", "max", "last", "predict", "rate"})
#: the longest past a draft may be tried over, and the shortest
SINCE_MAX, SINCE_MIN = 90 * 86400.0, 60.0
#: what the form's fields hold at most (characters)
LIMITS = {"expr": 2000, "warning": 64, "critical": 64, "for": 32, "keep_firing_for": 32,
          "hosts": 1000, "since": 32}
_TERMS = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class Draft:
    """A rule as the console's draft form says it (text fields, as typed)."""

    name: str
    expr: str
    warning: str = ""
    critical: str = ""
    hold: str = "0"                 # ``for``
    keep_firing_for: str = "0"
    hosts: str = "*"
    since: str = "7d"

    @classmethod
    def of(cls, name: str, form) -> "Draft":
        """From a form (a mapping of field -> text), each field cut to :data:`LIMITS`."""
        def field(key: str, default: str = "") -> str:
            return str(form.get(key, default) or "")[:LIMITS[key]]
        return cls(name, field("expr"), field("warning"), field("critical"),
                   field("for", "0"), field("keep_firing_for", "0"), field("hosts", "*"),
                   field("since", "7d"))

    @classmethod
    def from_rule(cls, rule: dict, since: str = "7d") -> "Draft":
        """The declared ``rule`` (:func:`query.rules.declared`) as its form first shows it."""
        return cls(rule["name"], rule["expr"], rule["warning"], rule["critical"],
                   duration(rule["for"]), duration(rule["keep_firing_for"]),
                   ", ".join(rule["hosts"]) or "*", since)

    @classmethod
    def from_item(cls, item: dict) -> "Draft":
        """A draft as tried (:meth:`item`, with its ``since``): the form shown again."""
        hosts = item.get("hosts") or "*"
        return cls(item["name"], item["expr"], item.get("warning", ""),
                   item.get("critical", ""), str(item.get("for", "0")),
                   str(item.get("keep_firing_for", "0")),
                   hosts if isinstance(hosts, str) else ", ".join(hosts),
                   str(item.get("since", "7d")))

    def item(self, stale_after: float | None = None) -> dict:
        """The draft as an ``alerting.rules`` item (``stale_after``: the declared rule's)."""
        terms = [t for t in _TERMS.split(self.hosts.strip()) if t]
        out = {"name": self.name, "expr": self.expr, "hosts": terms or "*",
               "warning": self.warning.strip(), "critical": self.critical.strip(),
               "for": self.hold.strip() or "0",
               "keep_firing_for": self.keep_firing_for.strip() or "0"}
        if stale_after is not None:
            out["stale_after"] = stale_after
        return out

    def since_seconds(self) -> float:
        """How far back the draft is tried (ValueError ``since: ...``)."""
        from sinks.alerting.series.expr import parse_duration
        try:
            seconds = parse_duration(self.since.strip())
        except ValueError as e:
            raise ValueError(f"since: {e}") from None
        if not SINCE_MIN <= seconds <= SINCE_MAX:
            raise ValueError(f"since: expected 1m to {SINCE_MAX / 86400:g}d, got "
                             f"{self.since.strip()[:32]!r}")
        return seconds


def duration(seconds: float | None) -> str:
    """Seconds as a rule's config writes them: ``600`` -> ``10m``, ``0`` -> ``0``."""
    from sinks.alerting.series.expr import format_duration
    if seconds is None:
        return ""
    return "0" if not seconds else format_duration(float(seconds))


def declared_item(rule: dict) -> dict:
    """A declared rule (:func:`query.rules.declared`) as an ``alerting.rules`` item."""
    return {"name": rule["name"], "expr": rule["expr"], "hosts": list(rule["hosts"]) or "*",
            "warning": rule["warning"], "critical": rule["critical"], "for": rule["for"],
            "keep_firing_for": rule["keep_firing_for"], "stale_after": rule["stale_after"],
            "max_check_attempts": rule.get("max_check_attempts") or 1}


def check_draft(draft: Draft, stale_after: float | None = None) -> dict:
    """The draft's ``alerting.rules`` item once the alerting sink's own checks passed; else
    ValueError, one line naming the field and what is wrong (``expr: rule disk_full:
    column 5: unknown function 'avgg' (known: ...)``)."""
    from sinks.alerting.series.config import RuleSpec
    draft.since_seconds()
    item = draft.item(stale_after)
    try:
        build(RuleSpec, item, "draft")
    except ConfigError as e:
        raise ValueError(f"{e.key}: {e.expected}" if e.key else e.expected) from None
    return item


def base_section(path: str) -> dict:
    """The ``alerting:`` section of the sink config at ``path`` (as its YAML says it,
    unchecked here: :func:`policy` checks it whole); ValueError naming the file."""
    try:
        data = read(path)
    except ConfigError as e:
        raise ValueError(f"rules.alerting_config: {e}") from None
    section = data.get("alerting") if isinstance(data, dict) else None
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ValueError(f"rules.alerting_config: {path}: alerting: expected a mapping of "
                         "settings")
    return dict(section)


def policy(declared: list[dict], item: dict, base: dict | None = None) -> dict:
    """The ``alerting:`` section a backtest of the draft ``item`` reads: ``base`` (a sink
    config's section, or the defaults) with its rules replaced by the ``declared`` ones,
    the draft in place of its name's (or added); checked as the sink checks it
    (ValueError, one line)."""
    from sinks.alerting.config import AlertingConfig
    rules = [declared_item(r) for r in declared if r["name"] != item["name"]]
    at = next((i for i, r in enumerate(declared) if r["name"] == item["name"]), len(rules))
    rules.insert(at, item)
    section = {**(base or {}), "rules": rules}
    try:
        build(AlertingConfig, section, "the draft's policy", prefix="alerting")
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return section


def operator_document(config) -> dict:
    """The operator config a backtest run by the console reads (``--config``): its routers
    and its ``history:`` section (the lake, Spark), as the console read them."""
    return {"routers": list(config.routers), "history": to_dict(config.history)}


# ---------------------------------------------------------------- the graph

def graphed(expr: str) -> tuple[list[tuple[str, bool]], bool]:
    """(the series ``expr`` reads, each (name, drawn as a rate), in the order written;
    whether its levels are in their unit: module docstring). A text that does not parse
    reads nothing."""
    from sinks.alerting.series import expr as expression
    try:
        parsed = expression.parse(expr)
    except (ValueError, expression.ExprError):
        return [], False
    out: dict[str, bool] = {}
    for call in parsed.calls:
        out[call.series] = out.get(call.series, False) or call.func == "rate"
    root = parsed.root
    same = isinstance(root, expression.Call) and (root.window is None
                                                  or root.func in SAME_UNIT)
    return list(out.items()), same


def levels(rule: dict) -> list[tuple[str, float]]:
    """The rule's levels as a graph draws them: (``warning > 80``, 80.0), critical after."""
    from sinks.alerting.series.expr import parse_level
    out = []
    for key in ("warning", "critical"):
        text = rule.get(key) or ""
        try:
            level = parse_level(text) if text.strip() else None
        except ValueError:
            level = None
        if level is not None and math.isfinite(level.value):
            out.append((f"{key} {level}", level.value))
    return out


# ---------------------------------------------------------------- the answer

def epoch(value) -> float | None:
    """A time of the backtest's answer (ISO 8601 text, or seconds) in epoch seconds."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise ValueError(f"not a time: {str(value)[:40]!r}")


def _page(p: dict) -> dict:
    if not isinstance(p, dict):
        raise ValueError("a page that is not a mapping")
    start, end = epoch(p.get("start")), epoch(p.get("end"))
    if start is None:
        raise ValueError("a page without its start")
    return {"key": str(p.get("key") or ""), "uuid": p.get("uuid"),
            "hostname": p.get("hostname"), "severity": str(p.get("severity") or ""),
            "start": start, "end": end, "duration": None if end is None else end - start,
            "changes": p.get("changes") or 0}


def would_be(doc, name: str) -> dict:
    """What ``rules backtest --json`` answered (``doc``), cut to the rule ``name``: its
    ``since`` and ``until``; ``pages`` (the draft's), each with ``added`` (no real page
    matched it) and ``then`` (what held it back in reality); ``real`` (what paged), each
    with ``avoided`` and ``by``; ``hosts`` (per host: pages, real, added, avoided); and
    ``others``: the pages of every other subject the policy tried (not the draft's).
    ValueError: not such an answer."""
    check = PREFIX + name
    if not isinstance(doc, dict):
        raise ValueError("the backtest did not answer a JSON document")
    try:
        since, until = epoch(doc.get("since")), epoch(doc.get("until"))
        lists = {k: doc.get(k) or [] for k in ("pages", "real", "added", "avoided")}
        if not all(isinstance(v, list) for v in lists.values()):
            raise ValueError("pages, real, added and avoided are not lists")
        mine = {k: [(_page(p), p) for p in v if isinstance(p, dict)
                    and p.get("subject") == check] for k, v in lists.items()}
    except ValueError as e:
        raise ValueError(f"the backtest's answer is not what was expected: {e}") from None
    added = {(p["key"], p["start"]): raw.get("then") for p, raw in mine["added"]}
    avoided = {(p["key"], p["start"]): raw.get("by") for p, raw in mine["avoided"]}
    pages = [{**p, "added": (p["key"], p["start"]) in added,
              "then": added.get((p["key"], p["start"]))} for p, _ in mine["pages"]]
    real = [{**p, "avoided": (p["key"], p["start"]) in avoided,
             "by": avoided.get((p["key"], p["start"]))} for p, _ in mine["real"]]
    hosts: dict[str, dict] = {}
    for side, key in ((pages, "pages"), (real, "real")):
        for p in side:
            row = hosts.setdefault(p["hostname"] or p["uuid"] or "", {
                "hostname": p["hostname"], "uuid": p["uuid"], "pages": 0, "real": 0,
                "added": 0, "avoided": 0})
            row[key] += 1
            row["added"] += bool(p.get("added"))
            row["avoided"] += bool(p.get("avoided"))
    return {"since": since, "until": until, "pages": pages, "real": real,
            "hosts": [hosts[k] for k in sorted(hosts)],
            "others": sum(1 for p in lists["pages"]
                          if isinstance(p, dict) and p.get("subject") != check)}


def of_host(found: dict, uuid: str | None, hostname: str | None) -> dict:
    """The draft's pages and the real ones of one host (by uuid, else hostname)."""
    def mine(p: dict) -> bool:
        return (uuid is not None and p["uuid"] == uuid) or \
            (p["uuid"] is None and hostname is not None and p["hostname"] == hostname)
    return {"pages": [p for p in found["pages"] if mine(p)],
            "real": [p for p in found["real"] if mine(p)]}
