"""The actions as the console asks for them: :class:`Actions`, handed to web/ by
``fleetwatch web serve`` (``console.actions``), and :class:`Refused`, what it raises.

Each method is one of this layer's functions with the console's defaults (the state
database it was started with, its clock, its reader), and its errors in the console's
words: a refusal's text for the user and a status for the API (404 nothing there, 422 a
field not right, 503 the state database not usable). A change takes ``also(conn, what was
made)``, run in the change's own transaction (the console's audit row: both kept or
neither; :func:`fleetwatch.actions.database.write`). A check is run in the caller's thread
(the console's thread pool, never its event loop), its waits bounded: the routers' answers
by ``Mesh.timeout`` each, the RESULT by ``timeout``.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager

from fleetwatch.actions import acks, alerts, checks, downtimes, slo
from fleetwatch.actions.database import Unavailable

__all__ = ["Actions", "Refused"]


class Refused(Exception):
    """An action the fleet's state refuses (nothing to acknowledge): its text is for the
    user, the status (404, 422, 503) for the API."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


@contextmanager
def refusing(fields: bool = False):
    """The block's errors as :class:`Refused`: :class:`Unavailable` 503, nothing to act on
    404, and with ``fields`` a ValueError (a comment, a duration, a host never seen) 422,
    its options named as the console's fields (:func:`fields_of`)."""
    try:
        yield
    except (acks.NoProblem, checks.CannotCheck) as e:
        raise Refused(str(e), 404) from None
    except Unavailable as e:
        raise Refused(str(e), 503) from None
    except ValueError as e:
        if not fields:
            raise
        raise Refused(fields_of(e)) from None


def fields_of(e: ValueError) -> str:
    """A refusal in the console's words: the commands' options named as the form's and the
    API's fields (``--for``: duration, ``--force``: force)."""
    return re.sub(r"--(force|for|comment)\b",
                  lambda m: {"for": "duration"}.get(m.group(1), m.group(1)), str(e))


class Actions:
    """What the console changes and lists, on the state database at ``state_url`` (read
    through ``reader``, a :class:`fleetwatch.store.reader.Reader` over the console's engine;
    without one, each list opens its own), and the checks it runs through ``mesh``."""

    def __init__(self, state_url: str, mesh: checks.Mesh | None = None, clock=time.time,
                 reader=None):
        self.state_url, self.mesh, self.clock, self.reader = state_url, mesh, clock, reader

    def run_check(self, host: str, plugin: str, timeout: float = 60.0) -> dict:
        """The check's result now (``fleetwatch run --wait --json``'s document), or
        Refused: 404 when it could not be run, 422 for a name that is not right."""
        if not host or not plugin or host.startswith("-") or plugin.startswith("-"):
            raise Refused("run: which host and which check?")
        if self.mesh is None:
            raise Refused("run: no routers to send the RUN to", 503)
        with refusing():
            try:
                return checks.run(self.mesh, self.state_url, host, plugin, True, timeout)
            except checks.Usage as e:
                raise Refused(str(e)) from None

    def ack(self, host: str, check: str | None, by: str, comment: str, sticky: bool,
            expire: float | None, force: bool = False, also=None) -> list:
        """Acknowledge the problems of ``host`` [``check``] (``ack add``): (id, uuid,
        status) of each."""
        from sinks.alerting.acks.rules import check_comment
        with refusing(fields=True):
            return acks.add(self.state_url, host, check, self.clock(), by,
                            check_comment(comment), sticky, True, expire, force, also)

    def end_ack(self, ack_id: int, also=None) -> bool:
        """End the running acknowledgement ``ack_id`` (``ack remove``); False: none."""
        with refusing():
            return acks.remove(self.state_url, ack_id, self.clock(), also)

    def downtime(self, by: str, host: str, check: str | None, duration: str, comment: str,
                 children: bool = False, force: bool = False, also=None) -> int:
        """A downtime of ``host`` [``check``] from now for ``duration`` (``2h``); its id."""
        from sinks.alerting.downtimes.rules import local_zone
        request = downtimes.Request(host, check, comment, duration, children=children)
        with refusing(fields=True):
            d = downtimes.plan(request, self.clock(), local_zone(), by)
            return downtimes.add(self.state_url, d, force, also)

    def end_downtime(self, downtime_id: int, also=None) -> bool:
        """End the running or planned downtime ``downtime_id``; False: none."""
        with refusing():
            return downtimes.remove(self.state_url, downtime_id, self.clock(), also)

    def alerts(self, limit: int, uuid: str | None = None, f=None,
               offset: int = 0) -> tuple[list[dict], int]:
        """The newest ``limit`` alerts (of the agent ``uuid``; those the filter ``f``
        shows from ``offset``, :class:`query.alerts.AlertFilter`) with their delivery per
        channel, and how many in all, as ``fleetwatch alerts --json`` gives them."""
        with refusing():
            return alerts.gather(self.state_url, self.clock(), limit, uuid=uuid,
                                 reader=self.reader, f=f, offset=offset)

    def alert(self, event_id: int) -> tuple[dict | None, list[dict]]:
        """(the alert event ``event_id`` with its delivery per channel, None when there
        is none; every attempt to send it, newest first, as ``alerts --deliveries --json``
        gives them)."""
        with refusing():
            found, _ = alerts.gather(self.state_url, self.clock(), 1, reader=self.reader,
                                     event_ids=[event_id])
            tried, total = alerts.deliveries(self.state_url, None, event_ids=[event_id],
                                             reader=self.reader)
        return (found[0] if found else None), alerts.delivery_document(tried, total)[
            "deliveries"]

    def deliveries(self, limit: int, channel: str | None = None) -> dict:
        """The latest ``limit`` attempts to send an alert (to ``channel``), as
        ``alerts --deliveries --json`` prints them."""
        with refusing():
            return alerts.delivery_document(*alerts.deliveries(
                self.state_url, limit, channel, reader=self.reader))

    def acks(self, ended: bool = False) -> list[dict]:
        """The running acknowledgements (all with ``ended``), as ``ack list --json`` gives
        them."""
        with refusing():
            return acks.listed(self.state_url, self.clock(), ended, self.reader)

    def downtimes(self) -> list[dict]:
        """The running and planned downtimes, as ``downtime list --json`` gives them."""
        from sinks.alerting.downtimes.rules import local_zone
        with refusing():
            return downtimes.listed(self.state_url, self.clock(), local_zone(), False,
                                    self.reader)[1]

    def slos(self, names: list[str] | None = None, offenders: int = 5) -> list[dict]:
        """Each SLO with its SLI, budget left, burn rates, state and worst offenders now,
        as ``slo report --json`` gives them (``names``: those only)."""
        with refusing():
            return slo.report(self.state_url, self.clock(), names, offenders, self.reader)
