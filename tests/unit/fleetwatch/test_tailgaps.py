"""A tail subscriber counts what it lost from the SEQ numbers (fleetwatch/tailgaps.py): per
router and type when it follows whole types, per sender when it follows some agents; a
count that starts again (a router restarted) is no loss; a router without SEQ is told
apart."""

from __future__ import annotations

from fleetwatch import protocol
from fleetwatch.protocol import Relayed
from fleetwatch.tailgaps import Gaps, Lost


def seen(gaps: Gaps, type_: str, uuid: str, router: str, seq):
    return gaps.seen(Relayed(uuid, router, protocol.make(type_, uuid), seq))


def test_a_whole_type_follows_the_type_s_numbers_per_router():
    gaps = Gaps()
    assert seen(gaps, "NOTIFY", "a", "r1", (7, 1)) is None        # the first: a baseline
    assert seen(gaps, "NOTIFY", "b", "r1", (8, 1)) is None        # another sender: in turn
    assert seen(gaps, "STATS", "a", "r1", (100, 40)) is None      # another type: its own
    assert seen(gaps, "NOTIFY", "a", "r2", (1, 1)) is None        # another router: its own
    assert seen(gaps, "NOTIFY", "a", "r1", (12, 2)) == Lost("r1", "NOTIFY", None, 3, 12)
    assert seen(gaps, "NOTIFY", "a", "r2", (2, 2)) is None
    assert seen(gaps, "STATS", "a", "r1", (102, 41)) == Lost("r1", "STATS", None, 1, 102)
    assert gaps.lost == 4 and gaps.restarts == 0


def test_some_senders_follow_the_sender_s_numbers():
    gaps = Gaps(by_sender=True)
    assert seen(gaps, "NOTIFY", "a", "r1", (7, 1)) is None
    assert seen(gaps, "NOTIFY", "a", "r1", (9, 2)) is None        # the type's gap: others'
    assert seen(gaps, "NOTIFY", "b", "r1", (10, 4)) is None
    assert seen(gaps, "NOTIFY", "a", "r1", (20, 5)) == Lost("r1", "NOTIFY", "a", 2, 5)
    assert gaps.lost == 2


def test_a_count_that_starts_again_is_no_loss_and_no_seq_is_told_apart():
    gaps = Gaps()
    seen(gaps, "NOTIFY", "a", "r1", (50, 1))
    assert seen(gaps, "NOTIFY", "a", "r1", (1, 1)) is None        # r1 restarted
    assert seen(gaps, "NOTIFY", "a", "r1", (2, 2)) is None
    assert seen(gaps, "NOTIFY", "a", "r1", None) is None          # an older router
    assert (gaps.lost, gaps.restarts, gaps.unnumbered) == (0, 1, 1)
