"""Alerts from outside the fleet (Prometheus, vmalert) as checks of its hosts: what the
console received as an Alertmanager (table ``prometheus_alerts``), judged by the alerting
sinks' tick into results (:mod:`sinks.alerting.external.runner`)."""
