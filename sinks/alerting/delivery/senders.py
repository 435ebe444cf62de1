"""The sender of each channel type, and one sender per configured channel.

The email and webhook senders are in :mod:`sinks.alerting.delivery.channels`; Slack's is in
:mod:`sinks.alerting.delivery.slack`, imported only by a sink that has a slack channel
(slack-sdk is loaded then, not before); ntfy's in :mod:`sinks.alerting.delivery.ntfy`.
"""

from __future__ import annotations

from sinks.alerting.delivery.channels import EmailSender, WebhookSender
from sinks.alerting.delivery.config import DeliveryConfig

SENDERS = {"email": EmailSender, "webhook": WebhookSender}


def sender_class(kind: str):
    """The sender class of a channel type (``type:`` in the config)."""
    if kind == "slack":
        from sinks.alerting.delivery.slack import SlackSender
        return SlackSender
    if kind == "ntfy":
        from sinks.alerting.delivery.ntfy import NtfySender
        return NtfySender
    return SENDERS[kind]


def senders(config: DeliveryConfig) -> dict:
    """One sender per configured channel, by name."""
    return {name: sender_class(ch.type)(name, ch)
            for name, ch in config.parsed_channels().items()}
