"""The devices' asyncio loop beside the agent's (agent/devices/loop.py): work submitted from
the agent's thread runs on the loop's; what the loop posts comes back with a byte on the wake
socket a zmq poller watches; a task's crash is counted, the loop goes on; close runs the
cleanups, cancels what is left and leaves no thread."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings

import pytest
import zmq

from agent.devices.loop import DevicesLoop

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def loop():
    devices = DevicesLoop()
    devices.start()
    yield devices
    devices.close()


def test_work_runs_on_the_loops_thread_and_posts_come_back_with_a_wake(loop):
    poller = zmq.Poller()
    poller.register(loop.wake.fileno(), zmq.POLLIN)
    assert poller.poll(0) == []

    async def work(n):
        for i in range(n):
            loop.post((threading.current_thread().name, i))
        return "done"
    assert loop.run(work(3), timeout=5) == "done"
    assert dict(poller.poll(5000))                   # readable: something came
    assert loop.taken() == [("devices-loop", 0), ("devices-loop", 1), ("devices-loop", 2)]
    assert poller.poll(0) == [] and loop.taken() == []


def test_a_crashed_task_is_counted_and_the_loop_goes_on(loop, caplog):
    async def crash():
        raise ValueError("a device's garbage")

    async def start_it():
        asyncio.get_running_loop().create_task(crash())
        await asyncio.sleep(0)

    loop.run(start_it(), timeout=5)
    gc.collect()                        # a task never awaited reports its error when freed
    assert loop.run(asyncio.sleep(0, "alive"), timeout=5) == "alive"
    loop.run(asyncio.sleep(0), timeout=5)
    assert loop.counts["loop_crashed"] == 1
    assert "a device's garbage" in caplog.text


def test_close_runs_the_cleanups_cancels_the_rest_and_leaves_no_thread():
    devices = DevicesLoop()
    devices.start()
    events = []

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    async def cleanup():
        events.append("cleanup")

    devices.submit(forever())
    devices.run(asyncio.sleep(0.01), timeout=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        devices.close(cleanup())
        gc.collect()
    assert events == ["cleanup", "cancelled"]
    assert not devices.thread.is_alive() and devices.loop.is_closed()
    devices.close()                                     # twice: nothing
    with pytest.raises(RuntimeError, match="closed"):
        devices.submit(asyncio.sleep(0))


def test_a_loop_never_started_closes_cleanly():
    devices = DevicesLoop()

    async def cleanup():
        pass
    devices.close(cleanup())
    assert devices.loop.is_closed()
