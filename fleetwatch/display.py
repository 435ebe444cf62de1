"""Presentation helpers of the operator commands: times, tables, compact bodies, plugin output."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from plugins.nagios import format_number, quote_label


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
    age = max(0, int(now - ts))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if age >= size:
            return f"{age // size}{unit} ago"
    return f"{age}s ago"


def first_line(text: str | None, width: int = 0) -> str:
    """The first line of ``text``, cut to ``width`` characters (0: whole) with ``...``."""
    line = (text or "").split("\n", 1)[0].rstrip()
    return line if not width or len(line) <= width else line[:max(width - 3, 0)] + "..."


def _number(value) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return ""
    try:
        return format_number(value)
    except ValueError:          # not finite: what the wire said, as Python prints it
        return repr(float(value))


def _label(label: str) -> str:
    try:
        return quote_label(label)
    except ValueError:          # empty or control characters: shown quoted, escaped
        return "'" + label.encode("unicode_escape").decode("ascii").replace("'", "''") + "'"


def perfdata_text(perfdata) -> str:
    """Wire perfdata (a list of objects, SPEC 4) as plugins write it:
    ``'label'=value[uom];[warn];[crit];[min];[max]``, space separated, empty tails cut."""
    items = []
    for item in perfdata if isinstance(perfdata, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("label"), str):
            continue
        value = item.get("value")
        uom = item.get("uom") if isinstance(item.get("uom"), str) else ""
        head = f"{_label(item['label'])}={'U' if value is None else _number(value)}{uom}"
        tail = [item.get(k) if isinstance(item.get(k), str) else "" for k in ("warn", "crit")]
        tail += [_number(item.get(k)) for k in ("min", "max")]
        items.append(";".join([head, *tail]).rstrip(";"))
    return " ".join(items)


def plugin_text(output: str, long_output: str = "", perfdata=None) -> str:
    """A result as the plugin printed it: ``TEXT | perfdata`` then the long output."""
    perf = perfdata_text(perfdata)
    lines = [f"{output} | {perf}" if perf else output]
    if long_output:
        lines.append(long_output.rstrip("\n"))
    return "\n".join(lines)
