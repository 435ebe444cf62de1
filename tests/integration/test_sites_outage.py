"""A site's uplink cut for 30 s (SPEC 4.10), with real processes: a central router with a
real alerting sink, a site router whose one uplink runs through a TCP proxy the test cuts,
a real agent at the site sending 1,000 NOTIFYs through its intake meanwhile, and a fake
agent streaming numbered STATS. No custody at the site: every NOTIFY is recorded once at
the centre once the uplink is back (the agent kept them: the site answered 503); the STATS
arrive in order, the newest up to the site's buffer bound, the others counted dropped
there; RUN from the centre reaches a site agent after the outage."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from fleetwatch import protocol
from support.fleet import intake_path, wait_for, wait_intake
from support.routerclients import FakeAgent, FakeControl
from support.sites import central, site
from support.tcpproxy import TcpProxy
from support.zmqio import pull

pytestmark = pytest.mark.timeout(400)

OUTAGE = 30.0
NOTIFIES = 1000
STATS_PER_SECOND = 100
BUFFER = 300            # the site's memory buffer
SPOOL_BYTES = 60_000    # and its disk spool: about 500 more STATS


class Collector(threading.Thread):
    """Reads the centre's graphite PULL: the streamer's STATS numbers, the site's metrics."""

    def __init__(self, ctx: zmq.Context, endpoint: str, streamer: str):
        super().__init__(daemon=True)
        self.sock = pull(ctx, endpoint)
        self.streamer = streamer
        self.seqs: list[int] = []
        self.site: dict = {}
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            if not self.sock.poll(100):
                continue
            r = protocol.decode_relayed(self.sock.recv_multipart())
            if r.uuid == self.streamer and r.message.type == "STATS":
                self.seqs.append(int(r.message.get("metrics")["seq"]))
            elif r.uuid == "site-1" and r.message.type == "STATS":
                self.site.update(r.message.get("metrics"))
        self.sock.close(0)


class Streamer(threading.Thread):
    """A fake agent at the site sending STATS numbered from 1, at a steady rate."""

    def __init__(self, ctx: zmq.Context, endpoint: str):
        super().__init__(daemon=True)
        self.ctx, self.endpoint = ctx, endpoint
        self.agent = FakeAgent(ctx, endpoint)
        self.uuid = self.agent.uuid
        self.sent = 0
        self.stopping = False

    def run(self) -> None:
        agent, period = self.agent, 1.0 / STATS_PER_SECOND
        agent.hello(heartbeat=1.0)
        start = time.monotonic()
        while not self.stopping:
            self.sent += 1
            agent.send("STATS", metrics={"seq": self.sent})
            while agent.sock.poll(0):               # answers: 401 -> HELLO again
                msg = protocol.decode(agent.sock.recv_multipart())
                if msg.type == "ERROR" and msg.get("status") == protocol.HELLO_REQUIRED:
                    agent.send("HELLO", hostname="streamer", heartbeat=1.0)
            time.sleep(max(0.0, start + self.sent * period - time.monotonic()))  # the rate


def notify_all(fleet, ids: list[str]) -> None:
    from agent.client import Client
    with Client(config_path=str(fleet.root / "agent.yaml"), timeout=10) as fw:
        for n in range(NOTIFIES):
            ids.append(fw.notify(f"n-{n}", severity="warning", source="outage"))


def recorded(fleet, ids: list[str]) -> int:
    rows = fleet.db_rows("SELECT msg_id FROM notifications")
    return len({r[0] for r in rows} & set(ids))


def test_uplink_cut_30s_loses_no_notify_and_buffers_stats_in_order(fleet, zctx, tmp_path):
    centre = central(fleet)
    fleet.sink("alerting", [centre])
    host, port = centre["endpoints"]["sites"].removeprefix("tcp://").rsplit(":", 1)
    proxy = TcpProxy(host, int(port))
    streamer = collector = None
    try:
        edge = site(fleet, "site-1", [proxy.endpoint], stats_interval=0.5,
                    site={"buffer_messages": BUFFER, "spool_dir": str(tmp_path / "spool"),
                          "spool_bytes": SPOOL_BYTES})
        fleet.agent([edge])
        wait_intake(intake_path(fleet))
        streamer = Streamer(zctx, edge["endpoints"]["agents"])
        collector = Collector(zctx, centre["endpoints"]["sinks"]["graphite"], streamer.uuid)
        collector.start()
        streamer.start()
        wait_for(lambda: collector.seqs and collector.site.get("router.site.up") == 1, 15,
                 what="the streamer's STATS at the centre")

        ids: list[str] = []
        sender = threading.Thread(target=notify_all, args=(fleet, ids), daemon=True)
        sender.start()
        wait_for(lambda: len(ids) >= 100, 30, what="NOTIFYs sent")
        proxy.cut()
        cut_at = time.monotonic()
        wait_for(lambda: time.monotonic() - cut_at >= OUTAGE, OUTAGE + 5, interval=0.5,
                 what="the outage's end")
        assert recorded(fleet, ids) < NOTIFIES
        before_restore = streamer.sent
        proxy.restore()

        sender.join(120)
        assert len(ids) == NOTIFIES
        wait_for(lambda: recorded(fleet, ids) == NOTIFIES, 120, interval=0.5,
                 what="every NOTIFY recorded at the centre")
        rows = fleet.db_rows("SELECT msg_id, COUNT(*) FROM notifications GROUP BY msg_id "
                             "HAVING COUNT(*) > 1")
        assert rows == []

        streamer.stopping = True
        streamer.join(5)
        last = streamer.sent
        wait_for(lambda: collector.seqs and collector.seqs[-1] == last, 30,
                 what="the streamer's last STATS at the centre")
        seqs = collector.seqs
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "STATS out of order"
        missing = last - len(seqs)
        wait_for(lambda: collector.site.get("router.site.buffer_dropped", 0) > 0
                 and collector.site.get("router.site.buffered") == 0, 15,
                 what="the site's counters after the outage")
        dropped = collector.site["router.site.buffer_dropped"]
        # the oldest of the outage are dropped and counted (the site's heartbeats and its
        # agents' STATS share the buffer); a few sent into the connection as it broke are
        # lost uncounted (SPEC 4.10)
        assert dropped > 0 and 0 < missing <= dropped + 50, (missing, dropped)
        assert collector.site["router.site.spilled"] > 0
        # the newest of the outage were kept, up to the bound
        kept = [s for s in seqs if s <= before_restore]
        assert before_restore - 20 <= kept[-1]

        control = FakeControl(zctx, centre["endpoints"]["control"])
        probe = FakeAgent(zctx, edge["endpoints"]["agents"])
        probe.hello(heartbeat=1.0)
        def run_reached():
            control.send("RUN", target=probe.uuid, command_id="after", plugin="check_disk")
            return probe.sock.poll(500) and probe.expect("RUN").get("command_id") == "after"
        wait_for(run_reached, 15, interval=0.2, what="RUN from the centre to a site agent")
    finally:
        for thread in (streamer, collector):
            if thread is not None:
                thread.stopping = True
                thread.join(5)
        proxy.close()

