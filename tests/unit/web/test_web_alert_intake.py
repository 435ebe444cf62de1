"""The console as an Alertmanager, in this process: a post's body read and answered as
Alertmanager 0.25 answers it (web/intake.py: every answer below was measured against Debian's
``prometheus-alertmanager`` 0.25 on this machine), a resend merged as
its store merges it, the table bounded (web/alertstore.py: resolved alerts make room, firing
ones are never pushed out), and the ``alerter`` token (web/store.py). The real console with
a real Prometheus: tests/integration/test_prometheus_alerts.py."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("argon2")
pytest.importorskip("fastapi")

from sqlalchemy import update  # noqa: E402

from fleetwatch.store import db, schema  # noqa: E402
from web import alertstore, auth, intake, store  # noqa: E402

NOW = 1_764_633_600.0               # 2025-12-02 00:00:00 UTC
AT = "2025-12-02T00:00:00Z"


def parse(body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        alerts, errors = intake.parse(data, NOW, 300.0)
    except intake.Refused as e:
        return e.status, e.body()
    return [a.labels for a in alerts], errors


# (body, what Alertmanager 0.25 answered: 200 with the alerts kept, or its status and body)
@pytest.mark.parametrize("body, answer", [
    ([{"labels": {"alertname": "A", "instance": "x:9100"}}], ([{"alertname": "A",
                                                                "instance": "x:9100"}], [])),
    ([{"labels": {}}], ([], ["at least one label pair required"])),
    ([{"labels": {"a": ""}}], ([], ["at least one label pair required"])),
    ([{"labels": {"a": "b"}}, {"labels": {}}, {"labels": {}}],
     ([{"a": "b"}], ["at least one label pair required"] * 2)),
    ([{"labels": {"1bad": "x"}}], ([], ['invalid label set: invalid name "1bad"'])),
    ([{"labels": {"a": "b"}, "annotations": {"bad-name": "x"}}],
     ([], ['invalid annotations: invalid name "bad-name"'])),
    ([{"labels": {"a": "b"}, "startsAt": "2024-01-02T00:00:00Z",
       "endsAt": "2024-01-01T00:00:00Z"}], ([], ["start time must be before end time"])),
    ([{"annotations": {}}], (422, {"code": 602, "message": "0.labels in body is required"})),
    ([{"labels": None}], (422, {"code": 602, "message": "0.labels in body is required"})),
    (b"", (422, {"code": 602, "message": "alerts in body is required"})),
    ([{"labels": {"a": "b"}, "generatorURL": "not a url"}],
     (422, {"code": 601, "message": '0.generatorURL in body must be of type uri: "not a url"'})),
    (b"null", ([], [])), ([], ([], [])),
    ([{"labels": {"a": "b"}, "foo": 1}], ([{"a": "b"}], [])),
])
def test_a_body_is_answered_as_alertmanager_answers_it(body, answer):
    assert parse(body) == answer


@pytest.mark.parametrize("body, why", [
    (b'[{"labels":', "Expecting value"),
    ({"labels": {"a": "b"}}, "expected an array of alerts, got an object"),
    ([{"labels": {"a": 1}}], "alert 0: labels: expected strings, got a number"),
    ([{"labels": {"a": "b"}, "annotations": {"x": 2}}], "annotations: expected strings"),
    ([{"labels": {"a": "b"}, "startsAt": "yesterday"}], "parsing time 'yesterday'"),
    ([None], "alert 0: expected an object, got null"),
    (b"[" * 100_000, "parsing alerts body failed"),
])
def test_a_body_it_cannot_parse_is_refused_whole_with_400(body, why):
    status, answer = parse(body)
    assert status == 400 and answer["code"] == 400
    assert answer["message"].startswith("parsing alerts body failed, because ")
    assert why in answer["message"]


def test_missing_times_are_filled_as_alertmanager_fills_them():
    (firing,), _ = intake.parse(b'[{"labels": {"a": "b"}}]', NOW, 300.0)
    assert (firing.starts_at, firing.ends_at, firing.timeout) == (NOW, NOW + 300, True)
    (ended,), _ = intake.parse(json.dumps([{"labels": {"a": "b"}, "endsAt": AT}]).encode(),
                               NOW + 10, 300.0)
    assert (ended.starts_at, ended.ends_at, ended.timeout) == (NOW, NOW, False)
    assert ended.resolved(NOW + 10)
    (nanos,), _ = intake.parse(json.dumps([{"labels": {"a": "b"}, "startsAt":
                                            "2025-12-02T02:00:00.123456789+02:00"}]).encode(),
                               NOW, 300.0)
    assert nanos.starts_at == pytest.approx(NOW + 0.123456)
    (zero,), _ = intake.parse(json.dumps([{"labels": {"a": "b"}, "startsAt":
                                           "0001-01-01T00:00:00Z"}]).encode(), NOW, 300.0)
    assert zero.starts_at == NOW                # Go's zero time: not given


def test_an_alert_is_known_by_its_labels_and_bounded_in_size():
    (a,), _ = intake.parse(b'[{"labels": {"x": "1", "y": "2"}}]', NOW, 300.0)
    (b,), _ = intake.parse(b'[{"labels": {"y": "2", "x": "1", "z": ""}}]', NOW, 300.0)
    assert a.fingerprint == b.fingerprint == intake.fingerprint({"x": "1", "y": "2"})
    assert len(a.fingerprint) == 64
    (nul,), _ = intake.parse(b'[{"labels": {"x": "a\\u0000b"}}]', NOW, 300.0)
    assert nul.labels == {"x": "a\ufffdb"}      # PostgreSQL's text holds no NUL
    many = {f"l{i}": "v" for i in range(intake.MAX_LABELS + 1)}
    long = {"a": "v" * (intake.MAX_VALUE + 1)}
    for labels in (many, long):
        assert parse([{"labels": labels}])[1][0].startswith(("too many", "invalid label set"))


def alert(starts, ends, timeout=False, labels=None):
    labels = labels or {"alertname": "A"}
    return intake.Alert(intake.fingerprint(labels), labels, {}, starts, ends, timeout)


@pytest.mark.parametrize("old, new, merged", [
    # a resend while firing (same start, a later end): no overlap, the new one as it is
    ((0, 240, False), (0, 300, False), (0, 300, False)),
    # resolved (an end inside the old activity): the earliest start, the new end
    ((0, 240, False), (0, 50, False), (0, 50, False)),
    # a later start inside the old activity keeps the earliest start
    ((0, 240, False), (30, 200, False), (0, 240, False)),
    # ... but an old end from a timeout does not win over the new one
    ((0, 240, True), (30, 200, False), (0, 200, False)),
    # another episode after a resolved one: replaced
    ((0, 40, False), (70, 300, False), (70, 300, False)),
])
def test_a_resend_is_merged_as_alertmanagers_store_merges_it(old, new, merged):
    got = intake.merge(alert(*old), alert(*new), now=60)
    assert (got.starts_at, got.ends_at, got.timeout) == merged


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'state.db'}"
    else:
        pytest.importorskip("psycopg")
        url = request.getfixturevalue("pg_cluster").create_database()
    eng = db.engine(url)
    store.create(eng)
    yield eng
    eng.dispose()


def firing(host, now=NOW, ends=None):
    labels = {"alertname": "Flood", "host": host}
    return intake.Alert(intake.fingerprint(labels), labels, {}, now,
                        ends if ends is not None else now + 300)


def held(engine):
    return {r["labels"]["host"]: r for r in alertstore.listed(engine)}


def test_the_table_is_bounded_resolved_alerts_make_room_firing_ones_never(engine):
    put = alertstore.put(engine, [firing(f"h{i}") for i in range(5)], NOW, 3, "alice/prom")
    assert (put.inserted, put.updated, put.refused) == (3, 0, 2)
    assert sorted(held(engine)) == ["h0", "h1", "h2"]           # the first ones posted
    assert alertstore.put(engine, [firing("h9")], NOW + 1, 3, "a").refused == 1
    put = alertstore.put(engine, [firing("h0", ends=NOW + 2), firing("h1")], NOW + 2, 3, "a")
    assert (put.inserted, put.updated, put.refused) == (0, 2, 0)
    assert held(engine)["h0"]["ends_at"] == NOW + 2                # resolved, kept a while
    put = alertstore.put(engine, [firing("h8"), firing("h9")], NOW + 3, 3, "bob/vm")
    assert (put.inserted, put.refused) == (1, 1)                   # h0 made room for one
    rows = held(engine)
    assert sorted(rows) == ["h1", "h2", "h8"] and rows["h8"]["sender"] == "bob/vm"
    assert rows["h1"]["received"] == NOW and rows["h1"]["updated"] == NOW + 2


def test_alerts_resolved_an_hour_ago_are_deleted_at_the_next_post(engine):
    alertstore.put(engine, [firing("old", ends=NOW)], NOW, 10, "a")
    alertstore.put(engine, [firing("new")], NOW + alertstore.KEEP_RESOLVED - 1, 10, "a")
    assert sorted(held(engine)) == ["new", "old"]
    alertstore.put(engine, [firing("new")], NOW + alertstore.KEEP_RESOLVED + 1, 10, "a")
    assert sorted(held(engine)) == ["new"]


def test_an_alerter_token_is_for_a_user_who_may_post_alerts(engine, monkeypatch):
    monkeypatch.setattr(auth, "hash_password", lambda password: "x")
    store.add_user(engine, "alice", "operator", "-", "test")
    store.add_user(engine, "bob", "viewer", "-", "test")
    token = store.add_token(engine, "alice", "prometheus", auth.ALERTER, "test")
    assert store.bearer(engine, token).role == auth.ALERTER
    with pytest.raises(auth.AuthError, match="bob is a viewer"):
        store.add_token(engine, "bob", "prometheus", auth.ALERTER, "test")
    with engine.begin() as conn:                # alice no longer an operator
        conn.execute(update(schema.web_users).where(schema.web_users.c.name == "alice")
                     .values(role="viewer"))
    assert store.bearer(engine, token).role == auth.NOTHING


def test_the_route_answers_a_database_failure_and_a_streamed_flood_and_keeps_counting(
        tmp_path, monkeypatch):
    from fastapi.testclient import TestClient
    from sqlalchemy.exc import OperationalError

    from fleetwatch.cli.operator import OperatorConfig
    from web.app import create_app
    from web.console import Console
    from web.settings import WebSettings
    url = f"sqlite:///{tmp_path / 'state.db'}"
    eng = db.engine(url)
    store.create(eng)
    monkeypatch.setattr(auth, "hash_password", lambda password: "x")
    store.add_user(eng, "alice", "operator", "-", "test")
    token = store.add_token(eng, "alice", "prometheus", auth.ALERTER, "test")
    config = OperatorConfig(routers=["tcp://127.0.0.1:9"], state_url=url,
                            web=WebSettings(max_body=2048))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = b'[{"labels": {"alertname": "A", "host": "web-1"}}]'
    with TestClient(create_app(Console(config, eng, lambda: [], clock=lambda: NOW),
                                "k" * 48)) as client:
        def broken(*args):
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        monkeypatch.setattr(alertstore, "put", broken)
        res = client.post("/api/v2/alerts", content=body, headers=headers)
        assert res.status_code == 500 and res.json()["code"] == 500
        assert "database is locked" in res.json()["message"]
        monkeypatch.undo()
        res = client.post("/api/v2/alerts", headers=headers,
                          content=(b"[" + b" " * 1000 for _ in range(5)))   # chunked
        assert res.status_code == 413 and res.json()["code"] == 413
        assert client.post("/api/v2/alerts", content=body, headers=headers).status_code \
            == 200
        assert client.get("/api/v2/alerts", headers=headers).status_code == 405
        counts = client.app.state.intake.counts
        assert (counts["alerts_store_failed"], counts["alerts_too_large"],
                counts["alerts_new"]) == (1, 1, 1)
    eng.dispose()
