"""The console's fleet-wide reading (web/console.py): read once for every page asked within
web.refresh seconds, read again when older or changed through the console, and read ahead
while pages are being asked, so that a page does not wait for it; on a real SQLite
database filled as a fleet leaves it."""

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


def test_one_reading_serves_the_pages_of_a_period(engine):
    clock = Clock(100.0)
    c = console(engine, clock)
    first = c.fleet_view()
    assert first["problems"] and first["read_ms"] >= 0
    clock.now += c.every - 0.1
    assert c.fleet_view() is first and c.problems()["unhandled"] == first["unhandled"]
    clock.now += 0.2
    second = c.fleet_view()
    assert second is not first
    c.changed()                                 # an ack made through the console
    assert c.fleet_view() is not second


def test_the_reading_is_kept_ahead_while_pages_are_asked_and_not_after(engine):
    c = console(engine)
    c.every = 0.3
    stop = threading.Event()
    thread = threading.Thread(target=c.refresh, args=(stop, 1.0), daemon=True)
    thread.start()
    try:
        first = c.fleet_view()
        deadline = time.monotonic() + 10
        while c._view[1] is first and time.monotonic() < deadline:
            time.sleep(0.05)                    # (polling the reading, not a sync)
        assert c._view[1] is not first          # read again, no page asked meanwhile
        deadline = time.monotonic() + 10        # nobody asks: it stops reading
        while time.monotonic() - c._asked < 1.0 + 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        idle = c._view[1]
        time.sleep(0.8)
        assert c._view[1] is idle
    finally:
        stop.set()
        thread.join(5)
