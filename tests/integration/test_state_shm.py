"""The state database's shared-memory file (``state.db-shm``) unwritable (issue 31, item 9).

SQLite maps it into every process that uses the database: made immutable under a running
sink, the sink's next write dies of SIGBUS, which no Python code can catch; it must leave
its line on stderr (the fatal signal and where it struck). Started on it, a sink refuses
with one line naming the file and why, exit 74 (EX_IOERR), instead of failing later with
"attempt to write a readonly database". Real processes: a router, a registry sink, a fake
agent whose HELLO makes the sink write.

The file is made immutable with ``chattr +i`` (root, on a file system with the attribute:
ext4 here); elsewhere it is made read-only (which stops a process that is not root) and
the running sink gets its SIGBUS from ``kill``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest
import zmq

from support.fleet import wait_for
from support.routerclients import FakeAgent

pytestmark = pytest.mark.timeout(90)


def immutable(path) -> bool:
    """``chattr +i path``; False where that cannot be done here."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", str(path)], capture_output=True,
                          timeout=10).returncode == 0


def test_an_unwritable_shm_never_kills_a_sink_silently(fleet):
    router = fleet.router(sink_types=("registry",))
    sink = fleet.sink("registry", [router])
    shm = fleet.root / "state.db-shm"
    ctx = zmq.Context()
    agent = FakeAgent(ctx, router["endpoints"]["agents"])
    try:
        def hello() -> None:        # the registry sink records each (no answer awaited)
            agent.send("HELLO", hostname="h1", heartbeat=5.0, role="agent")

        def recorded():
            hello()
            return fleet.db_rows("SELECT uuid FROM agents") and shm.exists()
        wait_for(recorded, 30, 0.5, "the sink's first write")
        locked = immutable(shm)
        try:
            if locked:      # its next write faults on the mapped page
                def written():
                    hello()
                    return not sink.alive()
                wait_for(written, 20, 0.5, "the sink's next write")
            else:
                shm.chmod(0o444)
                sink.signal(signal.SIGBUS)
            wait_for(lambda: not sink.alive(), 20, what="the sink's death")
            assert sink.popen.returncode == -signal.SIGBUS, sink.log()
            assert "Fatal Python error: Bus error" in sink.log()
            if not locked and os.geteuid() == 0:
                return      # root writes a read-only file: nothing to refuse
            again = fleet.sink("registry", [router], name="sink-registry-again")
            wait_for(lambda: not again.alive(), 30, what="the refusal")
            assert again.popen.returncode == os.EX_IOERR, again.log()
            lines = [ln for ln in again.log().splitlines() if "state.db-shm" in ln]
            assert len(lines) == 1 and "is not writable by this process" in lines[0], \
                again.log()
            assert ("immutable" if locked else "mode 0444") in lines[0]
        finally:
            if locked:
                subprocess.run(["chattr", "-i", str(shm)], timeout=10)
    finally:
        agent.sock.close()
        ctx.term()
