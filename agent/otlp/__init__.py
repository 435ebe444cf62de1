"""The agent's OTLP/HTTP metrics intake (SPEC.md 4.4.1; docs/operating/otlp.md), imported
only by an agent whose ``otlp`` section is enabled.

:mod:`agent.otlp.points` maps data points to series, :mod:`agent.otlp.series` bounds them
and keeps DELTA state, :mod:`agent.otlp.intake` decodes, counts and answers, and
:mod:`agent.otlp.listener` carries HTTP. The agent's loop sends the series in its own STATS
path (:meth:`agent.otlp.intake.OtlpIntake.messages`).
"""
