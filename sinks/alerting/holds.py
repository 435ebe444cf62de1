"""Why an alert is held back: one predicate, asked on every path an alert takes out.

Icinga 2's ``NotificationSuppressed``, as one function (:func:`held_back`) of the alert and
what the transaction knows (a :class:`sinks.alerting.port.EvaluationPort`). An alert is held
back, in this order:

- **acknowledged**: a problem's trigger under an active acknowledgement of it
  (:func:`sinks.alerting.acks.rules.holds`);
- **parent down**: a check's trigger while a parent holds it (its host UNREACHABLE, or a
  parent check in a HARD problem: :mod:`sinks.alerting.dependencies`);
- **unreachable**: a host's DOWN while it is UNREACHABLE behind a parent;
- **silenced**: an active silence matches it (:mod:`sinks.alerting.silences`);
- **in downtime**: a downtime covers it (:mod:`sinks.alerting.downtimes`; a flexible one
  only a problem that began in one of its windows, ``since``).

A held alert is not told to the state machines, so whatever is still true when the hold
ends is alerted then. :func:`admit` counts each hold, notes it (the sink's ``on_hold``, a
backtest's recorder) and records what a silence or a downtime muted; :func:`deliver`
enqueues what is not held. Results, heartbeats, silent hosts, notifications,
acknowledgement notices, departures and escalations all go through them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sinks.alerting.acks.rules import holds as ack_holds
from sinks.alerting.downtimes.rules import covering
from sinks.alerting.silences.rules import Subject, first_match

if TYPE_CHECKING:
    from sinks.alerting.acks.rules import Ack
    from sinks.alerting.port import EvaluationPort

log = logging.getLogger(__name__)

#: why an alert is held back (:func:`held_back`)
ACKNOWLEDGED, PARENT_DOWN, UNREACHABLE = "acknowledged", "parent down", "unreachable"
SILENCED, DOWNTIME = "silenced", "in downtime"
#: the sink's counter of each
COUNTS = {ACKNOWLEDGED: "alert_acknowledged", PARENT_DOWN: "alert_held_by_parent",
          UNREACHABLE: "alert_unreachable", SILENCED: "alert_suppressed",
          DOWNTIME: "alert_downtime"}


def held_back(port: EvaluationPort, event: dict, check: str | None,
              since: float | None = None, ack: Ack | None = None,
              parent: str | None = None) -> tuple[str, object] | None:
    """Why ``event`` is held back now, and by what: ``(reason, by)``, ``by`` the
    acknowledgement, the parent, the silence or the downtime; None: it goes out.

    ``check`` is its subject's check (a plugin, a local process or a NOTIFY's source; None:
    the host); ``since`` when its problem began (a NOTIFY's is now); ``ack`` the
    acknowledgement of its problem, ``parent`` the parent holding its subject, if any."""
    action, now = event["action"], port.now
    if ack is not None and ack_holds(ack, event["kind"], action, now):
        return ACKNOWLEDGED, ack
    if parent is not None and action == "trigger":
        return (UNREACHABLE if event["kind"] == "host" else PARENT_DOWN), parent
    subject = Subject(event["uuid"], event.get("hostname"), check)
    silence = first_match(port.silences(), subject, now)
    if silence is not None:
        return SILENCED, silence
    downtimes = port.downtimes()
    if downtimes:
        downtime = covering(downtimes, subject, now, now if event["kind"] == "notify" else since,
                            port.tz, port.ancestors)
        if downtime is not None:
            return DOWNTIME, downtime
    return None


def admit(port: EvaluationPort, event: dict, check: str | None, since: float | None = None,
          ack: Ack | None = None, parent: str | None = None) -> bool:
    """Whether ``event`` is to be enqueued (:func:`held_back` says nothing holds it; a
    problem's trigger is then numbered, :meth:`EvaluationPort.number`). A hold is counted and
    noted (:meth:`EvaluationPort.note_hold`: the sink's ``on_hold``); what a silence or a
    downtime held is recorded."""
    hold = held_back(port, event, check, since, ack, parent)
    if hold is None:
        port.number(event)
        return True
    reason, by = hold
    port.counts[COUNTS[reason]] += 1
    port.note_hold(reason, by, event)
    if reason in (SILENCED, DOWNTIME):
        port.record_held(reason, by, event)
        log.info("alert %s %d: %s %s %s", "muted by silence" if reason == SILENCED
                 else "held by downtime", by.id, event["action"], event["severity"],
                 event["key"])
    return False


def deliver(port: EvaluationPort, event: dict, check: str | None,
            since: float | None = None, rules=None, ack: Ack | None = None,
            parent: str | None = None) -> bool:
    """Enqueue ``event`` unless it is held back (:func:`admit`); ``rules``: the routing
    rules instead of the configured ones (an escalation's own rule)."""
    if not admit(port, event, check, since, ack, parent):
        return False
    port.enqueue([event], rules or port.config.delivery)
    told(port, event)
    return True


def told(port: EvaluationPort, event: dict) -> None:
    """``event`` was enqueued: counted and logged."""
    port.counts[f"alert_{event['kind']}_{event['action']}"] += 1
    # every NOTIFY is an alert: those at DEBUG, state changes at INFO
    log.log(logging.DEBUG if event["kind"] == "notify" else logging.INFO,
            "alert: %s %s %s (%s): %s", event["action"], event["severity"], event["key"],
            event.get("hostname"), event["summary"][:200])
