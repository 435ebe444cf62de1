"""``fleetwatch status`` over a state database the real sinks wrote, with a fake router:
each agent's checks, and no checks table when there are none."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

import pytest

from fleetwatch import protocol
from fleetwatch.display import human
from support.fakerouter import BackendFacingRouter, relayed

WEB = "a" * 32


def perf(label, value, uom="", warn=None, crit=None, min_=None, max_=None):
    return {"label": label, "value": value, "uom": uom, "warn": warn, "crit": crit,
            "min": min_, "max": max_}


# ---------------------------------------------------------------- status: the command

def test_status_shows_each_agents_checks(fleet):
    pytest.importorskip("sqlalchemy")
    from fleetwatch.store import db
    from sinks.alerting.sink import AlertingSink
    from sinks.registry import RegistrySink
    router = BackendFacingRouter("fake-1", agents=[{"uuid": WEB, "hostname": "web-1", "since": 1.0,
                                           "last_heard": 2.0}])
    try:
        eng = db.engine(fleet.state_url)
        registry, alerting = RegistrySink(eng), AlertingSink(eng)
        registry.start()
        alerting.start()
        now = time.time()
        _, hello = relayed("HELLO", WEB, hostname="web-1", heartbeat=1.0)
        _, reg = relayed("REGISTER", WEB, name="agent", plugins=[
            {"name": "load", "interval": 60, "timeout": 10},
            {"name": "disk", "interval": 300, "timeout": 10}])
        registry.write([protocol.decode_relayed(hello), protocol.decode_relayed(reg)])
        long_text = "CRITICAL - load average: 9.1, 8.0, 7.2 " + "x" * 100
        _, res = relayed("RESULT", WEB, command_id="cli:" + "1" * 24, plugin="load", status=2,
                         output=long_text, long_output="second line",
                         perfdata=[perf("load1", 9.1, "", "4", "8", 0.0)], started=now - 12,
                         duration=0.05)
        alerting.write([protocol.decode_relayed(res)])
        eng.dispose()
        op = fleet.write("fleetwatch.yaml", {"routers": [router.control_endpoint],
                                             "state_url": fleet.state_url, "timeout": 1.0})
        out = json.loads(fleet.cli("status", "--config", str(op), "--json").stdout)
        text = fleet.cli("status", "--config", str(op)).stdout
    finally:
        router.close()
    checks = {c["plugin"]: c for c in out["checks"]}
    assert list(checks) == ["disk", "load"]
    load = checks["load"]
    assert load["uuid"] == WEB and load["hostname"] == "web-1" and load["state"] == "CRITICAL"
    assert load["status"] == 2 and load["output"] == long_text
    assert load["long_output"] == "second line" and load["perfdata"][0]["label"] == "load1"
    assert re.fullmatch(r"1[2-9]s ago", load["ago"]) and load["last_run"].endswith("Z")
    assert checks["disk"]["state"] == "PENDING" and checks["disk"]["ago"] is None
    assert {a["uuid"] for a in out["agents"]} == {WEB}     # the agents list is unchanged
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("AGENT"))
    assert lines[header].split() == ["AGENT", "PLUGIN", "STATE", "TYPE", "ATTEMPT", "LAST_RUN",
                                     "OUTPUT"]
    disk, load_line = lines[header + 1], lines[header + 2]
    assert disk.split()[:4] == ["web-1", "disk", "PENDING", "-"]
    assert load_line.split()[:5] == ["web-1", "load", "CRITICAL", "SOFT", "1/3"]
    ran = datetime.fromisoformat(load["last_run"]).timestamp()         # --json: ISO 8601 UTC
    assert " ".join(load_line.split()[5:8]) == human(ran)               # table: one format
    assert human(ran).endswith(" UTC")
    assert load_line.endswith("...") and "x" * 100 not in load_line


def test_status_without_checks_prints_no_checks_table(fleet):
    router = BackendFacingRouter("fake-1", agents=[{"uuid": WEB, "hostname": "web-1", "since": 1.0,
                                           "last_heard": 2.0}])
    try:
        op = fleet.write("fleetwatch.yaml", {"routers": [router.control_endpoint],
                                             "state_url": fleet.state_url, "timeout": 1.0})
        out = json.loads(fleet.cli("status", "--config", str(op), "--json").stdout)
        text = fleet.cli("status", "--config", str(op)).stdout
    finally:
        router.close()
    assert out["checks"] == [] and "PLUGIN" not in text and "web-1" in text
