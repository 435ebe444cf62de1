"""The answers of the history queries on a lake, as JSON-able data, so that two Spark
sessions (``local[*]`` in the test process, a standalone cluster or Spark Connect in a
child process) can be compared: availability (from spans, from every heartbeat, downtime
excused), metric buckets, top hosts, check timelines and time in state, notifications.

As a script: ``python tests/support/historyanswers.py CONFIG QUERY [COMPACT]`` opens the
lake of operator config CONFIG on its Spark (``History.open``: its master or Spark Connect
server, its ``conf``), and prints one JSON document on one line: the answers, what
``fleetwatch history sql --config CONFIG --json QUERY`` prints and its exit status, then
with COMPACT what ``fleetwatch history compact --config COMPACT`` printed and its exit
status (that command run last, on a lake of its own: it stops the session at its end).
Every command runs in the same process, on one Spark session: one driver and one
application on a cluster, so one executor, for all; by the cluster and Connect tests.
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
    config, query, compact = (argv + [""])[:3]
    from fleetwatch.cli import main as fleetwatch
    from fleetwatch.lake.query import History
    h = History.open(config)
    out = {"answers": answers(h)}
    out["sql"] = ran(fleetwatch, ["history", "sql", "--config", config, "--json", query])
    if compact:     # the CLI's session is the one above: the command stops it at its end
        out["rerun"] = ran(fleetwatch, ["history", "compact", "--config", compact])
    else:
        h.spark.stop()
    print(json.dumps(out), flush=True)
    return 0


def ran(fleetwatch, argv: list[str]) -> dict:
    """What ``fleetwatch ARGV``, run by the CLI's ``main`` in this process, printed on
    stdout and its exit status."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = fleetwatch(argv)
    return {"returncode": code, "stdout": out.getvalue()}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
