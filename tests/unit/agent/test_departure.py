"""An agent's DEREGISTER on its way (agent/departure.py), without sockets: resends with
``retry``/``dup`` and a doubling wait, the ACKs of each sink type it waits for, its deadline."""

from __future__ import annotations

from agent.departure import REFUSED_WAIT, Departure, deregister
from fleetwatch import protocol

UUID = "a1" * 16


def ack(departure, sink, *others):
    return protocol.make("ACK", "router-1", msg_ids=[*others, departure.message.msg_id],
                         sink=sink)


def test_sent_then_resent_until_both_types_acked():
    d = Departure(deregister(UUID, "stop", lambda: 1000.0), until=30.0, ack_timeout=2.0,
                  max_backoff=5.0, wall=lambda: 1000.0)
    assert d.due(0.0) and d.outgoing() is d.message and d.deadline(0.0) == 0.0
    assert d.message.type == "DEREGISTER" and d.message.get("reason") == "stop"
    d.sent(0.0, "tcp://r1:5555")
    assert not d.due(1.9) and d.due(2.0)
    resend = d.outgoing()
    assert (resend.get("retry"), resend.get("dup"), resend.msg_id, resend.ts) == \
        (1, True, d.message.msg_id, 1000.0)
    d.sent(2.0, "tcp://r2:5555")
    assert d.via == "tcp://r2:5555" and d.next_send == 6.0       # 2 s, then 4 s
    d.sent(6.0, "tcp://r1:5555")
    assert d.next_send == 11.0                                    # at most max_backoff
    assert d.acked(ack(d, "registry", "b" * 32)) and not d.done
    assert d.summary() == "not acknowledged by alerting (acknowledged by registry)"
    assert d.acked(ack(d, "registry")) and not d.done             # a resend's ACK again
    assert d.acked(ack(d, "alerting")) and d.done and not d.due(12.0)
    assert d.summary() == "acknowledged by registry and alerting"


def test_the_first_send_is_dated_when_it_leaves_after_every_heartbeat_sent_before_it():
    # built at 1000, the agent still heartbeats (at 1000.4) until a link is up, and sends
    # at 1000.5: an alerting sink takes a heartbeat dated after the DEREGISTER for the agent
    # back, so the DEREGISTER is dated 1000.5 (its msg_id kept: the ACKs name it)
    clock = iter([1000.5, 1001.0, 1002.0])
    d = Departure(deregister(UUID, "stop", lambda: 1000.0), until=30.0,
                  wall=lambda: next(clock))
    built = d.message.msg_id
    first = d.outgoing()
    assert (first.ts, first.msg_id, first.get("retry")) == (1000.5, built, None)
    d.sent(0.0, "tcp://r1:5555", ok=False)              # refused: the next try is later
    assert d.outgoing().ts == 1001.0
    d.sent(0.1, "tcp://r1:5555")
    assert (d.outgoing().ts, d.outgoing().get("retry")) == (1001.0, 1)   # resends keep it
    assert d.acked(protocol.make("ACK", "r", msg_ids=[built], sink="registry"))


def test_acks_of_other_messages_or_without_a_sink_type_do_not_count():
    d = Departure(deregister(UUID, "deregister"), until=10.0)
    assert not d.acked(protocol.make("ACK", "r", msg_ids=["c" * 32], sink="registry"))
    assert d.acked(protocol.make("ACK", "r", msg_ids=[d.message.msg_id]))   # (old sink)
    assert d.acked(ack(d, "history"))
    assert d.waiting == {"registry", "alerting"}


def test_a_full_queue_is_tried_again_shortly_and_nothing_sent_says_so():
    d = Departure(deregister(UUID, "stop"), until=10.0)
    d.sent(1.0, "tcp://r1:5555", ok=False)
    assert d.sends == 0 and d.next_send == 1.0 + REFUSED_WAIT
    assert d.deadline(1.0) == 1.0 + REFUSED_WAIT
    assert d.summary() == "not acknowledged by registry and alerting (no router answered)"
    late = Departure(deregister(UUID, "stop"), until=3.0, ack_timeout=5.0)
    late.sent(0.0, "tcp://r1:5555")
    assert late.deadline(0.0) == 3.0
