"""The sender of each channel type, and one sender per configured channel.

The email sender is in :mod:`sinks.alerting.delivery.channels` (the webhook's base too:
:mod:`sinks.alerting.delivery.services.webhook` adds its templates); every other
type's in a module of its own, named here and imported only by a sink that has a channel of
that type (a service's library, such as slack-sdk or Apprise, is loaded then, not before).

A sender has ``name``, ``channel``, ``timeout`` and ``send(event, ref) -> Receipt`` (raising
:class:`sinks.alerting.delivery.channels.SendError`); it may have ``send_group(events, ref,
title)`` (one message for a group of alerts) and ``threads = True`` with ``send(event, ref,
thread=None)`` (a follow-up gets the message id of its problem's first message).
"""

from __future__ import annotations

import importlib

from sinks.alerting.delivery.config import DeliveryConfig

#: channel type -> "module:class" of its sender
SENDERS = {
    "email": "sinks.alerting.delivery.channels:EmailSender",
    "webhook": "sinks.alerting.delivery.services.webhook:WebhookSender",
    "slack": "sinks.alerting.delivery.services.slack:SlackSender",
    "ntfy": "sinks.alerting.delivery.services.ntfy:NtfySender",
    "teams": "sinks.alerting.delivery.services.teams:TeamsSender",
    "matrix": "sinks.alerting.delivery.services.matrix:MatrixSender",
    "opsgenie": "sinks.alerting.delivery.services.opsgenie:OpsgenieSender",
    "telegram": "sinks.alerting.delivery.services.telegram:TelegramSender",
    "discord": "sinks.alerting.delivery.services.discord:DiscordSender",
    "mattermost": "sinks.alerting.delivery.services.mattermost:MattermostSender",
    "pushover": "sinks.alerting.delivery.services.pushover:PushoverSender",
    "alertmanager": "sinks.alerting.delivery.services.alertmanager:AlertmanagerSender",
    "apprise": "sinks.alerting.delivery.services.apprise:AppriseSender",
}


def sender_class(kind: str):
    """The sender class of a channel type (``type:`` in the config)."""
    module, _, name = SENDERS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def senders(config: DeliveryConfig) -> dict:
    """One sender per configured channel, by name."""
    return {name: sender_class(ch.type)(name, ch)
            for name, ch in config.parsed_channels().items()}
