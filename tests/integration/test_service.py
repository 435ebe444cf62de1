"""``fleetwatch service`` and the units it writes.

Every generated unit passes ``systemd-analyze verify`` with no output at all (verify exits 0
on unknown keys, so any output fails), scores low on ``systemd-analyze security --offline``,
and installs into (and uninstalls from) a ``--root`` prefix through the real command. PID 1
is not systemd here, so the units cannot be started; the daemons' own side of the contract
(sd_notify, watchdog) is tests/integration/test_sdnotify.py, and MemoryDenyWriteExecute= is checked by
running a CURVE fleet under the kernel's equivalent (prctl PR_SET_MDWE).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from support.fleet import Proc, agent_uuid_for, wait_for
from support.keys import Keys
from fleetwatch.cli import reach, units
from fleetwatch.cli import service as svc
from fleetwatch.cli.service.install import Install
from fleetwatch.config import load

pytestmark = pytest.mark.timeout(120)

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def all_services() -> list[units.Service]:
    from sinks import SINKS
    return [units.Service("agent"), units.Service("router"), units.Service("scheduler"),
            *(units.Service("sink", t) for t in sorted(SINKS))]


SERVICES = all_services()
IDS = [s.name for s in SERVICES]
#: the exposure each unit must stay under (systemd-analyze security, 0 to 10);
#: docs/operating/systemd.md has the measured scores
MAX_EXPOSURE = {"agent": 2.0}
DEFAULT_MAX_EXPOSURE = 1.5


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "fleetwatch", "service", *args],
                         capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise AssertionError(f"fleetwatch service {' '.join(args)}: exit {res.returncode}\n"
                             f"{res.stdout}\n{res.stderr}")
    return res


def analyze(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([ANALYZE, *args], capture_output=True, text=True, timeout=60)


def write_unit(tmp_path: Path, service: units.Service, text: str | None = None) -> Path:
    path = tmp_path / service.unit
    path.write_text(text or units.render(service, units.executable()))
    return path


# ---------------------------------------------------------------- the units

@needs_analyze
@pytest.mark.parametrize("service", SERVICES, ids=IDS)
def test_every_unit_passes_verify_without_a_word(tmp_path, service):
    path = write_unit(tmp_path, service)
    res = analyze("verify", "--man=no", str(path))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", ""), path.read_text()


@needs_analyze
def test_verify_would_catch_a_typo_and_a_missing_executable(tmp_path):
    """The check above is only worth something if verify speaks up on mistakes."""
    service = units.Service("router")
    typo = units.render(service, units.executable()).replace("ProtectSystem=", "ProtectSytem=")
    res = analyze("verify", "--man=no", str(write_unit(tmp_path, service, typo)))
    assert "Unknown key 'ProtectSytem'" in res.stderr
    gone = units.render(service, str(tmp_path / "no-such-fleetwatch"))
    res = analyze("verify", "--man=no", str(write_unit(tmp_path, service, gone)))
    assert res.returncode != 0 and "no-such-fleetwatch" in res.stderr


@needs_analyze
def test_the_documented_capability_drop_in_verifies(tmp_path):
    """docs/operating/systemd.md: a drop-in giving plugins CAP_NET_RAW (check_icmp); a drop-in is read as if
    appended to the unit, so verify the two together."""
    dropin = ("\n[Service]\nAmbientCapabilities=CAP_NET_RAW\n"
              "CapabilityBoundingSet=CAP_NET_RAW\n")
    service = units.Service("agent")
    text = units.render(service, units.executable(), groups=["fleetwatch-intake"]) + dropin
    res = analyze("verify", "--man=no", str(write_unit(tmp_path, service, text)))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")


@needs_analyze
@pytest.mark.parametrize("service", SERVICES, ids=IDS)
def test_exposure_scores_are_low(tmp_path, service):
    res = analyze("security", "--offline=true", str(write_unit(tmp_path, service)))
    assert res.returncode == 0, res.stderr
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", res.stdout)
    assert found, res.stdout
    score = float(found.group(1))
    limit = MAX_EXPOSURE.get(service.process, DEFAULT_MAX_EXPOSURE)
    assert score <= limit, f"{service.unit}: exposure {score} above {limit}\n{res.stdout}"


def test_unit_contents():
    exe = "/opt/fleetwatch/venv/bin/fleetwatch"
    router = units.render(units.Service("router"), exe)
    assert "ExecStart=/opt/fleetwatch/venv/bin/fleetwatch router --config " \
           "/etc/fleetwatch/router.yaml\n" in router
    for line in ("Type=notify", "NotifyAccess=main", "WatchdogSec=30s", "Restart=on-failure",
                 "RestartPreventExitStatus=78", "User=fleetwatch", "ProtectSystem=strict",
                 "NoNewPrivileges=yes", "MemoryDenyWriteExecute=yes", "PrivateTmp=yes",
                 "ExecReload=/bin/kill -HUP $MAINPID", "RuntimeDirectory=fleetwatch/router",
                 "SystemCallFilter=@system-service", "WantedBy=multi-user.target"):
        assert f"\n{line}\n" in router, line
    assert "StateDirectory=" not in router and "DynamicUser" not in router
    # libzmq's I/O thread calls sched_setscheduler and aborts when refused: every @resources
    # call but that one is refused (tests/integration/test_systemd.py runs the units under systemd)
    refused = re.search(r"^SystemCallFilter=~(ioprio_set .*)$", router, re.M).group(1).split()
    assert "sched_setscheduler" not in refused and "setrlimit" in refused
    assert not re.search(r"^SystemCallFilter=.*@resources", router, re.M)
    sink = units.render(units.Service("sink", "alerting"), exe, "/srv/fw/my sink.yaml", "fw")
    assert 'ExecStart=/opt/fleetwatch/venv/bin/fleetwatch sink alerting --config ' \
           '"/srv/fw/my sink.yaml"\n' in sink
    assert "\nUser=fw\nGroup=fw\n" in sink and "\nStateDirectory=fleetwatch\n" in sink
    # every process reloads on SIGHUP now (fleetwatch/reload.py; the router: its allowlists)
    assert "\nExecReload=/bin/kill -HUP $MAINPID\n" in sink
    for process in ("agent", "scheduler"):
        assert "\nExecReload=/bin/kill -HUP $MAINPID\n" in units.render(units.Service(process), exe)
    agent = units.render(units.Service("agent"), exe, groups=["monitoring"])
    assert "\nSupplementaryGroups=monitoring\n" in agent
    assert "\nStateDirectory=fleetwatch/agent\n" in agent
    assert "AF_NETLINK" in agent and "ProcSubset" not in agent and "PrivateUsers" not in agent
    assert "ProtectHome=read-only" in agent
    assert "%%" in units.render(units.Service("router"), exe, "/etc/fw/100%.yaml")


# ---------------------------------------------------------------- default configs

@pytest.mark.parametrize("service", SERVICES, ids=IDS)
def test_default_config_loads_and_its_commented_settings_are_the_defaults(tmp_path, service):
    text = units.default_config(service, hostname="web-1.example.com")
    path = tmp_path / "default.yaml"
    path.write_text(text)
    cls = service.config_class()
    loaded = load(cls, str(path))
    values = units.default_values(service, hostname="web-1.example.com")
    assert loaded == cls(**values)
    # uncomment every setting (lines `#key: value`, `#- item`, `#  nested: value`): the
    # same config, so every commented value is valid and is the default
    uncommented = "\n".join(re.sub(r"^#(?=\S|  )", "", line) for line in text.splitlines())
    assert uncommented != text
    path.write_text(uncommented)
    assert load(cls, str(path)) == loaded


def test_default_configs_set_what_each_process_needs():
    assert units.default_values(units.Service("router"), hostname="r1.example.com") == \
        {"id": "r1"}
    assert units.default_values(units.Service("router"), hostname="bad host") == \
        {"id": "router-1"}
    assert units.default_values(units.Service("agent"), ["tcp://a:5555", "tcp://b:5555"]) == \
        {"routers": ["tcp://a:5555", "tcp://b:5555"]}
    assert units.default_values(units.Service("sink", "registry")) == \
        {"type": "registry", "routers": ["tcp://127.0.0.1:5556"]}
    text = units.default_config(units.Service("sink", "registry"))
    assert "\n#graphite:" not in text and "\n#alerting:" not in text   # other types' sections
    assert "\n#graphite:" in units.default_config(units.Service("sink", "graphite"))


# ---------------------------------------------------------------- install / uninstall

def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


@pytest.mark.parametrize("service", SERVICES, ids=IDS)
def test_install_and_uninstall_in_a_prefix(tmp_path, service):
    root = tmp_path / "root"
    kind = [service.process, service.sink_type] if service.sink_type else [service.process]
    routers = [] if service.process == "router" else ["--router", "tcp://r9:5556"]
    res = cli("install", *kind, "--root", str(root), *routers)
    unit = root / "etc/systemd/system" / service.unit
    config = root / "etc/fleetwatch" / f"{service.name}.yaml"
    assert f"wrote {unit}" in res.stdout and f"wrote {config}" in res.stdout
    assert "user fleetwatch: not created (--root)" in res.stdout
    assert files(root) == {f"etc/systemd/system/{service.unit}", f"etc/fleetwatch/{service.name}.yaml"}
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    assert unit.read_text() == units.render(service, units.executable())
    loaded = load(service.config_class(), str(config))
    if service.process != "router":
        assert loaded.routers == ["tcp://r9:5556"]
    if service.state_directory:
        assert (root / "var/lib" / service.state_directory).is_dir()

    again = cli("install", *kind, "--root", str(root))
    assert again.stdout.splitlines()[-1] == "nothing changed"
    assert f"kept {config} (exists)" in again.stdout

    if shutil.which("systemctl"):
        enabled = cli("install", *kind, "--root", str(root), "--enable")
        link = root / "etc/systemd/system/multi-user.target.wants" / service.unit
        assert os.readlink(link) == f"/etc/systemd/system/{service.unit}"
        assert f"enabled {service.unit}" in enabled.stdout
        assert cli("install", *kind, "--root", str(root), "--enable").stdout \
            .splitlines()[-1] == "nothing changed"

    gone = cli("uninstall", *kind, "--root", str(root))
    assert f"removed {unit}" in gone.stdout
    assert files(root) == {f"etc/fleetwatch/{service.name}.yaml"}   # config and state kept
    assert cli("uninstall", *kind, "--root", str(root)).stdout.splitlines()[-1] == \
        "nothing changed"
    purged = cli("uninstall", *kind, "--root", str(root), "--purge")
    assert f"removed {config}" in purged.stdout
    assert not (root / "etc/fleetwatch").exists() and not (root / "var/lib/fleetwatch").exists()


def test_install_keeps_a_config_and_gives_the_agent_its_intake_group(tmp_path):
    root = tmp_path / "root"
    config = root / "srv/fw/agent.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("routers: [tcp://r1:5555]\nintake_group: monitoring\n")
    res = cli("install", "agent", "--root", str(root), "--config", "/srv/fw/agent.yaml")
    assert f"kept {config} (exists)" in res.stdout
    assert config.read_text() == "routers: [tcp://r1:5555]\nintake_group: monitoring\n"
    unit = (root / "etc/systemd/system/fleetwatch-agent.service").read_text()
    assert "--config /srv/fw/agent.yaml\n" in unit
    assert "\nSupplementaryGroups=monitoring\n" in unit
    # uninstall --purge finds the config through the unit's ExecStart=
    cli("uninstall", "agent", "--root", str(root), "--purge")
    assert not config.exists()


def test_a_broken_existing_config_is_reported_not_replaced(tmp_path):
    root = tmp_path / "root"
    config = root / "etc/fleetwatch/router.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("idd: r1\n")
    res = cli("install", "router", "--root", str(root))
    assert "warning:" in res.stderr and "idd: unknown setting" in res.stderr
    assert config.read_text() == "idd: r1\n"
    assert (root / "etc/systemd/system/fleetwatch-router.service").exists()


def test_print_writes_nothing(tmp_path):
    res = cli("install", "sink", "registry", "--print", "--root", str(tmp_path / "r"),
              "--executable", "/opt/fw/bin/fleetwatch", "--user", "fw")
    assert res.stdout == units.render(units.Service("sink", "registry"),
                                      "/opt/fw/bin/fleetwatch", user="fw")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, message", [
    (["install", "sink"], "sink needs a TYPE"),
    (["install", "sink", "nosuch"], "unknown sink type 'nosuch'"),
    (["install", "router", "extra"], "router takes no TYPE"),
    (["uninstall", "agent", "--config", "agent.yaml"], "expected an absolute path"),
])
def test_usage_errors(tmp_path, args, message):
    res = cli(*args, "--root", str(tmp_path), check=False)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("fleetwatch service: ") and message in res.stderr
    assert len(res.stderr.splitlines()) == 1


class FakeSystem(svc.System):
    def __init__(self, euid=0, users=()):
        self._euid, self.users, self.ran = euid, set(users), []

    def euid(self):
        return self._euid

    def user_exists(self, name):
        return name in self.users

    def run(self, argv):
        self.ran.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")


def args(**kw):
    base = dict(action="install", process="agent", type=None, config=None, root=None,
                user="fleetwatch", router=[], executable=None, enable=False, print=False,
                purge=False)
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_not_root_without_root_prefix_is_a_clear_error(action, capsys):
    system = FakeSystem(euid=1000)
    assert svc.run(args(action=action), system) == os.EX_NOPERM
    err = capsys.readouterr().err
    assert err.startswith(f"fleetwatch service: {action}ing a system service needs root")
    assert "--root DIR" in err and system.ran == []


def test_the_service_user_is_created_once_as_a_system_user():
    out = io.StringIO()
    system = FakeSystem()
    task = Install(units.Service("agent"), args(), system, out)
    task.ensure_user("fleetwatch")
    assert system.ran == [["useradd", "--system", "--user-group", "--home-dir",
                           "/var/lib/fleetwatch", "--no-create-home", "--shell",
                           "/usr/sbin/nologin", "--comment", "fleetwatch monitoring",
                           "fleetwatch"]]
    system.users.add("fleetwatch")
    task.ensure_user("fleetwatch")
    assert len(system.ran) == 1
    assert out.getvalue().splitlines() == ["created system user fleetwatch",
                                           "user fleetwatch exists"]


# ---------------------------------------------------------------- what the unit can execute

def me() -> reach.User:
    """The running user: permission bits are checked against it (no root needed)."""
    return reach.User("me", os.getuid(), frozenset([os.getgid(), *os.getgroups()]))


def script(path: Path, interpreter: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{interpreter}\nprint('hi')\n")
    path.chmod(mode)
    return path


def test_reach_follows_links_and_interpreters(tmp_path):
    """A virtualenv's script names bin/python, a link to the interpreter it was made from:
    every step must be outside what the unit hides and open to the service user."""
    home = tmp_path / "home"
    real = script(home / "py/bin/python3.11", "/bin/sh")      # stands for an interpreter
    venv = tmp_path / "opt/venv/bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(real)
    exe = script(venv / "fleetwatch", str(venv / "python"))
    assert reach.problem(str(exe), me(), ()) is None
    hidden = (f"{home}/",)
    assert reach.problem(str(exe), me(), hidden) == (
        f"the interpreter of {exe}, {real} (through {venv}/python), is under {home}/, "
        f"which the unit hides")
    (home / "py").chmod(0o055)     # its owner may not enter it
    try:
        found = reach.problem(str(exe), me(), ())
    finally:
        (home / "py").chmod(0o755)
    assert found == (f"the interpreter of {exe}, {real}: {home}/py is not searchable by "
                     f"user me (mode 0055, owner {os.getuid()}:{os.getgid()})")


@pytest.mark.parametrize("mode, word", [(0o644, "executable"), (0o311, "readable")])
def test_reach_wants_a_script_executable_and_readable(tmp_path, mode, word):
    exe = script(tmp_path / "fleetwatch", "/usr/bin/python3", mode)
    assert reach.problem(str(exe), me(), ()) == \
        f"the command, {exe} is not {word} by user me (mode {mode:04o}, " \
        f"owner {os.getuid()}:{os.getgid()})"


def test_reach_as_a_user_not_created_yet(tmp_path):
    """A new system user owns nothing and has its own group: "other" bits decide."""
    assert reach.problem("/usr/bin/python3", reach.User("new"), ()) is None
    exe = script(tmp_path / "fleetwatch", "/usr/bin/env python3")
    if stat.S_IMODE(tmp_path.stat().st_mode) & 0o001 == 0:    # pytest's are 0700
        assert " is not searchable by user new (mode 0" in \
            reach.problem(str(exe), reach.User("new"), ())
    assert reach.problem(str(exe), me(), ()) is None     # env's python3 found on the PATH
    assert reach.problem(str(tmp_path / "none"), me(), ()) == \
        f"the command, {tmp_path}/none: No such file or directory"


class NoChange(FakeSystem):
    def ids(self, name):
        raise AssertionError("the install went on after the check")


@pytest.mark.parametrize("process", ["router", "agent"])
def test_install_refuses_a_command_the_unit_could_not_execute(tmp_path, process, capsys):
    """PrivateTmp= hides /tmp from every unit: a fleetwatch there is refused with one line
    and exit 78, before the user, the config or the unit are touched."""
    exe = script(tmp_path / "venv/bin/fleetwatch", "/usr/bin/python3")
    prefix = next((p for p in units.hidden_paths(units.Service(process))
                   if str(exe).startswith(p)), None)
    if prefix is None:
        pytest.skip(f"{tmp_path} is not under a directory the units hide")
    system = NoChange()
    status = svc.run(args(process=process, executable=str(exe)), system)
    err = capsys.readouterr().err
    assert status == 78 and system.ran == []
    assert err == (f"fleetwatch service: fleetwatch-{process}.service could not start as user "
                   f"fleetwatch: the command, {exe}, is under {prefix}, which the unit hides; "
                   f"install fleetwatch in a virtualenv made from the system's Python outside "
                   f"/root, /home and /tmp (e.g. /usr/bin/python3 -m venv "
                   f"/opt/fleetwatch/venv)\n")


# ---------------------------------------------------------------- MemoryDenyWriteExecute

#: set the kernel's MemoryDenyWriteExecute (inherited across exec), then run fleetwatch
MDWE = ("import ctypes, os, sys\n"
        "if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0:\n"
        "    sys.exit('PR_SET_MDWE failed')\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'fleetwatch', *sys.argv[1:]])\n")


def mdwe_available() -> bool:
    """Whether PR_SET_MDWE works here and refuses a writable and executable mapping."""
    code = ("import ctypes, mmap, sys\n"
            "if ctypes.CDLL(None).prctl(65, 1, 0, 0, 0) != 0:\n"
            "    sys.exit(3)\n"
            "try:\n"
            "    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
            "except PermissionError:\n"
            "    sys.exit(0)\n"
            "sys.exit(4)\n")
    return subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0


def test_the_fleet_runs_with_memory_deny_write_execute(fleet):
    """pyzmq, libzmq's CURVE (libsodium), psutil and SQLAlchemy under the kernel's
    PR_SET_MDWE, which refuses memory both writable and executable as the unit's
    MemoryDenyWriteExecute=yes does: a router, an agent and the registry sink over CURVE."""
    if not mdwe_available():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+)")
    pytest.importorskip("sqlalchemy")

    def start(name, *argv, env=None):
        proc = Proc(name, [sys.executable, "-c", MDWE, *argv], fleet.root / f"{name}.log", env)
        fleet.procs.append(proc)
        return proc
    fleet.start = start

    keys = Keys(fleet.root)
    uuid = agent_uuid_for(fleet)
    router = fleet.router(security=keys.router_security())
    # the sink's key is made after the router started: the router reloads its allowlist and
    # the sink dials again after its refused handshake (fleetwatch.link.Links)
    fleet.sink("registry", [router], security=keys.client(keys.backend("sink-registry")))
    fleet.agent([router], security=keys.client(keys.agent(uuid)))

    def registered():
        return fleet.db_rows("SELECT hostname FROM agents WHERE uuid = ?", (uuid,))
    assert wait_for(registered, 30, interval=0.2, what="the agent in the registry") == \
        [("agent-host",)]
    for proc in fleet.procs:
        assert proc.alive(), proc.log()
        assert "MemoryError" not in proc.log() and "PermissionError" not in proc.log()
