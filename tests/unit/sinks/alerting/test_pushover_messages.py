"""What the ``pushover`` channel sends (sinks/alerting/delivery/services/pushover.py): plain text
within Pushover's limits, the priorities, a group's one notification. Pure: no server (the
sends are tests/integration/test_pushover.py)."""

from __future__ import annotations

import pytest

from sinks.alerting.delivery import message as messages
from sinks.alerting.delivery.services.pushover import (MESSAGE_MAX, TITLE_MAX, group_notification,
                                              notification)


def event(**more) -> dict:
    return {"key": "u1/check/check_disk", "kind": "check", "action": "trigger",
            "severity": "critical", "uuid": "u1", "hostname": "web-1", "check": "check_disk",
            "status": 2, "summary": "DISK CRITICAL - / 95%", "text": "/ 95% used",
            "created": 1_700_000_600.5, "since": 1_700_000_000.0,
            "link": "https://fleet.example.com/hosts/u1", **more}


def test_a_notification_says_what_where_since_when_and_links_to_the_console():
    n = notification(messages.of(event()), 1_700_000_600.5)
    assert n == {"title": "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%",
                 "message": "Host: web-1\nCheck: check_disk\nState: CRITICAL (exit status 2)"
                            "\nSince: 2023-11-14T22:13:20.000Z (10m)\n\n/ 95% used",
                 "priority": 1, "url": "https://fleet.example.com/hosts/u1",
                 "url_title": "Open in the console", "timestamp": 1_700_000_600}


@pytest.mark.parametrize("severity, action, level", [
    ("critical", "trigger", 1), ("warning", "trigger", 0), ("error", "trigger", 0),
    ("info", "trigger", -1), ("critical", "acknowledge", -1), ("ok", "resolve", -1)])
def test_priorities(severity, action, level):
    assert notification(messages.of(event(severity=severity, action=action)))["priority"] \
        == level


def test_the_limits_are_kept_and_a_long_link_left_out():
    n = notification(messages.of(event(hostname="h" * 400, summary="s" * 400,
                                       text="\n".join("o" * 300 for _ in range(9)),
                                       link="https://fleet.example.com/" + "x" * 600)))
    assert len(n["title"]) <= TITLE_MAX and len(n["message"]) <= MESSAGE_MAX
    assert n["message"].endswith("...") and "url" not in n and "url_title" not in n
    assert "url" not in notification(messages.of(event(link="javascript:alert(1)")))


def test_what_an_agent_wrote_stays_plain_text_with_control_characters_escaped():
    n = notification(messages.of(event(hostname="web-1 <b>x</b> @here\x1b[31m")))
    assert "Host: web-1 <b>x</b> @here\\x1b[31m" in n["message"] and "html" not in n


def test_a_group_lists_what_fits_and_counts_the_rest():
    events = [event(key=f"u1/check/c{n}", check=f"c{n}" + "x" * 100) for n in range(30)]
    n = group_notification(messages.of_group(events, 20, "host web-1"), None, 1)
    lines = n["message"].splitlines()
    assert n["title"] == "30 alerts (host web-1): 30 CRITICAL" and n["priority"] == 1
    assert len(n["message"]) <= MESSAGE_MAX and lines[-1] == f"... and {31 - len(lines)} more"
    assert "url" not in n
