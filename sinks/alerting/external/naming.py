"""Which check of which host an alert is, its status and its output: pure functions of its
labels and annotations (and the registry's hostnames).

- **The host**: the value of the first of ``host_labels`` the alert has (``instance``'s
  ``:port`` left out: ``web-1:9100``, ``[::1]:9100``), matched against the agents'
  hostnames ignoring case; failing that, its first DNS label against theirs when exactly
  one agent has it (``web-1.example.com`` is the agent ``web-1``, and ``web-1`` is the
  agent ``web-1.example.com``). No agent: no check (:class:`Hosts`).
- **The check**: ``prom:ALERTNAME``, and when the alert has labels beyond ``alertname``,
  ``severity``, ``alertgroup`` (vmalert's), the host labels and ``ignore_labels``, those in
  PromQL's notation, sorted:
  ``prom:DiskFull{device="sda1",mountpoint="/var"}`` (values quoted as JSON does, any
  control character left shown as an escape; at most 255 characters, a longer name cut and
  ended by ``~`` and 12 hex digits of its SHA-256).
  Alerts that differ only by the labels left out (the same alert at two severities) are
  one check: the worst status wins.
- **The status**: ``severity`` ``critical`` is CRITICAL, ``warning`` WARNING (ignoring
  case), anything else (or none) the configured default.
- **The output**: the ``summary`` annotation's first line, else the ``description``'s, else
  ``ALERTNAME is firing``; the long output the description and where the alert came from
  (its ``generatorURL``) and its labels. A sender's control characters are shown as
  escapes (``\\x1b``), never passed on.
"""

from __future__ import annotations

import hashlib
import json
import re

from fleetwatch.display import escape
from sinks.alerting.checks.rules import CRITICAL, WARNING

#: the check name of an alert: ``prom:ALERTNAME...``
PREFIX = "prom:"
#: a check's name at most (``checks.plugin``)
MAX_CHECK = 255
#: what the check's name never holds: these (``alertgroup``: the rule group vmalert names
#: every alert by) and the host labels
NAMED = ("alertname", "severity", "alertgroup")
SEVERITIES = {"critical": CRITICAL, "warning": WARNING}
_PORT = re.compile(r"^(\[[^\]]*\]|[^:\[\]]*):\d+$")
_IP = re.compile(r"^[\d.]+$|:")


def host_of(labels: dict, host_labels) -> tuple[str, str] | None:
    """(the label, the host name it gives) of the first of ``host_labels`` the alert has; an
    ``instance``'s port left out, an IPv6 address' brackets too."""
    for label in host_labels:
        value = labels.get(label)
        if not value:
            continue
        if label == "instance":
            found = _PORT.match(value)
            if found:
                value = found.group(1)
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
        if value:
            return label, value
    return None


class Hosts:
    """The registry's agents by hostname (``{uuid: hostname}``), as an alert names them."""

    def __init__(self, hostnames: dict[str, str]):
        self.exact: dict[str, str | None] = {}
        self.short: dict[str, str | None] = {}
        for uuid, name in sorted(hostnames.items()):
            if not name:
                continue
            for table, key in ((self.exact, name.lower()), (self.short, _short(name))):
                # (two agents of one name: neither, as the alert cannot say which)
                table[key] = uuid if key not in table else None
        self.exact = {k: v for k, v in self.exact.items() if v is not None}

    def find(self, name: str) -> str | None:
        """The uuid of the agent ``name`` is, or None."""
        found = self.exact.get(name.lower())
        if found is None and not _IP.search(name):
            found = self.short.get(_short(name))
        return found


def _short(name: str) -> str:
    return name.lower().split(".", 1)[0]


def check_of(labels: dict, host_labels, ignore_labels) -> str:
    """The check an alert is (module docstring)."""
    left = set(NAMED) | set(host_labels) | set(ignore_labels)
    rest = [f"{k}={json.dumps(labels[k], ensure_ascii=False)}"
            for k in sorted(labels) if k not in left]
    name = escape(PREFIX + (labels.get("alertname") or "alert") +
                  ("{" + ",".join(rest) + "}" if rest else ""))
    if len(name) > MAX_CHECK:
        name = name[:MAX_CHECK - 13] + "~" + hashlib.sha256(name.encode()).hexdigest()[:12]
    return name


def status_of(labels: dict, default: int) -> int:
    return SEVERITIES.get((labels.get("severity") or "").lower(), default)


def outputs(labels: dict, annotations: dict, url: str) -> tuple[str, str]:
    """(output, long output) of a firing alert."""
    summary = _first_line(annotations.get("summary")) or \
        _first_line(annotations.get("description")) or \
        f"{labels.get('alertname') or 'alert'} is firing"
    lines = []
    if annotations.get("description"):
        lines.append(annotations["description"].strip())
    if url:
        lines.append(f"from {url}")
    lines.append("labels: " + ", ".join(f"{k}={labels[k]}" for k in sorted(labels)))
    text = "\n".join(lines)
    return escape(summary)[:1024], "\n".join(escape(line) for line in text.split("\n"))[:8192]


def _first_line(text) -> str:
    if not isinstance(text, str):
        return ""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""
