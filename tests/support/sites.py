"""Routers for the sites tests (SPEC 4.10): a central router binding ``sites``, and site
routers with ``upstream``, started by a :class:`support.fleet.Fleet` on ephemeral ports."""

from __future__ import annotations


def central(fleet, name: str = "central-1", sink_types=("alerting", "graphite"),
            **extra) -> dict:
    """A central router binding ``sites``, and a PUSH for each of ``sink_types``."""
    return fleet.router(name, sink_types=sink_types,
                        bind={"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                              "tail": "tcp://127.0.0.1:*", "sites": "tcp://127.0.0.1:*",
                              "sinks": {t: "tcp://127.0.0.1:*" for t in sink_types}}, **extra)


def site(fleet, name: str, upstream: list[str], sites: bool = False, **extra) -> dict:
    """A site router of no sinks forwarding to ``upstream`` (its heartbeats every 0.2 s);
    ``sites``: it binds `sites` too (a tree)."""
    bind = {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
            "tail": "tcp://127.0.0.1:*", "sinks": {}}
    if sites:
        bind["sites"] = "tcp://127.0.0.1:*"
    return fleet.router(name, sink_types=(), bind=bind, upstream=upstream,
                        site={"interval": 0.2, **extra.pop("site", {})}, **extra)
