"""Freshness: when a scheduled check is stale, and what holds it (:mod:`.rules`); results
heard and the tick's look for stale checks (:mod:`.store`)."""
