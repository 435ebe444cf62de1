"""Alert channels: what an email and a webhook event say (pure), routing rules, and the
senders against real servers on 127.0.0.1 port 0 (aiosmtpd, http.server).

The servers, :class:`SmtpServer` and :class:`HttpReceiver`, are in tests/support/channelservers.py.
"""

from __future__ import annotations

import email
import email.policy
import json
import logging
import ssl
import subprocess

import pytest

from fleetwatch.config import ConfigError, build
from sinks.alerting.delivery.channels import (EmailSender, SendError, WebhookSender, body, dedup_key,
                            email_message, subject, webhook_payload)
from sinks.alerting.delivery.senders import senders
from sinks.alerting.delivery.config import DeliveryConfig, parse_channel
from sinks.alerting.delivery.rules import Rule, matches, route
from support.channelservers import HttpReceiver, SmtpServer

pytestmark = pytest.mark.timeout(30)

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
DISK = {"key": f"{U1}/check/check_disk", "kind": "check", "action": "trigger",
        "severity": "critical", "uuid": U1, "hostname": "web-1", "check": "check_disk",
        "status": 2, "summary": "DISK CRITICAL - / 95%", "text": "/ 95% used (19 GiB of 20)",
        "created": 1_700_000_000.0}


# ---------------------------------------------------------------- real servers

def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp():
    server = SmtpServer().start()
    yield server
    server.stop()


@pytest.fixture
def receiver():
    server = HttpReceiver().start()
    yield server
    server.stop()


def email_channel(port: int, **extra):
    return parse_channel("mail", {"type": "email", "host": "127.0.0.1", "port": port,
                                  "from": "fleetwatch@example.org",
                                  "to": ["ops@example.org", "oncall@example.org"],
                                  "timeout": 5, **extra})


def webhook_channel(url: str, **extra):
    return parse_channel("pager", {"type": "webhook", "url": url, "routing_key": "R" * 32,
                                   "timeout": 5, **extra})


# ---------------------------------------------------------------- what is sent

def test_subjects():
    assert subject(DISK) == "[fleetwatch] CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
    ok = {**DISK, "action": "resolve", "severity": "ok", "status": 0, "summary": "DISK OK"}
    assert subject(ok) == "[fleetwatch] RECOVERY web-1/check_disk: DISK OK"
    host = {**DISK, "kind": "host", "check": None, "summary": "no heartbeat for 90 s"}
    assert subject(host) == "[fleetwatch] DOWN web-1: no heartbeat for 90 s"
    assert subject({**host, "action": "resolve"}).startswith("[fleetwatch] UP web-1: ")
    notify = {**host, "kind": "notify", "severity": "error", "summary": "backup\nfailed"}
    assert subject(notify) == "[fleetwatch] ERROR web-1: backup failed"
    flap = {**DISK, "kind": "flapping", "summary": "state changed 9 times"}
    assert subject(flap).startswith("[fleetwatch] FLAPPING START web-1/check_disk")
    assert len(subject({**DISK, "summary": "x" * 1000})) == 200


def test_body_has_host_check_state_output_and_time():
    text = body(DISK)
    for part in ("web-1", U1, "check_disk", "CRITICAL (exit status 2)", "DISK CRITICAL - / 95%",
                 "/ 95% used (19 GiB of 20)", "2023-11-14T22:13:20.000Z"):
        assert part in text


def test_email_message_headers():
    channel = email_channel(25)
    msg = email_message(DISK, channel, "fleetwatch@example.org", "17")
    assert msg["To"] == "ops@example.org, oncall@example.org"
    assert msg["From"] == "fleetwatch@example.org"
    assert "fleetwatch.17" in msg["Message-ID"]
    assert msg["X-Fleetwatch-Key"] == DISK["key"]


def test_webhook_payload_is_a_pagerduty_v2_event():
    payload = webhook_payload(DISK, webhook_channel("http://127.0.0.1/x"))
    assert payload["routing_key"] == "R" * 32
    assert payload["event_action"] == "trigger"
    assert payload["dedup_key"] == DISK["key"]
    p = payload["payload"]
    assert p["summary"] == "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
    assert (p["source"], p["severity"], p["component"]) == ("web-1", "critical", "check_disk")
    assert p["timestamp"] == "2023-11-14T22:13:20.000Z"
    assert p["custom_details"]["status"] == 2 and p["custom_details"]["uuid"] == U1
    resolve = webhook_payload({**DISK, "action": "resolve", "severity": "ok"},
                              webhook_channel("http://127.0.0.1/x"))
    assert resolve["event_action"] == "resolve" and resolve["dedup_key"] == DISK["key"]
    assert resolve["payload"]["severity"] == "info"


@pytest.mark.parametrize("severity,expected", [("critical", "critical"), ("error", "error"),
                                               ("unknown", "error"), ("warning", "warning"),
                                               ("info", "info"), ("ok", "info"),
                                               ("weird", "error")])
def test_webhook_severity_mapping(severity, expected):
    payload = webhook_payload({**DISK, "severity": severity}, webhook_channel("http://h/x"))
    assert payload["payload"]["severity"] == expected


def test_dedup_key_fits_pagerduty():
    long_key = f"{U1}/check/" + "p" * 255
    short = dedup_key(long_key)
    assert len(short) == 255 and short != dedup_key(long_key[:-1] + "q")
    assert dedup_key("a/b") == "a/b"


# ---------------------------------------------------------------- routing rules

@pytest.mark.parametrize("rule,event,expected", [
    ({}, DISK, True),
    ({"severity": ["critical"]}, DISK, True),
    ({"severity": ["warning"]}, DISK, False),
    ({"kind": ["host"]}, DISK, False),
    ({"kind": ["check", "host"]}, DISK, True),
    ({"host": "web-*"}, DISK, True),
    ({"host": "db-*"}, DISK, False),
    ({"host": "3f0c2b1e-*"}, DISK, True),                       # the uuid matches too
    ({"check": "check_d*"}, DISK, True),
    ({"check": "check_load"}, DISK, False),
    ({"check": "check_*"}, {**DISK, "check": None, "kind": "host"}, False),
    ({"check": "*"}, {**DISK, "check": None, "kind": "host"}, True),
    ({"host": "WEB-1"}, DISK, False),                            # case matters
    ({"severity": ["critical"], "host": "web-?", "check": "*disk"}, DISK, True),
])
def test_rule_matching(rule, event, expected):
    assert matches(Rule(channels=["x"], **rule), event) is expected


def test_route_is_the_union_of_matching_rules_in_order():
    rules = [Rule(severity=["critical"], channels=["pager", "mail"]),
             Rule(host="web-*", channels=["mail", "chat"]),
             Rule(host="db-*", channels=["dba"])]
    assert route(DISK, rules) == ["pager", "mail", "chat"]
    assert route({**DISK, "severity": "warning"}, rules) == ["mail", "chat"]
    assert route({**DISK, "hostname": "mx-1"}, []) == []


def test_delivery_config_errors_name_the_key():
    def error(data):
        with pytest.raises(ConfigError) as e:
            build(DeliveryConfig, data, "sink.yaml", "alerting.delivery")
        return str(e.value)
    assert "alerting.delivery.channels.m.to: expected at least one" in error(
        {"channels": {"m": {"type": "email"}}})
    assert "alerting.delivery.channels.m.type: expected one of email, webhook" in error(
        {"channels": {"m": {"type": "pager"}}})
    assert "channels.m.password_file: expected with username" in error(
        {"channels": {"m": {"type": "email", "to": ["a@b.c"], "username": "u"}}})
    assert "channels.m.password: unknown setting" in error(
        {"channels": {"m": {"type": "email", "to": ["a@b.c"], "password": "hunter2"}}})
    assert "rules[0].channels: no channel named 'pager'" in error(
        {"rules": [{"channels": ["pager"]}]})
    assert "rules[0].severity" in error({"channels": {"p": {"type": "webhook",
                                                            "url": "http://h/"}},
                                         "rules": [{"severity": ["fatal"], "channels": ["p"]}]})
    ok = build(DeliveryConfig, {"channels": {"m": {"type": "email", "to": ["a@b.c"],
                                                   "from": "fw@b.c"}},
                                "rules": [{"channels": ["m"]}]})
    assert ok.parsed_channels()["m"].sender == "fw@b.c"


# ---------------------------------------------------------------- email, real SMTP

def test_email_one_message_to_the_channel_recipients(smtp):
    receipt = EmailSender("mail", email_channel(smtp.port)).send(DISK, ref="1")
    (envelope,) = smtp.messages
    assert envelope.mail_from == "fleetwatch@example.org"
    assert envelope.rcpt_tos == ["ops@example.org", "oncall@example.org"]
    (msg,) = smtp.parsed()
    assert msg["Subject"] == "[fleetwatch] CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
    content = msg.get_content()
    assert "CRITICAL (exit status 2)" in content and "/ 95% used" in content
    # the receipt: the server's reply to DATA, and the Message-ID it took
    assert receipt.status == "SMTP 250" and receipt.message_id == msg["Message-ID"]
    assert receipt.answer == "OK queued"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (openssl), its key, and a client context."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(cert), str(key))
    return cert, server


def test_email_starttls_and_auth(certificate, tmp_path, caplog):
    cert, context = certificate
    server = SmtpServer(tls=context, users={"fleetwatch": "s3cret pass"}).start()
    try:
        secret = tmp_path / "smtp.pass"
        secret.write_text("s3cret pass\n")
        channel = email_channel(server.port, starttls=True, ca_file=str(cert),
                                username="fleetwatch", password_file=str(secret))
        EmailSender("mail", channel).send(DISK, ref="2")
        assert len(server.messages) == 1 and server.logins == ["fleetwatch"]
        secret.write_text("wrong\n")
        with pytest.raises(SendError) as e:
            EmailSender("mail", channel).send(DISK, ref="3")
        assert e.value.permanent and "535" in str(e.value)     # 5xx: retrying cannot help
        assert "wrong" not in str(e.value) and "s3cret" not in caplog.text
        # the server's certificate is verified: without the CA it is refused, never sent
        plain = email_channel(server.port, starttls=True, username="fleetwatch",
                              password_file=str(secret))
        with pytest.raises(SendError) as e:
            EmailSender("mail", plain).send(DISK, ref="4")
        assert not e.value.permanent and "CERTIFICATE_VERIFY_FAILED" in str(e.value)
        assert len(server.messages) == 1
    finally:
        server.stop()


def test_email_refused_recipients_fail_permanently():
    server = SmtpServer(refuse="550 5.1.1 no such mailbox").start()
    try:
        with pytest.raises(SendError) as e:
            EmailSender("mail", email_channel(server.port)).send(DISK, ref="5")
        assert e.value.permanent and "550" in str(e.value) and e.value.status == "SMTP 550"
    finally:
        server.stop()


def test_email_temporary_refusal_and_server_down_are_retried():
    server = SmtpServer(refuse="451 4.3.0 try again later").start()
    try:
        with pytest.raises(SendError) as e:
            EmailSender("mail", email_channel(server.port)).send(DISK, ref="6")
        assert not e.value.permanent and "451" in str(e.value)
    finally:
        server.stop()
    with pytest.raises(SendError) as e:
        EmailSender("mail", email_channel(free_port())).send(DISK, ref="7")
    assert not e.value.permanent and "Connection refused" in str(e.value)
    assert e.value.status is None                               # no answer at all


def test_smtp_auth_in_clear_is_refused_unless_allowed(tmp_path, caplog):
    """``username`` without ``starttls`` would send the password in clear;
    the config is refused, naming the key, unless ``allow_plaintext_auth: true`` says so,
    and then each sender warns once when it is made (at start, at a reload)."""
    mail = {"type": "email", "to": ["a@b.c"], "username": "u", "password_file": "/p"}
    with pytest.raises(ConfigError) as e:
        build(DeliveryConfig, {"channels": {"m": mail}}, "sink.yaml", "alerting.delivery")
    assert str(e.value).startswith("sink.yaml: alerting.delivery.channels.m.starttls: ")
    assert "allow_plaintext_auth" in str(e.value) and "\n" not in str(e.value)
    # no AUTH, or AUTH over STARTTLS: nothing to say
    build(DeliveryConfig, {"channels": {"m": {**mail, "starttls": True}}}, "sink.yaml")
    build(DeliveryConfig, {"channels": {"m": {"type": "email", "to": ["a@b.c"]}}}, "sink.yaml")
    allowed = build(DeliveryConfig, {"channels": {"m": {**mail, "allow_plaintext_auth": True}}},
                    "sink.yaml")
    caplog.set_level(logging.WARNING, logger="sinks.alerting.delivery.channels")
    senders(allowed)
    warned = [r.getMessage() for r in caplog.records if "in clear" in r.getMessage()]
    assert len(warned) == 1 and "channel m" in warned[0], caplog.text


def test_email_password_file_missing_is_retried_and_names_the_file(smtp, tmp_path):
    channel = email_channel(smtp.port, username="u", password_file=str(tmp_path / "nope"),
                            allow_plaintext_auth=True)
    with pytest.raises(SendError) as e:
        EmailSender("mail", channel).send(DISK, ref="8")
    assert not e.value.permanent and "nope" in str(e.value) and smtp.messages == []


# ---------------------------------------------------------------- webhook, real HTTP

def test_webhook_posts_the_event(receiver):
    channel = webhook_channel(receiver.url, headers={"X-Token": "t0k"})
    receipt = WebhookSender("pager", channel).send(DISK, ref="1")
    assert receiver.posts == [webhook_payload(DISK, channel)]
    assert receipt.status == "HTTP 202" and receipt.message_id == DISK["key"]
    assert json.loads(receipt.answer)["message"] == "Event processed"
    (req,) = receiver.requests
    assert req["path"] == "/v2/enqueue" and req["headers"]["Content-Type"] == "application/json"
    assert req["headers"]["X-Token"] == "t0k"


@pytest.mark.parametrize("code,permanent", [(400, True), (403, True), (404, True),
                                            (302, True), (408, False), (429, False),
                                            (500, False), (503, False)])
def test_webhook_answers(code, permanent):
    receiver = HttpReceiver(default=code, headers={"Retry-After": "7",
                                                   "Location": "http://127.0.0.1:1/"}).start()
    try:
        with pytest.raises(SendError) as e:
            WebhookSender("pager", webhook_channel(receiver.url)).send(DISK, ref="1")
        assert e.value.permanent is permanent and f"HTTP {code}" in str(e.value)
        assert e.value.status == f"HTTP {code}"
        assert len(receiver.requests) == 1                     # a redirect is not followed
        if code == 429:
            assert e.value.retry_after == 7.0
    finally:
        receiver.stop()


def test_a_receipt_keeps_the_answer_on_one_line_without_control_characters():
    """What a service answers is shown in a terminal (``alerts --deliveries``) and a page:
    one line, escapes where it had control characters, at most ANSWER_MAX long."""
    from sinks.alerting.delivery.channels import ANSWER_MAX, Receipt
    r = Receipt.of("HTTP 200", "id\x1b[31m", "ok\x1b]0;owned\x07\nsecond line " + "x" * 500)
    assert "\x1b" not in r.answer + r.message_id and "\x07" not in r.answer
    assert "\n" not in r.answer and r.answer.startswith("ok\\x1b]0;owned\\x07 second line")
    assert len(r.answer) == ANSWER_MAX
    assert Receipt.of("SMTP 250").message_id is None and Receipt.of("SMTP 250").answer == ""


def test_webhook_down_is_retried_and_hides_the_query():
    url = f"http://127.0.0.1:{free_port()}/hook?token=s3cret"
    with pytest.raises(SendError) as e:
        WebhookSender("pager", webhook_channel(url)).send(DISK, ref="1")
    assert not e.value.permanent and "s3cret" not in str(e.value)


def test_an_alert_links_to_its_host_or_its_own_page_in_the_console():
    from sinks.alerting.delivery.channels import link
    base = "https://fleet.example.com/"
    assert link(DISK, 7, base) == f"https://fleet.example.com/hosts/{DISK['uuid']}"
    told = {"kind": "channel", "uuid": None, "key": "channel/pager"}
    assert link(told, 7, base) == "https://fleet.example.com/alerts/7"
    assert link(DISK, 7, "") is None
    linked = {**DISK, "link": link(DISK, 7, base)}
    channel = webhook_channel("http://127.0.0.1:9/")
    assert webhook_payload(linked, channel)["links"] == [
        {"href": f"https://fleet.example.com/hosts/{DISK['uuid']}",
         "text": "the fleetwatch console"}]
    assert "links" not in webhook_payload(DISK, channel)
    assert body(linked).endswith(f"In the console: {linked['link']}\n")
    with pytest.raises(ConfigError, match="console_url: expected"):
        build(DeliveryConfig, {"console_url": "fleet.example.com"}, "sink.yaml")


def test_a_fallback_names_another_channel_and_makes_no_loop():
    hook = {"type": "webhook", "url": "http://127.0.0.1:9/"}

    def config(**fallbacks):
        return build(DeliveryConfig, {"channels": {
            name: {**hook, "fallback": fallbacks.get(name, "")} for name in ("a", "b", "c")}},
            "sink.yaml", "alerting.delivery")
    assert config(a="b", b="c").parsed_channels()["a"].fallback == "b"      # a chain
    with pytest.raises(ConfigError) as e:
        config(a="nope")
    assert str(e.value).startswith("sink.yaml: alerting.delivery.channels.a.fallback: ")
    assert "no channel named 'nope' (known: a, b, c)" in str(e.value)
    with pytest.raises(ConfigError) as e:
        config(a="b", b="c", c="a")
    assert "a loop (a -> b -> c -> a)" in str(e.value)
    with pytest.raises(ConfigError) as e:
        config(b="b")
    assert "a loop (b -> b)" in str(e.value)


def test_demo_delivery_config():
    from sinks.alerting.delivery.config import for_demo
    data = for_demo("http://127.0.0.1:8080/hook", "127.0.0.1:2525", ["ops@example.org"])
    cfg = build(DeliveryConfig, data)
    channels = cfg.parsed_channels()
    assert channels["webhook"].url == "http://127.0.0.1:8080/hook"
    assert (channels["email"].host, channels["email"].port) == ("127.0.0.1", 2525)
    assert channels["email"].to == ["ops@example.org"]
    assert route({**DISK, "severity": "info"}, cfg) == ["webhook", "email"]
    assert for_demo() == {"channels": {}, "rules": [], "retry": data["retry"]}
    for args, message in [((None, "smtp.example.org", ["a@b.c"]), "--alert-smtp: expected HOST:PORT"),
                          ((None, "h:25", []), "--alert-to: expected at least one"),
                          ((None, None, ["a@b.c"]), "--alert-to: needs --alert-smtp"),
                          (("ftp://x", None, []), "--alert-webhook: expected an http"),
                          ((None, "h:25", ["nobody"]), "--alert-smtp/--alert-to: expected plain")]:
        with pytest.raises(ValueError, match=message):
            for_demo(*args)
