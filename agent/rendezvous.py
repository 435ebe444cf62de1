"""Which routers of the live set an agent attaches to: rendezvous hashing (issue 20).

A fleet of 50 routers must not mean 50 connections per agent. Each agent ranks every live
router by a score of (its own uuid, the router's agents endpoint) and attaches to the ``k``
best (all of them when fewer are live). The scores need no coordination: every agent ranks
alone, the routers' agents spread evenly over them, and when one router leaves only its own
agents move (each to its next best), when one joins only the agents it now ranks among
their ``k`` best come to it (Thaler and Ravishankar's highest random weight).

The score is FNV-1a (64 bits) of ``uuid`` NUL ``endpoint`` in UTF-8, mixed by MurmurHash3's
64-bit finaliser: fixed, so that two implementations of the agent choose alike (SPEC 4.9),
and cheap in pure Python (no hashlib: importing it maps OpenSSL into the agent).
"""

from __future__ import annotations

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    h = _FNV_OFFSET
    for octet in data:
        h = ((h ^ octet) * _FNV_PRIME) & _MASK
    return h


def fmix64(h: int) -> int:
    """MurmurHash3's finaliser: every input bit moves every output bit (FNV-1a alone leaves
    the scores of endpoints that differ in their last octets too close)."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK
    return h ^ (h >> 33)


def score(uuid: str, endpoint: str) -> int:
    """The rank of ``endpoint`` for the agent ``uuid``: higher is preferred."""
    return fmix64(fnv1a64(uuid.encode() + b"\0" + endpoint.encode()))


def choose(uuid: str, endpoints, k: int) -> list[str]:
    """The ``k`` endpoints of ``endpoints`` the agent ``uuid`` attaches to, best first (each
    once; all of them when there are no more than ``k``)."""
    ranked = sorted(set(endpoints), key=lambda e: (score(uuid, e), e), reverse=True)
    return ranked[:max(0, k)]
