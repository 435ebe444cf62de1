"""Presentation helpers of the operator commands: times, tables, compact bodies."""

from __future__ import annotations

import json
from datetime import datetime, timezone


def iso(ts: float | None) -> str | None:
    """Seconds since the epoch as ISO 8601 UTC (``2024-05-01T12:00:00.123Z``), or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def table(rows: list[dict], columns: list[str]) -> str:
    """A plain text table with a header line; values are shown with ``str``."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "-"
    return str(value)


def compact(body: dict, drop: tuple[str, ...] = ("msg_id", "uuid", "ts")) -> str:
    """A body as one line of JSON without the common fields."""
    return json.dumps({k: v for k, v in body.items() if k not in drop}, separators=(",", ":"),
                      ensure_ascii=False, sort_keys=True)
