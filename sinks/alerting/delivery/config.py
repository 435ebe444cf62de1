"""Where alerts go: channels (email, webhook), routing rules and retry settings.

Part of the alerting sink's config (``alerting.delivery``, see :mod:`sinks.alerting.config`)::

    delivery:
      channels:
        ops-mail: {type: email, host: smtp.example.com, port: 587, starttls: true,
                   username: fleetwatch, password_file: /etc/fleetwatch/smtp.pass,
                   from: fleetwatch@example.com, to: [ops@example.com]}
        pager:    {type: webhook, url: "https://events.pagerduty.com/v2/enqueue",
                   routing_key: R0UT1NGKEY, timeout: 10}
        digest:   {type: email, to: [noc@example.com], group_wait: 30, group_by: [severity]}
      rules:
        - {severity: [critical], channels: [pager, ops-mail]}
        - {host: "db-*", check: "check_disk*", channels: [ops-mail]}
        - {severity: [critical], after: 30m, channels: [second-tier]}     # escalation
        - {from_notification: 3, channels: [team-lead]}
      retry: {initial: 5, max: 300, max_age: 86400}

A rule with conditions (``after``, ``from_notification``) is the escalation of a problem
(:mod:`sinks.alerting.escalation.store`): ``from_notification: N`` matches a problem's Nth
notification and later (the alert event's ``notification``), ``after`` is not matched when
an alert is routed but by the sinks' tick, which sends the rule's channels one escalation
event once the problem has lasted that long unacknowledged.

A channel's settings depend on its ``type``; a channel is a mapping checked against the
dataclass of its type, so a wrong or misspelt key stops the sink at start like any other
setting. ``from`` is a Python keyword, hence the field ``sender`` behind it.
Secrets are never in the file: SMTP reads its password from ``password_file`` when it sends.
SMTP AUTH (``username``) needs ``starttls: true``, or ``allow_plaintext_auth: true`` to send
the password in clear anyway (the sender warns when it is made).
``group_wait`` and ``group_by`` make a channel collect alerts into groups
(:mod:`sinks.alerting.delivery.grouping`); 0, the default, sends each alert at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fleetwatch.config import ConfigError, build, setting
from sinks.alerting.delivery.channeltypes import CHANNEL_TYPES, Channel
from sinks.alerting.delivery.rules import Rule

@dataclass(frozen=True)
class Retry:
    initial: float = setting(5.0, "seconds before the first retry; doubled each attempt")
    max: float = setting(300.0, "longest wait between two attempts (seconds)")
    max_age: float = setting(86400.0, "an alert not delivered this long after it was "
                                      "recorded is marked failed (seconds)")
    jitter: float = setting(0.2, "each wait is shortened by up to this fraction, at random")

    def validate(self):
        if not 0 < self.initial <= self.max:
            raise ValueError("initial: expected a positive number no larger than max")
        if self.max_age <= 0:
            raise ValueError("max_age: expected a positive number of seconds")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter: expected a fraction from 0 to below 1")


@dataclass(frozen=True)
class DeliveryConfig:
    channels: dict[str, dict[str, Any]] = setting(
        factory=dict, help=f"channel name -> {{type: {'|'.join(CHANNEL_TYPES)}, ...}}",
        variants=CHANNEL_TYPES)
    rules: list[Rule] = setting(factory=list, help="routing: an event goes to the channels "
                                                   "of every rule it matches")
    retry: Retry = setting(factory=Retry, help="backoff between attempts, and when to give up")
    poll_interval: float = setting(1.0, "seconds between two looks at the outbox when idle")
    lease: float = setting(60.0, "seconds a sink holds the rows it claimed; another sink may "
                                 "take them after (a crashed sink's claim expires)")
    batch: int = setting(20, "outbox rows claimed at once")
    keep: float = setting(30 * 86400.0, "seconds sent and failed alerts are kept for "
                                        "`fleetwatch alerts`")
    console_url: str = setting("", "the console's address (https://fleet.example.com/): "
                                   "each alert links to its host's page there (or to its "
                                   "own page); empty: no link")

    def __post_init__(self):
        # Parsed once; an error is raised by validate() (at load, naming the key) or on use.
        try:
            parsed, error = self._parse(), None
        except ValueError as e:
            parsed, error = {}, e
        object.__setattr__(self, "_parsed", parsed)
        object.__setattr__(self, "_error", error)

    def _parse(self) -> dict[str, Channel]:
        parsed = {}
        for name, raw in self.channels.items():
            if not name or len(name) > 64 or not name.replace("-", "").replace("_", "") \
                    .replace(".", "").isalnum():
                raise ValueError(f"channels: bad channel name {str(name)[:40]!r} (expected "
                                 f"1 to 64 letters, digits or ._-)")
            parsed[name] = parse_channel(name, raw)
        return parsed

    def validate(self):
        if self._error is not None:
            raise self._error
        for i, rule in enumerate(self.rules):
            unknown = [c for c in rule.channels if c not in self._parsed]
            if unknown:
                raise ValueError(f"rules[{i}].channels: no channel named {unknown[0]!r} "
                                 f"(known: {', '.join(sorted(self._parsed)) or 'none'})")
        for name, channel in self._parsed.items():
            fallback, seen = channel.fallback, [name]
            while fallback:
                if fallback not in self._parsed:
                    known = ", ".join(sorted(self._parsed))
                    raise ValueError(f"channels.{name}.fallback: no channel named "
                                     f"{fallback[:64]!r} (known: {known})")
                if fallback in seen:
                    raise ValueError(f"channels.{name}.fallback: a loop "
                                     f"({' -> '.join(seen + [fallback])})")
                seen.append(fallback)
                fallback = self._parsed[fallback].fallback
            if channel.group_wait >= self.retry.max_age:
                raise ValueError(f"channels.{name}.group_wait: expected less than "
                                 f"retry.max_age ({self.retry.max_age:g} s)")
        longest = max((c.timeout for c in self._parsed.values()), default=0)
        if self.lease < 3 * longest:
            raise ValueError(f"lease: expected at least 3 times the longest channel timeout "
                             f"({3 * longest:g} s)")
        if self.console_url:
            parts = urlsplit(self.console_url)
            if parts.scheme not in ("http", "https") or not parts.hostname \
                    or parts.query or parts.fragment:
                raise ValueError(f"console_url: expected the console's http:// or https:// "
                                 f"address, got {self.console_url[:60]!r}")
        for key in ("poll_interval", "batch", "keep"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: expected a positive number")

    def parsed_channels(self) -> dict[str, Channel]:
        """The channels as :class:`EmailChannel` / :class:`WebhookChannel`, by name."""
        if self._error is not None:
            raise self._error
        return dict(self._parsed)


def parse_channel(name: str, raw: dict) -> Channel:
    """One channel's mapping as its typed dataclass; ValueError("channels.NAME.KEY: ...")."""
    prefix = f"channels.{name}"
    kind = raw.get("type")
    if kind not in CHANNEL_TYPES:
        raise ValueError(f"{prefix}.type: expected one of {', '.join(CHANNEL_TYPES)}, "
                         f"got {str(kind)[:40]!r}")
    try:            # (an email's ``from`` is its field ``sender``: build reads the key)
        return build(CHANNEL_TYPES[kind], dict(raw), "", prefix)
    except ConfigError as e:
        raise ValueError(f"{e.key}: {e.expected}") from None


# ---------------------------------------------------------------- the demo's delivery

def for_demo(webhook: str | None = None, smtp: str | None = None,
             to: list[str] | tuple[str, ...] = ()) -> dict:
    """The ``alerting.delivery`` mapping of ``fleetwatch demo --alert-webhook URL`` and
    ``--alert-smtp HOST:PORT --alert-to ADDR``: every alert (all severities, recoveries
    included) to each given channel, quick retries. ValueError names the bad option."""
    channels: dict[str, dict] = {}
    if webhook:
        channels["webhook"] = {"type": "webhook", "url": webhook, "routing_key": "fleetwatch-demo",
                               "timeout": 5.0}
    if smtp:
        host, sep, port = smtp.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--alert-smtp: expected HOST:PORT, got {smtp!r}")
        if not to:
            raise ValueError("--alert-to: expected at least one address with --alert-smtp")
        channels["email"] = {"type": "email", "host": host.strip("[]"), "port": int(port),
                             "from": "fleetwatch-demo@localhost", "to": list(to),
                             "timeout": 5.0}
    elif to:
        raise ValueError("--alert-to: needs --alert-smtp HOST:PORT")
    data = {"channels": channels,
            "rules": [{"channels": list(channels)}] if channels else [],
            "retry": {"initial": 2.0, "max": 30.0, "max_age": 3600.0}}
    try:
        build(DeliveryConfig, data, "demo", "alerting.delivery")
    except ConfigError as e:
        option = "--alert-webhook" if ".webhook." in e.key else "--alert-smtp/--alert-to"
        raise ValueError(f"{option}: {e.expected}") from None
    return data

