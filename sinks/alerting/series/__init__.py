"""Rules on the series the agents send (issue 35)."""
