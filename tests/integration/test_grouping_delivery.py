"""Grouping in the outbox, on SQLite and PostgreSQL: a grouped channel's alerts wait
``group_wait``, a group is claimed whole by one deliverer, sent as one message (email) or
one event per key (webhook), retried as a group, and survives a crashed sink.

Fake senders and a fake clock first; then real deliverer threads, two on one database,
against a real SMTP server and a real HTTP receiver (tests/support/channelservers.py); then
real processes: 200 hosts behind a dead switch, two alerting sinks, one email.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from support.channelservers import HttpReceiver, SmtpServer
from support.clock import Clock
from support.fleet import wait_for
from fleetwatch.config import build
from sinks.alerting.delivery.channels import SendError
from sinks.alerting.delivery.config import DeliveryConfig

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(90)

from sinks.alerting.delivery import store as outbox  # noqa: E402
from sinks.alerting.delivery.deliverer import Deliverer  # noqa: E402

T0 = 1_800_000_000.0
W = 30.0
DEALERS = str(Path(__file__).parents[1] / "support" / "dealers.py")


def event(host: str = "web-1", check: str | None = "check_disk", action: str = "trigger",
          severity: str = "critical", created: float = T0) -> dict:
    kind = "check" if check else "host"
    return {"key": f"u-{host}/{f'check/{check}' if check else 'host'}", "kind": kind,
            "action": action, "severity": severity, "uuid": f"u-{host}", "hostname": host,
            "check": check, "status": 2 if action == "trigger" else 0,
            "summary": "DOWN" if not check else f"{check} {severity}", "text": "",
            "created": created}


def config(mail: dict | None = None, pager: dict | None = None, **extra) -> DeliveryConfig:
    return build(DeliveryConfig, {
        "channels": {"mail": {"type": "email", "to": ["ops@example.org"], "timeout": 5,
                              "group_wait": W, **(mail or {})},
                     "pager": {"type": "webhook", "url": "http://127.0.0.1:1/", "timeout": 5,
                               **(pager or {})}},
        "rules": [{"channels": ["mail", "pager"]}],
        "retry": {"initial": 10, "max": 80, "max_age": 1000, "jitter": 0.5},
        "lease": 60, "batch": 10, **extra})


GROUPS = {"mail": (W, ())}


def enqueue(eng, cfg, *events, now=T0):
    with eng.begin() as conn:
        for ev in events:
            outbox.enqueue(conn, ev, cfg, now=now)


def claim(eng, worker, now, groups=None, channels=("mail",), limit=10):
    with eng.begin() as conn:
        return outbox.claim(conn, worker, now, 60, limit, channels,
                            GROUPS if groups is None else groups)


def rows(eng, channel="mail"):
    from sqlalchemy import select
    with eng.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(
            select(outbox.outbox).where(outbox.outbox.c.channel == channel)
            .order_by(outbox.outbox.c.id))]


def hosts(claimed):
    return sorted(r["event"]["hostname"] for r in claimed)


# ---------------------------------------------------------------- claims

def test_a_group_waits_group_wait_then_goes_whole(eng):
    cfg = config()
    enqueue(eng, cfg, event("a"), now=T0)
    enqueue(eng, cfg, event("b"), now=T0 + 10)
    enqueue(eng, cfg, event("c"), now=T0 + 29.9)
    assert claim(eng, "w", T0 + 29.999) == []                   # the boundary, exclusive
    # the ungrouped pager sends each at once
    assert hosts(claim(eng, "w", T0 + 29.9, groups={}, channels=("pager",))) == ["a", "b", "c"]
    got = claim(eng, "w", T0 + W)                               # a is due; b and c join it
    assert hosts(got) == ["a", "b", "c"]
    with eng.begin() as conn:
        assert outbox.mark(conn, [r["id"] for r in got], "w", T0 + W, outbox.SENT) == 3
    enqueue(eng, cfg, event("d"), now=T0 + W + 1)               # after the send: a new group
    assert claim(eng, "w", T0 + 2 * W) == []
    assert hosts(claim(eng, "w", T0 + 2 * W + 1)) == ["d"]


@pytest.mark.parametrize("by, due_at_w", [
    ((), ["a", "a", "b"]),
    (("host",), ["a", "a"]),
    (("check",), ["a", "b"]),
    (("host", "check"), ["a"]),
])
def test_group_by_decides_who_goes_together(eng, by, due_at_w):
    cfg = config(mail={"group_by": list(by)})
    enqueue(eng, cfg, event("a", "disk"), now=T0)
    enqueue(eng, cfg, event("a", "load"), event("b", "disk"), now=T0 + 20)
    assert hosts(claim(eng, "w", T0 + W, groups={"mail": (W, by)})) == due_at_w


def test_one_deliverer_holds_a_group_and_a_crashed_ones_claim_expires_whole(eng):
    cfg = config()
    enqueue(eng, cfg, *[event(f"h{i}") for i in range(25)])   # more than the batch of 10
    first = claim(eng, "dead", T0 + W)
    assert len(first) == 25
    assert claim(eng, "b", T0 + W + 1) == []
    again = claim(eng, "b", T0 + W + 61)                      # the dead sink's lease is over
    assert sorted(r["id"] for r in again) == sorted(r["id"] for r in first)


def test_concurrent_claims_take_each_row_of_each_group_once(eng):
    cfg = config(mail={"group_by": ["host"]})
    enqueue(eng, cfg, *[event(f"h{i % 7}", f"c{i}") for i in range(70)])
    taken: Counter = Counter()
    errors = []

    def worker(name):
        try:
            while True:
                got = claim(eng, name, T0 + W, groups={"mail": (W, ("host",))}, limit=2)
                if not got:
                    return
                for r in got:
                    taken[r["id"]] += 1
                with eng.begin() as conn:
                    outbox.mark(conn, [r["id"] for r in got], name, T0 + W, outbox.SENT)
        except Exception as e:                      # asserted below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(taken) == 70 and set(taken.values()) == {1}


def test_a_recovery_is_never_in_its_problems_message(eng):
    cfg = config()
    enqueue(eng, cfg, event("a"), event("b"), now=T0)
    enqueue(eng, cfg, event("a", action="resolve", severity="ok"), now=T0 + 5)
    got = claim(eng, "w", T0 + W)
    assert [(r["event"]["hostname"], r["event"]["action"]) for r in got] == [
        ("a", "trigger"), ("b", "trigger")]
    with eng.begin() as conn:
        outbox.mark(conn, [r["id"] for r in got], "w", T0 + W, outbox.SENT)
    (resolve,) = claim(eng, "w", T0 + 5 + W)                  # its own group_wait
    assert resolve["event"]["action"] == "resolve"


def test_rows_waiting_for_a_retry_do_not_join_a_new_group_early(eng):
    cfg = config()
    enqueue(eng, cfg, event("a"), now=T0)
    (a,) = claim(eng, "w", T0 + W)
    with eng.begin() as conn:
        outbox.mark(conn, a["id"], "w", T0 + W, outbox.PENDING, error="down",
                    next_attempt=T0 + 200)
    enqueue(eng, cfg, event("b"), now=T0 + 40)
    assert hosts(claim(eng, "w", T0 + 40 + W)) == ["b"]      # a waits for its retry


# ---------------------------------------------------------------- the deliverer

class FakeMail:
    """An email sender: records single sends and group sends; ``fail`` errors first."""

    def __init__(self):
        self.timeout, self.sent, self.groups, self.fail = 5.0, [], [], []

    def send(self, event, ref):
        if self.fail:
            raise self.fail.pop(0)
        self.sent.append(event["hostname"])

    def send_group(self, events, ref, title=""):
        if self.fail:
            raise self.fail.pop(0)
        self.groups.append((title, [e["hostname"] for e in events]))


class FakeHook:
    def __init__(self):
        self.timeout, self.sent = 5.0, []

    def send(self, event, ref):
        self.sent.append(event["hostname"])


def deliverer(eng, clock, cfg):
    senders = {"mail": FakeMail(), "pager": FakeHook()}
    return Deliverer(eng, cfg, senders, "test", clock=clock, rand=lambda: 0.0), senders


def test_deliverer_sends_a_group_as_one_message_and_retries_it_as_a_group(eng):
    clock = Clock(T0)
    cfg = config(mail={"group_by": ["severity"]}, pager={"group_wait": W})
    d, senders = deliverer(eng, clock, cfg)
    enqueue(eng, cfg, *[event(f"h{i}") for i in range(3)], event("w", severity="warning"))
    senders["mail"].fail = [SendError("451 try later")]
    clock.now = T0 + W - 1
    assert d.run_once() == 0 and senders["pager"].sent == []  # the webhook waits too
    clock.now = T0 + W
    d.run_once()
    assert sorted(senders["pager"].sent) == ["h0", "h1", "h2", "w"]   # one event per key
    # the critical group failed: its rows share one retry; the warning's was given back
    pending = [r for r in rows(eng) if r["state"] == "pending"]
    assert sorted((r["attempts"], r["next_attempt"]) for r in pending) == [
        (0, T0), (1, T0 + W + 10), (1, T0 + W + 10), (1, T0 + W + 10)]
    clock.now = T0 + W + 10
    d.run_once()
    assert sorted(senders["mail"].groups) == [("severity critical", ["h0", "h1", "h2"])]
    assert senders["mail"].sent == ["w"]                      # a group of one: today's message
    assert {r["state"] for r in rows(eng)} == {"sent"}
    assert d.counts["sent.mail"] == 4 and d.counts["grouped.mail"] == 1


def test_a_sink_that_dies_mid_group_loses_nothing(eng):
    clock = Clock(T0)
    cfg = config()
    enqueue(eng, cfg, *[event(f"h{i}") for i in range(12)])
    dead, dead_senders = deliverer(eng, clock, cfg)
    dead_senders["mail"].send_group = lambda *a, **k: (_ for _ in ()).throw(SystemExit())
    clock.now = T0 + W
    with pytest.raises(SystemExit):                          # killed while sending
        dead.run_once()
    other, senders = deliverer(eng, clock, cfg)
    clock.now = T0 + W + 30
    other.run_once()
    assert senders["mail"].groups == []                       # the claim still holds
    clock.now = T0 + W + 61
    other.run_once()
    assert [len(g) for _, g in senders["mail"].groups] == [12]
    assert {r["state"] for r in rows(eng)} == {"sent"}


def test_past_max_age_only_the_old_rows_of_a_group_fail(eng):
    clock = Clock(T0)
    cfg = config()
    d, senders = deliverer(eng, clock, cfg)
    enqueue(eng, cfg, event("old"), now=T0)
    (row,) = claim(eng, "x", T0 + W)
    with eng.begin() as conn:
        outbox.mark(conn, row["id"], "x", T0 + W, outbox.PENDING, error="down",
                    next_attempt=T0 + 1000)
    enqueue(eng, cfg, event("young"), now=T0 + 990)
    senders["mail"].fail = [SendError("down")]
    clock.now = T0 + 1020
    d.run_once()
    assert {r["id"]: r["state"] for r in rows(eng)} == {
        row["id"]: "failed", row["id"] + 2: "pending"}


# ---------------------------------------------------------------- real servers, real threads

FAST = {"initial": 0.05, "max": 0.2, "max_age": 60, "jitter": 0.2}


def sent_rows(eng, channel):
    return [r for r in rows(eng, channel) if r["state"] == "sent"]


def test_500_alerts_within_group_wait_are_one_email_with_a_cap_and_a_count(eng, deliverers):
    pytest.importorskip("aiosmtpd")
    smtp = SmtpServer().start()
    try:
        cfg = build(DeliveryConfig, {
            "channels": {"mail": {"type": "email", "host": "127.0.0.1", "port": smtp.port,
                                  "from": "fleetwatch@example.org", "to": ["ops@example.org"],
                                  "timeout": 2, "group_wait": 2, "group_list": 20}},
            "rules": [{"channels": ["mail"]}], "retry": FAST, "poll_interval": 0.05,
            "lease": 10})
        # the sinks' clock stands still until the 500 are in (on a loaded machine the five
        # transactions can outlast the group's 2 s; within the window is the claim here)
        start, enqueued = time.time(), threading.Event()

        def clock() -> float:
            return time.time() if enqueued.is_set() else min(time.time(), start + 1)
        deliverers(cfg, n=2, clock=clock)                   # two sinks on one outbox
        for part in range(5):                               # 5 transactions of 100 hosts
            enqueue(eng, cfg, *[event(f"sw3-host-{part * 100 + i:03d}", None, created=start)
                                for i in range(100)], now=clock())
        enqueued.set()
        wait_for(lambda: len(sent_rows(eng, "mail")) == 500, 30, what="500 alerts sent")
        assert len(smtp.messages) == 1
        (msg,) = smtp.parsed()
        assert msg["Subject"] == "[fleetwatch] 500 alerts: 500 DOWN"
        text = msg.get_content().replace("\r\n", "\n")
        assert text.count("\n  DOWN sw3-host-") == 20 and "  ... and 480 more\n" in text
        assert "DOWN sw3-host-000: DOWN" in text
        assert min(r["sent_at"] for r in sent_rows(eng, "mail")) >= start + 2
    finally:
        smtp.stop()


def test_the_webhook_posts_one_event_per_key_after_group_wait(eng, deliverers):
    hook = HttpReceiver().start()
    try:
        cfg = build(DeliveryConfig, {
            "channels": {"pager": {"type": "webhook", "url": hook.url, "routing_key": "K" * 32,
                                   "timeout": 2, "group_wait": 1.5, "group_by": ["host"]}},
            "rules": [{"channels": ["pager"]}], "retry": FAST, "poll_interval": 0.05,
            "lease": 10})
        deliverers(cfg, n=2)
        start = time.time()
        enqueue(eng, cfg, *[event(f"web-{i % 3}", f"check_{i}") for i in range(30)],
                now=start)
        wait_for(lambda: len(hook.posts) >= 30, 30, what="30 events posted")
        assert len(hook.requests) == 30                     # each once, across two sinks
        keys = [p["dedup_key"] for p in hook.posts]
        assert sorted(keys) == sorted(f"u-web-{i % 3}/check/check_{i}" for i in range(30))
        assert {p["event_action"] for p in hook.posts} == {"trigger"}
        assert min(r["sent_at"] for r in sent_rows(eng, "pager")) >= start + 1.5
    finally:
        hook.stop()


# ---------------------------------------------------------------- real processes

def test_200_hosts_going_down_together_are_one_email(fleet):
    """A router, the registry sink, two alerting sinks whose email channel groups, 200
    hosts (real connections, tests/support/dealers.py) that stop together as behind a dead
    switch, a real SMTP server: one message, listing 20 and counting the rest."""
    pytest.importorskip("aiosmtpd")
    smtp = SmtpServer().start()
    dealers = None
    try:
        router = fleet.router(limits={"hellos_per_second": 10_000.0})
        mail = {"type": "email", "host": "127.0.0.1", "port": smtp.port, "timeout": 2,
                "from": "fleetwatch@example.org", "to": ["ops@example.org"],
                "group_wait": 4, "group_list": 20}
        alerting = {"tick_interval": 0.2, "host_timeout": 6, "delivery": {
            "channels": {"mail": mail}, "rules": [{"channels": ["mail"]}],
            "retry": {"initial": 0.2, "max": 1}, "poll_interval": 0.1}}
        sinks = [fleet.sink("registry", [router])]
        for name in ("alerting-1", "alerting-2"):
            sinks.append(fleet.sink("alerting", [router], name=name, alerting=alerting))
        wait_for(lambda: all("welcomed us" in p.log() for p in sinks), 30, 0.1,
                 "the sinks connected")
        dealers = subprocess.Popen(
            [sys.executable, DEALERS,
             router["endpoints"]["agents"], "200", "rack", "--heartbeat", "1", "--beat",
             "--timeout", "30"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert dealers.stdout.readline().strip() == "ready 200", dealers.stderr.read()
        wait_for(lambda: fleet.db_rows("SELECT count(*) FROM host_state WHERE name = '' "
                                       "AND up") == [(200,)], 60, 0.1, "200 hosts heard")
        assert fleet.db_rows("SELECT count(*) FROM alert_events") == [(0,)]
        dealers.stdin.close()                           # the switch dies
        assert dealers.wait(10) == 0
        op = fleet.operator_config([router])

        def down_and_sent():
            return [a for a in fleet.alerts(op) if a["kind"] == "host" and
                    [d["state"] for d in a["deliveries"]] == ["sent"]]
        wait_for(lambda: len(down_and_sent()) == 200, 60, 0.2, "200 DOWN alerts sent")
        assert len(smtp.messages) == 1
        (msg,) = smtp.parsed()
        assert msg["Subject"] == "[fleetwatch] 200 alerts: 200 DOWN"
        text = msg.get_content().replace("\r\n", "\n")
        assert text.count("\n  DOWN rack-") == 20 and "\n  ... and 180 more\n" in text
    finally:
        if dealers is not None and dealers.poll() is None:
            dealers.kill()
            dealers.wait(5)
        smtp.stop()
