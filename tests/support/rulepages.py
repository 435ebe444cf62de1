"""Rules on series as the console's tests see them: :func:`fill` makes a state database where
real alerting sinks judged two rules (one CRITICAL on web-1, OK on a host with a hostile
name, PENDING on a silent host; one on no host); :class:`Graphite` is graphite-web's
``/render`` for their graphs; :data:`FAKE` is a ``fleetwatch`` command that records what a
backtest was given and prints :func:`answer` (what ``rules backtest --json`` prints) after
waiting for a file (``-``: at once), or fails (``fail``) as a backtest without Java does."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from fleetwatch.display import iso
from fleetwatch.store import db
from support import alertsink
from support.alertsink import T0, msg
from support.clock import Clock

HOSTILE = '<img src=x onerror="window.__pwned=1">\x1b[31m'
GLOB = "<script>alert(1)</script>*"
WEB, ODD, SILENT = "a1" * 16, "c3" * 16, "d4" * 16
RULES = [
    {"name": "disk_full", "expr": "avg(disk.root.used_percent, 30s)", "warning": "> 80",
     "critical": "> 90", "for": "20s", "hosts": ["web*", "<img*", GLOB]},
    {"name": "disk_full_soon", "expr": "timeleft(disk.root.used_percent, 1h, 100)",
     "critical": "< 4h", "hosts": "nothing-matches-*"},
]


def fill(url: str, now: float = T0) -> float:
    """Real alerting sinks judge the rules for 60 s from ``now`` over the database at
    ``url``: web-1's disk at 95 % (CRITICAL), the hostile host's at 50 % (OK, its output
    made hostile after), web-2 registered and silent (no result: PENDING). The clock's
    time at the end."""
    clock = Clock(now)
    alertsink.hello(url, {WEB: "web-1", ODD: HOSTILE, SILENT: "web-2"}, clock=clock)
    sink = alertsink.sink(url, clock, rules=RULES, rule_interval=5, rule_refresh=60,
                          flap_detection=False, host_timeout=600)
    try:
        for _ in range(60):
            clock.advance(1)
            for uuid, disk in ((WEB, 95.0), (ODD, 50.0)):
                sink.observe(msg("STATS", uuid, metrics={"disk.root.used_percent": disk}))
            sink.write([msg("HEARTBEAT", WEB, interval=1.0),
                        msg("HEARTBEAT", ODD, interval=1.0)])
            sink.tick()
    finally:
        sink.close()
    eng = db.engine(url)
    with eng.begin() as conn:          # a hostile output (a rule's would name its series)
        conn.exec_driver_sql("UPDATE checks SET output = ? WHERE uuid = ?",
                             (HOSTILE + "\nsecond line", ODD))
    eng.dispose()
    return clock.now


class Graphite(ThreadingHTTPServer):
    """graphite-web's /render answering each target asked with a point a minute (80 then
    95), recording the targets asked."""

    def __init__(self):
        self.asked: list[list[str]] = []
        server = self

        class Render(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                form = parse_qs(body)
                server.asked.append(form.get("target", []))
                start, end = int(form["from"][0]), int(form["until"][0])
                answer = [{"target": t, "datapoints": [
                    [80.0 if ts < (start + end) / 2 else 95.0, ts]
                    for ts in range(start - start % 60 + 60, end, 60)]}
                    for t in form.get("target", [])]
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass
        super().__init__(("127.0.0.1", 0), Render)

    def start(self) -> "Graphite":
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


FAKE = r'''
import json, os, sys, time
release, record, doc = sys.argv[1:4]
args = sys.argv[4:]
opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
with open(record, "w") as f:
    json.dump({"args": args, "policy": open(opt["--rules"]).read(),
               "operator": open(opt["--config"]).read()}, f)
print("fleetwatch rules backtest: reading the lake <b>from</b> 7 days", file=sys.stderr,
      flush=True)
deadline = time.monotonic() + 30
while release != "-" and not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.02)
print("fleetwatch rules backtest: replayed 100%", file=sys.stderr, flush=True)
if doc == "fail":
    print("fleetwatch rules backtest: no Java: install a JRE", file=sys.stderr)
    sys.exit(69)
print(open(doc).read())
'''


def answer(now: float) -> dict:
    """What ``rules backtest --json`` prints: the draft pages web-1 twice (one added, one
    matching the real page), the real rule paged the hostile host once (avoided), and
    another check paged (not the draft's)."""
    def page(uuid, hostname, start, end, subject="rule:disk_full", severity="critical"):
        return {"key": f"{uuid}/check/{subject}", "kind": "check", "subject": subject,
                "uuid": uuid, "hostname": hostname, "check": subject, "severity": severity,
                "start": iso(start), "end": iso(end),
                "duration": None if end is None else end - start, "changes": 0}
    since, until = now - 7 * 86400, now
    first = page(WEB, "web-1", now - 3 * 86400, now - 3 * 86400 + 1800)
    second = page(WEB, "web-1", now - 86400, None)
    real = page(WEB, "web-1", now - 3 * 86400 + 60, now - 3 * 86400 + 1500)
    avoided = page(ODD, HOSTILE, now - 2 * 86400, now - 2 * 86400 + 600, severity="warning")
    other = page(WEB, "web-1", now - 3600, now - 60, subject="load")
    return {"since": iso(since), "until": iso(until), "warmup": 3600, "tick": 5,
            "summary": [], "pages": [first, second, other], "real": [real, avoided],
            "added": [{**second, "then": None}],
            "avoided": [{**avoided, "by": "the rule's levels or `for`"}],
            "counts": {"messages": 10}, "seconds": {"total": 1.0}}
