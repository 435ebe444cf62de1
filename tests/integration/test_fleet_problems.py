"""``fleetwatch status`` and the console see the whole mesh and the fleet's own faults, with
real processes on 127.0.0.1 (issue 31, items 10 and 11): the operator config names one
router (a seed); a second router started with that seed, which the sinks follow, is listed
by ``status --json``, followed by ``tail`` and shown on the console's overview, health page
and API; the graphite sink
type, bound with no graphite sink, is a problem; once the second router is killed it is a
problem first of all (``status --problems`` in text and JSON, exit 1; the console's
overview; ``/api/v1/problems``) and the durability is no longer said to be ok. A site router
and a scheduler killed are problems of ``status --problems`` as the router they spoke to
tells (item 11)."""

from __future__ import annotations

import json
import re

import pytest

from support.browser import Browser
from support.console import PASSWORD, serve
from support.fleet import wait_for
from support.mesh import backends
from support.sites import central, site

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(120)

#: gossip every 0.5 s, a router dead after 10 of them: a killed router is still in the
#: mesh (live, then a tombstone) for 15 s, when the status commands below run
MESH = {"interval": 0.5, "expire_intervals": 10}
SINK_TYPES = ("registry", "alerting", "graphite")


def routers_of(doc: dict) -> dict[str, dict]:
    return {r["id"] or r["endpoint"]: r for r in doc["routers"]}


def status(fleet, op, *args: str):
    res = fleet.command("status", "--config", str(op), *args, check=False)
    return res.returncode, res.stdout


def test_status_and_the_console_see_the_mesh_and_a_dead_router_is_a_problem(fleet):
    r1 = fleet.router("r1", mesh=MESH, sink_types=SINK_TYPES)
    r2 = fleet.router("r2", mesh={**MESH, "seeds": [r1["endpoints"]["control"]]},
                      sink_types=SINK_TYPES)
    for type_ in ("registry", "alerting"):          # told r1 only: they follow the mesh
        fleet.sink(type_, [r1])
    op = fleet.operator_config([r1])                 # the operator config: the seed only

    def settled():
        doc = fleet.status(op, check=False)
        return doc if routers_of(doc).get("r2", {}).get("reachable") \
            and [f["name"] for f in doc["fleet"]] == ["graphite"] else None
    doc = wait_for(settled, 30, 0.3, what="status seeing r2 and the sinks on both routers")
    assert routers_of(doc)["r2"]["known"] == "live"
    assert routers_of(doc)["r2"]["endpoint"] == r2["endpoints"]["control"]
    assert doc["durability"]["state"] == "ok"
    [graphite] = doc["fleet"]
    assert (graphite["kind"], graphite["state"]) == ("sink", "CRITICAL")
    assert "no graphite sink connected to any router" in graphite["output"]

    # tail follows every router of the mesh too: r2's own STATS, from r2's tail
    res = fleet.cli("tail", "--config", str(op), "--type", "STATS", "--agent", "r2", "--json",
                    "--count", "1", "--timeout", "15", check=False)
    assert json.loads(res.stdout.splitlines()[0])["router"] == "r2", res.stderr

    url = serve(fleet, op)
    b = Browser(url)
    assert b.login("alice", PASSWORD)[0] == 303
    token = fleet.cli("web", "token", "add", "alice", "--label", "t", "--config",
                      str(op)).stdout.strip()
    auth = {"Authorization": f"Bearer {token}"}
    _, _, page = b.request("/")
    assert r2["endpoints"]["control"] in page and 'class="name">graphite<' in page
    assert "durability: ok" in page
    wait_for(lambda: 'class="id">r2<' in b.request("/health")[2], 30, 0.5,
             what="r2's counters on the health page (its tail followed)")
    api = json.loads(b.request("/api/v1/routers", headers=auth)[2])
    assert {r["id"] for r in api["routers"]} == {"r1", "r2"}

    r2["proc"].kill()
    code, out = status(fleet, op, "--problems", "--json")
    doc = json.loads(out)
    assert code == 1                                  # some router did not answer
    assert [(f["kind"], f["name"], f["state"]) for f in doc["fleet"]] == [
        ("router", "r2", "DOWN"), ("sink", "graphite", "CRITICAL")]
    assert "not answering at " + r2["endpoints"]["control"] in doc["fleet"][0]["output"]
    assert doc["durability"]["state"] == "unknown" and doc["durability"]["unanswered"] == ["r2"]
    code, out = status(fleet, op, "--problems")
    lines = out.splitlines()
    assert code == 1 and lines[0].split() == ["WHAT", "NAME", "STATE", "SINCE", "OUTPUT"]
    assert lines[1].split()[:3] == ["router", "r2", "DOWN"]
    assert lines[2].split()[:3] == ["sink", "graphite", "CRITICAL"]
    assert any(line.startswith("durability: unknown: r2 did not answer") for line in lines)
    assert lines[-1].startswith("2 faults of the fleet itself; ")

    def overview_lists_r2():
        page = b.request("/")[2]
        return page if re.search(r'class="problem fleet-router[^"]*">.*?class="name">r2<', page,
                                 re.S) else None
    page = wait_for(overview_lists_r2, 20, 0.5, what="the overview listing r2 as a problem")
    assert page.index('class="name">r2<') < page.index('class="name">graphite<') \
        < page.index('id="problems"')
    assert "durability: ok" not in page and "durability: unknown (r2 not answering)" in page
    problems = json.loads(b.request("/api/v1/problems", headers=auth)[2])
    assert [(f["kind"], f["name"]) for f in problems["fleet"]][:2] == [
        ("router", "r2"), ("sink", "graphite")]
    # the health page's tiles, worst first: r2 down, then the sink type with no sink
    tiles = re.findall(r'<div class="htile health-(\w+)"[^>]*>\s*<span class="hstate">\w+</span>'
                       r' <b>(\w+)</b> <span class="name">([^<]+)<', b.request("/health")[2])
    assert tiles[:2] == [("down", "router", "r2"), ("down", "sink", "graphite")], tiles
    # r1 answers (degraded while it drops what it routes to the missing graphite sink)
    assert [state for state, kind, name in tiles if (kind, name) == ("router", "r1")] in (
        ["ok"], ["degraded"])


def test_a_site_link_lost_and_a_silent_scheduler_are_problems_of_status(fleet):
    """What the central router heard and lost (PEERS ``sites_lost``, ``backends``: SPEC 4.3)
    makes a killed site router and a killed scheduler problems of ``status --problems``,
    which follows no tail; a site that links again is no problem any more."""
    centre = central(fleet, sink_types=("registry", "alerting"))
    for type_ in ("registry", "alerting"):
        fleet.sink(type_, [centre])
    paris = site(fleet, "paris", [centre["endpoints"]["sites"]])
    scheduler = fleet.scheduler([centre], "sched-1", stats_interval=0.5)
    op = fleet.operator_config([centre])

    def fleet_of(doc: dict) -> list[tuple]:
        return [(f["kind"], f["name"], f["state"]) for f in doc["fleet"]]

    def problems(want):
        def look():
            doc = json.loads(status(fleet, op, "--problems", "--json")[1])
            return doc if fleet_of(doc) == want else None
        return look
    wait_for(lambda: "paris" in {a["uuid"] for a in fleet.status(op, check=False)["agents"]},
             30, 0.3, what="paris linked")
    assert fleet_of(wait_for(problems([]), 20, 0.3, what="no fault")) == []

    # the router has heard the scheduler's STATS twice, so it knows their interval (after one
    # it would wait the default interval's silences, longer than the wait below)
    wait_for(lambda: (backends(centre).get("sched-1") or {}).get("every") is not None, 20, 0.2,
             what="the scheduler's interval known to the router")
    paris["proc"].kill()
    scheduler.kill()
    doc = wait_for(problems([("site", "paris", "DOWN"), ("scheduler", "sched-1", "CRITICAL")]),
                   30, 0.3, what="the site and the scheduler as faults")
    assert doc["fleet"][0]["output"].startswith("link lost: router central-1 heard nothing "
                                                "from it for ")
    assert doc["fleet"][1]["output"].endswith("(last through router central-1): the checks "
                                              "it schedules are not run")
    code, out = status(fleet, op, "--problems")
    lines = out.splitlines()
    assert code == 0 and [line.split()[:3] for line in lines[1:3]] == [
        ["site", "paris", "DOWN"], ["scheduler", "sched-1", "CRITICAL"]]

    site(fleet, "paris", [centre["endpoints"]["sites"]])
    wait_for(problems([("scheduler", "sched-1", "CRITICAL")]), 30, 0.3,
             what="paris linked again: no fault")
