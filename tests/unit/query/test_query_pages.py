"""The console's SQL (query/pages.py) says what the whole fleet's reading (query/fleet.py, as
``fleetwatch status`` reads it) says: the same counts of host and check states, the same
problems judged the same way, the same hosts found by search, state and parent, and every
check once through the API's cursor. On a real SQLite database filled as a fleet leaves it
(bench/webfill.py: problems, SOFT states, stale checks, hosts DOWN and UNREACHABLE,
acknowledgements, downtimes), with the cases a filler does not make added: an agent
deregistered, a check declared and never run, a local process DOWN, a host whose heartbeat
deadline passed with no sink to mark it, a host DOWN and acknowledged, checks no agent
declares (a rule's, a Prometheus alert's: listed and counted with the declared ones). On
SQLite and on PostgreSQL."""

from __future__ import annotations

import sys
import time
from collections import Counter

import pytest

pytest.importorskip("sqlalchemy")

from support import ROOT  # noqa: E402
sys.path.append(str(ROOT / "bench"))   # last: bench/web.py is not web/
import webfill  # noqa: E402

from query import fleet, handling, pages, problems  # noqa: E402
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
        # more problems for the lists: check_load CRITICAL (HARD, begun i minutes ago)
        # on hosts 20-59, then downtimes of each kind the lists judge in SQL: a recurring
        # one running now, a flexible one (problems begun in the last 40 minutes), a glob
        # with a class, a check glob
        for i in range(20, 60):
            where = (schema.checks.c.uuid == uuids[i], schema.checks.c.plugin == "check_load")
            c.execute(schema.checks.update().where(*where).values(
                status=2, output=f"LOAD CRITICAL {i}", started=NOW - 60 * i))
            c.execute(schema.check_state.update().where(
                schema.check_state.c.uuid == uuids[i],
                schema.check_state.c.plugin == "check_load").values(
                    status=2, hard=i % 3 != 0, hard_status=2 if i % 3 else 0,
                    since=NOW - 60 * i, last_result=NOW - 5))
        # checks no agent declares, judged by the alerting sinks: a rule CRITICAL on hosts
        # 10-12, OK on 13; a Prometheus alert WARNING on 14 (listed and counted as declared)
        for i, check, status in ((10, "rule:disk_full", 2), (11, "rule:disk_full", 2),
                                 (12, "rule:disk_full", 2), (13, "rule:disk_full", 0),
                                 (14, "prom:HighLatency", 1)):
            c.execute(schema.checks.insert().values(
                uuid=uuids[i], plugin=check, status=status, output=f"{check} {status}",
                long_output="", perfdata=[], command_id=f"rule-{int(NOW)}", slot=NOW - 30,
                started=NOW - 30, last_result=NOW - 30, router="rules",
                received_at=NOW - 30))
        c.execute(schema.agents.update().where(schema.agents.c.hostname.like("web0002%"))
                  .values(site="site-paris"))
        hour = time.localtime(NOW).tm_hour
        for host, check, extra in (
                ("WEB0002?", None, dict(every=f"daily {hour:02d}:00-{(hour + 2) % 24:02d}:00",
                                        start=NOW - 86400 * 3, end=None)),
                ("web0003*", "check_l*", dict(start=NOW - 7200, end=NOW + 600,
                                              flexible=2400.0)),
                ("web0004[0-4]", None, dict(start=NOW - 60, end=NOW + 60)),
                ("web0005*", "check_[h-m]*", dict(start=NOW - 60, end=NOW + 60))):
            c.execute(schema.downtimes.insert().values(
                host=host, check_name=check, children=False, comment="", author="t",
                created=NOW - 60, removed=None, **extra))
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
    assert sum(c["plugin"].startswith(("rule:", "prom:")) for c in whole["checks"]) == 5


def test_the_handled_list_is_every_handled_problem_judged_the_same(conn, whole):
    """The problems page splits the handled list (in SQL) into its sections by why each
    is handled: it is every problem the whole reading judges handled, for the same
    reasons."""
    held = problems.listed(conn, NOW, problems.Filter(handled="yes"), 0, 10_000)
    unhandled = {key(p) for p in whole["unhandled"]}
    want = {key(p): p["handled"] for p in whole["problems"] if key(p) not in unhandled}
    assert {key(r): r["handled"] for r in held.rows} == want and held.total == len(want)
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
            uuids, total = pages.hosts(conn, NOW, after=after, limit=97, by_name=False,
                                       count=False)
            assert total is None                # (the API's cursor list counts nothing)
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


@pytest.mark.parametrize("listed", [True, False], ids=["uuids", "subquery"])
def test_hosts_found_by_glob_and_by_their_handling(conn, whole, listed, monkeypatch):
    """The hosts list's search as a glob (the whole hostname or uuid, ignoring case), and
    its handled filter: yes the hosts DOWN or UNREACHABLE that the whole reading says are
    acknowledged, in a downtime or behind a parent that is down; no every other. The
    handled hosts given by their uuids, or (more than ``HELD_LISTED``) as a subquery."""
    if not listed:
        monkeypatch.setattr(problems, "HELD_LISTED", 0)
    def found(**kwargs):
        uuids, total = problems.hosts(conn, NOW, limit=10_000, **kwargs)
        assert total == len(uuids)
        return set(uuids)
    agents = whole["agents"]
    assert found(search="WEB0001?") == {a["uuid"] for a in agents
                                        if (a["hostname"] or "").startswith("web0001")
                                        and len(a["hostname"]) == 8} != set()
    assert found(search="0001") and not found(search="0001*")  # text: contains; glob: whole
    assert found(search=agents[7]["uuid"][:8] + "*") == {agents[7]["uuid"]}
    assert found(search="web0002[!0-4]") == {
        a["uuid"] for a in agents if (a["hostname"] or "")[:7] == "web0002"
        and len(a["hostname"]) == 8 and a["hostname"][7] not in "01234"} != set()
    handled = {a["uuid"] for a in agents if a.get("state") in ("DOWN", "UNREACHABLE")
               and any((a.get("handled") or {}).values())}
    assert handled and found(handled="yes") == handled
    assert found(handled="no") == {a["uuid"] for a in agents} - handled
    assert found(handled="yes", state="UNREACHABLE") == {
        u for u in handled if next(a for a in agents if a["uuid"] == u)["state"]
        == "UNREACHABLE"}


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
    finally:
        engine.dispose()


# ---------------------------------------------------------------- the problems list in SQL

def key(p: dict) -> tuple:
    return problems.key(p)


def listed(conn, limit=10_000, **kwargs) -> list[dict]:
    found = problems.page(conn, NOW, problems.Filter(**kwargs), limit=limit)
    assert found.total == len(found.rows) or limit < found.total
    return found.rows


def test_the_problems_list_is_every_problem_judged_and_ordered_the_same(conn, whole):
    """Handling, state and order in SQL are query/handling.py's, downtimes of every kind
    included (recurring, flexible, globs with a class, a check glob, children)."""
    rows = listed(conn, handled="all")
    assert [key(r) for r in rows] == [key(p) for p in whole["problems"]]
    judged = {key(p): p for p in whole["problems"]}
    for row in rows:
        how = judged[key(row)]["handled"] or {}
        assert row["handled"] == handling.is_handled(how), (row, how)
        assert row["acked"] == bool(how.get("ack")), row
        assert row["downtime"] == bool(how.get("downtime")), (row, how)
        assert row["state"] == judged[key(row)]["state"]
    reasons = Counter(r for p in whole["problems"] for r, v in (p["handled"] or {}).items()
                      if v)
    assert reasons["downtime"] >= 10 and reasons["ack"] and reasons["host"], reasons
    ids = {p["handled"]["downtime"]["id"] for p in whole["problems"]
           if (p["handled"] or {}).get("downtime")}
    assert len(ids) >= 6, ids           # the fill's and each kind added here
    assert [key(r) for r in listed(conn)] == [key(p) for p in whole["unhandled"]]
    assert [key(r) for r in listed(conn, handled="yes")] == [
        key(p) for p in whole["problems"] if handling.is_handled(p["handled"])]


def test_the_problems_list_filtered(conn, whole):
    every = whole["problems"]

    def expect(test):
        return [key(p) for p in every if test(p)]

    def keys(**kwargs):
        return [key(r) for r in listed(conn, handled="all", **kwargs)]
    assert keys(states=("CRITICAL", "DOWN")) == expect(
        lambda p: p["state"] in ("CRITICAL", "DOWN"))
    assert keys(host="WEB0002*") == expect(lambda p: p["hostname"].startswith("web0002"))
    assert keys(host="web000[2-3]?") == expect(lambda p: p["hostname"][:7] in ("web0002",
                                                                                "web0003"))
    uuid = every[0]["uuid"]
    assert keys(host=uuid[:6].upper() + "*") == expect(lambda p: p["uuid"] == uuid)
    assert keys(check="check_l*") == expect(lambda p: (p["check"] or "").startswith("check_l"))
    assert keys(check="CHECK_L*") == []                 # a check's name keeps its case
    assert keys(text="load critical 4") == expect(
        lambda p: "load critical 4" in (p["output"] or "").lower())
    assert keys(text="%") == []                         # no wildcards: a literal
    assert keys(text="k_l") == expect(lambda p: p["check"] == "check_load")
    behind = fleet_parents(conn)
    assert keys(parent="web00000") == expect(
        lambda p: "web00000" in (behind.get(p["uuid"]) or []))
    assert keys(site="nowhere") == []
    paris = keys(site="site-paris")
    assert paris == expect(lambda p: p["hostname"].startswith("web0002")) and paris


def test_the_problems_list_sorted_grouped_and_paged(conn, whole):
    every = listed(conn, handled="all")
    by_since = listed(conn, handled="all", sort="since")
    since = [r["since"] or 0 for r in by_since]
    assert since == sorted(since) and len(by_since) == len(every)
    names = [r["hostname"] for r in listed(conn, handled="all", sort="-hostname")]
    assert names == sorted(names, reverse=True)
    checks = [r["name"] or "" for r in listed(conn, handled="all", sort="check")]
    assert checks == sorted(checks)
    worst_last = listed(conn, handled="all", sort="-state")
    assert worst_last[-1]["state"] in ("DOWN", "UNREACHABLE")
    assert worst_last[0]["state"] == "WARNING"
    # pages of 7 make the whole list, in order
    seen, offset = [], 0
    while True:
        found = problems.page(conn, NOW, problems.Filter(handled="all"), offset, 7)
        if not found.rows:
            break
        seen += found.rows
        offset += 7
    assert [key(r) for r in seen] == [key(r) for r in every]
    # grouped by host: each host's problems together, the groups' counts the rows'
    grouped = problems.page(conn, NOW, problems.Filter(handled="all", group="host"),
                            limit=10_000)
    order = [r["group"] for r in grouped.rows]
    assert order == sorted(order) and grouped.total == len(every)
    assert grouped.groups == dict(Counter(order))
    # by parent: a host is in each of its parents' groups, one without in ""
    by_parent = problems.page(conn, NOW, problems.Filter(handled="all", group="parent"),
                              limit=10_000)
    behind = fleet_parents(conn)
    assert by_parent.groups == dict(sorted(Counter(
        name for r in every for name in behind.get(r["uuid"]) or [""]).items()))
    assert by_parent.total == sum(by_parent.groups.values())
    by_site = problems.page(conn, NOW, problems.Filter(handled="all", group="site"),
                            limit=10_000)
    assert list(by_site.groups) == ["", "site-paris"] and by_site.total == len(every)
    assert by_site.groups["site-paris"] == sum(r["hostname"].startswith("web0002")
                                               for r in every)


def test_a_filter_from_a_url_and_back(conn):
    from starlette.datastructures import QueryParams
    f = problems.Filter.parse(QueryParams(
        "state=critical&state=down,warning&host=web-*&q=disk&sort=-since&group=host"))
    assert f.states == ("CRITICAL", "DOWN", "WARNING") and f.sort == "-since"
    assert f.query() == [("state", "CRITICAL,DOWN,WARNING"), ("host", "web-*"), ("q", "disk"),
                         ("sort", "-since"), ("group", "host")]
    assert problems.Filter.parse(QueryParams(f.query())) == f
    assert f.query(sort="state") == [("state", "CRITICAL,DOWN,WARNING"), ("host", "web-*"),
                                     ("q", "disk"), ("group", "host")]
    for bad, said in (("state=BROKEN", "state 'BROKEN'"), ("handled=maybe", "handled"),
                      ("sort=uuid", "sort 'uuid'"), ("group=rack", "group 'rack'"),
                      ("host=" + "a" * 300, "host: expected one line"),
                      ("q=a%0Ab", "q: expected one line")):
        with pytest.raises(ValueError, match=said):
            problems.Filter.parse(QueryParams(bad))


# ---------------------------------------------------------------- the checks list in SQL

def checks_listed(conn, limit=10_000, **kwargs) -> problems.Page:
    found = problems.page(conn, NOW, problems.CheckFilter(**kwargs), limit=limit)
    assert found.total == len(found.rows) or limit < found.total
    return found


def test_the_checks_list_is_every_check_in_its_state_worst_first(conn, whole):
    """Every declared check once (OK and PENDING too), in the state query.fleet judges,
    worst first; a problem among them handled as the problems list says."""
    rows = checks_listed(conn).rows
    assert sorted((r["uuid"], r["name"]) for r in rows) == \
        sorted((c["uuid"], c["plugin"]) for c in whole["checks"])
    judged = {(c["uuid"], c["plugin"]): c["state"] for c in whole["checks"]}
    assert {(r["uuid"], r["name"]): r["state"] for r in rows} == judged
    ranks = [problems.CHECK_STATES.index(r["state"]) for r in rows]
    assert ranks == sorted(ranks)
    handled = {key(p) for p in whole["problems"]
               if p["kind"] == "check" and handling.is_handled(p["handled"])}
    assert {("check", r["uuid"], r["name"]) for r in rows if r["handled"]} == handled
    assert not any(r["handled"] for r in rows if r["state"] in ("OK", "PENDING"))
    ok = checks_listed(conn, states=("OK",)).rows
    assert ok and {(r["uuid"], r["name"]) for r in ok} == {
        pair for pair, state in judged.items() if state == "OK"}
    assert checks_listed(conn, check="check_l*", host="web0002*").total == sum(
        1 for c in whole["checks"] if c["plugin"].startswith("check_l")
        and c["hostname"].startswith("web0002"))


def test_the_checks_list_grouped_paged_and_listed_with_details(conn, whole):
    by_host = checks_listed(conn, group="host", sort="check")
    assert by_host.groups == dict(sorted(Counter(
        c["hostname"] or c["uuid"] for c in whole["checks"]).items()))
    firsts = problems.page(conn, NOW, problems.CheckFilter(), 0, 5)
    shown = problems.listed(conn, NOW, problems.CheckFilter(), 0, 5)
    assert [(r["uuid"], r["plugin"]) for r in shown.rows] == \
        [(r["uuid"], r["name"]) for r in firsts.rows]
    details = {(c["uuid"], c["plugin"]): c for c in whole["checks"]}
    for row in shown.rows:
        check = details[(row["uuid"], row["plugin"])]
        assert row["output"] == check["output"] and row["last_run"] == check["last_run"]
        assert row["kind"] == "check" and row["check"] == row["plugin"]


def test_the_checks_list_worst_first_is_read_from_the_checks_not_ok_while_it_can(conn, whole):
    """The default order's pages among the checks not OK (and lists of states other than OK)
    are read from those checks alone (``_worst_first``): page after page, they are what
    the list ordered whole shows, with the same total; past them, the whole list is
    ordered."""
    whole_list = checks_listed(conn).rows                       # one page: all ordered
    worse = sum(r["state"] != "OK" for r in whole_list)
    assert 7 < worse < len(whole_list)
    keys = [(r["uuid"], r["name"], r["state"]) for r in whole_list]
    last = (len(keys) - 1) // 7 * 7       # the pages among the not OK, across, past, and last
    for offset in [*range(0, worse + 3 * 7, 7), last]:
        found = problems.page(conn, NOW, problems.CheckFilter(), offset, 7)
        assert found.total == len(whole_list)
        assert [(r["uuid"], r["name"], r["state"]) for r in found.rows] == \
            keys[offset:offset + 7], offset
    assert problems._worst_first(conn, NOW, problems.CheckFilter(), None, 0, 7) is not None
    assert problems._worst_first(conn, NOW, problems.CheckFilter(), None, worse, 7) is None
    for states in (("CRITICAL",), ("PENDING", "WARNING", "UNKNOWN"), ("OK", "CRITICAL")):
        found = problems.page(conn, NOW, problems.CheckFilter(states=states), 2, 5)
        chosen = [k for k in keys if k[2] in states]
        assert found.total == len(chosen)
        assert [(r["uuid"], r["name"], r["state"]) for r in found.rows] == chosen[2:7]
    hosted = problems.page(conn, NOW, problems.CheckFilter(states=("CRITICAL",),
                                                           host="web0002*"), 0, 3)
    assert [(r["uuid"], r["name"]) for r in hosted.rows] == [
        k[:2] for k in keys if k[2] == "CRITICAL"
        and details_of(whole)[k[:2]]["hostname"].startswith("web0002")][:3]


def details_of(whole) -> dict:
    return {(c["uuid"], c["plugin"]): c for c in whole["checks"]}


def test_a_checks_filter_names_the_checks_states_and_lists_all_by_default():
    from starlette.datastructures import QueryParams
    f = problems.CheckFilter.parse(QueryParams("state=ok,pending"))
    assert f.states == ("OK", "PENDING") and f.handled == "all" and f.narrowed
    assert f.query() == [("state", "OK,PENDING")]
    assert not problems.CheckFilter.parse(QueryParams("")).narrowed
    assert problems.CheckFilter.parse(QueryParams("handled=no")).query() == [("handled", "no")]
    with pytest.raises(ValueError, match="state 'DOWN'"):
        problems.CheckFilter.parse(QueryParams("state=down"))
    with pytest.raises(ValueError, match="state 'OK'"):
        problems.Filter.parse(QueryParams("state=ok"))


# ---------------------------------------------------------------- the alerts list in SQL

def test_the_alerts_list_in_sql_is_every_alert_filtered_sorted_and_paged(conn):
    """Every event and every notification no event was made of, once (as
    fleetwatch.store.reads.alert_total counts them), newest first; filtered by severity,
    host glob, check glob and text, sorted by each column, cut into pages that make the
    whole list."""
    from fleetwatch.store import reads
    from query import alerts
    every = alerts.page(conn, limit=None)
    assert every.total == len(every.refs) == reads.alert_total(conn) > 40
    assert len(set(every.refs)) == len(every.refs)
    sources = Counter(source for source, _, _ in every.refs)
    assert sources["event"] and sources["notify"]
    events = {str(e["id"]): e for e in reads.alert_events(conn, limit=None)}
    notes = {n["msg_id"]: n for n in reads.alerts(conn, limit=None)}

    def row(ref):
        source, name, _ = ref
        if source == "event":
            e = events[name]
            return {"received": e["created"], "severity": e["severity"],
                    "hostname": e["hostname"], "check": e["check"], "text": e["summary"]}
        n = notes[name]
        return {"received": n["received_at"], "severity": n["severity"],
                "hostname": n["hostname"], "check": None, "text": n["text"]}
    rows = [row(r) for r in every.refs]
    received = [r["received"] for r in rows]
    assert received == sorted(received, reverse=True)

    def shown(**kwargs):
        return [row(r) for r in alerts.page(conn, alerts.AlertFilter(**kwargs),
                                            limit=None).refs]
    assert shown(severities=("critical", "error")) == [
        r for r in rows if r["severity"] in ("critical", "error")]
    assert shown(host="WEB0002*") == [r for r in rows
                                      if (r["hostname"] or "").startswith("web0002")]
    assert shown(check="check_l*") == [r for r in rows
                                       if (r["check"] or "").startswith("check_l")]
    assert shown(text="DOWN") == [r for r in rows if "down" in " ".join(
        filter(None, (r["hostname"], r["check"], r["text"]))).lower()]
    worst = [alerts.RANK[r["severity"]] for r in shown(sort="severity")]
    assert worst == sorted(worst, reverse=True)
    names = [r["hostname"] or "" for r in shown(sort="-hostname")]
    assert names == sorted(names, reverse=True)
    assert [r["received"] for r in shown(sort="-received")] == sorted(received)
    seen, offset = [], 0
    while True:
        found = alerts.page(conn, alerts.AlertFilter(sort="severity"), offset, 37)
        assert found.total == every.total or not found.refs
        if not found.refs:
            break
        seen += found.refs
        offset += 37
    assert seen == alerts.page(conn, alerts.AlertFilter(sort="severity"), limit=None).refs


def test_an_alert_filter_from_a_url_and_back():
    from starlette.datastructures import QueryParams

    from query import alerts
    f = alerts.AlertFilter.parse(QueryParams("severity=CRITICAL,ok&host=web-*&sort=-received"))
    assert f.severities == ("critical", "ok") and f.sort == "-received"
    assert alerts.AlertFilter.parse(QueryParams(f.query())) == f
    for bad, said in (("severity=fatal", "severity 'fatal'"), ("sort=uuid", "sort 'uuid'"),
                      ("q=a%0Ab", "q: expected one line")):
        with pytest.raises(ValueError, match=said):
            alerts.AlertFilter.parse(QueryParams(bad))


def test_hosts_by_site_and_behind_one(conn, whole):
    uuids, total = pages.hosts(conn, NOW, site="site-paris", limit=1000)
    paris = {a["uuid"] for a in whole["agents"] if (a.get("hostname") or "").startswith("web0002")}
    assert set(uuids) == paris and total == len(paris) > 0
    central, _ = pages.hosts(conn, NOW, site="", limit=10_000)
    assert not set(central) & paris and len(central) + len(paris) == \
        pages.hosts(conn, NOW, limit=10_000)[1]
    groups = {g["site"]: g for g in pages.sites(conn, NOW)}
    assert list(groups) == ["", "site-paris"]
    assert groups["site-paris"]["hosts"] == len(paris)
    assert sum(g["hosts"] for g in groups.values()) == sum(pages.host_counts(conn, NOW).values())


def test_the_tactical_counts_in_sql_are_the_problems_judged(conn, whole):
    expected: dict = {}
    for p in whole["problems"]:
        pair = expected.setdefault((p["kind"], p["state"]), [0, 0])
        pair[1 if handling.is_handled(p["handled"]) else 0] += 1
    assert problems.counts(conn, NOW) == {k: tuple(v) for k, v in expected.items()}
