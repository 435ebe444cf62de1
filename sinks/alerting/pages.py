"""Pages, and what a backtest changes about them: alert events folded into the problems they
paged, and two lists of them (the backtest's and what really paged) compared. Pure: no
database, no Spark.

A **page** is a problem as the pager saw it: a key's ``trigger`` opens it (a later trigger
of the same key while it is open, a change of severity, is the same page), its
``resolve`` closes it (``end``). A NOTIFY's alert is a page of its own, with no end.
Reminders and acknowledgement notices page nobody new and are not pages; nor are a
channel's own alerts (kind ``channel``: a backtest delivers nothing, so has none).

**Comparison** (:func:`compare`). Pages are matched per key: a backtest page and a real
one of the same key match when their spans meet (a span lasts from the trigger to the
resolve, or to ``until`` while open), each page matching at most one, in time order. Of
the pages that began within ``[since, until)`` (those that began in the warm-up before
``since`` are matched, never reported):

- **added**: a backtest page no real page matches, and what held that key back in
  reality while it lasted (the lake's ``muted`` and ``held`` rows: a silence the lake keeps
  no copy of to replay, a downtime), if anything did;
- **avoided**: a real page no backtest page matches, and what held that key back in the
  backtest while the real page lasted (:class:`Hold`: a downtime, a silence, a parent),
  first found; if nothing did, the policy did not page it (:func:`policy`: for a rule, its
  levels or ``for``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

#: alert kinds that are not pages of a subject (a channel failing is the deliverer's)
NOT_PAGES = frozenset({"channel"})
#: why an unmatched real page was not paged when nothing held it, per kind
POLICY = {"check": "the check policy (max_check_attempts, flapping)",
          "flapping": "flap detection (flap_low, flap_high)",
          "host": "the host timeout",
          "slo": "the SLO's objective or burn-rate windows"}
RULE_POLICY = "the rule's levels or `for`"
#: a rule's check: ``rule:NAME`` (sinks.alerting.series)
RULE_PREFIX = "rule:"


@dataclass
class Page:
    key: str
    kind: str
    uuid: str | None
    hostname: str | None
    check: str | None
    severity: str
    start: float
    #: the resolve's time; None while open (a NOTIFY's page never has one)
    end: float | None = None
    #: later triggers while it was open (changes of severity or status)
    changes: int = 0
    #: the real page it matched (or the backtest's), once compared
    match: "Page | None" = field(default=None, repr=False, compare=False)

    @property
    def subject(self) -> str:
        """What paged, as the report groups it: the check (``rule:NAME`` for a rule), ``host``
        for a host DOWN, ``process NAME``, ``notify``, ``CHECK (flapping)``."""
        if self.kind == "host":
            return f"process {self.check}" if self.check else "host"
        if self.kind == "flapping":
            return f"{self.check} (flapping)"
        return self.check or self.kind

    def last(self, until: float) -> float:
        """When its span ends: the resolve, or ``until`` while open (a NOTIFY's: its start)."""
        if self.end is not None:
            return self.end
        return self.start if self.kind == "notify" else max(self.start, until)

    def duration(self) -> float | None:
        return None if self.end is None else self.end - self.start

    def to_json(self) -> dict:
        return {"key": self.key, "kind": self.kind, "subject": self.subject,
                "uuid": self.uuid, "hostname": self.hostname, "check": self.check,
                "severity": self.severity, "start": self.start, "end": self.end,
                "duration": self.duration(), "changes": self.changes}


@dataclass(frozen=True)
class Hold:
    """A key held back from ``first`` to ``last``: ``reason`` (:mod:`sinks.alerting.holds`'
    words: in downtime, silenced, parent down, unreachable) and ``by``, what held it, in a
    few words (``downtime 3 (web-*, 'kernel')``, ``silence 7``, ``parent db-1/mysql``)."""

    key: str
    reason: str
    by: str
    first: float
    last: float


def pages(events: Iterable[dict]) -> list[Page]:
    """The pages of alert events (dicts with key, kind, action, severity, uuid, hostname,
    check, created), in the order they were recorded."""
    out: list[Page] = []
    open_: dict[str, Page] = {}
    for e in events:
        kind, key, action = e["kind"], e["key"], e["action"]
        if kind in NOT_PAGES:
            continue
        if action == "trigger":
            page = open_.get(key)
            if page is not None:
                page.changes += 1
                continue
            page = Page(key, kind, e.get("uuid"), e.get("hostname"), e.get("check"),
                        e.get("severity") or "", float(e["created"]))
            out.append(page)
            if kind != "notify":
                open_[key] = page
        elif action == "resolve":
            page = open_.pop(key, None)
            if page is not None:
                page.end = float(e["created"])
    return out


def _meets(a: Page, b: Page, until: float) -> bool:
    return a.start <= b.last(until) and b.start <= a.last(until)


@dataclass
class Diff:
    since: float
    until: float
    backtest: list[Page]
    real: list[Page]
    #: (page, what held it back in reality, or None)
    added: list[tuple[Page, Hold | None]] = field(default_factory=list)
    #: (real page, what held it back in the backtest, or None: the policy, :func:`policy`)
    avoided: list[tuple[Page, Hold | None]] = field(default_factory=list)

    def reported(self, side: list[Page]) -> list[Page]:
        """The pages of ``side`` that began in ``[since, until)`` (not in the warm-up)."""
        return [p for p in side if self.since <= p.start < self.until]

    def summary(self) -> list[dict]:
        """Per subject and host, sorted: the backtest's pages (count, first, ``seconds``
        paged in all by those that ended, None when none did; ``open``: those still open at
        the end), the real ones, added and avoided."""
        rows: dict[tuple[str, str], dict] = {}

        def row(p: Page) -> dict:
            host = p.hostname or p.uuid or ""
            return rows.setdefault((p.subject, host), {
                "subject": p.subject, "hostname": host, "pages": 0, "first": None,
                "seconds": None, "open": 0, "real": 0, "added": 0, "avoided": 0})
        for p in self.reported(self.backtest):
            r = row(p)
            r["pages"] += 1
            r["first"] = p.start if r["first"] is None else min(r["first"], p.start)
            if p.duration() is not None:
                r["seconds"] = (r["seconds"] or 0.0) + p.duration()
            elif p.kind != "notify":
                r["open"] += 1
        for p in self.reported(self.real):
            row(p)["real"] += 1
        for p, _ in self.added:
            row(p)["added"] += 1
        for p, _ in self.avoided:
            row(p)["avoided"] += 1
        return [rows[k] for k in sorted(rows)]

    def to_json(self) -> dict:
        return {"summary": self.summary(),
                "pages": [p.to_json() for p in self.reported(self.backtest)],
                "real": [p.to_json() for p in self.reported(self.real)],
                "added": [{**p.to_json(), "then": None if h is None else h.by,
                           "held": None if h is None else h.reason} for p, h in self.added],
                "avoided": [{**p.to_json(), "by": policy(p) if h is None else h.by,
                             "held": None if h is None else h.reason}
                            for p, h in self.avoided]}


def compare(backtest: list[Page], real: list[Page], since: float, until: float,
            holds: Iterable[Hold] = (), then: Iterable[Hold] = (),
            slack: float = 0.0) -> Diff:
    """The backtest's pages against the real ones (module docstring). ``holds``: the
    backtest's holds; ``then``: what held keys back in reality (the lake's muted and held
    rows); a hold counts for a page when it meets the page's span widened by ``slack``
    seconds on each side (the replay's step: its times are exact to that)."""
    diff = Diff(since, until, backtest, real)
    by_key: dict[str, list[Page]] = {}
    for p in backtest:
        p.match = None
        by_key.setdefault(p.key, []).append(p)
    for r in real:
        r.match = None
        for b in by_key.get(r.key, ()):
            if b.match is None and _meets(b, r, until):
                b.match, r.match = r, b
                break
    held = _index(holds)
    muted = _index(then)
    for b in diff.reported(backtest):
        if b.match is None:
            diff.added.append((b, _held(muted, b, until, slack)))
    for r in diff.reported(real):
        if r.match is None:
            diff.avoided.append((r, _held(held, r, until, slack)))
    return diff


def _index(holds: Iterable[Hold]) -> dict[str, list[Hold]]:
    out: dict[str, list[Hold]] = {}
    for h in holds:
        out.setdefault(h.key, []).append(h)
    return out


def _held(index: dict[str, list[Hold]], page: Page, until: float,
          slack: float = 0.0) -> Hold | None:
    """The first hold of ``page``'s key that meets its span (widened by ``slack``)."""
    for h in sorted(index.get(page.key, ()), key=lambda h: h.first):
        if h.first <= page.last(until) + slack and page.start - slack <= h.last:
            return h
    return None


def policy(page: Page) -> str:
    """What in the policy tried did not page ``page`` when nothing held it back."""
    if page.kind == "check" and (page.check or "").startswith(RULE_PREFIX):
        return RULE_POLICY
    return POLICY.get(page.kind, "the alerting policy")
