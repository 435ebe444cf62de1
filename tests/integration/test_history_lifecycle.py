"""The alert lifecycle in the history lake: compaction copies it from a real state database
(SQLite and PostgreSQL) into the ``lifecycle`` table once, whatever reruns or a run that
dies; ``History.lifecycle`` reads it and ``History.availability(exclude_downtime=True)``
counts a host's downtime as available. The ``deliveries`` table, copied beside it, keeps
every attempt to send an alert after the state database purged it.

Real PySpark (the session-scoped ``spark`` fixture of tests/conftest.py), tiny lakes.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import func, insert, select, update

from fleetwatch.lake.settings import HistorySettings
from fleetwatch.lake.schema import TABLES
from fleetwatch.store import db, schema

pytest.importorskip("pyspark", reason="the history extra is not installed")

BASE = 1_794_960_000.0              # a UTC midnight
QUIET = {"out": lambda line: None}


class Died(Exception):
    """What a test hook raises to stop a run at a step, as a SIGKILL would."""


def utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


def state(url: str):
    eng = db.engine(url)
    db.create(eng, "alerting")
    return eng


def add_alert(conn, created: float, action: str = "trigger") -> None:
    conn.execute(insert(schema.alert_events).values(
        key="u-a/check/load", kind="check", action=action, severity="critical", uuid="u-a",
        hostname="web1", check_name="load", status=2, summary="LOAD 9", text="",
        created=created))


def add_downtime(conn, host: str, start: float, end: float, check: str | None = None) -> int:
    return conn.execute(insert(schema.downtimes).values(
        host=host, check_name=check, start=start, end=end, every=None, duration=None,
        flexible=None, children=False, comment="patching", author="bob",
        created=start)).inserted_primary_key[0]


def lifecycle_ids(spark, lake) -> list[str]:
    path = lake / "tables" / "lifecycle"
    if not path.is_dir():
        return []
    return sorted(r[0] for r in spark.read.schema(TABLES["lifecycle"]).parquet(str(path))
                  .select("event_id").collect())


def test_lifecycle_reaches_the_table_once(spark, tmp_path, url):
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.query import History
    lake = tmp_path / "lake"
    settings = HistorySettings(lake=str(lake), state_url=url)
    eng = state(url)
    with eng.begin() as conn:
        add_alert(conn, BASE + 100)
        ack = conn.execute(insert(schema.acknowledgements).values(
            key="u-a/check/load", uuid="u-a", check_name="load", status=2, sticky=False,
            notify=True, comment="on it", author="ann", created=BASE + 200,
            expire=BASE + 900)).inserted_primary_key[0]
        dt = add_downtime(conn, "web*", BASE + 300, BASE + 600)
    first = ["alert/1", f"ack/{ack}/start", f"downtime/{dt}/{BASE + 300:.3f}/start",
             f"downtime/{dt}/{BASE + 300:.3f}/end"]

    compact(spark, settings, wall=lambda: BASE + 1000, **QUIET)
    assert lifecycle_ids(spark, lake) == sorted(first)
    # a rerun over the same state adds nothing (nothing new: no run at all)
    again = compact(spark, settings, wall=lambda: BASE + 1100, **QUIET)
    assert again.run == "" and lifecycle_ids(spark, lake) == sorted(first)

    # the ack expires (ended in the past), the problem resolves; a run dies after its
    # intent, then one before it: the next run finishes the first and redoes the second
    with eng.begin() as conn:
        conn.execute(update(schema.acknowledgements).values(ended=BASE + 900,
                                                            end_reason="expired"))
        add_alert(conn, BASE + 1200, "resolve")

    def die_at(step):
        def hook(at):
            if at == step:
                raise Died(at)
        return hook
    with pytest.raises(Died):
        compact(spark, settings, hook=die_at("intent"), wall=lambda: BASE + 1300, **QUIET)
    with eng.begin() as conn:
        add_alert(conn, BASE + 1400)
    with pytest.raises(Died):
        compact(spark, settings, hook=die_at("staged"), wall=lambda: BASE + 1500, **QUIET)
    summary = compact(spark, settings, wall=lambda: BASE + 1600, **QUIET)
    assert summary.tables["lifecycle"].rows == 1                # only alert/3 was left
    assert lifecycle_ids(spark, lake) == sorted(first + [f"ack/{ack}/end", "alert/2",
                                                         "alert/3"])
    eng.dispose()

    h = History(spark, str(lake))
    rows = h.lifecycle(kind="ack").collect()
    assert [(r["action"], r["author"], r["comment"], r["reason"]) for r in rows] == \
        [("start", "ann", "on it", None), ("end", "ann", "on it", "expired")]
    assert rows[1]["ts"] == rows[0]["end"] == datetime.fromtimestamp(BASE + 900)  # local
    assert [r["event_id"] for r in h.lifecycle(host="web1", kind="downtime").collect()] == \
        first[2:]
    assert h.lifecycle(host="db1", kind="downtime").count() == 0


def page(conn, created: float, check: str = "check_disk") -> int:
    """web1's ``check`` alert sent to the ``pager`` webhook at ``created`` as the deliverer
    sends it (outbox, claim, mark, record); the ``deliveries`` row's id."""
    from fleetwatch.config import build
    from sinks.alerting.delivery import store as outbox
    from sinks.alerting.delivery.channels import Receipt
    from sinks.alerting.delivery.config import DeliveryConfig
    from sinks.alerting.delivery.deliverer import Tried
    config = build(DeliveryConfig, {"channels": {"pager": {"type": "webhook",
                                                           "url": "http://127.0.0.1:9/"}},
                                    "rules": [{"channels": ["pager"]}]})
    outbox.enqueue(conn, {"key": f"u-a/check/{check}", "kind": "check", "action": "trigger",
                          "severity": "critical", "uuid": "u-a", "hostname": "web1",
                          "check": check, "status": 2, "summary": "DISK CRITICAL",
                          "text": "", "created": created}, config, created)
    (row,) = outbox.claim(conn, "alerting:1:ab", created, 60, 10, ["pager"])
    outbox.mark(conn, row["id"], "alerting:1:ab", created, outbox.SENT)
    taken = Receipt.of("HTTP 202", f"u-a/check/{check}",
                       '{"status": "success", "message": "Event processed"}')
    outbox.record(conn, [row], "alerting:1:ab", "sent",
                  Tried(created, 0.02, taken.status, taken.message_id, taken.answer))
    return conn.execute(select(func.max(schema.deliveries.c.id))).scalar()


def delivery_ids(spark, lake) -> list[str]:
    path = lake / "tables" / "deliveries"
    return sorted(r[0] for r in spark.read.schema(TABLES["deliveries"]).parquet(str(path))
                  .select("event_id").collect())


def test_a_delivery_reaches_the_lake_once_and_outlives_its_purge(spark, tmp_path, url):
    """Proof of delivery months later (issue 34): an attempt recorded in the state database
    is copied once, a rerun adds nothing, and the lake keeps it after the state database
    purged it, even when SQLite then gives its id to the next attempt on the same day."""
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.deliveries import event_id
    from fleetwatch.lake.query import History
    from sinks.alerting.delivery import store as outbox
    lake = tmp_path / "lake"
    settings = HistorySettings(lake=str(lake), state_url=url)
    eng = state(url)
    with eng.begin() as conn:
        first = event_id(page(conn, BASE + 100), BASE + 100)

    summary = compact(spark, settings, wall=lambda: BASE + 1000, **QUIET)
    assert summary.tables["deliveries"].rows == 1
    assert delivery_ids(spark, lake) == [first]
    # a run for something else reads the delivery again (the overlap): it is not added
    with eng.begin() as conn:
        add_alert(conn, BASE + 1100, "resolve")
    again = compact(spark, settings, wall=lambda: BASE + 1200, **QUIET)
    assert again.run and (again.tables["deliveries"].rows,
                          again.tables["deliveries"].duplicates) == (0, 1)
    assert delivery_ids(spark, lake) == [first]

    # alerting.delivery.keep passes: the state database forgets it; the next attempt
    # (SQLite: the same id again), in a run that dies after its intent and is rolled forward
    with eng.begin() as conn:
        outbox.purge(conn, BASE + 1300)
        assert conn.execute(select(func.count()).select_from(schema.deliveries)).scalar() == 0
        second = event_id(page(conn, BASE + 1400, "check_load"), BASE + 1400)

    def died(at):
        if at == "intent":
            raise Died(at)
    with pytest.raises(Died):
        compact(spark, settings, hook=died, wall=lambda: BASE + 2000, **QUIET)
    assert compact(spark, settings, wall=lambda: BASE + 2100, **QUIET).run == ""
    assert delivery_ids(spark, lake) == sorted([first, second])
    eng.dispose()

    h = History(spark, str(lake))
    rows = h.deliveries(channel="pager", host="web1").collect()
    assert [(r["ts"], r["check_name"], r["outcome"], r["status"], r["message_id"], r["alert"])
            for r in rows] == [
        (datetime.fromtimestamp(BASE + 100), "check_disk", "sent", "HTTP 202",     # local
         "u-a/check/check_disk", "alert/1"),
        (datetime.fromtimestamp(BASE + 1400), "check_load", "sent", "HTTP 202",
         "u-a/check/check_load", rows[1]["alert"])]
    assert h.deliveries(channel="mail").count() == h.deliveries(host="db1").count() == 0
    # docs/concepts/lake.md "The deliveries table": was the page sent, what was answered
    day = utc(BASE).strftime("%Y-%m-%d")
    answer = h.sql(f"SELECT ts, outcome, status, message_id, answer FROM deliveries "
                   f"WHERE date = '{day}' AND hostname = 'web1' "
                   f"AND check_name = 'check_disk' AND channel = 'pager' ORDER BY ts").collect()
    assert [(r["outcome"], r["answer"]) for r in answer] == \
        [("sent", '{"status": "success", "message": "Event processed"}')]


def heartbeat_lake(spark, root) -> None:
    """u-a (web1) and u-b (db1) heartbeat every 10 s over BASE .. BASE+3600; u-a is silent
    from BASE+1000 to BASE+2000 (its heartbeats at 990 and 2000: 1010 s down)."""
    beats, hellos = [], []
    for uuid, name in (("u-a", "web1"), ("u-b", "db1")):
        hellos.append(("1970-01-01", utc(0), uuid, "HELLO", None, name, "1", None,
                       f"h-{uuid}", "r", None, None))
        for t in range(0, 3601, 10):
            if uuid == "u-a" and 990 < t < 2000:
                continue
            ts = BASE + t
            beats.append((utc(ts).strftime("%Y-%m-%d"), utc(ts), uuid, None, 10.0,
                          f"b-{uuid}-{t}", "r", None, None))
    for name, data in (("heartbeats", beats), ("registrations", hellos)):
        (spark.createDataFrame(data, TABLES[name]).coalesce(1).write
         .partitionBy("date").parquet(str(root / "tables" / name)))


def test_availability_counts_a_hosts_downtime_as_up(spark, tmp_path):
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.query import History
    lake = tmp_path / "lake"
    heartbeat_lake(spark, lake)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    eng = state(url)
    with eng.begin() as conn:
        add_downtime(conn, "WEB*", BASE + 1500, BASE + 2500)         # half of the outage
        add_downtime(conn, "web1", BASE, BASE + 3600, check="load")  # a check's: not the host's
        add_downtime(conn, "db*", BASE + 100, BASE + 200)            # db1 was up anyway
    eng.dispose()
    compact(spark, HistorySettings(lake=str(lake), state_url=url),
            wall=lambda: BASE + 4000, **QUIET)      # folds the spans, copies the downtimes

    def down(h, **kw):
        rows = h.availability(since=BASE, until=BASE + 3600, **kw).collect()
        return {(r["hostname"], r["date"]): (r["seconds"], r["down_seconds"]) for r in rows}
    day = utc(BASE).strftime("%Y-%m-%d")
    for use_spans in (True, False):
        h = History(spark, str(lake), use_spans=use_spans)
        assert down(h) == {("web1", day): (3600.0, 1010.0), ("db1", day): (3600.0, 0.0)}
        assert down(h, exclude_downtime=True) == \
            {("web1", day): (3600.0, 510.0), ("db1", day): (3600.0, 0.0)}
    assert History(spark, str(lake)).availability(
        host="web1", since=BASE, until=BASE + 3600, exclude_downtime=True).first()[
        "up_seconds"] == 3090.0
