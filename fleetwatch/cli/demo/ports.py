"""Free ports for servers a process starts next and names in their configs (the demo's
routers and carbon-cache, the tests' PostgreSQL and deployed fleets: TCP; the demo's snmpd
and trap receiver: UDP).

A port the kernel hands out for ``bind(port 0)`` comes from its ephemeral range, where every
other process's port-0 binds and outgoing connections draw theirs too: between choosing it
and the server binding it, one of them may take it (carbon then died of "address already in
use" beside a starting fleet). So ports are chosen at random outside that range, checked
free, and never handed out twice by one process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: where the kernel picks the ports of ``bind(port 0)`` and of outgoing connections
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
#: the lowest port chosen (below: well-known and registered services' usual ports)
LOWEST = 10000

_given: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(n) for n in Path(EPHEMERAL_RANGE).read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999            # Linux's default


def free_port(host: str = "127.0.0.1", udp: bool = False) -> int:
    """A TCP port (``udp``: a UDP port) nothing has bound now, outside the ephemeral range,
    not given before."""
    kind = socket.SOCK_DGRAM if udp else socket.SOCK_STREAM
    low, high = ephemeral_range()
    ranges = [r for r in (range(LOWEST, low), range(high + 1, 65536)) if len(r) > 1000]
    for _ in range(200):
        port = random.choice(random.choice(ranges)) if ranges else 0
        if port in _given:
            continue
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _given.add(port)
        return port
    with socket.socket(socket.AF_INET, kind) as s:     # every try taken: the kernel chooses
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    return [free_port(host) for _ in range(count)]
