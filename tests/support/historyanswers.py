"""The answers of the history queries on a lake, as JSON-able data, so that two Spark
sessions (``local[*]`` in the test process, a standalone cluster or Spark Connect in a
child process) can be compared: availability (from spans, from every heartbeat, downtime
excused), metric buckets, top hosts, check timelines and time in state, notifications.

As a script: ``python tests/support/historyanswers.py LAKE MASTER [--remote] [--compact
CONFIG] [--sql CONFIG QUERY]`` prints, with ``--compact``, what ``fleetwatch history compact
--config CONFIG`` printed and its exit status (one JSON document on one line: that command
run first, in this process, on a lake of its own), then the answers as one JSON document on
one line (MASTER: a spark:// URL, local[N], or with --remote an sc:// URL), then with
``--sql`` what ``fleetwatch history sql --config CONFIG --json QUERY`` prints: every command
run in the same process (one Spark driver, one JVM, for all), by the cluster and Connect
tests with the installed fleetwatch.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from datetime import date, datetime
from pathlib import Path


def plain(df) -> list[dict]:
    """A DataFrame's rows as JSON-able dicts, in the DataFrame's order."""
    return json.loads(json.dumps([r.asDict(recursive=True) for r in df.collect()],
                                 default=_text))


def _text(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def answers(h) -> dict[str, list[dict]]:
    """The queries' answers on History ``h`` (the generated lake of tests/support/lakegen.py
    or any compacted lake: hosts web1 and db1 where it has them)."""
    from fleetwatch.lake.query import History
    beats = History(h.spark, h.lake, use_spans=False)
    return {
        "availability": plain(h.availability()),
        "availability_from_heartbeats": plain(beats.availability()),
        "availability_excluding_downtime": plain(h.availability(exclude_downtime=True)),
        "metric": plain(h.metric("web1", "cpu.user", bucket="20m")),
        "top_hosts": plain(h.top_hosts("cpu.user")),
        "check_timeline": plain(h.check_timeline("web1")),
        "time_in_state": plain(h.time_in_state()),
        "notifications": plain(h.notification_history()),
        "hosts": plain(h.hosts().orderBy("uuid")),
    }


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    lake, master = argv[0], argv[1]
    from fleetwatch.cli import main as fleetwatch
    from fleetwatch.lake import spark as sparks
    from fleetwatch.lake.query import History
    if "--compact" in argv:     # its session stopped at its end: the answers make another
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = fleetwatch(["history", "compact", "--config",
                               argv[argv.index("--compact") + 1]])
        print(json.dumps({"returncode": code, "stdout": out.getvalue()}), flush=True)
    if "--remote" in argv:
        spark = sparks.remote(master)
    else:
        spark = sparks.session(master, {"spark.driver.memory": "1g"})
    try:
        print(json.dumps(answers(History(spark, lake))), flush=True)
        if "--sql" in argv:
            config, query = argv[argv.index("--sql") + 1:][:2]
            return fleetwatch(["history", "sql", "--config", config, "--json", query])
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
