"""The console's kept readings (web/console.py): the overview's counts and the lists, each
read once for every page asked within web.refresh seconds, read again when older or
changed through the console, and read ahead while pages are being asked, so that a page
does not wait for them; on a real SQLite database filled as a fleet leaves it."""

from __future__ import annotations

import sys
import threading
import time

import pytest

pytest.importorskip("fastapi")

from support import ROOT  # noqa: E402
sys.path.append(str(ROOT / "bench"))   # last: bench/web.py is not web/
import webfill  # noqa: E402

from fleetwatch.cli.operator import OperatorConfig  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from web.console import Console  # noqa: E402
from support.clock import Clock  # noqa: E402


@pytest.fixture
def engine(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    webfill.fill(url, 60, 3, time.time())
    engine = db.engine(url, writer=False)
    yield url, engine
    engine.dispose()


def console(engine, monotonic=time.monotonic) -> Console:
    url, eng = engine
    config = OperatorConfig(routers=["tcp://127.0.0.1:9"], state_url=url)
    return Console(config, eng, lambda: [], None, monotonic=monotonic)


def test_the_overview_s_counts_are_kept_ahead_while_asked_and_not_after(engine):
    """The overview reads counts and its list in SQL (Console.tally): one reading serves
    the pages of a period, kept ahead while it is asked, not once nobody asks; a change
    made through the console reads it again."""
    c = console(engine)
    c.every = 0.3
    c.routers = lambda: {"routers": [], "durability": None, "router_faults": []}
    stop = threading.Event()
    thread = threading.Thread(target=c.refresh, args=(stop, 1.0), daemon=True)
    thread.start()
    try:
        shown = c.overview()
        assert shown["tactical"]["hosts"] is not None and "unhandled" in shown
        first = c._tally[1]
        deadline = time.monotonic() + 10
        while c._tally[1] is first and time.monotonic() < deadline:
            time.sleep(0.05)                    # (polling the reading, not a sync)
        assert c._tally[1] is not first
        # the pages of a period: one reading (two pages asking at once; again when the
        # thread's reading came in between, as it may on a loaded machine)
        assert any(c.tally() is c.tally() for _ in range(20))
        deadline = time.monotonic() + 10        # nobody asks: it stops reading
        while time.monotonic() - c._asked < 1.0 + 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        idle = c._tally[1]
        time.sleep(0.8)
        assert c._tally[1] is idle
        c.changed()                             # an ack made through the console
        assert c._tally is None and c.tally() is not idle
    finally:
        stop.set()
        thread.join(5)


def test_an_open_page_s_list_is_read_ahead_and_a_closed_one_s_is_not(engine):
    """A list asked for lately (an open page updating itself) is read again before it is
    due, so that its page never waits for a first reading; once nobody asks, it is not."""
    from query import problems
    c = console(engine)
    c.every = 0.3
    stop = threading.Event()
    thread = threading.Thread(target=c.refresh, args=(stop, 1.0), daemon=True)
    thread.start()
    checks = problems.CheckFilter(states=("CRITICAL",))
    try:
        first = c.problem_list(checks)
        key = (checks, 0, 100)
        deadline = time.monotonic() + 10
        while c._lists[key][1] is first and time.monotonic() < deadline:
            time.sleep(0.05)                    # (polling the reading, not a sync)
        assert c._lists[key][1] is not first    # read again, the page not asked meanwhile
        # nobody asks: once no page has asked for ``idle`` seconds (and a reading begun
        # before that has had time to end), it is no longer read
        deadline = time.monotonic() + 10
        while c.monotonic() - c._asked < 1.0 + 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        idle = c._lists[key][1]
        time.sleep(0.8)
        assert c._lists[key][1] is idle
    finally:
        stop.set()
        thread.join(5)


def test_a_list_a_page_is_reading_or_has_just_read_is_not_read_ahead(engine):
    """The read-ahead never reads a list a page is reading at that moment (the same 0.2 s
    reading twice at once, each slowing the other and the pages answered meanwhile), nor
    one a page has read since it was found due; a list due, nobody reading it, it does."""
    from query import problems
    clock = Clock(100.0)
    c = console(engine, clock)
    f = problems.CheckFilter()
    reads, entered, release = [], threading.Event(), threading.Event()
    plain = c._read_list

    def read_list(*args):
        reads.append(threading.current_thread().name)
        if threading.current_thread().name == "page":
            entered.set()
            assert release.wait(10)
        return plain(*args)
    c._read_list = read_list
    c.problem_list(f)                                   # kept at 100
    clock.now += c.every + 1                            # old: the next page reads it again
    page = threading.Thread(target=c.problem_list, args=(f,), name="page")
    page.start()
    try:
        assert entered.wait(10)
        c._warm_lists(30.0)                             # due, but the page is reading it
        assert reads == ["MainThread", "page"]
    finally:
        release.set()
        page.join(10)
    c._warm_lists(30.0)                                 # just read by the page: not due
    assert reads == ["MainThread", "page"]
    clock.now += 0.8 * c.every                          # due, nobody reading: read ahead
    c._warm_lists(30.0)
    assert reads == ["MainThread", "page", "MainThread"]


def test_a_problem_list_serves_its_period_and_a_change_or_a_bulk_reads_it_again(engine,
                                                                              monkeypatch):
    from query import problems
    from web import console as module
    clock = Clock(100.0)
    c = console(engine, clock)
    critical = problems.Filter(states=("CRITICAL",), handled="all")
    first = c.problem_list(critical)
    assert first["rows"] and {r["state"] for r in first["rows"]} == {"CRITICAL"}
    clock.now += c.every - 0.1
    assert c.problem_list(critical) is first                 # the open pages of one view
    assert c.problem_list(critical, fresh=True) is not first  # a bulk change reads now
    other = c.problem_list(problems.Filter(handled="all"), 0, 1)
    assert other is not first and len(other["rows"]) == 1
    clock.now += 0.2
    second = c.problem_list(critical)
    assert second is not first and second["rows"] == first["rows"]
    c.changed()                                 # an ack made through the console
    assert c.problem_list(critical) is not second
    monkeypatch.setattr(module, "LISTS_KEPT", 3)
    for offset in range(5):
        c.problem_list(critical, offset, 1)
    assert len(c._lists) == 3                   # the latest views only


def test_a_hosts_list_serves_its_period_is_read_ahead_and_a_change_reads_it_again(engine):
    """The hosts list is kept as the problem lists are: one reading a period for the open
    pages of one view (a glob and the handled filter, 0.1 s at 10,000 hosts), read ahead
    while a page is open, read again after a change made through the console."""
    clock = Clock(100.0)
    c = console(engine, clock)
    first = c.hosts("*", None, None, 0, "state", None, "no")
    assert first["agents"] and first["total"] == len(first["agents"])
    assert abs(first["read_at"] - time.time()) < 60 and first["read_ms"] >= 0
    clock.now += c.every - 0.1
    assert c.hosts("*", None, None, 0, "state", None, "no") is first
    assert c.hosts("*", "DOWN", None, 0, "state", None, "no") is not first
    clock.now += 0.8 * c.every                  # due: the open page's list is read ahead
    c._warm_lists(30.0)
    ahead = c.hosts("*", None, None, 0, "state", None, "no")
    assert ahead is not first and [a["uuid"] for a in ahead["agents"]] == \
        [a["uuid"] for a in first["agents"]]
    c.changed()
    assert c.hosts("*", None, None, 0, "state", None, "no") is not ahead


def test_the_problems_page_splits_the_handled_list_and_says_when_it_is_cut(tmp_path,
                                                                            monkeypatch):
    """The problems page's sections of handled problems are the handled list (in SQL) split
    by why each is handled; past HANDLED_READ of them the page says it split the worst."""
    import re

    from fastapi.testclient import TestClient

    from query import problems
    from web import pages, store
    from web.app import create_app
    url = f"sqlite:///{tmp_path / 'state.db'}"
    webfill.fill(url, 60, 3, time.time())
    engine = db.engine(url)
    store.create(engine)
    store.add_user(engine, "ann", "viewer", "correct horse battery", "test")
    config = OperatorConfig(routers=["tcp://127.0.0.1:9"], state_url=url)
    c = Console(config, engine, lambda: [], None)
    c.routers = lambda: {"routers": [], "durability": None, "router_faults": []}
    held = c.problem_list(problems.Filter(handled="yes"), 0, 1000)
    acked = sum(1 for r in held["rows"] if (r["handled"] or {}).get("ack"))
    assert held["total"] >= 2 and acked
    try:
        with TestClient(create_app(c, "k" * 48)) as client:
            token = store.add_token(engine, "ann", "t", None, "test")
            auth = {"Authorization": f"Bearer {token}"}
            page = client.get("/problems", headers=auth).text
            assert re.search(rf'id="acknowledged-section">\s*<h2>Acknowledged \({acked}\)',
                             page)
            assert 'id="handled-partial"' not in page
            monkeypatch.setattr(pages, "HANDLED_READ", 1)
            c.changed()
            page = client.get("/problems", headers=auth).text
            assert re.search(rf'id="handled-partial">{held["total"]} problems are handled: '
                             r"the sections below split the 1 worst", page)
    finally:
        engine.dispose()
