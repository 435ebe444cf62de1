"""Dependencies: parents of hosts and checks (:mod:`.rules`) and their states as the sink
reads them, UNREACHABLE hosts and checks held by a parent (:mod:`.store`)."""
