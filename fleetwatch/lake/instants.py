"""Times as the history commands take them, without Spark: epoch seconds, a datetime (a
naive one is UTC), a date, ISO 8601 text (``2026-11-20``, ``2026-11-20T10:00:00Z``) or a
duration back from now (``90m``, ``12h``, ``7d``). The queries' windows are
:mod:`fleetwatch.lake.times` (Spark); ``fleetwatch tail --since`` reads its times here.
"""

from __future__ import annotations

import re
import time
from datetime import date, datetime, timezone

from fleetwatch import protocol

DAY = 86400

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhdw]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": DAY, "w": 7 * DAY}


def seconds(text) -> float:
    """A duration: a number of seconds or ``90s``, ``5m``, ``12h``, ``400d``, ``2w``."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = _DURATION.match(str(text))
    if match is None:
        raise ValueError(f"expected a duration like 90s, 5m, 12h, 7d or 2w, got {text!r}")
    return float(match.group(1)) * _UNIT[match.group(2)]


def epoch(value, now: float | None = None) -> float | None:
    """Epoch seconds of a time given as a number, datetime, date, ISO 8601 text or a
    duration back from ``now`` (``7d``); None stays None. A time outside the range the
    protocol takes (1970 to 9999, SPEC 4) is a ValueError."""
    ts = _epoch(value, now)
    if ts is not None and not protocol.TS_MIN <= ts < protocol.TS_END:     # NaN too
        raise ValueError(f"expected a time from 1970 to 9999, got {value!r:.40}")
    return ts


def _epoch(value, now: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected a time, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp()
    text = str(value).strip()
    if _DURATION.match(text) and text[-1:].isalpha():
        return (time.time() if now is None else now) - seconds(text)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return _epoch(datetime.fromisoformat(text), now)
    except ValueError:
        raise ValueError(f"expected a time (epoch seconds, ISO 8601 like 2026-11-20T10:00Z, "
                         f"or a duration back from now like 7d), got {text!r}") from None


def day_of(ts: float) -> str:
    """The UTC date (``date`` partition) of epoch seconds ``ts``."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d")
