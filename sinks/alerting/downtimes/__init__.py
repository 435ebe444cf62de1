"""Downtimes: schedules and what one covers (:mod:`.rules`), its rows and the tick's pass at
a cover's end (:mod:`.store`)."""
