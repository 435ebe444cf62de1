"""Escalation tiers: how often a problem was told, and which ``after`` rules it reached.

Pure logic with the times passed in; no SQL (the rows and the sinks' tick are in
:mod:`sinks.alerting.escalation.store`, the rules in :mod:`sinks.alerting.delivery.config`).

A *told problem* (:class:`Problem`) is a check in a HARD problem or a host (an agent, or a
local process) DOWN whose trigger went out, from that first notification until its resolve
goes out:

- Its notifications are numbered (:func:`number`): the first trigger is 1, each later
  trigger of the same problem (a change such as WARNING -> CRITICAL, a reminder) adds one.
  An alert held back (a silence, an acknowledgement, a downtime) is not told, so not
  counted. The resolve ends the problem: the next one starts at 1 again. A rule's
  ``from_notification`` matches on this number (the alert event's ``notification``).
- A rule with ``after`` escalates it (:func:`due`): its channels get ONE escalation event
  per problem, once the problem has been unacknowledged for ``after`` seconds, counted from
  its first notification or from the end of the latest acknowledgement of it, whichever
  is later (:func:`unacked_since`: an acknowledgement that expires or is removed gives the
  first tier ``after`` again); never while one is active. With ``from_notification`` too,
  only once that many notifications went out. A rule is known by its content
  (:func:`fingerprint`): a rule changed by a reload is a new rule.
- Escalation events are not notifications of the problem (they do not count), and the
  escalated channels hear of its acknowledgement and its recovery like any channel a
  trigger of the problem went to (:func:`sinks.alerting.delivery.store.enqueue`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from fleetwatch.display import iso
from sinks.alerting.acks.rules import Ack
from sinks.alerting.delivery.rules import Rule, matches

#: the event kinds whose problems are numbered and escalated
KINDS = ("check", "host")
SUMMARY_MAX = 500


@dataclass(frozen=True)
class Problem:
    key: str                 # the alert key (the pager's dedup key)
    uuid: str
    check: str | None        # the plugin, or the local process; None: the agent
    kind: str                # "check" or "host"
    opened: float            # when its first notification went out
    notifications: int       # how many went out
    severity: str            # of the latest one
    status: int | None       # of the latest one (a check's 0-3)
    summary: str             # of the latest one
    #: rule fingerprint -> when it was escalated to; None: its event did not match the
    #: rule (judged again after the next notification)
    escalated: dict[str, float | None] = field(default_factory=dict)


def tracked(event: dict) -> bool:
    """Whether ``event`` starts, continues or ends a told problem: a trigger or resolve of
    a check or host, not an escalation event itself."""
    return event.get("kind") in KINDS and event.get("action") in ("trigger", "resolve") \
        and "escalated_after" not in event


def told(problem: Problem | None, event: dict, now: float) -> Problem | None:
    """The problem once ``event`` (:func:`tracked`) went out at ``now``: a trigger opens
    it (notification 1) or counts one more; a resolve ends it (None)."""
    if event["action"] == "resolve":
        return None
    status = event.get("status")
    latest = {"severity": str(event.get("severity") or "critical")[:16],
              "status": status if isinstance(status, int) and not isinstance(status, bool)
              else None, "summary": str(event.get("summary") or "")}
    if problem is None:
        return Problem(str(event["key"]), event["uuid"], event.get("check"), event["kind"],
                       now, 1, **latest)
    # rules it did not match are judged again: its severity or count may now match
    escalated = {fp: at for fp, at in problem.escalated.items() if at is not None}
    return replace(problem, notifications=problem.notifications + 1, escalated=escalated,
                   **latest)


def unacked_since(problem: Problem, acks: Iterable[Ack], now: float) -> float | None:
    """Since when ``problem`` is unacknowledged at ``now``: its first notification or the
    end of the latest acknowledgement of it after that (its ``ended``, or its ``expire``
    once past, though the tick has not ended it yet); None while one is active."""
    since = problem.opened
    for ack in acks:
        if ack.active(now):
            return None
        end = ack.ended
        if end is None and ack.expire is not None and ack.expire <= now:
            end = ack.expire
        if end is not None and since < end <= now:
            since = end
    return since


def fingerprint(rule: Rule) -> str:
    """A short name for ``rule`` made of all its settings."""
    data = json.dumps([rule.after_seconds, rule.from_notification, sorted(rule.severity),
                       rule.host, rule.check, sorted(rule.kind), list(rule.channels)])
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def span(seconds: float) -> str:
    """``30m``, ``1h30m``, ``2s``: a duration as a rule may give it."""
    left, out = int(round(seconds)), ""
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out or "0s"


def event(problem: Problem, hostname: str | None, after: float, now: float) -> dict:
    """The escalation event of ``problem`` for a rule of ``after`` seconds: a trigger with
    the problem's key, severity and latest summary, saying it was escalated."""
    waited = span(after)
    told = f"{problem.notifications} notification{'s' * (problem.notifications != 1)}"
    summary = f"{problem.summary} (escalated: unacknowledged for {waited})"
    return {"key": problem.key, "kind": problem.kind, "action": "trigger",
            "severity": problem.severity, "uuid": problem.uuid,
            "hostname": hostname or problem.uuid, "check": problem.check,
            "status": problem.status,
            "summary": summary[:SUMMARY_MAX],
            "text": f"Escalated: nobody acknowledged this problem within {waited}. First "
                    f"notified {iso(problem.opened)}; {told} so far.",
            "created": now, "notification": problem.notifications,
            "escalated_after": after}


def owed(problem: Problem, rules: Iterable[tuple[Rule, str]], since: float | None,
         now: float) -> list[tuple[Rule, str]]:
    """Of ``rules`` (``after`` rules with their :func:`fingerprint`), those ``problem``
    (unacknowledged ``since``) has reached at ``now`` (the boundary included) and not been
    escalated to yet; their other conditions are not judged here."""
    if since is None:
        return []
    return [(rule, fp) for rule, fp in rules if rule.after_seconds is not None
            and now - since >= rule.after_seconds and fp not in problem.escalated]


def due(problem: Problem, rules: Iterable[tuple[Rule, str]], since: float | None,
        hostname: str | None, now: float) -> list[tuple[Rule, dict]]:
    """The rules of :func:`owed` whose other conditions the escalation event matches, each
    with that event."""
    out = []
    for rule, _ in owed(problem, rules, since, now):
        ev = event(problem, hostname, rule.after_seconds, now)
        if matches(rule, ev):
            out.append((rule, ev))
    return out
