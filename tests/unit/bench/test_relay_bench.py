"""bench/relay.py --tail: its readers subscribe to what the senders send, and its section of
bench/RESULTS.md is its own (the relay section's heading is the start of its heading)."""

from __future__ import annotations

import sys

from support import ROOT  # noqa: E402
from fleetwatch import protocol

_path = list(sys.path)
sys.path.append(str(ROOT / "bench"))
import relay  # noqa: E402
sys.path[:] = _path      # relay.py puts bench/ first: bench/web.py is not web/


def test_the_readers_topic_is_a_prefix_of_what_the_router_publishes():
    sent = relay.frames_for(200, "bench-0001")[1].decode()
    assert relay.tail_topic() == f"{sent}/".encode()
    assert protocol.envelope(sent, "bench-0001", "bench-router").startswith(relay.tail_topic())


def test_the_tail_section_and_the_relay_section_each_rewrite_their_own(tmp_path):
    path = tmp_path / "RESULTS.md"
    relay.write_results(path, "relay", "| relay 1 |")
    relay.write_results(path, "relay --tail 2", "| tail 1 |", relay.TAIL_HEADING,
                        relay.TAIL_NOTES)
    relay.write_results(path, "relay", "| relay 2 |")
    relay.write_results(path, "relay --tail 2", "| tail 2 |", relay.TAIL_HEADING,
                        relay.TAIL_NOTES)
    text = path.read_text()
    assert text.count(relay.HEADING + "\n") == 1 and text.count(relay.TAIL_HEADING) == 1
    assert "| relay 2 |" in text and "| tail 2 |" in text and "| relay 1 |" not in text
    assert "| tail 1 |" not in text
    assert text.index(relay.HEADING + "\n") < text.index(relay.TAIL_HEADING)
