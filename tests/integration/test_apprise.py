"""The ``apprise`` channel (issue 34): the real deliverer through Apprise (PyPI) to two
real local services at once: its ``json://`` to an HTTP receiver
(tests/support/channelservers.py ``HttpReceiver``) and its ``mailto://`` to an SMTP server
(aiosmtpd, ``SmtpServer``).

One alert reaches both; its recovery is a notification of its own (``success``); an
agent's mentions and control characters arrive inert; a 500 from one service is a retry
naming the service (its scheme and host) and never a secret of its URL, and the retry goes
to that service alone; a scheme Apprise does not know refuses the alert and fails the
channel. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import logging

import pytest

from support.channelservers import HttpReceiver, SmtpServer
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytest.importorskip("apprise")
pytest.importorskip("aiosmtpd")
pytestmark = pytest.mark.timeout(60)

from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import U1, check_event, enqueue, fast, recorded  # noqa: E402

SECRETS = ("pa55word-s3cret", "S3CRETPATHTOKEN")


def event(action: str = "trigger", text: str = "/ 95% used") -> dict:
    """check_disk's event, exit status 0 unless a trigger."""
    return check_event(action, text=text, status=2 if action == "trigger" else 0)


@pytest.fixture
def services():
    """``(http, smtp)``: an HTTP receiver (answering 200) and an SMTP server."""
    http, smtp = HttpReceiver(default=200).start(), SmtpServer().start()
    yield http, smtp
    http.stop()
    smtp.stop()


@pytest.fixture
def run(deliverers, tmp_path):
    """``run(*urls)``: a deliverer thread with one apprise channel ``any`` whose
    ``urls_file`` lists ``urls``."""
    def start(*urls: str) -> DeliveryConfig:
        listed = tmp_path / "apprise-urls"
        listed.write_text("# where alerts go\n\n" + "\n".join(urls) + "\n")
        config = fast({"any": {"type": "apprise", "urls_file": str(listed), "timeout": 10}},
                      console_url="https://fleet.example.com/", lease=60)
        deliverers(config)
        return config
    return start


def json_url(http: HttpReceiver) -> str:
    return f"json://fleet:{SECRETS[0]}@127.0.0.1:{http.port}/hooks/{SECRETS[1]}"


def mail_url(smtp: SmtpServer) -> str:
    return f"mailto://127.0.0.1:{smtp.port}?from=agent@example.test&to=oncall@example.test"


def test_one_alert_reaches_both_services_and_its_recovery_too(eng, run, services):
    http, smtp = services
    config = run(mail_url(smtp), json_url(http))
    enqueue(eng, config, event(text="/ 95% used @here <!channel>\x1b[31m"))
    wait_for(lambda: http.posts and smtp.messages, 20, interval=0.05,
             what="the notification at both services")
    (posted,) = http.posts
    assert posted["title"] == "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
    assert posted["type"] == "failure"
    assert posted["message"] == (
        "Host: web-1\nCheck: check_disk\nState: CRITICAL (exit status 2)\n\n"
        "/ 95% used @\u200bhere <\u200b!channel>\\x1b[31m\n\n"
        f"In the console: https://fleet.example.com/hosts/{U1}")
    (mail,) = smtp.parsed()
    assert mail["Subject"] == posted["title"] and mail["To"] == "oncall@example.test"
    plain = mail.get_body(("plain",)).get_content()
    assert "@\u200bhere" in plain and "\x1b" not in plain
    (sent,) = wait_for(lambda: recorded(eng), 20, interval=0.05, what="the delivery")
    assert (sent["status"], sent["message_id"], sent["answer"]) == \
        ("apprise ok", None, "2 services")

    enqueue(eng, config, event("resolve"))
    wait_for(lambda: len(http.posts) == 2 and len(smtp.messages) == 2, 20, interval=0.05,
             what="the recovery at both services")
    assert http.posts[1]["type"] == "success"
    assert http.posts[1]["title"].startswith("RECOVERY web-1/check_disk")


class Lines(logging.Handler):
    """What the process's log would say (a handler on the root logger, as the sinks'
    own: pytest's caplog also hooks loggers that do not propagate, as Apprise's)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))


@pytest.fixture
def log_lines():
    lines, root = Lines(), logging.getLogger()
    level = root.level
    root.addHandler(lines)
    root.setLevel(logging.DEBUG)
    yield lines.lines
    root.removeHandler(lines)
    root.setLevel(level)


def test_a_500_is_retried_naming_the_service_and_no_secret(eng, run, services, log_lines):
    http, smtp = services
    http.codes = [500]
    config = run(mail_url(smtp), json_url(http))
    enqueue(eng, config, event())
    wait_for(lambda: http.posts, 30, interval=0.05, what="the retried notification")
    tried = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "sent"] and
                     recorded(eng), 20, interval=0.05, what="the retry's delivery")
    first, last = tried[0], tried[-1]
    assert first["status"] == "apprise partial" and first["outcome"] != "failed"
    assert "json://127.0.0.1 (line 4): failure" in first["answer"]
    assert "error=500" in first["answer"]
    assert (last["status"], last["answer"]) == ("apprise ok", "1 service (1 before)")
    assert len(smtp.messages) == 1                   # the retry went to the json service
    everything = json.dumps(recorded(eng)) + "\n".join(log_lines)
    assert "apprise partial: 1 of 2 services failed: json://127.0.0.1 (line 4)" in everything
    assert not [line for line in everything.splitlines() if any(s in line for s in SECRETS)]
    assert "fleet:" not in everything and "json://fleet" not in everything


def test_a_scheme_apprise_does_not_know_fails_the_alert_and_the_channel(eng, run):
    config = run("nosuchservice://S3CRETPATHTOKEN@host/x")
    enqueue(eng, config, event())
    (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"],
                         20, interval=0.05, what="the refusal")
    assert failed["status"] == "apprise refused"
    assert "nosuchservice (line 3): Apprise does not know" in failed["answer"]
    assert SECRETS[1] not in failed["answer"]
    from fleetwatch.actions.channels import listed
    (channel,) = listed(eng.url.render_as_string(hide_password=False))
    assert channel["state"] == "failing"

