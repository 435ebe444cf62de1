"""A history that misses nothing by default (SPEC 4.1, durable routes), with real processes:
a router with its default routing table, the registry, alerting and history sinks, and an
agent whose config says nothing about ACKs. The routers' WELCOME makes NOTIFY and REGISTER
durable for history too; while no history sink is there the agent keeps them, ``status``
says the fleet's durability is degraded, and they land once when one is back. A fleet that
routes nothing to history keeps nothing for it."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from support.fleet import intake_path, landed, wait_for, wait_intake
from support.zmqio import pull, stats_from

pytestmark = pytest.mark.timeout(300)

HISTORY = {"rotate_seconds": 0.5, "ack": True}


def spooled(fleet) -> int:
    """Messages in the agent's spool (its SQLite file, read only)."""
    path = fleet.root / "agent-state" / "spool.db"
    if not path.exists():
        return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    except sqlite3.OperationalError:        # not created yet
        return 0
    finally:
        db.close()


def notify(fleet, texts: list[str]) -> list[str]:
    """Send NOTIFYs through the agent's intake, as a local process does; their msg_ids."""
    from agent.client import Client
    with Client(config_path=str(fleet.root / "agent.yaml"), timeout=10) as fw:
        return [fw.notify(text, severity="warning", source="test") for text in texts]


def recorded(fleet, ids: list[str]) -> int:
    """How many of ``ids`` the alerting sink recorded (each at most once: the primary key)."""
    rows = fleet.db_rows("SELECT msg_id FROM notifications")
    return len({r[0] for r in rows} & set(ids))


def landed_ids(lake: Path) -> list[str]:
    return [ln["msg"]["msg_id"] for ln in landed(lake) if ln["type"] == "NOTIFY"]


def compacted(fleet, router: dict, lake: Path, spark) -> Path:
    """Stop the history sinks (their landing files close), compact the lake as ``fleetwatch
    history compact`` does (its compaction, on this worker's Spark: the command as a process
    is test_history_compact's and test_history_cli's); an operator config naming the lake,
    for the ``history`` commands that read it, run in this process too (``fleet.command``)."""
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.settings import HistorySettings
    for proc in fleet.procs:
        if proc.name == "sink-history":
            proc.stop()
    compact(spark, HistorySettings(lake=str(lake)), out=lambda line: None)
    return fleet.write("history.yaml", {"routers": [router["endpoints"]["control"]],
                                        "history": {"lake": str(lake)}})


def test_history_down_misses_none_and_status_says_so(fleet, tmp_path, spark):
    lake = tmp_path / "lake"
    router = fleet.router()
    fleet.sink("registry", [router])
    fleet.sink("alerting", [router])
    history = fleet.sink("history", [router], history={**HISTORY, "lake": str(lake)})
    # resends 4x as often as by default (first after 0.5 s, then at most every 4 s): the
    # 15 s below see as many resends of each NOTIFY as a minute would (0.5, 1, 2, 4, 4...)
    fleet.agent([router], spool={"ack_timeout": 0.5, "max_backoff": 4.0})
    op = fleet.operator_config([router])
    wait_intake(intake_path(fleet))
    wait_for(lambda: fleet.status(op)["durability"]["state"] == "ok", 20,
             what="every durable route served")
    assert history.stop() == 0

    ids = notify(fleet, [f"outage {n}" for n in range(100)])
    wait_for(lambda: recorded(fleet, ids) == 100, 30, what="the alerting sink recorded all")
    found = fleet.status(op)["durability"]
    assert found["state"] == "degraded"
    assert found["missing"] == [{"type": "NOTIFY", "sink": "history"},
                                {"type": "REGISTER", "sink": "history"}]
    text = fleet.cli("status", "--config", str(op)).stdout
    assert "durability: DEGRADED: no history sink connected to any router" in text
    # a while without a history sink: the agent keeps every one, resends them, and the
    # alerting sink, which has them all, records none twice
    end = time.monotonic() + 15
    while time.monotonic() < end:
        assert spooled(fleet) >= 100
        assert recorded(fleet, ids) == 100
        time.sleep(1)
    assert "no history sink connected" in router["proc"].log()
    alerted = fleet.db_rows("SELECT COUNT(*) FROM alert_events WHERE kind = 'notify'")
    assert alerted[0][0] == 100                              # one alert per NOTIFY

    fleet.sink("history", [router], history={**HISTORY, "lake": str(lake)})
    wait_for(lambda: spooled(fleet) == 0, 60, what="history ACKed every one")
    assert set(ids) <= set(landed_ids(lake))
    # (the router counts a connected sink from its socket monitor's events, read in sweeps)
    wait_for(lambda: fleet.status(op)["durability"]["state"] == "ok", 15, 0.2,
             what="status: durability ok again")

    # compacted, each once, as a user counts them
    cfg = compacted(fleet, router, lake, spark)
    out = fleet.command("history", "sql", "--config", str(cfg), "--json",
                        "SELECT count(*) AS n, count(DISTINCT msg_id) AS d FROM notifications "
                        "WHERE text LIKE 'outage %'").stdout
    assert json.loads(out) == [{"n": 100, "d": 100}]


def test_notifications_in_the_first_second_of_a_fleet_all_reach_the_lake(fleet, tmp_path):
    lake = tmp_path / "lake"
    router = fleet.router()
    for type_ in ("registry", "alerting"):
        fleet.sink(type_, [router])
    fleet.sink("history", [router], history={**HISTORY, "lake": str(lake)})
    fleet.agent([router])
    wait_intake(intake_path(fleet))
    ids = notify(fleet, [f"early {n}" for n in range(20)])   # at once, sinks still starting
    wait_for(lambda: spooled(fleet) == 0, 60, what="every NOTIFY ACKed by both")
    assert set(ids) <= set(landed_ids(lake))
    assert recorded(fleet, ids) == 20


def test_a_fleet_without_history_keeps_nothing_for_it(fleet):
    no_history = {"HELLO": ["registry"], "REGISTER": ["registry"], "HEARTBEAT": ["alerting"],
                  "NOTIFY": ["alerting"], "RESULT": ["alerting"],
                  "DEREGISTER": ["registry", "alerting"], "STATS": []}
    router = fleet.router(routes=no_history)
    fleet.sink("registry", [router])
    fleet.sink("alerting", [router])
    fleet.agent([router])
    op = fleet.operator_config([router])
    wait_intake(intake_path(fleet))
    ids = notify(fleet, [f"plain {n}" for n in range(20)])
    wait_for(lambda: recorded(fleet, ids) == 20 and spooled(fleet) == 0, 30,
             what="every NOTIFY ACKed by alerting, none kept")
    found = fleet.status(op)["durability"]
    assert found["state"] == "ok"
    assert [(r["type"], r["sink"]) for r in found["routes"]] == [("NOTIFY", "alerting"),
                                                                ("REGISTER", "registry")]


def test_a_durable_route_to_a_sink_type_that_is_down_holds_until_it_is_back(fleet):
    """Made durable by the routers' config alone: the registry down, REGISTERs wait."""
    router = fleet.router(durable={"NOTIFY": ["alerting"], "REGISTER": ["registry"]},
                          routes={"REGISTER": ["registry"], "NOTIFY": ["alerting"],
                                  "HELLO": ["registry"], "HEARTBEAT": ["alerting"]})
    fleet.sink("alerting", [router])
    op = fleet.operator_config([router])
    fleet.agent([router])                      # its own REGISTER at start
    wait_intake(intake_path(fleet))
    wait_for(lambda: spooled(fleet) >= 1, 15, what="the agent's REGISTER kept")
    wait_for(lambda: fleet.status(op)["durability"]["missing"] == [
        {"type": "REGISTER", "sink": "registry"}], 15, what="only the registry missing")
    assert fleet.status(op)["durability"]["state"] == "degraded"
    notify(fleet, ["meanwhile"])               # NOTIFY is served: it does not wait
    wait_for(lambda: spooled(fleet) == 1, 15, what="only the REGISTER kept")
    fleet.sink("registry", [router])
    wait_for(lambda: spooled(fleet) == 0, 30, what="the REGISTER ACKed")
    rows = fleet.db_rows("SELECT hostname FROM agents")
    assert rows == [("agent-host",)]           # landed once
    # (the router counts a connected sink from its socket monitor's events, read in sweeps)
    wait_for(lambda: fleet.status(op)["durability"]["state"] == "ok", 15, 0.2,
             what="status: durability ok again")


def test_what_a_router_dropped_for_a_host_reaches_the_lake_and_gaps_says_so(fleet, tmp_path,
                                                                           zctx, spark):
    """No alerting sink, and the history sink down a while: the router drops the agent's
    heartbeats for both, keeps the count per agent while history is away, and the lake
    has them once it is back: ``history gaps`` tells "dropped" from "no data"."""
    lake = tmp_path / "lake"
    start = time.time()
    router = fleet.router()
    # the router's own STATS, read as the graphite sink would
    graphite = pull(zctx, router["endpoints"]["sinks"]["graphite"])
    history = fleet.sink("history", [router], history={**HISTORY, "lake": str(lake)})
    # (the agent's HELLO names the host in the lake, and is not resent: history first)
    stats_from(graphite, lambda m: m["router.sinks.history"] == 1)
    fleet.agent([router])
    wait_intake(intake_path(fleet))
    wait_for(lambda: {"HELLO", "HEARTBEAT"} <= {ln["type"] for ln in landed(lake)}, 20,
             what="the agent's HELLO and heartbeats landing")
    assert history.stop() == 0
    # the heartbeats history misses meanwhile are counted per agent and kept
    stats_from(graphite, lambda m: m["router.sinks.history"] == 0
               and m["router.dropped.HEARTBEAT.history"] > 0 and m["router.drops.pending"] >= 2)

    def reported() -> list[dict]:
        return [d for ln in landed(lake) if ln["type"] == "STATS" and ln["uuid"] == router["id"]
                for d in ln["msg"].get("drops", ())]
    fleet.sink("history", [router], history={**HISTORY, "lake": str(lake)})
    wait_for(lambda: any(d["sink"] == "history" and d["type"] == "HEARTBEAT"
                         for d in reported()), 30, what="the router's drops landed")
    cfg = compacted(fleet, router, lake, spark)
    out = fleet.command("history", "gaps", "agent-host", "--config", str(cfg), "--json",
                        "--since", str(int(start) - 60), "--every", "1d").stdout
    (bucket,) = json.loads(out)["buckets"]
    assert bucket["verdict"] == "dropped" and bucket["heartbeats"] > 0
    dropped = {(d["type"], d["sink"]): d["count"] for d in bucket["drops"]}
    assert dropped[("HEARTBEAT", "history")] > 0 and dropped[("HEARTBEAT", "alerting")] > 0
