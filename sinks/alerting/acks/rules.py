"""Acknowledgements: an operator says "I am on it", and the problem stops paging.

Pure logic with the times passed in; no SQL (the rows are in :mod:`sinks.alerting.acks.store`,
the command in :mod:`fleetwatch.cli.ack`). The semantics are Icinga 2's:

- An acknowledgement covers one problem: a check (``UUID/check/PLUGIN``) or a host DOWN
  (``UUID/host``), from ``created`` until it ends. While it lasts, the problem's alerts
  (the trigger of a HARD problem, its reminders, a change of problem status under a sticky
  one) are held back: not sent and not counted as told, so whatever is still true when the
  acknowledgement ends is alerted then, like a silence's. A recovery (``resolve``) is never
  held back.
- A normal acknowledgement ends at any state change of the check (WARNING -> CRITICAL, or
  recovery); a sticky one (``--sticky``) only at recovery.
- With an expiry it ends at that time (:meth:`Ack.active` is false from ``expire`` on,
  whatever the tables say), and reminders resume. The sinks' tick ends expired rows, so
  expiry does not wait for a new result.
- Unless ``notify`` is off, the channels are told once: an ``acknowledge`` event with the
  problem's key (the pager's dedup key), "acknowledged by NAME: COMMENT".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sinks.alerting.checks.rules import OK

#: why an acknowledgement ended (the ``end_reason`` column)
CHANGED, RECOVERED, EXPIRED, REMOVED, REPLACED = \
    "changed", "recovered", "expired", "removed", "replaced"


@dataclass(frozen=True)
class Ack:
    id: int
    key: str                       # the problem's alert key
    uuid: str
    check: str | None              # the plugin; None: the host (DOWN)
    status: int                    # the problem's status when acknowledged (host: CRITICAL)
    created: float
    author: str = ""
    comment: str = ""
    sticky: bool = False
    notify: bool = True
    expire: float | None = None    # None: until the problem ends
    announced: float | None = None  # when the notice was enqueued
    ended: float | None = None

    def active(self, now: float) -> bool:
        return self.ended is None and self.created <= now and (
            self.expire is None or now < self.expire)

    @property
    def owes_notice(self) -> bool:
        return self.notify and self.announced is None and self.ended is None


def check_key(uuid: str, plugin: str) -> str:
    return f"{uuid}/check/{plugin}"


def host_key(uuid: str) -> str:
    return f"{uuid}/host"


def ends(ack: Ack, status: int, now: float) -> str | None:
    """Why ``ack`` ends when its check's latest status is ``status`` at ``now`` (None: it
    lasts): expiry first, then recovery, then (a normal one) a change of status."""
    if ack.ended is not None:
        return None
    if ack.expire is not None and now >= ack.expire:
        return EXPIRED
    if status == OK:
        return RECOVERED
    if not ack.sticky and status != ack.status:
        return CHANGED
    return None


def holds(ack: Ack | None, kind: str, action: str, now: float) -> bool:
    """Whether ``ack`` holds back an alert of ``kind`` and ``action`` at ``now``: a problem's
    trigger (first, change, reminder) while it is active; never a resolve or a flapping
    alert."""
    return ack is not None and ack.active(now) and kind in ("check", "host") \
        and action == "trigger"


class Cover:
    """The acknowledgements of a batch's checks (by check, ``(uuid, plugin)``), in a
    transaction that locked their rows: one ends at its check's change of state, by
    ``end(ack, reason)``, in that transaction."""

    def __init__(self, by_key: dict[tuple[str, str], Ack], now: float,
                 end: Callable[[Ack, str], None]):
        self.by_key, self.now, self.end = dict(by_key), now, end
        self.ended: list[tuple[Ack, str]] = []

    def step(self, key: tuple[str, str], status: int) -> None:
        """The check ``key`` has a new latest ``status``: end its acknowledgement if due."""
        ack = self.by_key.get(key)
        reason = ends(ack, status, self.now) if ack is not None else None
        if reason is None:
            return
        self.end(ack, reason)
        del self.by_key[key]
        self.ended.append((ack, reason))

    def of(self, key: tuple[str, str]) -> Ack | None:
        """The acknowledgement of check ``key`` still running, if any."""
        return self.by_key.get(key)


def summary(ack: Ack) -> str:
    """What the channels are told: ``acknowledged by NAME: COMMENT``."""
    text = f"acknowledged by {ack.author or 'someone'}"
    return f"{text}: {ack.comment}" if ack.comment else text


def check_comment(text: str) -> str:
    """A ``--comment`` as given on the command line, checked (ValueError otherwise)."""
    if len(text) > 1000 or "\n" in text or "\r" in text:
        raise ValueError("--comment: expected one line of at most 1000 characters")
    return text
