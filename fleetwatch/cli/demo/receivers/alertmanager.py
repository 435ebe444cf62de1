"""A Prometheus Alertmanager's alerts API (v2), the part the ``alertmanager`` channel uses,
for the demo and the tests without the real one (the tests also run the channel against
Debian's ``prometheus-alertmanager``)."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from fleetwatch.cli.demo.receivers.base import Service
from fleetwatch.display import iso
from sinks.alerting.delivery.services.alertmanager import fingerprint

ALERTS = "/api/v2/alerts"
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_MATCHER = re.compile(r'\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(=~|!=|!~|=)\s*(.*?)\s*', re.S)
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def rfc3339(value) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``2026-12-04T19:49:56.184Z``); None
    when it is not one."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None
    text = value.replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:                           # Go's nanoseconds: Python reads 6 digits at most
        digits = re.match(r"\d+", rest).group()
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits):]}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def matcher(text: str):
    """One of a GET's ``filter`` matchers (``name="value"``, ``=~``, ``!=``, ``!~``, the
    value's quotes and ``\\"``, ``\\\\``, ``\\n`` escapes as the Alertmanager reads them) as
    ``labels -> bool``; None when it is not one."""
    found = _MATCHER.fullmatch(text)
    if not found:
        return None
    name, op, raw = found.groups()
    if raw.startswith('"'):
        if len(raw) < 2 or not raw.endswith('"'):
            return None
        raw = raw[1:-1]
    value = re.sub(r'\\(.)', lambda m: "\n" if m.group(1) == "n" else
                   m.group(1) if m.group(1) in '"\\' else m.group(), raw)
    if op in ("=~", "!~"):
        try:
            pattern = re.compile(f"(?:{value})", re.S)
        except re.error:
            return None
        hit = lambda labels: pattern.fullmatch(labels.get(name, "")) is not None  # noqa: E731
    else:
        hit = lambda labels: labels.get(name, "") == value  # noqa: E731
    return hit if op in ("=", "=~") else (lambda labels: not hit(labels))


class Alertmanager(Service):
    """A Prometheus Alertmanager's ``/api/v2/alerts``, for the ``alertmanager`` channel.

    ``POST`` takes a list of alerts and validates each as the Alertmanager does (labels: at
    least one non-empty, names ``[a-zA-Z_][a-zA-Z0-9_]*``, values strings; annotations
    likewise; ``startsAt``/``endsAt`` RFC 3339, the start not after the end;
    ``generatorURL`` a URI): 200 with an empty body, 400 ``"at least one label pair
    required"``, ``"invalid label set: invalid name ..."``, ``"start time must be before end
    time"`` or ``{"code": 400, "message": "parsing alerts body ... failed..."}``, 422 for a
    bad ``generatorURL``. Alerts are kept by their label set (``alerts``, by fingerprint),
    merged as the Alertmanager merges them (the earliest ``startsAt``), firing until their
    ``endsAt``; each post of one is a line of ``DIR/alertmanager.jsonl`` (fingerprint,
    ``firing`` or ``resolved``, labels, annotations).

    ``GET /api/v2/alerts?filter=...`` lists the alerts not yet resolved that match every
    matcher, as the real one does (with ``fingerprint`` and ``status``).

    As a proxy in front of one would: with ``tokens``, a missing or revoked (:meth:`revoke`)
    bearer token is answered 401; the next ``failing`` requests get ``fail_status`` (503),
    with a Retry-After of ``retry_after`` for a 429.
    """

    name = "alertmanager"
    about = "a Prometheus Alertmanager's alerts API"
    methods = ("POST", "GET")

    def __init__(self, directory: Path | None, port: int, tokens=(), clock=time.time):
        self.tokens, self.clock, self.lock = set(tokens), clock, threading.Lock()
        self.alerts: dict[str, dict] = {}
        self.posts: list[list[dict]] = []
        self.failing, self.fail_status, self.retry_after = 0, 503, 1
        super().__init__(port, directory)

    def revoke(self, token: str) -> None:
        with self.lock:
            self.tokens.discard(token)

    def firing(self) -> list[dict]:
        """The alerts not resolved now."""
        now = self.clock()
        with self.lock:
            return [a for a in self.alerts.values() if a["ends"] > now]

    def _refused(self, headers) -> tuple | None:
        if self.failing:
            self.failing -= 1
            return self.fail_status, "service unavailable", \
                {"Retry-After": str(self.retry_after)} if self.fail_status == 429 else {}
        if self.tokens or headers.get("Authorization"):
            token = (headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            if token not in self.tokens:
                return 401, "Unauthorized\n", {"WWW-Authenticate": "Bearer"}
        return None

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        with self.lock:
            refused = self._refused(headers)
            if refused:
                return refused
            if urlsplit(path).path != ALERTS:
                return 404, "404 page not found\n", {}
            if raw is None:
                return 413, "request body too large\n", {}
            try:
                body = json.loads(raw)
            except ValueError as e:
                return 400, {"code": 400, "message": f"parsing alerts body from \"\" failed, "
                                                     f"because {e}"}, {}
            if not isinstance(body, list):
                return 400, {"code": 400, "message": "parsing alerts body from \"\" failed, "
                                                     "because json: cannot unmarshal object "
                                                     "into Go value of type "
                                                     "models.PostableAlerts"}, {}
            now, taken = self.clock(), []
            for i, alert in enumerate(body):
                problem = self._invalid(i, alert, now)
                if problem:
                    return problem
                taken.append(self._alert(alert, now))
            self.posts.append(body)
            for alert in taken:
                self._merge(alert, now)
            return 200, "", {}

    def _invalid(self, i: int, alert, now: float) -> tuple | None:
        if not isinstance(alert, dict) or not isinstance(alert.get("labels"), dict):
            return 422, {"code": 602, "message": f"{i}.labels in body is required"}, {}
        for what in ("labels", "annotations"):
            for name, value in (alert.get(what) or {}).items():
                if not isinstance(value, str):
                    return 400, {"code": 400, "message": f"parsing alerts body from \"\" "
                                                         f"failed, because json: cannot "
                                                         f"unmarshal into {what}"}, {}
                if not _NAME.fullmatch(name):
                    kind = "label set" if what == "labels" else "annotations"
                    return 400, f'"invalid {kind}: invalid name \\"{name}\\""\n', {}
        if not any(alert["labels"].values()):
            return 400, '"at least one label pair required"\n', {}
        for key in ("startsAt", "endsAt"):
            if key in alert and rfc3339(alert[key]) is None:
                return 400, {"code": 400, "message": f"parsing alerts body from \"\" failed, "
                                                     f"because parsing time "
                                                     f"{json.dumps(alert[key])} as RFC 3339 "
                                                     f"failed"}, {}
        url = alert.get("generatorURL")
        if url is not None and (not isinstance(url, str) or
                                (url and not urlsplit(url).scheme)):
            return 422, {"code": 601, "message": f"{i}.generatorURL in body must be of type "
                                                 f"uri: {json.dumps(url)}"}, {}
        starts, ends = rfc3339(alert.get("startsAt")), rfc3339(alert.get("endsAt"))
        if starts is not None and ends is not None and starts > ends:
            return 400, '"start time must be before end time"\n', {}
        return None

    def _alert(self, alert: dict, now: float) -> dict:
        """An alert as the Alertmanager takes it: empty labels dropped, a missing start is
        the end (or now), a missing end five minutes on (its resolve_timeout)."""
        labels = {k: v for k, v in alert["labels"].items() if v}
        starts, ends = rfc3339(alert.get("startsAt")), rfc3339(alert.get("endsAt"))
        if starts is None:
            starts = ends if ends is not None else now
        return {"labels": labels, "annotations": dict(alert.get("annotations") or {}),
                "starts": starts, "ends": ends if ends is not None else now + 300,
                "generatorURL": alert.get("generatorURL") or "",
                "fingerprint": fingerprint(labels)}

    def _merge(self, alert: dict, now: float) -> None:
        old = self.alerts.get(alert["fingerprint"])
        if old is not None and (old["starts"] < alert["ends"] < old["ends"] or
                                old["starts"] < alert["starts"] < old["ends"]):
            alert["starts"] = min(old["starts"], alert["starts"])
        alert["updated"] = now
        self.alerts[alert["fingerprint"]] = alert
        self.keep({"fingerprint": alert["fingerprint"],
                   "status": "firing" if alert["ends"] > now else "resolved",
                   "labels": alert["labels"], "annotations": alert["annotations"]})

    def answer_method(self, method: str, path: str, headers, raw: bytes | None) -> tuple:
        with self.lock:
            refused = self._refused(headers)
            if refused:
                return refused
            parts = urlsplit(path)
            if parts.path != ALERTS:
                return 404, "404 page not found\n", {}
            matchers = []
            for key, value in parse_qsl(parts.query):
                if key == "filter":
                    found = matcher(value)
                    if found is None:
                        return 400, {"code": 400, "message": f"bad matcher format: {value}"}, {}
                    matchers.append(found)
            now = self.clock()
            return 200, [self._gettable(a) for a in self.alerts.values()
                         if a["ends"] > now and all(m(a["labels"]) for m in matchers)], {}

    @staticmethod
    def _gettable(alert: dict) -> dict:
        return {"labels": alert["labels"], "annotations": alert["annotations"],
                "startsAt": iso(alert["starts"]), "endsAt": iso(alert["ends"]),
                "updatedAt": iso(alert["updated"]), "fingerprint": alert["fingerprint"],
                "generatorURL": alert["generatorURL"], "receivers": [{"name": "demo"}],
                "status": {"state": "active", "silencedBy": [], "inhibitedBy": []}}

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        return {"type": "alertmanager", "url": f"http://127.0.0.1:{port}",
                "labels": {"source": "fleetwatch-demo"}, "timeout": 5.0}
