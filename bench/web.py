"""The console and the HTTP API at fleet size: each page's and API list's latency against the
bare SQL of the same data in the same run, and polling against following the tail.

Processes on 127.0.0.1: one real router (no agents: the console asks it for PEERS), a
state database filled by bench/webfill.py (HOSTS agents x CHECKS checks, their states,
problems, acknowledgements, downtimes, notifications, alert events and deliveries) as a
SQLite file and/or in a throwaway PostgreSQL cluster (tests/support/pg.py), and a real
``fleetwatch web`` over them with a user (pages: logged in through the login form, its
CSRF token, the session cookie) and an API token (``fleetwatch web token add``).

Each round times ``--requests`` GETs of every URL over one keep-alive connection
(http.client; a host page asks for a random host each time), then as many runs of the
bare SQL that fetches the same rows through SQLAlchemy Core on the same database (the
console's work minus HTTP, sessions, merging with the routers, templates and JSON). A
figure is the median over the rounds of each round's percentile; the ratio is the URL's
over its SQL's at the target's percentile. A URL that answers 404 is "not there" (the
console does not have it yet), one that fails otherwise is reported, and the run goes on.

Polling against server-sent events: open pages polling the overview every 10 s cost the
console one reading of the overview a period (its counts and its list, shared by every page:
its ``read_ms`` as the page says it) plus each page's request (its process's CPU time per
overview request, measured; and the request's p50, as wall time), over 10 s; following the
tail costs the CPU per tail message of receiving and decoding it (bench/webtail.py, measured
at the tail's rate at HOSTS) times that rate, once for any number of pages.

The health page's subscription, which every console runs: its own code (web/health.py) fed
the agents' STATS at HOSTS' rate, its CPU time per STATS (bench/webtail.py).

    python bench/web.py [--hosts 10000] [--checks-per-host 5] [--rounds 3] [--requests 20]
                        [--db sqlite|postgres|both] [--results bench/RESULTS.md]

Targets, at 10,000 hosts and 50,000 checks: every page and API list p95 under 150 ms
(issue 33); API lists p99 under 100 ms as well (issue 19). A URL's verdict says which of
its targets it misses.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))
import webfill  # noqa: E402  (bench/webfill.py)
import webtail  # noqa: E402  (bench/webtail.py)
import websql  # noqa: E402  (bench/websql.py)
from results import percentile, wait, write_section  # noqa: E402  (bench/results.py)
from fleetwatch.store import db  # noqa: E402
from status_scale import router  # noqa: E402  (bench/status_scale.py)

HEADING = "## The console and the API at 10,000 hosts"
PASSWORD = "bench password 19"
#: every page and API list (issue 33); the API lists' as well (issue 19)
PAGE_TARGET, API_TARGET = (95, 0.150), (99, 0.100)
#: (URL, what it is, the bare SQL of its rows: a function of bench/websql.py)
URLS = [
    ("/", "page", "overview"),
    ("/problems", "page", "problems"),
    ("/hosts", "page", "hosts"),
    ("/hosts?q=web01", "page", "hosts_search"),
    ("/hosts?state=DOWN", "page", "hosts_down"),
    ("/hosts/{uuid}", "page", "host"),
    ("/api/v1/hosts", "api", "api_hosts"),
    ("/api/v1/hosts?after={uuid}", "api", "api_hosts_after"),
    ("/api/v1/checks", "api", "api_checks"),
    ("/api/v1/checks?after={uuid}/", "api", "api_checks_after"),
    ("/api/v1/problems", "api", "problems"),
    ("/api/v1/alerts", "api", "alerts"),
    # the problem lists filtered, sorted and grouped in SQL (issue 33), in their short URLs
    ("/problems?state=CRITICAL&sort=-since", "page", "problems_critical"),
    ("/problems?host=web01%2A&q=critical", "page", "problems_search"),
    ("/problems?handled=all&group=host", "page", "problems_grouped"),
    ("/api/v1/problems?handled=no&sort=hostname", "api", "problems_sorted"),
    ("/api/v1/problems?group=parent", "api", "problems_by_parent"),
    # what a bulk change to "all matching" reads: every row of its filter, up to 1,000
    ("/api/v1/problems?state=WARNING&handled=no&limit=1000", "api", "problems_bulk"),
    # every check, OK ones too, and the alerts, filtered and sorted in SQL
    ("/checks", "page", "checks_worst"),
    ("/checks?state=OK&check=check_d%2A&group=host", "page", "checks_grouped"),
    ("/api/v1/checks?sort=-since&q=timeout", "api", "checks_search"),
    ("/alerts?severity=critical&sort=severity", "page", "alerts_filtered"),
    ("/api/v1/alerts?host=web01%2A&sort=hostname", "api", "alerts_sorted"),
    # the hosts searched by a glob and filtered by their handling
    ("/hosts?q=web0%2A&handled=no&sort=state", "page", "hosts_search"),
]
POLL_INTERVAL = 10.0
PAGES_OPEN = (1, 10, 50)


class Client:
    """GETs over one keep-alive connection, with the session cookie or the API token."""

    def __init__(self, base: str, timeout: float = 120.0):
        parts = urllib.parse.urlsplit(base)
        self.host, self.port, self.timeout = parts.hostname, parts.port, timeout
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        self.cookie = ""
        self.token = ""

    def request(self, method: str, path: str, body: str | None = None,
                api: bool = False) -> tuple[int, bytes, float]:
        """(status, body, seconds from sending to the last byte read)."""
        headers = {"Connection": "keep-alive"}
        if api:
            headers["Authorization"] = f"Bearer {self.token}"
        elif self.cookie:
            headers["Cookie"] = self.cookie
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        for attempt in (1, 2):                 # once more on a connection the server closed
            try:
                started = time.perf_counter()
                self.conn.request(method, path, body, headers)
                res = self.conn.getresponse()
                data = res.read()
                took = time.perf_counter() - started
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    TimeoutError) as e:
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
                if attempt == 2 or isinstance(e, TimeoutError):
                    raise
        cookie = res.getheader("set-cookie")
        if cookie and not api:
            self.cookie = cookie.split(";", 1)[0]
        return res.status, data, took

    def login(self, user: str, password: str) -> None:
        status, page, _ = self.request("GET", "/login")
        found = re.search(rb'name="csrf" value="([^"]+)"', page)
        if status != 200 or not found:
            raise SystemExit(f"GET /login answered {status} without a CSRF token")
        form = urllib.parse.urlencode({"user": user, "password": password,
                                       "csrf": found.group(1).decode()})
        status, body, _ = self.request("POST", "/login", form)
        if status != 303:
            raise SystemExit(f"logging in answered {status}: {body[:200]!r}")

    def close(self) -> None:
        self.conn.close()


def fleetwatch(*args: str, stdin: str | None = None) -> str:
    res = subprocess.run([sys.executable, "-m", "fleetwatch", *args], capture_output=True,
                         text=True, input=stdin, timeout=120, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"fleetwatch {' '.join(args)} exited {res.returncode}: "
                         f"{res.stderr.strip()}")
    return res.stdout


def console(root: Path, name: str, url: str, control: str) -> tuple[subprocess.Popen, str, str]:
    """A ``fleetwatch web`` on a free port over ``url`` and the router ``control``, with
    the user ``bench``: (its process, its base URL, an API token)."""
    config = root / f"{name}-fleetwatch.yaml"
    config.write_text(yaml.safe_dump({
        "routers": [control], "state_url": url, "timeout": 5.0,
        "web": {"listen": "127.0.0.1:0", "secret_file": str(root / f"{name}-secret"),
                "login_attempts": 1000}}))
    fleetwatch("web", "user", "add", "bench", "--role", "viewer", "--password-stdin",
               "--config", str(config), stdin=PASSWORD + "\n")
    token = fleetwatch("web", "token", "add", "bench", "--label", "bench",
                       "--config", str(config)).strip()
    log_path = root / f"{name}-web.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", "web", "--config",
                                 str(config)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    found = []

    def address():
        found[:] = re.findall(r"at (http://127\.0\.0\.1:\d+)/", log_path.read_text())
        return found or proc.poll() is not None
    wait(address, 60, "the console's address")
    if proc.poll() is not None:
        raise SystemExit(f"fleetwatch web exited {proc.returncode}: see {log_path}")
    return proc, found[0], token


def stop(proc: subprocess.Popen) -> None:
    """Stop a process this started: SIGTERM, then SIGKILL after 20 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def timed_round(client: Client, engine, uuids: list[str], requests: int, rnd: random.Random,
                skip: dict, web: psutil.Process) -> dict:
    """One round: every URL not in ``skip`` (path -> why), then its bare SQL; per URL the
    seconds of each request, of each SQL run, the body's size and the console's CPU."""
    out = {}
    for path, kind, sql in URLS:
        if path in skip:
            continue
        http_times, sql_times, size = [], [], 0
        cpu0 = sum(web.cpu_times()[:2])
        for _ in range(requests):
            uuid = rnd.choice(uuids)
            try:
                status, body, took = client.request("GET", path.format(uuid=uuid),
                                                    api=kind == "api")
            except TimeoutError:
                skip[path] = f"no answer within {client.timeout:g} s"
                break
            if status != 200:
                skip[path] = "not there (404)" if status == 404 else f"answered {status}"
                break
            http_times.append(took)
            size = len(body)
        cpu = (sum(web.cpu_times()[:2]) - cpu0) / max(1, len(http_times))
        if path in skip:
            continue
        fetch = getattr(websql, sql)
        for _ in range(requests):
            uuid = rnd.choice(uuids)
            started = time.perf_counter()
            with engine.connect() as conn:
                fetch(conn, uuid=uuid, now=time.time())
            sql_times.append(time.perf_counter() - started)
        out[path] = {"http": http_times, "sql": sql_times, "size": size, "cpu": cpu}
    return out


def run_database(kind: str, url: str, root: Path, control: str, args) -> dict:
    """Fill the database at ``url``, start a console over it, time the rounds; per URL the
    per-round figures, or why it has none."""
    started = time.perf_counter()
    uuids = webfill.fill(url, args.hosts, args.checks_per_host)
    print(f"{kind}: filled in {time.perf_counter() - started:.1f} s", flush=True)
    proc, base, token = console(root, kind, url, control)
    client, engine = Client(base), db.engine(url, writer=False)
    client.token = token
    skip: dict[str, str] = {}
    rounds: dict[str, list[dict]] = {}
    readings: list[float] = []
    try:
        client.login("bench", PASSWORD)
        web = psutil.Process(proc.pid)
        rnd = random.Random(19)
        for r in range(args.rounds):
            for path, figures in timed_round(client, engine, uuids, args.requests, rnd, skip,
                                             web).items():
                rounds.setdefault(path, []).append(figures)
            print(f"{kind} round {r + 1}: " + ", ".join(
                f"{p} {percentile(rounds[p][-1]['http'], 50) * 1000:.0f} ms"
                for p in rounds if len(rounds[p]) == r + 1), flush=True)
            reading = shared_reading(client)
            if reading is not None:
                readings.append(reading)
    finally:
        client.close()
        engine.dispose()
        stop(proc)
    return {"rounds": rounds, "skip": skip, "reading": readings}


def shared_reading(client: Client) -> float | None:
    """Seconds the console's last reading of the overview took (its counts and its list,
    read once a period for every open page: web/console.py), as the overview says it ("in
    N ms"); None from a console without it."""
    status, body, _ = client.request("GET", "/")
    found = re.search(rb'id="read-at">[^<]*\(in (\d+) ms\)', body)
    return int(found.group(1)) / 1000 if status == 200 and found else None


def summarise(found: dict) -> dict:
    """Per URL: medians over the rounds of p50/p95/p99 (HTTP and SQL), size, CPU."""
    out = {}
    for path, rounds in found["rounds"].items():
        if not rounds:
            continue
        fig = {}
        for side in ("http", "sql"):
            for p in (50, 95, 99):
                fig[f"{side}{p}"] = statistics.median(percentile(r[side], p) for r in rounds)
        fig["size"] = rounds[-1]["size"]
        fig["cpu"] = statistics.median(r["cpu"] for r in rounds)
        out[path] = fig
    return out


def targets(what: str) -> list[tuple[int, float]]:
    """The (percentile, seconds) a URL of kind ``what`` must answer under."""
    return [PAGE_TARGET] if what == "page" else [PAGE_TARGET, API_TARGET]


def missed(what: str, f: dict) -> list[str]:
    """The targets the figures ``f`` miss, as said in the verdict (``p99``)."""
    return [f"p{p}" for p, limit in targets(what) if f[f"http{p}"] >= limit]


def table(kind: str, figures: dict, skip: dict) -> list[str]:
    measured = [(path, what) for path, what, _ in URLS if path in figures]
    met = sum(1 for path, what in measured if not missed(what, figures[path]))
    fast = sum(1 for path, _ in measured if figures[path]["http95"] < PAGE_TARGET[1])
    rows = [f"**{kind}**: {met} of the {len(figures)} URLs measured meet their targets "
            f"({len(URLS) - len(figures)} not measured); {fast} of them answer at p95 under "
            f"{PAGE_TARGET[1] * 1000:.0f} ms (issue 33's target for every page and API list).",
            "", "| URL | target | p50 / p95 / p99 ms | bare SQL p50 / p95 / p99 ms | ratio at the "
            "last target's percentile | console CPU ms a request | KB | verdict |",
            "|---|---|---|---|---|---|---|---|"]
    for path, what, _ in URLS:
        target = ", ".join(f"p{p} < {limit * 1000:.0f} ms" for p, limit in targets(what))
        if path not in figures:
            rows.append(f"| `{path}` | {target} | {skip.get(path, 'not measured')} | | | | | |")
            continue
        f = figures[path]
        p = targets(what)[-1][0]
        value, base = f[f"http{p}"], f[f"sql{p}"]
        ratio = value / base if base > 0 else float("inf")
        misses = missed(what, f)
        verdict = f"FAIL ({', '.join(misses)})" if misses else "PASS"
        if path in skip:                  # measured, then failed: the rounds after it lack it
            verdict = f"{verdict} (then {skip[path]})"
        rows.append(
            f"| `{path}` | {target} | {f['http50'] * 1000:.1f} / {f['http95'] * 1000:.1f} / "
            f"{f['http99'] * 1000:.1f} | {f['sql50'] * 1000:.2f} / {f['sql95'] * 1000:.2f} / "
            f"{f['sql99'] * 1000:.2f} | {ratio:.1f} | {f['cpu'] * 1000:.1f} | "
            f"{f['size'] / 1024:.0f} | {verdict} |")
    return rows


def polling_rows(overviews: dict, tail: dict, readings: dict) -> list[str]:
    """What polling the overview costs against following the tail, for a few open pages;
    ``overviews``: the overview's figures per database; ``readings``: the overview's
    reading's seconds per database (one a period, shared by every open page)."""
    rate = tail["heartbeats"] + tail["results"]
    tail_cost = tail["per_message"] * rate
    rows = [f"Tail at the fleet's size: {tail['heartbeats']:.0f} HEARTBEATs/s (every agent "
            f"each 10 s) + {tail['results']:.0f} RESULTs/s (each check once a minute) = "
            f"{rate:.0f} messages/s; measured at {tail['rate']:.0f}/s ({tail['received']} of "
            f"{tail['sent']} received): {tail['per_message'] * 1e6:.1f} us of CPU a message to "
            f"receive and decode, so {tail_cost * 100:.2f} % of a core to follow the tail, "
            f"whatever the pages open.", "",
            "| database | open pages | polling `/` every 10 s: by its p50 (wall) | by the "
            "console's CPU per request | following the tail | cheaper |",
            "|---|---|---|---|---|---|"]
    for kind, overview in overviews.items():
        if overview is None:
            rows.append(f"| {kind} | | the overview was not measured | | | |")
            continue
        reading = readings.get(kind) or 0.0     # once a period, whatever the pages open
        for pages in PAGES_OPEN:
            wall = (reading + pages * overview["http50"]) / POLL_INTERVAL
            cpu = (reading + pages * overview["cpu"]) / POLL_INTERVAL
            cheaper = "tail (SSE)" if tail_cost < min(wall, cpu) else "polling"
            rows.append(f"| {kind} | {pages} | {wall * 100:.2f} % of a core | {cpu * 100:.2f} % "
                        f"| {tail_cost * 100:.2f} % | {cheaper} |")
    rows.append("")
    for kind, overview in overviews.items():
        reading = readings.get(kind) or 0.0
        if reading:
            rows.append(f"- {kind}: the overview's reading (its counts and its list: once "
                        f"every {POLL_INTERVAL:g} s while pages are open, whatever their "
                        f"number) took {reading * 1000:.0f} ms "
                        f"(median over the rounds, as the console says it: read_ms).")
        left = tail_cost * POLL_INTERVAL - reading
        if overview and overview["cpu"] > 0 and overview["http50"] > 0:
            if left <= 0:
                rows.append(f"- {kind}: the reading alone costs more than following the tail.")
                continue
            rows.append(f"- {kind}: following the tail costs as much as the reading and "
                        f"{left / overview['cpu']:.0f} open pages polling (by the console's "
                        f"CPU; {left / overview['http50']:.0f} by the p50); below that polling "
                        f"is cheaper.")
    return rows


def health_rows(health: dict) -> list[str]:
    """What the health page's subscription costs (web/health.py: every agent's STATS)."""
    cost = health["per_message"] * health["wanted"]
    return [f"The health page's subscription (web/health.py, in every console whatever the "
            f"pages open): the agents' STATS, {health['wanted']:.0f} a second at this size "
            f"(every agent each 10 s), one agent in a hundred with drops; measured at "
            f"{health['rate']:.0f}/s ({health['received']} of {health['sent']} received; "
            f"agents with drops kept: {health['kept']}): {health['per_message'] * 1e6:.1f} us "
            f"of CPU a STATS, so {cost * 100:.2f} % of a core."]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--checks-per-host", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20, help="of each URL in a round")
    ap.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--tail-seconds", type=float, default=5.0,
                    help="how long the tail is fed at its rate")
    ap.add_argument("--results", type=Path, help="write the figures into this RESULTS.md")
    args = ap.parse_args()
    if args.hosts < 1 or args.checks_per_host < 1 or args.rounds < 1 or args.requests < 1:
        ap.error("--hosts, --checks-per-host, --rounds and --requests: at least 1")
    # a SIGTERM (a test's timeout) stops what this started, the PostgreSQL cluster too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    kinds = ("sqlite", "postgres") if args.db == "both" else (args.db,)
    revision = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip() or "unknown"
    body, found = [], {}
    with tempfile.TemporaryDirectory(prefix="fw-web-bench-") as tmp:
        root = Path(tmp)
        proc, endpoints = router(root, "router")
        cluster = None
        try:
            for kind in kinds:
                if kind == "sqlite":
                    url = f"sqlite:///{root / 'state.db'}"
                else:
                    cluster = postgres()
                    url = cluster.create_database("fleetwatch")
                found[kind] = run_database(kind, url, root, endpoints["control"], args)
            tail = webtail.measure(endpoints["agents"], endpoints["tail"], args.hosts,
                                   args.checks_per_host, args.tail_seconds)
            health = webtail.measure_health(endpoints["agents"], endpoints["tail"], args.hosts,
                                            args.tail_seconds)
        finally:
            stop(proc)
            if cluster is not None:
                cluster.stop()
    overviews, readings = {}, {}
    for kind in kinds:
        figures = summarise(found[kind])
        overviews[kind] = figures.get("/")
        if found[kind]["reading"]:
            readings[kind] = statistics.median(found[kind]["reading"])
        body += table(kind, figures, found[kind]["skip"]) + [""]
    body += polling_rows(overviews, tail, readings) + [""] + health_rows(health)
    text = "\n".join(body)
    print(text)
    if args.results:
        command = (f"python bench/web.py --hosts {args.hosts} --checks-per-host "
                   f"{args.checks_per_host} --rounds {args.rounds} --requests {args.requests} "
                   f"--db {args.db} --results {args.results}")
        notes = NOTES.format(hosts=args.hosts, checks=args.hosts * args.checks_per_host,
                             rounds=args.rounds, requests=args.requests,
                             load=os.getloadavg()[0], revision=revision)
        write_section(args.results, HEADING, command, text, notes)
    return 0


def postgres():
    from support.pg import PgCluster, find_bindir
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("--db postgres: no PostgreSQL binaries in /usr/lib/postgresql/*/bin "
                         "(make install installs them)")
    cluster = PgCluster(bindir)
    try:
        return cluster.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        cluster.stop()                                  # (removes its directory)
        raise SystemExit(f"--db postgres: the throwaway cluster did not start: {e}") from None


NOTES = """Method (bench/web.py): {hosts:,} hosts and {checks:,} checks (bench/webfill.py: 2 % of
the checks not OK, 0.5 % of the hosts DOWN, a third of the problems acknowledged, downtimes,
notifications, alert events delivered to two channels; PostgreSQL analyzed after, as its
autovacuum does within a minute in a live fleet); one router without agents; a real
`fleetwatch web`; {rounds} rounds of {requests} requests of each URL over one keep-alive
connection (`{{uuid}}`: a random host's; `after=`: the API's cursor, as a client paging
through), each followed by as many runs of the bare SQL of the same rows (bench/websql.py,
SQLAlchemy Core on the same database, rows fetched as mappings); figures are medians of the
rounds' percentiles. The overview answers from the reading the console makes once a
`web.refresh` period ahead of it (its counts and its list; its time is `read_ms` below), so
its bare SQL, the reading's, costs more than its answer. A list (the problems, checks, hosts
and alerts pages and their API lists, with their filters; not the API's cursor lists of
hosts and checks) is read in SQL when first asked and served again for the period
(web/console.py): of a URL's requests in a round the first is that reading, the others are
served, so its p99 is the reading's cost and its p50 the served one's. "console CPU" is the
web process's user + system time over a URL's requests, divided by them. Polling against the
tail: a page polling the overview every 10 s against the console receiving and decoding the
routers' tail (bench/webtail.py: a consumer process on a real router's tail, HEARTBEATs and
RESULTs sent at the tail's rate at this fleet size, its CPU time per message), pushing to
the pages not counted. Code: {revision} (git
describe when the run started; "dirty": with uncommitted changes). Load average {load:.1f} at
the end; the machine is shared, so the lead's figures on a quiet machine are the ones to
quote."""


if __name__ == "__main__":
    sys.exit(main())
