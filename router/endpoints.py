"""Bound and advertised endpoints, and the ready file that publishes them.

A socket bound on a wildcard (``tcp://*:5555``, ``tcp://0.0.0.0:*``) reports
``tcp://0.0.0.0:5555`` as its ``last_endpoint``; peers cannot connect to that, so the router
advertises ``advertise_host`` (or this machine's fully qualified name) in its place.
"""

from __future__ import annotations

import json
import logging
import os
import socket

log = logging.getLogger(__name__)

WILDCARDS = {"*", "0.0.0.0", "[::]", "::", "[*]", ""}


def split_tcp(endpoint: str) -> tuple[str, str] | None:
    """``tcp://host:port`` -> (host, port); None for other transports."""
    if not endpoint.startswith("tcp://"):
        return None
    host, sep, port = endpoint[len("tcp://"):].rpartition(":")
    if not sep:
        return None
    return host, port


def advertised(endpoint: str, advertise_host: str = "", fqdn=socket.getfqdn) -> str:
    """The endpoint peers should connect to for a bound ``endpoint``."""
    parts = split_tcp(endpoint)
    if parts is None:
        return endpoint
    host, port = parts
    if host not in WILDCARDS:
        return endpoint
    host = advertise_host or fqdn()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"tcp://{host}:{port}"


def write_ready_file(path: str, router_id: str, endpoints: dict) -> None:
    """Write the router's id, pid and advertised endpoints as JSON, atomically."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"id": router_id, "pid": os.getpid(), "endpoints": endpoints}, f)
    os.replace(tmp, path)
