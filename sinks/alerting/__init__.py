"""The alerting sink (:mod:`sinks.alerting.sink`): check results, silent hosts and
notifications become alerts, delivered through channels. Its ``alerting:`` config section is
:mod:`.config`.

A package per concept, each a pure rules module and a store module (its SQL, and its tick's
pass) named the same way everywhere: :mod:`.checks`, :mod:`.hosts`, :mod:`.silences`,
:mod:`.acks`, :mod:`.downtimes`, :mod:`.dependencies`, :mod:`.freshness`,
:mod:`.escalation`, and :mod:`.delivery` (alert events, routing, the outbox, channels,
grouping and the deliverer). They act on one transaction through a narrow interface,
:class:`.port.Port`, and never import the evaluation nor the sink. A batch's messages become
rows (:mod:`.rows`); one transaction's evaluation of them (:mod:`.evaluation`) acts on a
wider port (:class:`.port.EvaluationPort`), never on the connection; why an alert is held
back is one function (:func:`.holds.held_back`), asked on every path. The sink gives each
transaction its port (:mod:`.transaction`); the state rows are locked as :mod:`.locks` says,
the registry's tables read through :mod:`.lookups`.
"""
