"""The prometheus sink (:mod:`sinks.prometheus.sink`): the latest value of every host's STATS,
its checks' status and perfdata and the fleetwatch processes' own counters, kept in a bounded
table (:mod:`.table`) under names from :mod:`.names`, served for scrapes by
:mod:`.exposition`; its ``prometheus:`` config section is :mod:`.config`."""
