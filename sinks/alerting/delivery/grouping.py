"""Grouping: a channel with ``group_wait`` collects the alerts raised within it into one send.

Alertmanager's ``group_wait``, kept in the outbox rather than in a sink's memory:

- A channel's alerts fall into groups by its ``group_by`` keys (``host``, ``severity``,
  ``check``, ``kind``; none: one group for the channel). :func:`group_of` says which.
- An alert of a grouped channel is not due before ``group_wait`` seconds after it was
  recorded. When the first of a group is due, every alert of its group still pending and
  not yet tried goes with it (:func:`sinks.alerting.delivery.store.claim` takes them in the same
  transaction, so one deliverer holds the whole group and no alert is in two sends). An
  alert raised after that starts the next group, which waits ``group_wait`` again.
- The email channel sends a group as one message listing its alerts
  (:func:`sinks.alerting.delivery.channels.group_message`); the webhook keeps one event per alert
  key, as pager services expect, and POSTs the group's events one after the other.
- Recoveries and acknowledgements are grouped like problems, by the same keys, and listed in
  their own section of a message. The outbox's order rule stays: a recovery waits while its
  problem is pending, so it is never in the same message as its problem but in a later one.
- A failed send is retried as a group (every alert of it scheduled for the same next
  attempt); a crashed sink's claim on a group expires as a whole.

Pure: the deliverer (:mod:`sinks.alerting.delivery.deliverer`) and the outbox call it.
"""

from __future__ import annotations

from collections.abc import Iterable

#: ``group_by`` key -> the field of the event dict (:mod:`sinks.alerting.delivery.events`) it reads
FIELDS = {"host": "hostname", "severity": "severity", "check": "check", "kind": "kind"}
#: the most alerts one send takes; a larger group goes out in several
MAX_SIZE = 1000
#: sections of a grouped message, by the event's action, in the order they are listed
SECTIONS = (("trigger", "Problems"), ("acknowledge", "Acknowledged"), ("resolve", "Recoveries"))


def waits(channels: dict) -> dict[str, tuple[float, tuple[str, ...]]]:
    """``{channel: (group_wait, group_by)}`` of the channels that group (``group_wait`` > 0);
    ``channels`` is :meth:`sinks.alerting.delivery.config.DeliveryConfig.parsed_channels`."""
    return {name: (float(c.group_wait), tuple(c.group_by)) for name, c in channels.items()
            if getattr(c, "group_wait", 0) > 0}


def group_of(event: dict, by: Iterable[str]) -> tuple:
    """The values of ``event`` that name its group (``()``: the channel's one group)."""
    return tuple(event.get(FIELDS[key]) for key in by)


def title(by: Iterable[str], value: tuple) -> str:
    """``host web-1, severity critical``: what a group's alerts share (empty: nothing)."""
    return ", ".join(f"{key} {v if v is not None else '-'}" for key, v in zip(by, value))


def sends(rows: list[dict], grouped: dict[str, Iterable[str]]) -> list[list[dict]]:
    """The claimed outbox rows (:func:`sinks.alerting.delivery.store.claim`) as sends, in order.

    ``grouped`` maps the channels that send a group as one message to their ``group_by``;
    their rows of one group make one send (in id order), placed where the group's first row
    was. Every other row is a send of its own.
    """
    out: list[list[dict]] = []
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        channel = row["channel"]
        if channel not in grouped:
            out.append([row])
            continue
        name = (channel, group_of(row["event"], grouped[channel]))
        if name not in groups:
            groups[name] = []
            out.append(groups[name])
        groups[name].append(row)
    for send in groups.values():
        send.sort(key=lambda r: r["id"])
    return out


def sections(events: list[dict]) -> list[tuple[str, list[dict]]]:
    """A group's events by section (problems, acknowledgements, recoveries), empty ones
    left out, each in the order given."""
    out = []
    for action, heading in SECTIONS:
        these = [e for e in events if (e.get("action") if e.get("action") in
                                       ("acknowledge", "resolve") else "trigger") == action]
        if these:
            out.append((heading, these))
    return out


def listing(events: list[dict], cap: int, line) -> list[str]:
    """The lines that list a group: a heading per section with its count, then ``line(event)``
    for at most ``cap`` events over all sections, and ``... and N more`` where a section was
    cut."""
    lines: list[str] = []
    left = cap
    for heading, these in sections(events):
        if lines:
            lines.append("")
        lines.append(f"{heading} ({len(these)}):")
        shown = these[:max(left, 0)]
        lines += [f"  {line(e)}" for e in shown]
        left -= len(shown)
        if len(these) > len(shown):
            lines.append(f"  ... and {len(these) - len(shown)} more")
    return lines
