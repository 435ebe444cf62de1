"""A scrape of the prometheus sink while one host floods names: the fleet held to the per-host
cap (``max_series_per_host``) against the same fleet and flood uncapped, in the same run.

Issue 31: one local process made 200,000 series in 1.1 s, and the next scrape took 14.6 s,
past Prometheus' default ``scrape_timeout`` of 10 s, so the whole fleet's scrape failed. Here
HOSTS agents are each at the cap, CAP names each: the same names on every host, as agents
send them (``--distinct``: names of each host's own, so that every series is a family of its
own, the dearest form to expose, a HELP and a TYPE line each); one more host sends FLOOD
names of its own. Two sinks (:class:`sinks.prometheus.sink.PrometheusSink`, their real
HTTP endpoints on 127.0.0.1) are fed the same frames the way the sink loop feeds one (decoded
with the codec, ``write`` in batches of 500 messages; no router, no PULL socket):

- capped: ``max_series_per_host`` = CAP (the flood keeps CAP series, the rest is counted);
- uncapped: ``max_series_per_host`` = ``max_series`` (the sink before the per-host cap: the
  flood all in). This is the baseline.

Each round scrapes both over HTTP, alternating which goes first, in OpenMetrics (what
Prometheus asks for) and in the text format, from the request to the last byte; figures are
medians (with min and max) and the ratio of the medians. Every scrape is checked to hold the
series expected. What the cap costs the write path is timed apart: fresh sinks, capped and
uncapped in turn, filled with the fleet alone (no flood, nothing refused), medians.

    python bench/prometheus_flood.py [--rounds 5] [--hosts 100] [--cap 1000]
                                     [--flood 200000] [--distinct]
                                     [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleetwatch import protocol  # noqa: E402
from prometheus import OPENMETRICS, fill_sink, fmt_ms, scrape  # noqa: E402  (bench/prometheus.py)
from results import write_section  # noqa: E402  (bench/results.py)
from sinks.prometheus.config import PrometheusSettings  # noqa: E402
from sinks.prometheus.sink import PrometheusSink  # noqa: E402

HEADING = "## Prometheus sink: a scrape while one host floods names"
#: Prometheus' default scrape_timeout
TIMEOUT = 10.0
#: names in one STATS (a 256 KiB body holds about 8,000)
PER_STATS = 5000


def host_frames(h: int, names: list[str]) -> list[list[bytes]]:
    """A host's HELLO, then its names in STATS of at most PER_STATS."""
    uuid, hostname = f"{h:032x}", f"host{h:05d}.example.com"
    msgs = [protocol.make("HELLO", uuid, hostname=hostname, heartbeat=2.0, role="agent")]
    for start in range(0, len(names), PER_STATS):
        msgs.append(protocol.make("STATS", uuid, hostname=hostname, metrics={
            n: float(i) for i, n in enumerate(names[start:start + PER_STATS], start)}))
    return [protocol.encode_relayed(m, uuid, "router-1") for m in msgs]


def frames(hosts: int, cap: int, flood: int, distinct: bool) -> tuple[list, list]:
    """(HOSTS hosts at the cap: the same names, or each its own; the flooding host)."""
    fleet = []
    for h in range(hosts):
        fleet += host_frames(h, [f"{f'h{h:05d}' if distinct else 'fleet'}.m{m:04d}"
                                 for m in range(cap)])
    return fleet, host_frames(hosts, [f"flood.m{m:06d}" for m in range(flood)])


def count_series(body: bytes) -> int:
    return sum(1 for line in body.split(b"\n")
               if line.startswith((b"fleetwatch_h", b"fleetwatch_fleet_m", b"fleetwatch_flood_m")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hosts", type=int, default=100, help="hosts at the cap")
    ap.add_argument("--cap", type=int, default=1000, help="max_series_per_host")
    ap.add_argument("--flood", type=int, default=200_000, help="names of the flooding host")
    ap.add_argument("--distinct", action="store_true",
                    help="each host at the cap has names of its own (a family a series)")
    ap.add_argument("--results", type=Path, default=None,
                    help="write the figures into this RESULTS.md")
    args = ap.parse_args()
    max_series = args.hosts * args.cap + args.flood + 1000
    fleet, flood = frames(args.hosts, args.cap, args.flood, args.distinct)
    per_host = {"capped": args.cap, "uncapped": max_series}

    def fresh(variant: str) -> PrometheusSink:
        return PrometheusSink(PrometheusSettings(   # nothing goes stale while it runs
            listen="127.0.0.1:0", max_series=max_series, stale_after=86400.0,
            max_series_per_host=per_host[variant]), variant)
    # the write path, with and without the cap, on the fleet alone: nothing refused
    fills: dict = {"capped": [], "uncapped": []}
    for r in range(args.rounds):
        for variant in (("capped", "uncapped") if r % 2 == 0 else ("uncapped", "capped")):
            fills[variant].append(fill_sink(fresh(variant), fleet))
    sinks, want = {}, {}
    for variant in ("capped", "uncapped"):
        sink = fresh(variant)
        fill_sink(sink, fleet + flood)
        want[variant] = args.hosts * args.cap + min(args.flood, per_host[variant])
        assert len(sink.table) == want[variant], (variant, len(sink.table), want[variant])
        sink.start()
        sinks[variant] = sink
    del fleet, flood
    refused = sinks["capped"].counts["dropped_max_series_per_host"]
    assert refused == args.flood - min(args.flood, args.cap), refused
    load = os.getloadavg()

    timings: dict = {}
    sizes: dict = {}
    for r in range(args.rounds):
        order = ["capped", "uncapped"] if r % 2 == 0 else ["uncapped", "capped"]
        for fmt, accept in (("openmetrics", OPENMETRICS), ("text", None)):
            for variant in order:
                seconds, body = scrape(sinks[variant].server.url(), accept)
                got = count_series(body)
                assert got == want[variant], f"{variant} {fmt}: {got} series of {want[variant]}"
                timings.setdefault((variant, fmt), []).append(seconds)
                sizes[(variant, fmt)] = (len(body), len(gzip.compress(body, 6)))
        print(f"round {r + 1}: " + ", ".join(
            f"{v} {f} {timings[(v, f)][-1] * 1000:.0f} ms" for v, f in sorted(timings)),
            flush=True)
    load = max(load[0], os.getloadavg()[0])
    for sink in sinks.values():
        sink.close()

    rows = []
    for fmt in ("openmetrics", "text"):
        c, u = timings[("capped", fmt)], timings[("uncapped", fmt)]
        (cs, cg), (us, ug) = sizes[("capped", fmt)], sizes[("uncapped", fmt)]
        rows.append(f"| {fmt} | {fmt_ms(u)} | {fmt_ms(c)} | "
                    f"**{statistics.median(c) / statistics.median(u):.2f}** | "
                    f"{max(c):.1f} s | {us / 1e6:.1f} / {ug / 1e6:.1f} | "
                    f"{cs / 1e6:.1f} / {cg / 1e6:.1f} |")
    worst = max(max(timings[("capped", f)]) for f in ("openmetrics", "text"))
    verdict = "meets" if worst < TIMEOUT / 2 else "under" if worst < TIMEOUT else "MISSES"
    names = "names of its own, every series a family" if args.distinct else \
        "the same names on every host"
    body = (f"{args.hosts:,} hosts at the cap ({args.cap:,} series each, {names}) and one "
            f"host sending {args.flood:,} names of its own: uncapped "
            f"{want['uncapped']:,} series, capped {want['capped']:,} ({refused:,} of the "
            f"flood refused, counted `dropped_max_series_per_host`). {args.rounds} rounds, "
            f"load average up to {load:.1f} on {os.cpu_count()} cores.\n\n"
            "| format | uncapped (baseline): ms per scrape (min / median / max) | capped: ms "
            "per scrape | capped / uncapped (medians) | capped, slowest | uncapped: MB "
            "(plain / gzip) | capped: MB (plain / gzip) |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"The capped fleet's slowest scrape, {worst:.1f} s, against Prometheus' default "
            f"`scrape_timeout` of {TIMEOUT:.0f} s: **{verdict}** (target: under half of it). "
            f"The cap's cost on the write path (codec decode, naming, the table), filling "
            f"fresh sinks with the fleet alone in turn: capped {fmt_ms(fills['capped'])} ms, "
            f"uncapped {fmt_ms(fills['uncapped'])} ms (min / median / max), "
            f"**{statistics.median(fills['capped']) / statistics.median(fills['uncapped']):.2f}**"
            f" of uncapped.")
    print(body)
    if args.results:
        command = (f"python bench/prometheus_flood.py --rounds {args.rounds} --hosts "
                   f"{args.hosts} --cap {args.cap} --flood {args.flood}"
                   f"{' --distinct' if args.distinct else ''} --results {args.results}")
        write_section(args.results, HEADING + (" (names of each host's own)"
                                               if args.distinct else ""),
                      command, body, NOTES)
    return 0 if worst < TIMEOUT else 1


NOTES = """Method (bench/prometheus_flood.py): two sinks in one process, fed the same decoded
frames through `write` (500 messages a batch, as the loop does), serving through
prometheus_client's own HTTP server; the uncapped one has `max_series_per_host` =
`max_series`, which is how the sink behaved before the per-host cap. Scrapes alternate
which sink goes first, from the request to the last byte over loopback. The flood's names are
each a family of their own (a HELP and a TYPE line each), the dearest form to expose; with
`--distinct` the fleet's are too."""


if __name__ == "__main__":
    sys.exit(main())
