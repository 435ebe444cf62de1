"""A check result's place in time: which of two results of one check is the newer.

Pure logic, no clock of its own. A sender's wall clock is not trusted to order results: it
is stepped (NTP at boot, a VM resumed) and may be hours off, and a result "older" than one
sent by a fast clock would be dropped for as long as the clock was fast (SPEC 4.5). So:

- Two results of one run of the agent (the same ``boot``, a token the agent draws at each
  start, and again when its wall clock jumps against its monotonic one: a step, or a VM
  snapshot restored, :meth:`agent.runner.Runner._next`) are ordered by its ``seq``: a
  number that only grows within that run, whatever its wall clock does. Only this says a result is
  older than the one kept: a late or repeated RESULT of that run.
- Results of different runs are ordered by the receiver's clock: the one that arrived
  later is newer (one batch: the sender's time decides).
- A sender that does not number its results (no ``boot``) is ordered by its time (the run's
  ``started``, else ``ts``), never later than when the receiver got it: a clock that was
  fast hides nothing once it is corrected.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Order:
    """Where a result stands: ``at`` the sender's time bounded by ``received`` (the
    receiver's clock on arrival; None: unknown, an older database's row), and the
    sender's ``boot`` and ``seq`` when it gave them."""

    at: float
    received: float | None = None
    boot: str | None = None
    seq: float | None = None


def of(sent: float, received: float, boot: str | None = None,
       seq: float | None = None) -> Order:
    """The order of a result sent at ``sent`` (the sender's clock), ``received`` at the
    receiver's: its time is never past its arrival."""
    return Order(min(sent, received), received, boot, seq)


def newer(new: Order, old: Order) -> bool:
    """Whether ``new`` is to replace ``old`` (a result of the same check)."""
    if new.boot is not None and old.boot is not None:
        if new.boot == old.boot and new.seq is not None and old.seq is not None:
            return new.seq > old.seq
        if new.boot != old.boot and new.received is not None and old.received is not None \
                and new.received != old.received:
            return new.received > old.received
    return new.at > old.at


def key(order: Order) -> tuple:
    """A sort key for the results of one check in one batch (one arrival): by the sender's
    time, then its sequence."""
    return order.at, order.seq if order.seq is not None else 0.0
