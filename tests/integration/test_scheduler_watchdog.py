"""The scheduler's watchdog follows its sender thread: the main loop pings systemd only while
the sender's loop keeps turning, so a sender that hangs (a bug, a blocked call) gets the
process restarted, as a hung main loop would. Against a real datagram socket standing in
for NOTIFY_SOCKET (tests/support/notifysocket.py), with the real Service and Dispatcher."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from fleetwatch import sdnotify
from fleetwatch.config import build
from support.fleet import wait_for
from support.notifysocket import NotifySocket

pytest.importorskip("sqlalchemy")
pytest.importorskip("apscheduler")
pytestmark = pytest.mark.timeout(60)

WATCHDOG = 0.6          # systemd's WatchdogSec: pings every 0.3 s, the sender may lag 0.3 s


@pytest.fixture
def listener():
    sd = NotifySocket()
    yield sd.listener
    sd.close()


def test_a_hung_sender_thread_stops_the_watchdog_pings(tmp_path, zctx, listener, caplog):
    from scheduler.config import SchedulerConfig
    from scheduler.jobs import Run
    from scheduler.service import Service

    cfg = build(SchedulerConfig, {"routers": ["tcp://127.0.0.1:9"], "id": "sched-hang",
                                  "state_url": f"sqlite:///{tmp_path / 'state.db'}",
                                  "refresh_interval": 0.2})
    notifier = sdnotify.Notifier(str(listener.sock.getsockname()), watchdog=WATCHDOG)
    service = Service(cfg, ctx=zctx, notifier=notifier)
    hung, release = threading.Event(), threading.Event()
    send = service.dispatcher.send

    def blocking_send(run):
        hung.set()
        release.wait(30)
        send(run)
    service.dispatcher.send = blocking_send
    thread = threading.Thread(target=service.run, daemon=True)
    try:
        with caplog.at_level(logging.WARNING, "scheduler.service"):
            thread.start()
            ready_at = listener.first("READY")[0]
            wait_for(lambda: len([t for t in listener.times("WATCHDOG") if t > ready_at]) >= 3,
                     10, what="pings while the sender turns")
            now = time.time()
            service.dispatcher.submit(Run("3f0c" + "0" * 28, "load", now, "s:" + "0" * 24,
                                          None, now, now + 60))
            wait_for(hung.is_set, 10, what="the sender to block")
            hung_at = time.monotonic()
            wait_for(lambda: time.monotonic() > hung_at + 4 * WATCHDOG, 10, what="a hang")
            late = [t for t in listener.times("WATCHDOG") if t > hung_at + WATCHDOG / 2 + 0.05]
            assert late == [], "pinged for a hung sender"
            assert thread.is_alive() and service.dispatcher.alive()
            assert "the sender thread has not turned for" in caplog.text
            release.set()
            wait_for(lambda: [t for t in listener.times("WATCHDOG") if t > hung_at + 4 * WATCHDOG],
                     10, what="pings once the sender turns again")
        assert service.dispatcher.counts["runs"] == 1
    finally:
        release.set()
        service.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert listener.first("STOPPING")


def test_without_a_watchdog_a_slow_sender_is_not_judged(tmp_path, zctx):
    """No WatchdogSec: nothing to ping, so no verdict either way (no log, no error)."""
    from scheduler.config import SchedulerConfig
    from scheduler.service import Service
    cfg = build(SchedulerConfig, {"routers": ["tcp://127.0.0.1:9"],
                                  "state_url": f"sqlite:///{tmp_path / 'state.db'}"})
    service = Service(cfg, ctx=zctx, notifier=sdnotify.Notifier(None))
    service.dispatcher.beat -= 3600
    assert service.watchdog() is True
    service.reader.close()
