"""Checks in ``fleetwatch status`` and the pieces of ``fleetwatch run`` that need no fleet:
state names, ages, perfdata as plugins print it, hostname resolution, the status merge, and
``fleetwatch status`` over a state database the real sinks wrote (fake router)."""

from __future__ import annotations

import re
import time

import pytest

from fleetwatch import protocol
from fleetwatch.display import ago, first_line, state
from plugins.output import perfdata_text, plugin_text
from fleetwatch.actions.checks.exchange import command_id
from fleetwatch.actions.checks.target import Usage, declared_timeout, resolve
from query.fleet import checks_of

pytestmark = pytest.mark.timeout(60)

WEB, DB, OLD = "a" * 32, "b" * 32, "c" * 32


# ---------------------------------------------------------------- display

@pytest.mark.parametrize("status, name", [(0, "OK"), (1, "WARNING"), (2, "CRITICAL"),
                                          (3, "UNKNOWN"), (None, "PENDING"), (7, "UNKNOWN")])
def test_state_names(status, name):
    assert state(status) == name


@pytest.mark.parametrize("age, text", [(0, "0s ago"), (12.7, "12s ago"), (59, "59s ago"),
                                       (60, "1m ago"), (3599, "59m ago"), (3600, "1h ago"),
                                       (86400 * 3 + 5, "3d ago"), (-5, "0s ago")])
def test_ago(age, text):
    assert ago(1000.0 - age, 1000.0) == text


def test_ago_of_nothing():
    assert ago(None, 1.0) is None


def test_first_line():
    assert first_line("OK - fine\nmore") == "OK - fine"
    assert first_line("x" * 80, 10) == "x" * 7 + "..."
    assert first_line(None) == ""


def perf(label, value, uom="", warn=None, crit=None, min_=None, max_=None):
    return {"label": label, "value": value, "uom": uom, "warn": warn, "crit": crit,
            "min": min_, "max": max_}


@pytest.mark.parametrize("items, text", [
    ([perf("load1", 0.52, "", "4", "8", 0.0)], "load1=0.52;4;8;0"),
    ([perf("/", 12.0, "MB", "80:", "@10:20", 0.0, 100.0)], "/=12MB;80:;@10:20;0;100"),
    ([perf("time", 0.001234, "s")], "time=0.001234s"),
    ([perf("free space", 3.0, "%")], "'free space'=3%"),
    ([perf("it's", 1.0)], "'it''s'=1"),
    ([perf("a=b", None)], "'a=b'=U"),
    ([perf("x", 5.0, "", None, "9")], "x=5;;9"),
    ([perf("big", 1e20)], "big=100000000000000000000"),
    ([perf("inf", float("inf"))], "inf=inf"),
    ([perf("", 1.0), perf("bell\x07", 2.0)], "''=1 'bell\\x07'=2"),
    ([perf("a", 1.0), "junk", {"value": 1}, perf("b", 2.0, "c")], "a=1 b=2c"),
    ("not a list", ""),
])
def test_perfdata_text(items, text):
    assert perfdata_text(items) == text


def test_plugin_text_is_what_the_plugin_printed():
    assert plugin_text("DISK OK", "/ 10%\n/var 20%\n", [perf("/", 10.0, "%")]) == \
        "DISK OK | /=10%\n/ 10%\n/var 20%"
    assert plugin_text("CRITICAL: boom") == "CRITICAL: boom"


# ---------------------------------------------------------------- run: arguments

def test_command_ids_fit_the_id_grammar():
    ids = {command_id() for _ in range(100)}
    assert len(ids) == 100
    for cid in ids:
        assert re.fullmatch(r"cli:[0-9a-f]{24}", cid) and protocol.ID_PATTERN.fullmatch(cid)


def test_resolve_a_uuid_or_a_hostname():
    attached = {WEB: "web-1"}
    registry = {WEB: "web-1", DB: "db-1", OLD: None}
    assert resolve(WEB, attached, registry) == (WEB, "web-1", True)
    assert resolve("db-1", attached, registry) == (DB, "db-1", True)
    assert resolve(OLD, attached, registry) == (OLD, None, True)
    # not known anywhere, but a valid id: taken as a uuid for the routers to judge
    assert resolve("d" * 32, attached, registry) == ("d" * 32, None, False)
    with pytest.raises(Usage, match="neither a known hostname nor a valid uuid"):
        resolve("web/1", attached, registry)


def test_resolve_a_shared_hostname():
    registry = {WEB: "web-1", OLD: "web-1", DB: "web-1"}
    # only one of them attached: that one (an old uuid of a re-minted machine stays behind)
    assert resolve("web-1", {WEB: "web-1"}, registry) == (WEB, "web-1", True)
    with pytest.raises(Usage) as e:
        resolve("web-1", {WEB: "web-1", DB: "web-1"}, registry)
    assert "3 agents" in str(e.value) and f"{WEB} (attached)" in str(e.value)
    assert OLD in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(Usage, match="2 agents"):
        resolve("web-1", {}, {WEB: "web-1", OLD: "web-1"})


def test_the_routers_hostname_counts_for_an_agent_the_registry_has_not_seen():
    assert resolve("new-1", {DB: "new-1"}, {}) == (DB, "new-1", True)


def test_declared_timeout():
    plugins = [{"uuid": WEB, "source": "agent", "name": "load", "spec": {"timeout": 7}},
               {"uuid": WEB, "source": "agent", "name": "odd", "spec": {"timeout": "x"}},
               {"uuid": DB, "source": "agent", "name": "load", "spec": {}}]
    assert declared_timeout(plugins, WEB, "load") == 7.0
    assert declared_timeout(plugins, WEB, "odd") is None
    assert declared_timeout(plugins, DB, "load") is None
    assert declared_timeout(plugins, WEB, "nope") is None


# ---------------------------------------------------------------- status: the merge

def test_checks_of_lists_declared_plugins_with_their_latest_result():
    agents = [{"uuid": DB, "hostname": "db-1"}, {"uuid": WEB, "hostname": "web-1"}]
    declared = [
        {"uuid": WEB, "source": "agent", "name": "load", "spec": {"interval": 60, "timeout": 10}},
        {"uuid": WEB, "source": "agent", "name": "disk", "spec": {}},
        {"uuid": WEB, "source": "backup", "name": "disk", "spec": {"interval": 5}},
        {"uuid": DB, "source": "agent", "name": "pg", "spec": None},
        {"uuid": OLD, "source": "agent", "name": "gone", "spec": {}},   # not an agent shown
    ]
    results = [
        {"uuid": WEB, "plugin": "load", "status": 1, "output": "WARNING - load 5\nmore",
         "long_output": "more", "perfdata": [], "command_id": "s:1", "started": 988.0,
         "last_result": 989.0, "duration": 0.1, "router": "r1"},
        {"uuid": WEB, "plugin": "nosuch", "status": 3, "output": "not declared",
         "started": None, "last_result": 900.0},
        {"uuid": DB, "plugin": "pg", "status": 0, "output": "OK", "started": None,
         "last_result": 700.0},
    ]
    got = checks_of(agents, declared, results, now=1000.0)
    assert [(c["hostname"], c["plugin"], c["state"]) for c in got] == [
        ("db-1", "pg", "OK"), ("web-1", "disk", "PENDING"), ("web-1", "load", "WARNING")]
    pg, disk, load = got
    assert pg["ago"] == "5m ago" and pg["last_run"] == "1970-01-01T00:11:40.000Z"
    assert disk["sources"] == ["agent", "backup"] and disk["ago"] is None
    assert disk["output"] is None and disk["status"] is None
    assert load["ago"] == "12s ago" and load["interval"] == 60 and load["timeout"] == 10
    assert load["command_id"] == "s:1" and load["router"] == "r1"
