"""Silences: what one mutes (:mod:`.rules`) and its rows (:mod:`.store`)."""
