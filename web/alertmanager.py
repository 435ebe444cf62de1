"""The console as an Alertmanager: ``POST /api/v2/alerts``, where Prometheus (its
``alerting.alertmanagers``) and vmalert (``-notifier.url``) send their alerts, and
``GET /api/v1/prometheus/alerts``, what was received and what became of it.

A post is answered as Alertmanager 0.25 answers it (:mod:`web.intake`): 200 and no body when
every alert was kept; 400 with its messages as a JSON string when some were not valid (the
others kept); 400, 415 or 422 with ``{"code", "message"}`` for a body refused whole; and, a
bound of fleetwatch's own, 429 when the table holds ``web.alerts_max`` alerts still firing
(the new ones refused, the others kept). Who may post: an API token (``Authorization:
Bearer``) whose role allows ``alerts`` (:data:`web.auth.ALERTER`, operator, admin;
:func:`web.auth.allows`); without one the gate answers 401, with another role this route 403,
both in Alertmanager's shape. Every refusal is counted (:attr:`Intake.counts`, listed by the
GET) and logged at most every 10 s per kind (:class:`fleetwatch.logs.Throttle`).

The alerts are kept in ``prometheus_alerts`` (:mod:`web.alertstore`); the alerting sinks
turn them into checks ``prom:ALERTNAME`` of the hosts their labels name
(sinks/alerting/external, docs/operating/prometheus-alerts.md).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from fleetwatch.display import iso
from fleetwatch.logs import Throttle
from web import alertstore, auth, intake, store
from web.asking import Asking
from web.context import Shared
from web.gate import ALERTMANAGER

log = logging.getLogger(__name__)

#: the media type Alertmanager's API takes
JSON = "application/json"


class Intake:
    """What the console counts of the alerts posted to it (for the whole process)."""

    def __init__(self, settings):
        self.settings = settings
        self.counts: Counter = Counter()
        self.lock = threading.Lock()
        self.throttle = Throttle(log)

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def refused(self, path: str, status: int) -> None:
        """The gate refused a request (401, 413) before it reached a route."""
        if path.startswith(ALERTMANAGER):
            self.count("alerts_unauthorized" if status == 401 else "alerts_too_large")
            self.throttle.warning(f"gate{status}", "POST %s refused %d (%s)", path, status,
                                  "no valid token" if status == 401 else "body too large")

    def answer(self, status: int, key: str, message: str, n: int = 1, payload=None,
               headers=None):
        """A refusal, counted (``key``), logged, answered in Alertmanager's shape."""
        self.count(key, n)
        self.throttle.warning(key, "POST /api/v2/alerts refused %d: %s", status, message[:300])
        return JSONResponse(payload if payload is not None else
                            {"code": status, "message": message}, status, headers=headers)


def intake_of(request: Request) -> Intake:
    return request.app.state.intake


router = APIRouter()


@router.post("/api/v2/alerts", summary="Alerts from Prometheus or vmalert, as Alertmanager "
                                       "takes them (a JSON array of {labels, annotations, "
                                       "startsAt, endsAt, generatorURL}); a token whose role "
                                       "is alerter, operator or admin",
             responses={200: {"description": "every alert kept (no body)"},
                        400: {"description": "not valid: Alertmanager's messages"},
                        429: {"description": "web.alerts_max alerts still firing"}})
async def post_alerts(request: Request, web: Shared):
    box = intake_of(request)
    found = getattr(request.state, "who", None)
    if found is None or not auth.allows(found.role, "alerts"):
        role = found.role if found is not None else "nobody"
        return box.answer(403, "alerts_forbidden", f"{role} may not post alerts (a token "
                                                   f"whose role is {auth.ALERTER}, operator "
                                                   f"or admin may)")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != JSON:
        return box.answer(415, "alerts_bad_type", f"unsupported media type "
                                                  f"{kind or 'application/octet-stream'!r}, "
                                                  f"only [{JSON}] are allowed")
    try:
        body = await request.body()
    except HTTPException as e:          # (the gate's limit, counted as the body streamed)
        return box.answer(e.status_code, "alerts_too_large", str(e.detail),
                          headers=e.headers)
    now = web.console.clock()
    settings = box.settings
    try:
        alerts, errors = intake.parse(body, now, settings.alerts_resolve_timeout)
    except intake.Refused as e:
        return box.answer(e.status, "alerts_unparsable", e.message, payload=e.body())
    try:
        done = await run_in_threadpool(alertstore.put, web.console.engine, alerts, now,
                                       settings.alerts_max, found.name)
    except SQLAlchemyError as e:
        return box.answer(500, "alerts_store_failed", f"the state database: "
                                                      f"{e.__class__.__name__}: {e}"[:300],
                          len(alerts))
    box.count("alerts_received", len(alerts))
    box.count("alerts_resolved", sum(a.resolved(now) for a in alerts))
    box.count("alerts_new", done.inserted)
    if errors:
        if done.refused:
            errors.append(_full(done.refused, settings.alerts_max))
        return box.answer(400, "alerts_invalid", "; ".join(errors), len(errors),
                          payload="; ".join(errors))
    if done.refused:
        return box.answer(429, "alerts_refused_full", _full(done.refused, settings.alerts_max),
                          done.refused)
    return Response(status_code=200)


def _full(refused: int, limit: int) -> str:
    return f"{refused} new alert(s) refused: the console holds {limit} alerts still firing " \
           f"(web.alerts_max)"


User = Annotated[store.Who, Depends(Asking())]


@router.get("/api/v1/prometheus/alerts", summary="The alerts Prometheus posted (newest "
                                                 "first), what each became (the check of a "
                                                 "host, or why none), and what the console "
                                                 "counted of the posts")
def received(web: Shared, user: User, request: Request, limit: int = 1000):
    box = intake_of(request)
    rows = alertstore.listed(web.console.engine, max(1, min(limit, 10_000)))
    with box.lock:
        counts = dict(box.counts)
    now = web.console.clock()
    return {"alerts": [_shown(r, now) for r in rows], "counts": counts,
            "limit": box.settings.alerts_max}


def _shown(row: dict, now: float) -> dict:
    return {"fingerprint": row["fingerprint"], "labels": row["labels"],
            "annotations": row["annotations"], "starts_at": iso(row["starts_at"]),
            "ends_at": iso(row["ends_at"]), "state": "resolved" if row["ends_at"] <= now
            else "firing", "timeout": row["timeout"], "generator_url": row["generator_url"],
            "received": iso(row["received"]), "updated": iso(row["updated"]),
            "sender": row["sender"], "uuid": row["uuid"], "check": row["plugin"],
            "refused": row["refused"], "judged": iso(row["judged"])}
