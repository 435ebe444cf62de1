"""A client of graphite-web's HTTP API: the series a host has, and their points over a range.

- :meth:`Graphite.metrics`: a host's series, at most ``max_series`` of them, named as the
  graphite sink names them (``tags`` is the sink's setting of that name):

  - host paths (``tags`` off): the leaves under ``PREFIX.HOST`` (the host's name made one
    node, :func:`fleetwatch.metricpath.node`), found level by level with
    ``/metrics/find?query=PREFIX.HOST.*``, ``PREFIX.HOST.*.*``... (``format=json`` gives
    each node's real path and whether it is a leaf);
  - tagged series (``tags`` on: ``PREFIX.NAME;host=HOST``, the host's name a tag value,
    :func:`fleetwatch.metricpath.tag_value`): whisper keeps them under a hash of the name,
    so only graphite-web's tag database knows them: ``/tags/findSeries?expr=host=HOST&
    expr=name=~^PREFIX\\.`` (the second expression keeps other prefixes' series out, as the
    path's first nodes do; none without a prefix). The tag value has only letters, digits
    and ``. _ -``, so it cannot change the expression;
- :meth:`Graphite.render`: ``/render`` with ``format=json``, ``from``/``until`` in epoch
  seconds and ``maxDataPoints``, its targets sent in a POST body (a host may have hundreds);
  a tagged series' name is a target as it is;
- :meth:`Graphite.relative`: a series' name below its host (``cpu.percent``), either way.

Nothing here raises through its caller: a refused connection, a timeout, an HTTP error, an
answer that is not the JSON expected, a host Graphite does not know, each comes back as a
:class:`GraphError` value whose ``message`` is one line a page can show. The HTTP call is
injected (``fetch``); the default is the standard library's urllib, with a timeout and a
cap on the answer's size.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Callable

from fleetwatch.metricpath import node, tag_value

#: the largest answer read (bytes): a week of 1 s points for 200 series is about 40 MB
MAX_ANSWER = 64 * 1024 * 1024
#: levels below the host searched for series (host metrics are 2-3 deep, checks 3)
MAX_DEPTH = 6

#: (url, body or None, timeout) -> (HTTP status, body bytes); raises OSError on I/O failures
Fetch = Callable[[str, "bytes | None", float], "tuple[int, bytes]"]


@dataclass(frozen=True)
class Series:
    """One series: its Graphite path and its points, (value or None, epoch seconds)."""

    name: str
    points: tuple[tuple[float | None, int], ...]


@dataclass(frozen=True)
class GraphError:
    """Why there are no graphs: ``kind`` is one of ``not configured``, ``unreachable``,
    ``timeout``, ``http``, ``bad answer``, ``unknown host``; ``message`` is one line."""

    kind: str
    message: str

    def __str__(self) -> str:
        return self.message


def urllib_fetch(url: str, body: bytes | None, timeout: float) -> tuple[int, bytes]:
    """GET (or POST a form ``body``) with urllib; an HTTP error status is returned, not
    raised; at most :data:`MAX_ANSWER` bytes are read (ValueError past that)."""
    headers = {"Accept": "application/json", "User-Agent": "fleetwatch"}
    if body is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        e.close()
        return e.code, b""
    with response:
        data = response.read(MAX_ANSWER + 1)
        if len(data) > MAX_ANSWER:
            raise ValueError(f"answer longer than {MAX_ANSWER} bytes")
        return response.status, data


class Graphite:
    """graphite-web at ``url`` (the render API's base), for hosts under ``prefix``, their
    series tagged (``tags``) or under host paths."""

    def __init__(self, url: str, timeout: float = 5.0, prefix: str = "fleet",
                 fetch: Fetch = urllib_fetch, max_series: int = 200, tags: bool = False):
        self.url = url.rstrip("/")
        self.timeout, self.prefix, self.fetch = timeout, prefix, fetch
        self.max_series, self.tags = max_series, tags

    @classmethod
    def from_settings(cls, settings, fetch: Fetch = urllib_fetch) -> "Graphite":
        """From the operator config's ``graphite:`` section (:mod:`.settings`)."""
        return cls(settings.url, settings.timeout, settings.prefix, fetch, tags=settings.tags)

    def host_path(self, hostname: str) -> str:
        """Where the graphite sink puts ``hostname``'s series: ``PREFIX.HOST``."""
        return ".".join(p for p in (self.prefix, node(hostname)) if p)

    def host_expressions(self, hostname: str) -> list[str]:
        """The tag expressions of ``hostname``'s tagged series: ``host=HOST`` and, with a
        prefix, ``name=~^PREFIX\\.``."""
        exprs = [f"host={tag_value(hostname)}"]
        if self.prefix:
            exprs.append(f"name=~^{re.escape(self.prefix)}\\.")
        return exprs

    def relative(self, name: str, hostname: str) -> str:
        """A series' name below its host: ``PREFIX.HOST.cpu.percent`` (paths) or
        ``PREFIX.cpu.percent;host=HOST`` (tags) -> ``cpu.percent``."""
        if self.tags:
            name = name.split(";", 1)[0]
            base = f"{self.prefix}." if self.prefix else ""
        else:
            base = self.host_path(hostname) + "."
        return name[len(base):] if name.startswith(base) else name

    # ------------------------------------------------------------------ requests

    def _call(self, what: str, params: list[tuple[str, str]], post: bool = False):
        """The decoded JSON answer of ``/what``, or a GraphError."""
        query = urllib.parse.urlencode(params)
        url, body = (f"{self.url}/{what}", query.encode()) if post else \
            (f"{self.url}/{what}?{query}", None)
        try:
            status, data = self.fetch(url, body, self.timeout)
        except (TimeoutError, socket.timeout):
            return GraphError("timeout", f"Graphite at {self.url} did not answer /{what} "
                                         f"within {self.timeout:g}s")
        except urllib.error.URLError as e:
            if isinstance(e.reason, (TimeoutError, socket.timeout)):
                return GraphError("timeout", f"Graphite at {self.url} did not answer "
                                             f"/{what} within {self.timeout:g}s")
            return GraphError("unreachable", f"Graphite at {self.url} is unreachable: "
                                             f"{_reason(e.reason)}")
        except (OSError, http.client.HTTPException) as e:
            return GraphError("unreachable", f"Graphite at {self.url} is unreachable: "
                                             f"{_reason(e)}")
        except ValueError as e:
            return GraphError("bad answer", f"Graphite at {self.url}: /{what}: {e}")
        if status != 200:
            return GraphError("http", f"Graphite at {self.url} answered HTTP {status} to "
                                      f"/{what}")
        try:
            return json.loads(data)
        except ValueError:      # JSONDecodeError, UnicodeDecodeError
            return GraphError("bad answer", f"Graphite at {self.url}: /{what} did not "
                                            f"answer JSON")

    def find(self, query: str) -> list[tuple[str, bool]] | GraphError:
        """``(path, is_leaf)`` of the nodes matching ``query`` (a Graphite glob)."""
        answer = self._call("metrics/find", [("query", query), ("format", "json")])
        if isinstance(answer, GraphError):
            return answer
        if not isinstance(answer, list) or not all(
                isinstance(n, dict) and isinstance(n.get("path"), str)
                and isinstance(n.get("is_leaf"), bool) for n in answer):
            return GraphError("bad answer", f"Graphite at {self.url}: /metrics/find did not "
                                            f"answer a list of nodes")
        return [(n["path"], n["is_leaf"]) for n in answer]

    def find_series(self, exprs: list[str]) -> list[str] | GraphError:
        """The tagged series matching every tag expression of ``exprs`` (graphite-web's tag
        database, ``/tags/findSeries``)."""
        answer = self._call("tags/findSeries", [("expr", e) for e in exprs])
        if isinstance(answer, GraphError):
            return answer
        if not isinstance(answer, list) or not all(isinstance(n, str) for n in answer):
            return GraphError("bad answer", f"Graphite at {self.url}: /tags/findSeries did "
                                            f"not answer a list of series")
        return answer

    def metrics(self, hostname: str) -> list[str] | GraphError:
        """The names of ``hostname``'s series (paths, or tagged series with ``tags``),
        sorted (at most ``max_series``); a GraphError ``unknown host`` when Graphite has
        none."""
        if not node(hostname):
            return GraphError("unknown host", "no host name to look up in Graphite")
        if self.tags:
            return self._tagged(hostname)
        base = self.host_path(hostname)
        leaves: list[str] = []
        for depth in range(1, MAX_DEPTH + 1):
            found = self.find(base + ".*" * depth)
            if isinstance(found, GraphError):
                return found
            leaves += [path for path, leaf in found if leaf]
            if len(leaves) >= self.max_series or all(leaf for _, leaf in found):
                break
        if not leaves:
            return GraphError("unknown host", f"Graphite has no series under {base} (if the "
                                              f"graphite sink has tags: true, set "
                                              f"graphite.tags: true)")
        return sorted(leaves)[:self.max_series]

    def _tagged(self, hostname: str) -> list[str] | GraphError:
        exprs = self.host_expressions(hostname)
        found = self.find_series(exprs)
        if isinstance(found, GraphError):
            return found
        if not found:
            return GraphError("unknown host", f"Graphite's tag database has no series "
                                              f"{' '.join(exprs)} (if the graphite sink "
                                              f"has tags: false, set graphite.tags: false; "
                                              f"carbon registers tagged series with "
                                              f"graphite-web only with ENABLE_TAGS and "
                                              f"GRAPHITE_URL)")
        return sorted(found)[:self.max_series]

    def render(self, targets: list[str], start: int, end: int,
               max_points: int | None = None) -> list[Series] | GraphError:
        """The points of ``targets`` from ``start`` to ``end`` (epoch seconds), at most
        ``max_points`` a series (graphite-web consolidates), in the order answered."""
        if not targets:
            return []
        params = [("target", t) for t in targets]
        params += [("format", "json"), ("from", str(int(start))), ("until", str(int(end)))]
        if max_points:
            params.append(("maxDataPoints", str(int(max_points))))
        answer = self._call("render", params, post=True)
        if isinstance(answer, GraphError):
            return answer
        series = _series(answer)
        if series is None:
            return GraphError("bad answer", f"Graphite at {self.url}: /render did not answer "
                                            f"a list of series with datapoints")
        return series


def _series(answer) -> list[Series] | None:
    """Render's JSON as Series (non-finite values as None), or None if it is not that."""
    if not isinstance(answer, list):
        return None
    out = []
    for item in answer:
        if not isinstance(item, dict) or not isinstance(item.get("target"), str) \
                or not isinstance(item.get("datapoints"), list):
            return None
        points = []
        for p in item["datapoints"]:
            if not isinstance(p, list) or len(p) != 2:
                return None
            value, ts = p
            if not _numeric(ts) or not math.isfinite(ts) or \
                    not (value is None or _numeric(value)):
                return None
            points.append((float(value) if value is not None and math.isfinite(value)
                           else None, int(ts)))
        out.append(Series(item["target"], tuple(points)))
    return out


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _reason(e) -> str:
    """An OS error's words without its errno ("Connection refused")."""
    return getattr(e, "strerror", None) or str(e) or type(e).__name__
