"""What an operator does to the fleet, once for every front end: acknowledge a problem
(:mod:`.acks`), plan a downtime (:mod:`.downtimes`), silence alerts (:mod:`.silences`),
forget an agent (:mod:`.forget`), run a check now and wait for its result
(:mod:`.checks`), and the lists of what is in force (:mod:`.alerts` and the three above).

Each is a typed function over the state database (or the routers), answering Python values
and the JSON documents the commands print with ``--json``; the commands
(``fleetwatch ack``, ``downtime``, ``silence``, ``forget``, ``alerts``, ``run``) parse
their arguments, call one and print, and the console calls the same through
:class:`.console.Actions`. A change is one transaction (:func:`.database.write`), in which
the console writes its audit row too. This layer imports the core and the components it
acts on (``fleetwatch.store``, ``sinks.alerting``, ``query``), never a command nor the console
(tests/unit/test_layers.py).
"""
