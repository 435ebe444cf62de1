"""Prometheus' alerts as checks (sinks/alerting/external): which host and check an alert is
(naming.py, table-driven), and real alerting sinks judging the ``prometheus_alerts`` table on
a fake clock over SQLite (runner.py): two sinks give each transition once; an alert naming no
agent is kept, counted, and becomes a check once the agent registers; a host's checks are
bounded; the worst of one check's alerts wins; an acknowledgement holds the reminders; a
check whose alert vanished from the table recovers. (With a real Prometheus and console:
tests/integration/test_prometheus_alerts.py.)"""

from __future__ import annotations

import pytest

from fleetwatch.config import ConfigError, build
from fleetwatch.store import db, schema
from sinks.alerting.checks.rules import CRITICAL, OK, UNKNOWN, WARNING
from sinks.alerting.config import AlertingConfig
from sinks.alerting.external import naming
from sinks.alerting.external.config import PrometheusAlertsConfig
from support import alertsink
from support.alertsink import T0, WEB
from support.clock import Clock

HOSTS = ["host", "instance"]
OTHER = "b2" * 16


@pytest.mark.parametrize("labels, found", [
    ({"instance": "web-1:9100"}, ("instance", "web-1")),
    ({"instance": "[::1]:9100"}, ("instance", "::1")),
    ({"instance": "web-1"}, ("instance", "web-1")),
    ({"host": "db-1", "instance": "web-1:9100"}, ("host", "db-1")),
    ({"host": "", "instance": "web-1:9100"}, ("instance", "web-1")),
    ({"host": "x:1"}, ("host", "x:1")),           # only instance loses its port
    ({"job": "node"}, None),
])
def test_the_first_host_label_names_the_host(labels, found):
    assert naming.host_of(labels, HOSTS) == found


@pytest.mark.parametrize("name, uuid", [
    ("web-1", "w1"), ("WEB-1", "w1"), ("web-1.example.com", "w1"), ("db", "d1"),
    ("db.example.com", "d1"), ("twin", None), ("twin.example.com", None),
    ("10.0.0.5", None), ("10", None), ("nowhere", None)])
def test_an_agent_is_found_by_its_hostname_or_its_short_name_when_one_has_it(name, uuid):
    hosts = naming.Hosts({"w1": "web-1", "d1": "db.example.com", "t1": "twin.a",
                          "t2": "twin.b", "i1": "10.0.0.9", "n1": None})
    assert hosts.find(name) == uuid


@pytest.mark.parametrize("labels, ignore, check", [
    ({"alertname": "DiskFull", "instance": "w:9100", "severity": "critical"}, [],
     "prom:DiskFull"),
    ({"alertname": "DiskFull", "host": "w", "mountpoint": "/var", "device": "sda1"}, [],
     'prom:DiskFull{device="sda1",mountpoint="/var"}'),
    ({"alertname": "Down", "host": "w", "job": "node", "alertgroup": "g"}, ["job"],
     "prom:Down"),
    ({"alertname": "Q", "host": "w", "path": 'a"b\nc'}, [], 'prom:Q{path="a\\"b\\nc"}'),
    ({"alertname": "Bell\x07", "host": "w"}, [], "prom:Bell\\x07"),
    ({"alertname": "A", "host": "w", "x": "\u202eb\x85"}, [], 'prom:A{x="\\u202eb\\x85"}'),
    ({"host": "w", "x": "1"}, [], 'prom:alert{x="1"}'),
])
def test_the_check_is_the_alertname_and_the_labels_that_tell_its_alerts_apart(labels, ignore,
                                                                              check):
    assert naming.check_of(labels, HOSTS, ignore) == check


def test_a_check_name_too_long_is_cut_and_ended_by_a_digest():
    a = naming.check_of({"alertname": "A", "x": "y" * 300}, HOSTS, [])
    b = naming.check_of({"alertname": "A", "x": "y" * 301}, HOSTS, [])
    assert len(a) == len(b) == naming.MAX_CHECK and a != b and a[-13] == "~"


def test_status_and_output_come_from_severity_and_annotations():
    assert naming.status_of({"severity": "Critical"}, WARNING) == CRITICAL
    assert naming.status_of({"severity": "warning"}, CRITICAL) == WARNING
    assert naming.status_of({"severity": "page"}, UNKNOWN) == UNKNOWN
    assert naming.status_of({}, WARNING) == WARNING
    out, long = naming.outputs({"alertname": "A", "host": "w"},
                               {"summary": "\n  disk \x1b[31mfull\nsecond", "description":
                                "why\x1b\nand how"}, "http://prom/graph")
    assert out == "disk \\x1b[31mfull"
    assert long == "why\\x1b\nand how\nfrom http://prom/graph\nlabels: alertname=A, host=w"
    assert naming.outputs({"alertname": "A"}, {}, "")[0] == "A is firing"


@pytest.mark.parametrize("settings, key", [
    ({"host_labels": []}, "host_labels"), ({"host_labels": ["in-stance"]}, "host_labels"),
    ({"ignore_labels": ["a b"]}, "ignore_labels"), ({"default_status": "ok"}, "default_status"),
    ({"interval": 0}, "interval"), ({"max_per_host": 0}, "max_per_host"),
    ({"max_check_attempts": 0}, "max_check_attempts")])
def test_a_bad_setting_stops_the_sink_naming_it(settings, key):
    with pytest.raises(ConfigError, match=f"alerting.prometheus_alerts.{key}"):
        build(AlertingConfig, {"prometheus_alerts": settings}, "sink.yaml", "alerting")
    assert PrometheusAlertsConfig().default == WARNING


# ---------------------------------------------------------------- real sinks, fake clock
@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A new state database, SQLite and PostgreSQL (the console's and the sinks' SQL)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    pytest.importorskip("psycopg")
    return request.getfixturevalue("pg_cluster").create_database()


@pytest.fixture
def op(url, tmp_path):
    """An operator config over the database at ``url`` (for ``fleetwatch ack``)."""
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: {url}\ntimeout: 0.2\n")
    return path


class Box:
    """The console's side: alerts written to ``prometheus_alerts`` as a post would."""

    def __init__(self, url, clock):
        self.engine, self.clock = db.engine(url), clock

    def put(self, name, ends, host="web-1", starts=T0, **labels):
        from web import alertstore, intake     # (the console's own code, as it posts)
        labels = {k: v for k, v in {"alertname": name, "host": host, **labels}.items()
                  if v is not None}
        alert = intake.Alert(intake.fingerprint(labels), labels, {"summary": f"{name} on "
                                                                  f"{host}"}, starts, ends)
        alertstore.put(self.engine, [alert], self.clock.now, 10_000, "test")

    def forget(self, name):
        t = schema.prometheus_alerts
        with self.engine.begin() as conn:
            gone = [r.fingerprint for r in conn.execute(t.select())
                    if r.labels["alertname"] == name]
            conn.execute(t.delete().where(t.c.fingerprint.in_(gone)))


@pytest.fixture
def started(url):
    """``start(n=1, alerting=None, **prometheus_alerts)``: ``n`` alerting sinks over ``url``
    (web-1 registered) judging every second: (the clock, the console's :class:`Box`, the
    sinks), closed after the test."""
    made = []

    def start(n=1, alerting=None, **prometheus):
        clock = Clock(T0)
        alertsink.hello(url, clock=clock)
        made.extend(alertsink.sink(url, clock, **alertsink.QUICK, **(alerting or {}),
                                   prometheus_alerts={"interval": 1, **prometheus})
                    for _ in range(n))
        return clock, Box(url, clock), made[-n:]
    yield start
    for sink in made:
        sink.close()


def run(sinks, clock, seconds):
    for _ in range(seconds):
        clock.advance(1)
        for s in sinks:
            s.write([alertsink.beat()])
            s.tick()


def key(check, uuid=WEB):
    return f"{uuid}/check/{check}"


def state(url, check, uuid=WEB):
    found = [r for r in alertsink.rows(url, "check_state")
             if (r["uuid"], r["plugin"]) == (uuid, check)]
    return found[0]["status"] if found else None


def test_two_sinks_tell_each_transition_once_and_an_ack_holds_the_reminders(url, op,
                                                                           started):
    clock, box, sinks = started(2, {"renotify_interval": 5}, interval=2)
    box.put("DiskFull", T0 + 300, severity="critical")
    run(sinks, clock, 4)
    assert state(url, "prom:DiskFull") == CRITICAL
    assert alertsink.told(url, key("prom:DiskFull")) == ["trigger"]
    run(sinks, clock, 6)                        # a reminder every 5 s while it fires
    assert alertsink.told(url, key("prom:DiskFull")) == ["trigger", "trigger"]
    code, out = alertsink.command("ack", op, clock, "add", "web-1", "prom:DiskFull")
    assert code == 0 and out.startswith("ack 1: web-1 prom:DiskFull (CRITICAL)"), out
    run(sinks, clock, 12)
    assert alertsink.told(url, key("prom:DiskFull")) == ["trigger", "trigger", "acknowledge"]
    box.put("DiskFull", clock.now - 1, starts=T0, severity="critical")     # resolved
    run(sinks, clock, 4)
    assert state(url, "prom:DiskFull") == OK
    assert alertsink.told(url, key("prom:DiskFull"))[-1] == "resolve"
    (row,) = [r for r in alertsink.rows(url, "checks") if r["plugin"] == "prom:DiskFull"]
    assert row["router"] == "prometheus" and row["output"].startswith("resolved at ")


def test_an_alert_naming_no_agent_is_kept_counted_and_placed_once_the_agent_comes(url,
                                                                                 started):
    clock, box, (sink,) = started()
    box.put("Down", T0 + 600, host="db-1.example.com")
    box.put("Odd", T0 + 600, host="\x1b[31mred")
    box.put("Lost", T0 + 600, host=None, instance=None)
    run([sink], clock, 3)
    assert sink.counts["prom_alerts_unknown_host"] == 3 and sink.counts["prom_alerts_held"] == 3
    notes = {r["labels"]["alertname"]: r for r in alertsink.rows(url, "prometheus_alerts")}
    assert notes["Down"]["refused"] == "no agent named db-1.example.com"
    assert notes["Odd"]["refused"] == "no agent named \\x1b[31mred"
    assert notes["Lost"]["refused"] == "no host label (host, instance)"
    alertsink.hello(url, {OTHER: "db-1"}, clock=clock)      # the agent registers
    run([sink], clock, 3)
    assert state(url, "prom:Down", OTHER) == WARNING        # no severity: the default
    notes = {r["labels"]["alertname"]: r for r in alertsink.rows(url, "prometheus_alerts")}
    assert (notes["Down"]["uuid"], notes["Down"]["plugin"], notes["Down"]["refused"]) == \
        (OTHER, "prom:Down", None)
    assert sink.counts["prom_alerts_unknown_host"] == 2


def test_a_hosts_checks_are_bounded_and_the_worst_alert_of_a_check_wins(url, started):
    clock, box, (sink,) = started(max_per_host=2)
    box.put("Disk", T0 + 600, severity="warning", starts=T0)
    box.put("Disk", T0 + 600, severity="critical", starts=T0 + 1)   # the same check
    box.put("Load", T0 + 600, starts=T0 + 2)
    box.put("Swap", T0 + 600, starts=T0 + 3)                         # the third check
    run([sink], clock, 3)
    assert state(url, "prom:Disk") == CRITICAL and state(url, "prom:Load") == WARNING
    assert state(url, "prom:Swap") is None
    assert sink.counts["prom_alerts_over_host_limit"] == 1
    (swap,) = [r for r in alertsink.rows(url, "prometheus_alerts")
               if r["labels"]["alertname"] == "Swap"]
    assert swap["refused"] == "over max_per_host (2) on prom:Swap"
    box.put("Disk", clock.now - 1, severity="critical", starts=T0 + 1)  # the worst ends
    run([sink], clock, 2)
    assert state(url, "prom:Disk") == WARNING                        # the other still fires


def test_a_check_whose_alert_is_gone_recovers_and_an_idle_pass_reads_little(url, started):
    clock, box, (sink,) = started()
    box.put("Gone", T0 + 600, severity="critical")
    run([sink], clock, 2)
    assert state(url, "prom:Gone") == CRITICAL
    box.forget("Gone")
    run([sink], clock, 2)
    assert state(url, "prom:Gone") == OK
    assert alertsink.told(url, key("prom:Gone")) == ["trigger", "resolve"]
    (row,) = [r for r in alertsink.rows(url, "checks") if r["plugin"] == "prom:Gone"]
    assert row["output"].startswith("resolved: the alert is no longer held")
    run([sink], clock, 2)
    assert sink.prometheus.quiet                 # nothing held, nothing open: one count
