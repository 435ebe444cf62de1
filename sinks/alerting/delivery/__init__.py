"""Delivery: alert events (:mod:`.events`) routed by rules (:mod:`.rules`) into the outbox
(:mod:`.store`), sent by the deliverer (:mod:`.deliverer`) through channels
(:mod:`.channels`), grouped where a channel asks (:mod:`.grouping`); the
``alerting.delivery`` settings (:mod:`.config`)."""
