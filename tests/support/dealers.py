"""Many agent connections from one process: for tests and benchmarks of fleets at scale.

    python tests/support/dealers.py ENDPOINT COUNT PREFIX [--heartbeat S] [--timeout S]
                                    [--beat | --measure]

Opens COUNT DEALER sockets (plain TCP, each with a random routing id as agents announce)
to the router's agents ENDPOINT, across contexts of at most 1,000 sockets each, and says
HELLO on each as agent ``PREFIX-N`` (uuid and hostname), resending a HELLO that got no
WELCOME within a second (a router paces admissions). Prints ``ready COUNT`` once every
connection got its WELCOME, then holds them until its standard input closes, and closes
every socket (linger 0) before it exits. With ``--beat`` each also sends a HEARTBEAT every
``--heartbeat`` seconds while it holds them, as an agent does (silent once it exits).
Exit status 1 with one line on stderr if not all are welcomed within ``--timeout``; 77 if
the descriptor limit cannot cover COUNT sockets (about two descriptors each: the TCP
connection and the socket's mailbox).

With ``--measure`` each sends a HEARTBEAT every ``--heartbeat`` seconds instead, spread evenly
over the interval once a line ``go`` arrives on standard input (so that processes sharing a
router start together), and times the router's answer (the round trip, FIFO per connection);
an agent answered 401 (its router restarted) says HELLO again, and again each second until
WELCOME, sending nothing else meanwhile. Commands on standard input, one a line:
``report`` prints one JSON line (agents attached, heartbeats sent, answered, refused, and a
histogram of the round trips since the last report in 0.1 ms buckets); ``detach`` marks
every agent detached (the parent restarted the router), forgetting the heartbeats in flight.
See :func:`measure`.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import sys
import time

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from fleetwatch import protocol  # noqa: E402

PER_CONTEXT = 1000
FDS_PER_SOCKET = 2


def raise_fd_limit(needed: int) -> int:
    """Raise the soft descriptor limit as far as the hard one allows; return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def hello(uuid: str, heartbeat: float) -> list[bytes]:
    return protocol.encode(protocol.make("HELLO", uuid, hostname=uuid, heartbeat=heartbeat,
                                         role="agent"))


def beat(socks: list, prefix: str, interval: float) -> None:
    """HEARTBEATs every ``interval`` on each socket (what arrives is read and dropped)
    until standard input closes."""
    import select
    while not select.select([sys.stdin], [], [], interval)[0]:
        for n, sock in enumerate(socks):
            while sock.poll(0):
                sock.recv_multipart()
            sock.send_multipart(protocol.encode(protocol.make(
                "HEARTBEAT", f"{prefix}-{n}", interval=interval)), zmq.NOBLOCK)
    sys.stdin.read()


class Meter:
    """The agents' side of :func:`measure`: what was sent to each connection and answered.
    Pure logic fed times and answer types (``now`` from one clock, in seconds)."""

    def __init__(self, count: int):
        self.attached = [True] * count
        #: per connection: send times of the HEARTBEATs not yet answered, oldest first
        self.flight = [collections.deque() for _ in range(count)]
        #: per detached connection: when it last said HELLO (None: not since detached)
        self.hello_at: dict[int, float | None] = {}
        self.hist: collections.Counter = collections.Counter()
        self.sent = self.answered = self.refused = 0

    def beat(self, n: int, now: float) -> None:
        self.flight[n].append(now)
        self.sent += 1

    def heartbeat(self, n: int, now: float) -> None:
        """An answer to the oldest HEARTBEAT in flight."""
        if self.flight[n]:
            self.hist[round((now - self.flight[n].popleft()) * 10_000)] += 1
            self.answered += 1

    def welcome(self, n: int) -> None:
        self.attached[n] = True
        self.hello_at.pop(n, None)
        self.flight[n].clear()

    def refused_401(self, n: int, now: float) -> bool:
        """A HEARTBEAT refused (not attached): True if it is time to say HELLO."""
        if self.flight[n]:
            self.flight[n].popleft()
        self.refused += 1
        if self.attached[n]:
            self.attached[n] = False
        last = self.hello_at.get(n)
        return last is None or now - last >= 1.0

    def hello(self, n: int, now: float) -> None:
        self.hello_at[n] = now

    def waiting(self, n: int) -> bool:
        """Whether connection ``n`` said HELLO and waits for its WELCOME."""
        return self.hello_at.get(n) is not None

    def overdue(self, now: float) -> list[int]:
        """Detached connections whose HELLO got no WELCOME within a second."""
        return [n for n, t in self.hello_at.items() if t is not None and now - t >= 1.0]

    def detach(self) -> None:
        for n in range(len(self.attached)):
            self.attached[n] = False
            self.hello_at[n] = None
            self.flight[n].clear()

    def report(self) -> dict:
        out = {"attached": sum(self.attached), "sent": self.sent, "answered": self.answered,
               "refused": self.refused, "hist": dict(self.hist)}
        self.hist = collections.Counter()
        return out


def read_line(fd: int) -> bytes:
    """One line from ``fd`` without reading past it (no buffering: :func:`measure` reads
    the same descriptor)."""
    line = b""
    while not line.endswith(b"\n"):
        c = os.read(fd, 1)
        if not c:
            break
        line += c
    return line.strip()


def measure(socks: list, prefix: str, interval: float) -> None:
    """HEARTBEATs spread over ``interval`` on every socket, their answers timed (epoll on
    each socket's ZMQ_FD, so a wake-up costs what is ready, not the number of sockets),
    until standard input closes; see the module's docstring for the commands."""
    import json
    import select
    count = len(socks)
    meter = Meter(count)
    beats = [protocol.encode(protocol.make("HEARTBEAT", f"{prefix}-{n}", interval=interval))
             for n in range(count)]
    ep = select.epoll()
    by_fd = {}
    for n, sock in enumerate(socks):
        fd = sock.getsockopt(zmq.FD)
        by_fd[fd] = n
        ep.register(fd, select.EPOLLIN)
    stdin = sys.stdin.fileno()
    ep.register(stdin, select.EPOLLIN)
    clock = time.perf_counter
    start, done = clock(), 0
    pending = b""

    def drain(n: int) -> None:
        sock = socks[n]
        while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frames = sock.recv_multipart(zmq.NOBLOCK)
            now = clock()
            kind = frames[1] if len(frames) > 1 else b""
            if kind == b"HEARTBEAT":
                meter.heartbeat(n, now)
            elif kind == b"WELCOME":
                meter.welcome(n)
            elif kind == b"ERROR" and protocol.decode(frames).get("status") == 401:
                if meter.refused_401(n, now):
                    say_hello(n, now)

    def say_hello(n: int, now: float) -> None:
        meter.hello(n, now)
        try:
            socks[n].send_multipart(hello(f"{prefix}-{n}", interval), zmq.NOBLOCK)
        except zmq.Again:
            pass                # no connection yet: the next second's retry
        drain(n)

    next_retry = start + 1.0
    while True:
        now = clock()
        due = int((now - start) / interval * count)
        while done < due:
            n = done % count
            done += 1
            if meter.waiting(n):
                continue        # as an agent: nothing but HELLO until the WELCOME (SPEC 5)
            try:
                socks[n].send_multipart(beats[n], zmq.NOBLOCK)
                meter.beat(n, clock())
            except zmq.Again:
                pass            # the router is gone and the queue full: not sent
            drain(n)
        if now >= next_retry:
            for n in meter.overdue(now):
                say_hello(n, now)
            next_retry = now + 0.25
        wait = (start + (done + 1) * interval / count) - clock()
        for fd, _ in ep.poll(max(0.002, min(wait, 0.25))):
            if fd != stdin:
                drain(by_fd[fd])
                continue
            data = os.read(stdin, 4096)
            if not data:
                return
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if line == b"report":
                    print(json.dumps(meter.report()), flush=True)
                elif line == b"detach":
                    meter.detach()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("endpoint")
    p.add_argument("count", type=int)
    p.add_argument("prefix")
    p.add_argument("--heartbeat", type=float, default=600.0)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--beat", action="store_true", help="send HEARTBEATs while holding")
    p.add_argument("--measure", action="store_true",
                   help="send HEARTBEATs, time the answers, obey report/detach commands")
    args = p.parse_args(argv)
    needed = args.count * FDS_PER_SOCKET + 64
    limit = raise_fd_limit(needed)
    if limit < needed:
        print(f"dealers: {args.count} sockets need about {needed} descriptors, the limit is "
              f"{limit}", file=sys.stderr)
        return 77
    contexts: list[zmq.Context] = []
    socks: list[zmq.Socket] = []
    try:
        for n in range(args.count):
            if n % PER_CONTEXT == 0:
                ctx = zmq.Context(io_threads=1)
                ctx.set(zmq.MAX_SOCKETS, PER_CONTEXT + 8)
                contexts.append(ctx)
            sock = contexts[-1].socket(zmq.DEALER)
            sock.linger = 0
            sock.setsockopt(zmq.ROUTING_ID, os.urandom(16))
            sock.connect(args.endpoint)
            sock.send_multipart(hello(f"{args.prefix}-{n}", args.heartbeat), zmq.NOBLOCK)
            socks.append(sock)
        deadline = time.monotonic() + args.timeout
        waiting = list(range(args.count))
        while waiting:
            resend = time.monotonic() + 1.0
            late = []
            for n in waiting:
                sock = socks[n]
                left = max(0.0, min(resend, deadline) - time.monotonic())
                if sock.poll(int(left * 1000)) and protocol.decode(
                        sock.recv_multipart()).type == "WELCOME":
                    continue
                late.append(n)
            waiting = late
            if waiting and time.monotonic() > deadline:
                print(f"dealers: {len(waiting)} of {args.count} got no WELCOME within "
                      f"{args.timeout:g}s", file=sys.stderr)
                return 1
            for n in waiting:
                socks[n].send_multipart(hello(f"{args.prefix}-{n}", args.heartbeat),
                                        zmq.NOBLOCK)
        print(f"ready {args.count}", flush=True)
        if args.measure:
            if read_line(sys.stdin.fileno()) == b"go":   # all the parent's processes ready
                measure(socks, args.prefix, args.heartbeat)
        elif args.beat:
            beat(socks, args.prefix, args.heartbeat)
        else:
            sys.stdin.read()        # until the parent closes our standard input
        return 0
    finally:
        for sock in socks:
            sock.close(0)
        for ctx in contexts:
            ctx.term()


if __name__ == "__main__":
    sys.exit(main())
