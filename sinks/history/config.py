"""The history sink's ``history:`` section (sink-history.yaml): where it lands the lines and
when it closes a landing file. A plain frozen dataclass, no PySpark. The operator's
``history:`` section (the lake and its Spark) is :mod:`fleetwatch.lake.settings`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.config import setting

#: the lake directory by default, the sink's and the operator's
DEFAULT_LAKE = "/var/lib/fleetwatch/history"


@dataclass(frozen=True)
class HistorySinkSettings:
    """The history sink's ``history:`` section (docs/concepts/history.md,
    docs/concepts/lake.md)."""

    lake: str = setting(DEFAULT_LAKE, "the history lake directory; the sink writes LAKE/landing/")
    rotate_bytes: int = setting(64 * 1024 * 1024, "close a landing file once it holds this "
                                                  "many bytes")
    rotate_seconds: float = setting(60.0, "close a landing file this many seconds after its "
                                          "first line (so compaction sees it)")
    ack: bool = setting(True, "ACK NOTIFY and REGISTER once their lines are fsynced (agents "
                              "count these ACKs only where their spool.ack_from lists history, "
                              "SPEC 4.2); false: never ACK, so agents cannot require history")

    def validate(self):
        if not self.lake:
            raise ValueError("lake: expected a directory")
        if self.rotate_bytes < 4096:
            raise ValueError("rotate_bytes: expected at least 4096")
        if not self.rotate_seconds > 0:
            raise ValueError("rotate_seconds: expected a positive number of seconds")
