"""What SIGHUP (``systemctl reload fleetwatch-router``) changes in a running router.

First the key allowlists are re-read, unconditionally, as before (SPEC 7.4); then
``router.yaml``, through :mod:`fleetwatch.reload` (a bad file: one error line, counted in
``router.config.reload_failed``, and the router relays on with the config it has). Both are
framed by ``RELOADING=1`` and ``READY=1`` to systemd, and run in the relay's loop thread
between two wake-ups, so nothing a message is being handled with changes under it.

Live: plain values the router reads where it uses them, none of them per message:

- ``log_level``;
- ``stats_interval`` (the next STATS is due at most that long after the reload);
- ``expiry_intervals`` (the next sweep), ``peers`` (told in the next WELCOMEs);
- ``limits.rate`` and ``limits.burst`` (every bucket above the new burst is cut to it at
  once, and the sweep refills at the new rate), ``limits.hellos_per_second``,
  ``limits.tail_topics`` (the next subscription is measured against it), ``limits.drain``
  (from the next wake-up: the hot path reads it, like its other locals, once per wake-up)
  and ``limits.careful_seconds``.

At restart: ``id`` (stamped in the envelopes built at each HELLO), ``bind``,
``advertise_host`` (the endpoints told in WELCOME are worked out at bind),
``routes`` (the hot path's table holds the sink sockets) and ``durable`` (told in
WELCOME), ``mesh`` (its timing is the member table's and the incarnation marks a process
start), ``upstream`` and ``site`` (the uplink's DEALERs and buffer, the site links' table
are made at bind: SPEC 4.10), ``security`` (CURVE and the key
paths; the allowlists' contents are what SIGHUP re-reads), ``ready_file``, and the limits
that are socket options (``max_message_bytes``, ``sink_hwm``, ``agent_hwm``, ``tail_hwm``:
libzmq copies them into each connection as it is made, so a change would hold for new
connections only), ``max_agents`` (the descriptor limit is set when the process starts:
by its unit, which ``fleetwatch service install router`` rewrites for the new value) and
``nice`` (the CPU priority taken at start, and its unit's ``Nice=``: the same).
"""

from __future__ import annotations

import logging

from fleetwatch import logs
from fleetwatch.reload import LIVE, Reloader
from router.config import RouterConfig

log = logging.getLogger(__name__)

POLICY = {name: LIVE for name in (
    "log_level", "stats_interval", "expiry_intervals", "peers", "limits.rate",
    "limits.burst", "limits.hellos_per_second", "limits.tail_topics", "limits.drain",
    "limits.careful_seconds")}


def reloader(relay, path: str) -> Reloader:
    """The router's reloader: its config from ``path``, counted in the relay's counters
    (``router.config.reloads``, ``router.config.reload_failed`` in its STATS)."""
    return Reloader(RouterConfig, path, relay.config, POLICY,
                    lambda old, new, changed: apply(relay, old, new, changed),
                    counts=relay.counters.reloads, prefix="router.config.")


def sighup(relay) -> None:
    """Re-read the allowlists, then the config file (if the relay has a reloader); in the
    relay's loop thread, between ``RELOADING=1`` and ``READY=1``."""
    notifier = relay.notifier
    if notifier is not None:
        notifier.reloading()
    try:
        doorman = relay.doorman
        if doorman is not None:
            doorman.refresh(force=True)
        if relay.reloader is not None:
            relay.reloader.reload()
    finally:
        if notifier is not None:
            notifier.ready()


def apply(relay, old: RouterConfig, new: RouterConfig, changed: list[str]) -> None:
    """Make the running relay use ``new`` (``changed``: the live paths that differ)."""
    if "log_level" in changed:
        logs.set_level(new.log_level)
    relay.config = new
    limits = new.limits
    relay.drain = max(1, limits.drain)
    relay.careful_for = limits.careful_seconds
    relay.peers.expiry_intervals = new.expiry_intervals
    relay.admission.set_limits(limits.rate, limits.burst, limits.hellos_per_second)
    if "peers" in changed and relay.endpoints:
        relay.routers = list(dict.fromkeys([relay.endpoints["agents"], *new.peers]))
