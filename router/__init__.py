"""The fleetwatch router: a stateless relay between agents, sinks and control clients.

A router binds four kinds of sockets (SPEC.md, "Topology"): ``agents`` (ROUTER) where agent
DEALERs connect, ``control`` (ROUTER) for sinks, schedulers and the CLI, one PUSH per sink
type, and ``tail`` (XPUB). It routes each agent message by its TYPE frame, stamps it with the
sender's uuid and its own id, and never decodes the bodies it relays.

Modules: :mod:`router.peers` (identity map and expiry), :mod:`router.routes` (the compiled
routing table), :mod:`router.counters` (what was received, relayed, dropped),
:mod:`router.replies` (per-peer reply throttling), :mod:`router.endpoints` (bound and
advertised endpoints), :mod:`router.guard` (rate buckets, admission pacing, clone
detection), :mod:`router.doorman` (CURVE servers and ZAP), :mod:`router.sockets` (the bound
sockets: options, CURVE, endpoints), :mod:`router.relay` (set-up and the socket loop),
:mod:`router.intake` (the agents socket's reading: the hot path, fast and careful, and its
exits to the slow path), :mod:`router.fanout` (sending to each sink type of a route and
upstream; a drop noted and, on a durable route, answered 503), :mod:`router.tail` (the tail
XPUB: SEQ numbers, subscriptions), :mod:`router.report` (the router's own STATS, with the
drops ledger's), :mod:`router.admission` (the agents' slow path: HELLO, key-bound
uuids, limits, security events), :mod:`router.control` (the control socket's requests),
:mod:`router.port` (what those two may do: answer, refuse, relay, reach an agent),
:mod:`router.members` (the routers of the mesh: the member table, merge and expiry),
:mod:`router.mesh` (the gossip DEALERs to the other routers' control sockets, SPEC 4.9),
:mod:`router.sitelinks` (a router's place in a tree of sites: what the relay sees of the
two below), :mod:`router.sites` (a central router's ``sites`` socket: site links, the uuids
behind them), :mod:`router.uplink` (a site router's DEALERs upstream) and
:mod:`router.sitebuffer` (what waits while its uplink is down), SPEC 4.10,
:mod:`router.reload` (what SIGHUP changes while running) and :mod:`router.main` (the
``fleetwatch router`` command).

The imports point one way: the relay makes :class:`router.admission.Admission` and
:class:`router.control.ControlDesk` from the peers, the counters, the limits, its clocks and
a :class:`router.port.RelayPort` over its socket; they are logic fed frames, never see a
socket or the relay, and are unit tested with a recording port and a fake clock. The
relay's parts (intake, fanout, tail, report, site links) are made by it with what each
needs, and call back into it only through the callables it hands them. The desk
merges a MEMBERS request's list through the mesh's ``merge`` (no socket) into the member
table, which the mesh ticks each gossip round. The relay polls the sites socket and the
uplink's DEALERs through its :class:`router.sitelinks.SiteLinks` as it polls the mesh's; the
control desk reaches an agent behind a site through ``Sites.to_site`` (its ``beyond``),
never the socket.
"""
