"""Checks: the Nagios state machine a result goes through (:mod:`.rules`), a result's place
in time (:mod:`.ordering`) and the ``check_state`` rows (:mod:`.store`)."""
