"""Routing ids nobody can predict on the router's ROUTER sockets.

libzmq 4.3.5 names a connection that announces no routing id ``0x00`` followed by a 32-bit
counter starting from C ``rand()``, which it never seeds: every process draws the same values
(the first ROUTER of a process starts at ``0x6b8b4567``). A peer may announce any routing id,
``0x00``-prefixed ones included, and when a value it announced later comes up from the
counter for another connection, libzmq fails an assertion and aborts the whole process
(``add_out_pipe`` in ``src/socket_base.cpp``). So one connection announcing the next counter
value and one announcing none would kill a router. Seeding ``rand()`` from the OS's random
source before the sockets are made puts the counter where no peer can guess it (SPEC 8).
"""

from __future__ import annotations

import ctypes
import logging
import secrets

log = logging.getLogger(__name__)


def seed_libzmq_counters() -> bool:
    """Seed the C library's ``rand()``, which libzmq draws each ROUTER's first routing id
    from; call before making sockets. False (and a warning) where that is not possible."""
    try:
        srand = ctypes.CDLL(None).srand
    except (OSError, AttributeError) as e:
        log.warning("cannot seed libzmq's routing id counters (%s): they are predictable", e)
        return False
    srand.argtypes = [ctypes.c_uint]
    srand.restype = None
    srand(secrets.randbits(32))
    return True
