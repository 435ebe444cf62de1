"""The ``webhook`` channel's sender: the PagerDuty-shaped event of
:class:`sinks.alerting.delivery.channels.WebhookSender`, or, with a ``template``, the JSON
its template makes (:mod:`sinks.alerting.delivery.services.template`), POSTed with the same rules
(:func:`sinks.alerting.delivery.channels.post_json`: 408, 429 and 5xx retried, other 4xx
refused for good).

The template sees ``event`` (the alert event as the outbox holds it,
:mod:`sinks.alerting.delivery.events`, with its ``link``), ``message`` (its
:class:`sinks.alerting.delivery.message.Message`: label, title, host, check, state,
summary, output, since, parent, link, action, severity, kind, key; ``facts()``), ``link``
(the console's page of the problem, or None) and ``channel`` (the channel's name). A
template that fails on an alert refuses it for good (a :class:`SendError` ``permanent``
naming the template's problem, not the alert's values): the channel fails and its
fallback takes its alerts until the template is fixed.

Here and not in :mod:`sinks.alerting.delivery.channels` because the message
(:mod:`sinks.alerting.delivery.message`) is built from that module.
"""

from __future__ import annotations

from sinks.alerting.delivery import channels, message
from sinks.alerting.delivery.channels import SendError
from sinks.alerting.delivery.services.template import TemplateError, rendered


def context(event: dict, channel: str) -> dict:
    """What a template sees (pure)."""
    return {"event": dict(event), "message": message.of(event), "link": event.get("link"),
            "channel": channel}


class WebhookSender(channels.WebhookSender):
    def payload(self, event: dict):
        """The template's JSON for ``event``; without one, the PagerDuty event."""
        if not self.channel.template:
            return super().payload(event)
        try:
            return rendered(self.channel.template, context(event, self.name))
        except TemplateError as e:
            raise SendError(f"the template of channel {self.name} failed: {e}",
                            permanent=True, status="template") from None
