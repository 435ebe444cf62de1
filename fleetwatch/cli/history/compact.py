"""``fleetwatch history compact [--every SECONDS] [--quiet]``: closed landing files into the
Parquet tables, exactly once (:mod:`sinks.history.compact` is the run).

One run, or with ``--every`` one run every SECONDS in one Spark session until SIGTERM, which
ends the loop after the current run (a SIGKILL at any point is safe too). A failed run changes
nothing visible: alone it exits 1; under ``--every`` it is logged and retried next time with a
new Spark session. Another compaction holding the lake exits 75 (EX_TEMPFAIL), or under
``--every`` waits for the next turn. Progress is one line per step on stdout (``--quiet``:
only the summary).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

log = logging.getLogger(__name__)

HELP = "landing files -> Parquet tables (dedupe by msg_id, exactly once per file)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--every", type=float, metavar="SECONDS",
                   help="compact again this many seconds after each run, until SIGTERM "
                        "(one Spark session for all runs; `make demo` uses this)")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")


def run(args, settings) -> int:
    from sinks.history.compact import EX_TEMPFAIL, Busy, compact
    from sinks.history.spark import from_settings
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet = getattr(args, "quiet", False)
    out = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    every = getattr(args, "every", None)
    if every is not None and not every > 0:
        print("fleetwatch history compact: --every expects a positive number of seconds",
              file=sys.stderr)
        return 2
    stop = threading.Event()
    if every:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = from_settings(settings)
    try:
        while True:
            try:
                summary = compact(spark, settings, out)
                if quiet:
                    print(summary.line(), flush=True)
            except Busy as e:
                print(f"fleetwatch history compact: {e}", file=sys.stderr)
                if not every:
                    return EX_TEMPFAIL
            except Exception as e:  # a failed run changes nothing visible; retried next time
                if not every:
                    print(f"fleetwatch history compact: failed: {first_line(e)}",
                          file=sys.stderr)
                    return 1
                log.error("compaction failed (retried in %.0f s with a new Spark session): "
                          "%s", every, first_line(e))
                _stop(spark)            # a session whose JVM died would fail every run
                spark = None
            if not every or stop.wait(every):
                return 0
            if spark is None:
                spark = from_settings(settings)
    finally:
        if spark is not None:
            _stop(spark)


def _stop(spark) -> None:
    try:
        spark.stop()
    except Exception as e:  # its JVM may be gone already; nothing left to release
        log.warning("stopping the Spark session: %s", first_line(e))


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
