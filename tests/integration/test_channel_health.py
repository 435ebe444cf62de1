"""Channels that report their own failure (issue 34, item 4), against real HTTP receivers on
127.0.0.1: a channel whose token is refused (401) is failing at once, said once to its
fallback, which also gets its alerts until it works again; the recovery is said once;
``fleetwatch channels`` lists the states, ``status --problems`` shows a failing channel as a
fault of the fleet, and ``channels test NAME`` sends through a running alerting sink and
prints what the service answered. On SQLite and PostgreSQL, with two deliverers on one
database where it counts."""

from __future__ import annotations

import json
import time

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(90)

from fleetwatch.actions import channels as channel_actions  # noqa: E402
from sinks.alerting.delivery import store as outbox  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import FAST_RETRY, U1, enqueue, fast  # noqa: E402


def event(n: int, action: str = "trigger") -> dict:
    return {"key": f"{U1}/check/check_{n}", "kind": "check", "action": action,
            "severity": "critical" if action == "trigger" else "ok", "uuid": U1,
            "hostname": "web-1", "check": f"check_{n}", "status": 2,
            "summary": f"CHECK {n}", "text": "details", "created": time.time()}


def delivery(primary: str, backup: str) -> DeliveryConfig:
    return fast({"slack-ops": {"type": "webhook", "url": primary, "timeout": 2,
                               "fallback": "backup"},
                 "backup": {"type": "webhook", "url": backup, "timeout": 2}},
                kinds=["check"], lease=10)


def posted(hook: HttpReceiver) -> list[tuple[str, str]]:
    """(dedup_key, event_action) of each POST the receiver took."""
    return [(p["dedup_key"], p["event_action"]) for p in hook.posts]


def _pending(eng) -> int:
    with eng.connect() as conn:
        return outbox.pending_count(conn)


def test_a_refused_token_fails_the_channel_its_fallback_is_told_once_and_gets_its_alerts(
        eng, deliverers):
    primary = HttpReceiver(default=401).start()
    backup = HttpReceiver().start()
    url = eng.url.render_as_string(hide_password=False)
    try:
        config = delivery(primary.url, backup.url)
        deliverers(config, n=2)                 # two alerting sinks on one database
        wait_for(lambda: {c["name"] for c in channel_actions.listed(url)} ==
                 {"slack-ops", "backup"}, 20, what="the channels declared")
        enqueue(eng, config, event(1))
        wait_for(lambda: len(backup.posts) >= 2, 20, interval=0.05,
                 what="the failure and the alert at the fallback")
        state = wait_for(lambda: (lambda s: s if len(s) == 2 else None)(
            {c["name"]: c for c in channel_actions.listed(url) if c["state"] != "unknown"}),
            20, interval=0.05, what="both channels' states recorded")
        assert state["slack-ops"]["state"] == "failing" and state["backup"]["state"] == "ok"
        assert state["slack-ops"]["last_status"] == "HTTP 401"
        assert state["slack-ops"]["fallback"] == "backup"
        failing = [p for p in backup.posts if p["dedup_key"] == "channel/slack-ops"]
        assert len(failing) == 1 and failing[0]["event_action"] == "trigger"
        assert failing[0]["payload"]["summary"].startswith(
            "CRITICAL channel/slack-ops: channel slack-ops failing since ")
        assert "HTTP 401" in failing[0]["payload"]["summary"]
        assert (f"{U1}/check/check_1", "trigger") in posted(backup)
        # while it fails, each of its alerts goes to the fallback too, once
        enqueue(eng, config, event(2))
        wait_for(lambda: (f"{U1}/check/check_2", "trigger") in posted(backup), 20,
                 interval=0.05, what="the next alert at the fallback")
        # the token works again: the next alert goes through, the recovery is said once
        primary.default = 202
        enqueue(eng, config, event(3))
        wait_for(lambda: ("channel/slack-ops", "resolve") in posted(backup), 20,
                 interval=0.05, what="the recovery at the fallback")
        # (check_2's retry may be the send that found the token working again)
        wait_for(lambda: (f"{U1}/check/check_3", "trigger") in posted(primary), 20,
                 interval=0.05, what="the next alert through the channel")
        assert {c["name"]: c["state"] for c in channel_actions.listed(url)} == {
            "slack-ops": "ok", "backup": "ok"}
        wait_for(lambda: _pending(eng) == 0, 20, interval=0.05, what="every row sent")
        told = [p for p in posted(backup) if p[0] == "channel/slack-ops"]
        assert told == [("channel/slack-ops", "trigger"), ("channel/slack-ops", "resolve")]
        assert sorted(posted(backup)).count((f"{U1}/check/check_1", "trigger")) == 1
        assert ("channel/slack-ops", "trigger") not in posted(primary)
    finally:
        primary.stop()
        backup.stop()


def test_repeated_5xx_fail_a_channel_after_three_attempts_not_one(eng, deliverers):
    primary = HttpReceiver(default=503).start()
    backup = HttpReceiver().start()
    url = eng.url.render_as_string(hide_password=False)
    try:
        d, = deliverers(delivery(primary.url, backup.url))
        enqueue(eng, d.config, event(1))
        wait_for(lambda: ("channel/slack-ops", "trigger") in posted(backup), 20,
                 interval=0.05, what="the failure told")
        assert len(primary.requests) >= 3
        (row,) = [c for c in channel_actions.listed(url) if c["name"] == "slack-ops"]
        assert row["failures"] >= 3 and row["last_status"] == "HTTP 503"
    finally:
        primary.stop()
        backup.stop()


def test_channels_and_status_show_a_failing_channel_and_channels_test_sends(fleet):
    """The real alerting sink process and the commands an operator types."""
    bad, good = HttpReceiver(default=401).start(), HttpReceiver().start()
    try:
        router = fleet.router()
        fleet.sink("alerting", [router], alerting={"delivery": {
            "channels": {"pager": {"type": "webhook", "url": bad.url, "timeout": 2,
                                   "fallback": "mail-ish"},
                         "mail-ish": {"type": "webhook", "url": good.url, "timeout": 2}},
            "rules": [{"channels": ["pager"]}],
            "retry": FAST_RETRY, "poll_interval": 0.1, "lease": 10}})
        op = str(fleet.operator_config([router]))
        listed = wait_for(lambda: json.loads(fleet.command(
            "channels", "--config", op, "--json").stdout)["channels"] or None, 30,
            interval=0.2, what="the sink's channels")
        assert {c["name"]: (c["type"], c["state"]) for c in listed} == {
            "mail-ish": ("webhook", "unknown"), "pager": ("webhook", "unknown")}
        # a test message through the good one: sent, with the receiver's answer
        sent = fleet.command("channels", "test", "mail-ish", "--config", op, "--json")
        said = json.loads(sent.stdout)
        assert said["sent"] and said["deliveries"][0]["status"] == "HTTP 202"
        assert [p["payload"]["severity"] for p in good.posts] == ["info"]
        assert "a test message to channel mail-ish" in good.posts[0]["payload"]["summary"]
        # through the bad one: refused, exit 1, the answer printed; the channel fails
        refused = fleet.command("channels", "test", "pager", "--config", op, check=False)
        assert refused.returncode == 1 and "HTTP 401" in refused.stdout
        text = fleet.command("channels", "--config", op).stdout
        assert "pager" in text and "failing" in text and "HTTP 401" in text
        assert text.splitlines()[0].split()[:3] == ["NAME", "TYPE", "STATE"]
        problems = json.loads(fleet.command("status", "--problems", "--config", op,
                                            "--json", check=False).stdout)
        (fault,) = [f for f in problems["fleet"] if f["kind"] == "channel"]
        assert fault["name"] == "pager" and fault["state"] == "CRITICAL"
        assert "its alerts go to mail-ish" in fault["output"]
        unknown = fleet.command("channels", "test", "nope", "--config", op, check=False)
        assert unknown.returncode == 2 and "no channel 'nope'" in unknown.stderr
        assert "mail-ish, pager" in unknown.stderr
    finally:
        bad.stop()
        good.stop()
