"""The OTLP listener's places (agent/otlp/listener.py), on a real socket of 127.0.0.1: a
client that read its answer to the end finds its place free when it connects again (the
integration test's four idle clients and a fifth refused rely on it)."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("opentelemetry.proto", reason="the OpenTelemetry messages (extra) missing")

from support.fleet import wait_for  # noqa: E402
from agent.config import AgentConfig  # noqa: E402
from agent.otlp.intake import OtlpIntake  # noqa: E402
from agent.otlp.listener import MAX_CONNECTIONS, Listener  # noqa: E402
from fleetwatch.config import build  # noqa: E402

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def listener():
    cfg = build(AgentConfig, {"routers": ["tcp://127.0.0.1:5555"], "otlp": {"enabled": True}},
                "agent.yaml")
    server = Listener("127.0.0.1", 0, OtlpIntake(cfg.otlp))
    server.start()
    try:
        yield server
    finally:
        server.close()


def exchange(port: int, request: bytes) -> bytes:
    """A request, and its answer read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def test_a_place_is_given_back_before_the_client_sees_the_connection_close(listener):
    port = listener.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port), timeout=10)
            for _ in range(MAX_CONNECTIONS - 1)]
    try:
        wait_for(lambda: listener.active == MAX_CONNECTIONS - 1, 10, what="the idle clients")
        body = b'{"resourceMetrics": []}'
        request = (b"POST /v1/metrics HTTP/1.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        for _ in range(50):
            answer = exchange(port, request)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
            assert listener.active == MAX_CONNECTIONS - 1
    finally:
        for sock in held:
            sock.close()
