"""How each service is spoken to: one module per channel type beyond email and the
PagerDuty-shaped webhook (:mod:`sinks.alerting.delivery.channels`), each building what its
service gets from :mod:`sinks.alerting.delivery.message` (pure) and sending it
(:mod:`sinks.alerting.delivery.senders` names them; a sink imports only those it has)."""
