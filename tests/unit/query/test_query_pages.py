"""The console's SQL (query/pages.py) says what the whole fleet's reading (query/fleet.py, as
``fleetwatch status`` reads it) says: the same counts of host and check states, the same
problems judged the same way, the same hosts found by search, state and parent, and every
check once through the API's cursor. On a real SQLite database filled as a fleet leaves it
(bench/webfill.py: problems, SOFT states, stale checks, hosts DOWN and UNREACHABLE,
acknowledgements, downtimes), with the cases a filler does not make added: an agent
deregistered, a check declared and never run, a local process DOWN, a host whose heartbeat
deadline passed with no sink to mark it, a host DOWN and acknowledged. On SQLite and on
PostgreSQL."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

pytest.importorskip("sqlalchemy")

from support import ROOT  # noqa: E402
sys.path.append(str(ROOT / "bench"))   # last: bench/web.py is not web/
import webfill  # noqa: E402

from query import fleet, pages  # noqa: E402
from fleetwatch.store import db, schema  # noqa: E402

NOW = 1_800_000_000.0
HOSTS = 300


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def conn(request, tmp_path_factory):
    """The filled database, on SQLite and on PostgreSQL (where the scope is read and cut
    differently: query.fleet.read)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('state') / 'state.db'}"
    else:
        pytest.importorskip("psycopg")
        url = request.getfixturevalue("pg_cluster").create_database()
    uuids = webfill.fill(url, HOSTS, 5, NOW)
    engine = db.engine(url)
    with engine.begin() as c:
        c.execute(schema.agents.update().where(schema.agents.c.uuid == uuids[1])
                  .values(gone=NOW - 60))
        c.execute(schema.checks.delete().where(schema.checks.c.uuid == uuids[2],
                                               schema.checks.c.plugin == "check_load"))
        c.execute(schema.host_state.insert().values(
            uuid=uuids[3], name="backup", up=False, last_heard=NOW - 600, interval=10,
            deadline=NOW - 570, since=NOW - 570, routers=["r1"], notified=True, pending=False,
            updated=NOW))
        c.execute(schema.host_state.update().where(schema.host_state.c.uuid == uuids[4],
                                                   schema.host_state.c.name == "")
                  .values(up=True, deadline=NOW - 5))
        # DOWN behind its parent, with a check CRITICAL on it (handled: its host is DOWN)
        c.execute(schema.host_state.update().where(schema.host_state.c.uuid == uuids[5],
                                                   schema.host_state.c.name == "")
                  .values(up=False, since=NOW - 100, unreachable="web00000"))
        c.execute(schema.checks.update().where(schema.checks.c.uuid == uuids[5],
                                               schema.checks.c.plugin == "check_disk")
                  .values(status=2, output="DISK CRITICAL"))
        # DOWN and acknowledged
        c.execute(schema.host_state.update().where(schema.host_state.c.uuid == uuids[8],
                                                   schema.host_state.c.name == "")
                  .values(up=False, since=NOW - 200))
        c.execute(schema.acknowledgements.insert().values(
            key=f"{uuids[8]}/host", uuid=uuids[8], check_name=None, status=2, sticky=False,
            notify=False, comment="rebooting", author="oncall", created=NOW - 100))
        c.execute(schema.check_freshness.update().where(      # stale, silent since
            schema.check_freshness.c.uuid == uuids[6],
            schema.check_freshness.c.plugin == "check_disk").values(
                heard=NOW - 900, stale_at=NOW - 300))
    with engine.connect() as connection:
        yield connection
    engine.dispose()


@pytest.fixture(scope="module")
def whole(conn):
    return fleet.assemble(fleet.read(conn, NOW), NOW)


def test_the_counts_are_the_whole_reading_s(conn, whole):
    hosts = Counter(a.get("state") or "UNKNOWN" for a in whole["agents"])
    checks = Counter(c["state"] for c in whole["checks"])
    assert pages.host_counts(conn, NOW) == dict(hosts)
    assert pages.check_counts(conn) == dict(checks)
    assert {"UP", "DOWN", "UNREACHABLE"} <= set(hosts) and "PENDING" in checks


def test_the_problems_chosen_in_sql_are_every_problem_judged_the_same(conn, whole):
    scoped = fleet.assemble(fleet.read(conn, NOW, *pages.problem_scope(conn, NOW)), NOW)
    assert scoped["problems"] == whole["problems"]
    assert scoped["unhandled"] == whole["unhandled"]
    kinds = Counter(p["kind"] for p in whole["problems"])
    assert kinds["host"] and kinds["process"] and kinds["check"]
    reasons = {r for p in whole["problems"] for r, v in (p["handled"] or {}).items() if v}
    assert {"ack", "downtime", "unreachable", "host", "stale"} <= reasons


def test_hosts_found_by_search_state_and_parent(conn, whole):
    def names(**kwargs):
        uuids, total = pages.hosts(conn, NOW, limit=1000, **kwargs)
        assert total == len(uuids)
        by_uuid = {a["uuid"]: a for a in whole["agents"]}
        return [by_uuid[u]["hostname"] for u in uuids]
    assert names(search="WEB0001") == [f"web{i:05d}" for i in range(10, 20)]
    per_host: dict = {}
    for c in whole["checks"]:
        per_host.setdefault(c["uuid"], Counter())[c["state"]] += 1
    shown = [a["uuid"] for a in whole["agents"][:150]]
    assert pages.check_counts_of(conn, shown) == {u: dict(per_host[u]) for u in shown
                                                  if u in per_host}
    assert {"PENDING", "UNKNOWN", "CRITICAL"} <= {s for u in shown for s in per_host.get(u, {})}
    assert names(search=whole["agents"][7]["uuid"][:8]) == [whole["agents"][7]["hostname"]]
    assert names(search="%") == [] and names(search="_") == []     # no wildcards
    down = names(state="down")
    assert down == sorted(a["hostname"] for a in whole["agents"] if a.get("state") == "DOWN")
    parent = "web00100"
    behind = sorted(a["hostname"] for a in whole["agents"]
                    if parent in (fleet_parents(conn).get(a["uuid"]) or []))
    assert names(parent=parent) == behind and len(behind) == 99
    first, total = pages.hosts(conn, NOW, limit=10)
    second, _ = pages.hosts(conn, NOW, limit=10, offset=10)
    assert total == HOSTS - 1 and not set(first) & set(second)   # one is deregistered
    groups = {g["parent"]: g for g in pages.parents(conn, NOW)}
    assert groups[parent]["hosts"] == 99 and sum(groups[parent]["states"].values()) == 99


def test_hosts_read_without_their_checks_are_judged_the_same(conn, whole, monkeypatch):
    """The API's list of hosts reads the agents alone (``pairs`` empty): each is what the
    whole reading says of it (state, acknowledgement, downtime, parent), page after page,
    and so when the scope is too large to name in SQL and is cut in Python."""
    by_uuid = {a["uuid"]: a for a in whole["agents"]}
    seen, after = [], ""
    for large in (False, True):
        if large:
            monkeypatch.setattr(fleet, "SCOPE_MAX", 10)
        while True:
            uuids, _ = pages.hosts(conn, NOW, after=after, limit=97, by_name=False)
            if not uuids:
                break
            found = fleet.assemble(fleet.read(conn, NOW, uuids, ()), NOW)
            assert found["checks"] == []
            assert found["agents"] == sorted((by_uuid[u] for u in uuids),
                                             key=lambda a: (a["hostname"] or "", a["uuid"]))
            seen += uuids
            after = uuids[-1]
        after = ""
    assert sorted(seen) == sorted(list(by_uuid) * 2)
    handled = {k for a in whole["agents"] for k, v in (a.get("handled") or {}).items() if v}
    assert {"ack", "downtime", "unreachable"} <= handled


def fleet_parents(conn) -> dict:
    return {a["uuid"]: a.get("parents") for a in
            __import__("fleetwatch.store.reads", fromlist=["agents"]).agents(conn)}


def test_every_check_once_through_the_cursor_and_by_state(conn, whole):
    seen, after = [], None
    while True:
        page = pages.checks(conn, NOW, after=after, limit=97)
        if not page:
            break
        seen += page
        after = page[-1]
    assert seen == sorted((c["uuid"], c["plugin"]) for c in whole["checks"])
    critical = pages.checks(conn, NOW, state="critical", limit=10_000)
    assert critical == sorted((c["uuid"], c["plugin"]) for c in whole["checks"]
                              if c["state"] == "CRITICAL")
    one = whole["checks"][0]["uuid"]
    assert pages.checks(conn, NOW, uuid=one) == [
        (c["uuid"], c["plugin"]) for c in whole["checks"] if c["uuid"] == one]


def test_a_database_no_sink_has_made_reads_as_empty(tmp_path):
    engine = db.engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with engine.connect() as c:
            assert pages.host_counts(c, NOW) == {} and pages.check_counts(c) == {}
            assert pages.hosts(c, NOW) == ([], 0) and pages.checks(c, NOW) == []
            assert pages.parents(c, NOW) == []
            uuids, pairs = pages.problem_scope(c, NOW)
            assert fleet.assemble(fleet.read(c, NOW, uuids, pairs), NOW)["problems"] == []
    finally:
        engine.dispose()
