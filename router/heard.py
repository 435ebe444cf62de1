"""What a router heard of the fleet's back-end processes and lost of its site links, for
its PEERS answers (SPEC 4.3): the fleet's own faults a client sees in one question
(``status --problems``, the console: :func:`query.faults.of_routers`), with no tail to
follow.

- :class:`Backends`: each back-end process (sink or scheduler) whose STATS this router
  relayed on ``control``, by its uuid (its connection's, which the router stamps: never the
  body's word, :meth:`router.control.ControlDesk.stats`): its role, hostname, version, when last
  heard and its reporting interval as seen (the gap between its last two STATS). A scheduler
  sends its STATS through one router; a client merges the routers' answers and calls one
  silent once :data:`query.faults.SILENT_INTERVALS` of its interval passed without any.
- :class:`LostSites`: the site links this central router expired (silent for
  ``site.expire_intervals`` of their heartbeat, SPEC 4.10), until the site links again.

Both are kept :data:`KEEP` seconds and at most :data:`MOST` entries (the longest forgotten
first; a process or site dropped for room is counted), so the answer stays a few KiB
whatever comes. A router forgets both when it restarts. Pure logic (``clock``: epoch seconds).
"""

from __future__ import annotations

import time

#: seconds a back-end process or a lost site is remembered after it was last heard
KEEP = 86_400.0
#: most back-end processes, and most lost sites, a router remembers
MOST = 100


class _Kept:
    """Entries by key, at most :data:`MOST`, each forgotten :data:`KEEP` seconds after its
    ``last_heard``; ``unkept``: entries dropped for room."""

    def __init__(self, clock=time.time, keep: float = KEEP, most: int = MOST):
        self.clock, self.keep, self.most = clock, keep, most
        self.entries: dict[str, dict] = {}
        self.unkept = 0

    def put(self, key: str, entry: dict) -> None:
        if key not in self.entries and len(self.entries) >= self.most:
            self.prune()
            if len(self.entries) >= self.most:
                oldest = min(self.entries, key=lambda k: self.entries[k]["last_heard"])
                del self.entries[oldest]
                self.unkept += 1
        self.entries[key] = entry

    def prune(self) -> None:
        now = self.clock()
        for key in [k for k, e in self.entries.items() if now - e["last_heard"] > self.keep]:
            del self.entries[key]

    def answer(self) -> list[dict]:
        """The entries as a PEERS answer lists them, with ``ago``: seconds since each was
        last heard, by this router's clock (a client's own clock never enters)."""
        self.prune()
        now = self.clock()
        return [{**e, "ago": round(max(0.0, now - e["last_heard"]), 3)}
                for _, e in sorted(self.entries.items())]


class Backends(_Kept):
    """The back-end processes whose STATS this router relayed."""

    def heard(self, uuid: str, role: str, hostname, version=None) -> None:
        """``version``: the fleetwatch version its STATS said (None from an older one)."""
        now = self.clock()
        last = self.entries.get(uuid)
        self.put(uuid, {"uuid": uuid, "role": role,
                        "hostname": hostname[:255] if isinstance(hostname, str) else None,
                        "version": version[:64] if isinstance(version, str) else None,
                        "last_heard": now,
                        "every": round(now - last["last_heard"], 3) if last else None})


class LostSites(_Kept):
    """The site links this router expired, until each links again."""

    def lost(self, site: str, hostname: str, last_heard: float, agents: int) -> None:
        self.put(site, {"site": site, "hostname": hostname, "last_heard": last_heard,
                        "expired": self.clock(), "agents": agents})

    def linked(self, site: str) -> None:
        self.entries.pop(site, None)
