"""Config reload logic (fleetwatch/reload.py) and what each process's policy makes live,
without sockets: real config classes, real files, the real strict loader."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
import yaml

from fleetwatch import reload
from fleetwatch.config import build
from fleetwatch.reload import IGNORE, LIVE, RESTART, Reloader


def test_the_longest_matching_prefix_decides():
    policy = {"alerting": LIVE, "alerting.tick_interval": RESTART, "graphite": IGNORE}
    assert reload.action("alerting.max_check_attempts", policy) == LIVE
    assert reload.action("alerting.delivery.rules", policy) == LIVE
    assert reload.action("alerting.tick_interval", policy) == RESTART
    assert reload.action("graphite.port", policy) == IGNORE
    assert reload.action("alertingx", policy) == RESTART        # a prefix is a whole node
    assert reload.action("routers", policy) == RESTART          # the default


def agent_cfg(tmp_path, **extra):
    from agent.config import AgentConfig
    return build(AgentConfig, {"routers": ["tcp://127.0.0.1:9"], "state_dir": str(tmp_path),
                               "plugins": {"dirs": [str(tmp_path)]}, **extra})


def test_changes_walk_sections_and_compare_lists_whole(tmp_path):
    old = agent_cfg(tmp_path)
    new = agent_cfg(tmp_path, routers=["tcp://127.0.0.1:10"], log_level="DEBUG",
                    plugins={"dirs": [str(tmp_path)], "max_running": 2,
                             "checks": [{"name": "a", "command": "check_a"}]},
                    local={"names": ["backup-*"]})
    assert reload.changes(old, new) == ["routers", "local.names", "plugins.max_running",
                                        "plugins.checks", "log_level"]
    assert reload.changes(old, old) == []


def test_overlay_takes_live_settings_and_keeps_the_others(tmp_path):
    old = agent_cfg(tmp_path)
    new = agent_cfg(tmp_path, routers=["tcp://127.0.0.1:10"], log_level="DEBUG",
                    spool={"max_messages": 7})
    policy = {"log_level": LIVE, "spool.max_messages": IGNORE}
    mixed = reload.overlay(old, new, policy)
    assert mixed.log_level == "DEBUG" and mixed.spool.max_messages == 7
    assert mixed.routers == old.routers
    assert reload.changes(mixed, new) == ["routers"]


class Process:
    """A process's side of a reload: what ``apply`` received."""

    def __init__(self):
        self.applied: list[tuple] = []

    def apply(self, old, new, changed):
        self.applied.append((old, new, changed))


@pytest.fixture
def setup(tmp_path):
    from scheduler.config import SchedulerConfig
    path = tmp_path / "scheduler.yaml"
    data = {"routers": ["tcp://127.0.0.1:5556"], "state_url": "sqlite:////x.db"}
    path.write_text(yaml.safe_dump(data))
    from fleetwatch.config import load
    running = load(SchedulerConfig, str(path))
    process, counts = Process(), Counter()
    r = Reloader(SchedulerConfig, str(path), running, {"jitter": LIVE, "log_level": LIVE},
                 process.apply, counts=counts, prefix="config.")
    return path, data, r, process, counts


def write(path, data):
    path.write_text(yaml.safe_dump(data))


def test_a_good_file_applies_live_settings_and_warns_for_the_rest_until_restart(setup, caplog):
    path, data, r, process, counts = setup
    write(path, {**data, "jitter": 1.5, "routers": ["tcp://127.0.0.1:6000"]})
    r.request()
    with caplog.at_level(logging.INFO, "fleetwatch.reload"):
        assert r.poll() and not r.poll()                # once per request
    (old, new, changed), = process.applied
    assert changed == ["jitter"] and new.jitter == 1.5 and old.jitter == 5.0
    assert new.routers == ["tcp://127.0.0.1:5556"]     # kept until restart
    assert r.running is new
    warnings = [m for m in caplog.messages if "takes effect at restart" in m]
    assert warnings == ["routers changed: takes effect at restart"]
    assert "applied jitter" in caplog.messages[-1]
    assert counts == {"config.reloads": 1, "config.reload_failed": 0}
    # the same file again: nothing to apply, and the pending restart is said again
    caplog.clear()
    with caplog.at_level(logging.INFO, "fleetwatch.reload"):
        assert r.reload()
    assert len(process.applied) == 1
    assert "routers changed: takes effect at restart" in caplog.messages
    assert "nothing to change now" in caplog.messages[-1]


@pytest.mark.parametrize("text, problem", [
    ("routers: [tcp://127.0.0.1:5556]\njitter: fast\n", "jitter: expected a number"),
    ("routers: [tcp://127.0.0.1:5556]\njiter: 1\n", "jiter: unknown setting"),
    ("routers: [tcp://127.0.0.1:5556\n", "is not valid YAML"),
    ("routers: []\n", "routers: expected at least one router"),
    ("routers: [tcp://127.0.0.1:5556]\njitter: -1\n", "jitter: expected 0 or more"),
])
def test_a_bad_file_changes_nothing_and_is_counted(setup, caplog, text, problem):
    path, data, r, process, counts = setup
    before = r.running
    path.write_text(text)
    r.request()
    with caplog.at_level(logging.ERROR, "fleetwatch.reload"):
        assert r.poll()
    assert process.applied == [] and r.running is before
    assert counts["config.reload_failed"] == 1 and counts["config.reloads"] == 0
    error, = caplog.records
    assert "keeping the running config" in error.message and problem in error.message
    assert str(path) in error.message


def test_new_live_settings_must_fit_those_kept_until_restart(tmp_path, caplog):
    """graphite.reconnect_max is kept until restart; a live reconnect_min above it is
    refused, though the file itself is valid."""
    from sinks.config import SinkConfig
    path = tmp_path / "sink.yaml"
    base = {"routers": ["tcp://127.0.0.1:9"]}
    write(path, base)
    running = build(SinkConfig, base)
    process, counts = Process(), Counter()
    r = Reloader(SinkConfig, str(path), running, {"graphite.reconnect_min": LIVE},
                 process.apply, counts=counts)
    write(path, {**base, "graphite": {"reconnect_min": 40.0, "reconnect_max": 50.0}})
    with caplog.at_level(logging.ERROR, "fleetwatch.reload"):
        assert not r.reload()
    assert process.applied == [] and counts["config.reload_failed"] == 1
    assert "graphite.reconnect_max: expected at least reconnect_min, with the settings " \
           "kept until restart" in caplog.text


def test_a_failure_while_applying_is_logged_and_counted(setup, caplog):
    path, data, r, process, counts = setup

    def broken(old, new, changed):
        raise RuntimeError("bug")
    r.apply = broken
    write(path, {**data, "jitter": 2.0})
    with caplog.at_level(logging.ERROR, "fleetwatch.reload"):
        assert not r.reload()
    assert counts["config.reload_failed"] == 1 and r.running.jitter == 5.0
    assert "failed while applying jitter" in caplog.text


def test_notifier_frames_each_reload(setup):
    path, data, r, process, counts = setup
    sent = []

    class Notifier:
        def reloading(self):
            sent.append("RELOADING")

        def ready(self):
            sent.append("READY")
    r.notifier = Notifier()
    path.write_text("not: [valid")
    r.request()
    r.poll()
    write(path, {**data, "jitter": 3.0})
    r.request()
    r.poll()
    assert sent == ["RELOADING", "READY", "RELOADING", "READY"]


# ---------------------------------------------------------------- per-process policies

def test_sink_policy_ignores_other_types_sections_and_keeps_tick_interval():
    from sinks.alerting.sink import AlertingSink
    from sinks.reload import policy

    class Graphite:
        type = "graphite"
    p = policy(AlertingSink)
    assert reload.action("alerting.delivery.channels", p) == LIVE
    assert reload.action("alerting.max_check_attempts", p) == LIVE
    assert reload.action("alerting.tick_interval", p) == RESTART
    assert reload.action("graphite.port", p) == IGNORE
    assert reload.action("state_url", p) == RESTART and reload.action("batch", p) == LIVE
    g = policy(Graphite)
    assert reload.action("graphite.port", g) == RESTART
    assert reload.action("alerting.max_check_attempts", g) == IGNORE


def test_agent_reload_applies_checks_limits_collectors_intake(tmp_path):
    """agent/reload.py's apply on a real Agent object (its loop not started)."""
    from agent.daemon import Agent
    from agent.spool import Spool

    class Collectors:
        failures = 0
        names = ["load"]

        def select(self, names):
            self.names = list(names)

        def prime(self):
            pass

    base = {"routers": ["tcp://127.0.0.1:9"], "state_dir": str(tmp_path),
            "intake": f"ipc://{tmp_path}/in.sock", "plugins": {"dirs": [str(tmp_path)],
            "checks": [{"name": "a", "command": "check_a"}]}}
    path = tmp_path / "agent.yaml"
    write(path, base)
    from agent.config import AgentConfig
    spool = Spool(str(tmp_path / "spool.db"))
    agent = Agent(build(AgentConfig, base), "5e1f" + "0" * 28, "host", spool, Collectors(),
                  config_path=str(path))
    try:
        write(path, {**base, "stats_interval": 2.0, "collectors": ["cpu", "disk"],
                     "local": {"allow": ["NOTIFY"], "names": ["backup-*"]},
                     "plugins": {"dirs": [str(tmp_path)], "max_running": 1,
                                 "checks": [{"name": "a", "command": "check_a"},
                                            {"name": "b", "command": "check_b",
                                             "interval": 30}]}})
        assert agent.reloader.reload()
        assert agent.cfg.stats_interval == 2.0 and agent.next_stats <= agent.clock() + 2.0
        assert agent.collectors.names == ["cpu", "disk"]
        assert agent.intake.allow == {"NOTIFY"} and agent.intake.names == ("backup-*",)
        assert agent.runner.cfg.max_running == 1 and agent.workers.count == 1
        assert sorted(agent.declared.own) == ["a", "b"]
        registers = [m for m in spool.due(float("inf")) if m.type == "REGISTER"]
        assert registers[-1].get("plugins") == [
            {"name": "a", "interval": 60.0, "timeout": 10.0},
            {"name": "b", "interval": 30.0, "timeout": 10.0}]
        assert agent.counters["agent.config.reloads"] == 1
        # the same checks again: no new REGISTER
        n = len(spool)
        assert agent.reloader.reload() and len(spool) == n
    finally:
        agent.close()


def test_deliverer_takes_new_channels_between_rounds(tmp_path):
    """sinks/alerting/delivery/deliverer.py: a reloaded delivery config replaces the senders only
    when the deliverer's thread looks for it, before a round (here called by hand)."""
    from fleetwatch.store import db
    from sinks.alerting.delivery.deliverer import Deliverer
    from sinks.alerting.delivery.config import DeliveryConfig

    def delivery(*names):
        return build(DeliveryConfig, {"channels": {
            n: {"type": "webhook", "url": f"http://127.0.0.1:9/{n}", "timeout": 2}
            for n in names}, "rules": [{"channels": list(names)}]})
    engine = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    db.create(engine, "alerting")
    try:
        d = Deliverer(engine, delivery("old", "kept"))
        d.resting = {"old": (2, 1e12), "kept": (1, 1e12)}
        d.next_purge = 1e12
        new = delivery("kept", "added")
        d.reconfigure(new)
        assert sorted(d.senders) == ["kept", "old"]          # not within a round
        d._take_config()
        assert sorted(d.senders) == ["added", "kept"] and d.config is new
        assert d.resting == {"kept": (1, 1e12)} and d.next_purge == 0.0
        d._take_config()                                      # once only
        assert d.config is new
    finally:
        engine.dispose()


def test_plugin_workers_grow_and_shrink():
    """agent/execute.py Workers.resize (plugins.max_running reloaded): more threads at once,
    fewer as soon as the extra ones are idle; jobs still all run."""
    from agent.execute import Workers
    from support.fleet import wait_for

    def alive(w):
        return sum(t.is_alive() for t in w.threads)
    workers = Workers(2, lambda job, stop: job * 2)
    workers.start()
    try:
        workers.resize(4)
        assert alive(workers) == 4 and workers.count == 4
        workers.resize(1)
        wait_for(lambda: alive(workers) == 1, 5, what="three threads to end")
        for i in range(5):
            workers.submit(i)
        done = []
        wait_for(lambda: done.extend(workers.finished()) or len(done) == 5, 5, what="5 jobs")
        assert sorted(r for _, r in done) == [0, 2, 4, 6, 8]
    finally:
        workers.close()
