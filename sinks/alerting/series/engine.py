"""The rules on series: each host's windows, and each rule judged on them.

Pure logic with the time given (no socket, no database, no clock of its own): the alerting
sink feeds it what the tails carry (:mod:`sinks.alerting.series.feed`) and, every
``rule_interval``, asks :meth:`Engine.evaluate` which rule results to submit; the backtest
feeds it the lake's messages with their own times.

What it keeps, and its bounds:

- Of each host, only the series some rule reads (its name as in Graphite after
  ``PREFIX.HOST.``, SPEC 4.7: a STATS metric's name, a labelled series' path without tags,
  ``NAME.KEY_VALUE...`` (:func:`sinks.graphite.paths.plain_path`), ``checks.PLUGIN.LABEL``
  for perfdata in base units, ``checks.PLUGIN.status``), for as long as the longest window
  that reads it (:attr:`sinks.alerting.series.expr.Expr.keep`, at least the rule's
  ``stale_after``),
  at most ``max_series_per_host`` series per host (a new one past it is refused and counted
  ``series_refused``) and ``max_points`` points per series. A point's time is this sink's
  clock when it came, never the sender's: a host's wrong clock cannot age its own points.
- Of each (host, rule): since when its level has been met (``for``), the status it fires,
  when the level was last met (``keep_firing_for``), and what was last submitted.

A rule's status at an evaluation: UNKNOWN when a series it reads has no point for its
``stale_after`` ("stale", never a silent OK), or never came from the host, or has too few
points for a function, once the rule has waited ``stale_after`` since it first judged that
host (this engine's start, or the host's arrival): "matches no series", "no value"; else CRITICAL or
WARNING once its level has been met for ``for`` (OK while pending), kept for
``keep_firing_for`` after. A result is submitted (a check result row of the host, plugin
``rule:NAME``, its time the evaluation's slot, so that two sinks evaluating one slot give
one transition: the state machine applies the first and ignores the same slot again) when
the status changes, at every evaluation while it is not OK (attempts, reminders), and at
least every ``refresh`` seconds while OK.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from fleetwatch.metricpath import node
from fleetwatch.series import entries
from sinks.alerting.checks.rules import CRITICAL, OK, UNKNOWN, WARNING
from sinks.alerting.series import expr as expression
from sinks.alerting.series.config import Host, Rule
from sinks.alerting.rows import judged_row
from sinks.alerting.series.window import Points
from sinks.graphite.paths import dotted, normalise, number, plain_path

#: what identifies the engine's results (the ``checks`` row's ``router`` column)
SOURCE = "rules"
#: distinct raw STATS names remembered with their Graphite form
MAX_NAMES = 100_000
#: points per series at most (a 10 s series over a day is 8,640)
MAX_POINTS = 10_000


@dataclass
class Judged:
    """One (host, rule): what the engine remembers between evaluations."""

    met_since: float | None = None      # since when the level has been met (``for``)
    firing: int = OK                    # the status it reports while the level holds
    last_met: float | None = None       # when the level was last met (``keep_firing_for``)
    told: int | None = None             # the status last submitted (None: nothing yet)
    told_at: float = -math.inf          # ... at this slot
    born: float | None = None           # first judged (a new host, or this engine's start)


class Engine:
    """Windows and rule states of a fleet's hosts."""

    def __init__(self, rules: list[Rule], started: float, interval: float = 30.0,
                 refresh: float = 300.0, max_series_per_host: int = 1000,
                 max_points: int = MAX_POINTS):
        self.interval, self.refresh = interval, refresh
        self.started = started
        self.max_series_per_host, self.max_points = max_series_per_host, max_points
        self.counts: Counter = Counter()
        #: uuid -> {series name -> Points}
        self.series: dict[str, dict[str, Points]] = {}
        #: (uuid, rule name) -> Judged
        self.judged: dict[tuple[str, str], Judged] = {}
        self.known: dict[str, Host] = {}
        #: uuid -> the rules that apply to it
        self.applies: dict[str, tuple[Rule, ...]] = {}
        self._names: dict[str, str] = {}
        self.rules: list[Rule] = []
        self.keep: dict[str, float] = {}
        #: the names a labelled series' path may start with for some rule to read it
        self.stems: frozenset[str] = frozenset()
        self.replace_rules(rules)

    # ---------------------------------------------------------------- configuration
    def replace_rules(self, rules: list[Rule]) -> None:
        """The rules from now on (a reload): windows of series still read are kept, the
        states of rules still there too."""
        self.rules = list(rules)
        keep: dict[str, float] = {}
        for rule in self.rules:
            for name, seconds in rule.expr.keep.items():
                # (an evaluation's window ends up to an interval behind the newest point)
                keep[name] = max(keep.get(name, 0.0), seconds + self.interval,
                                 rule.stale_after + self.interval)
        self.keep = keep
        self.stems = frozenset(".".join(parts[:n]) for parts in (k.split(".") for k in keep)
                               for n in range(1, len(parts)))
        self.warmups = {rule.name: warmup(rule) for rule in self.rules}
        for store in self.series.values():
            for name in [n for n in store if n not in keep]:
                del store[name]
            for name, points in store.items():
                points.keep = keep[name]
        names = {rule.name for rule in self.rules}
        for key in [k for k in self.judged if k[1] not in names]:
            del self.judged[key]
        self._match()

    def hosts(self, known: dict[str, Host]) -> None:
        """Who is who (the registry's agents): the rules each applies to. A host no longer
        known loses its windows and states."""
        if known == self.known:
            return                      # (every evaluation asks; the registry rarely moves)
        self.known = dict(known)
        self._match()

    def _match(self) -> None:
        self.applies = {}
        for uuid, host in self.known.items():
            rules = tuple(rule for rule in self.rules if rule.hosts(host))
            if rules:
                self.applies[uuid] = rules
        for uuid in [u for u in self.series if u not in self.known]:
            del self.series[uuid]
        for key in [k for k in self.judged if k[0] not in self.applies]:
            del self.judged[key]

    def told(self, uuid: str, rule: str, status: int, at: float) -> None:
        """What the state database already holds for (host, rule) (a sink that starts, or
        another sink's result): a problem it holds goes on firing while its level is met,
        without waiting for ``for`` again. A rule no longer configured, or a host it does
        not apply to, is left out."""
        if not any(r.name == rule for r in self.applies.get(uuid, ())):
            return
        judged = self.judged.setdefault((uuid, rule), Judged())
        judged.told, judged.told_at = status, at
        if status in (WARNING, CRITICAL):
            judged.firing, judged.met_since = status, -math.inf

    # ---------------------------------------------------------------- intake
    def feed(self, uuid: str, type_: str, body: dict, at: float) -> None:
        """A STATS or RESULT body of agent ``uuid`` (the stamp), received at ``at``."""
        keep = self.keep
        if not keep or uuid not in self.applies:
            return          # (a router, a sink, an agent no rule applies to)
        if type_ == "STATS":
            metrics = body.get("metrics")
            if not isinstance(metrics, dict):
                return
            names = self._names
            for raw, value in metrics.items():
                name = names.get(raw)
                if name is None:
                    name = self._name(raw)
                if name in keep:
                    self._point(uuid, name, value, at)
            if body.get("series") is not None:
                self._labelled(uuid, body["series"], at)
        elif type_ == "RESULT":
            plugin = body.get("plugin")
            if not isinstance(plugin, str) or not node(plugin):
                return
            base = f"checks.{node(plugin)}."
            self._point(uuid, base + "status", body.get("status"), at)
            perfdata = body.get("perfdata")
            for item in perfdata if isinstance(perfdata, list) else ():
                if not isinstance(item, dict) or not isinstance(item.get("label"), str):
                    continue
                label, uom = node(item["label"]), item.get("uom") or ""
                name = base + label
                if label and name in keep and isinstance(uom, str):
                    value = number(item.get("value"))
                    if value is not None:
                        self._point(uuid, name, normalise(value, uom)[0], at)

    def _labelled(self, uuid: str, series, at: float) -> None:
        """The points of a STATS's labelled series some rule reads (by their plain Graphite
        path); the sinks count the malformed entries, the rules skip them."""
        for entry in entries(series, Counter()):
            if not entry.labels:
                path = self._names.get(entry.name) or self._name(entry.name)
            elif (self._names.get(entry.name) or self._name(entry.name)) in self.stems:
                path = plain_path(entry.name, entry.labels)
            else:
                continue
            if path in self.keep:
                self._point(uuid, path, entry.value, at)

    def _name(self, raw: str) -> str:
        name = dotted(raw) if isinstance(raw, str) else ""
        if len(self._names) < MAX_NAMES:
            self._names[raw] = name
        return name

    def _point(self, uuid: str, name: str, value, at: float) -> None:
        if name not in self.keep:
            return
        value = number(value)
        if value is None:
            self.counts["point_bad"] += 1
            return
        store = self.series.get(uuid)
        if store is None:
            store = self.series[uuid] = {}
        points = store.get(name)
        if points is None:
            if len(store) >= self.max_series_per_host:
                self.counts["series_refused"] += 1
                return
            points = store[name] = Points(self.keep[name], self.max_points)
        if not points.append(at, value):
            self.counts["point_out_of_order"] += 1

    # ---------------------------------------------------------------- evaluation
    def slot(self, now: float) -> float:
        """The evaluation slot of ``now``: the same on every sink."""
        return math.floor(now / self.interval) * self.interval

    def evaluate(self, now: float) -> list[dict]:
        """Every rule of every host judged at ``now``: the result rows to submit."""
        slot = self.slot(now)
        rows = []
        empty: dict = {}
        for uuid, rules in self.applies.items():
            lookup = self.series.get(uuid, empty).get
            for rule in rules:
                self.counts["rule_evaluated"] += 1
                judged = self.judged.get((uuid, rule.name))
                if judged is None:
                    judged = self.judged[(uuid, rule.name)] = Judged()
                verdict = self._judge(rule, judged, lookup, now)
                if verdict is None:
                    continue
                status, output = verdict
                if status == OK and judged.told == OK and \
                        slot - judged.told_at < self.refresh:
                    continue
                rows.append(result_row(uuid, rule.check, status, output, slot))
        return rows

    def submitted(self, rows: list[dict]) -> None:
        """``rows`` reached the state database (or another sink's did for their slot)."""
        for row in rows:
            judged = self.judged.get((row["uuid"], row["plugin"][len("rule:"):]))
            if judged is not None:
                judged.told, judged.told_at = row["status"], row["started"]

    def _judge(self, rule: Rule, judged: Judged, lookup, now: float):
        """(status, output) of ``rule`` now, or None while undecided (a series not seen
        yet, within ``stale_after`` of this engine's start)."""
        if judged.born is None:
            judged.born = now
        if now - judged.born < self.warmups[rule.name]:
            return None                 # an absence is not known before its window passed
        try:
            value = rule.expr.evaluate(lookup, now, rule.stale_after)
        except expression.NoSeries as e:
            if now - judged.born < rule.stale_after:
                return None             # its first points may be on their way
            judged.met_since = None
            return UNKNOWN, (f"{rule.text}: matches no series: {e.name} has not come from "
                             "this host")
        except expression.Stale as e:
            judged.met_since = None
            return UNKNOWN, (f"{rule.text}: stale: no {e.name} for "
                             f"{human(now - e.last)}" if e.last is not None else
                             f"{rule.text}: stale: no {e.name}")
        except expression.NoValue as e:
            if now - judged.born < rule.stale_after:
                return None             # too few points yet (a window filling)
            judged.met_since = None
            return UNKNOWN, f"{rule.text}: no value ({e})"
        level = CRITICAL if rule.critical is not None and rule.critical(value) else \
            WARNING if rule.warning is not None and rule.warning(value) else OK
        shown = f"{rule.text} = {figure(value, rule)}"
        if level != OK:
            judged.last_met = now
            if judged.met_since is None:
                judged.met_since = now
            held = now - judged.met_since
            if held >= rule.hold:
                judged.firing = level
                return level, f"{shown} ({_level_text(rule, level)})"
            return OK, (f"{shown} ({_level_text(rule, level)} for {human(held)}, pending "
                        f"until {human(rule.hold)})")
        judged.met_since = None
        if judged.firing != OK and judged.last_met is not None and \
                now - judged.last_met < rule.keep_firing:
            return judged.firing, (f"{shown} (kept firing for {human(rule.keep_firing)} "
                                   "after its level)")
        judged.firing = OK
        return OK, shown


def warmup(rule: Rule) -> float:
    """How long a rule must have watched a host before its ``absent`` can say anything:
    its longest ``absent`` window (0 without one)."""
    return max((call.window or 0.0 for call in rule.expr.calls
                if call.func == "absent"), default=0.0)


def _level_text(rule: Rule, level: int) -> str:
    return f"warning {rule.warning}" if level == WARNING else f"critical {rule.critical}"


def result_row(uuid: str, check: str, status: int, output: str, slot: float) -> dict:
    """A rule's result as the ``checks`` row a RESULT would make
    (:func:`sinks.alerting.rows.judged_row`): its time the slot, on every sink alike."""
    return judged_row(uuid, check, status, output, slot, SOURCE, "rule")


def human(seconds: float) -> str:
    """A duration as people write it: 45s, 12m, 3h20m, 2d4h."""
    if not math.isfinite(seconds):
        return "never"
    seconds = max(0, int(round(seconds)))
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                     ("m", 60, "s", 1)):
        if seconds >= size:
            whole, rest = divmod(seconds, size)
            rest //= subsize
            return f"{whole}{unit}{rest}{sub}" if rest else f"{whole}{unit}"
    return f"{seconds}s"


def figure(value: float, rule: Rule) -> str:
    """``value`` as the rule's levels speak of it: a duration when a level is one."""
    if any(level is not None and level.text[-1:] in expression.UNITS
           for level in (rule.warning, rule.critical)):
        return human(value) if value >= 0 else "-" + human(-value)
    if not math.isfinite(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6g}"
