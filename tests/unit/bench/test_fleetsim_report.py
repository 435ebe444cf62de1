"""bench/fleetsim_report.py: the simulator's consistency checks and latency summaries,
on documents made by hand (no processes)."""

from __future__ import annotations

import sys

from support import ROOT  # noqa: E402
sys.path.append(str(ROOT / "bench"))   # last: bench/scheduler.py
                                                             # must not hide the package
from fleetsim_report import checks, render, summary  # noqa: E402


class Args:
    agents = 2


def document(heartbeats_received: int = 10, alerting_dropped: int = 0) -> dict:
    relayed_hb = heartbeats_received - alerting_dropped
    return {
        "settings": {"agents": 2, "routers": 1, "heartbeat": 1.0, "stats": 10.0,
                     "curve": False, "storm": False},
        "attach_s": 0.5, "window_s": 10, "storm": None,
        "usage": {"router-1": {"cpu_percent": 1.0, "rss_start_mib": 30, "rss_end_mib": 31,
                               "rss_growth_mib_per_min": 0.0}},
        "routers": {"router-1": {
            "router.received.HEARTBEAT": heartbeats_received,
            "router.relayed.HEARTBEAT.alerting": relayed_hb,
            "router.dropped.HEARTBEAT.alerting": alerting_dropped,
            "router.relayed.HEARTBEAT.history": heartbeats_received,
            "router.forwarded.ACK": 1, "router.forwarded.RUN": 0}},
        "sinks": {"alerting": {"received": relayed_hb, "acked": 1}},
        "scheduler": {"sent": 0},
        "agents": [{"agents": 2, "sent": {"HEARTBEAT": 10, "NOTIFY": 0},
                    "received": {"HEARTBEAT": 10, "ACK": 1},
                    "counts": {"spooled.NOTIFY": 1, "acked.NOTIFY": 1}, "unacked": {},
                    "latency": {"steady": {"heartbeat_rtt": summary([0.001, 0.002])}}}],
        "db": {},
    }


def by_name(found: list[dict]) -> dict:
    return {c["name"]: c for c in found}


def test_counts_that_add_up_pass():
    found = by_name(checks(document(), Args, restarted=False))
    assert all(c["ok"] for c in found.values() if c["strict"]), found
    assert found["HEARTBEAT: agents sent = routers received"]["left"] == 10


def test_a_counted_drop_still_adds_up():
    found = by_name(checks(document(alerting_dropped=3), Args, restarted=False))
    check = found["HEARTBEAT: routers received = relayed + dropped to alerting"]
    assert check["ok"] and check["right"] == 10
    assert found["sink-alerting: routers relayed = sink received"]["ok"]


def test_a_message_lost_on_the_way_fails():
    found = by_name(checks(document(heartbeats_received=9), Args, restarted=False))
    check = found["HEARTBEAT: agents sent = routers received"]
    assert check["strict"] and not check["ok"]


def with_db(notifications: int = 1, alerts: int = 1, keys: int = 1, downs: int = 0) -> dict:
    doc = document()
    doc["db"] = {"counts": {"notifications": notifications, "notify_alerts": alerts,
                            "notify_alert_keys": keys, "host_down_alerts": downs}}
    return doc


def test_every_notify_recorded_and_alerted_once_passes():
    found = by_name(checks(with_db(), Args, restarted=False))
    assert found["NOTIFY: spooled = recorded by alerting (none lost, none twice)"]["ok"]
    assert found["NOTIFY: recorded = alerts raised, one per NOTIFY"]["ok"]
    assert found["host DOWN alerts while the agents beat (no false DOWN) = 0"]["ok"]


def test_a_notify_lost_or_alerted_twice_fails():
    lost = by_name(checks(with_db(notifications=0, alerts=0, keys=0), Args, restarted=False))
    check = lost["NOTIFY: spooled = recorded by alerting (none lost, none twice)"]
    assert check["strict"] and not check["ok"]
    twice = by_name(checks(with_db(alerts=2), Args, restarted=False))
    check = twice["NOTIFY: recorded = alerts raised, one per NOTIFY"]
    assert check["strict"] and not check["ok"] and check["note"] == "1 distinct"


def test_a_host_paged_down_fails_unless_its_router_restarted():
    check = by_name(checks(with_db(downs=1), Args, restarted=False))[
        "host DOWN alerts while the agents beat (no false DOWN) = 0"]
    assert check["strict"] and not check["ok"]
    check = by_name(checks(with_db(downs=1), Args, restarted=True))[
        "host DOWN alerts while the agents beat (no false DOWN) = 0"]
    assert not check["strict"]


def test_a_heartbeat_dropped_to_alerting_in_the_window_fails():
    doc = document()
    doc["window_drops"] = {"STATS.graphite": 5}
    check = by_name(checks(doc, Args, restarted=False))[
        "HEARTBEAT: dropped to alerting in the measured window = 0"]
    assert check["ok"] and check["note"] == "STATS.graphite 5"
    doc["window_drops"]["HEARTBEAT.alerting"] = 2
    check = by_name(checks(doc, Args, restarted=False))[
        "HEARTBEAT: dropped to alerting in the measured window = 0"]
    assert check["strict"] and not check["ok"]


def test_after_a_restart_nothing_is_strict():
    found = checks(document(heartbeats_received=9), Args, restarted=True)
    assert not any(c["strict"] for c in found)


def test_summary_in_milliseconds():
    assert summary([]) == {"n": 0}
    s = summary([0.001 * n for n in range(1, 101)])
    assert s == {"n": 100, "p50": 51.0, "p99": 99.0, "max": 100.0}


def test_render_names_every_component_and_check():
    text = render({**document(), "checks": checks(document(), Args, restarted=False)})
    assert "| router-1 |" in text and "heartbeat_rtt" in text
    assert "ok   HEARTBEAT: agents sent = routers received: 10 vs 10" in text
