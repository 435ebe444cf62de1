"""The operator's ``history:`` section (fleetwatch.yaml, read by ``fleetwatch history ...``,
notebooks and the demo): where the lake is and how Spark runs. A plain frozen dataclass,
no PySpark.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.config import MAX_SOCKET_PATH, setting, socket_path_fits  # noqa: F401
from sinks.history.config import DEFAULT_LAKE


@dataclass(frozen=True)
class HistorySettings:
    """The operator's ``history:`` section: where the lake is and how Spark runs."""

    lake: str = setting(DEFAULT_LAKE, "the history lake (landing/ from the sinks, tables/ "
                                      "from compaction)")
    master: str = setting("local[*]", "spark.master: local[*], local[N], spark://HOST:7077, "
                                      "yarn... (a cluster needs the lake on a shared path)")
    conf: dict[str, str] = setting(factory=dict, help="further Spark settings as strings, "
                                   "e.g. spark.driver.memory: 4g (they win over fleetwatch's)")
    remote: str = setting("", "a Spark Connect server, sc://HOST:15002: every history "
                              "command and History.open run their Spark there (a session of "
                              "that server; master and the non-spark.sql conf are then the "
                              "server's); empty: a Spark session of their own on master")
    answerer: str = setting("", "a Unix socket where `fleetwatch history serve` keeps a "
                                "Spark session warm: history sql asks it first (when no "
                                "--lake, --master or --remote is given) and answers in about a "
                                "second; nothing listening there: history sql runs as without "
                                "it. The demo keeps one; empty: none")
    processed: str = setting("move", "landing files once compacted: move (to LAKE/landing/"
                                     "done/) or delete")
    max_small_files: int = setting(8, "a date partition holding more small files than this "
                                      "is rewritten (merged) by the next compaction touching it")
    target_file_mb: int = setting(128, "files smaller than this many MB count as small")
    max_files_per_run: int = setting(0, "landing files compacted per run at most (0: all "
                                        "closed files)")
    state_url: str = setting("", "SQLAlchemy URL of the state database whose alert "
                                 "lifecycle (alert events, mutes, acks, downtimes) and "
                                 "deliveries (every attempt to send an alert) each "
                                 "compaction copies into the lifecycle and deliveries "
                                 "tables; empty: none")

    def validate(self):
        if not self.lake:
            raise ValueError("lake: expected a directory")
        if not self.master:
            raise ValueError("master: expected a Spark master URL such as local[*]")
        for key in self.conf:
            if not key.startswith("spark."):
                raise ValueError(f"conf: {key!r} is not a Spark setting (spark.*)")
        if self.remote and not self.remote.startswith("sc://"):
            raise ValueError("remote: expected a Spark Connect URL such as sc://HOST:15002")
        if self.answerer and not socket_path_fits(self.answerer):
            raise ValueError(f"answerer: a Unix socket's path is at most {MAX_SOCKET_PATH} "
                             f"bytes")
        if self.processed not in ("move", "delete"):
            raise ValueError("processed: expected move or delete")
        if self.max_small_files < 1 or self.target_file_mb < 1:
            raise ValueError("max_small_files: max_small_files and target_file_mb must be "
                             "at least 1")
        if self.max_files_per_run < 0:
            raise ValueError("max_files_per_run: expected 0 (all) or more")
        if self.state_url:
            from sqlalchemy.engine import make_url
            from sqlalchemy.exc import ArgumentError
            try:
                make_url(self.state_url)
            except ArgumentError:
                raise ValueError("state_url: expected a SQLAlchemy URL such as "
                                 "sqlite:////var/lib/fleetwatch/state.db") from None

    def spark_conf(self) -> dict[str, str]:
        return dict(self.conf)
