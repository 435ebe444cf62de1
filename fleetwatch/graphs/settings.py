"""The operator config's ``graphite:`` section (fleetwatch.yaml): where graphite-web's render
API is, for the console's graphs.

::

    graphite:
      url: http://graphite.example.org:8080   # '' (the default): graphs not configured
      timeout: 5.0
      prefix: fleet                           # the graphite sink's prefix
      tags: false                             # the graphite sink's tags (tagged series)

``tags`` is said, not detected: it is the graphite sink's own setting copied, so a host page
asks Graphite one way (``/metrics/find`` or ``/tags/findSeries``), never both; a fleet moving
from one naming to the other gets the graphs of the one it now sends (Graphite keeps both for
a while: detection would have to pick one); and a host Graphite does not know is "unknown
host" with a hint to check ``tags``, not a guess.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from fleetwatch.config import setting

_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


@dataclass(frozen=True)
class GraphiteWebSettings:
    """The operator's ``graphite:`` section: graphite-web's render API, read by the console's
    host graphs (docs/operating/graphite.md)."""

    url: str = setting("", "base URL of graphite-web's render API (http://HOST:PORT, with a "
                           "path if it is served under one); '' means not configured")
    timeout: float = setting(5.0, "seconds for graphite-web to answer one request")
    prefix: str = setting("fleet", "the graphite sink's prefix: a host's series are "
                                   "PREFIX.HOST.* ('' for none)")
    tags: bool = setting(False, "the graphite sink's tags: series are tagged (PREFIX.NAME;"
                                "host=HOST, found in graphite-web's tag database) rather "
                                "than host paths")

    def validate(self):
        if self.url:
            problem = url_problem(self.url)
            if problem:
                raise ValueError(f"url: {problem}")
        if not self.timeout > 0:
            raise ValueError("timeout: expected a positive number of seconds")
        if self.prefix and not _PREFIX.fullmatch(self.prefix):
            raise ValueError("prefix: expected dot-separated nodes of letters, digits, _ or -")

    @property
    def configured(self) -> bool:
        return bool(self.url)


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a render API's base, or None."""
    expect = "expected http://HOST[:PORT][/PATH] or https://..."
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7f for c in url):
        return f"{expect} (got spaces or control characters)"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port                      # ValueError if not a number in range
    except ValueError:
        return f"{expect} (got {url!r})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{expect} (got {url!r})"
    if parts.query or parts.fragment:
        return f"{expect}, without ?query or #fragment (got {url!r})"
    if parts.username or parts.password:
        return f"{expect}, without a user or password in it"
    return None
