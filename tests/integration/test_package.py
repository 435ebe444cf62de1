"""``make dist``'s steps (packaging/dist.py, then lintian) and the agent's Debian package
installed for real.

The sdist and the wheel are built twice from this tree: the same bytes each time. The
package is built once, as ``make dist`` builds it (the agent's wheelhouse from pip's
configured index or its cache, the snmp and otlp extras; ``nspawn.agent_deb``: the build
test_ansible_systemd's role installs too), linted (no error, no warning), and
repacked at a higher version (the upgrade: the same tree); both are installed into one
booted container (this machine's root, tests/support/nspawn.py): the unit starts and its
agent reaches a router and an alerting sink the test runs inside (this checkout's own,
started by ``systemd-run``); the upgrade keeps the edited agent.yaml, the uuid and the
spool, restarts the agent and loses no spooled NOTIFY; remove stops it, purge removes its
config and state. What is checked is what an administrator reads: dpkg-query, systemctl,
files, the alerting sink's ``notifications`` table.

The package tests are skipped where nspawn cannot run (not root...) or debhelper is
missing; the Python files' test runs everywhere.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import fleetwatch
import support.nspawn as nspawn
from support.fleet import wait_for

pytestmark = [pytest.mark.systemd, pytest.mark.timeout(400)]

REPO = Path(__file__).resolve().parents[2]
DIST = REPO / "packaging/dist.py"
DOC = REPO / "docs/operating/packages.md"
OVERRIDES = REPO / "packaging/deb/fleetwatch-agent.lintian-overrides"
FINAL = "/opt/fleetwatch-agent"
UNIT = "fleetwatch-agent.service"
CONFIG = "/etc/fleetwatch/agent.yaml"
STATE = "/var/lib/fleetwatch/agent"
#: inside the container: the test's router and alerting sink (its private network)
TEST_DIR = "/var/lib/fwtest"
AGENTS, CONTROL = "tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"


def upgrade_version(version: str) -> str:
    """1.0.0 -> 1.0.1~test: above this version, below a real 1.0.1."""
    major, minor, patch = (int(re.match(r"\d+", p).group()) for p in version.split(".")[:3])
    return f"{major}.{minor}.{patch + 1}~test"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def why_no_deb() -> str | None:
    reason = nspawn.why_not()
    if reason is None and (shutil.which("dh") is None or shutil.which("lintian") is None):
        reason = "debhelper or lintian not installed (make system-packages)"
    return reason


def dist(out: Path, *args: str) -> list[Path]:
    """packaging/dist.py as make dist runs it; the paths it printed."""
    res = subprocess.run([sys.executable, str(DIST), "--out", str(out), *args],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    return [Path(line) for line in res.stdout.split()]


def repack(deb: Path, version: str, out: Path) -> Path:
    """``deb`` at another version: the upgrade's package (the same tree, as ``make dist
    DEB_VERSION=...`` would build it, without a second build; gzip, the quicker)."""
    tree = out / "tree"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True, timeout=120)
    control = tree / "DEBIAN/control"
    control.write_text(re.sub(r"^Version: .*$", f"Version: {version}", control.read_text(),
                              flags=re.M))
    arch = re.search(r"^Architecture: (\S+)", control.read_text(), re.M).group(1)
    target = out / f"fleetwatch-agent_{version}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(tree),
                    str(target)], check=True, timeout=300, capture_output=True)
    shutil.rmtree(tree)
    return target


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``make dist``'s steps, as it runs them (the agent's wheelhouse fetched by pip from
    the configured index or its cache, the extras the package carries), and the sdist and
    the wheel once more: (the first build's paths, the second's), and why there is no
    package (None when there is one)."""
    root = tmp_path_factory.mktemp("dist")
    reason = why_no_deb()
    # the sdist and wheel of the second first, so that the two builds come a second apart
    # (a commit between them dates the files otherwise: SOURCE_DATE_EPOCH)
    second = dist(root / "out2", "--no-deb")
    # the first is the build test_ansible_systemd installs from too, made once for both
    first = dist(root / "out1", "--no-deb") if reason else list(nspawn.agent_deb())
    return (first, second), reason


@pytest.fixture(scope="module")
def debs(built, tmp_path_factory):
    """The package, and the same at :func:`upgrade_version` (the upgrade)."""
    (first, _), reason = built
    if reason:
        pytest.skip(reason)
    return first[2], repack(first[2], upgrade_version(fleetwatch.__version__),
                            tmp_path_factory.mktemp("upgrade"))


def test_the_same_tree_gives_the_same_sdist_and_wheel(built):
    (sdist, wheel, *_), (sdist2, wheel2) = built[0]
    version = fleetwatch.__version__
    assert (sdist.name, wheel.name) == (f"fleetwatch-{version}.tar.gz",
                                        f"fleetwatch-{version}-py3-none-any.whl")
    assert (sha256(sdist), sha256(wheel)) == (sha256(sdist2), sha256(wheel2))


def test_the_package_is_named_for_its_version_and_lintian_finds_nothing_to_say(debs):
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert debs[0].name == f"fleetwatch-agent_{fleetwatch.__version__}_{arch}.deb"
    res = subprocess.run(["lintian", "--fail-on", "error,warning", str(debs[0])],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    # every tag the package overrides is in the doc's table, with why (and only those)
    overridden = {line.split()[1] for line in OVERRIDES.read_text().splitlines()
                  if line.startswith("fleetwatch-agent:")}
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", DOC.read_text(), re.M))
    assert overridden == documented


# ---------------------------------------------------------------- in the container

@pytest.fixture(scope="module")
def box(debs, tmp_path_factory):
    """One booted container for the rest, showing this checkout, its venv and the
    packages (under /tmp they are hidden by its own /tmp otherwise)."""
    container = nspawn.booted(tmp_path_factory.mktemp("nspawn") / "nspawn.log",
                              shared=(REPO, Path(sys.executable).parent.parent,
                                      debs[0].parent, debs[1].parent))
    try:
        # this machine's root is a Docker image's: its policy-rc.d forbids maintainer
        # scripts to start or stop services, which a Debian machine allows (the overlay
        # is the container's own)
        container.sh(f"rm -f /usr/sbin/policy-rc.d; mkdir -p {TEST_DIR}", check=True)
        yield container
    finally:
        container.close()


def serve(box, name: str, argv: list[str], config: dict) -> None:
    """One of the test's processes (this checkout's) as a transient unit inside."""
    path = f"{TEST_DIR}/{name}.yaml"
    box.sh(f"cat > {path} <<'EOF'\n{yaml.safe_dump(config)}EOF\n", check=True)
    box.sh(f"systemd-run --unit fwtest-{name} --collect {shlex.quote(sys.executable)} "
           f"-m fleetwatch {' '.join(argv)} --config {path}", check=True)


def start_router(box) -> None:
    serve(box, "router", ["router"], {"id": "pkg-router", "bind": {
        "agents": AGENTS, "control": CONTROL, "tail": "tcp://127.0.0.1:5557",
        "sinks": {"alerting": "tcp://127.0.0.1:5561"}}})


def notifications(box) -> list[str]:
    """The msg_id of every row of the sink's ``notifications`` table (none before it)."""
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "print('\\n'.join(r[0] for r in c.execute('SELECT msg_id FROM notifications')))")
    res = box.sh(f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} {TEST_DIR}/state.db")
    return res.stdout.split() if res.returncode == 0 else []


def send(box, text: str) -> str:
    """``fleetwatch send notify`` through the package's agent: its msg_id, once spooled."""
    res = box.sh(f"{FINAL}/bin/fleetwatch send notify --severity warning {shlex.quote(text)}",
                 check=True)
    return res.stdout.split()[-1]


def dpkg_version(box) -> str:
    res = box.sh("dpkg-query -W -f '${Status} ${Version}' fleetwatch-agent")
    return res.stdout


@pytest.fixture(scope="module")
def installed(box, debs):
    """The first package installed, its config edited as an administrator would."""
    res = box.sh(f"dpkg -i {debs[0]}", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert box.show(UNIT, "ActiveState")["ActiveState"] == "active", "dpkg started it"
    edit = {"hostname": "pkg-host", "heartbeat_interval": 1.0, "reconnect_min": 0.1,
            "reconnect_max": 1.0, "spool": {"ack_timeout": 0.5, "max_backoff": 1.0}}
    box.sh(f"cat >> {CONFIG} <<'EOF'\n{yaml.safe_dump(edit)}EOF\n"
           f"systemctl restart {UNIT}", check=True)
    start_router(box)
    serve(box, "sink", ["sink", "alerting"], {
        "routers": [CONTROL], "state_url": f"sqlite:///{TEST_DIR}/state.db",
        "name": "pkg-sink", "hello_interval": 0.2})
    return box


def test_install_starts_the_agent_as_its_user_from_the_venv(installed):
    box = installed
    assert dpkg_version(box) == f"install ok installed {fleetwatch.__version__}"
    props = box.show(UNIT, "ActiveState", "SubState", "UnitFileState", "User",
                     "FragmentPath", "ExecStart")
    assert (props["ActiveState"], props["SubState"], props["UnitFileState"],
            props["User"]) == ("active", "running", "enabled", "fleetwatch")
    assert props["FragmentPath"] == f"/lib/systemd/system/{UNIT}"
    assert f"path={FINAL}/bin/fleetwatch " in props["ExecStart"]
    conffiles = box.sh("dpkg-query -W -f '${Conffiles}' fleetwatch-agent", check=True).stdout
    assert conffiles.split()[0] == CONFIG
    assert box.sh("id -u fleetwatch && getent passwd fleetwatch | cut -d: -f7",
                  check=True).stdout.split()[1] == "/usr/sbin/nologin"
    version = box.sh(f"{FINAL}/bin/fleetwatch --version", check=True).stdout.strip()
    assert version == f"fleetwatch {fleetwatch.__version__}"
    # the extras it carries: devices (SNMP) and the OTLP intake
    box.sh(f"{FINAL}/bin/python -c 'import pysnmp, cryptography, opentelemetry.proto'",
           check=True)
    msg_id = send(box, "before the upgrade")
    wait_for(lambda: msg_id in notifications(box), 60, 0.3,
             "the installed agent's NOTIFY in the test's alerting sink")


def test_upgrade_keeps_config_uuid_and_spool_and_restarts_the_agent(installed, debs):
    box = installed
    box.sh("systemctl stop fwtest-router", check=True)
    spooled = [send(box, f"spooled {n} while no router runs") for n in range(5)]
    config = box.sh(f"cat {CONFIG}", check=True).stdout
    uuid = box.sh(f"cat {STATE}/uuid", check=True).stdout
    pid = box.show(UNIT, "MainPID")["MainPID"]
    assert set(spooled).isdisjoint(notifications(box))

    res = box.sh(f"dpkg -i {debs[1]}", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert dpkg_version(box) == \
        f"install ok installed {upgrade_version(fleetwatch.__version__)}"
    assert box.sh(f"cat {CONFIG}", check=True).stdout == config
    assert box.sh(f"ls {CONFIG}.dpkg-* 2>/dev/null").stdout == ""
    assert box.sh(f"cat {STATE}/uuid", check=True).stdout == uuid
    props = box.show(UNIT, "ActiveState", "MainPID")
    assert props["ActiveState"] == "active" and props["MainPID"] not in ("0", pid)

    start_router(box)
    wait_for(lambda: set(spooled) <= set(notifications(box)), 60, 0.3,
             "every NOTIFY spooled before the upgrade delivered after it")
    rows = notifications(box)
    assert len(rows) == len(set(rows)) == 1 + len(spooled)


def test_remove_stops_the_agent_and_purge_removes_config_and_state(installed):
    box = installed
    res = box.sh("dpkg -r fleetwatch-agent", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert box.sh(f"systemctl is-active {UNIT}").stdout.strip() in ("inactive", "unknown")
    assert box.sh(f"test -e {FINAL}").returncode == 1
    # removed, not purged: the config and the agent's identity and spool stay
    assert box.sh(f"test -f {CONFIG} && test -f {STATE}/uuid").returncode == 0
    assert dpkg_version(box).startswith("deinstall ok config-files")

    res = box.sh("dpkg -P fleetwatch-agent", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert box.sh(f"test -e {CONFIG} || test -e {STATE}").returncode == 1
    assert box.sh("id fleetwatch").returncode == 0      # the user stays (packages.md)
    assert dpkg_version(box) == ""
