"""Synthetic landing files: a fleet's traffic without a fleet (tests, benchmarks, trying the
notebooks). Deterministic for a seed; lines exactly as the history sink writes them.

The mix per 100 consecutive events: 60 STATS (``metrics_per_stats`` metrics), 25 HEARTBEAT,
10 RESULT, 4 NOTIFY, 1 HELLO or REGISTER (:data:`MIX`; another with ``mix``); hosts
``host-000``... with uuids ``u000...``; timestamps spread evenly over ``days`` UTC days from
``start``. Event ``n`` is host ``n % hosts``'s, so with as many hosts as the mix has slots
(or a multiple) each host sends one kind only; ``every_kind`` gives each host every kind in
turn (a fleet whose agents all heartbeat, report and run checks: bench/backtest.py).
:func:`router_stats` makes a router's own STATS line, with the ``drops`` it reports
(fleetwatch/lake/drops.py).
"""

from __future__ import annotations

import json
import os
import random

from sinks.history.landing import SUFFIX

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

#: (type, weight) of the event mix
MIX = (("STATS", 60), ("HEARTBEAT", 25), ("RESULT", 10), ("NOTIFY", 4), ("HELLO", 1))
METRICS = ("cpu.percent", "load.1", "load.5", "mem.used_percent", "disk.root.used_percent",
           "net.bytes_recv", "net.bytes_sent", "procs.total", "swap.used_percent",
           "disk.root.free_bytes")
PLUGINS = ("load", "disk", "http", "ntp")
SEVERITIES = ("info", "warning", "error", "critical")


def uuid_of(host: int) -> str:
    return f"u{host:03d}" + "0" * 28


def body(kind: str, n: int, host: int, ts: float, rng: random.Random,
         metrics_per_stats: int, plugins: tuple = PLUGINS, interval: float = 60) -> dict:
    """Message ``n``'s body: a RESULT of one of ``plugins``, a HELLO or REGISTER declaring
    them (every ``interval`` seconds)."""
    common = {"msg_id": f"m{n:015d}", "uuid": uuid_of(host), "ts": ts}
    if kind == "STATS":
        metrics = {METRICS[i % len(METRICS)] + ("" if i < len(METRICS) else f".{i}"):
                   round(rng.random() * 100, 3) for i in range(metrics_per_stats)}
        return {**common, "metrics": metrics, "hostname": f"host-{host:03d}",
                "source": "agent"}
    if kind == "HEARTBEAT":
        return {**common, "interval": 10.0}
    if kind == "RESULT":
        plugin = plugins[n % len(plugins)]
        status = 0 if rng.random() < 0.9 else rng.choice((1, 2, 3))
        return {**common, "command_id": f"s:{n:024x}"[-26:], "plugin": plugin,
                "status": status, "output": f"{plugin.upper()} status {status}",
                "perfdata": [{"label": plugin, "value": round(rng.random(), 3), "uom": "",
                              "warn": "0.8", "crit": "0.9", "min": 0.0, "max": None}],
                "slot": float(int(ts)), "started": ts, "duration": 0.05}
    if kind == "NOTIFY":
        return {**common, "severity": rng.choice(SEVERITIES), "text": f"event {n}",
                "source": "app"}
    declared = [{"name": p, "interval": interval, "timeout": 10} for p in plugins]
    if kind == "HELLO":
        return {**common, "hostname": f"host-{host:03d}", "heartbeat": 10.0,
                "version": "1.0", "plugins": declared}
    return {**common, "name": "agent", "hostname": f"host-{host:03d}", "version": "1.0",
            "plugins": declared}


def lines(events: int, hosts: int = 50, days: int = 1, start: float = 1_795_000_000.0,
          seed: int = 1, metrics_per_stats: int = 8, first: int = 0, routers: int = 2,
          sites: int = 0, mix=MIX, every_kind: bool = False, check_interval: float = 60):
    """Yield ``events`` landing lines (str, newline included), numbered from ``first``.
    ``sites``: the odd hosts are behind site routers ``site-0``... (host 1 behind site-0,
    host 3 behind site-1... modulo ``sites``), their lines carrying the path (SPEC 4.10)
    ``rN,site-M``. ``mix``: (type, weight) pairs, :data:`MIX`'s types; ``every_kind``: host
    ``h``'s ``r``-th event is the mix's ``(h * W // hosts + r)``-th slot (``W`` the weights'
    sum: the hosts start evenly spread over the mix), so each host sends every kind (a
    HELLO slot is a HELLO when ``r`` is odd, else a REGISTER), and runs and declares one
    check (else every host declares the four of :data:`PLUGINS`, and runs some of them);
    ``check_interval``: the declared checks' interval."""
    rng = random.Random(seed * 1_000_003 + first)
    kinds = [k for k, w in mix for _ in range(w)]
    random.Random(0).shuffle(kinds)          # interleaved: any 20 events hold a mix
    step = days * 86400.0 / max(1, events)
    for n in range(first, first + events):
        host = n % hosts
        slot = host * len(kinds) // hosts + n // hosts if every_kind else n
        kind = kinds[slot % len(kinds)]
        if kind == "HELLO" and (n // hosts if every_kind else n) % 2 == 0:
            kind = "REGISTER"
        ts = round(start + (n - first) * step, 3)
        plugins = (PLUGINS[host % len(PLUGINS)],) if every_kind else PLUGINS
        msg = body(kind, n, host, ts, rng, metrics_per_stats, plugins, check_interval)
        router = f"r{n % routers}"
        path = f',"path":"{router},site-{host // 2 % sites}"' if sites and host % 2 else ""
        yield (f'{{"type":"{kind}","uuid":"{msg["uuid"]}","router":"{router}"{path},'
               f'"received":{ts + 0.01:.3f},"msg":{_encode(msg)}}}\n')


def router_stats(router: str, msg_id: str, ts: float, drops=None, received: float | None = None,
                 **fields) -> str:
    """A router's own STATS as a landing line (stamped with its own id, ``source`` router,
    one metric), with ``drops`` (a list of entries, or anything else to try) unless None;
    ``fields`` are added to the body (or replace its fields: ``source=...``)."""
    msg = {"msg_id": msg_id, "uuid": router, "ts": ts, "source": "router",
           "metrics": {"router.agents": 1}, **fields}
    if drops is not None:
        msg["drops"] = drops
    return (f'{{"type":"STATS","uuid":"{router}","router":"{router}",'
            f'"received":{(ts + 0.01 if received is None else received):.3f},'
            f'"msg":{_encode(msg)}}}\n')


def write_files(directory: str, events: int, files: int = 1, name: str = "synth",
                first: int = 0, **kw) -> list[str]:
    """Write ``events`` lines (numbered from ``first``) into ``files`` closed landing files
    in ``directory``; ``kw`` as for :func:`lines`."""
    os.makedirs(directory, exist_ok=True)
    paths, per = [], -(-events // max(1, files))
    for i in range(files):
        count = min(per, events - i * per)
        if count <= 0:
            break
        path = os.path.join(directory, f"20000101T000000-{name}-{i:05d}{SUFFIX}")
        with open(path, "w", encoding="utf-8") as f:
            batch = []
            for line in lines(count, first=first + i * per, **kw):
                batch.append(line)
                if len(batch) >= 10000:
                    f.write("".join(batch))
                    batch.clear()
            f.write("".join(batch))
        paths.append(path)
    return paths
