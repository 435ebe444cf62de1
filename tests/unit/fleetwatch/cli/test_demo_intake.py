"""A demo in a deep directory gives its agents intakes they can bind: a Unix socket's path is
at most 107 bytes, and ipc://STATE_DIR/intake.sock under a deep --dir (a test's temporary
directory, a home directory's project) is longer (fleetwatch/cli/demo/plan.py)."""

from __future__ import annotations

import os
from pathlib import Path

from agent.config import AgentConfig
from fleetwatch.cli.demo.plan import intake_of
from fleetwatch.config import build, socket_path_fits


def test_a_shallow_demo_keeps_the_default_intake(tmp_path):
    root = Path("/tmp/d")
    assert intake_of(root, "agent", root / "agent-state") == {}


def test_a_deep_demo_puts_each_intake_under_a_short_directory_of_its_own(tmp_path):
    root = tmp_path / ("deep-" * 12) / "demo"
    state = root / "agent-site-1-state"
    assert not socket_path_fits(str(state / "intake.sock"))
    first, second = intake_of(root, "agent", root / "agent-state"), \
        intake_of(root, "agent-site-1", state)
    assert first["intake"] != second["intake"]          # one socket each
    assert intake_of(root, "agent", root / "agent-state") == first    # the same each run
    for found in (first, second):
        path = found["intake"].removeprefix("ipc://")
        assert socket_path_fits(path) and path.startswith("/tmp/fleetwatch-demo-")
        assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
        cfg = build(AgentConfig, {"routers": ["tcp://127.0.0.1:1"], "state_dir": str(state),
                                  **found})
        assert cfg.intake_endpoint == found["intake"]


def test_a_short_directory_someone_else_could_use_is_not_used(tmp_path):
    """/tmp is shared: a directory of the demo's name that is not the user's alone (here:
    open to all) is left alone, and one made for the demo is used instead."""
    root = tmp_path / ("deeper-" * 12) / "demo"
    first = intake_of(root, "agent", root / "agent-state")["intake"].removeprefix("ipc://")
    shared = os.path.dirname(first)
    os.chmod(shared, 0o777)
    try:
        again = intake_of(root, "agent", root / "agent-state")["intake"].removeprefix("ipc://")
        assert os.path.dirname(again) != shared
        assert os.stat(os.path.dirname(again)).st_mode & 0o777 == 0o700
    finally:
        os.chmod(shared, 0o700)
