"""One change to many problems at once (the problem lists' "Apply to selected" form, as
Icinga Web 2's multi-select and Checkmk's bulk commands): acknowledge them, schedule a
downtime on each, remove their acknowledgements, or run their checks now.

The form (``POST /bulk``, the lists' toolbar in ``_macros.html``) names the ``action`` and
the rows ticked: each a ``target`` ``UUID/CHECK`` (CHECK empty: the host's own problem),
with ``/ACK_ID`` when the problem is acknowledged; or, with ``all``, every problem the
list's ``filter`` (its URL query, :class:`query.problems.Filter`) matches when it is
posted, at most :data:`BULK_MAX`. Each change is the one the row's own
form makes (:class:`web.context.Web`: the same action, one audit record each, in its own
transaction), so a bulk change is exactly the changes made one by one: one refused (a
problem that recovered meanwhile, an acknowledgement already removed) is said, and the
others are made. All made: back to the list; some refused: a page saying which and why.
Runs go out :data:`RUNS_AT_ONCE` at a time, each waiting for its result as ``fleetwatch
run --wait`` does.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from web import auth, store
from web.asking import Asking
from web.console import Refused
from web.context import Shared, Web
from web.pages import back_to

#: rows one form may change at most (a page lists 100; "all matching" is bounded too)
BULK_MAX = 1000
#: checks run at once by a bulk "run now"
RUNS_AT_ONCE = 8
#: each action: (the role's action it needs, in a page's words, what a done row is called)
ACTIONS = {"ack": ("ack", "acknowledge", "acknowledged"),
           "downtime": ("downtime", "schedule downtimes", "in a downtime"),
           "unack": ("ack", "remove acknowledgements", "no longer acknowledged"),
           "run": ("run", "run checks", "run")}

#: anyone logged in may post it (its CSRF token checked); the action's role is asked next
Poster = Annotated[store.Who, Depends(Asking(page=True))]

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Target:
    uuid: str
    check: str | None
    ack_id: int | None

    @property
    def label(self) -> str:
        return f"{self.uuid} {self.check or '(host)'}"


def parse(value: str) -> Target:
    """A ticked row's ``UUID/CHECK[/ACK_ID]``; ValueError for anything else."""
    parts = value.split("/")
    if not 2 <= len(parts) <= 3 or not parts[0] or len(value) > 600:
        raise ValueError(f"not a problem of a list: {value[:80]!r}")
    ack_id = int(parts[2]) if len(parts) == 3 and parts[2] else None
    return Target(parts[0], parts[1] or None, ack_id)


def apply(web: Web, found: store.Who, action: str, targets: list[Target], comment: str,
          duration: str) -> list[tuple[Target, str | None]]:
    """Each target changed as its row's own form would: (target, None) when done, else
    (target, why not)."""
    def one(t: Target) -> str | None:
        try:
            if action == "ack":
                web.acknowledge(found, t.uuid, t.check, comment)
            elif action == "downtime":
                web.schedule(found, t.uuid, t.check, duration, comment)
            elif action == "unack":
                if t.ack_id is None:
                    return "not acknowledged"
                web.end_ack(found, t.ack_id)
            elif action == "run":
                if t.check is None:
                    return "a host's own problem has no check to run"
                web.run_check(found, t.uuid, t.check)
        except (Refused, ValueError) as e:
            return str(e)
        return None
    if action == "run":
        with ThreadPoolExecutor(RUNS_AT_ONCE, thread_name_prefix="bulk-run") as pool:
            return list(zip(targets, pool.map(one, targets)))
    return [(t, one(t)) for t in targets]


def matching(web: Web, query: str, checks: bool = False) -> list[str]:
    """The targets of every problem the list's filter (``query``: its URL query) matches
    now (``checks``: every check the checks list's filter matches), read again here (what
    matches may have changed since the page was read); a process's problem is not one a
    form changes. ValueError for a filter that is not one, OverflowError past
    :data:`BULK_MAX`, Refused when the database cannot be read."""
    from starlette.datastructures import QueryParams
    from query import problems
    f = (problems.CheckFilter if checks else problems.Filter).parse(QueryParams(query))
    listing = web.console.problem_list(f, 0, BULK_MAX, fresh=True)
    if listing["warnings"]:
        raise Refused(listing["warnings"][0], 503)
    if listing["total"] > BULK_MAX:
        raise OverflowError(f"{listing['total']} {'checks' if checks else 'problems'} "
                            f"match the filter: at most "
                            f"{BULK_MAX} at once; narrow it")
    out = []
    for p in listing["rows"]:
        if p["kind"] in ("check", "host"):
            ack = (p.get("handled") or {}).get("ack")
            out.append(f"{p['uuid']}/{p.get('check') or ''}" + (f"/{ack['id']}" if ack else ""))
    return list(dict.fromkeys(out))        # grouped by parent, a row may come twice


@router.post("/bulk", response_class=HTMLResponse)
async def bulk_form(request: Request, web: Shared, found: Poster):
    form = await request.form()
    back, action = back_to(form.get("back")), str(form.get("action", ""))

    def refused(status: int, error: str):
        return web.page(request, "refused.html", status, who=found, error=error, back=back)
    if action not in ACTIONS:
        return refused(422, "choose what to do with the rows ticked")
    role, what, _ = ACTIONS[action]
    if not auth.allows(found.role, role):
        return refused(403, f"{found.role} may not {what}")
    values = [str(v) for v in form.getlist("target")]
    if form.get("all"):
        try:
            values = await run_in_threadpool(matching, web, str(form.get("filter", ""))[:4000],
                                             form.get("list") == "checks")
        except ValueError as e:
            return refused(422, str(e))
        except OverflowError as e:
            return refused(413, str(e))
        except Refused as e:
            return refused(e.status, str(e))
    if not values:
        return refused(422, "tick the rows to change first" if not form.get("all")
                       else "no problem matches the filter now")
    if len(values) > BULK_MAX:
        return refused(413, f"{len(values)} rows ticked: at most {BULK_MAX} at once")
    try:
        targets = [parse(v) for v in values]
    except ValueError as e:
        return refused(422, str(e))
    comment = str(form.get("comment", ""))[:1000]
    duration = str(form.get("duration", ""))[:32].strip()
    if action == "downtime" and not duration:
        return refused(422, "a downtime needs how long (2h, 30m, 1d)")
    results = await run_in_threadpool(apply, web, found, action, targets, comment, duration)
    failed = [(t, why) for t, why in results if why is not None]
    if not failed:
        return RedirectResponse(back, status_code=303)
    return web.page(request, "bulk.html", 200 if len(failed) < len(results) else 422,
                    who=found, done=len(results) - len(failed), total=len(results),
                    failed=failed, outcome=ACTIONS[action][2], back=back)
