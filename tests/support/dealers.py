"""Many agent connections from one process: for tests and benchmarks of fleets at scale.

    python tests/support/dealers.py ENDPOINT COUNT PREFIX [--heartbeat S] [--timeout S]
                                    [--beat]

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
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("endpoint")
    p.add_argument("count", type=int)
    p.add_argument("prefix")
    p.add_argument("--heartbeat", type=float, default=600.0)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--beat", action="store_true", help="send HEARTBEATs while holding")
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
        if args.beat:
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
