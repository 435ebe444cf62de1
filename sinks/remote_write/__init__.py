"""The remote_write sink (:mod:`sinks.remote_write.sink`): the fleet's series sent to a
Prometheus remote-write receiver (Prometheus, VictoriaMetrics, Mimir, Thanos) as remote
write 1.0 (:mod:`.wire`), named and labelled by :mod:`.samples`, queued in memory and on
disk by :mod:`.queue`, sent by :mod:`.sender` over :mod:`.client` connections; what the
queue's bound drops is reported to the lake by :mod:`.drops`. Its ``remote_write:`` config
section is :mod:`.config` (importing it needs no extra)."""
