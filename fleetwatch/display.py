"""Presentation helpers of the operator commands: times, tables, compact bodies, plugin output.

The one place where what senders wrote meets the operator's terminal
(docs/operating/status.md, "What the commands print"): every table shows control characters
visibly (:func:`escape`), and every time in one human format, UTC with the zone said
(:data:`HUMAN`); ``--json`` keeps exact text and ISO 8601 UTC (:func:`iso`). Any number
survives as a time: one that no calendar date can show is printed as the number, marked
``out of range`` in tables.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone


#: how a table shows a time: UTC to the second, with the zone
HUMAN = "%Y-%m-%d %H:%M:%S UTC"
#: C0 and C1 controls, DEL, bidirectional overrides and line separators: a terminal acts on
#: them (title, clear screen, cursor moves, a forged line), so tables never print them raw
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str) -> str:
    """``text`` with every control character shown as an escape: ``\\x1b``, ``\\n``,
    ``\\u202e``."""
    return _CONTROL.sub(_visible, text)


def _visible(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


class Stamp(str):
    """A time as ``--json`` prints it (ISO 8601 UTC, ``2024-05-01T12:00:00.123Z``) that
    remembers its epoch seconds (``ts``), so that a table shows it in :data:`HUMAN`.

    A number no date can show (past year 9999, not finite) is its ``repr``, as text.
    """

    ts: float

    def __new__(cls, ts: float) -> Stamp:
        when = _datetime(ts)
        text = repr(ts) if when is None else \
            when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        stamp = super().__new__(cls, text)
        stamp.ts = ts
        return stamp


def _datetime(ts) -> datetime | None:
    """``ts`` (epoch seconds) as an aware UTC datetime; None if no date can show it."""
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(ts, timezone.utc)
    except (OverflowError, ValueError, OSError):    # past year 9999, before year 1, nan
        return None


def iso(ts: float | None) -> Stamp | None:
    """Seconds since the epoch as ISO 8601 UTC (``2024-05-01T12:00:00.123Z``), or None."""
    return None if ts is None else Stamp(ts)


def human(ts: float | Stamp | None) -> str | None:
    """Seconds since the epoch (or a :class:`Stamp`) as a table shows them:
    ``2024-05-01 12:00:00 UTC``, or ``1e+16 (out of range)``; None stays None."""
    if ts is None:
        return None
    if isinstance(ts, Stamp):
        ts = ts.ts
    when = _datetime(ts)
    return f"{ts!r} (out of range)" if when is None else when.strftime(HUMAN)


def table(rows: list[dict], columns: list[str]) -> str:
    """A plain text table with a header line; values are shown with ``str``, times
    (:class:`Stamp`) in :data:`HUMAN`, control characters escaped (:func:`escape`)."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    heads = [escape(c.upper()) for c in columns]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Stamp):
        return human(value)
    if isinstance(value, (list, tuple)):
        return escape(",".join(map(str, value))) or "-"
    return escape(str(value))


def compact(body: dict, drop: tuple[str, ...] = ("msg_id", "uuid", "ts")) -> str:
    """A body as one line of JSON without the common fields."""
    return json.dumps({k: v for k, v in body.items() if k not in drop}, separators=(",", ":"),
                      ensure_ascii=False, sort_keys=True)


#: Nagios states by exit status; a check that never ran is PENDING
STATES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")
PENDING = "PENDING"


def state(status) -> str:
    """The state name of a plugin exit status (0-3), PENDING for None."""
    if status is None:
        return PENDING
    return STATES[status] if isinstance(status, int) and 0 <= status <= 3 else STATES[3]


def ago(ts: float | None, now: float) -> str | None:
    """How long before ``now`` ``ts`` was, shortly: ``12s ago``, ``5m ago``, ``3h ago``."""
    if ts is None:
        return None
    if not math.isfinite(now - ts):
        return human(ts)
    age = max(0, int(now - ts))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if age >= size:
            return f"{age // size}{unit} ago"
    return f"{age}s ago"


def skew(seconds: int | None) -> str | None:
    """An agent's clock skew as status and the console say it: ``clock skew +7200 s``
    (its clock ahead of the sinks'; minus: behind); None when it is not off."""
    if seconds is None:
        return None
    return f"clock skew {int(seconds):+d} s"


def first_line(text: str | None, width: int = 0) -> str:
    """The first line of ``text``, cut to ``width`` characters (0: whole) with ``...``."""
    line = (text or "").split("\n", 1)[0].rstrip()
    return line if not width or len(line) <= width else line[:max(width - 3, 0)] + "..."
