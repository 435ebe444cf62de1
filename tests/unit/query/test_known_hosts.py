"""A host (or HOST and CHECK) the fleet has never seen is refused by ``downtime add``,
``silence add`` and ``ack add`` with one line naming the closest known ones, unless
``--force`` (:mod:`query.known`, the one check the console and the API make too:
tests/integration/test_web.py)."""

from __future__ import annotations

import json

import pytest

from support.cli import fw, operator_config, register

pytest.importorskip("sqlalchemy")


@pytest.fixture
def op(tmp_path):
    path = operator_config(tmp_path)
    register(path, {"web-1": ["load", "disk"], "web-2": ["load"], "db-1": ["pg"]})
    return path


def rows(op, table: str) -> list:
    import yaml
    from sqlalchemy import text

    from fleetwatch.store import db
    eng = db.engine(yaml.safe_load(open(op, encoding="utf-8"))["state_url"])
    try:
        with eng.connect() as conn:
            return list(conn.execute(text(f"SELECT * FROM {table}")))
    except Exception:           # (no such table: nothing written)
        return []
    finally:
        eng.dispose()


@pytest.mark.parametrize("command, options, table", [
    ("downtime", ["--for", "1h"], "downtimes"),
    ("silence", ["--for", "1h"], "silences"),
    ("ack", [], "acknowledgements"),
])
def test_a_host_never_seen_is_refused_naming_the_closest(op, capsys, command, options, table):
    code, out, err = fw(capsys, command, "add", "web-l", *options, "--config", op)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith(f"fleetwatch {command}: HOST web-l: no host of that name has "
                          f"been seen in the fleet (closest known: web-")
    assert "web-1" in err and "web-2" in err and "db-1" not in err and "--force for a" in err
    code, out, err = fw(capsys, command, "add", "WEB-1", "lod", *options, "--config", op)
    assert (code, out) == (2, "") and "CHECK lod: WEB-1 has never had a check of that " \
        "name (closest known: load" in err
    code, _, err = fw(capsys, command, "add", "nosuchhost2", *options, "--config", op)
    assert code == 2 and "(none is close; --force for a host not deployed yet)" in err
    assert rows(op, table) == []


@pytest.mark.parametrize("command, options", [("downtime", ["--for", "1h"]),
                                              ("silence", ["--for", "1h"])])
def test_known_names_and_globs_pass_and_force_takes_a_new_host(op, capsys, command, options):
    for argv in (["web-1"], ["WEB-2", "load"], ["web-*", "disk"], ["uuid-db-1", "pg"],
                 ["new-host", "--force"], ["db-1", "new-check", "--force"]):
        code, out, err = fw(capsys, command, "add", *argv, *options, "--config", op)
        assert (code, err) == (0, ""), argv
    code, out, _ = fw(capsys, command, "list", "--json", "--config", op)
    assert len(json.loads(out)[command + "s"]) == 6
    code, _, err = fw(capsys, command, "add", "web-*", "pg", *options, "--config", op)
    assert code == 2 and "CHECK pg: web-* has never had" in err


def test_an_ack_forced_past_the_check_still_needs_a_problem(op, capsys):
    code, _, err = fw(capsys, "ack", "add", "new-host", "--force", "--config", op)
    assert code == 1 and err.startswith("fleetwatch ack: no current problem for new-host")


def test_what_the_alerting_sinks_saw_is_known_too(tmp_path):
    """A uuid the alerting sinks judged (a RESULT before the registry recorded its agent),
    a local process and a NOTIFY source are known, as the silences match them."""
    from sqlalchemy import insert

    from query.known import Unknown, refuse_unknown
    from fleetwatch.store import db, schema
    eng = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    for owner in ("registry", "alerting"):
        db.create(eng, owner)
    with eng.begin() as conn:
        conn.execute(insert(schema.host_state).values(
            uuid="u-7", name="backup", up=True, last_heard=1.0, deadline=2.0, since=1.0,
            routers=[], notified=False, pending=False, updated=1.0))
        conn.execute(insert(schema.notifications).values(
            msg_id="m1", uuid="u-7", severity="error", text="x", source="cron-job",
            sent_at=1.0, received_at=1.0, router="r"))
        for host, check in (("u-7", None), ("U-7", "backup"), ("u-*", "cron-*")):
            refuse_unknown(conn, host, check)
        with pytest.raises(Unknown, match="closest known: backup"):
            refuse_unknown(conn, "u-7", "backpu")
        with pytest.raises(Unknown, match="HOST u-8"):
            refuse_unknown(conn, "u-8")
    eng.dispose()


@pytest.mark.parametrize("command, options", [("downtime", ["--for", "1h"]),
                                              ("silence", ["--for", "1h"]), ("ack", [])])
def test_the_check_holds_no_write_lock(op, capsys, monkeypatch, command, options):
    """A glob's check reads every host's names (0.3 s at 10,000 hosts): under the write lock
    it would hold every sink's writes back as long. It runs before the write, on a reader:
    another writer can take the lock meanwhile."""
    import sqlite3

    import yaml

    import query.known
    from fleetwatch.store.db import sqlite_path
    path = sqlite_path(yaml.safe_load(open(op, encoding="utf-8"))["state_url"])
    real, took = query.known.refuse_unknown, []

    def check(conn, host, check=None):
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")    # "database is locked" under a writer
            other.execute("ROLLBACK")
            took.append(host)
        finally:
            other.close()
        return real(conn, host, check)
    monkeypatch.setattr(query.known, "refuse_unknown", check)
    code, _, err = fw(capsys, command, "add", "web-*", *options, "--config", op)
    assert took == ["web-*"]
    assert code == (1 if command == "ack" else 0), err      # (no problem to acknowledge)
