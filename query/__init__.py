"""The query layer: what the fleet looks like, read once for whoever shows it.

``fleetwatch status``, ``status --problems``, ``alerts`` and the console (:mod:`web`) read
the fleet through here, so that a problem, its handling and a host's state are judged by one
code: :mod:`query.fleet` (the state database's rows of a scope and the routers' answers
merged), :mod:`query.handling` (problems and how they are handled) and :mod:`query.pages`
(the scopes of the console's pages and the counts of states, in SQL, so that a page of a
fleet of 10,000 hosts reads its own rows).

It sits above the state database (:mod:`fleetwatch.store`) and the alerting sinks' rules
(:mod:`sinks.alerting`: downtimes, dependencies), and below the commands and the console.
"""
