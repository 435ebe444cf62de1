"""Hosts: agents and local processes heard or gone silent (:mod:`.rules`), their
``host_state`` rows (:mod:`.store`), agents that leave (:mod:`.departures`) and a sender's
clock against the sink's (:mod:`.skew`)."""
