"""``fleetwatch history compact [--every SECONDS] [--quiet]``: closed landing files into the
Parquet tables, exactly once (:mod:`fleetwatch.lake.compact` is the run).

One run, or with ``--every`` one run every SECONDS in one Spark session (started by the first
run with something to do) until SIGTERM, which ends the loop after the current run (a SIGKILL
at any point is safe too). A failed run changes nothing visible: alone it exits 1; under
``--every`` it is logged and retried next time with a new Spark session. Another compaction
holding the lake (the demo's periodic one, say): one run waits for it, up to ``--wait``
seconds, with a line on stderr naming it, before it starts Spark; past the wait, or at once
with ``--no-wait``, it exits 75 (EX_TEMPFAIL). Under ``--every`` it waits for the next turn.
Progress is one line per step on stdout (``--quiet``: only the summary).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

log = logging.getLogger(__name__)

HELP = "landing files -> Parquet tables (dedupe by msg_id, exactly once per file)"
#: how long one run waits at most for a compaction already running (seconds)
WAIT = 600.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--every", type=float, metavar="SECONDS",
                   help="compact again this many seconds after each run, until SIGTERM "
                        "(one Spark session for all runs, started by the first with work; "
                        "`make demo` uses this)")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    p.add_argument("--wait", type=float, default=WAIT, metavar="SECONDS",
                   help="with another compaction running, wait this long at most for it, "
                        f"saying so on stderr (default {WAIT:g})")
    p.add_argument("--no-wait", action="store_true",
                   help="with another compaction running, exit 75 at once")


def run(args, settings) -> int:
    from fleetwatch.lake.compact import Busy, compact
    from fleetwatch.lake.spark import Lazy, from_settings
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet = getattr(args, "quiet", False)
    out = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    every = getattr(args, "every", None)
    if every is not None and not every > 0:
        print("fleetwatch history compact: --every expects a positive number of seconds",
              file=sys.stderr)
        return 2
    if not every:
        return once(args, settings, out, quiet)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = Lazy(lambda: from_settings(settings))     # made by the first run with work
    try:
        while True:
            try:
                summary = compact(spark, settings, out)
                if quiet:
                    print(summary.line(), flush=True)
            except Busy as e:
                say(str(e))
            except Exception as e:  # a failed run changes nothing visible; retried next time
                log.error("compaction failed (retried in %.0f s with a new Spark session): "
                          "%s", every, first_line(e))
                _stop(spark)            # a session whose JVM died would fail every run
            if stop.wait(every):
                return 0
    finally:
        _stop(spark)


def once(args, settings, out, quiet: bool) -> int:
    """One run: the lake's lock first (waiting for a run that holds it, if asked), then
    Spark, then the compaction."""
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.lock import Busy, locked
    from fleetwatch.lake.manifest import Lake
    from fleetwatch.lake.spark import from_settings
    wait = 0.0 if args.no_wait else args.wait
    try:
        with locked(Lake(settings.lake), wait=wait, tell=say):
            spark = from_settings(settings)
            try:
                summary = compact(spark, settings, out, held=True)
            except Exception as e:  # a failed run changes nothing visible
                say(f"failed: {first_line(e)}")
                return 1
            finally:
                _stop(spark)
    except Busy as e:
        say(str(e))
        return os.EX_TEMPFAIL
    if quiet:
        print(summary.line(), flush=True)
    return 0


def say(line: str) -> None:
    print(f"fleetwatch history compact: {line}", file=sys.stderr, flush=True)


def _stop(spark) -> None:
    try:
        spark.stop()
    except Exception as e:  # its JVM may be gone already; nothing left to release
        log.warning("stopping the Spark session: %s", first_line(e))


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
