"""A state database as a fleet of HOSTS agents leaves it, for bench/web.py: what the console
reads, in the shapes the sinks write it (fleetwatch/store/schema.py).

Seeded, so two runs (and SQLite and PostgreSQL in one run) hold the same rows:

- ``agents`` ``web00000`` ... (hostnames), each on router ``r1`` (``agent_routers``), every
  host not a multiple of 100 declaring the one before it that is as its parent;
- ``plugins``, ``checks``, ``check_state`` and ``check_freshness``: CHECKS per host
  (``check_load``, ``check_disk``, ...), 2 % not OK (WARNING, CRITICAL or UNKNOWN, a
  fifth of them SOFT), 0.1 % stale;
- ``host_state``: 0.5 % of the hosts DOWN (those behind a DOWN parent UNREACHABLE), the
  others UP with a heartbeat deadline a day ahead (nothing heartbeats during the run);
- ``acknowledgements``: a third of the problems acknowledged;
- ``downtimes``: one running on a host, one on a check, one with ``children``, one planned;
- ``notifications``: one NOTIFY per 20 hosts over the last day;
- ``notified_problems``, ``alert_events`` and ``outbox``: each HARD problem triggered (and
  acknowledged when it is), and one resolved problem per 50 hosts, each event delivered to
  ``email`` (sent) and ``pager`` (sent, or failed for a tenth).
"""

from __future__ import annotations

import random
import time
import uuid as uuidlib

from fleetwatch.store import db, schema

PLUGINS = ("check_load", "check_disk", "check_http", "check_ping", "check_procs", "check_swap",
           "check_users", "check_ntp")
OUTPUT = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}
SEVERITY = {1: "warning", 2: "critical", 3: "warning"}
CHUNK = 5000
#: how far ahead an UP host's heartbeat deadline is: nothing heartbeats in the benchmark, and
#: the fleet must not turn DOWN while it runs
DEADLINE = 86400.0


def plugin_name(j: int) -> str:
    return PLUGINS[j] if j < len(PLUGINS) else f"check_{j}"


def hostname(i: int) -> str:
    return f"web{i:05d}"


def rows(hosts: int, per_host: int, now: float, seed: int = 19) -> dict:
    """Every table's rows: ``{table: [row, ...]}``, and ``"uuids"``: the hosts' uuids."""
    rnd = random.Random(seed)
    out = {t: [] for t in (schema.agents, schema.agent_routers, schema.plugins, schema.checks,
                           schema.check_state, schema.check_freshness, schema.host_state,
                           schema.acknowledgements, schema.notifications,
                           schema.notified_problems)}
    uuids = [str(uuidlib.UUID(int=rnd.getrandbits(128))) for _ in range(hosts)]
    down = set()
    problems = []                       # (key, uuid, hostname, check or None, status, hard)
    for i, uuid in enumerate(uuids):
        name = hostname(i)
        parent = hostname(i - i % 100) if i % 100 else None
        out[schema.agents].append(dict(
            uuid=uuid, hostname=name, version="1.4.2", first_seen=now - 30 * 86400,
            last_seen=now - rnd.uniform(0, 10), parents=[parent] if parent else None,
            ephemeral=False, gone=None))
        out[schema.agent_routers].append(dict(uuid=uuid, router="r1", last_seen=now - 5))
        is_down = rnd.random() < 0.005
        behind = parent is not None and (i - i % 100) in down
        if is_down:
            down.add(i)
            problems.append((f"{uuid}/host", uuid, name, None, 2, True))
        out[schema.host_state].append(dict(
            uuid=uuid, name="", up=not is_down, last_heard=now - (600 if is_down else 5),
            interval=10.0, deadline=now + (-570 if is_down else DEADLINE), since=now - 3600,
            routers=["r1"], notified=is_down and not behind, pending=False, updated=now,
            unreachable=parent if is_down and behind else None, gone=None,
            deregistered=None))
        for j in range(per_host):
            plugin = plugin_name(j)
            status = 0 if rnd.random() > 0.02 else rnd.choice((1, 2, 2, 3))
            hard = status == 0 or rnd.random() > 0.2
            since = now - rnd.uniform(60, 86400)
            text = f"{OUTPUT[status]} - {plugin[6:]} {rnd.uniform(0, 100):.1f}"
            out[schema.plugins].append(dict(uuid=uuid, source="agent", name=plugin,
                                            spec={"interval": 60, "timeout": 10},
                                            declared_at=now - 30 * 86400))
            out[schema.checks].append(dict(
                uuid=uuid, plugin=plugin, status=status, output=text, long_output="",
                perfdata={"value": round(rnd.uniform(0, 100), 2)},
                command_id=uuidlib.UUID(int=rnd.getrandbits(128)).hex, slot=now - 20,
                started=now - 20, duration=rnd.uniform(0.01, 0.5), last_result=now - 19,
                router="r1"))
            out[schema.check_state].append(dict(
                uuid=uuid, plugin=plugin, status=status, hard=hard,
                attempt=1 if hard else 2, max_attempts=3,
                hard_status=status if hard else 0, since=since, last_change=since,
                last_result=now - 19, history="0" * 20 if status == 0 else "0" * 19 + "2",
                percent=0.0, flapping=False, notified=1 if status and hard else 0,
                last_notified=since if status and hard else None, flap_notified=False,
                updated=now, unreachable=None))
            stale = rnd.random() < 0.001
            out[schema.check_freshness].append(dict(
                uuid=uuid, plugin=plugin, heard=now - (900 if stale else 19),
                stale_at=now - 600 if stale else None, updated=now))
            if status and hard:
                problems.append((f"{uuid}/check/{plugin}", uuid, name, plugin, status, True))
        if i % 20 == 0:
            out[schema.notifications].append(dict(
                msg_id=uuidlib.UUID(int=rnd.getrandbits(128)).hex, uuid=uuid, hostname=name,
                severity=rnd.choice(("info", "warning", "critical")),
                text=f"backup of {name} finished with {rnd.randrange(5)} warnings",
                source="backup", sent_at=now - rnd.uniform(0, 86400),
                received_at=now - rnd.uniform(0, 86400), router="r1"))
    events, outbox = [], []
    for n, (key, uuid, name, check, status, _) in enumerate(problems):
        opened = now - rnd.uniform(60, 86400)
        severity = SEVERITY[status] if check else "critical"
        summary = f"{name} {check} {OUTPUT[status]}" if check else f"{name} DOWN"
        out[schema.notified_problems].append(dict(
            key=key, uuid=uuid, check_name=check, kind="check" if check else "host",
            opened=opened, notifications=1, severity=severity, status=status,
            summary=summary, escalated=None, updated=opened))
        actions = [("trigger", opened)]
        if n % 3 == 0:
            out[schema.acknowledgements].append(dict(
                key=key, uuid=uuid, check_name=check, status=status, sticky=False,
                notify=True, comment="looking at it", author="oncall", created=opened + 30,
                expire=None, announced=opened + 31, ended=None, end_reason=None))
            actions.append(("acknowledge", opened + 31))
        for action, created in actions:
            events.append(dict(key=key, kind="check" if check else "host", action=action,
                               severity=severity, uuid=uuid, hostname=name, check_name=check,
                               status=status, summary=summary, text=summary, created=created,
                               details=None))
    for i in range(0, hosts, 50):                  # problems that came and went
        uuid, name, check = uuids[i], hostname(i), plugin_name(0)
        opened = now - rnd.uniform(3600, 86400)
        for action, created, status in (("trigger", opened, 2), ("resolve", opened + 600, 0)):
            summary = f"{name} {check} {OUTPUT[status]}"
            events.append(dict(key=f"{uuid}/check/{check}", kind="check", action=action,
                               severity="critical" if status else "ok", uuid=uuid,
                               hostname=name, check_name=check, status=status,
                               summary=summary, text=summary, created=created, details=None))
    events.sort(key=lambda e: e["created"])
    for event_id, event in enumerate(events, 1):
        event["id"] = event_id
        for channel in ("email", "pager"):
            failed = channel == "pager" and rnd.random() < 0.1
            outbox.append(dict(event_id=event_id, key=event["key"], channel=channel,
                               state="failed" if failed else "sent", attempts=3 if failed else 1,
                               next_attempt=event["created"], claimed_by=None, lease_until=None,
                               sent_at=None if failed else event["created"] + 2,
                               last_error="connection refused" if failed else None,
                               created=event["created"]))
    out[schema.alert_events], out[schema.outbox] = events, outbox
    first, parent = uuids[min(len(uuids) - 1, 7)], hostname(100 if hosts > 100 else 0)
    out[schema.downtimes] = [
        dict(host=hostname(min(hosts - 1, 3)), check_name=None, start=now - 1800,
             end=now + 3600, every=None, duration=None, flexible=None, children=False,
             comment="disk swap", author="oncall", created=now - 1800, removed=None),
        dict(host=hostname(min(hosts - 1, 7)), check_name="check_http", start=now - 600,
             end=now + 600, every=None, duration=None, flexible=None, children=False,
             comment=f"deploy on {first}", author="ci", created=now - 600, removed=None),
        dict(host=parent, check_name=None, start=now - 300, end=now + 7200, every=None,
             duration=None, flexible=None, children=True, comment="rack move",
             author="oncall", created=now - 300, removed=None),
        dict(host=hostname(hosts - 1), check_name=None, start=now + 86400,
             end=now + 90000, every=None, duration=None, flexible=None, children=False,
             comment="kernel update", author="oncall", created=now, removed=None),
    ]
    out["uuids"] = uuids
    return out


def fill(url: str, hosts: int, per_host: int, now: float | None = None) -> list[str]:
    """Create the state database's tables at ``url`` and fill them; the hosts' uuids."""
    now = time.time() if now is None else now
    data = rows(hosts, per_host, now)
    engine = db.engine(url)
    try:
        for owner in schema.OWNED:
            db.create(engine, owner)
        with engine.begin() as conn:
            for table in schema.metadata.sorted_tables:
                found = data.get(table, [])
                for start in range(0, len(found), CHUNK):
                    conn.execute(table.insert(), found[start:start + CHUNK])
        # the planner's statistics, as a live fleet's database has them: PostgreSQL's
        # autovacuum analyzes a table within a minute of the sinks changing a tenth of it
        # (they rewrite every check's row each interval); without them, it guesses a
        # page's 100 uuids match thousands of rows and scans whole tables (7 ms, not 0.2 ms)
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()
    return data["uuids"]
