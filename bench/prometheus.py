"""One scrape of the prometheus sink at fleet size, against prometheus_client alone in the same
run.

The sink (:class:`sinks.prometheus.sink.PrometheusSink`, its real HTTP endpoint on 127.0.0.1)
is fed HOSTS agents x SERIES metrics the way the sink loop feeds it: the frames a router
pushes (a HELLO and a STATS per agent) decoded with the codec and handed to ``write`` in
batches of 500 messages (no router, no PULL socket: the write path only). The baseline is
prometheus_client exposing the same series alone: SERIES ``Gauge`` families labelled
``host`` and ``instance``, one child per agent set to the same value, served by the same
``start_http_server`` in the same process.

Each round scrapes both over HTTP, alternating which goes first, in the text format and in
OpenMetrics (the Accept header Prometheus sends), and times a scrape from the request to
the last byte read; sizes are the bodies' (and gzipped, as Prometheus asks). Figures are
medians over the rounds, and the ratio of the medians. Memory: the process's RSS before and
after the sink's table is filled (before the baseline exists), per series. Every scrape is
checked to hold every series. The table's snapshot (the copy made under its lock) is timed
alone too.

    python bench/prometheus.py [--rounds 5] [--hosts 10000] [--series 30]
                               [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import psutil  # noqa: E402
from prometheus_client import CollectorRegistry, Gauge, start_http_server  # noqa: E402

from fleetwatch import protocol  # noqa: E402
from results import write_section  # noqa: E402  (bench/results.py)
from sinks.prometheus.config import PrometheusSettings  # noqa: E402
from sinks.prometheus.sink import PrometheusSink  # noqa: E402

HEADING = "## Prometheus sink: one scrape at fleet size"
LOOP_BATCH = 500
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def uuid_of(h: int) -> str:
    return f"{h:032x}"


def metric_names(series: int) -> list[str]:
    return [f"bench.m{m:02d}" for m in range(series)]


def frames(hosts: int, series: int) -> list[list[bytes]]:
    """What a router pushes the sink: each agent's HELLO, then its STATS."""
    names = metric_names(series)
    out = []
    for h in range(hosts):
        uuid = uuid_of(h)
        hello = protocol.make("HELLO", uuid, hostname=f"host{h:05d}.example.com",
                              heartbeat=2.0, role="agent")
        stats = protocol.make("STATS", uuid, hostname=f"host{h:05d}.example.com",
                              metrics={n: float(h + m) for m, n in enumerate(names)})
        for msg in (hello, stats):
            out.append(protocol.encode_relayed(msg, uuid, "router-1"))
    return out


def fill_sink(sink: PrometheusSink, raw: list[list[bytes]]) -> float:
    """Decode and write ``raw`` in loop-sized batches; seconds taken."""
    t0 = time.perf_counter()
    for start in range(0, len(raw), LOOP_BATCH):
        sink.write([protocol.decode_relayed(f) for f in raw[start:start + LOOP_BATCH]])
    return time.perf_counter() - t0


def baseline(hosts: int, series: int) -> tuple[CollectorRegistry, list[Gauge]]:
    registry = CollectorRegistry(auto_describe=False)
    gauges = []
    for m, name in enumerate(metric_names(series)):
        g = Gauge("fleetwatch_" + name.replace(".", "_"), "latest value of a STATS metric",
                  ["host", "instance"], registry=registry)
        for h in range(hosts):
            g.labels(f"host{h:05d}.example.com", uuid_of(h)).set(float(h + m))
        gauges.append(g)
    return registry, gauges


def scrape(url: str, accept: str | None) -> tuple[float, bytes]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        body = r.read()
    return time.perf_counter() - t0, body


def count_series(body: bytes, prefix: bytes = b"fleetwatch_bench_m") -> int:
    return sum(1 for line in body.split(b"\n") if line.startswith(prefix))


def fmt_ms(values: list[float]) -> str:
    return " / ".join(f"{v * 1000:.0f}" for v in (min(values), statistics.median(values),
                                                  max(values)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--series", type=int, default=30)
    ap.add_argument("--results", type=Path, default=None,
                    help="write the figures into this RESULTS.md")
    args = ap.parse_args()
    total = args.hosts * args.series
    proc = psutil.Process()

    raw = frames(args.hosts, args.series)
    rss0 = proc.memory_info().rss
    sink = PrometheusSink(PrometheusSettings(listen="127.0.0.1:0",
                                             max_series=total + 1000), "bench")
    fill = fill_sink(sink, raw)
    rss1 = proc.memory_info().rss
    del raw
    assert len(sink.table) == total, (len(sink.table), total)
    sink.start()
    sink_url = sink.server.url()
    registry, _gauges = baseline(args.hosts, args.series)
    httpd, _ = start_http_server(0, "127.0.0.1", registry)
    base_url = f"http://127.0.0.1:{httpd.server_address[1]}/metrics"

    # timings[(variant, format)] = [seconds per round]; sizes likewise (bytes, gzipped bytes)
    timings: dict = {}
    sizes: dict = {}
    for r in range(args.rounds):
        order = [("sink", sink_url), ("client", base_url)]
        if r % 2:
            order.reverse()
        for fmt, accept in (("text", None), ("openmetrics", OPENMETRICS)):
            for variant, url in order:
                seconds, body = scrape(url, accept)
                got = count_series(body)
                assert got == total, f"{variant} {fmt}: {got} series of {total}"
                timings.setdefault((variant, fmt), []).append(seconds)
                sizes[(variant, fmt)] = (len(body), len(gzip.compress(body, 6)))
        print(f"round {r + 1}: " + ", ".join(
            f"{v} {f} {timings[(v, f)][-1] * 1000:.0f} ms" for v, f in sorted(timings)),
            flush=True)
    # how long a scrape holds the table's lock (the sink's loop waits at most that long)
    held = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        sink.table.snapshot()
        held.append(time.perf_counter() - t0)
    sink.close()
    httpd.shutdown()

    rows = []
    for fmt in ("text", "openmetrics"):
        s, c = timings[("sink", fmt)], timings[("client", fmt)]
        ratio = statistics.median(s) / statistics.median(c)
        per_round = [a / b for a, b in zip(s, c)]
        (ss, sg), (cs, cg) = sizes[("sink", fmt)], sizes[("client", fmt)]
        rows.append(f"| {fmt} | {fmt_ms(c)} | {fmt_ms(s)} | **{ratio:.2f}** | "
                    f"{min(per_round):.2f}-{max(per_round):.2f} | "
                    f"{cs / 1e6:.1f} / {cg / 1e6:.1f} | {ss / 1e6:.1f} / {sg / 1e6:.1f} |")
    body = (f"{total:,} series ({args.hosts:,} hosts x {args.series}), {args.rounds} rounds, "
            f"each scrape checked to hold every series.\n\n"
            "| format | prometheus_client alone: ms per scrape (min / median / max) | "
            "sink: ms per scrape | sink / client (medians) | ratio per round (min-max) | "
            "client: MB (plain / gzip) | sink: MB (plain / gzip) |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"Filling the sink through its write path (codec decode, naming, the table): "
            f"{fill:.2f} s for {args.hosts:,} HELLOs and STATS, "
            f"{total / fill / 1000:.0f}k series per second. A scrape holds the table's lock "
            f"(copying it) for {fmt_ms(held)} ms (min / median / max): the longest the "
            f"sink's loop can wait for a scrape. Process RSS grew by "
            f"{(rss1 - rss0) / 1e6:.0f} MB for the table ({(rss1 - rss0) / total:.0f} bytes "
            f"per series, names and memories included).")
    print(body)
    if args.results:
        command = (f"python bench/prometheus.py --rounds {args.rounds} --hosts {args.hosts} "
                   f"--series {args.series} --results {args.results}")
        write_section(args.results, HEADING, command, body, NOTES)
    return 0


NOTES = """Method (bench/prometheus.py): both endpoints serve the same series (same names, label
values and values) from the same process through prometheus_client's own HTTP server and
exposition, scraped over loopback in the same rounds, alternating which goes first; a scrape
is timed from the request to the last byte. The client side is prometheus_client alone (30
labelled `Gauge`s, 10,000 children each); the sink side is the sink's table (its snapshot
copied under the lock, stale series filtered) through its custom collector."""


if __name__ == "__main__":
    sys.exit(main())
