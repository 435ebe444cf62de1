"""SLOs: objectives over check results or rule states, their error budgets and burn-rate
alerts. What the config says (:mod:`.config`), the arithmetic and the alert state machine
(:mod:`.rules`, pure), the counts and the tick's judgement on the state database
(:mod:`.store`), and what ``fleetwatch slo`` and the console read back (:mod:`.report`)."""
