"""The fleetwatch agent: the daemon on every machine, its local intake and client API.

Modules: ``identity`` (the uuid), ``collectors`` (psutil stats), ``spool`` (durable
NOTIFY/REGISTER store), ``links`` (router DEALERs and their liveness), ``intake`` (the local
ipc ROUTER), ``daemon`` (the loop), ``client`` and ``send`` (for local processes), ``main``.
"""
