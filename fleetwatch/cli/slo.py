"""``fleetwatch slo list|report``: the SLOs the alerting sinks keep, their error budgets and
burn rates.

    fleetwatch slo [list] [NAME...] [--json]      # each SLO: objective, window, what it
                                                  # counts, its state (ok, ticket, page)
    fleetwatch slo report [NAME...] [--offenders N] [--json]
                                                  # and now: SLI, budget left, burn rates
                                                  # over 5m/30m/1h/6h, worst offenders

The SLOs are those of the alerting sinks' configs (``alerting.slos``), which the sinks
declare in the state database; :mod:`fleetwatch.actions.slo` reads them, for this command
and the console (``/slo``, ``GET /api/v1/slos``). docs/operating/slo.md says what the
figures mean.

Exit status: 0 when listed (whatever the states); 1 when a NAME asked for is not an SLO of
any sink; 69 when the state database cannot be used; 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from fleetwatch.actions import slo as slos
from fleetwatch.actions.database import Unavailable
from fleetwatch.actions.slo import amount, percent, rate
from fleetwatch.cli.operator import OperatorConfig, add_config
from fleetwatch.config import load
from fleetwatch.display import escape, iso, table

VERBS = ("list", "report")
#: the verb of `fleetwatch slo NAME` and `fleetwatch slo --json`
DEFAULT_VERB = "list"
#: the burn-rate windows, in the order a report shows them
WINDOWS = ("5m", "30m", "1h", "6h")


def _options(parser: argparse.ArgumentParser, report: bool) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these SLOs")
    if report:
        parser.add_argument("--offenders", type=_count, default=5, metavar="N",
                            help="the N hosts that spent most of each budget (default 5; "
                                 "0: none)")
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"expected 0 to 1000 hosts; got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, report, help_ in (
            ("list", False, "each SLO and its state (also without the verb)"),
            ("report", True, "each SLO's SLI, error budget left, burn rates and worst "
                             "offenders now")):
        _options(verbs.add_parser(verb, help=help_, description=help_), report)
    parser.set_defaults(names=[], offenders=5)
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def what(s: dict) -> str:
    """``results of checks http*`` / ``time of rules disk_full*``."""
    return f"{s['measures']} of {s['source']} {','.join(s[s['source']])}"


def run(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    reporting = args.verb == "report"
    names = list(args.names or ()) or None
    try:
        found = slos.report(config.state_url, clock(), names, args.offenders) if reporting \
            else slos.listed(config.state_url, names)
    except Unavailable as e:
        print(f"fleetwatch slo: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    missing = sorted(set(names or ()) - {s["name"] for s in found})
    if args.json:
        print(json.dumps(slos.document(found), indent=2, ensure_ascii=False))
    elif not found and not names:
        print("no SLOs: no alerting sink has any (alerting.slos), or none has started since")
    elif reporting:
        print(_report(found))
    elif found:
        print(table([_row(s) for s in found], ["name", "objective", "window", "counts",
                                              "hosts", "per_host", "downtime", "state",
                                              "since"]))
    if missing:
        print(f"fleetwatch slo: no SLO {escape(', '.join(missing))} in any alerting sink's "
              f"config", file=sys.stderr)
        return 1
    return 0


def _row(s: dict) -> dict:
    return {"name": s["name"], "objective": percent(s["objective"]), "window": s["window"],
            "counts": what(s), "hosts": s["hosts"], "per_host": s["per_host"],
            "downtime": s["downtime_counts_as"], "state": s["state"] or "not judged yet",
            "since": iso(s["since"]) if s["state"] not in (None, "ok") else None}


def _report(found: list[dict]) -> str:
    """A summary table of the SLOs, then each one's worst offenders."""
    rows = [{"name": s["name"], "objective": percent(s["objective"]), "window": s["window"],
             "sli": percent(s["sli"]), "budget_left": percent(s["budget_left"], 1),
             **{f"burn_{w}": rate(s["burn"].get(w)) for w in WINDOWS},
             "state": s["state"] or "not judged yet"} for s in found]
    out = [table(rows, ["name", "objective", "window", "sli", "budget_left",
                        *(f"burn_{w}" for w in WINDOWS), "state"])]
    for s in found:
        def n(value: float) -> str:
            return amount(value, s["measures"])
        head = (f"{s['name']}: {what(s)} on {','.join(s['hosts'])}; page at "
                f"{s['page_at']:.3g}x (1h and 5m), ticket at {s['ticket_at']:.3g}x (6h and "
                f"30m); good {n(s['good'])}, bad {n(s['bad'])}, excluded "
                f"{n(s['excluded'])}")
        if s.get("alerting") is not None:
            head += f"; {s['alerting']} host(s) alerting"
        out += ["", escape(head)]
        if s["offenders"]:
            columns = ["hostname", "spent", "bad", "good"]
            if s["per_host"]:
                columns += ["budget_left", "state"]
            out.append(table([{**o, "hostname": o["hostname"] or o["uuid"],
                               "spent": percent(o["spent"], 1), "bad": n(o["bad"]),
                               "good": n(o["good"]),
                               "budget_left": percent(o.get("budget_left"), 1)}
                              for o in s["offenders"]], columns))
    return "\n".join(out)
