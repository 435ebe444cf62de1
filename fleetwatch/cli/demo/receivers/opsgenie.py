"""Opsgenie's Alert API v2 (create, acknowledge, close), also under Jira Service
Management's base path, for the ``opsgenie`` channel."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from fleetwatch import private
from fleetwatch.cli.demo.receivers.base import Service

#: the bases the API answers under: Opsgenie's, and Jira Service Management's
BASES = ("/jsm/ops/integration", "")
#: the create request's text fields and their limits (characters)
LIMITS = {"message": 130, "alias": 512, "description": 15000, "entity": 512, "source": 100,
          "user": 100, "note": 25000}
RESPONDER_TYPES = ("team", "user", "escalation", "schedule")
PRIORITIES = ("P1", "P2", "P3", "P4", "P5")
ACCEPTED = "Request will be processed"


class Opsgenie(Service):
    """Opsgenie's Alert API v2 as documented, for the ``opsgenie`` channel, under
    Opsgenie's base and Jira Service Management's (``/jsm/ops/integration``): ``POST
    /v2/alerts`` (``message`` required, at most 130 characters; ``alias`` 512,
    ``description`` 15,000, ``entity`` 512, ``source`` and ``user`` 100, ``note`` 25,000;
    ``responders`` of type team, user, escalation or schedule with an ``id`` or a ``name``;
    at most 20 ``tags`` of 50 characters, 10 ``actions``; ``details`` a map of strings of at
    most 8,000 characters in all; ``priority`` P1 to P5), ``POST /v2/alerts/{id}/acknowledge``
    and ``.../close`` (``identifierType`` id, tiny or alias), with ``Authorization: GenieKey
    KEY``. It keeps alerts as Opsgenie does: one open alert per alias (a create with the
    alias of an open one counts it again), its status ``open``, ``acked`` or ``closed``.
    It answers as Opsgenie does: 202 ``{"result": "Request will be processed", "took": ...,
    "requestId": ...}``; 401 ``Could not authenticate`` for a missing, unknown or revoked
    key (:meth:`revoke`), 403 for a key in ``readonly``; 422 ``Request body is not
    processable`` with ``errors`` by field; 404 for an acknowledge or close of no open
    alert; 429 for the next ``limited`` requests (``Retry-After`` if ``retry_after`` is
    set); 503 for the next ``failing`` ones. What it took is kept (``alerts``, ``requests``;
    lines of ``DIR/opsgenie.jsonl``)."""

    name = "opsgenie"
    about = "Opsgenie's alert API: alerts created, acknowledged and closed by alias"

    def __init__(self, directory: Path | None, port: int, keys=()):
        self.keys, self.readonly = set(keys), set()
        self.alerts: list[dict] = []
        #: (base, what: create, acknowledge or close, the alias or id, the status answered)
        self.requests: list[tuple[str, str, str, int]] = []
        self.limited, self.retry_after, self.failing = 0, None, 0
        self.lock, self.clock = threading.Lock(), time.time
        super().__init__(port, directory)

    def revoke(self, key: str) -> None:
        with self.lock:
            self.keys.discard(key)

    def open_alert(self, alias: str) -> dict | None:
        """The alert of ``alias`` not yet closed, if any."""
        for a in reversed(self.alerts):
            if a["alias"] == alias and a["status"] != "closed":
                return a
        return None

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        with self.lock:
            parts = urlsplit(path)
            base = next(b for b in BASES if parts.path.startswith(b + "/v2/") or not b)
            route = parts.path[len(base):]
            code, answer, more, what, which = self._answer(route, parse_qs(parts.query),
                                                           headers, raw)
            self.requests.append((base, what, which, code))
            return code, {**answer, "took": 0.01, "requestId": str(uuid.uuid4())}, more

    def _answer(self, route: str, query: dict, headers, raw: bytes | None):
        steps = route.split("/")
        if route == "/v2/alerts":
            what, which = "create", ""
        elif len(steps) == 5 and steps[:3] == ["", "v2", "alerts"] and \
                steps[4] in ("acknowledge", "close"):
            what, which = steps[4], unquote(steps[3])
        else:
            return 404, {"message": "Could not find requested resource"}, {}, route, ""
        if self.limited > 0:
            self.limited -= 1
            wait = {"Retry-After": str(self.retry_after)} if self.retry_after else {}
            return 429, {"message": "You are making too many requests! To avoid errors, we "
                                    "recommend you limit requests."}, \
                {"X-RateLimit-State": "THROTTLED", **wait}, what, which
        if self.failing > 0:
            self.failing -= 1
            return 503, {"message": "Service unavailable"}, {}, what, which
        key = (headers.get("Authorization") or "").strip()
        if not key.startswith("GenieKey ") or key[9:].strip() not in self.keys:
            return 401, {"message": "Could not authenticate"}, {}, what, which
        if key[9:].strip() in self.readonly:
            return 403, {"message": "You are not authorized to perform this action"}, {}, \
                what, which
        try:
            body = json.loads(raw or b"{}") if raw is not None else None
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            return 400, {"message": "Could not parse the request body as JSON"}, {}, what, \
                which
        errors = _problems(body)
        if what == "create" and not body.get("message"):
            errors.setdefault("message", "Message can not be empty.")
        if errors:
            return 422, {"message": "Request body is not processable. Please check the "
                                    "errors.", "errors": errors}, {}, what, which
        if what == "create":
            return (*self._create(body), what, body.get("alias") or "")
        kind = (query.get("identifierType") or ["id"])[0]
        if kind not in ("id", "tiny", "alias"):
            return 422, {"message": f"Invalid identifier type [{kind}]"}, {}, what, which
        alert = self.open_alert(which) if kind == "alias" else next(
            (a for a in self.alerts if a["id" if kind == "id" else "tinyId"] == which
             and a["status"] != "closed"), None)
        if alert is None:
            return 404, {"message": f"Alert with {kind} [{which}] does not exist"}, {}, \
                what, which
        alert["status"] = "acked" if what == "acknowledge" else "closed"
        alert["acknowledged"] = alert["acknowledged"] or what == "acknowledge"
        alert["log"].append({"action": what, "user": body.get("user"),
                             "source": body.get("source"), "note": body.get("note")})
        self.keep({what: alert["alias"], **body})
        return 202, {"result": ACCEPTED}, {}, what, which

    def _create(self, body: dict) -> tuple[int, dict, dict]:
        alias = body.get("alias") or str(uuid.uuid4())
        alert = self.open_alert(alias)
        if alert is not None:          # Opsgenie's de-duplication: counted again
            alert["count"] += 1
            alert["log"].append({"action": "create", "deduplicated": True})
        else:
            alert = {"id": str(uuid.uuid4()), "tinyId": str(len(self.alerts) + 1),
                     "alias": alias, "status": "open", "acknowledged": False, "count": 1,
                     "created": self.clock(), "log": [{"action": "create"}],
                     **{k: body[k] for k in ("message", "description", "responders", "tags",
                                             "details", "entity", "source", "priority",
                                             "user", "actions", "note") if k in body}}
            self.alerts.append(alert)
        self.keep({"create": alias, **body})
        return 202, {"result": ACCEPTED}, {}

    @classmethod
    def for_demo(cls, directory: Path, port: int) -> "Opsgenie":
        return cls(directory, port, keys=((directory / "opsgenie-key").read_text().strip(),))

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        """An API integration's key in a file; the alerts to the team ``ops``."""
        key = directory / "opsgenie-key"
        private.write(key, "0c5e1f7a-demo-4f1e-9c1d-fleetwatch01\n")
        return {"type": "opsgenie", "api_url": f"http://127.0.0.1:{port}",
                "api_key_file": str(key), "responders": ["ops"], "tags": ["fleetwatch"],
                "timeout": 5.0}


def _problems(body: dict) -> dict[str, str]:
    """What Opsgenie would refuse in a request's fields, by field."""
    errors = {}
    for field, limit in LIMITS.items():
        if field in body and body[field] is not None:
            if not isinstance(body[field], str):
                errors[field] = f"{field.capitalize()} must be a string."
            elif len(body[field]) > limit:
                errors[field] = f"{field.capitalize()} can not be longer than {limit} " \
                                f"characters."
    responders = body.get("responders", [])
    if not isinstance(responders, list) or not all(
            isinstance(r, dict) and r.get("type") in RESPONDER_TYPES and
            any(isinstance(r.get(k), str) and r[k] for k in ("id", "name", "username"))
            for r in responders):
        errors["responders"] = "Responders must be teams, users, escalations or schedules " \
                               "with an id or a name."
    for field, most, longest in (("tags", 20, 50), ("actions", 10, 50)):
        items = body.get(field, [])
        if not isinstance(items, list) or len(items) > most or not all(
                isinstance(t, str) and 0 < len(t) <= longest for t in items):
            errors[field] = f"{field.capitalize()} can have at most {most} items of at most " \
                            f"{longest} characters."
    found = body.get("details", {})
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in found.items()):
        errors["details"] = "Details must be a map of strings."
    elif sum(len(k) + len(v) for k, v in found.items()) > 8000:
        errors["details"] = "Details can not be longer than 8000 characters in total."
    if "priority" in body and body["priority"] not in PRIORITIES:
        errors["priority"] = "Priority should be one of [P1, P2, P3, P4, P5]."
    return errors
