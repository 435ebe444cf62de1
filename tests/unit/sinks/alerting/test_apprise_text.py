"""What the ``apprise`` channel sends and how it names services
(sinks/alerting/delivery/services/apprise.py), pure: never a secret of a URL."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sinks.alerting.delivery.services import apprise as channel

pytestmark = pytest.mark.timeout(60)

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
EVENT = {"key": f"{U1}/check/check_disk", "kind": "check", "action": "trigger",
         "severity": "critical", "uuid": U1, "hostname": "web-1", "check": "check_disk",
         "status": 2, "summary": "DISK <!here> @channel", "text": "line\x1b[2J one\n\nline two",
         "created": 1_800_000_000.0, "link": "https://fleet.example.com/hosts/x"}


def test_the_urls_file_is_one_url_a_line_with_comments():
    assert channel.urls("# ops\n\n  slack://a/b/c  \n#json://x\ntgram://t/c\n") == \
        [(3, "slack://a/b/c"), (5, "tgram://t/c")]


@pytest.mark.parametrize("url, named", [
    ("json://user:pw@hooks.example.com:8080/x/TOKEN", "json://hooks.example.com (line 2)"),
    ("mailtos://u:p@smtp.example.com?to=a@b", "mailtos://smtp.example.com (line 2)"),
    ("tgram://123456:ABCDEF/-100123", "tgram (line 2)"),
    ("discord://WEBHOOKID/WEBHOOKTOKEN", "discord (line 2)"),
    ("garbage", "? (line 2)"),
])
def test_a_service_is_named_by_scheme_and_server_never_a_token(url, named):
    assert channel.service(url, 2) == named


def test_what_apprise_says_is_kept_without_the_urls_parts():
    urls = ["tgram://123456:ABCDEFGH/-100123", "json://fleet:pa55word@10.0.0.1/hooks/SECRETPATH"]
    secrets = set().union(*(channel.secrets_of(u) for u in urls))
    said = ("Failed to send Telegram notification to 123456:ABCDEFGH: Unauthorized; "
            "POST http://10.0.0.1/hooks/SECRETPATH failed with pa55word; see "
            "tgram://123456:ABCDEFGH/-100123")
    clean = channel.scrubbed(said, secrets)
    assert not [s for s in ("ABCDEFGH", "SECRETPATH", "pa55word") if s in clean]
    assert "10.0.0.1" not in secrets and "Unauthorized" in clean and "tgram://..." in clean


def test_the_body_is_plain_text_with_mentions_broken():
    title, body = channel.body(EVENT)
    assert title == "CRITICAL web-1/check_disk: DISK <\u200b!here> @\u200bchannel"
    assert body == ("Host: web-1\nCheck: check_disk\nState: CRITICAL (exit status 2)\n\n"
                    "line\\x1b[2J one\nline two\n\n"
                    "In the console: https://fleet.example.com/hosts/x")


@pytest.mark.parametrize("action, severity, kind", [
    ("trigger", "critical", "failure"), ("trigger", "unknown", "failure"),
    ("trigger", "warning", "warning"), ("trigger", "info", "info"),
    ("acknowledge", "critical", "info"), ("resolve", "ok", "success")])
def test_notify_type(action, severity, kind):
    assert channel.notify_type({"action": action, "severity": severity}) == kind


def test_a_group_is_one_notification_of_its_most_pressing_type():
    events = [{**EVENT, "hostname": f"web-{i}", "action": "resolve" if i else "trigger"}
              for i in range(30)]
    title, body = channel.group_body(events, "check check_disk")
    assert title.startswith("30 alerts (check check_disk): 29 RECOVERY, 1 CRITICAL")
    assert body.splitlines()[-1] == "... and 10 more"
    assert channel.group_type(events) == "failure"
    assert channel.group_type(events[1:]) == "success"


def test_apprise_is_imported_only_when_sending():
    code = ("import sys, sinks.alerting.delivery.services.apprise, sinks.alerting.delivery.senders as s;"
            "s.sender_class('apprise'); print('apprise' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(__import__("pathlib").Path(__file__).parents[4]))
    assert out.stdout.strip() == "False"
