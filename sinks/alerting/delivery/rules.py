"""Routing: which channels an alert event goes to, by the rules of ``alerting.delivery``.

A :class:`Rule` names channels and the events it takes (severities, host and check globs,
kinds); :func:`route` gives an event the channels of every rule it matches
(:func:`matches`). A rule with conditions (``after``, ``from_notification``) is the
escalation of a problem (:mod:`sinks.alerting.escalation.store`): ``from_notification: N``
matches a problem's Nth notification and later (the alert event's ``notification``),
``after`` is not matched when an alert is routed but by the sinks' tick. Pure; the rest of
the section (channels, retries) is :mod:`sinks.alerting.delivery.config`.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any

from fleetwatch.config import setting
from sinks.alerting.silences.rules import parse_duration

#: event kinds and severities a rule may name (docs/concepts/alerts.md, "The alert event")
KINDS = ("check", "host", "notify", "flapping", "channel", "slo")
SEVERITIES = ("critical", "error", "warning", "unknown", "info", "ok", "debug")


@dataclass(frozen=True)
class Rule:
    severity: list[str] = setting(factory=list, help="event severities (empty: any)")
    host: str = setting("*", "glob on the hostname (or the uuid)")
    check: str = setting("*", "glob on the check name; events without a check match only *")
    kind: list[str] = setting(factory=list, help="event kinds: check, host, notify, flapping, "
                                                 "channel (an alert channel failing), slo "
                                                 "(an SLO's error budget burning); empty: "
                                                 "any")
    channels: list[str] = setting(factory=list, help="channels an event matching this rule "
                                                     "goes to")
    after: Any = setting(None, "escalation: once a check or host problem has lasted this long "
                               "unacknowledged, its channels get one escalation event (seconds, "
                               "or a duration like 30m); null: route alerts as they are raised")
    from_notification: int = setting(0, "only a problem's Nth notification and later (its "
                                        "first trigger is 1, each change or reminder counts); "
                                        "0: any alert")

    def __post_init__(self):
        try:
            seconds, error = after_seconds(self.after), None
        except ValueError as e:
            seconds, error = None, e
        object.__setattr__(self, "_after", seconds)
        object.__setattr__(self, "_error", error)

    @property
    def after_seconds(self) -> float | None:
        """``after`` in seconds (None: not an escalation rule)."""
        if self._error is not None:
            raise self._error
        return self._after

    def validate(self):
        if self._error is not None:
            raise self._error
        if not 0 <= self.from_notification <= 1_000_000:
            raise ValueError("from_notification: expected 0 (any alert) or a notification "
                             "number from 1")
        if self._after is not None and any(k not in ("check", "host") for k in self.kind):
            raise ValueError("kind: an `after` rule escalates check and host problems only "
                             "(expected check, host or nothing)")
        for s in self.severity:
            if s not in SEVERITIES:
                raise ValueError(f"severity: expected some of {', '.join(SEVERITIES)}, got {s!r}")
        for k in self.kind:
            if k not in KINDS:
                raise ValueError(f"kind: expected some of {', '.join(KINDS)}, got {k!r}")
        if not self.channels:
            raise ValueError("channels: expected at least one channel name")


def after_seconds(value) -> float | None:
    """A rule's ``after`` in seconds: a YAML number is seconds (like every duration of this
    file), a string a duration like ``90s``, ``30m``, ``1h30m``; ValueError("after: ...")."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError as e:
            raise ValueError(f"after: {e}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        got = str(value).lower() if isinstance(value, bool) else \
            {dict: "a mapping", list: "a list"}.get(type(value), type(value).__name__)
        raise ValueError(f"after: expected seconds or a duration like 30m, got {got}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError("after: expected a positive number of seconds (or omit it)")
    return float(value)



def matches(rule: Rule, event: dict) -> bool:
    """Whether ``event`` (an alert event dict, :mod:`sinks.alerting.delivery.events`) matches every
    condition of ``rule`` but ``after`` (the escalation pass judges that one). An event
    without a ``notification`` number (a resolve, a notice, a NOTIFY) matches no rule with
    ``from_notification``."""
    if rule.from_notification:
        number = event.get("notification")
        if isinstance(number, bool) or not isinstance(number, int) \
                or number < rule.from_notification:
            return False
    if rule.severity and event.get("severity") not in rule.severity:
        return False
    if rule.kind and event.get("kind") not in rule.kind:
        return False
    if rule.host != "*" and not any(
            isinstance(v, str) and fnmatch.fnmatchcase(v, rule.host)
            for v in (event.get("hostname"), event.get("uuid"))):
        return False
    check = event.get("check")
    if rule.check != "*" and not (isinstance(check, str) and
                                  fnmatch.fnmatchcase(check, rule.check)):
        return False
    return True


def route(event: dict, rules) -> list[str]:
    """The channels ``event`` goes to: those of every matching rule, each once, in order.

    ``rules`` is a :class:`sinks.alerting.delivery.config.DeliveryConfig` or a list of
    :class:`Rule`. Rules with ``after`` are left out: their channels get the escalation events of
    the sinks' tick only.
    """
    rules = getattr(rules, "rules", rules)
    out: list[str] = []
    for rule in rules:
        if rule.after_seconds is None and matches(rule, event):
            out.extend(c for c in rule.channels if c not in out)
    return out
