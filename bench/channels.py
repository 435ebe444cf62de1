"""Alert delivery through the outbox: sends per second to local receivers with 1, 4 and 16
channels, and the latency from an alert committed to the first byte of its POST.

Each round, on a SQLite state database of its own and a local HTTP receiver on 127.0.0.1
(one path per channel), a real deliverer thread (sinks/alerting/delivery/deliverer.py, the
alerting sink's, with its defaults: batch 20, receipts, channel health):

- **throughput**: ``--sends`` alerts' worth of outbox rows (alerts x channels) recorded in
  one transaction, as a burst of HARD changes leaves them, then delivered: rows sent per
  second, from the deliverer's wake-up to the last row marked sent;
- **latency**: one alert at a time (``--paced`` of them, 20 a second) to one channel, from
  its commit (a state change and its alert commit together) to the receiver's first byte
  of its POST, p50 and p99.

Baseline, same round: the same JSON POSTed by a bare ``urllib`` loop to the same receiver,
with no outbox (what HTTP on loopback costs): its posts per second, and from the call to
the first byte. The ratios say what the outbox, its claims, receipts and health cost.

    .venv/bin/python bench/channels.py [--rounds 3] [--sends 1200] [--paced 200]
                                      [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(Path(__file__).resolve().parent))   # last: bench/web.py is not web/
from results import percentile, wait, write_section  # noqa: E402  (bench/results.py)

HEADING = "## Alert delivery through the outbox (channels)"
CHANNELS = (1, 4, 16)
U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"


class Receiver:
    """An HTTP server answering 202 as PagerDuty does; when each POST's first byte came
    (the handler's start), by its JSON's ``dedup_key``, and how many came."""

    def __init__(self):
        self.first: dict[str, float] = {}
        self.count = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                came = time.perf_counter()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.count += 1
                    receiver.first.setdefault(body.get("dedup_key"), came)
                data = b'{"status":"success","message":"Event processed"}'
                self.send_response(202)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def event(n: int) -> dict:
    return {"key": f"{U1}/check/check_{n}", "kind": "check", "action": "trigger",
            "severity": "critical", "uuid": U1, "hostname": "web-1", "check": f"check_{n}",
            "status": 2, "summary": f"CHECK {n} CRITICAL", "text": "x" * 80,
            "created": time.time()}


def setup(root: Path, receiver: Receiver, channels: int):
    """(an engine on a new state database, the delivery config of ``channels`` webhooks)."""
    from fleetwatch.config import build
    from fleetwatch.store import db
    from sinks.alerting.delivery.config import DeliveryConfig
    engine = db.engine(f"sqlite:///{root / 'state.db'}")
    db.create(engine, "alerting")
    names = [f"ch{i}" for i in range(channels)]
    config = build(DeliveryConfig, {
        "channels": {n: {"type": "webhook", "url": f"{receiver.url}/{n}", "timeout": 5}
                     for n in names},
        "rules": [{"channels": names}], "poll_interval": 0.05})
    return engine, config


def throughput(root: Path, channels: int, sends: int) -> float:
    """Rows sent per second by one deliverer, ``sends`` rows over ``channels`` channels."""
    from sinks.alerting.delivery import store as outbox
    from sinks.alerting.delivery.deliverer import Deliverer
    receiver = Receiver()
    engine, config = setup(root, receiver, channels)
    try:
        with engine.begin() as conn:
            for n in range(sends // channels):
                outbox.enqueue(conn, event(n), config)
        total = (sends // channels) * channels
        d = Deliverer(engine, config, name="bench")
        began = time.perf_counter()
        d.start()
        wait(lambda: _pending(engine) == 0, 300,
             f"{total} rows sent")
        elapsed = time.perf_counter() - began
        d.stop()
        return total / elapsed
    finally:
        receiver.stop()
        engine.dispose()


def _pending(engine) -> int:
    from sinks.alerting.delivery import store as outbox
    with engine.connect() as conn:
        return outbox.pending_count(conn)


def latency(root: Path, paced: int) -> list[float]:
    """Seconds from each alert's commit to the first byte of its POST, one channel, 20 a
    second."""
    from sinks.alerting.delivery import store as outbox
    from sinks.alerting.delivery.deliverer import Deliverer
    receiver = Receiver()
    engine, config = setup(root, receiver, 1)
    d = Deliverer(engine, config, name="bench")
    d.start()
    out = []
    try:
        for n in range(paced):
            ev = event(n)
            with engine.begin() as conn:
                outbox.enqueue(conn, ev, config)
            committed = time.perf_counter()
            d.wake()                     # as the alerting sink does after its commit
            wait(lambda: ev["key"] in receiver.first, 30, "the POST")
            out.append(receiver.first[ev["key"]] - committed)
            time.sleep(max(0.0, 0.05 - (time.perf_counter() - committed)))   # (the pace)
    finally:
        d.stop()
        receiver.stop()
        engine.dispose()
    return out


def bare(sends: int, paced: int) -> tuple[float, list[float]]:
    """The baseline: posts per second of a bare urllib loop, and seconds from each call to
    its first byte."""
    from sinks.alerting.delivery.channels import webhook_payload
    from sinks.alerting.delivery.config import parse_channel
    receiver = Receiver()
    try:
        channel = parse_channel("bare", {"type": "webhook", "url": receiver.url + "/bare"})

        def post(n: int) -> float:
            data = json.dumps(webhook_payload(event(n), channel)).encode()
            req = urllib.request.Request(channel.url, data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
            called = time.perf_counter()
            with urllib.request.urlopen(req, timeout=5) as resp:
                resp.read()
            return called
        began = time.perf_counter()
        for n in range(sends):
            post(n)
        rate = sends / (time.perf_counter() - began)
        waits = []
        for n in range(sends, sends + paced):
            called = post(n)
            waits.append(receiver.first[f"{U1}/check/check_{n}"] - called)
        return rate, waits
    finally:
        receiver.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sends", type=int, default=1200)
    ap.add_argument("--paced", type=int, default=200)
    ap.add_argument("--results", type=Path)
    args = ap.parse_args()
    rates = {n: [] for n in CHANNELS}
    bare_rates, lat, bare_lat = [], [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="fw-channels-") as tmp:
            for n in CHANNELS:
                root = Path(tmp) / f"c{n}"
                root.mkdir()
                rates[n].append(throughput(root, n, args.sends))
            root = Path(tmp) / "latency"
            root.mkdir()
            waits = latency(root, args.paced)
        rate, waits_bare = bare(args.sends, args.paced)
        bare_rates.append(rate)
        lat.append((percentile(waits, 50), percentile(waits, 99)))
        bare_lat.append((percentile(waits_bare, 50), percentile(waits_bare, 99)))
        print(f"round {r + 1}: " + ", ".join(f"{n} channel{'s' if n > 1 else ''} "
                                             f"{rates[n][-1]:.0f}/s" for n in CHANNELS)
              + f" | bare POST {rate:.0f}/s | committed->first byte p50 "
                f"{lat[-1][0] * 1000:.1f} ms p99 {lat[-1][1] * 1000:.1f} ms (bare "
                f"{bare_lat[-1][0] * 1000:.2f} / {bare_lat[-1][1] * 1000:.2f} ms)", flush=True)
    med = {n: statistics.median(v) for n, v in rates.items()}
    base = statistics.median(bare_rates)
    p50, p99 = (statistics.median(x[i] for x in lat) * 1000 for i in (0, 1))
    b50, b99 = (statistics.median(x[i] for x in bare_lat) * 1000 for i in (0, 1))
    rows = ["| channels | rows sent per second | ratio to a bare POST loop |",
            "|---|---|---|"]
    rows += [f"| {n} | {med[n]:.0f} | {med[n] / base:.2f} |" for n in CHANNELS]
    rows += [f"| (bare urllib POST loop) | {base:.0f} | 1.00 |", "",
             "| latency, one channel, 20 alerts a second | p50 | p99 |", "|---|---|---|",
             f"| an alert's commit -> its POST's first byte | {p50:.1f} ms | {p99:.1f} ms |",
             f"| (a bare POST: the call -> its first byte) | {b50:.2f} ms | {b99:.2f} ms |"]
    body = "\n".join(rows)
    print(body)
    if args.results:
        write_section(args.results, HEADING,
                      f".venv/bin/python bench/channels.py --rounds {args.rounds} --sends "
                      f"{args.sends} --paced {args.paced} --results {args.results}", body,
                      f"Medians of {args.rounds} rounds. The deliverer claims 20 rows at a "
                      f"time and sends each channel's on a lane of its own (a thread), each "
                      f"send then its own transaction for its outcome, its receipt and the "
                      f"channel's health: those transactions take turns on SQLite, so the "
                      f"rows' rate is about the same whatever the number of channels (the "
                      f"lanes are there so that a slow channel delays no other, not for "
                      f"speed). The latency is the deliverer's wake-up, its claim, the "
                      f"hand-over to the lane and the POST.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
