"""Grouping (sinks/alerting/delivery/grouping.py) and the grouped email (sinks/alerting/delivery/channels.py):
which claimed rows make one send, what a group's message says, the settings. Pure: no
database, no server (the outbox's side is tests/integration/test_grouping_delivery.py)."""

from __future__ import annotations

import pytest

from fleetwatch.config import ConfigError, build
from sinks.alerting.delivery import grouping
from sinks.alerting.delivery.channels import (group_body, group_message, group_subject, headline,
                                     subject)
from sinks.alerting.delivery.config import DeliveryConfig, parse_channel

T0 = 1_700_000_000.0


def event(host="web-1", check="check_disk", action="trigger", severity="critical",
          kind="check", n=0, summary="DISK CRITICAL - / 95%") -> dict:
    return {"key": f"u-{host}/check/{check}", "kind": kind, "action": action,
            "severity": severity, "uuid": f"u-{host}", "hostname": host, "check": check,
            "status": 2, "summary": summary, "text": "", "created": T0 + n}


def down(host: str, n: int = 0, action: str = "trigger") -> dict:
    return {**event(host, None, action, "critical" if action == "trigger" else "ok", "host", n,
                    "agent silent for 95s: no heartbeat through any router"),
            "key": f"u-{host}/host"}


def row(id_: int, channel: str, ev: dict) -> dict:
    return {"id": id_, "channel": channel, "attempts": 0, "created": ev["created"],
            "lease_until": T0 + 60, "event": ev}


# ---------------------------------------------------------------- groups

@pytest.mark.parametrize("by, ev, expected", [
    ((), event(), ()),
    (("host",), event(), ("web-1",)),
    (("severity",), event(severity="warning"), ("warning",)),
    (("check",), event(check="check_load"), ("check_load",)),
    (("check",), down("sw-3"), (None,)),                      # a host alert has no check
    (("kind",), down("sw-3"), ("host",)),
    (("host", "severity"), event("db-1"), ("db-1", "critical")),
])
def test_group_of(by, ev, expected):
    assert grouping.group_of(ev, by) == expected


@pytest.mark.parametrize("by, value, expected", [
    ((), (), ""),
    (("host",), ("web-1",), "host web-1"),
    (("check", "severity"), (None, "critical"), "check -, severity critical"),
])
def test_title(by, value, expected):
    assert grouping.title(by, value) == expected


R = [row(1, "mail", event("web-1")), row(2, "pager", event("web-1")),
     row(3, "mail", event("web-2", severity="warning")), row(4, "mail", event("web-1", "load")),
     row(5, "pager", event("web-2")), row(6, "ops", event("web-3"))]


@pytest.mark.parametrize("grouped, expected", [
    ({}, [[1], [2], [3], [4], [5], [6]]),                      # nothing grouped: today's
    ({"mail": ()}, [[1, 3, 4], [2], [5], [6]]),                # one group for the channel
    ({"mail": ("host",)}, [[1, 4], [2], [3], [5], [6]]),
    ({"mail": ("severity",)}, [[1, 4], [2], [3], [5], [6]]),
    ({"mail": ("host",), "ops": ()}, [[1, 4], [2], [3], [5], [6]]),
    ({"mail": ("check",), "pager": ()}, [[1, 3], [2, 5], [4], [6]]),
])
def test_sends(grouped, expected):
    assert [[r["id"] for r in send] for send in grouping.sends(R, grouped)] == expected


def test_a_group_is_sent_in_id_order_where_its_first_row_was():
    rows = [row(9, "mail", event("a")), row(3, "ops", event("b")), row(4, "mail", event("c"))]
    assert [[r["id"] for r in s] for s in grouping.sends(rows, {"mail": ()})] == [[4, 9], [3]]


def test_waits_names_only_channels_that_group():
    cfg = build(DeliveryConfig, {"channels": {
        "now": {"type": "email", "to": ["a@b.c"]},
        "mail": {"type": "email", "to": ["a@b.c"], "group_wait": 30, "group_by": ["host"]},
        "pager": {"type": "webhook", "url": "http://h/", "group_wait": 5}}})
    assert grouping.waits(cfg.parsed_channels()) == {"mail": (30.0, ("host",)),
                                                     "pager": (5.0, ())}


# ---------------------------------------------------------------- the listing

def line(ev):
    return ev["hostname"]


@pytest.mark.parametrize("events, cap, expected", [
    ([event("a")], 5, ["Problems (1):", "  a"]),
    ([event("a"), event("b"), event("c")], 2, ["Problems (3):", "  a", "  b",
                                               "  ... and 1 more"]),
    ([event("a", action="resolve"), event("b")], 5,
     ["Problems (1):", "  b", "", "Recoveries (1):", "  a"]),
    # the cap runs over every section; a section past it is counted only
    ([event("a"), event("b"), event("c", action="acknowledge"), event("d", action="resolve")],
     2, ["Problems (2):", "  a", "  b", "", "Acknowledged (1):", "  ... and 1 more", "",
         "Recoveries (1):", "  ... and 1 more"]),
])
def test_listing(events, cap, expected):
    assert grouping.listing(events, cap, line) == expected


# ---------------------------------------------------------------- the grouped email

SWITCH = [down(f"sw3-host-{i:03d}", i % 30) for i in range(500)]


def test_500_hosts_behind_a_switch_are_one_message_with_a_cap_and_a_count():
    assert group_subject(SWITCH) == "[fleetwatch] 500 alerts: 500 DOWN"
    text = group_body(SWITCH, cap=20)
    lines = text.splitlines()
    assert lines[0] == ("500 alerts, raised from 2023-11-14T22:13:20.000Z to "
                        "2023-11-14T22:13:49.000Z.")
    assert lines[2] == "Problems (500):"
    listed = [ln for ln in lines if ln.startswith("  DOWN ")]
    assert len(listed) == 20
    assert listed[0] == ("  DOWN sw3-host-000: agent silent for 95s: no heartbeat through any "
                         "router (2023-11-14T22:13:20.000Z)")
    assert "  ... and 480 more" in lines
    assert lines[-1] == "Each alert in full: fleetwatch alerts"


@pytest.mark.parametrize("events, title, expected", [
    ([event("a"), event("b", severity="warning"), event("c")], "",
     "[fleetwatch] 3 alerts: 2 CRITICAL, 1 WARNING"),
    ([event("a"), event("a", "load", "resolve", "ok")], "host a",
     "[fleetwatch] 2 alerts (host a): 1 CRITICAL, 1 RECOVERY"),
    ([down("a"), down("b", action="resolve"), down("c", action="resolve")], "kind host",
     "[fleetwatch] 3 alerts (kind host): 2 UP, 1 DOWN"),
])
def test_group_subject_says_how_many_and_what(events, title, expected):
    assert group_subject(events, title) == expected


HOSTILE = event("evil\x1b]0;pwned\x07", summary="ok\r\nBcc: victim@example.org\x00\x9b2J")


def test_sender_control_characters_never_reach_a_message():
    for text in (subject(HOSTILE), headline(HOSTILE), group_subject([HOSTILE, HOSTILE],
                                                                    "host evil\x1b"),
                 group_body([HOSTILE, HOSTILE], 5, "host evil\x1b")):
        assert not any(c in text for c in "\x1b\x07\x00\x9b\r"), repr(text)
    assert "evil\\x1b]0;pwned\\x07" in headline(HOSTILE)
    assert "ok Bcc: victim@example.org\\x00\\x9b2J" in headline(HOSTILE)
    msg = group_message([HOSTILE, HOSTILE], parse_channel("m", {"type": "email",
                                                                "to": ["ops@example.org"]}),
                        "fw@example.org", "7+2", "host evil\x1b")
    assert "Bcc" not in msg and msg["X-Fleetwatch-Count"] == "2"


def test_group_message_headers():
    channel = parse_channel("m", {"type": "email", "to": ["ops@example.org", "b@example.org"],
                                  "group_wait": 30, "group_list": 3})
    msg = group_message(SWITCH[:10], channel, "fw@example.org", "17+10")
    assert msg["Subject"] == "[fleetwatch] 10 alerts: 10 DOWN"
    assert msg["To"] == "ops@example.org, b@example.org" and msg["From"] == "fw@example.org"
    assert "fleetwatch.17+10" in msg["Message-ID"]
    assert (msg["X-Fleetwatch-Action"], msg["X-Fleetwatch-Count"]) == ("trigger", "10")
    assert "  ... and 7 more" in msg.get_content()
    mixed = group_message([SWITCH[0], down("x", action="resolve")], channel, "fw@e.org", "1+2")
    assert mixed["X-Fleetwatch-Action"] == "mixed"


# ---------------------------------------------------------------- settings

def test_defaults_group_nothing():
    for raw in ({"type": "email", "to": ["a@b.c"]}, {"type": "webhook", "url": "http://h/"}):
        channel = parse_channel("c", raw)
        assert (channel.group_wait, channel.group_by) == (0.0, [])
    assert parse_channel("c", {"type": "email", "to": ["a@b.c"]}).group_list == 50


MAIL = {"type": "email", "to": ["a@b.c"]}
HOOK = {"type": "webhook", "url": "http://h/"}


@pytest.mark.parametrize("channel, message", [
    ({**MAIL, "group_wait": -1}, "channels.c.group_wait: expected 0 to 3600"),
    ({**HOOK, "group_wait": 7200}, "channels.c.group_wait: expected 0 to 3600"),
    ({**MAIL, "group_by": ["hostname"]},
     "channels.c.group_by: expected some of host, severity, check, kind, got 'hostname'"),
    ({**MAIL, "group_by": "host"}, "channels.c.group_by: expected a list"),
    ({**MAIL, "group_by": ["host", "host"]}, "channels.c.group_by: a key is named twice"),
    ({**MAIL, "group_list": 0}, "channels.c.group_list: expected at least 1"),
    ({**HOOK, "group_list": 5}, "channels.c.group_list: unknown"),     # email only
    ({**MAIL, "group_wait": 600}, "channels.c.group_wait: expected less than retry.max_age"),
])
def test_bad_grouping_settings_name_the_key(channel, message):
    with pytest.raises(ConfigError) as e:
        build(DeliveryConfig, {"channels": {"c": channel}, "retry": {"max_age": 600}},
              "sink.yaml", "alerting.delivery")
    assert message in str(e.value), str(e.value)
