"""Receiving on a test's own ZeroMQ sockets, every wait bounded and failing clearly: one
message, the first that matches, a message type, an answer to something sent again until it
comes (a router answers a peer at most once a second), a router's own STATS."""

from __future__ import annotations

import time
from typing import Callable

import zmq

from fleetwatch import protocol


def recv(sock: zmq.Socket, timeout: float = 5.0) -> list[bytes]:
    """The next message on ``sock``; fails if none comes within ``timeout`` seconds."""
    if not sock.poll(timeout * 1000):
        raise AssertionError(f"nothing received within {timeout}s")
    return sock.recv_multipart()


def recv_until(sock: zmq.Socket, predicate, timeout: float = 10.0, what: str = "message"):
    """Receive until ``predicate(frames)`` is true; return those frames."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if sock.poll(left * 1000):
            frames = sock.recv_multipart()
            if predicate(frames):
                return frames
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def expect(sock: zmq.Socket, type_: str, timeout: float = 5.0) -> protocol.Message:
    """The next message of ``type_`` on a DEALER (frames SIGNATURE, TYPE, BODY), decoded;
    messages of other types are skipped."""
    frames = recv_until(sock, lambda f: f[1:2] == [type_.encode()], timeout, type_)
    return protocol.decode(frames)


def resend_until(sock: zmq.Socket, send: Callable[[], object], accept, timeout: float = 6.0,
                 resend: float = 0.4) -> list[bytes] | None:
    """Call ``send()`` (again every ``resend`` seconds) until a message on ``sock`` satisfies
    ``accept(frames)``; return it, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        send()
        end = min(deadline, time.monotonic() + resend)
        while (left := end - time.monotonic()) > 0 and sock.poll(left * 1000):
            frames = sock.recv_multipart()
            if accept(frames):
                return frames
    return None


def expect_error(sock: zmq.Socket, frames: list[bytes], status: int, timeout: float = 6.0,
                 resend: float = 0.4) -> protocol.Message:
    """Send ``frames`` (again every ``resend`` s: the router answers a peer at most once a
    second) until an ERROR with ``status`` comes back."""
    def send():
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:           # reconnecting after an oversized frame
            pass

    def error_of_status(got):
        return got[1:2] == [b"ERROR"] and protocol.decode(got).body["status"] == status
    got = resend_until(sock, send, error_of_status, timeout, resend)
    if got is None:
        raise AssertionError(f"no ERROR {status} within {timeout}s")
    return protocol.decode(got)


def pull(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    """A PULL connected to ``endpoint`` (a router's sink socket), linger 0."""
    sock = ctx.socket(zmq.PULL)
    sock.linger = 0
    sock.connect(endpoint)
    return sock


def stats_from(sock: zmq.Socket, predicate, timeout: float = 15.0,
               router: str = "router-1") -> dict:
    """Wait for the router's own STATS (on a graphite PULL) whose metrics satisfy predicate."""
    own = protocol.envelope("STATS", router, router)     # stamped with its id as uuid and router

    def own_stats(frames):
        if len(frames) != 3 or frames[1] != own:
            return False
        return predicate(protocol.decode_relayed(frames).message.body["metrics"])
    frames = recv_until(sock, own_stats, timeout, "router STATS")
    return protocol.decode_relayed(frames).message.body["metrics"]
