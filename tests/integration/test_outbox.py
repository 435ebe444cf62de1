"""The alert outbox and the deliverer's policy, on SQLite and on PostgreSQL.

Enqueue (routing, resolve follows its trigger), claims (leases, two workers, expiry, order
within a key and channel), and the deliverer with fake senders and a fake clock: backoff
with jitter up to a max, failure after max_age, permanent refusals, resting channels.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from support.clock import Clock
from fleetwatch.config import build
from sinks.alerting.delivery.channels import SendError
from sinks.alerting.delivery.config import DeliveryConfig

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from sinks.alerting.delivery import store as outbox  # noqa: E402
from sinks.alerting.delivery.deliverer import Deliverer  # noqa: E402
from fleetwatch.store import reads  # noqa: E402

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
T0 = 1_800_000_000.0


def event(n: int = 0, action: str = "trigger", severity: str = "critical", **extra) -> dict:
    return {"key": f"{U1}/check/check_{n}", "kind": "check", "action": action,
            "severity": severity, "uuid": U1, "hostname": "web-1", "check": f"check_{n}",
            "status": 2, "summary": f"CHECK {n} CRITICAL", "text": "", "created": T0, **extra}


CONFIG = {
    "channels": {
        "mail": {"type": "email", "to": ["ops@example.org"], "timeout": 5},
        "pager": {"type": "webhook", "url": "http://127.0.0.1:1/", "timeout": 5},
    },
    "rules": [{"severity": ["critical"], "channels": ["pager"]},
              {"host": "web-*", "severity": ["critical", "warning"], "channels": ["mail"]}],
    "retry": {"initial": 10, "max": 80, "max_age": 1000, "jitter": 0.5},
    "lease": 60, "batch": 10,
}


def config(**extra) -> DeliveryConfig:
    return build(DeliveryConfig, {**CONFIG, **extra})


def enqueue(eng, ev, cfg=None, now=T0):
    with eng.begin() as conn:
        return outbox.enqueue(conn, ev, cfg or config(), now=now)


def rows(eng):
    from sqlalchemy import select
    with eng.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(
            select(outbox.outbox).order_by(outbox.outbox.c.id))]


def claim(eng, worker, now=T0, limit=10, channels=("mail", "pager"), lease=60):
    with eng.begin() as conn:
        return outbox.claim(conn, worker, now, lease, limit, channels)


def mark(eng, row, worker, state, now=T0, **kw):
    with eng.begin() as conn:
        return outbox.mark(conn, row["id"], worker, now, state, **kw)


# ---------------------------------------------------------------- enqueue

def test_enqueue_routes_and_records_every_event(eng):
    assert enqueue(eng, event(1)) == ["pager", "mail"]
    assert enqueue(eng, event(2, severity="warning")) == ["mail"]
    assert enqueue(eng, event(3, severity="info")) == []
    with eng.connect() as conn:
        events = reads.alert_events(conn)
    assert [e["check"] for e in events] == ["check_3", "check_2", "check_1"]
    assert [d["channel"] for d in events[2]["deliveries"]] == ["pager", "mail"]
    assert events[0]["deliveries"] == []            # recorded, routed nowhere
    assert {d["state"] for e in events for d in e["deliveries"]} == {"pending"}


def test_resolve_goes_where_its_trigger_went(eng):
    enqueue(eng, event(1))
    # "ok" matches no rule, yet the pager and the mail heard of the problem
    assert enqueue(eng, event(1, action="resolve", severity="ok")) == ["pager", "mail"]
    # a resolve of a key never triggered goes by the rules only
    assert enqueue(eng, event(9, action="resolve", severity="ok")) == []
    # a channel since removed from the config is not resurrected
    only_mail = config(channels={"mail": CONFIG["channels"]["mail"]},
                       rules=[{"channels": ["mail"], "severity": ["warning"]}])
    enqueue(eng, event(4))
    assert enqueue(eng, event(4, action="resolve", severity="ok"), only_mail) == ["mail"]


def test_enqueue_is_part_of_the_callers_transaction(eng):
    class Boom(Exception):
        pass
    with pytest.raises(Boom):
        with eng.begin() as conn:
            outbox.enqueue(conn, event(1), config(), now=T0)
            raise Boom()
    assert rows(eng) == []
    with eng.connect() as conn:
        assert reads.alert_events(conn) == []


def test_enqueue_cuts_oversized_and_odd_fields(eng):
    ev = event(1, key="k" * 2000, hostname="h" * 999, check=None, status=True,
               summary=None, extra_field={"a": 1})
    enqueue(eng, ev)
    with eng.connect() as conn:
        (stored,) = reads.alert_events(conn)
    assert len(stored["key"]) == 512 and len(stored["hostname"]) == 255
    assert stored["status"] is None and stored["summary"] == ""
    assert stored["extra_field"] == {"a": 1}


# ---------------------------------------------------------------- claims

def test_two_workers_never_hold_one_row_and_a_lease_expires(eng):
    for n in range(6):
        enqueue(eng, event(n))                      # 12 rows
    a = claim(eng, "a", limit=5)
    b = claim(eng, "b", limit=50, lease=120)
    assert len(a) == 5 and len(b) == 7
    assert not {r["id"] for r in a} & {r["id"] for r in b}
    assert claim(eng, "c") == []
    assert mark(eng, a[0], "a", outbox.SENT)
    assert not mark(eng, a[1], "b", outbox.SENT)    # not b's claim
    # a's claims expire (a crashed, b holds on); c takes a's four left, not the sent one
    c = claim(eng, "c", now=T0 + 61)
    assert sorted(r["id"] for r in c) == sorted(r["id"] for r in a[1:])
    assert not mark(eng, a[1], "a", outbox.SENT)    # a's late mark is refused
    assert c[0]["event"]["hostname"] == "web-1" and c[0]["event"]["check"].startswith("check_")


def test_rows_of_one_key_and_channel_go_in_order(eng):
    enqueue(eng, event(1))
    enqueue(eng, event(1, action="resolve", severity="ok"))
    first = claim(eng, "a")
    assert [r["event"]["action"] for r in first] == ["trigger", "trigger"]
    assert claim(eng, "b") == []                    # the resolves wait for their triggers
    pager = next(r for r in first if r["channel"] == "pager")
    mail = next(r for r in first if r["channel"] == "mail")
    mark(eng, pager, "a", outbox.SENT)
    mark(eng, mail, "a", outbox.PENDING, error="down", next_attempt=T0 + 100)
    (resolve,) = claim(eng, "b", now=T0 + 1)
    assert resolve["channel"] == "pager" and resolve["event"]["action"] == "resolve"
    mark(eng, resolve, "b", outbox.SENT)
    assert claim(eng, "b", now=T0 + 50) == []       # mail's trigger is not due yet
    assert [r["event"]["action"] for r in claim(eng, "b", now=T0 + 100)] == ["trigger"]


def test_concurrent_claims_take_each_row_once(eng):
    for n in range(40):
        enqueue(eng, event(n))                      # 80 rows
    taken: Counter = Counter()
    errors = []

    def worker(name):
        try:
            while True:
                got = claim(eng, name, limit=3)
                if not got:
                    return
                for r in got:
                    taken[r["id"]] += 1
                    mark(eng, r, name, outbox.SENT)
        except Exception as e:                      # asserted below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert errors == []
    assert len(taken) == 80 and set(taken.values()) == {1}
    assert {r["state"] for r in rows(eng)} == {"sent"}


def test_purge_keeps_pending_alerts(eng):
    enqueue(eng, event(1))
    enqueue(eng, event(2))
    enqueue(eng, event(3, severity="info"))         # no channel: nothing pending
    for r in claim(eng, "a"):
        if r["event"]["check"] == "check_1":
            mark(eng, r, "a", outbox.SENT)
    with eng.begin() as conn:
        assert outbox.purge(conn, before=T0 + 1) == 2
        assert [e["check"] for e in reads.alert_events(conn)] == ["check_2"]
        assert outbox.pending_count(conn) == 2


# ---------------------------------------------------------------- the deliverer

class FakeSender:
    """Records sends; ``fail`` is a list of SendErrors raised one per send (then success)."""

    def __init__(self, timeout=5.0):
        self.timeout, self.sent, self.fail = timeout, [], []

    def send(self, event, ref):
        if self.fail:
            raise self.fail.pop(0)
        self.sent.append((ref, event["key"], event["action"]))


@pytest.fixture
def clock():
    return Clock(T0)


def deliverer(eng, clock, rand=lambda: 1.0, **cfg):
    senders = {"mail": FakeSender(), "pager": FakeSender()}
    return Deliverer(eng, config(**cfg), senders, "test", clock=clock, rand=rand), senders


def test_backoff_doubles_up_to_max_with_jitter(eng, clock):
    d, _ = deliverer(eng, clock, rand=lambda: 0.0)
    assert [d.backoff(n) for n in range(1, 7)] == [10, 20, 40, 80, 80, 80]
    d.rand = lambda: 1.0                            # jitter 0.5: up to half shorter
    assert [d.backoff(n) for n in (1, 4)] == [5, 40]


def test_deliverer_sends_retries_and_marks(eng, clock):
    d, senders = deliverer(eng, clock, rand=lambda: 0.0)
    enqueue(eng, event(1))
    senders["pager"].fail = [SendError("connection refused")] * 2
    d.run_once()
    assert len(senders["mail"].sent) == 1 and senders["pager"].sent == []
    (pager_row,) = [r for r in rows(eng) if r["channel"] == "pager"]
    assert pager_row["state"] == "pending" and pager_row["attempts"] == 1
    assert pager_row["next_attempt"] == T0 + 10 and pager_row["last_error"] == "connection refused"
    clock.now = T0 + 9
    assert d.run_once() == 0                        # not due, and the channel rests
    clock.now = T0 + 10
    d.run_once()
    clock.now = T0 + 29
    assert d.run_once() == 0
    clock.now = T0 + 30                             # 10 then 20 seconds
    d.run_once()
    assert senders["pager"].sent == [(str(pager_row["id"]), event(1)["key"], "trigger")]
    states = {r["channel"]: (r["state"], r["attempts"], r["last_error"]) for r in rows(eng)}
    assert states == {"mail": ("sent", 1, None), "pager": ("sent", 3, None)}
    assert d.counts["sent.pager"] == 1 and d.counts["retry.pager"] == 2


def test_permanent_refusal_fails_at_once(eng, clock, caplog):
    d, senders = deliverer(eng, clock)
    enqueue(eng, event(1))
    senders["pager"].fail = [SendError("HTTP 400 Bad Request: invalid routing key",
                                       permanent=True)]
    d.run_once()
    clock.now += 3600
    d.run_once()
    pager = [r for r in rows(eng) if r["channel"] == "pager"]
    assert [(r["state"], r["attempts"]) for r in pager] == [("failed", 1)]
    assert "invalid routing key" in pager[0]["last_error"]
    assert d.counts["failed.pager"] == 1 and "refused" in caplog.text


def test_undelivered_past_max_age_fails(eng, clock):
    d, senders = deliverer(eng, clock)
    enqueue(eng, event(1), now=T0)
    senders["mail"].fail = [SendError("down")] * 100
    for _ in range(40):
        d.run_once()
        clock.now += 90
    (mail,) = [r for r in rows(eng) if r["channel"] == "mail"]
    assert mail["state"] == "failed" and mail["last_error"] == "down"
    assert 1000 <= clock.now - T0 and mail["attempts"] < 20


def test_a_failing_channel_rests_without_holding_up_the_others(eng, clock):
    d, senders = deliverer(eng, clock, rand=lambda: 0.0)
    for n in range(5):
        enqueue(eng, event(n))
    senders["mail"].fail = [SendError("down")]
    assert d.run_once() == 10
    assert len(senders["pager"].sent) == 5
    mail = [r for r in rows(eng) if r["channel"] == "mail"]
    # one attempt for the channel; the four others given back untried, still due
    assert sorted(r["attempts"] for r in mail) == [0, 0, 0, 0, 1]
    assert all(r["claimed_by"] is None for r in mail)
    clock.now = T0 + 10
    d.run_once()
    assert len(senders["mail"].sent) == 5


def test_a_short_lease_gives_rows_back_rather_than_risk_a_double_send(eng, clock):
    d, senders = deliverer(eng, clock)

    def slow(event, ref):
        clock.now += 20                             # each send takes 20 s of the 60 s lease
        senders["mail"].sent.append(ref)
    senders["mail"].send = slow
    for n in range(4):
        enqueue(eng, event(n, severity="warning"))   # mail only
    d.run_once()
    # 60 s lease, 5 s timeout: sends start at 0, 20, 40 (40 + 2*5 <= 60); the 4th is given back
    assert len(senders["mail"].sent) == 3
    (left,) = [r for r in rows(eng) if r["state"] == "pending"]
    assert left["attempts"] == 0 and left["claimed_by"] is None


def test_rows_of_a_removed_channel_fail_after_max_age(eng, clock):
    enqueue(eng, event(1))
    d, senders = deliverer(eng, clock)
    del senders["pager"]
    d.run_once()
    assert {r["channel"]: r["state"] for r in rows(eng)} == {"mail": "sent",
                                                             "pager": "pending"}
    clock.now += 1001
    d.next_purge = 0
    d.run_once()
    assert {r["channel"]: r["state"] for r in rows(eng)} == {"mail": "sent",
                                                             "pager": "failed"}


# ---------------------------------------------------------------- fleetwatch alerts

def test_alerts_joins_a_notify_to_its_event_and_shows_delivery():
    from fleetwatch.actions.alerts import at_least, merge
    from fleetwatch.cli.alerts import delivery_cell
    note = {"msg_id": "m1", "uuid": U1, "hostname": "web-1", "severity": "error",
            "text": "disk on fire\nmore", "source": "backup", "router": "r1",
            "sent_at": T0, "received_at": T0 + 1}
    old_note = {**note, "msg_id": "m0", "received_at": T0 - 100}
    notify = {**event(0), "key": f"{U1}/notify/m1", "kind": "notify", "check": None,
              "summary": "disk on fire", "created": T0 + 1, "deliveries": [
                  {"channel": "pager", "state": "sent", "attempts": 1, "last_error": None},
                  {"channel": "mail", "state": "pending", "attempts": 3,
                   "last_error": "SMTP 127.0.0.1:25: ConnectionRefusedError"}]}
    check = {**event(1), "created": T0 + 5, "deliveries": []}
    rows = merge([note, old_note], [check, notify], limit=10)
    assert [(r.get("msg_id"), r["kind"]) for r in rows] == [(None, "check"), ("m1", "notify"),
                                                            ("m0", "notify")]
    joined = rows[1]
    assert joined["text"] == "disk on fire\nmore" and joined["source"] == "backup"
    assert joined["received_at"] == T0 + 1 and len(joined["deliveries"]) == 2
    assert rows[0]["text"] == "CHECK 1 CRITICAL" and rows[2]["deliveries"] == []
    assert merge([note, old_note], [check, notify], limit=1) == rows[:1]
    assert delivery_cell(joined["deliveries"]) == (
        "pager: sent; mail: pending (3 attempts: SMTP 127.0.0.1:25: ConnectionRefusedError)")
    assert delivery_cell([]) == "-"
    assert set(at_least("error")) == {"error", "unknown", "critical"}
