"""The fleetwatch agent: the daemon on every machine, its local intake and client API.

Modules: ``identity`` (the uuid), ``collectors`` (psutil stats), ``spool`` (durable
NOTIFY/REGISTER store: a package of ``store``, ``acks``, ``schedule``, ``held``), ``links``
(router DEALERs and their liveness), ``routers`` (HELLO, heartbeats, what routers send),
``outbox`` (every send, the STATS queue, spooled resends), ``intake`` (the local ipc ROUTER),
``reception`` (what local processes send, on to the spool), ``runs``, ``runner`` and
``execute`` (plugins), ``selfstats`` (the agent's own metrics), ``wakeup`` (signals),
``daemon`` (the loop), ``client`` and ``send`` (for local processes), ``main``.
"""
