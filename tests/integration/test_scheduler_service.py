"""The scheduler's sender and service with real sockets and a real registry database, in
this process: a test ROUTER plays the routers' control sockets; the registry is written by
the real registry sink class (SQLite here, PostgreSQL in test_postgres.py)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import zmq

from support.fleet import wait_for
from fleetwatch import protocol
from fleetwatch.config import build
from fleetwatch.protocol import Message, Relayed
from scheduler import slots
from scheduler.config import SchedulerConfig
from scheduler.dispatch import Dispatcher
from scheduler.jobs import Run

pytest.importorskip("sqlalchemy")
pytest.importorskip("apscheduler")
pytestmark = pytest.mark.timeout(60)

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
U2 = "b9a1c7d2-0e6f-4b3a-8c9d-2e1f0a3b4c5d"


class ControlStub:
    """A router's control ROUTER: records what arrives, answers HELLO and (optionally) 404."""

    def __init__(self, ctx: zmq.Context, name: str, not_found: bool = False):
        self.name, self.not_found = name, not_found
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.last_endpoint.decode()
        self.runs: list[tuple[float, str, Message]] = []    # (arrival, target, RUN)
        self.hellos: list[Message] = []

    def pump(self, seconds: float = 0.05) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(left * 1000):
                return
            rid, *parts = self.sock.recv_multipart()
            target, msg = protocol.decode_control(parts)
            if msg.type == "HELLO":
                self.hellos.append(msg)
                welcome = protocol.make("WELCOME", self.name, router=self.name, routers=[])
                self.sock.send_multipart([rid, *protocol.encode(welcome)])
            elif msg.type == "RUN":
                self.runs.append((time.time(), target, msg))
                if self.not_found:
                    err = protocol.error(404, "not attached", msg.msg_id, self.name)
                    self.sock.send_multipart([rid, *protocol.encode(err)])

    def wait(self, predicate, timeout: float = 10.0, what: str = "condition"):
        def step():
            self.pump()
            return predicate()
        return wait_for(step, timeout, 0, what)


def run_for(uuid=U1, plugin="load", slot=None, due=None, expires=None, timeout=None) -> Run:
    now = time.time()
    slot = now if slot is None else slot
    return Run(uuid, plugin, slot, slots.command_id(uuid, plugin, slot), timeout,
               now if due is None else due, now + 60 if expires is None else expires)


@pytest.fixture
def stubs(zctx):
    a, b = ControlStub(zctx, "router-a"), ControlStub(zctx, "router-b", not_found=True)
    yield a, b


@pytest.fixture
def dispatcher(stubs, zctx):
    d = Dispatcher([s.endpoint for s in stubs], "sched-test", ctx=zctx, hello_interval=0.2,
                   stats_interval=0.5)
    d.start()
    yield d
    d.stop()


def test_hello_then_each_run_to_every_router(stubs, dispatcher):
    a, b = stubs
    for stub in stubs:
        stub.wait(lambda s=stub: s.hellos, what=f"HELLO at {stub.name}")
        assert stub.hellos[0].get("role") == "scheduler"
        assert stub.hellos[0].uuid == "sched-test"
    run = run_for(timeout=7.0)
    dispatcher.submit(run)
    for stub in stubs:
        stub.wait(lambda s=stub: s.runs, what=f"RUN at {stub.name}")
    (_, ta, ma), (_, tb, mb) = a.runs[0], b.runs[0]
    assert ta == tb == U1
    assert ma.msg_id == mb.msg_id            # one message, sent to each router
    assert ma.body["command_id"] == run.command_id and ma.body["plugin"] == "load"
    assert ma.body["slot"] == run.slot and ma.body["timeout"] == 7.0
    # router-b does not have the agent: counted, not logged per message
    wait_for(lambda: (b.pump(), dispatcher.counts["not_found"] == 1)[1], 5, 0,
             "ERROR 404 counted")
    assert dispatcher.counts["runs"] == 1 and dispatcher.counts["sent"] == 2


def test_jitter_holds_a_run_until_due_and_stale_runs_are_dropped(stubs, dispatcher):
    a, _ = stubs
    a.wait(lambda: a.hellos, what="HELLO")
    now = time.time()
    dispatcher.submit(run_for(slot=now - 120, due=now - 100, expires=now - 60))  # stale
    dispatcher.submit(run_for(plugin="later", due=now + 0.4))
    dispatcher.submit(run_for(plugin="now", due=now))
    a.wait(lambda: len(a.runs) == 2, what="two RUNs")
    (t1, _, m1), (t2, _, m2) = a.runs
    assert m1.body["plugin"] == "now" and m2.body["plugin"] == "later"
    assert t2 >= now + 0.4
    assert dispatcher.counts["stale"] == 1


def test_a_submitted_run_wakes_the_sender_only_if_due_before_its_wake_up(zctx):
    """The sender polls until its next due run (or MAX_WAIT); a run due after that is taken
    at that wake-up anyway, so submitting it costs no wake-up; one due before must wake it."""
    import os
    d = Dispatcher(["tcp://127.0.0.1:9"], "sched-test", ctx=zctx)     # not started
    try:
        d._polling, d._wake_at = True, 1000.0
        d.submit(run_for(due=1500.0))
        with pytest.raises(BlockingIOError):
            os.read(d._rfd, 16)
        d.submit(run_for(plugin="soon", due=500.0))
        assert os.read(d._rfd, 16) == b"!"
        d._polling = False                  # busy: it looks at the queue before it polls
        d.submit(run_for(plugin="busy", due=0.0))
        with pytest.raises(BlockingIOError):
            os.read(d._rfd, 16)
    finally:
        d.stop()


def test_runs_due_close_together_all_go_out_each_once(stubs, dispatcher):
    a, _ = stubs
    a.wait(lambda: a.hellos, what="HELLO")
    now = time.time()
    for i in range(200):
        dispatcher.submit(run_for(plugin=f"p{i}", due=now + 0.2 + i * 0.001))
    a.wait(lambda: len(a.runs) == 200, what="200 RUNs")
    assert sorted(m.body["plugin"] for _, _, m in a.runs) == sorted(f"p{i}" for i in range(200))
    assert all(t >= now + 0.2 for t, _, _ in a.runs)         # none before it is due
    assert dispatcher.counts["runs"] == 200


def test_an_absent_router_costs_unsent_not_a_queue(zctx):
    with socket.socket() as held:           # bound, never listening: connections refused
        held.bind(("127.0.0.1", 0))
        endpoint = "tcp://127.0.0.1:%d" % held.getsockname()[1]
        d = Dispatcher([endpoint], "sched-test", ctx=zctx, stats_interval=0.2)
        d.start()
        try:
            for i in range(5):
                d.submit(run_for(plugin=f"p{i}"))
            wait_for(lambda: d.counts["runs"] == 5, 10, what="5 runs taken")
            assert d.counts["unsent"] == 5 and d.counts["sent"] == 0, d.counts
        finally:
            d.stop()


# ---------------------------------------------------------------- service + registry

def register(sink, uuid: str, plugins: list, hostname: str = "web-1", source: str = "agent"):
    msg = protocol.make("REGISTER", uuid, name=source, plugins=plugins, hostname=hostname)
    sink.write([Relayed(uuid, "router-a", msg)])


@pytest.fixture
def registry(tmp_path):
    """The real registry sink class on a SQLite file (its URL as ``registry.url``)."""
    from fleetwatch.store import db
    from sinks.registry import RegistrySink
    url = f"sqlite:///{tmp_path / 'state.db'}"
    sink = RegistrySink(db.engine(url))
    sink.start()
    sink.url = url
    yield sink
    sink.close()


def make_service(registry, stubs, **extra):
    from scheduler.service import Service
    cfg = build(SchedulerConfig, {"routers": [s.endpoint for s in stubs], "id": "sched-test",
                                  "state_url": registry.url, "refresh_interval": 0.2,
                                  "hello_interval": 0.2, "stats_interval": 0.5, **extra})
    return Service(cfg)


def aps_jobs(service) -> dict[str, float]:
    return {j.id: j.trigger.interval_length for j in service.aps.get_jobs()}


def test_refresh_adds_removes_and_reschedules_only_what_changed(registry, stubs):
    service = make_service(registry, stubs)
    try:
        assert not service.refresh()                        # nothing declared yet
        register(registry, U1, [{"name": "load", "interval": 60, "timeout": 10},
                                {"name": "disk", "interval": 300}, "manual"])
        d = service.refresh()
        assert sorted(j.plugin for j in d.added) == ["disk", "load"]
        assert aps_jobs(service) == {f"{U1}|load": 60, f"{U1}|disk": 300}
        assert service.plan.jobs[(U1, "load")].hostname == "web-1"
        before = {j.id: j for j in service.aps.get_jobs()}

        register(registry, U1, [{"name": "load", "interval": 60, "timeout": 20},
                                {"name": "disk", "interval": 120}])
        register(registry, U2, [{"name": "load", "interval": 60}], hostname="db-1")
        d = service.refresh()
        assert [j.key for j in d.added] == [(U2, "load")]
        assert [j.key for j in d.rescheduled] == [(U1, "disk")]
        assert [j.key for j in d.updated] == [(U1, "load")]
        jobs = {j.id: j for j in service.aps.get_jobs()}
        assert jobs[f"{U1}|load"] is not None
        assert jobs[f"{U1}|load"].trigger.start_date == before[f"{U1}|load"].trigger.start_date
        assert jobs[f"{U1}|disk"].trigger.interval_length == 120
        # the trigger starts on the job's slot grid
        start = jobs[f"{U2}|load"].trigger.start_date.timestamp()
        assert start == slots.next_slot(start - 1, slots.phase(U2, "load", 60), 60)

        register(registry, U1, [])
        d = service.refresh()
        assert sorted(d.removed) == [(U1, "disk"), (U1, "load")]
        assert aps_jobs(service) == {f"{U2}|load": 60}
        assert not service.refresh()                        # no change: nothing touched
    finally:
        service.reader.close()


def test_a_broken_database_keeps_the_jobs(registry, stubs, tmp_path):
    service = make_service(registry, stubs)
    register(registry, U1, [{"name": "load", "interval": 60}])
    service.refresh()
    service.reader.close()                  # drop pooled connections to the old file
    registry.close()
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"state.db{suffix}").unlink(missing_ok=True)
    (tmp_path / "state.db").write_bytes(b"this is not a database" * 100)
    assert service.refresh() is None
    assert service.refresh_failed == 1 and len(service.plan.jobs) == 1
    assert aps_jobs(service) == {f"{U1}|load": 60}


def test_service_sends_each_slot_once_on_time(registry, stubs):
    """A 1 s plugin for ~3.5 s: a RUN per slot to each router, ids from the slots."""
    a, b = stubs
    register(registry, U1, [{"name": "tick", "interval": 1, "timeout": 5}])
    service = make_service(registry, stubs, jitter=0.0)
    thread = threading.Thread(target=service.run)
    thread.start()
    try:
        a.wait(lambda: len(a.runs) >= 4, 10, "four RUNs")
        b.wait(lambda: len(b.runs) >= 4, 10, "four RUNs at router-b")
        # router-b's 404s are read by the service's own loop: counted a moment after sent
        wait_for(lambda: service.dispatcher.counts["not_found"] >= 1, 10, 0.02,
                 "router-b's 404 counted")
    finally:
        service.stop()
        thread.join(10)
    assert not thread.is_alive()
    phase = slots.phase(U1, "tick", 1)
    seen = [m.body["slot"] for _, _, m in a.runs]
    assert len(seen) == len(set(seen))                      # each slot once
    for arrival, target, msg in a.runs:
        slot = msg.body["slot"]
        assert target == U1 and abs((slot - phase) - round(slot - phase)) < 1e-6
        assert msg.body["command_id"] == slots.command_id(U1, "tick", slot)
        assert 0 <= arrival - slot < 1.0, "sent in its slot's interval"
    report = service.dispatcher.report()
    assert "fired=" in report and "jobs=1" in report and "sent=" in report
    assert json.dumps(report)
