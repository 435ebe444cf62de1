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
from fleetwatch.lake.settings import HistorySettings  # noqa: E402


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


def test_sigterm_while_a_session_opens_ends_the_answerer_at_once(tmp_path, monkeypatch):
    """Spark's Connect client retries a server that is gone for minutes: the demo's
    answerer, sent SIGTERM as the demo ended while it opened a session, outlived it by 12
    minutes. A signal then ends it at once, its socket removed."""
    import argparse
    import os
    import signal
    import threading
    import time

    import fleetwatch.cli.history.session as history_cli

    def retrying(settings):                 # the client's retries, bounded for the test
        end = time.monotonic() + 30
        while time.monotonic() < end:
            time.sleep(0.05)
        raise AssertionError("not ended by the signal")
    monkeypatch.setattr(history_cli, "open_lake", retrying)
    monkeypatch.setattr(history_cli, "reach", lambda remote, timeout: None)
    path = tmp_path / "answerer.sock"
    settings = HistorySettings(lake=str(tmp_path), remote="sc://127.0.0.1:1",
                               answerer=str(path))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(SystemExit) as ended:
            serve.run(argparse.Namespace(socket=None, config="x.yaml"), settings)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
    assert ended.value.code == 0 and time.monotonic() - start < 10 and not path.exists()
