"""The ``ntfy`` channel (issue 34): the real deliverer against a local server that speaks
ntfy's JSON publishing as documented (fleetwatch/cli/demo/receivers.py ``Ntfy``: its
answers, its limits, its 401 for a refused token).

A problem is a priority-5 notification with a button that opens its host in the console,
its recovery priority 3; the message is plain text, its control characters escaped and cut
to ntfy's 4,096 bytes; the answer's id is the delivery's message id; a refused token fails
the alert and the channel at once. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from fleetwatch.config import build
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.cli.demo.receivers import Ntfy  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import U1, enqueue, fast, recorded, secret_file  # noqa: E402
from support.delivering import check_event as event  # noqa: E402


@pytest.fixture
def run(deliverers):
    """``run(server, **channel)``: a deliverer thread with one ntfy channel."""
    def start(server: Ntfy, **channel) -> DeliveryConfig:
        config = fast({"phone": {"type": "ntfy", "url": server.url, "topic": "ops-alerts",
                                 "timeout": 5, **channel}},
                      console_url="https://fleet.example.com/")
        deliverers(config)
        return config
    return start


def test_a_problem_and_its_recovery_with_a_button_to_the_console(eng, run, tmp_path):
    server = Ntfy(None, 0, tokens=("tk_test",)).start()
    try:
        config = run(server, token_file=secret_file(tmp_path, "ntfy-token", "tk_test"))
        enqueue(eng, config, event(text="/ 95% used\x1b[31m\n" + "y" * 9000))
        wait_for(lambda: server.messages, 20, interval=0.05, what="the notification")
        (m,) = server.messages
        assert m["topic"] == "ops-alerts" and m["priority"] == 5
        assert m["title"] == "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
        assert m["message"].startswith("CRITICAL on web-1, check check_disk\n/ 95% used\\x1b")
        assert "\x1b" not in m["message"] and len(m["message"].encode()) <= 4096
        assert m["actions"] == [{"action": "view", "label": "Open in the console",
                                 "url": f"https://fleet.example.com/hosts/{U1}",
                                 "clear": True}]
        (first,) = wait_for(lambda: recorded(eng), 20, interval=0.05, what="its delivery")
        assert (first["status"], first["message_id"]) == ("HTTP 200", m["id"])
        enqueue(eng, config, event("resolve"))
        wait_for(lambda: len(server.messages) == 2, 20, interval=0.05, what="the recovery")
        assert server.messages[1]["priority"] == 3
        assert server.messages[1]["tags"] == ["white_check_mark"]
    finally:
        server.stop()


def test_a_refused_token_fails_the_alert_and_the_channel_at_once(eng, run, tmp_path):
    server = Ntfy(None, 0, tokens=("tk_other",)).start()
    try:
        config = run(server, token_file=secret_file(tmp_path, "ntfy-token", "tk_revoked"))
        enqueue(eng, config, event())
        (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"],
                             20, interval=0.05, what="the refusal")
        assert failed["status"] == "HTTP 401" and "unauthorized" in failed["answer"]
        assert "tk_revoked" not in failed["answer"] and server.messages == []
        from fleetwatch.actions.channels import listed
        url = eng.url.render_as_string(hide_password=False)
        (phone,) = listed(url)
        assert phone["state"] == "failing" and phone["last_status"] == "HTTP 401"
    finally:
        server.stop()


def test_a_topic_that_ntfy_would_refuse_is_refused_at_start():
    from fleetwatch.config import ConfigError
    with pytest.raises(ConfigError, match=r"channels\.phone\.topic: expected 1 to 64"):
        build(DeliveryConfig, {"channels": {"phone": {"type": "ntfy", "topic": "a b"}}},
              "sink.yaml", "alerting.delivery")


def test_a_group_of_alerts_is_one_notification(eng, run):
    server = Ntfy(None, 0).start()
    try:
        config = run(server, group_wait=0.3)
        enqueue(eng, config, *({**event(), "key": f"{U1}/check/check_{i:02d}",
                                "check": f"check_{i:02d}"} for i in range(25)))
        (m,) = wait_for(lambda: server.messages, 20, interval=0.05, what="the group")
        assert m["title"] == "25 alerts: 25 CRITICAL" and m["priority"] == 5
        lines = m["message"].splitlines()
        assert len(lines) == 21 and lines[-1] == "... and 5 more"
        assert lines[0] == "CRITICAL web-1/check_00: DISK CRITICAL - / 95%"
        assert m["actions"][0]["url"] == f"https://fleet.example.com/hosts/{U1}"
    finally:
        server.stop()
