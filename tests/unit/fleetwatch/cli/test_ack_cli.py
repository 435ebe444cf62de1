"""``fleetwatch ack add|list|remove`` run in-process: usage errors, a missing state database,
no current problem (the sinks' side is tests/integration/test_acks_e2e.py)."""

from __future__ import annotations

import pytest

from support.cli import fw, operator_config, register

pytest.importorskip("sqlalchemy")


@pytest.fixture
def op(tmp_path):
    path = operator_config(tmp_path)
    register(path, {"web-1": ["load"]})           # (hosts the fleet has seen: query.known)
    return path


@pytest.mark.parametrize("argv, message", [
    (["add", "web-1", "load", "--expire", "2x"], "is not a duration"),
    (["add", "web-1", "load", "--comment", "a\nb"], "--comment"),
    (["add", "", "load"], "HOST"),
    (["add", "web-1", "load", "--by", ""], "--by"),
])
def test_usage_errors_exit_2_with_one_line(op, capsys, argv, message):
    code, out, err = fw(capsys, "ack", *argv, "--config", op)
    assert (code, out) == (2, "") and message in err and err.count("\n") == 1


def test_no_problem_exits_1_and_nothing_to_remove_exits_1(op, capsys):
    code, out, err = fw(capsys, "ack", "add", "web-1", "load", "--config", op)
    assert (code, out) == (1, "") and err.startswith("fleetwatch ack: no current problem for "
                                                     "web-1 load")
    code, out, err = fw(capsys, "ack", "add", "web-1", "--config", op)
    assert code == 1 and "it is not DOWN" in err
    code, out, err = fw(capsys, "ack", "remove", "7", "--config", op)
    assert (code, err) == (1, "fleetwatch ack: no running acknowledgement 7\n")
    code, out, err = fw(capsys, "ack", "list", "--json", "--config", op)
    assert (code, out) == (0, '{\n  "acks": []\n}\n')


def test_a_missing_database_exits_69(tmp_path, capsys):
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: sqlite:///{tmp_path}/none.db\n")
    code, _, err = fw(capsys, "ack", "add", "web-1", "load", "--config", str(path))
    assert code == 69 and "no state database" in err
    assert fw(capsys, "ack", "list", "--config", str(tmp_path / "missing.yaml"))[0] == 78


def test_list_and_remove(op, tmp_path, capsys):
    import json
    import time
    from sinks.alerting.acks import store as ackstore
    from fleetwatch.store import db
    eng = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    db.create(eng, "acks")
    now = time.time()
    with eng.begin() as conn:
        kept = ackstore.add(conn, "u1/check/load", "u1", "load", 2, now - 10, "alice", "on it",
                            False, True, None)
        gone = ackstore.add(conn, "u1/check/disk", "u1", "disk", 1, now - 10, "bob", "",
                            True, False, now - 1)            # expired, no sink ended it yet
    eng.dispose()
    code, out, _ = fw(capsys, "ack", "list", "--json", "--config", op)
    (listed,) = json.loads(out)["acks"]
    assert code == 0 and (listed["id"], listed["by"], listed["state"], listed["active"]) == (
        kept, "alice", "CRITICAL", True)
    code, out, _ = fw(capsys, "ack", "list", "--all", "--json", "--config", op)
    expired = json.loads(out)["acks"][0]
    assert (expired["id"], expired["end_reason"], expired["active"]) == (gone, "expired", False)
    code, out, _ = fw(capsys, "ack", "list", "--config", op)
    assert out.split("\n")[0].split() == ["ID", "HOST", "CHECK", "STATE", "BY", "STICKY",
                                          "ENDS", "COMMENT"]
    assert fw(capsys, "ack", "remove", str(kept), "--config", op)[:2] == (
        0, f"ack {kept} removed\n")
    assert fw(capsys, "ack", "list", "--config", op)[1].count("\n") == 1    # the header only
