"""Every process of a real fleet says its fleetwatch version, and ``fleetwatch status`` shows
each one's and how many versions the fleet runs (docs/operating/upgrading.md, "Checks
between steps"): a router (its PEERS answers), the registry and alerting sinks and a
scheduler (their STATS, which the router lists), an agent (its HELLO and REGISTER, in the
registry), and an agent of the release before saying HELLO as one (0.9.0's agents say
0.1.0, the number that tree carried), so the fleet runs two.
tests/integration/test_upgrade_compat.py runs the previous release's own processes."""

from __future__ import annotations

import zmq
import pytest

from fleetwatch import __version__
from support.fleet import Fleet, wait_for
from support.routerclients import FakeAgent

pytestmark = pytest.mark.timeout(120)

#: what an agent of the release before (0.9.0, CHANGELOG.md) says its version is
OLD = "0.1.0"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A router, the registry and alerting sinks, a scheduler and an agent of this release;
    an agent of the release before (a DEALER saying HELLO with its version); and the
    operator config. Yields (fleet, operator config, the old agent's uuid)."""
    f = Fleet(tmp_path_factory.mktemp("versions"))
    ctx = zmq.Context()
    try:
        router = f.router(sink_types=("registry", "alerting"))
        for type_ in ("registry", "alerting"):
            f.sink(type_, [router], stats_interval=0.5)
        f.scheduler([router], stats_interval=0.5)
        f.agent([router])
        # once the registry sink takes what the router relays (a HELLO is relayed at most
        # once: SPEC 4.1)
        wait_for(lambda: f.db_rows("SELECT version FROM agents WHERE hostname = ?",
                                   ("agent-host",)) == [(__version__,)], 30, 0.1,
                 "the agent's version in the registry")
        old = FakeAgent(ctx, router["endpoints"]["agents"])
        old.send("HELLO", hostname="old-host", heartbeat=5.0, role="agent", version=OLD)
        wait_for(lambda: f.db_rows("SELECT version FROM agents WHERE uuid = ?", (old.uuid,))
                 == [(OLD,)], 30, 0.1, "the old agent's HELLO in the registry")
        yield f, f.operator_config([router]), old.uuid
    except BaseException:
        print(f.logs())
        raise
    finally:
        f.stop_all()
        ctx.destroy(linger=0)


def complete(f: Fleet, operator) -> dict:
    """``status --json`` once the agent is registered and the router has heard both sinks'
    and the scheduler's STATS."""
    def seen():
        got = f.status(operator)
        roles = sorted(b["role"] for b in got["backends"])
        ours = [a for a in got["agents"] if a["hostname"] == "agent-host"]
        return got if roles == ["scheduler", "sink", "sink"] and ours and ours[0]["version"] \
            else None
    return wait_for(seen, 30, 0.2, "the agent in the registry and three back-ends' STATS")


def test_status_json_says_each_processs_version_and_the_fleets_versions(fleet):
    f, operator, old = fleet
    got = complete(f, operator)
    by_host = {a["hostname"]: a for a in got["agents"]}
    assert by_host["agent-host"]["version"] == __version__
    assert by_host["old-host"]["version"] == OLD and by_host["old-host"]["uuid"] == old
    assert [r["version"] for r in got["routers"]] == [__version__]
    assert [(b["role"], b["version"], b["router"]) for b in got["backends"]] == \
        [("scheduler", __version__, "router-1")] + [("sink", __version__, "router-1")] * 2
    # the agents, the router, the two sinks and the scheduler: newest first
    assert got["versions"] == {__version__: 5, OLD: 1}
    assert list(got["versions"]) == [__version__, OLD]


def test_status_shows_a_version_column_and_a_line_for_two_versions(fleet):
    f, operator, _ = fleet
    complete(f, operator)
    out = f.command("status", "--config", str(operator)).stdout
    heads = [line.split() for line in out.splitlines() if line.startswith(("HOSTNAME",
                                                                          "ENDPOINT",
                                                                          "PROCESS"))]
    assert all("VERSION" in h for h in heads) and len(heads) == 3
    assert f"2 versions: {__version__} (5), {OLD} (1)" in out.splitlines()


def test_each_process_logs_its_version_at_start_and_each_command_prints_it(fleet):
    f, _, _ = fleet
    said = f"fleetwatch {__version__}"
    for proc in f.procs:
        assert said in proc.log(), proc.name
    for command in ("agent", "sink", "state", "silence"):
        res = f.cli(command, "--version")
        assert (res.returncode, res.stdout) == (0, f"{said}\n"), command
