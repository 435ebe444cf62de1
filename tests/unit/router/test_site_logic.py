"""Sites (SPEC 4.10) without sockets: the envelope's path, the site buffer (memory, disk
spool, order, oldest dropped), the central router's table of site links and uuids."""

from __future__ import annotations

import os
import pytest

from fleetwatch import protocol
from fleetwatch.protocol import ProtocolError
from router.sitebuffer import SiteBuffer
from router.sites import SiteTable
from support.clock import Clock


# ---------------------------------------------------------------- envelope path
@pytest.mark.parametrize("frame, path", [
    (b"NOTIFY/u-1/router-1", ("router-1",)),
    (b"NOTIFY/u-1/central-1,site-1", ("central-1", "site-1")),
    (b"STATS/u-1/c,s1,s2,s3", ("c", "s1", "s2", "s3")),
])
def test_path_parses_relaying_router_first(frame, path):
    type_, uuid, got = protocol.parse_path(frame)
    assert (type_, uuid, got) == (frame.split(b"/")[0].decode(), "u-1", path)
    assert protocol.parse_envelope(frame)[2] == path[0]


@pytest.mark.parametrize("frame", [
    b"NOTIFY/u-1/", b"NOTIFY/u-1/a,,b", b"NOTIFY/u-1/a,", b"NOTIFY/u-1/,a",
    b"NOTIFY/u-1/a b", b"NOTIFY/u-1/" + b",".join([b"r"] * (protocol.MAX_PATH + 1)),
    b"NOTIFY/u-1/" + b"r" * 2000,
])
def test_bad_paths_are_400(frame):
    with pytest.raises(ProtocolError) as e:
        protocol.parse_path(frame)
    assert e.value.status == protocol.BAD_REQUEST


def test_stamped_puts_the_router_first_and_decode_relayed_says_the_path():
    frame = protocol.stamped(b"NOTIFY/u-1/site-1,site-2", b"central-1")
    assert frame == b"NOTIFY/u-1/central-1,site-1,site-2"
    msg = protocol.make("NOTIFY", "u-1", severity="error", text="x")
    relayed = protocol.decode_relayed([protocol.SIGNATURE, frame, protocol.encode_body(msg)])
    assert relayed.router == "central-1"
    assert relayed.path == ("central-1", "site-1", "site-2")
    one = protocol.decode_relayed(protocol.encode_relayed(msg, "u-1", "router-1"))
    assert (one.router, one.path) == ("router-1", ())


def test_decode_down_needs_a_target_for_ack_and_run():
    ack = protocol.make("ACK", "central-1", msg_ids=["m"])
    assert protocol.decode_down(protocol.encode_down(ack, "u-1"))[0] == "u-1"
    with pytest.raises(ProtocolError):
        protocol.decode_down(protocol.encode_down(ack, ""))
    beat = protocol.make("HEARTBEAT", "central-1")
    assert protocol.decode_down(protocol.encode_down(beat))[0] == ""
    hello = protocol.make("HELLO", "x", hostname="h", heartbeat=1.0)
    with pytest.raises(ProtocolError) as e:
        protocol.decode_down(protocol.encode_down(hello))
    assert e.value.status == protocol.NOT_ALLOWED


# ---------------------------------------------------------------- the buffer
def drain(buf: SiteBuffer) -> list[int]:
    out = []
    while (item := buf.peek()) is not None:
        out.append(int(item[1]))
        buf.pop()
    return out


def fill(buf: SiteBuffer, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        buf.push(b"STATS/u/site-1", str(i).encode())


def test_memory_only_keeps_the_newest_in_order_and_counts_the_rest():
    buf = SiteBuffer(100)
    fill(buf, 250)
    assert len(buf) == 100 and buf.dropped == 150
    assert drain(buf) == list(range(150, 250))
    assert buf.delivered == 100


def test_spool_keeps_order_across_memory_and_disk(tmp_path):
    buf = SiteBuffer(10, str(tmp_path), 10**6)
    fill(buf, 95)
    assert buf.spilled > 0 and buf.dropped == 0 and len(buf) == 95
    got = drain(buf)
    assert got == list(range(95))
    assert not list(tmp_path.iterdir())


def test_full_spool_drops_its_oldest_segments(tmp_path):
    buf = SiteBuffer(10, str(tmp_path), 200)     # about a segment of 5 records
    fill(buf, 100)
    got = drain(buf)
    assert buf.dropped == 100 - len(got) > 0
    assert got == sorted(got) and got[-1] == 99      # the newest kept, in order


def test_interleaved_push_and_delivery_stay_in_order(tmp_path):
    buf = SiteBuffer(8, str(tmp_path), 10**6)
    fill(buf, 30)
    got = [int(buf.peek()[1])]
    buf.pop()
    fill(buf, 30, 30)
    got += drain(buf)
    assert got == list(range(60))


def test_a_restart_delivers_what_the_spool_holds_first(tmp_path):
    buf = SiteBuffer(4, str(tmp_path), 10**6)
    fill(buf, 20)
    on_disk = buf.disk_messages
    again = SiteBuffer(4, str(tmp_path), 10**6)
    assert len(again) == on_disk > 0
    assert drain(again) == list(range(on_disk))


def test_a_partial_record_is_dropped_and_counted(tmp_path):
    buf = SiteBuffer(4, str(tmp_path), 10**6)
    fill(buf, 6)                                # 0 and 1 on disk, 2 to 5 in memory
    path = next(tmp_path.iterdir())
    path.write_bytes(path.read_bytes()[:-1])
    assert drain(buf) == [0, 2, 3, 4, 5]
    assert buf.dropped == 1


# ---------------------------------------------------------------- site links
def test_site_table_learns_uuids_bounds_them_and_expires_links():
    clock = Clock(100.0)
    table = SiteTable(expire_intervals=3, max_agents=2, clock=clock)
    link = table.hello(b"r1", "site-1", "edge", 1.0)
    assert table.learn("a", link) and table.learn("b", link)
    assert not table.learn("c", link)               # above max_agents
    assert table.uuids["a"] is link
    other = table.hello(b"r2", "site-2", "edge2", 1.0)
    assert table.learn("a", other)                  # moved: the newest link speaks for it
    assert table.uuids["a"] is other and "a" not in link.uuids
    again = table.hello(b"r3", "site-1", "edge", 1.0)   # site-1 reconnected
    assert b"r1" not in table.links and table.sites["site-1"] is again
    assert "b" not in table.uuids
    clock.advance(3.5)
    assert {l.site for l in table.expire()} == {"site-1", "site-2"}
    assert not table.uuids and not table.links


def test_a_site_link_speaks_for_no_uuid_that_is_elsewhere():
    """Issue 31: not for an agent attached to this router, a router linked here or this
    router itself, nor for a uuid heard through another link in the last HELD seconds
    (the times are the caller's epoch seconds)."""
    from router.sites import HELD
    attached = {"direct": object()}                 # the live view of Peers.uuids
    table = SiteTable(expire_intervals=3, max_agents=10, clock=Clock(100.0),
                      router_id="central-1", attached=attached)
    one = table.hello(b"r1", "site-1", "edge", 1.0)
    two = table.hello(b"r2", "site-2", "edge2", 1.0)
    for uuid in ("direct", "site-2", "central-1"):
        assert table.elsewhere(uuid, one, 1000.0), uuid
    assert table.elsewhere("site-1", one, 1000.0)   # its own id, not as its own
    assert table.elsewhere("behind", one, 1000.0) is None and table.learn("behind", one)
    table.times["behind"][1] = 1000.0
    assert "behind site site-1" in table.elsewhere("behind", two, 1000.0 + HELD - 1)
    assert table.elsewhere("behind", one, 1000.0 + HELD - 1) is None
    assert table.elsewhere("behind", two, 1000.0 + HELD) is None   # silent there: it moved
    attached["behind"] = object()                   # now attached here: never the site's
    assert "attached to router central-1" in table.elsewhere("behind", one, 1000.0)


def test_site_links_are_bounded(monkeypatch):
    from router import sites
    monkeypatch.setattr(sites, "MAX_LINKS", 2)
    table = SiteTable(expire_intervals=3, max_agents=2, clock=Clock(100.0))
    assert table.hello(b"r1", "s1", "h", 1.0) and table.hello(b"r2", "s2", "h", 1.0)
    assert table.hello(b"r3", "s3", "h", 1.0) is None
    assert table.hello(b"r4", "s1", "h", 1.0) is not None     # a site linked again: taken


# ---------------------------------------------------------------- the site as a parent
@pytest.mark.parametrize("uuid, path, parent", [
    ("agent-1", (), None),                                  # straight to its router
    ("agent-1", ("central-1", "site-1"), "site-1"),
    ("agent-1", ("central-1", "site-1", "site-2"), "site-2"),
    ("site-1", ("central-1", "site-1"), None),              # the site's own HELLO
    ("site-2", ("central-1", "site-1", "site-2"), "site-1"),
])
def test_an_agent_behind_a_site_has_it_as_a_parent(uuid, path, parent):
    from sinks.registry import site_parent
    msg = protocol.make("HELLO", uuid, hostname="h", heartbeat=1.0)
    relayed = protocol.Relayed(uuid, path[0] if path else "router-1", msg, path=path)
    assert site_parent(relayed) == parent


# ---------------------------------------------------------------- the site's config
@pytest.mark.parametrize("text, key, phrase", [
    ("upstream: [central-1:5570]\n", "upstream[0]", "a sites endpoint"),
    ("site: {interval: 0}\n", "site.interval", "0.05 to 60 seconds"),
    ("site: {expire_intervals: 1}\n", "site.expire_intervals", "2 to 1000"),
    ("site: {buffer_messages: 0}\n", "site.buffer_messages", "at least 1"),
    ("site: {spool_bytes: -1}\n", "site.spool_bytes", "0 or more"),
    ("site: {max_agents: 0}\n", "site.max_agents", "at least 1"),
    ("upstream: [tcp://c:5570]\nsecurity: {curve: true, server_key: k, agent_keys: a, "
     "backend_keys: b}\n", "site.key", "required with curve when upstream is set"),
    ("bind: {sites: 'tcp://*:5570'}\nsecurity: {curve: true, server_key: k, agent_keys: a, "
     "backend_keys: b}\n", "security.sites", "required with curve when bind.sites is set"),
])
def test_site_settings_are_checked_in_one_line(tmp_path, text, key, phrase):
    from fleetwatch.config import ConfigError, load
    from router.config import RouterConfig
    path = tmp_path / "router.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load(RouterConfig, str(path))
    line = str(e.value)
    assert "\n" not in line and str(path) in line and key in line and phrase in line


# ---------------------------------------------------------------- the uplink
class FakeDealer:
    """A DEALER that takes messages while ``up`` (three frames each), else raises Again."""

    def __init__(self):
        self.up, self.sent, self.frames = True, [], []

    def send(self, frame, flags=0):
        import zmq
        if not self.frames and not self.up:
            raise zmq.Again()
        self.frames.append(frame)
        if not flags & zmq.SNDMORE:
            self.sent.append(self.frames[1:])
            self.frames = []

    def send_multipart(self, frames, flags=0):
        for n, frame in enumerate(frames):
            self.send(frame, 2 if n < len(frames) - 1 else 0)


def uplink_with(dealer: FakeDealer, clock: Clock, buffer_messages: int = 100):
    from router.config import RouterSite
    from router.uplink import Link, Uplink
    up = Uplink("site-1", ["tcp://c:1"], RouterSite(buffer_messages=buffer_messages), None,
                clock=clock, monotonic=clock)
    link = Link("tcp://c:1", dealer)
    up.links.append(link)
    return up, link


def relay_through(sender, n: int) -> None:
    sender(protocol.SIGNATURE, 2)
    sender(b"STATS/u-1/site-1", 2)
    sender(str(n).encode(), 0)


def test_uplink_sends_while_up_buffers_while_down_and_delivers_in_order():
    import zmq
    clock, dealer = Clock(100.0), FakeDealer()
    up, link = uplink_with(dealer, clock)
    stats, notify = up.sender(b"STATS", False), up.sender(b"NOTIFY", True)
    with pytest.raises(zmq.Again):              # no link up: a durable type is not taken
        notify(protocol.SIGNATURE, 2)
    relay_through(stats, 0)                     # a best-effort one waits
    assert len(up.buffer) == 1 and dealer.sent == []
    welcome = protocol.make("WELCOME", "central-1", router="central-1", routers=[],
                            durable={"NOTIFY": ["alerting"]})
    told = []
    up.on_durable = told.append
    up._answer(link, welcome)
    assert up.active is link and told == [{"NOTIFY": ["alerting"]}]
    relay_through(stats, 1)                     # behind the one waiting: kept in order
    assert up.flush() == 2
    assert [int(body) for _, body in dealer.sent] == [0, 1]
    relay_through(stats, 2)                     # nothing waits: sent at once
    assert int(dealer.sent[-1][1]) == 2
    dealer.up = False                           # the connection broke: buffered, in order
    for n in (3, 4):
        relay_through(stats, n)
    clock.advance(up.settings.interval * up.settings.expire_intervals + 0.1)
    up._choose(clock())                         # no answer for expire_intervals: down
    assert up.active is None and not link.welcomed and up.counts["outages"] == 1
    with pytest.raises(zmq.Again):
        notify(protocol.SIGNATURE, 2)
    dealer.up = True
    up._answer(link, welcome)
    assert up.flush() == 2
    assert [int(body) for _, body in dealer.sent] == [0, 1, 2, 3, 4]
    metrics = up.metrics()
    assert metrics["router.site.up"] == 1 and metrics["router.site.delivered"] == 4


def test_uplink_says_hello_again_after_a_401_and_passes_answers_for_agents_down():
    clock, dealer = Clock(100.0), FakeDealer()
    up, link = uplink_with(dealer, clock)
    down = []
    up.down = lambda target, type_frame, body: down.append((target, type_frame))
    up._answer(link, protocol.make("WELCOME", "c", router="c", routers=[]))
    up._answer(link, protocol.error(protocol.HELLO_REQUIRED, "send HELLO", None, "c"))
    assert not link.welcomed and up.active is None
    assert dealer.sent[-1][0] == b"HELLO/site-1/site-1"
    hello = protocol.decode_body("HELLO", dealer.sent[-1][1])
    assert (hello.get("role"), hello.get("hostname")) == ("site", "site-1")

    class Socket:
        def __init__(self, messages):
            self.messages = messages

        def recv_multipart(self, flags=0):
            import zmq
            if not self.messages:
                raise zmq.Again()
            return self.messages.pop(0)

    ack = protocol.make("ACK", "c", msg_ids=["m"])
    sock = Socket([protocol.encode_down(ack, "agent-1"), [b"garbage"],
                   protocol.encode_down(protocol.make("RUN", "c", command_id="x",
                                                      plugin="p"), "agent-2")])
    up.by_socket[sock] = link
    up.read(sock)
    assert down == [("agent-1", b"ACK"), ("agent-2", b"RUN")]
    assert up.counts["bad"] == 1


def test_a_spool_dir_that_cannot_be_written_stops_the_router_in_one_line(tmp_path, capsys):
    from fleetwatch import cli
    from router.sitebuffer import SpoolError
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SpoolError) as e:
        SiteBuffer(10, str(blocker / "spool"), 1000)
    assert str(blocker) in str(e.value) and "\n" not in str(e.value)
    path = tmp_path / "router.yaml"
    local = "tcp://127.0.0.1:*"
    path.write_text(
        f"bind: {{agents: '{local}', control: '{local}', tail: '{local}', sinks: {{}}}}\n"
        f"upstream: ['tcp://127.0.0.1:1']\nsite: {{spool_dir: '{blocker / 'spool'}'}}\n")
    assert cli.main(["router", "--config", str(path)]) == os.EX_CONFIG
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fleetwatch router: site.spool_dir: ")


# ---------------------------------------------------------------- the path in the lake
def test_the_history_sinks_lines_keep_the_path_of_a_message_through_sites():
    import json
    from collections import Counter

    from fleetwatch.logs import Throttle
    from sinks.history.lines import Sorter, landing_data
    sorter = Sorter(protocol.TYPES, frozenset({"NOTIFY"}), Counter(),
                    Throttle(__import__("logging").getLogger("t"), 10.0))
    stats = protocol.make("STATS", "u-1", metrics={"x": 1.0})
    notify = protocol.make("NOTIFY", "u-1", severity="error", text="t")
    kept, to_decode = sorter.sort([
        [protocol.SIGNATURE, b"STATS/u-1/central-1,site-1,site-2", protocol.encode_body(stats)],
        [protocol.SIGNATURE, b"STATS/u-1/router-1", protocol.encode_body(stats)],
        [protocol.SIGNATURE, b"NOTIFY/u-1/central-1,site-1", protocol.encode_body(notify)]])
    fresh = [protocol.decode_relayed(f) for f in to_decode]
    lines = [json.loads(x) for x in landing_data(kept, fresh, 1.0).splitlines()]
    assert [(ln["router"], ln.get("path")) for ln in lines] == [
        ("central-1", "central-1,site-1,site-2"), ("router-1", None),
        ("central-1", "central-1,site-1")]


# ---------------------------------------------------------------- HELLOs said again (4.10)
def test_site_table_keeps_a_hello_per_uuid_forgotten_when_it_moves_or_its_link_goes():
    table = SiteTable(expire_intervals=3, max_agents=10, clock=Clock(100.0))
    link = table.hello(b"r1", "site-2", "edge", 1.0)
    assert table.learn("a", link) and table.learn("b", link)
    link.hellos.update({"a": (b"HELLO/a/site-1,site-2", b"A"), "b": (b"HELLO/b/x", b"B"),
                        "site-2": (b"HELLO/site-2/site-1,site-2", b"S")})
    assert table.last_hello("a") == (b"HELLO/a/site-1,site-2", b"A")
    assert table.last_hello("site-2") == (b"HELLO/site-2/site-1,site-2", b"S")
    assert table.last_hello("nobody") is None
    other = table.hello(b"r2", "site-3", "edge3", 1.0)
    assert table.learn("a", other)                  # moved: its old HELLO is not said again
    assert table.last_hello("a") is None and "a" not in link.hellos
    table.forget(b"r1")
    assert table.last_hello("b") is None and table.last_hello("site-2") is None


def test_uplink_says_the_hellos_again_after_the_buffer_when_a_link_comes_back():
    clock, dealer = Clock(100.0), FakeDealer()
    up, link = uplink_with(dealer, clock)
    hellos = {"a": (b"HELLO/a/site-1", b"A"), "b": (b"HELLO/b/site-1,site-2", b"B")}
    up.speaks_for = lambda: ["a", "gone", "b"]
    up.hello_of = hellos.get
    welcome = protocol.make("WELCOME", "central-1", router="central-1", routers=[])
    relay_through(up.sender(b"STATS", False), 0)    # waits for the link
    up._answer(link, welcome)                       # up: the buffer, then the HELLOs
    assert up.flush() == 3
    assert dealer.sent == [[b"STATS/u-1/site-1", b"0"], [b"HELLO/a/site-1", b"A"],
                           [b"HELLO/b/site-1,site-2", b"B"]]
    up._answer(link, welcome)                       # the same link, still up: not again
    assert up.flush() == 0 and up.metrics()["router.site.resent"] == 2
    clock.advance(up.settings.interval * up.settings.expire_intervals + 0.1)
    up._choose(clock())                             # down, then up again: said again
    dealer.sent.clear()
    dealer.up = False                               # the link takes none: kept for later
    up._answer(link, welcome)
    assert up.flush() == 0 and len(up.resending) == 3
    dealer.up = True
    del hellos["a"]                                 # gone meanwhile: skipped
    assert up.flush() == 1 and dealer.sent == [[b"HELLO/b/site-1,site-2", b"B"]]
    assert up.counts["resent"] == 3 and not up.resending


def test_a_site_speaks_for_its_agents_and_those_behind_its_links_with_their_hellos():
    from types import SimpleNamespace
    from router.peers import Peers
    from router.sitelinks import SiteLinks
    peers = Peers(3.0, Clock(100.0), b"site-1")
    own, _ = peers.hello(b"rid-1", "agent-1", "h1", 1.0)
    own.hello = b"HELLO BODY"
    peers.hello(b"rid-2", "agent-2", "h2", 1.0)     # no HELLO kept: nothing to say again
    table = SiteTable(expire_intervals=3, max_agents=10, clock=Clock(100.0))
    link = table.hello(b"r1", "site-2", "edge", 1.0)
    table.learn("agent-3", link)
    link.hellos["agent-3"] = (b"HELLO/agent-3/site-1,site-2", b"B3")
    links = SiteLinks("site-1", peers, None, None, None, dict, print)
    links.sites = SimpleNamespace(table=table)
    assert links.speaks_for() == ["agent-1", "agent-2", "agent-3", "site-2"]
    assert links.hello_of("agent-1") == (b"HELLO/agent-1/site-1", b"HELLO BODY")
    assert links.hello_of("agent-2") is None and links.hello_of("site-2") is None
    assert links.hello_of("agent-3") == (b"HELLO/agent-3/site-1,site-2", b"B3")
