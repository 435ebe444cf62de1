"""systemd's notify protocol against a real AF_UNIX datagram socket standing in for systemd.

Unit tests of :mod:`fleetwatch.sdnotify` and the journal log format, then every daemon
(router, agent, sink, scheduler) started as a real process with ``NOTIFY_SOCKET`` and
``WATCHDOG_USEC``: READY once its sockets are bound, WATCHDOG at half the period, STOPPING on
SIGTERM, exit 0. And an agent whose main loop hangs stops pinging.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from support.clock import Clock
from support.fleet import wait_for
from support.notifysocket import Listener
from fleetwatch import logs, sdnotify

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sockdir():
    """A short directory (AF_UNIX paths are limited to 108 bytes)."""
    path = tempfile.mkdtemp(prefix="fwsd", dir="/tmp")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def listen(sockdir):
    made = []

    def make(probe=lambda: None, name="notify.sock"):
        address = name if name.startswith("\0") else str(sockdir / name)
        listener = Listener(address, probe)
        made.append(listener)
        return listener, address
    yield make
    for listener in made:
        listener.close()


# ---------------------------------------------------------------- the module

def test_addresses_and_periods():
    assert sdnotify.address("@fleetwatch/x") == "\0fleetwatch/x"
    assert sdnotify.address("/run/systemd/notify") == "/run/systemd/notify"
    assert sdnotify.address("relative/path") is None
    assert sdnotify.address("") is None and sdnotify.address(None) is None
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "30000000"}) == 30.0
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"},
                                    pid=2) is None   # meant for another process
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "7"},
                                    pid=7) == 2.0
    for bad in ("", "0", "-5", "soon"):
        assert sdnotify.watchdog_period({"WATCHDOG_USEC": bad}) is None


def test_from_env_takes_the_variables_away_from_children():
    env = {"NOTIFY_SOCKET": "/run/x.sock", "WATCHDOG_USEC": "4000000",
           "WATCHDOG_PID": str(os.getpid()), "PATH": "/bin"}
    n = sdnotify.Notifier.from_env(env)
    assert n.enabled and n.interval == 2.0
    assert env == {"PATH": "/bin"}
    kept = {"NOTIFY_SOCKET": "/run/x.sock"}
    sdnotify.Notifier.from_env(kept, unset=False)
    assert kept == {"NOTIFY_SOCKET": "/run/x.sock"}


def test_outside_systemd_everything_is_a_no_op():
    n = sdnotify.Notifier.from_env({})
    assert not n.enabled
    assert n.ready("up") is False and n.stopping() is False
    n.tick()
    assert n.watchdog_timeout() == float("inf") and n.sent == 0 and n._sock is None


def test_messages_reach_a_real_datagram_socket(listen):
    listener, path = listen()
    n = sdnotify.Notifier(path)
    assert n.ready("router r1:\nbound") and n.status("relaying") and n.stopping()
    wait_for(lambda: len(listener.got) == 3, what="three datagrams")
    assert [g[1] for g in listener.got] == [
        {"READY": "1", "STATUS": "router r1: bound"},   # one line: a newline would split it
        {"STATUS": "relaying"}, {"STOPPING": "1"}]
    n.close()


def test_abstract_namespace_socket(listen):
    name = f"fleetwatch-test-{os.getpid()}-{time.monotonic_ns()}"
    listener, _ = listen(name="\0" + name)
    n = sdnotify.Notifier("@" + name)
    assert n.ready()
    assert listener.first("READY")[1] == {"READY": "1"}


def test_a_failed_send_is_counted_not_raised(sockdir, caplog):
    n = sdnotify.Notifier(str(sockdir / "nobody-listens.sock"))
    with caplog.at_level(logging.WARNING, "fleetwatch.sdnotify"):
        assert n.ready() is False and n.stopping() is False
    assert n.errors == 2 and n.sent == 0
    assert len([r for r in caplog.records if "cannot notify systemd" in r.message]) == 1


def test_watchdog_pings_at_half_the_period_only_when_the_loop_ticks(listen):
    listener, path = listen()
    clock = Clock(100.0)
    n = sdnotify.Notifier(path, watchdog=2.0, clock=clock)
    assert n.interval == 1.0 and n.watchdog_timeout() == 0.0
    n.tick()                                  # due at once: the first ping
    n.tick()                                  # not again before the interval
    clock.now += 0.6
    assert n.watchdog_timeout() == pytest.approx(0.4)
    n.tick()
    clock.now += 0.4
    n.tick()                                  # the second ping
    clock.now += 10                           # a loop that hangs calls nothing...
    wait_for(lambda: len(listener.got) == 2, what="two pings")
    assert n.watchdog_timeout() == 0.0        # ...and has nobody pinging for it
    n.tick()
    wait_for(lambda: len(listener.got) == 3, what="the ping after the hang")
    assert all(g[1] == {"WATCHDOG": "1"} for g in listener.got)


def test_a_reload_is_framed_by_reloading_and_ready(listen):
    """RELOADING=1 carries MONOTONIC_USEC (CLOCK_MONOTONIC, as Type=notify-reload wants)."""
    listener, path = listen()
    n = sdnotify.Notifier(path)
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert n.reloading() and n.ready()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    wait_for(lambda: len(listener.got) == 2, what="two datagrams")
    (_, reloading, _), (_, ready, _) = listener.got
    assert reloading.keys() == {"RELOADING", "MONOTONIC_USEC"} and reloading["RELOADING"] == "1"
    assert before <= int(reloading["MONOTONIC_USEC"]) <= after
    assert ready == {"READY": "1"}
    n.close()


# ---------------------------------------------------------------- journal format

def test_journal_stream_gets_priorities_instead_of_timestamps(tmp_path, monkeypatch):
    path = tmp_path / "stderr"
    with open(path, "w") as stream:
        st = os.fstat(stream.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        monkeypatch.setattr(sys, "stderr", stream)
        assert logs.to_journal(stream)
        try:
            logs.setup("DEBUG", "r1")
            log = logging.getLogger("fleetwatch.test")
            log.debug("d")
            log.info("i")
            log.warning("w")
            log.error("e")
            log.critical("c")
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("failed")
        finally:
            logs.setup("WARNING")   # back to a handler on the real stderr
    lines = path.read_text().splitlines()
    assert lines[:5] == ["<7>r1 fleetwatch.test: d", "<6>r1 fleetwatch.test: i",
                         "<4>r1 fleetwatch.test: w", "<3>r1 fleetwatch.test: e",
                         "<2>r1 fleetwatch.test: c"]
    assert lines[5] == "<3>r1 fleetwatch.test: failed"
    # every line of the traceback keeps the record's priority
    assert len(lines) > 6 and all(line.startswith("<3>") for line in lines[5:])
    assert lines[-1] == "<3>ValueError: boom"


def test_a_stream_other_than_the_journal_keeps_timestamps(tmp_path, monkeypatch):
    with open(tmp_path / "a", "w") as a, open(tmp_path / "b", "w") as b:
        st = os.fstat(a.fileno())
        env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert logs.to_journal(a, env) and not logs.to_journal(b, env)
        assert not logs.to_journal(a, {"JOURNAL_STREAM": "garbage"})
        assert not logs.to_journal(a, {})


# ---------------------------------------------------------------- the daemons

WATCHDOG = 1.5      # seconds: systemd would kill a process silent this long


def notify_env(path: str) -> dict:
    return {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": str(int(WATCHDOG * 1e6))}


def check_lifecycle(listener: Listener, proc, observe: float = 2.4):
    """READY first, WATCHDOG at half the period from then on, STOPPING on SIGTERM, exit 0."""
    ready_at, ready, _ = listener.first("READY", 20)
    assert listener.got[0][1] is ready, "READY must be the first notification"
    wait_for(lambda: time.monotonic() >= ready_at + observe, observe + 5, what="pings")
    assert proc.alive(), proc.log()
    pings = [t for t in listener.times("WATCHDOG") if t >= ready_at]
    assert len(pings) >= int(observe / (WATCHDOG / 2)), (pings, proc.log())
    gaps = [b - a for a, b in zip([ready_at, *pings], pings)]
    assert max(gaps) < WATCHDOG, gaps              # never late enough to be killed
    assert sum(gaps[1:]) / max(1, len(gaps) - 1) > WATCHDOG / 2 * 0.6, gaps   # not a flood
    proc.signal(signal.SIGTERM)
    stop_at = listener.first("STOPPING", 15)[0]
    assert proc.popen.wait(15) == 0, proc.log()
    assert stop_at > ready_at
    assert "Traceback" not in proc.log()
    return ready


def router_accepts(info_path: Path) -> bool:
    """The router's ready file is written and its agents port accepts connections."""
    import json
    try:
        endpoint = json.loads(info_path.read_text())["endpoints"]["agents"]
    except (OSError, ValueError, KeyError):
        return False
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def test_router_notifies_ready_watchdog_stopping(fleet, listen):
    ready_file = fleet.root / "router-n.ready.json"
    listener, path = listen(lambda: router_accepts(ready_file))
    cfg = fleet.write("router-n.yaml", {
        "id": "router-n", "ready_file": str(ready_file),
        "bind": {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                 "tail": "tcp://127.0.0.1:*", "sinks": {"registry": "tcp://127.0.0.1:*"}},
        "routes": {"HELLO": ["registry"]}})
    proc = fleet.start("router-n", "router", "--config", str(cfg), env=notify_env(path))
    ready = check_lifecycle(listener, proc)
    assert listener.first("READY")[2] is True, "READY before the sockets were bound"
    assert ready["STATUS"].startswith("router router-n: agents tcp://127.0.0.1:")


def test_agent_notifies_ready_watchdog_stopping(fleet, listen):
    router = fleet.router()
    intake = fleet.root / "agent-state" / "intake.sock"
    listener, path = listen(intake.exists)
    cfg = fleet.agent_config([router], stats_interval=0.3)
    proc = fleet.start("agent", "agent", "--config", str(cfg), env=notify_env(path))
    ready = check_lifecycle(listener, proc)
    assert listener.first("READY")[2] is True, "READY before the intake was bound"
    uuid = (fleet.root / "agent-state" / "uuid").read_text().strip()
    assert ready["STATUS"] == f"agent {uuid} (agent-host)"


def test_sink_notifies_ready_watchdog_stopping_and_acks_before_exit(fleet, listen):
    pytest.importorskip("sqlalchemy")
    from support.fakerouter import BackendFacingRouter, relayed
    router = BackendFacingRouter("fake-1")
    try:
        listener, path = listen()
        cfg = fleet.write("sink-alerting.yaml", {
            "routers": [router.control_endpoint], "state_url": fleet.state_url,
            "name": "sink-alerting", "hello_interval": 0.2})
        proc = fleet.start("sink-alerting", "sink", "alerting", "--config", str(cfg),
                           env=notify_env(path))
        listener.first("READY", 20)
        wait_for(lambda: router.pullers("alerting") >= 1, 15, what="the sink's PULL")
        ids = []
        for i in range(300):
            msg, frames = relayed("NOTIFY", "3f2c" + "0" * 28, severity="warning",
                                  text=f"n{i}")
            router.push("alerting", frames)
            ids.append(msg.msg_id)
        check_lifecycle(listener, proc)
        # SIGTERM drained: whatever the sink committed, it also acknowledged
        with sqlite3.connect(fleet.root / "state.db") as db:
            stored = {r[0] for r in db.execute("SELECT msg_id FROM notifications")}
        assert stored == set(ids)
        assert set(router.acked()) == stored
    finally:
        router.close()


def test_sink_acks_the_batch_in_hand_when_stopped_mid_stream(fleet):
    """SIGTERM while NOTIFYs stream in: each one committed is acknowledged before exit."""
    pytest.importorskip("sqlalchemy")
    import zmq
    from support.fakerouter import BackendFacingRouter, relayed
    router = BackendFacingRouter("fake-1")
    done = threading.Event()

    def pump():
        for i in range(20000):
            if done.is_set():
                return
            try:
                router.push("alerting", relayed("NOTIFY", "3f2c" + "0" * 28,
                                                severity="warning", text=f"n{i}")[1])
            except zmq.Again:       # the sink is gone
                return

    thread = threading.Thread(target=pump, daemon=True)
    try:
        cfg = fleet.write("sink-alerting.yaml", {
            "routers": [router.control_endpoint], "state_url": fleet.state_url,
            "name": "sink-alerting", "hello_interval": 0.2, "batch": 50})
        proc = fleet.start("sink-alerting", "sink", "alerting", "--config", str(cfg))
        wait_for(lambda: router.pullers("alerting") >= 1, 15, what="the sink's PULL")
        thread.start()
        wait_for(lambda: len(router.acked()) >= 300, 15, what="the first ACKs")
        proc.signal(signal.SIGTERM)
        done.set()
        assert proc.popen.wait(15) == 0, proc.log()
        thread.join(10)
        with sqlite3.connect(fleet.root / "state.db") as db:
            stored = {r[0] for r in db.execute("SELECT msg_id FROM notifications")}
        assert len(stored) >= 300
        wait_for(lambda: set(router.acked()) >= stored, 5,
                 what=f"ACKs for all {len(stored)} committed NOTIFYs")
        assert set(router.acked()) == stored
    finally:
        done.set()
        router.close()


def test_scheduler_notifies_ready_watchdog_stopping(fleet, listen):
    pytest.importorskip("apscheduler")
    router = fleet.router()
    listener, path = listen()
    cfg = fleet.scheduler_config([router])
    proc = fleet.start("scheduler", "scheduler", "--config", str(cfg), env=notify_env(path))
    ready = check_lifecycle(listener, proc)
    assert ready["STATUS"] == "scheduler scheduler"


def test_a_hung_agent_loop_stops_pinging(tmp_path, listen):
    """The watchdog is the main loop's: a collection that hangs silences it (systemd would
    restart the agent), though the agent's other threads still run."""
    from agent.config import AgentConfig
    from agent.daemon import Agent
    from agent.spool import Spool
    from fleetwatch.config import build

    class Collectors:
        failures = 0

        def __init__(self):
            self.release = threading.Event()
            self.hung = threading.Event()

        def prime(self):
            pass

        def collect(self):
            self.hung.set()
            self.release.wait(20)
            return {}

    listener, path = listen()
    cfg = build(AgentConfig, {"routers": ["tcp://127.0.0.1:9"], "state_dir": str(tmp_path),
                              "intake": f"ipc://{tmp_path}/in.sock", "stats_interval": 0.8,
                              "plugins": {"dirs": [str(tmp_path)]}})
    collectors = Collectors()
    agent = Agent(cfg, "5e1f" + "0" * 28, "hung-host", Spool(str(tmp_path / "spool.db")),
                  collectors, notifier=sdnotify.Notifier(path, watchdog=0.4))
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        listener.first("READY")
        wait_for(collectors.hung.is_set, 10, what="the collection to hang")
        hung_at = time.monotonic()
        wait_for(lambda: time.monotonic() > hung_at + 1.2, 5, what="a hung second")
        assert thread.is_alive()
        assert [t for t in listener.times("WATCHDOG") if t > hung_at + 0.3] == []
        collectors.release.set()
        wait_for(lambda: [t for t in listener.times("WATCHDOG") if t > hung_at + 1.2], 5,
                 what="pings once the loop runs again")
        assert len([t for t in listener.times("WATCHDOG") if t < hung_at]) >= 2
    finally:
        collectors.release.set()
        agent.stop()
        thread.join(10)
    assert listener.first("STOPPING")


def test_sighup_reload_notifies_reloading_then_ready_and_keeps_pinging(fleet, listen):
    """systemctl reload: the agent re-reads its config between RELOADING=1 and READY=1, a
    good file and a broken one alike, and its watchdog goes on."""
    router = fleet.router()
    listener, path = listen()
    cfg = fleet.agent_config([router])
    proc = fleet.start("agent", "agent", "--config", str(cfg), env=notify_env(path))
    listener.first("READY", 20)

    def reload_once(n: int) -> None:
        proc.signal(signal.SIGHUP)
        wait_for(lambda: len(listener.times("RELOADING")) == n, 10, what=f"RELOADING #{n}")
        wait_for(lambda: len(listener.times("READY")) == n + 1, 10, what=f"READY #{n + 1}")
        assert listener.times("READY")[-1] >= listener.times("RELOADING")[-1]

    text = cfg.read_text()
    cfg.write_text(text + "log_level: DEBUG\n")
    reload_once(1)
    wait_for(lambda: "config reloaded from" in proc.log(), 5, what="the reload's log line")
    cfg.write_text(text + "stats_intervall: 3\n")                 # a typo: refused
    reload_once(2)
    wait_for(lambda: "config reload failed" in proc.log(), 5, what="the refusal's log line")
    assert "stats_intervall: unknown setting" in proc.log()
    last = listener.times("READY")[-1]
    wait_for(lambda: [t for t in listener.times("WATCHDOG") if t > last + WATCHDOG], 10,
             what="pings after the reloads")
    assert proc.alive(), proc.log()
    proc.signal(signal.SIGTERM)
    assert proc.popen.wait(15) == 0, proc.log()
    assert "Traceback" not in proc.log()
