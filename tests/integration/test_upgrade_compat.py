"""Rolling upgrades: this tree's processes beside the baseline release's, in one fleet.

The baseline is the previous release (the last release tag before this commit, else
CHANGELOG.md's ``Compatibility baseline:``: ``baseline.previous``), run from
its own tree (tests/support/baseline.py). One fleet for the module, of both releases: a
router of each, a third router of the baseline's to upgrade while its agent sends, the
registry sink, an alerting sink of each on one state database (at this tree's revision), a
scheduler of each, an agent of the baseline's on this tree's router and one of this tree's
on the baseline's router, each declaring a check. What a user checks after each step of
an upgrade (docs/operating/upgrading.md, "Mixed fleets"): ``fleetwatch status`` of either
release finds every agent alive and its checks run, every notification is listed once by
``fleetwatch alerts``, a router replaced by this tree's on the same ports loses none, and
an agent's spool of the baseline's is delivered by this tree's agent.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import baseline
from support.baseline import Release, ReleaseFleet
from support.fleet import Fleet, intake_path, wait_for, wait_intake

pytest.importorskip("sqlalchemy")
pytest.importorskip("apscheduler")
pytestmark = pytest.mark.timeout(240)

PLUGIN = "tick"
#: the sink types the routers bind (the default's graphite has no sink here)
SINKS = ("registry", "alerting", "history")
#: what writes the lake's landing files and reads them into its tables
LAKE_CODE = ("fleetwatch/lake", "sinks/history")
HOSTS = {"agent-old": "agent-old-host", "agent-new": "agent-new-host",
         "agent-up": "agent-up-host"}


@dataclass
class Mixed:
    """The module's fleet: ``fleet`` starts this tree's processes, ``old`` the baseline's."""

    fleet: Fleet
    old: ReleaseFleet
    routers: dict[str, dict]        # router-new, router-old, router-up: their ready files
    op: Path                        # the operator config naming the three

    def sinks(self) -> list[dict]:
        return list(self.routers.values())

    def uuid(self, agent: str) -> str:
        path = self.fleet.root / f"{agent}-state" / "uuid"
        return wait_for(lambda: path.exists() and path.read_text().strip(), 15,
                        what=f"{agent}'s uuid")

    def notify(self, agent: str, texts: list[str]) -> list[str]:
        """Send ``texts`` through ``agent``'s intake (this tree's client library); their
        msg_ids."""
        from agent.client import Client
        with Client(config_path=str(self.fleet.root / f"{agent}.yaml"), timeout=10.0) as fw:
            return [fw.notify(text, severity="error") for text in texts]

    def recorded(self, uuid: str) -> list[dict]:
        """The notifications of ``uuid`` that this tree's ``fleetwatch alerts`` lists."""
        return [a for a in self.fleet.alerts(self.op)
                if a["kind"] == "notify" and a["uuid"] == uuid]

    def all_recorded(self, uuid: str, sent: list[str], timeout: float = 60) -> list[dict]:
        """Wait for every msg_id of ``sent`` to be listed; every notification of ``uuid``."""
        return wait_for(lambda: (lambda rows: set(sent) <= {r["msg_id"] for r in rows}
                                 and rows)(self.recorded(uuid)), timeout, 0.3,
                        what=lambda: f"{len(sent)} notifications of {uuid} listed")


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Release:
    rev = baseline.previous()
    reason = baseline.missing(rev)
    if reason:
        pytest.skip(reason)
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent                  # the run's directory, above each worker's
    done = baseline.install(rev, shared)
    # its processes run its code, not this checkout's (both say the same --version)
    assert done.origin().is_relative_to(done.path), done.origin()
    return done


@pytest.fixture(scope="module")
def mixed(release, tmp_path_factory, request):
    fleet = Fleet(tmp_path_factory.mktemp("mixed"))
    old = ReleaseFleet(fleet, release)
    failures = request.session.testsfailed
    try:
        routers = {"router-new": fleet.router("router-new", sink_types=SINKS),
                   "router-old": old.router("router-old", sink_types=SINKS),
                   "router-up": old.router("router-up", sink_types=SINKS)}
        every = list(routers.values())
        fleet.sink("registry", every)
        fleet.sink("alerting", every, name="alerting-new")
        # the new sink brings the database to this tree's revision before the old one starts
        wait_for(lambda: revision(fleet), 30, 0.1, "the state database made")
        old.sink("alerting", every, name="alerting-old")
        old.sink("history", every, name="history-old",
                 history={"lake": str(fleet.root / "lake"), "rotate_seconds": 0.5})
        checks = tick_plugin(fleet.root)
        old.agent([routers["router-new"]], name="agent-old", hostname=HOSTS["agent-old"],
                  plugins=checks)
        fleet.agent([routers["router-old"]], name="agent-new", hostname=HOSTS["agent-new"],
                    plugins=checks)
        old.agent([routers["router-up"]], name="agent-up", hostname=HOSTS["agent-up"])
        old.scheduler([routers["router-new"], routers["router-old"]], name="scheduler-old")
        fleet.scheduler([routers["router-new"], routers["router-old"]], name="scheduler-new")
        yield Mixed(fleet, old, routers, fleet.operator_config(every))
    finally:            # the logs of a failed test, or of a fleet that failed to start
        if request.session.testsfailed > failures or sys.exc_info()[0] is not None:
            print(fleet.logs())
        fleet.stop_all()


def tick_plugin(root: Path) -> dict:
    """The agents' ``plugins`` section: one check, ``tick``, every second."""
    folder = root / "plugins"
    folder.mkdir(exist_ok=True)
    script = folder / "check_tick"
    script.write_text("#!/bin/sh\necho 'TICK OK | ticks=1'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"dirs": [str(folder)], "checks": [
        {"name": PLUGIN, "command": "check_tick", "interval": 1, "timeout": 5}]}


def revision(fleet: Fleet) -> str | None:
    """The state database's Alembic revision (None before it is made)."""
    path = fleet.root / "state.db"
    if not path.exists():
        return None
    conn = sqlite3.connect(path, timeout=5)
    try:
        rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()
    return rows[0][0] if rows else None


def alive(doc: dict, *hosts: str) -> dict[str, dict]:
    """The agents of a ``status --json`` document by hostname, when ``hosts`` are all alive
    in it (else {})."""
    agents = {a["hostname"]: a for a in doc["agents"]}
    return agents if all(agents.get(h, {}).get("alive") for h in hosts) else {}


def free_endpoint() -> str:
    """A loopback endpoint nothing listens on (a port the kernel just gave and took back)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def test_status_of_either_release_finds_each_agent_on_the_others_router(mixed):
    """The baseline's agent attached to this tree's router, this tree's to the baseline's,
    both alive in ``fleetwatch status`` of this tree and of the baseline, every router
    answering both; this tree's says the fleet runs both releases."""
    import fleetwatch
    hosts = HOSTS["agent-old"], HOSTS["agent-new"]
    wait_for(lambda: alive(mixed.fleet.status(mixed.op), *hosts), 30, 0.3,
             "both agents alive in this tree's status")
    text = mixed.fleet.command("status", "--config", str(mixed.op)).stdout
    running = [ln for ln in text.splitlines() if re.match(r"\d+ versions: ", ln)]
    if mixed.old.release.version() != fleetwatch.__version__:     # not yet bumped past it
        assert len(running) == 1, text
        assert f"{fleetwatch.__version__} (" in running[0], running
        assert f"{mixed.old.release.version()} (" in running[0], running   # its agents'
    for cli in (mixed.fleet, mixed.old):
        doc = json.loads(cli.command("status", "--config", str(mixed.op), "--json").stdout)
        agents = alive(doc, *hosts)
        assert agents, doc["agents"]
        assert agents[HOSTS["agent-old"]]["routers"] == ["router-new"]
        assert agents[HOSTS["agent-new"]]["routers"] == ["router-old"]
        assert sorted(r["id"] for r in doc["routers"] if r["reachable"]) == \
            sorted(mixed.routers)


def test_each_agents_notifications_are_listed_once_by_either_release(mixed):
    """Notifications of the baseline's agent through this tree's router, and of this tree's
    agent through the baseline's, recorded once each (two alerting sinks, one of each
    release, share them), listed alike by ``fleetwatch alerts`` of either release."""
    sent = {}
    for agent, router in (("agent-old", "router-new"), ("agent-new", "router-old")):
        wait_intake(intake_path(mixed.fleet, agent))
        sent[agent] = mixed.notify(agent, [f"{agent} says {i}" for i in range(20)])
        rows = mixed.all_recorded(mixed.uuid(agent), sent[agent])
        assert sorted(r["msg_id"] for r in rows) == sorted(sent[agent])     # once each
        assert {(r["router"], r["hostname"]) for r in rows} == {(router, HOSTS[agent])}
    listed = json.loads(mixed.old.cli("alerts", "--config", str(mixed.op), "--json",
                                      "--limit", "0").stdout)["alerts"]
    ids = [a["msg_id"] for a in listed if a["kind"] == "notify"]
    assert len(ids) == len(set(ids)) and set(sent["agent-old"]) | set(sent["agent-new"]) \
        <= set(ids)


def test_schedulers_of_either_release_run_the_checks_of_either_agent(mixed):
    """The ``tick`` check of both agents run (RUNs from a scheduler of each release,
    through the router of each) and its result in ``fleetwatch status``."""
    uuids = {mixed.uuid("agent-old"), mixed.uuid("agent-new")}

    def ran():
        checks = mixed.fleet.status(mixed.op)["checks"]
        return {c["uuid"] for c in checks if c["plugin"] == PLUGIN and c["status"] == 0} \
            >= uuids
    wait_for(ran, 60, 0.5, "both agents' tick checks OK")
    for name in ("scheduler-old", "scheduler-new"):        # each scheduled both, and sent
        proc = next(p for p in mixed.fleet.procs if p.name == name)
        wait_for(lambda: re.search(r"counters: .*jobs=2 .*sent=[1-9]", proc.log()), 30, 0.2,
                 f"{name}'s two jobs sent")
        assert proc.alive(), proc.log()


def test_the_old_alerting_sink_alone_records_on_the_new_schema(mixed):
    """The state database at this tree's revision; this tree's alerting sink stopped (a
    sink rolled back), the baseline's alone records every notification; this tree's
    started again."""
    from fleetwatch.store import migrations
    assert revision(mixed.fleet) == migrations.HEAD
    new = next(p for p in mixed.fleet.procs if p.name == "alerting-new")
    assert new.stop() == 0
    try:
        wait_intake(intake_path(mixed.fleet, "agent-new"))
        sent = mixed.notify("agent-new", [f"to the old sink {i}" for i in range(10)])
        rows = mixed.all_recorded(mixed.uuid("agent-new"), sent)
        assert len([r for r in rows if r["msg_id"] in sent]) == len(sent)
    finally:
        mixed.fleet.procs.remove(new)
        mixed.fleet.sink("alerting", mixed.sinks(), name="alerting-new")
    old = next(p for p in mixed.fleet.procs if p.name == "alerting-old")
    assert old.alive() and "Traceback" not in old.log(), old.log()


def test_a_router_upgraded_mid_stream_loses_no_notification(mixed):
    """The baseline's agent sends notifications through the baseline's router-up, about
    200 a second; router-up stops and this tree's starts on the same ports with the same
    id, while the agent sends on, and a hundred more after: every one is listed once, the
    agent alive on the new router."""
    info = mixed.routers["router-up"]
    uuid = mixed.uuid("agent-up")
    wait_intake(intake_path(mixed.fleet, "agent-up"))
    sent: list[str] = []
    errors: list[BaseException] = []
    upgraded = threading.Event()

    def send():
        after = 0
        try:
            while after < 100 and len(sent) < 5000:
                sent.extend(mixed.notify("agent-up", [f"mid-stream {len(sent) + j}"
                                                      for j in range(10)]))
                after += 10 if upgraded.is_set() else 0
                time.sleep(0.05)        # a pace (200 a second), not a wait for anything
        except BaseException as e:  # reported by the test's thread
            errors.append(e)
    sender = threading.Thread(target=send)
    sender.start()
    try:
        wait_for(lambda: len(sent) >= 100 or errors, 60, 0.05, "100 notifications sent")
        assert info["proc"].stop() == 0
        stopped = len(sent)
        ends = info["endpoints"]
        mixed.routers["router-up"] = mixed.fleet.router("router-up", sink_types=SINKS, bind={
            "agents": ends["agents"], "control": ends["control"], "tail": ends["tail"],
            "sinks": ends["sinks"]})
        between = len(sent) - stopped
        upgraded.set()
    finally:
        sender.join(120)
    assert not errors, errors
    assert between > 0                  # sent while no router listened
    rows = mixed.all_recorded(uuid, sent, 90)
    assert sorted(r["msg_id"] for r in rows) == sorted(sent)            # none twice
    assert {r["router"] for r in rows} == {"router-up"}
    wait_for(lambda: alive(mixed.fleet.status(mixed.op), HOSTS["agent-up"]), 30, 0.3,
             "agent-up alive on the upgraded router")


def test_an_old_agents_spool_is_delivered_by_the_new_agent(mixed):
    """The baseline's agent with no router to reach spools 30 notifications and stops;
    this tree's agent on the same state directory delivers every one, once, under the same
    uuid."""
    name = "agent-spool"
    agent = mixed.old.agent([{"endpoints": {"agents": free_endpoint()}}], name=name)
    wait_intake(intake_path(mixed.fleet, name))
    uuid = mixed.uuid(name)
    sent = mixed.notify(name, [f"spooled {i}" for i in range(30)])
    assert agent.stop() == 0, agent.log()
    intake_path(mixed.fleet, name).unlink(missing_ok=True)
    mixed.fleet.agent([mixed.routers["router-new"]], name=name)
    rows = mixed.all_recorded(uuid, sent)
    assert sorted(r["msg_id"] for r in rows) == sorted(sent)
    assert mixed.uuid(name) == uuid


def test_the_old_history_sinks_lake_is_compacted_by_this_tree(mixed, request):
    """The notifications of the baseline's agent, landed by the baseline's history sink,
    compacted by this tree's compaction: every one in the notifications table, no line
    bad. Run when the lake's code differs from the baseline's: a compaction costs about 30
    core-seconds, and the same code writing and reading proves nothing more (a lake of the
    layout before this one: test_history_path.py)."""
    differ = baseline.changed(mixed.old.release.rev, *LAKE_CODE)
    if not differ:
        pytest.skip(f"the lake's code ({', '.join(LAKE_CODE)}) is the baseline's "
                    f"({mixed.old.release.rev})")
    spark = request.getfixturevalue("spark")
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.manifest import Lake
    from fleetwatch.lake.query import History
    from fleetwatch.lake.settings import HistorySettings
    lake = mixed.fleet.root / "lake"
    wait_intake(intake_path(mixed.fleet, "agent-old"))
    sent = mixed.notify("agent-old", [f"to the lake {i}" for i in range(20)])

    def closed() -> set[str]:
        """The NOTIFYs' msg_ids in the landing files the sink has closed."""
        landing = Lake(str(lake))
        return {json.loads(line)["msg"]["msg_id"]
                for name in landing.closed_landing()
                for line in (Path(landing.landing) / name).read_text().splitlines()
                if '"NOTIFY"' in line}
    wait_for(lambda: set(sent) <= closed(), 30, 0.2, "the notifications landed and closed")
    summary = compact(spark, HistorySettings(lake=str(lake)), out=lambda line: None)
    assert summary.bad == 0 and summary.rows > 0
    ids = {r["msg_id"] for r in History(spark, str(lake)).notifications.select(
        "msg_id").collect()}
    assert set(sent) <= ids
