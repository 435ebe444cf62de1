"""Remote-write throughput of the remote_write sink into a real VictoriaMetrics and a real
Prometheus, against a bare snappy+protobuf writer in the same run.

Both receivers are Debian's, on 127.0.0.1 (tests/support/remotewrite.py: Prometheus with its
receiver on; VictoriaMetrics). Each round, for each receiver, sends HOSTS x SERIES x POINTS
samples twice, alternating which goes first, each time under metric names of its own (so
both create the same number of new series):

- the bare writer: for each request of ``max_samples_per_send`` samples, the WriteRequest built
  with Google's protobuf runtime (one TimeSeries a series, its samples together, labels
  sorted), serialised, compressed with ``cramjam.snappy.compress_raw`` and POSTed on one
  keep-alive ``http.client`` connection: what a minimal client does, nothing queued;
- the sink: the frames a router would push (one STATS per host and point, SERIES metrics
  each, the points one second apart in the last minutes) decoded with the codec and handed
  to ``RemoteWriteSink.write`` in batches of 500 messages, as the sink loop does (no router,
  no PULL: the write path), its queue in a temporary directory, its sender thread sending
  them with the defaults (2,000 samples a request, up to 4 shards).

Each is timed from the first sample handed over until every request was answered 2xx (the
sink: its ``samples_sent`` reaches the total), and its CPU (this process's, every thread:
``time.process_time``) is divided by the samples. The receiver's own CPU is not counted.
After each variant a count query checks that the receiver holds every series.

    python bench/remote_write.py [--rounds 3] [--hosts 100] [--series 50] [--points 60]
                                 [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import cramjam  # noqa: E402

from fleetwatch import protocol  # noqa: E402
from results import wait, write_section  # noqa: E402  (bench/results.py)
from sinks.remote_write import wire  # noqa: E402
from sinks.remote_write.config import RemoteWriteSettings  # noqa: E402
from sinks.remote_write.sink import RemoteWriteSink  # noqa: E402
from support.remotewrite import RECEIVERS, available  # noqa: E402

HEADING = "## Remote write sink"
LOOP_BATCH = 500
PER_SEND = 2000


def uuid_of(h: int) -> str:
    return f"{h:032x}"


def messages(tag: str, hosts: int, series: int, points: int, start: float) -> list:
    """What a router pushes the sink: each host's HELLO, then a STATS per point."""
    out = []
    for h in range(hosts):
        uuid = uuid_of(h)
        out.append(protocol.make("HELLO", uuid, hostname=f"host{h:04d}", heartbeat=1.0))
    for p in range(points):
        for h in range(hosts):
            out.append(protocol.make(
                "STATS", uuid_of(h), clock=lambda t=start + p: t,
                metrics={f"{tag}.m{m:03d}": float(p * 1000 + m) for m in range(series)}))
    return [protocol.encode_relayed(m, m.uuid, "router-1") for m in out]


def bare_requests(tag: str, hosts: int, series: int, points: int, start: float) -> list:
    """The same samples as WriteRequests of PER_SEND samples, each series' samples together
    (built when sending: the writer's cost)."""
    def make():
        batch: list = []
        n = 0
        for h in range(hosts):
            for m in range(series):
                labels = sorted((("__name__", f"fleetwatch_{tag}_m{m:03d}"),
                                 ("host", f"host{h:04d}"), ("uuid", uuid_of(h))))
                ts = wire.TimeSeries(
                    labels=[wire.Label(name=k, value=v) for k, v in labels],
                    samples=[wire.Sample(value=float(p * 1000 + m),
                                         timestamp=int((start + p) * 1000))
                             for p in range(points)])
                batch.append(ts)
                n += points
                if n >= PER_SEND:
                    yield wire.WriteRequest(timeseries=batch)
                    batch, n = [], 0
        if batch:
            yield wire.WriteRequest(timeseries=batch)
    return make()


def run_bare(receiver, tag: str, args, start: float) -> tuple[float, float]:
    host, port = "127.0.0.1", receiver.port
    conn = http.client.HTTPConnection(host, port, timeout=60)
    t0, c0 = time.perf_counter(), time.process_time()
    for req in bare_requests(tag, args.hosts, args.series, args.points, start):
        body = bytes(cramjam.snappy.compress_raw(req.SerializeToString()))
        conn.request("POST", receiver.write_path, body, wire.HEADERS)
        resp = conn.getresponse()
        resp.read()
        assert 200 <= resp.status < 300, resp.status
    conn.close()
    return time.perf_counter() - t0, time.process_time() - c0


def run_sink(receiver, tag: str, args, start: float, tmp: Path) -> tuple[float, float]:
    raw = messages(tag, args.hosts, args.series, args.points, start)
    total = args.hosts * args.series * args.points
    settings = RemoteWriteSettings(url=receiver.write_url, queue_dir=str(tmp / tag),
                                   max_memory=1 << 30, batch_wait=0.05)
    sink = RemoteWriteSink(settings, "bench")
    sink.start()
    t0, c0 = time.perf_counter(), time.process_time()
    for at in range(0, len(raw), LOOP_BATCH):
        sink.write([protocol.decode_relayed(f) for f in raw[at:at + LOOP_BATCH]])
    wait(lambda: sink.sender.snapshot()["samples_sent"] >= total, 600, "the sink's sends",
         0.005)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    counts = sink.counts
    sink.close()
    assert counts["samples_sent"] == total and counts["samples_dropped_4xx"] == 0, counts
    return took, cpu


def held(receiver, tag: str, args) -> int:
    got = receiver.query(f'count({{__name__=~"fleetwatch_{tag}_.*"}})')
    return int(float(got[0]["value"][1])) if got else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--series", type=int, default=50)
    ap.add_argument("--points", type=int, default=60)
    ap.add_argument("--results", type=Path, default=None,
                    help="write the figures into this RESULTS.md")
    args = ap.parse_args()
    total = args.hosts * args.series * args.points
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-rw-") as tmp:
        tmp = Path(tmp)
        for kind in ("victoria-metrics", "prometheus"):
            if not available(kind):
                print(f"{kind}: not installed, skipped")
                continue
            receiver = RECEIVERS[kind](tmp).start()
            times: dict[str, list] = {"bare": [], "sink": []}
            try:
                for r in range(args.rounds):
                    # the samples in the last minutes, a new minute range each round
                    start = time.time() - args.points - 1 - (args.rounds - r) * 0.001
                    order = ["bare", "sink"] if r % 2 == 0 else ["sink", "bare"]
                    for variant in order:
                        tag = f"r{r}{variant}"
                        took, cpu = (run_bare(receiver, tag, args, start) if variant == "bare"
                                     else run_sink(receiver, tag, args, start, tmp))
                        wait(lambda: held(receiver, tag, args) == args.hosts * args.series,
                             120, f"{kind} holding every {variant} series", 0.5)
                        times[variant].append((took, cpu))
                        print(f"{kind} round {r + 1} {variant}: {total / took:,.0f} samples/s, "
                              f"{cpu / total * 1000 * 1000:.1f} ms CPU per 1,000 samples",
                              flush=True)
            finally:
                receiver.stop()
            rate = {v: statistics.median(total / t for t, _ in times[v]) for v in times}
            cpu = {v: statistics.median(c / total * 1e6 for _, c in times[v]) for v in times}
            rows.append(f"| {kind} | {rate['bare']:,.0f} | {rate['sink']:,.0f} | "
                        f"**{rate['sink'] / rate['bare']:.2f}** | {cpu['bare']:.1f} | "
                        f"{cpu['sink']:.1f} | {cpu['sink'] / cpu['bare']:.2f} |")
    body = (f"{total:,} samples a variant and round ({args.hosts} hosts x {args.series} "
            f"series x {args.points} points), {args.rounds} rounds, medians; every series "
            f"checked in the receiver after each.\n\n"
            "| receiver | bare writer: samples/s | sink: samples/s | sink / bare | "
            "bare: ms CPU per 1,000 samples | sink: ms CPU per 1,000 | sink / bare CPU |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    print(body)
    if args.results:
        command = (f"python bench/remote_write.py --rounds {args.rounds} --hosts {args.hosts} "
                   f"--series {args.series} --points {args.points} --results {args.results}")
        write_section(args.results, HEADING, command, body, NOTES)
    return 0


NOTES = """Method (bench/remote_write.py): the same samples (names, labels, values, times) go to
the same receiver process in the same rounds, alternating which variant goes first. The
bare writer keeps each series' samples in one TimeSeries (fewer label bytes than the sink,
which sends one TimeSeries a message's sample: a series' samples come in different STATS)
and queues nothing; the sink's figure includes the codec's decode, the naming and labels
(the prometheus sink's), the queue and its sender thread. CPU is this process's (all its
threads), not the receiver's."""


if __name__ == "__main__":
    sys.exit(main())
