"""Alert events (one dict each: key, kind, action, severity, uuid, hostname, check, status,
summary, text, created; a problem's trigger also ``since``, when it began) from what the
state machines decided. Pure.

Keys (the pager's dedup key: a trigger and its resolve share one):

=============================  ==========  ==============================================
key                            kind        when
=============================  ==========  ==============================================
``UUID/check/PLUGIN``          check       HARD problem, change, reminder; recovery
``UUID/flapping/PLUGIN``       flapping    flapping started; stopped
``UUID/host``                  host        the agent DOWN; UP
``UUID/process/NAME``          host        a local process's heartbeats stopped; back
``UUID/notify/MSG_ID``         notify      one per NOTIFY (trigger only)
=============================  ==========  ==============================================

``summary`` is one line without the host and check (channels put ``LABEL host/check:``
before it); ``text`` says the rest.
"""

from __future__ import annotations

from fleetwatch.display import iso
from sinks.alerting.checks import rules as checkstate
from sinks.alerting.hosts import rules as hoststate

SUMMARY_MAX = 500


def _line(text, limit: int = SUMMARY_MAX) -> str:
    return " ".join(str(text or "").split("\n", 1)[0].split())[:limit]


def _event(key: str, kind: str, action: str, severity: str, uuid: str, hostname: str | None,
           check: str | None, status: int | None, summary: str, text: str,
           created: float, since: float | None = None) -> dict:
    event = {"key": key, "kind": kind, "action": action, "severity": severity, "uuid": uuid,
             "hostname": hostname or uuid, "check": check, "status": status,
             "summary": summary, "text": text, "created": created}
    if since is not None and action == "trigger":     # when the problem began
        event["since"] = since
    return event


def check_event(alert: checkstate.Alert, uuid: str, hostname: str | None, plugin: str,
                state: checkstate.CheckState, max_attempts: int, output: str,
                long_output: str, now: float) -> dict:
    name = checkstate.NAMES[state.status]
    if alert.kind == "flapping":
        started = alert.action == "trigger"
        summary = (f"state changed {state.percent:.0f}% over the last "
                   f"{len(state.history)} results: flapping "
                   f"{'started, state alerts paused' if started else 'stopped'}")
        text = (f"Current state {name} ({checkstate.state_type(state)}). "
                f"Latest output: {_line(output)}")
        return _event(f"{uuid}/flapping/{plugin}", "flapping", alert.action, alert.severity,
                      uuid, hostname, plugin, state.status, summary, text, now)
    lines = [f"{name} {checkstate.state_type(state)} (attempt {state.attempt}/{max_attempts}),"
             f" {alert.reason}; in this HARD state since {iso(state.since)}"]
    if long_output:
        lines += ["", long_output.rstrip("\n")]
    return _event(f"{uuid}/check/{plugin}", "check", alert.action, alert.severity, uuid,
                  hostname, plugin, alert.status, _line(output) or name, "\n".join(lines), now,
                  state.since)


def host_event(alert: hoststate.Alert, uuid: str, hostname: str | None, name: str,
               state: hoststate.HostState, now: float) -> dict:
    what = f"process {name}" if name else "agent"
    routers = ", ".join(sorted(state.routers)) or "no router"
    if alert.action == "trigger":
        summary = (f"{what} silent for {alert.silent_for:.0f}s: no heartbeat through any "
                   f"router")
        text = f"Last heard {iso(state.last_heard)} through {routers}."
    else:
        summary = f"{what} heard again after {alert.silent_for:.0f}s of silence"
        text = f"Heard through {routers} at {iso(state.last_heard)}."
    key = f"{uuid}/process/{name}" if name else f"{uuid}/host"
    return _event(key, "host", alert.action, alert.severity, uuid, hostname, name or None,
                  None, summary, text, now, state.last_heard)


def gone_event(problem, hostname: str | None, why: str, now: float) -> dict:
    """The resolve that closes a told problem (a ``notified_problems`` row) of an agent
    GONE (``why``: ``deregistered`` or ``ephemeral and silent``): it pages nobody, and
    ends the pager's incident."""
    summary = f"closed: the agent is gone ({why})"
    text = (f"The agent left the fleet ({why}); this problem, told since "
            f"{iso(problem.opened)}, is closed without a recovery.")
    return _event(problem.key, problem.kind, "resolve", "ok", problem.uuid, hostname,
                  problem.check_name, None, summary, text, now)


def notify_event(row: dict, hostname: str | None, now: float) -> dict:
    """The event of a newly recorded NOTIFY (a ``notifications`` row); ``hostname`` is the
    caller's choice (the registry's for the uuid, else the row's)."""
    text = row.get("text") or ""
    source = row.get("source")
    extra = f"\n\nFrom {source}, sent {iso(row.get('sent_at'))}" if source else ""
    event = _event(f"{row['uuid']}/notify/{row['msg_id']}", "notify", "trigger",
                   row.get("severity") or "error", row["uuid"], hostname,
                   None, None, _line(text) or "(no text)", text + extra, now)
    if source:
        event["source"] = source
    return event
