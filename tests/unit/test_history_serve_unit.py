"""fleetwatch.cli.history.serve's answers to one client, on a socket pair with a stand-in
session (the real answerer: tests/integration/test_history_serve.py): a Spark Connect
server that no longer answers, or a session that no longer does, makes it refuse, so that
``history sql`` answers itself."""

from __future__ import annotations

import json
import socket

import pytest

pytest.importorskip("pyspark")

from fleetwatch.cli.demo.ports import free_port  # noqa: E402
from fleetwatch.cli.history import serve  # noqa: E402
from sinks.history.config import HistorySettings  # noqa: E402


class Lost:
    """A History whose session is gone: every query raises ``error``."""

    def __init__(self, error: Exception):
        self.error = error

    def sql(self, query):
        raise self.error


def served(history, settings, request: dict) -> tuple[bool, dict]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(json.dumps(request).encode() + b"\n")
        fine = serve.serve_one(ours, history, settings)
        return fine, json.loads(theirs.makefile("rb").readline())


@pytest.mark.parametrize("kind", ["spark", "other"])
def test_a_lost_session_is_refused_and_said(tmp_path, kind):
    """Spark's own error (the query's fault, or the session's: asked again with SELECT 1)
    or any other: refused, and the caller told to open a new session."""
    from pyspark.errors import PySparkException
    error = PySparkException("session lost") if kind == "spark" else ConnectionError("lost")
    settings = HistorySettings(lake=str(tmp_path))
    fine, reply = served(Lost(error), settings, {"query": "SELECT 1", "json": False,
                                                 "limit": 0, "lake": str(tmp_path)})
    assert not fine and set(reply) == {"refused"} and "lost" in reply["refused"]


def test_a_connect_server_not_answering_is_refused_at_once(tmp_path):
    settings = HistorySettings(lake=str(tmp_path), remote=f"sc://127.0.0.1:{free_port()}")
    fine, reply = served(Lost(ConnectionError("not asked")), settings, {"query": "SELECT 1", "json": False, "limit": 0,
                                            "lake": str(tmp_path)})
    assert fine and reply["refused"].startswith("no Spark Connect server answers at sc://")
