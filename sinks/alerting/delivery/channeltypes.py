"""The settings of each channel type (``type:`` in ``alerting.delivery.channels``), one
dataclass per type, checked when the config is loaded (a wrong or misspelt key stops the
sink at start, naming it).

Every type shares :class:`ChannelBase`'s settings: ``timeout``, ``fallback``, ``group_wait``
and ``group_by``. Secrets (tokens, API keys, webhook URLs, which carry their own token) are
never in the config: each is read from a file when sending (``*_file``), so that the file's
mode guards it and neither a log line, ``ps`` nor the console shows it. The senders are in
the type's own module (:mod:`sinks.alerting.delivery.senders` names them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from fleetwatch.config import setting

#: what a channel may group its alerts by (``group_by``), :mod:`sinks.alerting.delivery.grouping`
GROUP_KEYS = ("host", "severity", "check", "kind")
#: the longest ``group_wait``: an hour (alerts held longer are no longer news)
GROUP_WAIT_MAX = 3600.0
FALLBACK_HELP = ("another channel that gets this one's alerts while it fails "
                 "(docs/operating/alerts.md, channels that fail)")


def check_url(value: str, key: str, what: str = "an http:// or https:// URL") -> None:
    """ValueError("KEY: expected ...") unless ``value`` is an http(s) URL with a host."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{key}: expected {what}, got {value[:60]!r}")


def check_grouping(channel) -> None:
    """The ``group_wait`` and ``group_by`` of a channel
    (:mod:`sinks.alerting.delivery.grouping`)."""
    if not 0 <= channel.group_wait <= GROUP_WAIT_MAX:
        raise ValueError(f"group_wait: expected 0 to {GROUP_WAIT_MAX:g} seconds")
    for key in channel.group_by:
        if key not in GROUP_KEYS:
            raise ValueError(f"group_by: expected some of {', '.join(GROUP_KEYS)}, "
                             f"got {str(key)[:40]!r}")
    if len(set(channel.group_by)) != len(channel.group_by):
        raise ValueError("group_by: a key is named twice")


@dataclass(frozen=True)
class ChannelBase:
    """What every channel type has; a type redeclares ``type`` (its default is the type's
    name) and may redeclare a field to give it its own help, keeping its place."""

    type: str = setting("", "the channel's kind")
    timeout: float = setting(10.0, "seconds to wait for the service's answer")
    fallback: str = setting("", FALLBACK_HELP)
    group_wait: float = setting(0.0, "seconds an alert waits for others of its group; then "
                                     "the group goes out as one message listing them (0: "
                                     "each alert at once)")
    group_by: list[str] = setting(factory=list, help=f"what makes a group: some of "
                                                      f"{', '.join(GROUP_KEYS)} (empty: one "
                                                      f"group for the channel)")

    def validate(self):
        if self.timeout <= 0:
            raise ValueError("timeout: expected a positive number of seconds")
        check_grouping(self)


@dataclass(frozen=True)
class EmailChannel(ChannelBase):
    type: str = setting("email", "the channel's kind: alerts sent by SMTP")
    timeout: float = setting(10.0, "seconds for the whole SMTP conversation step")
    host: str = setting("localhost", "SMTP server")
    port: int = setting(25, "SMTP port (587 for submission with STARTTLS)")
    starttls: bool = setting(False, "upgrade the connection with STARTTLS (required when set)")
    ca_file: str = setting("", "CA bundle to verify the server's certificate (default: system)")
    username: str = setting("", "SMTP AUTH user (none: no AUTH)")
    password_file: str = setting("", "file holding the SMTP AUTH password (read when sending)")
    allow_plaintext_auth: bool = setting(False, "allow AUTH without starttls: the password "
                                                "crosses the network in clear (warned at start)")
    sender: str = setting("", "the From address (YAML key `from`; default fleetwatch@HOST)",
                          key="from")
    to: list[str] = setting(factory=list, help="recipients: one message per alert (or per "
                                               "group, with group_wait) to all")
    group_list: int = setting(50, "alerts a grouped message lists one per line; the rest "
                                  "are counted (\"... and 480 more\")")

    def validate(self):
        if not self.to:
            raise ValueError("to: expected at least one recipient address")
        for key, addr in [*(("to", a) for a in self.to), ("from", self.sender)]:
            if addr and ("@" not in addr or any(c in addr for c in "\r\n<>, ")):
                raise ValueError(f"{key}: expected plain addresses like ops@example.com, "
                                 f"got {addr[:60]!r}")
        if not 0 < self.port < 65536:
            raise ValueError("port: expected 1 to 65535")
        if self.username and not self.password_file:
            raise ValueError("password_file: expected with username (the password itself "
                             "is never in the config)")
        if self.username and not self.starttls and not self.allow_plaintext_auth:
            raise ValueError("starttls: expected true with username (AUTH without STARTTLS "
                             "sends the password in clear; allow_plaintext_auth: true "
                             "accepts that)")
        super().validate()
        if self.group_list < 1:
            raise ValueError("group_list: expected at least 1")


@dataclass(frozen=True)
class WebhookChannel(ChannelBase):
    type: str = setting("webhook", "the channel's kind: alerts POSTed as JSON over HTTP(S)")
    timeout: float = setting(10.0, "seconds to wait for the receiver's answer")
    group_wait: float = setting(0.0, "seconds an alert waits for others of its group; then "
                                     "the group's events are POSTed, still one per alert key "
                                     "(0: each at once)")
    url: str = setting("", "http(s) URL the JSON event is POSTed to")
    routing_key: str = setting("", "the receiver's integration key (PagerDuty routing_key)")
    headers: dict[str, str] = setting(factory=dict, help="extra HTTP headers (e.g. Authorization)")
    template: str = setting("", "a Jinja2 template (sandboxed) whose output is the JSON "
                                "POSTed instead of the PagerDuty-shaped event "
                                "(docs/operating/channels.md, webhook)")

    def validate(self):
        check_url(self.url, "url")
        for name, value in self.headers.items():
            if not name or any(c in name + value for c in "\r\n") or ":" in name:
                raise ValueError(f"headers: bad header {name[:40]!r}")
        if self.template:               # a syntax error stops the sink at start
            from sinks.alerting.delivery.services.template import compiled
            compiled(self.template)
        super().validate()


@dataclass(frozen=True)
class SlackChannel(ChannelBase):
    type: str = setting("slack", "the channel's kind: alerts posted to Slack (slack-sdk: "
                                 "sinks/alerting/delivery/services/slack.py)")
    timeout: float = setting(10.0, "seconds to wait for Slack's answer")
    token_file: str = setting("", "file holding the bot token (xoxb-...: chat:write), read "
                                  "when sending; with `channel`")
    channel: str = setting("", "the Slack channel the bot posts to (its ID, C0123..., or "
                                "#name)")
    webhook_url_file: str = setting("", "instead of a token: file holding an incoming "
                                        "webhook's URL (no threads, no updates)")
    api_url: str = setting("https://slack.com/api/", "Slack's Web API (another: a proxy)")

    def validate(self):
        if bool(self.token_file) == bool(self.webhook_url_file):
            raise ValueError("token_file: expected a bot token's file (with channel) or "
                             "webhook_url_file, one of them")
        if self.token_file and not self.channel:
            raise ValueError("channel: expected the Slack channel the bot posts to")
        if self.webhook_url_file and self.channel:
            raise ValueError("channel: an incoming webhook posts where it was made for; "
                             "leave channel out")
        check_url(self.api_url, "api_url")
        super().validate()


@dataclass(frozen=True)
class NtfyChannel(ChannelBase):
    type: str = setting("ntfy", "the channel's kind: push notifications through an ntfy "
                                "server (sinks/alerting/delivery/services/ntfy.py)")
    timeout: float = setting(10.0, "seconds to wait for the server's answer")
    url: str = setting("https://ntfy.sh", "the ntfy server")
    topic: str = setting("", "the topic the alerts are published to (1 to 64 letters, "
                             "digits, - or _)")
    token_file: str = setting("", "file holding an access token (tk_...), read when "
                                  "sending (none: no Authorization)")

    def validate(self):
        check_url(self.url, "url", "the ntfy server's http:// or https:// address")
        if urlsplit(self.url).query:
            raise ValueError(f"url: expected the ntfy server's http:// or https:// address, "
                             f"got {self.url[:60]!r}")
        if not re.fullmatch(r"[-_A-Za-z0-9]{1,64}", self.topic):
            raise ValueError(f"topic: expected 1 to 64 letters, digits, - or _, got "
                             f"{self.topic[:70]!r}")
        super().validate()


@dataclass(frozen=True)
class TeamsChannel(ChannelBase):
    type: str = setting("teams", "the channel's kind: an Adaptive Card posted to a Microsoft "
                                 "Teams channel through a Workflows (Power Automate) webhook "
                                 "(sinks/alerting/delivery/services/teams.py)")
    webhook_url_file: str = setting("", "file holding the workflow's HTTP POST URL (it "
                                        "carries its own signature: a secret)")

    def validate(self):
        if not self.webhook_url_file:
            raise ValueError("webhook_url_file: expected the file holding the workflow's URL")
        super().validate()


@dataclass(frozen=True)
class MatrixChannel(ChannelBase):
    type: str = setting("matrix", "the channel's kind: messages in a Matrix room through "
                                  "the client-server API (sinks/alerting/delivery/services/matrix.py)")
    homeserver: str = setting("", "the homeserver's client API address "
                                  "(https://matrix.example.com)")
    room: str = setting("", "the room's ID (!abc...), which the token's user has joined")
    token_file: str = setting("", "file holding the user's access token, read when sending")

    def validate(self):
        check_url(self.homeserver, "homeserver")
        if not self.room.startswith("!") or len(self.room) > 255 or \
                any(c.isspace() or c == "/" for c in self.room):
            raise ValueError(f"room: expected a room ID like !abc:example.com, got "
                             f"{self.room[:60]!r}")
        if not self.token_file:
            raise ValueError("token_file: expected the file holding the access token")
        super().validate()


@dataclass(frozen=True)
class OpsgenieChannel(ChannelBase):
    type: str = setting("opsgenie", "the channel's kind: alerts created, acknowledged and "
                                    "closed by alias in Opsgenie or Jira Service Management "
                                    "(sinks/alerting/delivery/services/opsgenie.py)")
    api_url: str = setting("https://api.opsgenie.com", "the alert API's base "
                                                       "(https://api.eu.opsgenie.com; for "
                                                       "Jira Service Management: "
                                                       "https://api.atlassian.com/jsm/ops/"
                                                       "integration)")
    api_key_file: str = setting("", "file holding the integration's API key (GenieKey)")
    responders: list[str] = setting(factory=list, help="teams notified (their names)")
    tags: list[str] = setting(factory=list, help="tags added to every alert (at most 20, "
                                                 "each at most 50 characters)")

    def validate(self):
        check_url(self.api_url, "api_url")
        if not self.api_key_file:
            raise ValueError("api_key_file: expected the file holding the API key")
        for team in self.responders:
            if not team.strip() or len(team) > 100:
                raise ValueError(f"responders: expected teams' names, got {team[:40]!r}")
        if len(self.tags) > 20 or any(not 0 < len(t) <= 50 or any(c.isspace() or c == ","
                                                                    for c in t)
                                      for t in self.tags):
            raise ValueError("tags: expected at most 20 tags, each 1 to 50 characters "
                             "without spaces or commas (Opsgenie's limits)")
        super().validate()


@dataclass(frozen=True)
class TelegramChannel(ChannelBase):
    type: str = setting("telegram", "the channel's kind: messages from a Telegram bot "
                                    "(sinks/alerting/delivery/services/telegram.py)")
    api_url: str = setting("https://api.telegram.org", "the Bot API server")
    token_file: str = setting("", "file holding the bot's token (123456:ABC...)")
    chat_id: str = setting("", "the chat, group or channel (-100..., or @channelname)")

    def validate(self):
        check_url(self.api_url, "api_url")
        if not self.token_file:
            raise ValueError("token_file: expected the file holding the bot's token")
        if not re.fullmatch(r"-?\d{1,20}|@[A-Za-z0-9_]{5,32}", self.chat_id):
            raise ValueError(f"chat_id: expected a chat's number or @channelname, got "
                             f"{self.chat_id[:40]!r}")
        super().validate()


@dataclass(frozen=True)
class DiscordChannel(ChannelBase):
    type: str = setting("discord", "the channel's kind: messages through a Discord webhook "
                                   "(sinks/alerting/delivery/services/discord.py)")
    webhook_url_file: str = setting("", "file holding the webhook's URL (it carries its "
                                        "token)")

    def validate(self):
        if not self.webhook_url_file:
            raise ValueError("webhook_url_file: expected the file holding the webhook's URL")
        super().validate()


@dataclass(frozen=True)
class MattermostChannel(ChannelBase):
    type: str = setting("mattermost", "the channel's kind: messages through a Mattermost "
                                      "incoming webhook (sinks/alerting/delivery/"
                                      "mattermost.py)")
    webhook_url_file: str = setting("", "file holding the incoming webhook's URL")
    channel: str = setting("", "another channel than the webhook's own, by name (ops, or "
                                "@user for a direct message), when the webhook is not "
                                "locked to its own")

    def validate(self):
        if not self.webhook_url_file:
            raise ValueError("webhook_url_file: expected the file holding the webhook's URL")
        if self.channel and not re.fullmatch(r"[#@]?[a-z0-9][a-z0-9._-]{0,63}", self.channel):
            raise ValueError(f"channel: expected a channel's name like ops (or @user), got "
                             f"{self.channel[:70]!r}")
        super().validate()


@dataclass(frozen=True)
class PushoverChannel(ChannelBase):
    type: str = setting("pushover", "the channel's kind: push notifications through Pushover "
                                    "(sinks/alerting/delivery/services/pushover.py)")
    api_url: str = setting("https://api.pushover.net/1/messages.json", "Pushover's "
                                                                       "messages API")
    token_file: str = setting("", "file holding the application's API token")
    user_key_file: str = setting("", "file holding the user's or group's key")

    def validate(self):
        check_url(self.api_url, "api_url")
        if not self.token_file or not self.user_key_file:
            raise ValueError("token_file: expected the application token's file and "
                             "user_key_file, both")
        super().validate()


@dataclass(frozen=True)
class AlertmanagerChannel(ChannelBase):
    type: str = setting("alertmanager", "the channel's kind: the fleet's alerts posted to an "
                                        "Alertmanager's /api/v2/alerts, resolved there too "
                                        "(sinks/alerting/delivery/services/alertmanager.py)")
    url: str = setting("", "the Alertmanager's address (http://alertmanager:9093)")
    labels: dict[str, str] = setting(factory=dict, help="labels added to every alert "
                                                         "(e.g. team: ops)")
    token_file: str = setting("", "file holding a bearer token, when a proxy in front of "
                                  "the Alertmanager asks for one")
    ends_after: float = setting(7 * 86400.0, "a firing alert is posted with its endsAt this "
                                             "many seconds ahead (the Alertmanager resolves "
                                             "it then if no recovery came); a recovery "
                                             "posts endsAt now")

    #: the labels the fleet sets on each alert (:mod:`sinks.alerting.delivery.services.alertmanager`)
    FLEET_LABELS = ("alertname", "host", "uuid", "check", "severity", "fleetwatch_key")

    def validate(self):
        check_url(self.url, "url")
        for name, value in self.labels.items():
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name):
                raise ValueError(f"labels: expected label names like team, got "
                                 f"{name[:40]!r}")
            if name in self.FLEET_LABELS:
                raise ValueError(f"labels: {name} is set by the fleet on every alert "
                                 f"(its own: {', '.join(self.FLEET_LABELS)})")
            if not str(value):
                raise ValueError(f"labels: {name} has an empty value (the Alertmanager "
                                 f"drops empty labels)")
        if self.ends_after <= 0:
            raise ValueError("ends_after: expected a positive number of seconds")
        super().validate()


@dataclass(frozen=True)
class AppriseChannel(ChannelBase):
    type: str = setting("apprise", "the channel's kind: any of the services Apprise speaks "
                                   "(its URLs), without threads or receipts "
                                   "(sinks/alerting/delivery/services/apprise.py)")
    urls_file: str = setting("", "file holding Apprise URLs, one per line (they carry "
                                 "their services' secrets)")

    def validate(self):
        if not self.urls_file:
            raise ValueError("urls_file: expected the file holding the Apprise URLs")
        super().validate()


CHANNEL_TYPES = {"email": EmailChannel, "webhook": WebhookChannel, "slack": SlackChannel,
                 "ntfy": NtfyChannel, "teams": TeamsChannel, "matrix": MatrixChannel,
                 "opsgenie": OpsgenieChannel, "telegram": TelegramChannel,
                 "discord": DiscordChannel, "mattermost": MattermostChannel,
                 "pushover": PushoverChannel, "alertmanager": AlertmanagerChannel,
                 "apprise": AppriseChannel}
Channel = ChannelBase
