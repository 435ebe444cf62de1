"""Escalation: told problems and the ``after`` rules they reached (:mod:`.rules`), their
``notified_problems`` rows and the tick's pass (:mod:`.store`)."""
