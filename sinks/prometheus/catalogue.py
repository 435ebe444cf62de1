"""What each family the prometheus sink serves is: its type (gauge or counter) and its help.

fleetwatch knows the names its own parts send in STATS: an agent's host statistics
(agent/collectors.py) and its own counters (agent/selfstats.py, agent/runner.py), a
router's (router/counters.py and the parts beside it), a sink's (``sink.``, each sink's
``counts``) and a scheduler's (``scheduler.``). :data:`KNOWN` lists them as patterns over
the Prometheus name without the prefix (``*`` stands for one part of a name: a mount, a
message type, a sink type, a reason), each with its type and what it is; :func:`kind`
answers for a name. A **counter** only grows while its process runs (from zero at start,
or, for the host's disk and network counters, since boot): Prometheus' ``rate()`` applies,
and the sink serves it as ``NAME_total`` (Prometheus' naming rule for counters). A
**gauge** is a level. A name fleetwatch does not know (an application's
``fleetwatch send stat``, a plugin's) stays ``unknown`` (``untyped`` in the text format):
only its sender knows what it is.

Plain data and a cached lookup (a scrape asks once per family; :data:`CACHE` names at most).
"""

from __future__ import annotations

import re

#: (pattern, type, help): the first pattern that matches a whole name answers; ``{0}``,
#: ``{1}`` in the help are the parts the ``*`` matched
KNOWN: tuple[tuple[str, str, str], ...] = (
    # ---- an agent's host (agent/collectors.py)
    ("cpu_percent", "gauge", "CPU busy, percent of all CPUs over the last STATS interval"),
    ("cpu_*", "gauge", "CPU time in {0}, percent of all CPUs over the last STATS interval"),
    ("load_*", "gauge", "load average over {0} minutes"),
    ("memory_total", "gauge", "memory of the host, bytes"),
    ("memory_available", "gauge", "memory available without swapping, bytes"),
    ("memory_used_percent", "gauge", "memory used, percent"),
    ("swap_total", "gauge", "swap space, bytes"),
    ("swap_used", "gauge", "swap space used, bytes"),
    ("swap_used_percent", "gauge", "swap space used, percent"),
    ("disk_*_used_percent", "gauge", "space used on the filesystem mounted at {0}, percent"),
    ("disk_*_free", "gauge", "space free on the filesystem mounted at {0}, bytes"),
    ("diskio_read_bytes", "counter", "bytes read from the host's disks since boot"),
    ("diskio_write_bytes", "counter", "bytes written to the host's disks since boot"),
    ("diskio_reads", "counter", "reads from the host's disks since boot"),
    ("diskio_writes", "counter", "writes to the host's disks since boot"),
    ("netio_bytes_sent", "counter", "bytes sent on the host's network interfaces since boot"),
    ("netio_bytes_recv", "counter", "bytes received on the host's network interfaces since "
                                    "boot"),
    ("netio_packets_sent", "counter", "packets sent by the host since boot"),
    ("netio_packets_recv", "counter", "packets received by the host since boot"),
    ("netio_errin", "counter", "receive errors of the host's interfaces since boot"),
    ("netio_errout", "counter", "send errors of the host's interfaces since boot"),
    ("netio_dropin", "counter", "incoming packets the host dropped since boot"),
    ("netio_dropout", "counter", "outgoing packets the host dropped since boot"),
    ("procs_count", "gauge", "processes on the host"),
    ("uptime_seconds", "gauge", "seconds since the host booted"),
    # ---- an agent's own (agent/selfstats.py, agent/runner.py)
    ("agent_uptime", "gauge", "seconds since the agent started"),
    ("agent_spool_size", "gauge", "messages in the agent's spool, waiting for an ACK"),
    ("agent_spool_unsaved", "gauge", "messages the agent holds in memory only (spool "
                                     "unwritable)"),
    ("agent_routers_alive", "gauge", "routers the agent has a live connection to"),
    ("agent_routers_known", "gauge", "routers the agent knows"),
    ("agent_routers_live", "gauge", "routers in the agent's live set"),
    ("agent_runs_running", "gauge", "check runs of the agent running now"),
    ("agent_runs_queued", "gauge", "check runs of the agent waiting for a slot"),
    ("agent_plugins_declared", "gauge", "checks the agent declared"),
    ("agent_intake_names", "gauge", "distinct STATS names the agent's local processes sent"),
    ("agent_intake_*", "counter", "local messages of the agent's intake: {0}"),
    ("agent_runs_*", "counter", "check runs of the agent: {0}"),
    ("agent_config_*", "counter", "the agent's config reloads: {0}"),
    ("agent_*", "counter", "the agent's {0} counter"),
    ("fleetwatch_cli_send_dropped", "counter", "messages of `fleetwatch send` the agent "
                                               "dropped (queue full)"),
    # ---- a router's (router/counters.py and beside it)
    ("router_agents", "gauge", "agents attached to the router"),
    ("router_admission_waiting", "gauge", "HELLOs of new agents waiting for the admission "
                                          "pace"),
    ("router_tail_topics", "gauge", "distinct tail topics subscribed on the router"),
    ("router_sinks_*", "gauge", "sink connections of type {0} on the router"),
    ("router_durable_missing", "gauge", "durable routes of the router with no sink "
                                        "connected"),
    ("router_drops_pending", "gauge", "drop ledger entries of the router not reported yet"),
    ("router_fd_used", "gauge", "file descriptors the router has open"),
    ("router_fd_limit", "gauge", "file descriptors the router may open"),
    ("router_fd_headroom_pct", "gauge", "share of the router's file descriptor limit left, "
                                        "percent"),
    ("router_mesh_members", "gauge", "routers of the mesh this router knows"),
    ("router_mesh_dead", "gauge", "routers of the mesh this router judges dead"),
    ("router_sites_links", "gauge", "site routers linked to this router"),
    ("router_sites_agents", "gauge", "agents behind the site routers linked here"),
    ("router_sites_down", "gauge", "site links down"),
    ("router_site_up", "gauge", "1 while the site router's uplink is up"),
    ("router_site_buffered", "gauge", "messages in the site router's buffer"),
    ("router_site_spooled", "gauge", "messages of the site router's buffer on disk"),
    ("router_site_spool_bytes", "gauge", "bytes of the site router's buffer on disk"),
    ("router_received_*", "counter", "{0} messages the router accepted from agents"),
    ("router_relayed_*_*", "counter", "{0} messages the router relayed to {1} sinks"),
    ("router_dropped_*_*", "counter", "{0} messages the router dropped for {1} sinks (none "
                                      "connected, or queues full)"),
    ("router_bad_*", "counter", "messages the router refused with status {0}"),
    ("router_forwarded_*", "counter", "{0} messages the router forwarded to agents"),
    ("router_refused_*", "counter", "connections and HELLOs the router refused: {0}"),
    ("router_config_*", "counter", "the router's config reloads: {0}"),
    ("router_mesh_*", "counter", "the router's mesh: {0}"),
    ("router_sites_*", "counter", "the router's site links: {0}"),
    ("router_site_*", "counter", "the site router's uplink: {0}"),
    ("router_*", "counter", "the router's {0} counter"),
    # ---- a sink's (sink.COUNTER of its loop, sink.TYPE.COUNTER of its kind)
    ("sink_prometheus_series", "gauge", "series in the prometheus sink's table, as its "
                                        "STATS say"),
    ("sink_graphite_buffered", "gauge", "datapoints in the graphite sink's buffer"),
    ("sink_graphite_names", "gauge", "metric names the graphite sink holds"),
    ("sink_remote_write_queue_samples", "gauge", "samples in the remote_write sink's queue"),
    ("sink_remote_write_queue_bytes", "gauge", "bytes of the remote_write sink's queue"),
    ("sink_remote_write_queue_memory_bytes", "gauge",
     "bytes of the remote_write sink's queue in memory"),
    ("sink_remote_write_queue_disk_bytes", "gauge",
     "bytes of the remote_write sink's queue spilled to disk"),
    ("sink_remote_write_queue_segments", "gauge",
     "segment files of the remote_write sink's queue on disk"),
    ("sink_remote_write_drops_pending", "gauge",
     "drop entries the remote_write sink has yet to report"),
    ("sink_remote_write_shards", "gauge", "the remote_write sink's sending shards"),
    ("sink_*", "counter", "the sink's {0} counter"),
    # ---- a scheduler's
    ("scheduler_jobs", "gauge", "checks the scheduler has a job for"),
    ("scheduler_*", "counter", "the scheduler's {0} counter"),
)
#: the families of checks (sinks/prometheus/names.py), gauges
CHECKS = {"check_status": "latest status of a check: 0 OK, 1 WARNING, 2 CRITICAL, "
                          "3 UNKNOWN",
          "check_perfdata": "latest perfdata value of a check, in base units (bytes, "
                            "seconds)"}
#: a name fleetwatch does not know
UNKNOWN = ("unknown", "latest value of the STATS metric {0} (not one of fleetwatch's own: "
                      "its sender knows what it is)")
#: names remembered at most (then forgotten all at once, as the sink's name caches)
CACHE = 100_000

_PATTERNS = tuple((re.compile("^" + re.escape(p).replace(r"\*", "([A-Za-z0-9]+(?:_[A-Za-z0-9]+)*?)")
                              + "$"), k, h) for p, k, h in KNOWN)
_cache: dict[str, tuple[str, str]] = {}


def kind(name: str) -> tuple[str, str]:
    """(type, help) of the family ``name`` (without the prefix): ``gauge``, ``counter`` or,
    for a name fleetwatch does not know, ``unknown``."""
    found = _cache.get(name)
    if found is None:
        if len(_cache) >= CACHE:
            _cache.clear()
        found = _cache[name] = _lookup(name)
    return found


def _lookup(name: str) -> tuple[str, str]:
    if name in CHECKS:
        return "gauge", CHECKS[name]
    for pattern, type_, help_ in _PATTERNS:
        m = pattern.match(name)
        if m:
            return type_, help_.format(*m.groups())
    return UNKNOWN[0], UNKNOWN[1].format(name)
