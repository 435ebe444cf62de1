"""Alert delivery end to end: the outbox and real deliverer threads against a real SMTP
server (aiosmtpd) and a real HTTP receiver on 127.0.0.1, on SQLite and PostgreSQL.

One message per event with the right recipients; a receiver down then up gets each alert
exactly once; two deliverers on one database send each row once; a 400 fails the row
without a retry storm. Then the real alerting sink process: a NOTIFY from a real agent
through a real router reaches the webhook, and ``fleetwatch alerts`` shows it sent.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from support.fleet import intake_path, wait_for, wait_intake
from fleetwatch.config import build
from support.channelservers import HttpReceiver, SmtpServer

pytest.importorskip("sqlalchemy")
pytest.importorskip("aiosmtpd")
pytestmark = pytest.mark.timeout(90)

from fleetwatch.store import reads  # noqa: E402

from sinks.alerting.delivery import store as outbox
from sinks.alerting.delivery.deliverer import Deliverer  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
FAST = {"initial": 0.05, "max": 0.2, "max_age": 60, "jitter": 0.2}


def event(n: int, action: str = "trigger", severity: str = "critical") -> dict:
    return {"key": f"{U1}/check/check_{n}", "kind": "check", "action": action,
            "severity": severity, "uuid": U1, "hostname": "web-1", "check": f"check_{n}",
            "status": 2 if action == "trigger" else 0,
            "summary": f"CHECK {n} {'CRITICAL' if action == 'trigger' else 'OK'}",
            "text": "details", "created": time.time()}


def delivery(webhook: str | None = None, smtp_port: int | None = None, **extra):
    channels, names = {}, []
    if webhook:
        channels["pager"] = {"type": "webhook", "url": webhook, "routing_key": "K" * 32,
                             "timeout": 2}
        names.append("pager")
    if smtp_port:
        channels["mail"] = {"type": "email", "host": "127.0.0.1", "port": smtp_port,
                            "from": "fleetwatch@example.org", "timeout": 2,
                            "to": ["ops@example.org", "dba@example.org"]}
        names.append("mail")
    # (a channel's own failure, kind channel, goes nowhere: see test_channel_health.py)
    return build(DeliveryConfig, {"channels": channels,
                                  "rules": [{"kind": ["check"], "channels": names}],
                                  "retry": FAST, "poll_interval": 0.05, "lease": 10,
                                  **extra})


def enqueue(eng, config, *events) -> None:
    with eng.begin() as conn:
        for ev in events:
            outbox.enqueue(conn, ev, config)


def states(eng) -> Counter:
    with eng.connect() as conn:
        return Counter(d["state"] for e in reads.alert_events(conn, limit=1000)
                       for d in e["deliveries"])


def test_one_message_per_event_per_channel(eng, deliverers):
    smtp, hook = SmtpServer().start(), HttpReceiver().start()
    try:
        config = delivery(hook.url, smtp.port)
        deliverers(config)
        enqueue(eng, config, event(1), event(2, severity="warning"))
        wait_for(lambda: states(eng) == {"sent": 4}, 20, what="4 deliveries sent")
        assert len(smtp.messages) == 2 and len(hook.posts) == 2
        for envelope in smtp.messages:
            assert envelope.rcpt_tos == ["ops@example.org", "dba@example.org"]
        subjects = sorted(m["Subject"] for m in smtp.parsed())
        assert subjects == ["[fleetwatch] CRITICAL web-1/check_1: CHECK 1 CRITICAL",
                            "[fleetwatch] WARNING web-1/check_2: CHECK 2 CRITICAL"]
        assert sorted(p["dedup_key"] for p in hook.posts) == [f"{U1}/check/check_1",
                                                              f"{U1}/check/check_2"]
        enqueue(eng, config, event(1, action="resolve", severity="ok"))
        wait_for(lambda: states(eng) == {"sent": 6}, 20, what="the recovery sent")
        assert hook.posts[-1]["event_action"] == "resolve"
        assert smtp.parsed()[-1]["Subject"].startswith("[fleetwatch] RECOVERY web-1/check_1")
    finally:
        smtp.stop()
        hook.stop()


def test_receivers_down_then_up_get_each_alert_exactly_once(eng, deliverers):
    smtp, hook = SmtpServer().start(), HttpReceiver().start()
    smtp.stop(hold=True)
    hook.stop(hold=True)                          # both down; their ports are known
    try:
        config = delivery(hook.url, smtp.port)
        (d,) = deliverers(config)
        enqueue(eng, config, *[event(n) for n in range(5)])
        wait_for(lambda: d.counts["retry.pager"] >= 3 and d.counts["retry.mail"] >= 3, 20,
                 what="retries while the receivers are down")
        assert states(eng) == {"pending": 10}
        hook.start()
        smtp.start()
        wait_for(lambda: states(eng) == {"sent": 10}, 30, what="all sent once back")
        assert sorted(p["dedup_key"] for p in hook.posts) == sorted(
            f"{U1}/check/check_{n}" for n in range(5))
        assert len(smtp.messages) == 5
        with eng.connect() as conn:
            attempts = [d["attempts"] for e in reads.alert_events(conn) for d in e["deliveries"]]
        assert max(attempts) > 1
    finally:
        smtp.stop()
        hook.stop()


def test_every_attempt_is_recorded_with_what_the_service_answered(eng, deliverers):
    """Proof of delivery (issue 34): each attempt is a ``deliveries`` row written with its
    outcome: refused connections as retries without a status, then the webhook's 202 with
    the dedup_key PagerDuty answers, and the SMTP server's 250 with the email's
    Message-ID, as ``alerts --deliveries`` reads them."""
    from fleetwatch.actions.alerts import deliveries, delivery_document
    smtp, hook = SmtpServer().start(), HttpReceiver().start()
    smtp.stop(hold=True)
    hook.stop(hold=True)
    try:
        config = delivery(hook.url, smtp.port)
        (d,) = deliverers(config)
        enqueue(eng, config, event(1))
        wait_for(lambda: d.counts["retry.pager"] >= 1 and d.counts["retry.mail"] >= 1, 20,
                 what="a retry on each channel while the receivers are down")
        hook.start()
        smtp.start()
        wait_for(lambda: states(eng) == {"sent": 2}, 30, what="both sent once back")
        url = eng.url.render_as_string(hide_password=False)
        found = delivery_document(*deliveries(url, None))["deliveries"]
        by = {(r["channel"], r["outcome"]): r for r in found}
        assert {r["outcome"] for r in found} == {"retry", "sent"}
        for channel in ("pager", "mail"):
            retried = [r for r in found if r["channel"] == channel and r["outcome"] == "retry"]
            assert retried and all(r["status"] is None for r in retried), retried
            sent = by[(channel, "sent")]
            assert sent["attempt"] == len(retried) + 1
            assert sent["check"] == "check_1" and sent["hostname"] == "web-1"
            assert sent["action"] == "trigger" and sent["grouped"] == 1
            assert sent["started_at"].endswith("Z") and sent["latency_ms"] >= 0
        assert by[("pager", "sent")]["status"] == "HTTP 202"
        assert by[("pager", "sent")]["message_id"] == f"{U1}/check/check_1"
        assert "Event processed" in by[("pager", "sent")]["answer"]
        (mail,) = smtp.parsed()
        assert by[("mail", "sent")]["status"] == "SMTP 250"
        assert by[("mail", "sent")]["message_id"] == mail["Message-ID"]
        only_mail = delivery_document(*deliveries(url, 1, "mail"))
        assert only_mail["truncated"] and [r["channel"] for r in only_mail["deliveries"]] == [
            "mail"]
        assert only_mail["deliveries"][0]["outcome"] == "sent"      # the newest first
    finally:
        smtp.stop()
        hook.stop()


def test_two_deliverers_on_one_database_send_each_row_once(eng, deliverers):
    hook = HttpReceiver().start()
    try:
        config = delivery(hook.url, batch=3)
        deliverers(config, n=2)
        events = [event(n) for n in range(60)]
        for i in range(0, 60, 10):                # arriving while both deliver
            enqueue(eng, config, *events[i:i + 10])
        wait_for(lambda: states(eng) == {"sent": 60}, 40, what="60 rows sent")
        keys = Counter(p["dedup_key"] for p in hook.posts)
        assert len(keys) == 60 and set(keys.values()) == {1}
        assert len(hook.requests) == 60
    finally:
        hook.stop()


def test_a_400_fails_the_row_without_a_retry_storm(eng):
    hook = HttpReceiver(default=400).start()
    try:
        config = delivery(hook.url)
        d = Deliverer(eng, config, name="sink")
        enqueue(eng, config, event(1), event(2))
        for _ in range(20):                       # rounds after the refusal claim nothing
            d.run_once()
        assert states(eng) == {"failed": 2}
        assert len(hook.requests) == 2 and d.counts["failed.pager"] == 2
        with eng.connect() as conn:
            events = reads.alert_events(conn)
        (told,) = [e for e in events if e["kind"] == "channel"]
        (first, _) = [e for e in events if e["kind"] != "channel"]
        assert "HTTP 400" in first["deliveries"][0]["last_error"]
        # the channel refused for good: failing at once, said once, and to no channel (its
        # only one is the one failing)
        assert told["summary"].startswith("channel pager failing since ")
        assert "HTTP 400 Bad Request" in told["summary"] and told["deliveries"] == []
    finally:
        hook.stop()


# ---------------------------------------------------------------- the real alerting sink

def test_alerting_sink_refuses_smtp_auth_in_clear_at_start(fleet):
    """Exit 78 and one line naming the file and the key; with the explicit
    opt-in the sink starts and says once that the password crosses the network in clear."""
    mail = {"type": "email", "host": "127.0.0.1", "port": 2525, "to": ["ops@example.org"],
            "username": "fleetwatch", "password_file": str(fleet.root / "smtp.pass")}
    path = fleet.write("sink-mail.yaml", {
        "routers": ["tcp://127.0.0.1:1"], "state_url": fleet.state_url,
        "alerting": {"delivery": {"channels": {"mail": mail},
                                  "rules": [{"channels": ["mail"]}]}}})
    res = fleet.cli("sink", "alerting", "--config", str(path), check=False)
    assert res.returncode == 78, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"fleetwatch sink: {path}: alerting.delivery.channels.mail.starttls: "), res.stderr
    assert "allow_plaintext_auth" in lines[0]

    router = fleet.router()
    sink = fleet.sink("alerting", [router], alerting={"delivery": {
        "channels": {"mail": {**mail, "allow_plaintext_auth": True}},
        "rules": [{"channels": ["mail"]}]}})
    wait_for(lambda: "in clear" in sink.log(), 20, what="the warning")
    assert sink.alive() and sink.log().count("in clear") == 1



def test_alerting_sink_delivers_a_notify_and_alerts_shows_it(fleet):
    hook = HttpReceiver().start()
    try:
        router = fleet.router()
        fleet.sink("alerting", [router], alerting={"delivery": {
            "channels": {"pager": {"type": "webhook", "url": hook.url, "routing_key": "K" * 32,
                                   "timeout": 2}},
            "rules": [{"severity": ["error", "critical"], "channels": ["pager"]}],
            "retry": FAST, "poll_interval": 0.1, "lease": 10}})
        agent_cfg = fleet.agent_config([router])
        fleet.start("agent", "agent", "--config", str(agent_cfg))
        op = fleet.operator_config([router])
        wait_intake(intake_path(fleet))
        msg_id = fleet.cli("send", "notify", "--config", str(agent_cfg), "--severity", "error",
                           "disk on fire").stdout.strip()
        fleet.cli("send", "notify", "--config", str(agent_cfg), "--severity", "info",
                  "backup done")
        wait_for(lambda: hook.posts, 30, interval=0.1, what="the webhook POST")
        (post,) = hook.posts
        assert post["dedup_key"].endswith(f"/notify/{msg_id}")
        assert post["payload"]["severity"] == "error"
        assert "disk on fire" in post["payload"]["summary"]

        def shown():
            out = json.loads(fleet.command("alerts", "--config", str(op), "--json").stdout)
            mine = [a for a in out["alerts"] if a.get("msg_id") == msg_id]
            return mine if mine and mine[0]["deliveries"] and \
                mine[0]["deliveries"][0]["state"] == "sent" else None
        (alert,) = wait_for(shown, 20, interval=0.2, what="the alert shown as sent")
        (delivered,) = alert["deliveries"]
        assert delivered["channel"] == "pager" and delivered["attempts"] == 1
        assert delivered["sent_at"]
        text = fleet.cli("alerts", "--config", str(op)).stdout
        assert "pager: sent" in text
        lines = fleet.command("alerts", "--config", str(op), "--deliveries").stdout.splitlines()
        assert lines[0].split() == ["STARTED", "CHANNEL", "WHAT", "ACTION", "ATTEMPT",
                                    "OUTCOME", "STATUS", "MS", "MESSAGE_ID", "ANSWER"]
        (row,) = lines[1:]
        assert " pager " in row and " sent " in row and "HTTP 202" in row
        assert f"/notify/{msg_id}" in row and "Event processed" in row
        refused = fleet.command("alerts", "--config", str(op), "--channel", "pager",
                                check=False)
        assert refused.returncode == 64 and "--channel goes with --deliveries" in refused.stderr
    finally:
        hook.stop()


def test_two_alerting_sinks_and_a_webhook_down_then_up_deliver_each_alert_once(fleet):
    hook = HttpReceiver().start()
    hook.stop(hold=True)                          # down from the start; its port is known
    try:
        router = fleet.router()
        delivery_cfg = {"delivery": {
            "channels": {"pager": {"type": "webhook", "url": hook.url, "timeout": 1}},
            "rules": [{"channels": ["pager"]}],
            "retry": {**FAST, "max": 0.5}, "poll_interval": 0.1, "lease": 5, "batch": 4}}
        for name in ("alerting-a", "alerting-b"):
            fleet.sink("alerting", [router], name=name, alerting=delivery_cfg)
        agent_cfg = fleet.agent_config([router])
        fleet.start("agent", "agent", "--config", str(agent_cfg))
        op = str(fleet.operator_config([router]))
        wait_intake(intake_path(fleet))
        from agent.client import Client
        with Client(config_path=str(agent_cfg)) as client:
            sent = [client.notify(f"alert {i}", severity="error") for i in range(12)]

        def deliveries():
            out = json.loads(fleet.command("alerts", "--config", op, "--json").stdout)["alerts"]
            return {a["msg_id"]: a["deliveries"] for a in out if a["msg_id"] in sent}
        wait_for(lambda: len(deliveries()) == 12 and all(
            d and d[0]["attempts"] >= 1 for d in deliveries().values()), 30, interval=0.5,
            what="12 alerts recorded and tried while the webhook is down")
        assert hook.posts == []
        hook.start()
        wait_for(lambda: all(d[0]["state"] == "sent" for d in deliveries().values()), 30,
                 interval=0.5, what="every alert sent once the webhook is back")
        keys = Counter(p["dedup_key"].rpartition("/")[2] for p in hook.posts)
        assert sorted(keys) == sorted(sent) and set(keys.values()) == {1}
        assert len(hook.requests) == 12
    finally:
        hook.stop()


def test_a_channel_slow_to_answer_never_delays_another_channels_alerts(eng, deliverers):
    """The pager holds its answer (a service timing out, a hung connection): the ntfy
    channel's alerts go out meanwhile, one after another, while the pager's first send is
    still waiting; once the pager answers, its alerts follow, in order."""
    from fleetwatch.cli.demo.receivers import Ntfy, Pager
    pager, phone = Pager(None, 0).start(), Ntfy(None, 0).start()
    try:
        pager.hold()
        config = build(DeliveryConfig, {
            "channels": {"pager": {"type": "webhook", "url": pager.url, "timeout": 30},
                         "phone": {"type": "ntfy", "url": phone.url, "topic": "ops",
                                   "timeout": 5}},
            "rules": [{"kind": ["check"], "channels": ["pager", "phone"]}],
            "retry": FAST, "poll_interval": 0.05, "lease": 90})
        deliverers(config)
        enqueue(eng, config, event(1))
        wait_for(lambda: pager.taken, 20, 0.02, "the pager's first send (held)")
        enqueue(eng, config, event(2))
        enqueue(eng, config, event(3))
        wait_for(lambda: states(eng)["sent"] == 3, 20, 0.02,    # (well within the 30 s)
                 "three alerts sent to the phone while the pager holds its answer")
        assert len(phone.messages) == 3 and len(pager.taken) == 1
        assert states(eng)["pending"] == 3                              # (the pager's)
        pager.release()
        wait_for(lambda: states(eng) == Counter(sent=6), 20, 0.05, "everything sent")
        assert [b["dedup_key"][-7:] for _, _, b in pager.taken] == [
            "check_1", "check_2", "check_3"]
    finally:
        pager.stop()
        phone.stop()
