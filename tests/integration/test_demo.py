"""`fleetwatch demo` as a new user runs it: start, look, send, stop; nothing left running."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time

from pathlib import Path

import psutil
import pytest
import yaml

from support.fleet import wait_for
from fleetwatch.cli.demo.switch import missing as switch_missing
from fleetwatch.security import read_certificate
from sinks.alerting.series.config import for_demo as demo_rules
from sinks.graphite.paths import node as sanitise_host

pytestmark = pytest.mark.timeout(120)

#: the processes the demo must stop in time (Prometheus takes about 1.4 s, the OTLP
#: application's exporter is bounded): a Spark job killed after its 5 s on a loaded
#: machine is the supervisor doing its work, not a hang of the demo's own
PROMPT_STOPPERS = ("prometheus-server", "sink-remote_write", "otlp-app")


def stopped_late(log: str) -> list[str]:
    """The demo's "NAME did not stop in" lines of :data:`PROMPT_STOPPERS`."""
    return [line for line in log.splitlines() if "did not stop in" in line
            and line.split()[0] in PROMPT_STOPPERS]


@pytest.mark.timeout(400)         # the warm Spark's start on a loaded machine (check_warm_spark)
def test_demo_runs_a_fleet_and_stops_cleanly(fleet):
    """With CURVE, as make demo runs it (--insecure: the tagged graphite test below)."""
    demo_dir = fleet.root / "demo"
    demo = fleet.start("demo", "demo", "--dir", str(demo_dir), "--heartbeat", "0.5")
    manifest = demo_dir / "demo.json"
    # (the agents start once the sinks are connected to every router: issue 31 item 12)
    wait_for(lambda: manifest.exists() or not demo.alive(), 60, what="demo.json")
    assert demo.alive(), demo.log()
    info = json.loads(manifest.read_text())
    procs = info["processes"]
    assert info["curve"] is True
    check_security_sections(demo_dir, insecure=False)
    assert "CURVE           on: keys in" in demo.log()
    names = {p["name"] for p in procs}
    assert {"router-1", "router-2", "site-1", "carbon", "graphite-web", "prometheus-server",
            "sink-registry", "sink-alerting", "sink-graphite", "sink-history", "sink-prometheus",
            "sink-remote_write", "scheduler", "history-compact", "agent", "agent-site-1",
            "console", "receivers", "otlp-app"} <= names
    switch = switch_planned(demo, info, names)
    assert "Open the console:" in demo.log() and info["console"]["password"] in demo.log()
    for p in procs:
        assert psutil.pid_exists(p["pid"]), p
        assert Path(p["config"]).exists(), p
    op = str(demo_dir / "fleetwatch.yaml")
    agent_cfg = str(demo_dir / "agent.yaml")
    assert "status --config" in demo.log()

    seen = ["(no status yet)"]                 # what status last said, for a failure

    def agent_alive():
        res = fleet.command("status", "--config", op, "--json", check=False)
        if res.returncode != 0:
            seen[0] = f"exit {res.returncode}: {res.stderr[-2000:]}"
            return None
        said = json.loads(res.stdout)
        seen[0] = json.dumps({"agents": [{k: a.get(k) for k in ("hostname", "uuid", "alive",
                                                               "routers", "state")}
                                         for a in said["agents"]],
                              "unanswered": said.get("unanswered")})
        # (not the devices the agent speaks for: their uuids are POLLER@NAME)
        agents = {a["hostname"]: a for a in said["agents"] if "@" not in a["uuid"]}
        # the agent, the site router (a host upstream) and the agent behind it
        return agents if len(agents) == 3 and all(a["alive"] for a in agents.values()) \
            else None
    # (60 s: on a loaded machine the site's agent is heard through two hops of CURVE)
    def logs() -> str:
        out = "".join(f"\n--- {name} ---\n" + (demo_dir / "logs" / f"{name}.log").read_text(
            errors="replace")[-3000:] for name in ("agent-site-1", "site-1"))
        for p in json.loads(manifest.read_text())["processes"]:
            if p["name"] == "agent-site-1":
                try:
                    proc = psutil.Process(p["pid"])
                    wchan = Path(f"/proc/{p['pid']}/wchan").read_text()
                    out += (f"\n--- agent-site-1 pid {p['pid']}: {proc.status()} {wchan} "
                            f"{proc.cpu_times()} {proc.create_time() - time.time():.1f}s "
                            f"threads {proc.num_threads()} {proc.cmdline()}")
                    out += "\n" + Path(f"/proc/{p['pid']}/stack").read_text()
                    spy = Path(sys.executable).with_name("py-spy")
                    if spy.exists():          # (a developer's tool, where installed)
                        out += subprocess.run([str(spy), "dump", "--pid", str(p["pid"])],
                                              capture_output=True, text=True,
                                              timeout=30).stdout
                except (psutil.Error, OSError) as e:
                    out += f"\n--- agent-site-1 pid {p['pid']}: {e!r}"
        return out
    agents = wait_for(agent_alive, 60, interval=0.5,
                      what=lambda: f"the demo agents alive in status; it said {seen[0]}"
                                   f"{logs()}")
    assert set(agents) == {socket.gethostname(), "site-1", "site-1-host"}, agents
    entry = agents[socket.gethostname()]
    assert {"uuid", "hostname", "alive", "last_seen", "routers"} <= set(entry)
    # The agent knows router-1 only; it learns router-2 from WELCOME (the routers are a
    # mesh, each given one seed), and so do the sinks; the site's agent is seen through it.
    wait_for(lambda: sorted((agent_alive() or {}).get(entry["hostname"], {})
                            .get("routers", [])) == ["router-1", "router-2"], 30,
             interval=0.5, what="agent attached to both routers")
    mesh = json.loads(fleet.cli("routers", "--config", op, "--json").stdout)
    assert sorted(mesh["live"]) == ["router-1", "router-2"] and not mesh["disagreements"]

    sent = fleet.cli("send", "notify", "--config", agent_cfg, "--severity", "error",
                     "demo disk on fire").stdout.strip()

    def alerts():
        res = fleet.command("alerts", "--config", op, "--json", check=False)
        found = [a for a in json.loads(res.stdout)["alerts"] if a["msg_id"] == sent] \
            if res.returncode == 0 else []
        return found or None
    found = wait_for(alerts, 30, interval=0.5, what="the notification in alerts")
    assert len(found) == 1
    assert found[0]["text"] == "demo disk on fire"
    assert found[0]["severity"] == "error"
    assert found[0]["uuid"] == entry["uuid"]
    # ... and reached the demo's own receivers, with proof: each send and what it answered
    received = Path(info["alerts"]["received"]["dir"])
    from fleetwatch.cli.demo.receivers import available
    kinds = sorted({"email", "webhook", *available()} - {"pager", "smtp"})
    assert info["alerts"]["channels"] == kinds         # one channel of each type
    assert f"{received}/pager.jsonl" in demo.log()

    def delivered():
        res = fleet.command("alerts", "--config", op, "--deliveries", "--json", check=False)
        sent_ = {d["channel"]: d for d in json.loads(res.stdout)["deliveries"]
                 if d["key"].endswith(f"/notify/{sent}") and d["outcome"] == "sent"} \
            if res.returncode == 0 else {}
        return sent_ if len(sent_) == len(kinds) else None
    proof = wait_for(delivered, 30, interval=0.5, what="the notification sent to every channel")
    assert proof["webhook"]["status"] == "HTTP 202"
    assert proof["webhook"]["message_id"].endswith(f"/notify/{sent}")
    assert proof["email"]["status"] == "SMTP 250"
    posts = [json.loads(line)["body"] for line in
             (received / "pager.jsonl").read_text().splitlines()]
    assert [p for p in posts if p["dedup_key"].endswith(f"/notify/{sent}")]
    queued = proof["email"]["answer"].rpartition(" ")[2]     # "... Ok: queued as 000003"
    assert "demo disk on fire" in (received / "mail" / f"{queued}.eml").read_text()
    slack = [json.loads(line) for line in (received / "slack.jsonl").read_text().splitlines()]
    (posted,) = [m for m in slack if m.get("ts") == proof["slack"]["message_id"].partition(
        "/")[2]]
    assert posted["channel"] == "#ops" and "demo disk on fire" in posted["text"]
    # ... linking to the host's page in the demo's console
    assert f"<{info['console']['url']}hosts/{entry['uuid']}|Open in the console>" in \
        posted["text"]
    pushed = [json.loads(line) for line in (received / "ntfy.jsonl").read_text().splitlines()]
    (note,) = [m for m in pushed if m["id"] == proof["ntfy"]["message_id"]]
    assert "demo disk on fire" in note["title"] and note["actions"][0]["url"] == \
        f"{info['console']['url']}hosts/{entry['uuid']}"
    listed = json.loads(fleet.command("channels", "--config", op, "--json").stdout)
    assert {c["name"]: c["state"] for c in listed["channels"]} == dict.fromkeys(kinds, "ok")
    for kind in set(kinds) - {"email", "webhook"}:     # each receiver kept what it took
        assert "demo disk on fire" in (received / f"{kind}.jsonl").read_text(), kind

    # The scheduler runs the agent's declared checks: bundled ones and Debian's check_users;
    # and the agent polls its devices: demo-switch (snmpd) UP with its snmp and if_lo checks
    # OK, demo-web (the console seen from outside) UP with its http check OK.
    devices = info["devices"]["uuids"]
    said = {}

    def checks_ran():
        res = fleet.command("status", "--config", op, "--json", check=False)
        said.update(json.loads(res.stdout) if res.returncode == 0 else {})
        checks = said.get("checks", [])
        ran = {c["plugin"]: c for c in checks if c["state"] != "PENDING"}
        tcp = [c for c in ran.values() if c["output"].startswith("TCP")]
        return ran if {"disk_root", "users"} <= set(ran) and tcp and \
            devices_up(said, devices) else None
    ran = wait_for(checks_ran, 60, interval=1.0,
                   what=lambda: f"the demo checks run by the scheduler, the devices UP: "
                                f"{devices_of(said, devices)}")
    check_devices(fleet, demo, info, said, entry, switch)
    assert ran["disk_root"]["output"].startswith("DISK"), ran["disk_root"]
    # The demo's rules on series judged the agent's STATS and its checks' perfdata
    # (docs/operating/rules.md): checks rule:NAME of the demo host, in status.
    def rules_judged():
        res = fleet.command("status", "--config", op, "--json", check=False)
        checks = json.loads(res.stdout)["checks"] if res.returncode == 0 else []
        rules = {c["plugin"]: c for c in checks
                 if c["plugin"].startswith("rule:") and c["uuid"] == entry["uuid"]}
        return rules if {"rule:load_high", "rule:carbon_slow"} <= set(rules) else None
    rules = wait_for(rules_judged, 60, interval=1.0, what="the demo's rules in status")
    assert rules["rule:load_high"]["output"].startswith("avg(load.1, 5m) = "), rules
    assert rules["rule:load_high"]["sources"] == ["rules"]
    # ... and its SLO counts the checks' results (docs/operating/slo.md)
    def slo_counted():
        res = fleet.command("slo", "report", "--config", op, "--json", check=False)
        found = json.loads(res.stdout)["slos"] if res.returncode == 0 else []
        return found if found and found[0]["good"] > 0 else None
    (slo,) = wait_for(slo_counted, 60, interval=1.0, what="the demo's SLO counting")
    assert slo["name"] == "checks_ok" and slo["objective"] == 99.0, slo
    assert ran["users"]["output"].startswith("USERS"), ran["users"]
    # The demo's TCP check ran and is no security event: no router logged a failed
    # handshake (a plain client on a CURVE port), which a newcomer would read as a fault.
    for log in sorted((demo_dir / "logs").glob("router-*.log")):
        assert "failed its handshake" not in log.read_text(), log.read_text()

    # A real carbon-cache beside the fleet: the host's stats and check perfdata as whisper
    # files with data in them.
    from fleetwatch.cli.demo.carbon import read_points
    host = sanitise_host(entry["hostname"])
    base = Path(info["carbon"]["whisper_dir"]) / info["carbon"]["prefix"]
    # (the switch's interface traffic too: two polls make a rate)
    for metric in [f"{host}/cpu/percent.wsp", f"{host}/checks/disk_root/status.wsp",
                   *(["demo-switch/if/lo/in_bps.wsp"] if switch else [])]:
        wait_for(lambda: (base / metric).exists(), 60, interval=0.5, what=f"whisper {metric}")
        assert read_points(base / metric, timeout=10), metric
    check_graphite_web(op, info, entry["hostname"])
    check_console(info, entry["hostname"])
    check_prometheus(info, entry["uuid"])
    check_ecosystem(fleet, demo, op, info, entry)

    once = json.loads(fleet.cli("agent", "--once", "--config", agent_cfg).stdout)
    assert any(k.startswith("cpu.") for k in once)
    warm = check_warm_spark(fleet, demo, demo_dir, info)

    demo.signal(signal.SIGTERM)
    demo.popen.wait(60)
    assert demo.popen.returncode == 0, demo.log()
    assert not stopped_late(demo.log()), demo.log()[-3000:]
    wait_for(lambda: not any(psutil.pid_exists(pid) and
                             psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                             for pid in [p["pid"] for p in procs] + warm), 10,
             what="every demo process gone, the warm Spark too")


def check_warm_spark(fleet, demo, demo_dir: Path, info: dict) -> list[int]:
    """The demo's warm Spark (a Spark Connect server it owns, history.remote of its operator
    config): ``history sql`` answers through it, not through a Spark of its own (the
    server's master is local[2]; the command's would be history.master, local[1]), with no
    "starting a local Spark" line; then through the answerer's warm session on it. Its
    start overlaps the checks above: this waits for it only as long as it takes longer than
    they do. Returns its pids (they end with the demo)."""
    if info["warm_spark"] is None:          # without the history and connect extras only
        from fleetwatch.lake.spark import CONNECT_MODULES
        assert not all(importlib.util.find_spec(m) for m in ("pyspark", *CONNECT_MODULES))
        return []
    url = info["warm_spark"]["connect"]
    assert url.startswith("sc://127.0.0.1:")
    assert f"  warm Spark      {url} (history.remote" in demo.log()
    assert yaml.safe_load((demo_dir / "fleetwatch.yaml").read_text())["history"]["remote"] == url
    wait_for(lambda: f"the warm Spark at {url} answers" in demo.log(), 240, 1.0,
             what="the demo's warm Spark up")
    began = time.monotonic()
    res = fleet.cli("history", "sql", "--json", "--config", str(demo_dir / "fleetwatch.yaml"),
                    "SET spark.master", timeout=120)
    took = time.monotonic() - began
    assert json.loads(res.stdout) == [{"key": "spark.master", "value": "local[2]"}], res.stderr
    assert "starting a local Spark" not in res.stderr, res.stderr
    print(f"history sql on the warm Spark: {took:.1f} s")  # about 2 s idle; its own: 20-90 s
    # and the answerer beside it (history serve, history.answerer): history sql is answered
    # in a session it keeps, whose temporary views outlive a command (a command's own
    # session on the warm Spark would have none)
    sock = demo_dir / "history.sock"
    assert f"history serve at {sock}" in demo.log()
    wait_for(lambda: "answering history sql" in (demo_dir / "logs" /
                                                  "history-answerer.log").read_text(),
             120, 0.5, what="the history answerer up")
    op = str(demo_dir / "fleetwatch.yaml")
    fleet.cli("history", "sql", "--config", op, "SELECT count(*) FROM metrics", timeout=120)
    res = fleet.cli("history", "sql", "--json", "--config", op, "SHOW VIEWS", timeout=120)
    assert "metrics" in {v["viewName"] for v in json.loads(res.stdout)}, res.stdout
    from fleetwatch.lake.cluster import Cluster
    return list(Cluster.load(info["warm_spark"]["dir"]).pids.values())


def test_demo_from_a_config_file_with_tagged_graphite_series_draws_the_hosts_graphs(fleet):
    """Every setting from a config file (``--config``): one router, no site, no warm Spark,
    no alert receivers, insecure, and graphite_tags: the graphite sink sends tagged series,
    carbon registers
    them with the demo's graphite-web, the operator config says graphite.tags, and the
    console's host page shows the host's graphs from graphite-web's tag database. A second
    demo in the same directory is refused before it writes anything."""
    import html

    from support.browser import Browser
    demo_dir = fleet.root / "tagged"
    cfg = fleet.write("demo.yaml", {"routers": 1, "sites": 0, "heartbeat": 0.5,
                                    "insecure": True, "graphite_tags": True,
                                    "warm_spark": False, "receivers": False,
                                    "dir": str(demo_dir)})
    demo = fleet.start("demo", "demo", "--config", str(cfg))
    manifest = demo_dir / "demo.json"
    wait_for(lambda: manifest.exists() or not demo.alive(), 60, what="demo.json")
    assert demo.alive(), demo.log()
    info = json.loads(manifest.read_text())
    # the file's settings, each of them: one router, no site (nor its agent), no warm Spark
    # (nor the answerer on it), no receivers (alerts recorded only)
    names = [p["name"] for p in info["processes"]]
    assert info["alerts"] == {"channels": [], "received": None}
    assert "alerts          recorded only" in demo.log()
    assert names == ["router-1", "carbon", "graphite-web", "prometheus-server",
                     *(["snmpd"] if switch_missing() is None else []), "sink-registry",
                     "sink-alerting", "sink-graphite", "sink-history", "sink-prometheus",
                     "sink-remote_write", "scheduler", "history-compact", "agent", "console",
                     "otlp-app"]
    assert info["warm_spark"] is None
    # A second demo in the same directory is refused before it writes anything: the running
    # fleet keeps its configs (and the CLI its ports).
    before = snapshot(demo_dir)
    second = fleet.cli("demo", "--config", str(cfg), check=False)
    assert second.returncode == 1 and second.stdout == ""
    assert len(second.stderr.splitlines()) == 1 and "in use" in second.stderr, second.stderr
    assert snapshot(demo_dir) == before
    assert info["carbon"]["tags"] is True
    # --insecure: no security section anywhere, and the demo says CURVE is off
    assert info["curve"] is False
    check_security_sections(demo_dir, insecure=True)
    assert "CURVE           OFF" in demo.log()
    sink = yaml.safe_load((demo_dir / "sink-graphite.yaml").read_text())
    assert sink["graphite"]["tags"] is True
    carbon_conf = (demo_dir / "carbon" / "conf" / "carbon.conf").read_text()
    assert f"ENABLE_TAGS = True\nGRAPHITE_URL = {info['graphite_web']['url']}\n" in carbon_conf
    assert "/_tagged/ (tagged series fleet.<metric>;host=<host>" in demo.log()
    op = str(demo_dir / "fleetwatch.yaml")

    def agent():
        res = fleet.command("status", "--config", op, "--json", check=False)
        agents = json.loads(res.stdout)["agents"] if res.returncode == 0 else []
        mine = [a for a in agents if a["hostname"] == socket.gethostname()]
        return mine[0] if mine else None    # (not the site's, nor the agent behind it)
    entry = wait_for(agent, 30, interval=0.5, what="the demo agent in status")
    # no host paths: every series of the host is tagged
    assert not (Path(info["carbon"]["whisper_dir"]) / "fleet" /
                sanitise_host(entry["hostname"])).exists()
    check_graphite_web(op, info, entry["hostname"])

    console = info["console"]
    b = Browser(console["url"].rstrip("/"))
    assert b.login(console["user"], console["password"])[0] == 303
    status, _, page = b.request(f"/hosts/{entry['uuid']}")
    assert status == 200 and html.escape(entry["hostname"]) in page
    # the host page's graphs (web/ draws them as host_graphs gives them; checked here as
    # the figures' ids: the SVG's markup is the console's business): CPU in the grid, the
    # checks' states behind the fold
    assert '<figure class="graph graph-host" id="graph-cpu">' in page
    assert page.index('id="graphs-more"') < page.index('id="graph-check-disk_root-status"')
    assert 'id="graphs-status"' not in page and "unknown host" not in page

    # Ctrl-C stops every process in time, Prometheus and the OTLP application too
    demo.signal(signal.SIGINT)
    assert demo.popen.wait(30) == 0, demo.log()
    assert not stopped_late(demo.log()), demo.log()[-3000:]
    assert not [p for p in info["processes"] if psutil.pid_exists(p["pid"]) and
                psutil.Process(p["pid"]).status() != psutil.STATUS_ZOMBIE]


def check_console(info: dict, hostname: str) -> None:
    """The demo's console answers: its user logs in with the printed password, the
    overview counts the hosts and the hosts page lists the demo host."""
    import html

    from support.browser import Browser
    console = info["console"]
    b = Browser(console["url"].rstrip("/"))
    assert b.login(console["user"], console["password"])[0] == 303
    status, _, page = b.request("/")
    assert status == 200 and 'id="host-counts"' in page
    status, _, page = b.request("/hosts")
    assert status == 200 and html.escape(hostname) in page

    # the fleet's own health: every router and the scheduler heard, and a demo that just
    # started shows no problem (issue 31 item 12: the sinks were connected before the
    # agents came, a RUN for an agent of the other router is no fault)
    def heard():
        status, _, body = b.request("/api/v1/health")
        found = json.loads(body) if status == 200 else {}
        routers = {r["id"] for r in found.get("router_stats", [])}
        return found if routers == {"router-1", "router-2", "site-1"} and \
            found.get("schedulers") else None
    found = wait_for(heard, 30, interval=1.0, what="the routers and the scheduler on /health")
    assert [s["id"] for s in found["schedulers"]] == ["scheduler"]
    assert {r["id"]: r["problems"] for r in found["router_stats"]} == {
        "router-1": {}, "router-2": {}, "site-1": {}}
    assert found["schedulers"][0]["problems"] == {} and found["router_drops"] == []


def check_prometheus(info: dict, uuid: str) -> None:
    """The demo's prometheus sink serves the host's stats, labelled with its uuid."""
    import urllib.request

    def scraped():
        with urllib.request.urlopen(info["prometheus"], timeout=10) as res:
            text = res.read().decode()
        return text if f'instance="{uuid}"' in text and "fleetwatch_cpu_percent" in text \
            else None
    wait_for(scraped, 60, interval=1.0, what="the host's stats in the prometheus sink")


def check_ecosystem(fleet, demo, op: str, info: dict, entry: dict) -> None:
    """Issue 36 in the demo, polled together (each is due within a minute of the start):
    Debian's Prometheus' alert, posted to the console, is the check prom:DemoFromPrometheus
    of the demo host (source prometheus); Prometheus has the host's cpu by the remote_write
    sink (docs/operating/remote-write.md names it fleetwatch_cpu_percent, labelled host);
    the demo's rules' states reach it too (fleetwatch_check_status{check="rule:NAME"}); the
    OTLP application's counter is in the prometheus sink as the demo host's, not the
    host.name it claims."""
    import urllib.parse
    import urllib.request

    host, uuid = entry["hostname"], entry["uuid"]
    server = info["prometheus_server"]
    assert server["check"] == "prom:DemoFromPrometheus" and server["host"] == host
    assert info["otlp"]["app"] and info["otlp"]["url"].startswith("http://127.0.0.1:")
    assert f"  otlp            OTLP {info['otlp']['url']} (the agent's OTLP/HTTP intake" \
        in demo.log()
    assert f"  prometheus-server {server['url']}/graph (Debian's Prometheus" in demo.log()
    agent = yaml.safe_load(Path(op).with_name("agent.yaml").read_text())
    assert agent["otlp"]["listen"] == info["otlp"]["url"].removeprefix("http://")

    def alert():
        res = fleet.command("status", "--config", op, "--json", check=False)
        checks = json.loads(res.stdout)["checks"] if res.returncode == 0 else []
        found = [c for c in checks if c["plugin"] == server["check"] and c["uuid"] == uuid]
        return found[0] if found else None

    def remote_written():
        query = urllib.parse.urlencode({"query": "fleetwatch_cpu_percent"})
        with urllib.request.urlopen(f"{server['url']}/api/v1/query?{query}", timeout=10) as r:
            result = json.loads(r.read())["data"]["result"]
        mine = [s for s in result if s["metric"].get("host") == host]
        return mine[0] if mine else None

    def rule_states():
        query = urllib.parse.urlencode({"query": 'fleetwatch_check_status{check=~"rule:.*"}'})
        with urllib.request.urlopen(f"{server['url']}/api/v1/query?{query}", timeout=10) as r:
            result = json.loads(r.read())["data"]["result"]
        return sorted(s["metric"]["check"] for s in result if s["metric"].get("host") == host)

    def otlp_series():
        with urllib.request.urlopen(info["prometheus"], timeout=10) as res:
            lines = res.read().decode().splitlines()
        return [line for line in lines if line.startswith("fleetwatch_shop_orders")
                and 'service_name="demo-shop"' in line] or None

    probes, done = {"alert": alert, "remote": remote_written, "otlp": otlp_series,
                    "rules": rule_states}, {}
    began = time.monotonic()

    def all_there():
        for name, probe in probes.items():
            if name not in done and (got := probe()):
                done[name] = got
        return len(done) == len(probes)
    wait_for(all_there, 60, interval=1.0,
             what=lambda: f"Prometheus' alert, its remote-written cpu and rules' states, and "
                          f"the OTLP series; "
                          f"had only {sorted(done)}")
    print(f"the alert, remote write and OTLP in the demo: {time.monotonic() - began:.1f} s")
    assert done["alert"]["sources"] == ["prometheus"], done["alert"]
    assert done["alert"]["state"] == "WARNING", done["alert"]
    assert done["alert"]["output"] == ("an alert from Prometheus: acknowledge it in the "
                                       "console"), done["alert"]
    assert done["remote"]["metric"]["uuid"] == uuid, done["remote"]
    assert set(done["rules"]) <= {f"rule:{r['name']}" for r in demo_rules()}, done["rules"]
    for line in done["otlp"]:           # the agent's host, whatever the application claims
        assert f'host="{host}"' in line and f'instance="{uuid}"' in line, line
        assert 'host_name="not-this-host.example"' in line, line


def switch_planned(demo, info: dict, names: set[str]) -> bool:
    """Whether the demo runs its switch (snmpd), as it says; where it cannot (no snmpd, no
    pysnmp), it says why in one line."""
    why = switch_missing()
    if why is not None:
        assert f"  devices         demo-switch not running: {why}" in demo.log()
        assert "snmpd" not in names and info["devices"]["switch"] is None
        return False
    port = info["devices"]["switch"]["port"]
    assert "snmpd" in names
    assert f"  devices         demo-switch: snmpd (Net-SNMP) on udp 127.0.0.1:{port}, " \
        in demo.log()
    return True


def devices_of(said: dict, uuids: dict) -> dict:
    """What ``status --json`` said of the demo's devices: name -> its state and its checks'."""
    return {name: ({a["uuid"]: a.get("state") for a in said.get("agents", [])}.get(uuid),
                   {c["plugin"]: c["state"] for c in said.get("checks", [])
                    if c["uuid"] == uuid}) for name, uuid in uuids.items()}


def devices_up(said: dict, uuids: dict) -> bool:
    """The devices UP, demo-switch's snmp and if_lo checks OK, demo-web's http_console OK."""
    want = {"demo-switch": ("snmp", "if_lo"), "demo-web": ("http_console",)}
    return all(state == "UP" and all(checks.get(p) == "OK" for p in want[name])
               for name, (state, checks) in devices_of(said, uuids).items())


def check_devices(fleet, demo, info: dict, said: dict, entry: dict, switch: bool) -> None:
    """The demo agent's devices, UP (:func:`devices_up`): each under its uuid POLLER@NAME,
    its checks' outputs; the switch's interface graph at the URL the demo printed; the
    printed snmptrap line's linkDown an alert of the switch."""
    import shlex
    import shutil
    import urllib.request

    uuids = info["devices"]["uuids"]
    assert uuids == {name: f"{entry['uuid']}@{name}" for name in
                     ["demo-switch"] * switch + ["demo-web"]}, uuids
    checks = {(c["uuid"].rpartition("@")[2], c["plugin"]): c["output"] for c in said["checks"]
              if c["uuid"] in uuids.values()}
    assert checks[("demo-web", "http_console")].startswith("HTTP OK"), checks
    if not switch:
        return
    assert checks[("demo-switch", "if_lo")].startswith("IF OK - lo up"), checks
    assert checks[("demo-switch", "snmp")].startswith("SNMP OK"), checks
    assert "sysName demo-switch" in checks[("demo-switch", "snmp")], checks

    (url,) = [line.split()[0] for line in demo.log().splitlines()
              if "/render?target=fleet.demo-switch.if.*.in_bps" in line]

    def graphed():
        with urllib.request.urlopen(url, timeout=10) as res:
            series = {s["target"]: s["datapoints"] for s in json.loads(res.read())}
        return any(v is not None for v, _ in series.get("fleet.demo-switch.if.lo.in_bps", []))
    wait_for(graphed, 30, interval=1.0, what=f"lo's traffic at {url}")

    trap = info["devices"]["switch"]["trap"]
    assert f"  {trap}   (a linkDown of lo" in demo.log()
    if shutil.which("snmptrap") is None:       # Debian's snmp package: make install has it
        return
    persist = fleet.root / "snmptrap"
    persist.mkdir(exist_ok=True)
    sent = subprocess.run(shlex.split(trap), capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SNMP_PERSISTENT_DIR": str(persist)})
    assert sent.returncode == 0, sent.stderr
    op = info["operator_config"]

    def alerted():
        res = fleet.command("alerts", "--config", op, "--json", check=False)
        return [a for a in json.loads(res.stdout)["alerts"] if a["uuid"] == uuids[
            "demo-switch"] and "linkDown" in a["text"]] if res.returncode == 0 else None
    (alert,) = wait_for(alerted, 30, interval=0.5, what="the linkDown trap's alert")
    assert alert["severity"] == "error" and "SNMPv2c trap from 127.0.0.1" in alert["text"], alert


def check_graphite_web(op: str, info: dict, hostname: str) -> None:
    """The demo's graphite-web answers the render client, from the operator config's
    graphite.url, with the host's stats and its checks' status, as the console reads them."""
    from fleetwatch.cli.operator import OperatorConfig
    from fleetwatch.config import load
    from fleetwatch.graphs import host_graphs

    settings = load(OperatorConfig, op).graphite
    assert settings.url == info["graphite_web"]["url"]
    assert settings.prefix == info["carbon"]["prefix"]
    assert settings.tags is info["carbon"]["tags"]

    seen = []

    def graphs():
        got = host_graphs(settings, hostname, 600)
        keys = {g.key for g in got.graphs}
        seen[:] = [got.status, got.message, sorted(keys)]
        return got if {"cpu", "check-disk_root-status"} <= keys else None
    got = wait_for(graphs, 90, interval=1.0,
                   what=lambda: f"the demo host's graphs from graphite-web (last: {seen})")
    assert got.status == "ok", got
    cpu = next(g for g in got.graphs if g.key == "cpu")
    assert any(v is not None for s in cpu.series for v, _ in s.points)
    assert cpu.svg.startswith("<svg") and ("<polyline" in cpu.svg or "<circle" in cpu.svg)


def check_security_sections(demo_dir, insecure: bool) -> None:
    """Every config has CURVE on with keys that exist and fit its role (or no section)."""
    configs = {p.name: yaml.safe_load(p.read_text()) for p in demo_dir.glob("*.yaml")}
    if insecure:
        assert not any("security" in c for c in configs.values())
        return
    for name, cfg in configs.items():
        sec = cfg["security"]
        assert sec["curve"] is True, name
        if name.startswith(("router-", "site-")):
            assert read_certificate(sec["server_key"], need_secret=True).role == "router"
            if name.startswith("site-"):        # its uplink's key, named by its id
                site = read_certificate(cfg["site"]["key"], need_secret=True)
                assert site.role == "site" and site.name == cfg["id"]
            else:                               # the mesh and the sites it admits
                assert Path(sec["routers"], "fleet.key").exists()
                assert Path(sec["sites"], "site-1.key").exists()
            continue
        own = read_certificate(sec["key"], need_secret=True)
        assert read_certificate(sec["router_key"]).role == "router"
        assert oct(os.stat(sec["key"]).st_mode & 0o777) == "0o600"
        if name.startswith("agent"):            # agent.yaml, agent-site-1.yaml
            state = Path(cfg["state_dir"], "uuid").read_text().strip()
            assert own.role == "agent" and own.uuid == state, name
        else:
            assert own.role == "backend", name


def test_demo_reuses_its_keys_and_its_alert_flags_configure_the_alerting_sink(fleet):
    """Planning twice in one directory keeps every key (no "exists already"); the second
    time with --alert-webhook and --alert-smtp/--alert-to, which become the alerting sink's
    channels (one test: each plan makes the console's user and its token by up to three
    ``fleetwatch web`` commands, about a CPU-second each)."""
    from fleetwatch.cli import demo
    from fleetwatch.cli.demo.plan import backend_names

    root = fleet.root / "again"
    cfg = demo.DemoConfig(dir=str(root), routers=1)
    demo.plan(root, cfg)
    keys = sorted((root / "keys").rglob("*.key*"))
    before = {p: p.read_bytes() for p in keys}
    # fleet, the agent, the site router and the agent behind it, and each back-end client
    # (sinks, scheduler, operator)
    assert len(keys) == 2 * (4 + len(backend_names()))
    flagged = dataclasses.replace(cfg, alert_webhook="http://127.0.0.1:9/hook",
                                  alert_smtp="127.0.0.1:2525", alert_to=["ops@example.org"])
    _, info = demo.plan(root, flagged)
    assert {p: p.read_bytes() for p in sorted((root / "keys").rglob("*.key*"))} == before
    check_security_sections(root, insecure=False)

    assert info["channels"] == ["email", "webhook"] and info["received"] is None
    sink = yaml.safe_load((root / "sink-alerting.yaml").read_text())
    channels = sink["alerting"]["delivery"]["channels"]
    assert channels["webhook"]["url"] == "http://127.0.0.1:9/hook"
    assert channels["email"]["to"] == ["ops@example.org"]
    from fleetwatch.config import load
    from sinks.config import SinkConfig
    loaded = load(SinkConfig, str(root / "sink-alerting.yaml"))   # the sink's own checks
    assert sorted(loaded.alerting.delivery.channels) == ["email", "webhook"]


def test_demo_settings_from_a_config_file_and_flags(fleet):
    bad = fleet.write("demo-bad.yaml", {"routers": 2, "colour": "blue"})
    res = fleet.cli("demo", "--config", str(bad), check=False)
    assert res.returncode == 78
    assert res.stderr.strip().splitlines() == [
        f"fleetwatch demo: {bad}: colour: unknown setting (known here: alert_smtp, alert_to, "
        f"alert_webhook, dir, graphite_tags, heartbeat, insecure, receivers, routers, "
        f"sites, spark_cluster, stats_interval, warm_spark)"]
    res = fleet.cli("demo", "--routers", "0", "--dir", str(fleet.root / "d0"), check=False)
    assert res.returncode == 78 and "routers: expected at least 1" in res.stderr
    res = fleet.cli("demo", "--sites", "-1", "--dir", str(fleet.root / "d0"), check=False)
    assert res.returncode == 78 and "sites: expected 0 to 9" in res.stderr
    # (what good alert flags make: test_demo_reuses_its_keys_and_its_alert_flags_...)
    res = fleet.cli("demo", "--alert-smtp", "nowhere", "--dir", str(fleet.root / "bad"),
                    check=False)
    assert res.returncode == 78
    assert "--alert-smtp: expected HOST:PORT" in res.stderr


def snapshot(root: Path) -> dict:
    """Every config file of a demo directory and demo.json, with their bytes."""
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())
            if p.suffix in (".yaml", ".json")}


def test_a_directory_another_demo_holds_is_refused(fleet):
    """A directory whose demo.lock another process holds is in use: refused in one line,
    nothing written; once that process is gone (killed: no clean-up ran) it is free again."""
    import subprocess
    import sys

    root = fleet.root / "busy"
    root.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'%d\\n' % os.getpid())\n"
         "print('held', flush=True); time.sleep(60)", str(root / "demo.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        (root / "router-1.yaml").write_text("bind: {agents: tcp://127.0.0.1:5555}\n")
        before = {p.name: p.read_bytes() for p in root.iterdir()}
        res = fleet.cli("demo", "--dir", str(root), "--routers", "1", "--for", "5",
                        check=False)
        assert res.returncode == 1, res.stdout + res.stderr
        assert res.stderr.splitlines() == [
            f"fleetwatch demo: {root} is in use by a running demo (pid {holder.pid}): stop "
            f"that demo first (Ctrl-C), or give another --dir"]
        assert {p.name: p.read_bytes() for p in root.iterdir()} == before
    finally:
        holder.kill()
        holder.wait()
    from fleetwatch.cli.demo import hold
    fd = hold(root)                              # a dead holder's lock: the directory is free
    assert isinstance(fd, int)
    os.close(fd)
