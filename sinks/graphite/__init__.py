"""The graphite sink (:mod:`sinks.graphite.sink`): STATS and check perfdata become carbon
datapoints named by :mod:`.paths` and sent by :mod:`.sender`; its ``graphite:`` config section
is :mod:`.config`."""
