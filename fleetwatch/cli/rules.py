"""``fleetwatch rules backtest``: what an alerting policy would have paged over the past.

    fleetwatch rules backtest --since 30d [--until T] [--rules ALERTING.yaml] [--json]

The lake and its Spark come from the operator config's ``history:`` section (``--config``;
``--lake``, ``--master`` and ``--remote`` win over it, as for ``fleetwatch history``); the
policy tried from the ``alerting:`` section of ``--rules`` (an alerting sink's config,
default /etc/fleetwatch/sink-alerting.yaml): its rules, levels, ``for``, dependencies,
timeouts. The lake's messages are replayed through a real alerting sink on a throwaway state
database, on their own times (:mod:`fleetwatch.lake.backtest`,
:mod:`sinks.alerting.backtest`), and what it paged is compared with what really paged (the
lake's ``lifecycle`` table).

Printed: per subject (a check, ``rule:NAME``, ``host``...) and host, the pages (how many, the
first, how long they lasted in all), the real ones, those added and those avoided; then
each page added (and what held it back in reality, if anything did) and each avoided (and
by what: a downtime, a parent, or the policy). ``--json``: one document with the same and
every page. Progress goes to stderr every few seconds.

Exit status: 0 (whatever it found), 2 for a bad time or option, 69 when Spark cannot run
(no Java, no ``history`` extra, no Spark Connect server at ``--remote``), 78 for a bad
config (the alerting section's own checks: a bad rule is one line naming it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from fleetwatch.cli.operator import DEFAULT_PATH
from fleetwatch.cli.units import CONFIG_DIR
from fleetwatch.display import escape, iso, table
from sinks.alerting import holds

VERBS = ("backtest",)
#: the alerting sink's config where ``fleetwatch service install sink alerting`` puts it
DEFAULT_RULES = f"{CONFIG_DIR}/sink-alerting.yaml"
#: the summary table's columns
COLUMNS = ["subject", "hostname", "pages", "first", "paged", "real", "added", "avoided"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = verbs.add_parser("backtest", help="replay the lake through an alerting policy: what "
                                          "it would have paged, against what really paged")
    p.add_argument("--since", metavar="T", required=True,
                   help="from T (epoch seconds, ISO 8601 UTC like 2026-11-20T10:00Z, or 30d "
                        "for 30 days ago)")
    p.add_argument("--until", metavar="T",
                   help="until T, excluded (default: the newest message in the lake)")
    p.add_argument("--rules", metavar="PATH", default=DEFAULT_RULES,
                   help=f"the policy to try: a config with an alerting: section (default "
                        f"{DEFAULT_RULES})")
    p.add_argument("--tick", metavar="D", default="5s",
                   help="a replay step: page times are exact to it (default 5s; the live "
                        "sink ticks every alerting.tick_interval)")
    p.add_argument("--warmup", metavar="D", default="1h",
                   help="replayed before --since and not reported, so that states and the "
                        "rules' windows are full when it starts (default 1h)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--config", metavar="PATH", default=DEFAULT_PATH,
                   help=f"operator config with a history: section (default {DEFAULT_PATH})")
    p.add_argument("--lake", metavar="PATH", help="the lake directory (wins over the config)")
    p.add_argument("--master", metavar="URL", help="spark.master (wins over the config)")
    p.add_argument("--remote", metavar="URL",
                   help="a Spark Connect server, sc://HOST:15002 (wins over the config)")


def run(args, clock=time.time) -> int:
    from fleetwatch.config import load, load_section
    from fleetwatch.cli.operator import OperatorConfig
    from fleetwatch.lake.instants import epoch, seconds
    from sinks.alerting.config import AlertingConfig
    name = f"fleetwatch rules {args.verb}"
    try:
        now = clock()
        since, until = epoch(args.since, now), epoch(args.until, now)
        tick, warmup = seconds(args.tick), seconds(args.warmup)
        if not tick > 0:
            raise ValueError(f"--tick: expected a positive duration, got {args.tick!r}")
        if until is not None and until <= since:
            raise ValueError("--until: expected a time after --since")
    except ValueError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    if not os.path.exists(args.rules):
        print(f"{name}: {args.rules}: no such file (--rules PATH: the policy to try, a "
              f"config with an alerting: section)", file=sys.stderr)
        return os.EX_CONFIG
    policy = load_section(AlertingConfig, args.rules, "alerting")
    settings = load(OperatorConfig, args.config).history
    changes = {k: v for k, v in (("lake", args.lake), ("master", args.master),
                                 ("remote", args.remote)) if v}
    settings = dataclasses.replace(settings, **changes) if changes else settings
    code = _spark_ready(name, settings)
    if code:
        return code
    from fleetwatch.lake.backtest import Backtest
    from fleetwatch.lake.query import History
    from fleetwatch.lake.spark import from_settings
    history = History(from_settings(settings), settings.lake)
    report = Backtest(history, policy, tick=tick, warmup=warmup).run(since, until)
    if args.json:
        print(json.dumps(_stamped(report.to_json()), indent=2, ensure_ascii=False))
    else:
        print(render(report, args.rules))
    return 0


def _spark_ready(name: str, settings) -> int:
    """0 when Spark can run here (a Spark Connect server answers, or Java and the
    ``history`` extra are installed), else the exit status, said in one line."""
    from fleetwatch.cli.history.session import reach
    from fleetwatch.lake.spark import JavaMissing, java
    from fleetwatch.optional import MissingDependency, optional_import
    try:
        if settings.remote:
            reach(settings.remote, 5.0)
        else:
            java()
            if sys.stderr.isatty():
                print(f"{name}: starting a local Spark on {settings.master} (10-60 s)",
                      file=sys.stderr, flush=True)
        optional_import("pyspark", name)
    except (MissingDependency, JavaMissing, OSError) as e:
        print(f"{name}: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    return 0


_TIMES = ("since", "until", "start", "end", "first")


def _stamped(doc):
    """The report's times as ISO 8601 UTC text (``--json``), everything else as it is."""
    if isinstance(doc, list):
        return [_stamped(v) for v in doc]
    if isinstance(doc, dict):
        return {k: (iso(v) if k in _TIMES and isinstance(v, (int, float)) else _stamped(v))
                for k, v in doc.items()}
    return doc


def duration(seconds_: float | None) -> str:
    """``95`` as ``1m35s``, ``7200`` as ``2h``; None as ``-``."""
    if seconds_ is None:
        return "-"
    left, out = int(round(seconds_)), ""
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out + (f"{left}s" if left or not out else "")


def render(report, rules: str) -> str:
    """The report as the command prints it without ``--json``."""
    from sinks.alerting.pages import policy
    diff = report.diff
    lines = [f"backtest of {escape(rules)} from {iso(report.since)} to {iso(report.until)} "
             f"({duration(report.warmup)} of warm-up before, {duration(report.tick)} steps)"]
    rows = [{**r, "first": iso(r["first"]),
             "paged": " + ".join(filter(None, (
                None if r["seconds"] is None else duration(r["seconds"]),
                f"{r['open']} open" if r["open"] else None))) or "-"}
            for r in diff.summary()]
    lines.append(table(rows, COLUMNS) if rows else "no pages, real or replayed")
    if diff.added:
        lines += ["", "added (the policy tried pages, nothing paged in reality):"]
        lines += [_page(p) + (f"  (then {HELD[h.reason]} {escape(h.by)})" if h else "")
                  for p, h in diff.added]
    if diff.avoided:
        lines += ["", "avoided (paged in reality, not by the policy tried):"]
        lines += [_page(p) + f"  {HELD[h.reason]} {escape(h.by)}" if h else
                  _page(p) + f"  not paged by {policy(p)}" for p, h in diff.avoided]
    c, s = report.counts, report.seconds
    lines += ["", f"{c['messages']} messages replayed ({c['ticks']} ticks) in "
                  f"{s['total']:.1f}s, {s['evaluation']:.1f}s of it in the alerting sink"]
    return "\n".join(lines)


#: how the report says what held a page back, by :mod:`sinks.alerting.holds`' reason
HELD = {holds.DOWNTIME: "held by", holds.SILENCED: "muted by", holds.PARENT_DOWN: "held by",
        holds.UNREACHABLE: "unreachable behind", holds.ACKNOWLEDGED: "acknowledged:"}


def _page(p) -> str:
    lasted = "still open" if p.end is None and p.kind != "notify" else \
        ("" if p.end is None else f"for {duration(p.end - p.start)}")
    return (f"  {iso(p.start)}  {escape(p.hostname or p.uuid or '-')}  "
            f"{escape(p.subject)}  {escape(p.severity)}  {lasted}").rstrip()
