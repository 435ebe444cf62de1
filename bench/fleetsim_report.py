"""bench/fleetsim.py's figures: latency summaries, the consistency checks, the tables.

Plain functions of the run's document (no processes): :func:`checks` compares what was sent
with what arrived plus what was counted as dropped, per message type and per sink, from the
agents' own counts and the routers', sinks' and scheduler's counters.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

#: the routers' default routing table (SPEC 4.1)
ROUTES = {"HELLO": ("registry", "graphite", "history"), "REGISTER": ("registry", "history"),
          "STATS": ("graphite", "history"), "HEARTBEAT": ("alerting", "history"),
          "NOTIFY": ("alerting", "history"), "RESULT": ("alerting", "graphite", "history")}
AGENT_TYPES = ("HEARTBEAT", "STATS", "NOTIFY", "REGISTER", "RESULT")


def summary(values) -> dict:
    """Count, p50, p99 and max of ``values`` (seconds), in milliseconds."""
    ordered = sorted(v for v in values if v is not None)
    n = len(ordered)
    if not n:
        return {"n": 0}

    def at(p: float) -> float:
        return round(ordered[min(n - 1, int(p * (n - 1) + 0.5))] * 1000, 2)
    return {"n": n, "p50": at(0.50), "p99": at(0.99), "max": round(ordered[-1] * 1000, 2)}


def agent_totals(doc: dict) -> dict[str, Counter]:
    out = {k: Counter() for k in ("sent", "received", "errors", "counts", "unacked")}
    for final in doc["agents"]:
        for key, counter in out.items():
            counter.update(final.get(key, {}))
    return out


def router_sum(doc: dict, prefix: str) -> Counter:
    """``prefix``-ed router counters summed over the routers, by the rest of their name."""
    out: Counter = Counter()
    for metrics in doc["routers"].values():
        for k, v in metrics.items():
            if k.startswith(prefix):
                out[k[len(prefix):]] += v
    return out


def checks(doc: dict, args, restarted: bool) -> list[dict]:
    """Sent = arrived + counted drops, per type and sink. ``strict`` checks must hold after a
    run without a restart; the others are shown (a restarted router's last second of
    counters is lost with it)."""
    agents = agent_totals(doc)
    received = router_sum(doc, "router.received.")
    relayed, dropped = router_sum(doc, "router.relayed."), router_sum(doc, "router.dropped.")
    forwarded = router_sum(doc, "router.forwarded.")
    # refusals of agent traffic (404 answers RUNs on control for agents not attached)
    refused = sum(v for k, v in router_sum(doc, "router.bad.").items() if k != "404") + sum(
        router_sum(doc, "router.rate_limited").values())
    out = []

    def add(name, left, right, strict=True, note=""):
        out.append({"name": name, "left": left, "right": right, "ok": left == right,
                    "strict": strict and not restarted, "note": note})

    for type_ in AGENT_TYPES:
        add(f"{type_}: agents sent = routers received", agents["sent"][type_], received[type_],
            strict=refused == 0, note=f"routers refused {refused} in all" if refused else "")
    for type_, sinks in ROUTES.items():
        if type_ in ("STATS", "HELLO"):
            continue        # STATS: also the routers' and sinks' own; HELLO: the slow path
        for sink in sinks:
            key = f"{type_}.{sink}"
            add(f"{type_}: routers received = relayed + dropped to {sink}", received[type_],
                relayed[key] + dropped[key])
    for sink, counts in doc["sinks"].items():
        to_sink = sum(v for k, v in relayed.items() if k.endswith("." + sink))
        if "STATS" in [t for t, sinks in ROUTES.items() if sink in sinks]:
            # the routers' and sinks' own STATS keep coming after the last router report
            stats = relayed[f"STATS.{sink}"]
            add(f"sink-{sink}: routers relayed (but STATS) = sink received (but STATS)",
                to_sink - stats, counts.get("received", 0) - stats, strict=False,
                note=f"{stats} STATS relayed by the last router report")
        else:
            settled = doc.get("settled", True)
            add(f"sink-{sink}: routers relayed = sink received", to_sink,
                counts.get("received", 0), strict=settled,
                note="" if to_sink == counts.get("received", 0) else
                "the routers' counters never settled: their last report is older" if not settled
                else "the difference was still queued when the sink was stopped")
    reconnects = agents["counts"]["reconnects"]
    churn = f"{reconnects} reconnections: what waited on a closed connection went with it"
    add("ACK: routers forwarded = agents received", forwarded["ACK"], agents["received"]["ACK"],
        strict=reconnects == 0, note=churn if reconnects else "")
    add("RUN: routers forwarded = agents received", forwarded["RUN"], agents["received"]["RUN"],
        strict=reconnects == 0, note=churn if reconnects else "")
    c = agents["counts"]
    add("NOTIFY: spooled = ACKed by alerting + not ACKed", c["spooled.NOTIFY"],
        c["acked.NOTIFY"] + agents["unacked"]["NOTIFY"])
    counts = doc.get("db", {}).get("counts")
    if counts:
        unacked = agents["unacked"]["NOTIFY"]
        add("NOTIFY: spooled = recorded by alerting (none lost, none twice)",
            c["spooled.NOTIFY"], counts["notifications"], strict=unacked == 0,
            note=f"{unacked} still not ACKed at the end" if unacked else "")
        add("NOTIFY: recorded = alerts raised, one per NOTIFY", counts["notifications"],
            counts["notify_alerts"], note=f"{counts['notify_alert_keys']} distinct")
        add("host DOWN alerts while the agents beat (no false DOWN) = 0", counts["host_down_alerts"], 0,
            note="a restarted router's agents may pass their timeout" if restarted else "")
    if "window_drops" in doc:
        drops = doc["window_drops"]
        lost = drops.get("HEARTBEAT.alerting", 0)
        add("HEARTBEAT: dropped to alerting in the measured window = 0", lost, 0,
            note=", ".join(f"{k} {v}" for k, v in sorted(drops.items())) or "nothing dropped")
    sched = doc.get("scheduler", {})
    add("RUN: scheduler sent = routers forwarded + answered 404 + other errors",
        sched.get("sent", 0), forwarded["RUN"] + sched.get("not_found", 0) + sum(
            v for k, v in sched.items() if k.startswith("error_")), strict=False,
        note="RUNs to agents gone quiet at the end are refused later")
    return out


def component_rows(doc: dict) -> list[list[str]]:
    usage, rows = doc["usage"], []
    agents = agent_totals(doc)

    def cost(name):
        u = usage.get(name, {})
        return [f"{u.get('cpu_percent', 0):.1f} ({u.get('main_thread_waited_percent', 0):.0f})",
                f"{u.get('rss_start_mib', 0):.0f}",
                f"{u.get('rss_end_mib', 0):.0f}", f"{u.get('rss_growth_mib_per_min', 0):+.1f}"]

    for rid, m in doc["routers"].items():
        pick = lambda p: sum(v for k, v in m.items() if k.startswith(p))  # noqa: E731
        losses = (f"dropped {pick('router.dropped.')}, refused {pick('router.bad.')}, "
                  f"rate-limited {m.get('router.rate_limited', 0)}, deferred HELLOs "
                  f"{m.get('router.admission_deferred', 0)}")
        rows.append([rid, *cost(rid), str(pick("router.received.")),
                     str(pick("router.relayed.") + pick("router.forwarded.")), losses])
    for type_, m in doc["sinks"].items():
        lost = {k: v for k, v in m.items() if v and (k.startswith(("bad_", "graphite.dropped"))
                or k in ("write_failed", "write_crashed", "ack_dropped", "ack_unroutable",
                         "misframed"))}
        out = m.get("acked", 0) if type_ != "graphite" else m.get("graphite.datapoints", 0)
        n = usage.get(f"sink-{type_}", {}).get("processes", 1)
        rows.append([f"sink-{type_}" + (f" (x{n})" if n > 1 else ""), *cost(f"sink-{type_}"),
                     str(m.get("received", 0)),
                     f"{out} {'points' if type_ == 'graphite' else 'acked'}",
                     (", ".join(f"{k} {v}" for k, v in lost.items()) or "none")
                     + (f" (duplicates {m['duplicate']})" if m.get("duplicate") else "")])
    s = doc.get("scheduler", {})
    rows.append(["scheduler", *cost("scheduler"), "-", f"{s.get('sent', 0)} RUNs",
                 ", ".join(f"{k} {v}" for k, v in s.items()
                           if k not in ("sent", "runs") and v) or "none"])
    if "carbon" in usage:
        points = doc["sinks"].get("graphite", {}).get("graphite.datapoints", 0)
        rows.append(["carbon", *cost("carbon"), f"{points} points", "-", "-"])
    if "postgres" in usage:
        rows.append([f"postgres ({usage['postgres'].get('processes', 1)} proc)",
                     *cost("postgres"), "-", "-", "-"])
    c = agents["counts"]
    rows.append([f"agents ({len(doc['agents'])} proc)", *cost("agents"),
                 str(sum(agents["received"].values())), str(sum(agents["sent"].values())),
                 f"NOTIFY not ACKed {agents['unacked']['NOTIFY']}, resent "
                 f"{c['resent.NOTIFY']}, reconnects {c['reconnects']}, blocked "
                 f"{sum(v for k, v in c.items() if k.startswith('blocked.'))}"])
    return rows


def latency_rows(doc: dict) -> list[list[str]]:
    merged: dict[tuple[str, str], dict] = {}
    for final in doc["agents"]:
        for phase, kinds in final.get("latency", {}).items():
            for kind, s in kinds.items():
                m = merged.setdefault((phase, kind), {"n": 0, "p50": [], "p99": [], "max": 0})
                if s.get("n"):
                    m["n"] += s["n"]
                    m["p50"].append(s["p50"])
                    m["p99"].append(s["p99"])
                    m["max"] = max(m["max"], s["max"])
    rows = [[phase, kind, str(m["n"]), f"{max(m['p50'], default=0):.1f}",
             f"{max(m['p99'], default=0):.1f}", f"{m['max']:.1f}"]
            for (phase, kind), m in sorted(merged.items()) if m["n"]]
    for kind, s in doc.get("db", {}).items():
        if s.get("n"):
            rows.append(["all", kind + " (state db)", str(s["n"]), f"{s['p50']:.1f}",
                         f"{s['p99']:.1f}", f"{s['max']:.1f}"])
    return rows


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def render(doc: dict) -> str:
    s = doc["settings"]
    head = (f"{s['agents']} agents ({len(doc['agents'])} processes) -> {s['routers']} router(s), "
            f"heartbeat {s['heartbeat']:g} s, STATS {s['stats']:g} s, CURVE "
            f"{'on' if s['curve'] else 'off'}; all attached in {doc['attach_s']} s; window "
            f"{doc['window_s']:g} s" + (f"; {s['cpu_hog']} CPU hog(s) beside it"
                                         if s.get("cpu_hog") else ""))
    parts = [head, "", table(["component", "CPU % of a core (main thread waiting %)", "RSS start MiB", "RSS end MiB",
                              "RSS MiB/min (2nd half)", "messages in", "out", "losses"],
                             component_rows(doc)),
             "", "Latencies (ms; p50 and p99: the worst of the agent processes)", "",
             table(["phase", "what", "n", "p50", "p99", "max"], latency_rows(doc))]
    if doc.get("storm"):
        st = doc["storm"]
        parts += ["", f"Storm: {st['router']} restarted after {st['restarted_after_s']} s; every "
                      f"agent attached again {st['all_attached_after_s']} s after its stop"]
    parts += ["", "Checks (sent = received + counted drops):", ""]
    parts += [f"- {'ok  ' if c['ok'] else ('FAIL' if c['strict'] else 'info')} {c['name']}: "
              f"{c['left']} vs {c['right']}{' (' + c['note'] + ')' if c['note'] else ''}"
              for c in doc["checks"]]
    return "\n".join(parts)


METHOD = """\
Method: bench/fleetsim.py (docs/development/benchmarks.md, "The fleet simulator"). CPU is
the share of one core over the measured window; in brackets, the share of the window the
component's main thread was ready to run but waited for a CPU (/proc/PID/schedstat): a
large figure means the machine's other load, not the component, set its pace. Messages and
losses count the whole run (attach and drain included); latencies are per phase."""


def write_results(path: Path, command: str, doc: dict, notes: str = "") -> None:
    s = doc["settings"]
    heading = (f"## Fleet simulator, {s['agents']} agents, heartbeat {s['heartbeat']:g} s, "
               + ("CURVE, " if s["curve"] else "") + ("no carbon, " if s.get("no_carbon") else "")
               + (f"{s['alerting']} alerting sinks, " if s.get("alerting", 1) > 1 else "")
               + ("PostgreSQL, " if s.get("postgres") else "")
               + ("router restart" if s["storm"] else "steady"))
    from results import write_section  # bench/results.py
    write_section(path, heading, command, render(doc), METHOD + ("\n\n" + notes if notes else ""))
