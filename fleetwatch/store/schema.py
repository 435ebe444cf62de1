"""The state database's schema: every table, and which owner writes it.

====================  ==========  =====================================================
table                 owner       rows
====================  ==========  =====================================================
``agents``            registry    one per agent uuid: hostname, version, first/last seen,
                                  the parents it declared, ephemeral, deregistered
``agent_routers``     registry    (uuid, router): when a router last relayed for it
``plugins``           registry    (uuid, source, name): plugins declared in REGISTER
``notifications``     alerting    one per NOTIFY msg_id
``checks``            alerting    (uuid, plugin): the latest RESULT of each check
``check_state``       alerting    (uuid, plugin): Nagios state (SOFT/HARD, flapping, told)
``host_state``        alerting    (uuid, name): UP/DOWN of an agent ("") or local process
``check_freshness``   alerting    (uuid, plugin): when a check was last heard, stale since
``silences``          operator    muted hosts/checks (``fleetwatch silence``); sinks read
``suppressed``        alerting    (silence_id, key, action, severity): alerts a silence muted
``acknowledgements``  operator    problems an operator is on (``fleetwatch ack``);
                                  the sinks end and announce them
``downtimes``         operator    planned work, once or recurring (``fleetwatch downtime``);
                                  sinks read
``downtime_suppressed`` alerting  (downtime_id, key, action, severity): alerts it held
``notified_problems`` alerting    (key): problems told and not resolved yet: notifications
                                  and escalations sent (:mod:`sinks.alerting.escalation.store`)
``alert_events``      alerting    one per alert event, whatever its channels
``outbox``            alerting    (event, channel): delivery state and claims
``deliveries``        alerting    one per attempt to send an alert: the service's answer
``channels``          alerting    one per alert channel: working or failing, since when, why
``slos``              alerting    one per SLO the alerting sinks' configs declare
``slo_state``         alerting    (slo, uuid): an SLO's (or a host's of it) burn-rate alert
                                  state: ok, ticket or page, since when, what was told
``slo_buckets``       alerting    (slo, uuid, width, start): good and bad events of a span
``web_users``         web         the console's users: name, role, password hash
``web_tokens``        web         API tokens: a user's, with a role, kept as a digest
``web_sessions``      web         console logins: a session id's digest, its user, when
                                  it ends (logout, user removal and a new password end them)
``web_pins``          web         the graphs each user pinned to their dashboard (host, graph)
``web_audit``         web         every change made through the console or the API: who,
                                  what, when
``prometheus_alerts`` web         one per alert Prometheus (or vmalert) posted to the console
                                  (``POST /api/v2/alerts``), by its labels' fingerprint; the
                                  alerting sinks write which check of which host it is
====================  ==========  =====================================================

:data:`OWNED` says which tables an owner writes; the alerting sink's outbox
(``alert_events``, ``outbox``) is worked by :mod:`sinks.alerting.delivery.store`. The database has
one schema version, whoever starts first: any writer's start brings every table to it
(:func:`fleetwatch.store.db.create`, the Alembic revisions of :mod:`fleetwatch.store.migrations`).
Times are seconds since the Unix epoch (floats): portable, and formatted only on display. A
new table or column is declared here, named in :data:`OWNED`, and comes with a revision
(``python -m fleetwatch.store.migrations revision -m "..."``;
docs/development/state-database.md).
"""

from __future__ import annotations

from sqlalchemy import (JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData,
                        String, Table, Text)

metadata = MetaData()
ID = String(64)
#: an alert's key: what a resolve is matched to its trigger by
KEY = String(512)

agents = Table(
    "agents", metadata,
    Column("uuid", ID, primary_key=True),
    Column("hostname", String(255)),
    Column("version", String(64)),
    Column("first_seen", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
    #: the parents the agent declared (``parents:`` in its config, sent in HELLO and
    #: REGISTER): a list of "HOST" or "HOST/CHECK"; NULL when it declared none
    Column("parents", JSON(none_as_null=True)),
    #: ``ephemeral: true`` in its HELLO or its own REGISTER: silent, it is GONE, not DOWN
    Column("ephemeral", Boolean),
    #: the ``ts`` of its DEREGISTER (the agent's clock) while it is deregistered: its
    #: plugins and routers are removed, an older HELLO or REGISTER no longer revives it;
    #: NULL while it is registered
    Column("gone", Float),
    #: the site router it is behind (SPEC 4.10: the last router of its HELLO's path but
    #: itself), as the registry last heard it; NULL when attached to a central router, or
    #: not heard since this column came (revision 0002)
    Column("site", String(255)),
)

agent_routers = Table(
    "agent_routers", metadata,
    Column("uuid", ID, ForeignKey("agents.uuid", ondelete="CASCADE"), primary_key=True),
    Column("router", ID, primary_key=True),
    Column("last_seen", Float, nullable=False),
)

plugins = Table(
    "plugins", metadata,
    Column("uuid", ID, ForeignKey("agents.uuid", ondelete="CASCADE"), primary_key=True),
    Column("source", String(255), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("declared_at", Float, nullable=False),
)

notifications = Table(
    "notifications", metadata,
    Column("msg_id", ID, primary_key=True),
    Column("uuid", ID, nullable=False),
    Column("hostname", String(255)),
    Column("severity", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("source", String(255)),
    Column("sent_at", Float, nullable=False),
    Column("received_at", Float, nullable=False),
    Column("router", ID, nullable=False),
    Index("ix_notifications_received_at", "received_at"),
)

#: No foreign key to ``agents``: a RESULT may reach the alerting sink before the registry
#: has recorded its agent. ``last_result`` is the RESULT's ``ts``; a row is only replaced by
#: a RESULT that is newer (:mod:`sinks.alerting.checks.ordering`: by the agent's run and sequence,
#: else by arrival, never by a sender's clock alone; :func:`fleetwatch.store.db.record_checks`).
checks = Table(
    "checks", metadata,
    Column("uuid", ID, primary_key=True),
    Column("plugin", String(255), primary_key=True),
    Column("status", Integer, nullable=False),
    Column("output", Text, nullable=False),
    Column("long_output", Text, nullable=False),
    Column("perfdata", JSON, nullable=False),
    Column("command_id", ID, nullable=False),
    Column("slot", Float),
    Column("started", Float),
    Column("duration", Float),
    Column("last_result", Float, nullable=False),
    Column("router", ID, nullable=False),
    #: when the sink got it (its clock), and the agent's run (``boot``) and place in it
    #: (``seq``) when the RESULT gave them: what orders results (:mod:`sinks.alerting.checks.ordering`)
    Column("received_at", Float),
    Column("boot", ID),
    Column("seq", Float),
)

#: Shared by every alerting sink: rows are read FOR UPDATE (PostgreSQL) or in a BEGIN
#: IMMEDIATE transaction (SQLite) before a transition (sinks/alerting/locks.py).
check_state = Table(
    "check_state", metadata,
    Column("uuid", ID, primary_key=True),
    Column("plugin", String(255), primary_key=True),
    Column("status", Integer, nullable=False),
    Column("hard", Boolean, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("hard_status", Integer, nullable=False),
    Column("since", Float),
    Column("last_change", Float),
    Column("last_result", Float),
    Column("history", String(32), nullable=False),
    Column("percent", Float, nullable=False),
    Column("flapping", Boolean, nullable=False),
    Column("notified", Integer, nullable=False),
    Column("last_notified", Float),
    Column("flap_notified", Boolean, nullable=False),
    Column("updated", Float, nullable=False),
    #: the parent reference holding this check's problems back (its host UNREACHABLE
    #: behind it, or a parent check in a HARD problem); NULL when none does
    Column("unreachable", String(512)),
    #: the order of the newest result applied, with ``last_result``
    #: (:class:`sinks.alerting.checks.ordering.Order`)
    Column("received", Float),
    Column("boot", ID),
    Column("seq", Float),
)

host_state = Table(
    "host_state", metadata,
    Column("uuid", ID, primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("up", Boolean, nullable=False),
    Column("last_heard", Float, nullable=False),
    Column("interval", Float),
    Column("deadline", Float, nullable=False),
    Column("since", Float, nullable=False),
    Column("routers", JSON, nullable=False),
    Column("notified", Boolean, nullable=False),
    Column("pending", Boolean, nullable=False),
    Column("updated", Float, nullable=False),
    #: the parent reference this DOWN host is UNREACHABLE behind (paged nobody); NULL
    #: when it is not (up, or plainly DOWN)
    Column("unreachable", String(512)),
    #: when the host was judged GONE (deregistered, or ephemeral and silent past its
    #: timeout: never DOWN; :func:`sinks.alerting.hosts.rules.gone`); NULL while it is not
    Column("gone", Float),
    #: the ``ts`` of its DEREGISTER (the agent's clock): a heartbeat sent before it does not
    #: bring the host back
    Column("deregistered", Float),
    #: the agent's clock minus the sink's at its latest heartbeat, in whole seconds, when
    #: further off than the sink's ``clock_skew`` setting; NULL within it
    #: (:mod:`sinks.alerting.hosts.skew`)
    Column("clock_skew", Integer),
    Index("ix_host_state_deadline", "deadline"),
    Index("ix_host_state_pending", "pending"),
)

#: The sink's clock, not the agent's: a check is stale when no result has been *received*
#: for its threshold (:mod:`sinks.alerting.freshness.store`); written under the check's
#: ``check_state`` lock.
check_freshness = Table(
    "check_freshness", metadata,
    Column("uuid", ID, primary_key=True),
    Column("plugin", String(255), primary_key=True),
    Column("heard", Float),
    Column("stale_at", Float),
    Column("updated", Float, nullable=False),
)

silences = Table(
    "silences", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(255), nullable=False),
    Column("check_name", String(255)),
    Column("created", Float, nullable=False),
    Column("until", Float, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("removed", Float),
    Index("ix_silences_until", "until"),
)


def _kept_back(name: str, by: str) -> Table:
    """Alerts a silence muted or a downtime held back (``by``: its id), once per silence or
    downtime, key, action and severity."""
    return Table(
        name, metadata,
        Column(by, Integer, primary_key=True),
        Column("key", String(512), primary_key=True),
        Column("action", String(16), primary_key=True),
        Column("severity", String(16), primary_key=True),
        Column("kind", String(16), nullable=False),
        Column("uuid", ID),
        Column("hostname", String(255)),
        Column("check_name", String(255)),
        Column("summary", Text, nullable=False),
        Column("created", Float, nullable=False),
    )


suppressed = _kept_back("suppressed", "silence_id")

#: Written by ``fleetwatch ack`` (a new row, or ``ended`` by ``ack remove``); the alerting
#: sinks set ``announced`` (the notice enqueued) and end rows (:mod:`sinks.alerting.acks.store`).
acknowledgements = Table(
    "acknowledgements", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", KEY, nullable=False),
    Column("uuid", ID, nullable=False),
    Column("check_name", String(255)),
    Column("status", Integer, nullable=False),
    Column("sticky", Boolean, nullable=False),
    Column("notify", Boolean, nullable=False),
    Column("comment", Text, nullable=False),
    Column("author", String(255), nullable=False),
    Column("created", Float, nullable=False),
    Column("expire", Float),
    Column("announced", Float),
    Column("ended", Float),
    Column("end_reason", String(16)),
    Index("ix_acknowledgements_ended", "ended"),
)

#: Written by ``fleetwatch downtime`` (a new row, or ``removed`` by ``downtime remove``);
#: the alerting sinks read those that may cover now or just ended
#: (:mod:`sinks.alerting.downtimes.store`). ``end`` is None for a recurring one without an end;
#: ``every`` its schedule (:mod:`sinks.alerting.downtimes.rules`); ``duration`` a cron schedule's
#: window length; ``flexible`` the seconds a flexible one lasts from a problem's start.
downtimes = Table(
    "downtimes", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(255), nullable=False),
    Column("check_name", String(255)),
    Column("start", Float, nullable=False),
    Column("end", Float),
    Column("every", String(255)),
    Column("duration", Float),
    Column("flexible", Float),
    Column("children", Boolean, nullable=False),
    Column("comment", Text, nullable=False),
    Column("author", String(255), nullable=False),
    Column("created", Float, nullable=False),
    Column("removed", Float),
    Index("ix_downtimes_end", "end"),
)

#: The alerts a downtime held back, as ``suppressed`` is for silences.
downtime_suppressed = _kept_back("downtime_suppressed", "downtime_id")

#: One row per told problem (a check's HARD problem, a host DOWN) from its first
#: notification until its resolve went out (:mod:`sinks.alerting.escalation.store`): written
#: under the problem's ``check_state`` / ``host_state`` row lock, so its count is exact.
notified_problems = Table(
    "notified_problems", metadata,
    Column("key", KEY, primary_key=True),
    Column("uuid", ID, nullable=False),
    Column("check_name", String(255)),
    Column("kind", String(16), nullable=False),
    Column("opened", Float, nullable=False),
    Column("notifications", Integer, nullable=False),
    Column("severity", String(16), nullable=False),
    Column("status", Integer),
    Column("summary", Text, nullable=False),
    Column("escalated", JSON),
    Column("updated", Float, nullable=False),
    Index("ix_notified_problems_opened", "opened"),
)

#: The alert outbox (:mod:`sinks.alerting.delivery.store`): an alert event is recorded in the
#: transaction that changed the state behind it, then delivered from ``outbox``, one row
#: per channel (``pending`` until ``sent``, or ``failed``).
alert_events = Table(
    "alert_events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", KEY, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("action", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("uuid", ID),
    Column("hostname", String(255)),
    Column("check_name", String(255)),
    Column("status", Integer),
    Column("summary", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("created", Float, nullable=False),
    Column("details", JSON),
    Index("ix_alert_events_created", "created"),
    Index("ix_alert_events_key", "key", "action"),
)

outbox = Table(
    "outbox", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", Integer, ForeignKey("alert_events.id", ondelete="CASCADE"),
           nullable=False),
    Column("key", KEY, nullable=False),
    Column("channel", String(64), nullable=False),
    Column("state", String(8), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt", Float, nullable=False),
    Column("claimed_by", String(128)),
    Column("lease_until", Float),
    Column("sent_at", Float),
    Column("last_error", Text),
    Column("created", Float, nullable=False),
    Index("ix_outbox_due", "state", "next_attempt"),
    Index("ix_outbox_order", "key", "channel", "id"),
    Index("ix_outbox_event", "event_id"),
)

#: Proof of delivery (:mod:`sinks.alerting.delivery.deliverer`): one row per attempt to send
#: an outbox row, written with the outcome it records. ``outcome`` is ``sent``, ``retry``
#: or ``failed``; ``status`` and ``message_id`` are the service's (``HTTP 202``, ``SMTP 250``;
#: the email's Message-ID, a PagerDuty answer's ``dedup_key``), None when no answer came;
#: ``answer`` its first line or the error. The alert's own words are copied, so that a
#: delivery still says what it was once the outbox purged its event (``keep``).
deliveries = Table(
    "deliveries", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("outbox_id", Integer, nullable=False),
    Column("event_id", Integer, nullable=False),
    Column("key", KEY, nullable=False),
    Column("action", String(16), nullable=False),
    Column("hostname", String(255)),
    Column("check_name", String(255)),
    Column("channel", String(64), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("grouped", Integer, nullable=False),          # alerts in the one message sent
    Column("worker", String(128), nullable=False),
    Column("started", Float, nullable=False),
    Column("latency", Float, nullable=False),            # seconds the send took
    Column("outcome", String(8), nullable=False),
    Column("status", String(32)),
    Column("message_id", String(255)),
    Column("answer", Text),
    Index("ix_deliveries_started", "started"),
    Index("ix_deliveries_event", "event_id"),
)

#: Each alert channel's state (:mod:`sinks.alerting.delivery.health`), as the deliverers of
#: every alerting sink judged it from their sends: ``ok``, ``failing`` (since the first failed
#: attempt of the run, ``failures`` in a row) or ``unknown`` (configured, not tried yet);
#: ``fallback`` as configured, ``configured`` when a sink last said it has the channel.
channels = Table(
    "channels", metadata,
    Column("name", String(64), primary_key=True),
    Column("state", String(8), nullable=False),
    Column("since", Float, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("type", String(16)),                         # slack, teams... (0005)
    Column("last_ok", Float),
    Column("last_attempt", Float),
    Column("last_status", String(32)),
    Column("last_error", Text),
    Column("fallback", String(64)),
    Column("configured", Float, nullable=False),
)

#: The SLOs the alerting sinks' configs declare (:mod:`sinks.alerting.slo`), as each sink
#: last said (``configured``): what ``fleetwatch slo`` and the console list. ``patterns``
#: and ``hosts`` are lists of globs; ``window_seconds`` the objective's window.
slos = Table(
    "slos", metadata,
    Column("name", String(64), primary_key=True),
    Column("objective", Float, nullable=False),         # percent
    Column("window_seconds", Float, nullable=False),
    Column("source", String(8), nullable=False),        # checks or rules
    Column("sli", String(8), nullable=False),           # results or time
    Column("patterns", JSON, nullable=False),
    Column("hosts", JSON, nullable=False),
    Column("per_host", Boolean, nullable=False),
    Column("downtime", String(8), nullable=False),      # good, bad or excluded
    Column("configured", Float, nullable=False),
)

#: Each SLO's burn-rate alert state (``uuid`` ""), and each host's of an SLO ``per_host``
#: while it is not ok or not told so (:mod:`sinks.alerting.slo.store`): written by the sink
#: that holds the SLO's own row locked, so a change is told once. ``burn``: the burn rates
#: of the last judgement (``{"5m": 0.0, ...}``).
slo_state = Table(
    "slo_state", metadata,
    Column("slo", String(64), primary_key=True),
    Column("uuid", ID, primary_key=True),
    Column("level", String(8), nullable=False),         # ok, ticket or page
    Column("since", Float, nullable=False),
    Column("told", String(8), nullable=False),
    Column("told_at", Float),
    Column("burn", JSON),
    Column("updated", Float, nullable=False),
)

#: The SLIs' events, summed per span (:mod:`sinks.alerting.slo.store`): ``width`` seconds
#: from ``start``, of one host (``uuid``) or of the whole SLO (``uuid`` ""); ``good``,
#: ``bad`` and ``excluded`` are results, or seconds. Kept as long as a window needs them.
slo_buckets = Table(
    "slo_buckets", metadata,
    Column("slo", String(64), primary_key=True),
    Column("uuid", ID, primary_key=True),
    Column("width", Integer, primary_key=True),
    Column("start", Float, primary_key=True),
    Column("good", Float, nullable=False),
    Column("bad", Float, nullable=False),
    Column("excluded", Float, nullable=False),
    Index("ix_slo_buckets_span", "slo", "width", "start"),
)

#: The rules on series the alerting sinks' configs declare (:mod:`sinks.alerting.series`),
#: as a sink last said at its start or reload (``configured``; ``sink`` its name): what the
#: console lists. ``hosts`` is the rule's list of selectors; the durations are seconds.
rules = Table(
    "rules", metadata,
    Column("name", String(64), primary_key=True),
    Column("expr", Text, nullable=False),
    Column("hosts", JSON, nullable=False),
    Column("warning", String(255), nullable=False),
    Column("critical", String(255), nullable=False),
    Column("hold", Float, nullable=False),              # ``for``
    Column("keep_firing", Float, nullable=False),
    Column("stale_after", Float, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("sink", String(255), nullable=False),
    Column("configured", Float, nullable=False),
)

web_users = Table(
    "web_users", metadata,
    Column("name", String(64), primary_key=True),
    Column("role", String(16), nullable=False),          # viewer, operator or admin
    Column("password", String(255), nullable=False),     # argon2id hash (web/auth.py)
    Column("created", Float, nullable=False),
    Column("created_by", String(255), nullable=False),
)

web_tokens = Table(
    "web_tokens", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("user", String(64), nullable=False),
    Column("role", String(16), nullable=False),          # at most its user's
    Column("label", String(255), nullable=False),
    Column("digest", String(64), nullable=False, unique=True),   # sha256 of the token
    Column("created", Float, nullable=False),
    Column("last_used", Float),
)

web_sessions = Table(
    "web_sessions", metadata,
    Column("digest", String(64), primary_key=True),      # sha256 of the cookie's session id
    Column("user", String(64), nullable=False),
    Column("created", Float, nullable=False),
    Column("expires", Float, nullable=False),
    Index("ix_web_sessions_user", "user"),
)

web_audit = Table(
    "web_audit", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float, nullable=False),
    Column("who", String(255), nullable=False),          # user name, or user/token label
    Column("action", String(64), nullable=False),        # e.g. login, ack.add, user.remove
    Column("target", Text, nullable=False),
    Column("details", JSON),
    Index("ix_web_audit_ts", "ts"),
)

web_pins = Table(
    "web_pins", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("user", String(64), nullable=False),          # whose dashboard
    Column("uuid", ID, nullable=False),                  # the host whose graph it is
    Column("graph", String(255), nullable=False),        # its key (fleetwatch/graphs/panels.py)
    Column("created", Float, nullable=False),
    Index("ix_web_pins_user", "user"),
)

#: The alerts Prometheus (or vmalert) posts to the console as to an Alertmanager
#: (web/alertmanager.py), one per label set (``fingerprint``: :func:`web.intake.fingerprint`),
#: merged as Alertmanager merges a resend. ``ends_at`` is the sender's, or ``updated`` plus
#: the console's ``web.alerts_resolve_timeout`` when it gave none (``timeout``). The alerting
#: sinks judge them (sinks/alerting/external) and write what each became: the check
#: ``plugin`` of agent ``uuid``, or why none (``refused``), as of ``judged``.
prometheus_alerts = Table(
    "prometheus_alerts", metadata,
    Column("fingerprint", ID, primary_key=True),
    Column("labels", JSON, nullable=False),
    Column("annotations", JSON, nullable=False),
    Column("starts_at", Float, nullable=False),
    Column("ends_at", Float, nullable=False),
    Column("timeout", Boolean, nullable=False),
    Column("generator_url", Text, nullable=False),
    Column("received", Float, nullable=False),       # first posted
    Column("updated", Float, nullable=False),        # last posted
    Column("sender", String(255), nullable=False),   # the token's user/label
    Column("uuid", ID),
    Column("plugin", String(255)),
    Column("refused", String(255)),
    Column("judged", Float),
    Index("ix_prometheus_alerts_ends_at", "ends_at"),
)

#: the fleetwatch release that brought the database to each revision (1.0.0 and later),
#: written by the writer that migrated it (:func:`fleetwatch.store.db.create`): so that an
#: older release finding a revision it does not know names the release that made it
#: (``fleetwatch state migrate`` refuses to go down; docs/operating/upgrading.md)
state_releases = Table(
    "state_releases", metadata,
    Column("revision", String(32), primary_key=True),
    Column("version", String(64), nullable=False),
    Column("migrated", Float, nullable=False),
)

#: owner (a sink type, the ``fleetwatch silence`` / ``ack`` / ``downtime`` command, the
#: console, or ``fleetwatch state migrate``) -> the tables it writes; any of them migrates
#: the whole database as it starts (and writes ``state_releases`` then)
OWNED = {
    "registry": (agents, agent_routers, plugins),
    "alerting": (notifications, checks, check_state, host_state, check_freshness, silences,
                 suppressed, acknowledgements, downtimes, downtime_suppressed,
                 notified_problems, alert_events, outbox, deliveries, channels, slos,
                 slo_state, slo_buckets, rules, prometheus_alerts),
    "silences": (silences,),
    "acks": (acknowledgements,),
    "downtimes": (downtimes,),
    "web": (web_users, web_tokens, web_sessions, web_audit, web_pins, prometheus_alerts),
    "state": (state_releases,),
}

