"""``fleetwatch history serve``: a warm Spark session answering ``history sql`` over a local
socket (issue 31, 15: the demo's history sql in about a second). A real answerer process
(its own local Spark) over the generated lake; ``history sql`` run in-process must print
what it prints without one, and fall back to its own Spark whenever the answerer cannot
answer."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys

import pytest

from fleetwatch import cli
from support.fleet import Proc, wait_for

QUERY = ("SELECT h.hostname, count(*) AS n FROM metrics m JOIN hosts h USING (uuid) "
         "GROUP BY h.hostname ORDER BY h.hostname")
ANSWER = [["db1", "5"], ["web1", "41"], ["web2-old", "10"]]


@pytest.fixture(scope="module")
def answerer(history_lake, tmp_path_factory):
    """A ``history serve`` process over the generated lake, answering on its socket; its
    operator config and log."""
    tmp = tmp_path_factory.mktemp("answerer")
    sock = tmp / "history.sock"
    config = tmp / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:5556]\nhistory:\n  lake: {history_lake.path}\n"
                      f"  master: local[1]\n  conf:\n    spark.driver.memory: 512m\n"
                      f"  answerer: {sock}\n")
    proc = Proc("serve", [sys.executable, "-m", "fleetwatch", "history", "serve", "--config",
                          str(config)], tmp / "serve.log")
    try:
        wait_for(lambda: "answering history sql" in proc.log() or not proc.alive(), 180, 0.2,
                 what="history serve answering")
        assert proc.alive(), proc.log()
        yield {"config": str(config), "socket": sock, "proc": proc}
    finally:
        proc.stop(30)


@pytest.fixture
def no_spark_here(monkeypatch):
    """Fail if ``history sql`` opens the lake itself: the answer must come from the
    answerer."""
    import fleetwatch.cli.history.sql as sql

    def refuse(settings):
        raise AssertionError("history sql opened the lake itself")
    monkeypatch.setattr(sql, "open_lake", refuse)


def test_history_sql_is_answered_by_the_warm_session(answerer, no_spark_here, capsys):
    assert cli.main(["history", "sql", "--config", answerer["config"], QUERY]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["HOSTNAME", "N"]
    assert [line.split() for line in lines[1:]] == ANSWER
    assert cli.main(["history", "sql", "--config", answerer["config"], "--json",
                     "--limit", "2", QUERY]) == 0
    out, err = capsys.readouterr()
    assert [[r["hostname"], str(r["n"])] for r in json.loads(out)] == ANSWER[:2]
    assert err == "(first 2 rows; --limit 0 for all)\n"
    assert cli.main(["history", "sql", "--config", answerer["config"],
                     "SELECT nosuchcolumn FROM metrics"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("fleetwatch history sql: ")
    assert "nosuchcolumn" in err


def test_the_socket_is_its_owners_only_and_bad_requests_are_refused(answerer, no_spark_here,
                                                                    capsys):
    assert stat.S_IMODE(os.stat(answerer["socket"]).st_mode) == 0o600
    for request in (b"not json\n", b'{"query": 1, "json": false, "limit": 0}\n',
                    b'{"query": "SELECT 1", "json": false, "limit": 0, "lake": "/else"}\n',
                    b"x" * (2 << 20)):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(str(answerer["socket"]))
            try:
                conn.sendall(request)
            except OSError:             # (the answerer stopped reading the oversized one)
                pass
            reply = json.loads(conn.makefile("rb").readline())
        assert set(reply) == {"refused"}, reply
    # and it goes on answering
    assert cli.main(["history", "sql", "--config", answerer["config"], QUERY]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4


def test_without_an_answer_history_sql_answers_itself(answerer, spark, tmp_path, capsys):
    """Another lake (--lake), or nothing listening at history.answerer: the command runs its
    own Spark as before, and prints the same."""
    import yaml
    data = yaml.safe_load(open(answerer["config"], encoding="utf-8"))
    assert cli.main(["history", "sql", "--config", answerer["config"], "--lake",
                     data["history"]["lake"], QUERY]) == 0
    assert [line.split() for line in capsys.readouterr().out.splitlines()[1:]] == ANSWER
    data["history"]["answerer"] = str(tmp_path / "nobody.sock")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    assert cli.main(["history", "sql", "--config", str(tmp_path / "c.yaml"), QUERY]) == 0
    assert [line.split() for line in capsys.readouterr().out.splitlines()[1:]] == ANSWER


def test_a_second_answerer_on_the_same_socket_is_refused(answerer):
    res = subprocess.run([sys.executable, "-m", "fleetwatch", "history", "serve", "--config",
                          answerer["config"]], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert res.stderr.strip() == (f"fleetwatch history serve: {answerer['socket']}: another "
                                  f"answerer listens there")
    assert answerer["proc"].alive()
