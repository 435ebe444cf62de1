"""The lifecycle export (fleetwatch/lake/lifecycle.py): rows from the state database, the
watermark, and the overlap compaction deduplicates; the deliveries it exports beside them
with their own watermark (fleetwatch/lake/deliveries.py). SQLite here; the Spark side and
PostgreSQL are in tests/integration/test_history_lifecycle.py."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from sqlalchemy import insert, update

from fleetwatch.lake.lifecycle import LAG, Mark, export
from fleetwatch.store import db, schema

T0 = 1_795_000_000.0
DAY = 86400.0


@pytest.fixture
def conn(tmp_path):
    eng = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    db.create(eng, "alerting")
    with eng.begin() as c:
        yield c
    eng.dispose()


def alert(conn, created, action="trigger", key="u1/check/load"):
    conn.execute(insert(schema.alert_events).values(
        key=key, kind="check", action=action, severity="critical", uuid="u1",
        hostname="web1", check_name="load", status=2, summary="LOAD 9", text="",
        created=created))


def ack(conn, created, **kw):
    values = dict(key="u1/check/load", uuid="u1", check_name="load", status=2,
                  sticky=False, notify=True, comment="on it", author="ann",
                  created=created, **kw)
    return conn.execute(insert(schema.acknowledgements).values(**values)).inserted_primary_key[0]


def downtime(conn, start, end, every=None, duration=None, created=None, **kw):
    values = dict(host="web*", check_name=None, start=start, end=end, every=every,
                  duration=duration, flexible=None, children=False, comment="patching",
                  author="bob", created=start if created is None else created, **kw)
    return conn.execute(insert(schema.downtimes).values(**values)).inserted_primary_key[0]


def ids(rows):
    return sorted(r["event_id"] for r in rows)


def test_first_export_takes_everything_up_to_now(conn):
    alert(conn, T0)
    alert(conn, T0 + 100, "resolve")
    alert(conn, T0 + 900)                                   # after now: next time
    a = ack(conn, T0 + 10, expire=T0 + 50, ended=T0 + 50, end_reason="expired")
    d = downtime(conn, T0 + 20, T0 + 200)
    out = export(conn, Mark(), now=T0 + 500)
    assert ids(out.rows) == sorted(["alert/1", "alert/2", f"ack/{a}/start", f"ack/{a}/end",
                                    f"downtime/{d}/{T0 + 20:.3f}/start",
                                    f"downtime/{d}/{T0 + 20:.3f}/end"])
    by = {r["event_id"]: r for r in out.rows}
    assert by[f"ack/{a}/end"]["reason"] == "expired" and by[f"ack/{a}/end"]["ts"] == T0 + 50
    assert by[f"ack/{a}/start"]["author"] == "ann" and by[f"ack/{a}/start"]["end"] == T0 + 50
    end = by[f"downtime/{d}/{T0 + 20:.3f}/end"]
    assert (end["start"], end["end"], end["reason"], end["hostname"]) == \
        (T0 + 20, T0 + 200, "ended", "web*")
    assert out.mark == Mark(T0 + 500, (), (), deliveries=T0 + 500)


def test_open_acks_and_downtimes_are_followed_until_they_end(conn):
    a = ack(conn, T0, expire=T0 + 100)
    d = downtime(conn, T0, T0 + 10 * LAG)
    first = export(conn, Mark(), now=T0 + 50)
    assert ids(first.rows) == sorted([f"ack/{a}/start", f"downtime/{d}/{T0:.3f}/start"])
    assert first.mark == Mark(T0 + 50, (a,), (d,), deliveries=T0 + 50)
    # much later the sink's tick ends the ack at its expiry, long before the watermark,
    # and the downtime is removed
    later = T0 + 5 * LAG
    conn.execute(update(schema.acknowledgements).values(ended=T0 + 100, end_reason="expired"))
    conn.execute(update(schema.downtimes).values(removed=later - 10))
    second = export(conn, Mark(T0 + 3 * LAG, (a,), (d,), T0 + 3 * LAG), now=later)
    assert ids(second.rows) == sorted([f"ack/{a}/start", f"ack/{a}/end",
                                       f"downtime/{d}/{T0:.3f}/start",
                                       f"downtime/{d}/{T0:.3f}/end"])
    end = {r["event_id"]: r for r in second.rows}[f"downtime/{d}/{T0:.3f}/end"]
    assert (end["ts"], end["reason"]) == (later - 10, "removed")
    assert second.mark == Mark(later, (), (), deliveries=later)


def test_the_overlap_and_nothing_older(conn):
    alert(conn, T0)                     # before the watermark less LAG: stored long ago
    alert(conn, T0 + 2 * LAG)           # in the overlap: read again, dropped by compaction
    alert(conn, T0 + 3 * LAG + 5)       # new
    out = export(conn, Mark(T0 + 3 * LAG), now=T0 + 4 * LAG)
    assert ids(out.rows) == ["alert/2", "alert/3"]


def test_recurring_downtime_windows_and_a_removal_before_one_starts(conn, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    midnight = 1_794_960_000.0          # a UTC midnight (2026-11-18, a Wednesday)
    d = downtime(conn, midnight, None, every="daily 02:00-03:00")
    gone = downtime(conn, midnight + 5 * 3600, midnight + 9 * 3600,
                    removed=midnight + 4 * 3600)
    out = export(conn, Mark(), now=midnight + DAY + 2.5 * 3600)
    starts = [midnight + 2 * 3600, midnight + DAY + 2 * 3600]
    assert ids(out.rows) == sorted([f"downtime/{d}/{starts[0]:.3f}/start",
                                    f"downtime/{d}/{starts[0]:.3f}/end",
                                    f"downtime/{d}/{starts[1]:.3f}/start"])
    assert out.mark.downtimes == (d,) and gone not in out.mark.downtimes


def test_held_and_muted_alerts(conn):
    row = dict(key="u1/check/load", action="trigger", severity="critical", kind="check",
               uuid="u1", hostname="web1", check_name="load", summary="LOAD 9",
               created=T0)
    conn.execute(insert(schema.suppressed).values(silence_id=3, **row))
    conn.execute(insert(schema.downtime_suppressed).values(downtime_id=4, **row))
    out = export(conn, Mark(), now=T0 + 1)
    assert sorted((r["kind"], r["id"], r["action"]) for r in out.rows) == \
        [("held", 4, "trigger"), ("muted", 3, "trigger")]


def test_a_database_without_the_tables_gives_nothing(tmp_path):
    eng = db.engine(f"sqlite:///{tmp_path / 'empty.db'}")
    with eng.connect() as c:
        out = export(c, Mark(), now=T0)
        # an old schema (no deliveries table): none, and their watermark is left as it was
        older = export(c, Mark(T0 - DAY, deliveries=T0 - DAY), now=T0)
    eng.dispose()
    assert out.rows == out.deliveries == [] and out.mark == Mark(T0)
    assert out.mark.deliveries is None and older.mark == Mark(T0, deliveries=T0 - DAY)


# ---------------------------------------------------------------- deliveries

PAGER = {"channels": {"pager": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}},
         "rules": [{"channels": ["pager"]}]}
PD_ANSWER = '{"status": "success", "message": "Event processed", "dedup_key": "u1/check/disk"}'


def page(conn, created, check="check_disk"):
    """An alert recorded and sent to ``pager`` as the deliverer does it: refused (HTTP 503)
    at ``created``, taken 60 s later; the ``deliveries`` rows through the outbox's API."""
    from fleetwatch.config import build
    from sinks.alerting.delivery import store as outbox
    from sinks.alerting.delivery.channels import Receipt, SendError
    from sinks.alerting.delivery.config import DeliveryConfig
    from sinks.alerting.delivery.deliverer import Tried
    event = {"key": f"u1/check/{check}", "kind": "check", "action": "trigger",
             "severity": "critical", "uuid": "u1", "hostname": "web-1", "check": check,
             "status": 2, "summary": "DISK CRITICAL", "text": "/ 95%", "created": created}
    worker = "alerting:1:ab"
    outbox.enqueue(conn, event, build(DeliveryConfig, PAGER), created)
    (row,) = outbox.claim(conn, worker, created, 60, 10, ["pager"])
    outbox.mark(conn, row["id"], worker, created, outbox.PENDING, error="HTTP 503",
                next_attempt=created + 60)
    refused = SendError("HTTP 503 Service Unavailable: busy", status="HTTP 503")
    outbox.record(conn, [row], worker, "retry",
                  replace(Tried.of(created, time.monotonic(), refused), latency=0.012))
    (row,) = outbox.claim(conn, worker, created + 60, 60, 10, ["pager"])
    outbox.mark(conn, row["id"], worker, created + 60, outbox.SENT)
    taken = Receipt.of("HTTP 202", "u1/check/disk", PD_ANSWER)
    outbox.record(conn, [row], worker, "sent",
                  replace(Tried.of(created + 60, time.monotonic(), taken), latency=0.034))


def test_deliveries_are_exported_once_from_their_own_watermark(conn):
    from fleetwatch.lake.deliveries import event_id
    page(conn, T0)
    out = export(conn, Mark(), now=T0 + 500)
    assert [r["event_id"] for r in out.deliveries] == [event_id(1, T0), event_id(2, T0 + 60)]
    assert out.news and out.mark.deliveries == T0 + 500
    retry, sent = out.deliveries
    assert {k: sent[k] for k in ("ts", "channel", "key", "action", "hostname", "check_name",
                                 "alert", "attempt", "grouped", "outcome", "status",
                                 "message_id", "answer", "latency", "worker")} == {
        "ts": T0 + 60, "channel": "pager", "key": "u1/check/check_disk", "action": "trigger",
        "hostname": "web-1", "check_name": "check_disk", "alert": "alert/1", "attempt": 2,
        "grouped": 1, "outcome": "sent", "status": "HTTP 202", "message_id": "u1/check/disk",
        "answer": PD_ANSWER, "latency": 0.034, "worker": "alerting:1:ab"}
    assert (retry["attempt"], retry["outcome"], retry["status"], retry["message_id"],
            retry["answer"]) == (1, "retry", "HTTP 503", None,
                                 "HTTP 503 Service Unavailable: busy")
    # the next run: the overlap again (compaction drops it by event_id), nothing new
    again = export(conn, out.mark, now=T0 + 900)
    assert [r["event_id"] for r in again.deliveries] == [event_id(1, T0), event_id(2, T0 + 60)]
    assert not again.news
    # from a watermark past the overlap: only what was sent since, a day later
    page(conn, T0 + DAY, "check_load")
    later = export(conn, Mark(T0 + 2 * LAG, deliveries=T0 + 2 * LAG), now=T0 + DAY + 500)
    assert [r["event_id"] for r in later.deliveries] == \
        [event_id(3, T0 + DAY), event_id(4, T0 + DAY + 60)]
    assert later.news and later.mark.deliveries == T0 + DAY + 500


def test_a_mark_from_before_the_deliveries_copies_all_the_database_holds(conn):
    """A lake exported by a fleetwatch without the table: its lifecycle.json has no
    ``deliveries``; the first export copies the month the state database keeps, not only
    the last hour's."""
    page(conn, T0)
    old = Mark.from_json({"through": T0 + 10 * DAY, "acks": [], "downtimes": []})
    assert old == Mark(T0 + 10 * DAY) and old.deliveries is None
    out = export(conn, old, now=T0 + 10 * DAY + 60)
    assert out.rows == [] and len(out.deliveries) == 2 and out.news
    assert Mark.from_json(out.mark.to_json()) == out.mark == \
        Mark(T0 + 10 * DAY + 60, (), (), T0 + 10 * DAY + 60)


def test_history_state_url_must_be_a_url():
    from fleetwatch.lake.settings import HistorySettings
    HistorySettings(state_url="").validate()                # the default: no lifecycle
    HistorySettings(state_url="postgresql+psycopg://fw@db/fleetwatch").validate()
    with pytest.raises(ValueError, match="^state_url: expected a SQLAlchemy URL"):
        HistorySettings(state_url="state.db").validate()
