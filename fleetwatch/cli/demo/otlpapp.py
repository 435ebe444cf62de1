"""The demo's application instrumented with OpenTelemetry: ``python -m
fleetwatch.cli.demo.otlpapp URL`` exports its metrics every 5 s over OTLP/HTTP to the demo
agent's intake at ``URL`` (docs/operating/otlp.md), as a shop's service would to its own
machine's agent.

Every 0.5 s, until SIGTERM, it counts orders (``shop.orders``, a counter by ``kind``),
records a request's duration (``shop.request.duration``, a histogram with sub-second
bounds), moves a queue's depth (``shop.queue.depth``, an up-down counter); its
``shop.temperature`` is an observable gauge. Its resource says ``host.name:
not-this-host.example``: the series are the demo host's all the same (the agent's key
decides, SPEC 4.4.1). Needs ``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``
(the test extra, which ``make demo`` installs).
"""

from __future__ import annotations

import logging
import random
import signal
import sys
import threading

#: what the application calls itself, and the host it claims (a label only)
SERVICE, CLAIMED_HOST = "demo-shop", "not-this-host.example"
#: milliseconds between two exports, and seconds between two recordings
EXPORT_EVERY_MS, RECORD_EVERY = 5000, 0.5
#: seconds one export may take (the SDK retries within it); at a stop, milliseconds the
#: last export may take: the agent stops beside it, and the SDK's shutdown would otherwise
#: retry a refused connection for as long as the exporter's timeout allows (with the
#: default 10 s timeout, a shutdown was seen to block 13.8 s)
EXPORT_TIMEOUT, STOP_MS = 5, 1500
#: the request duration's bucket bounds (seconds): the SDK's default ones start at 0, 5, 10
BOUNDS = (0.01, 0.05, 0.1, 0.5, 1.0)


def provider(url: str, every_ms: int = EXPORT_EVERY_MS):
    """The MeterProvider exporting to the OTLP/HTTP intake at ``url`` (no path) every
    ``every_ms`` milliseconds."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
    from opentelemetry.sdk.resources import Resource

    # the endpoint argument is used as it is: it must end in /v1/metrics
    exporter = OTLPMetricExporter(endpoint=url.rstrip("/") + "/v1/metrics",
                                  timeout=EXPORT_TIMEOUT)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=every_ms)
    view = View(instrument_name="shop.request.duration",
                aggregation=ExplicitBucketHistogramAggregation(list(BOUNDS)))
    return MeterProvider(resource=Resource.create({"service.name": SERVICE,
                                                   "host.name": CLAIMED_HOST}),
                         metric_readers=[reader], views=[view])


def run(url: str, stopping: threading.Event, rng: random.Random | None = None,
        every_ms: int = EXPORT_EVERY_MS) -> None:
    """Record until ``stopping`` is set, then export once more and shut down (bounded)."""
    from opentelemetry.metrics import Observation
    rng = rng or random.Random()
    meters = provider(url, every_ms)
    meter = meters.get_meter("demo-shop")
    orders = meter.create_counter("shop.orders", description="orders taken")
    duration = meter.create_histogram("shop.request.duration", unit="s",
                                      description="time to answer a request")
    queue = meter.create_up_down_counter("shop.queue.depth", description="orders waiting")
    meter.create_observable_gauge(
        "shop.temperature", unit="Cel", description="the shop's server room",
        callbacks=[lambda options: [Observation(round(rng.gauss(21.0, 0.5), 2))]])
    depth = 0
    while not stopping.wait(RECORD_EVERY):        # a pace, not a wait for something
        orders.add(rng.randint(1, 3), {"kind": rng.choice(("web", "web", "phone"))})
        duration.record(rng.lognormvariate(-3.0, 0.8))
        change = rng.choice((-1, 1)) if depth else 1
        queue.add(change)
        depth += change
    meters.shutdown(timeout_millis=STOP_MS)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].startswith("http://"):
        print("usage: python -m fleetwatch.cli.demo.otlpapp http://HOST:PORT", file=sys.stderr)
        return 64
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    print(f"demo-shop exporting OTLP metrics to {args[0]}/v1/metrics every "
          f"{EXPORT_EVERY_MS / 1000:g} s", flush=True)
    run(args[0], stopping)
    print("demo-shop stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
