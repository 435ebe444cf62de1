"""The Ansible roles (ansible/): lint, syntax, the example inventory's configs rendered by
the roles' templates, and the controller's wheel. The real deployment of site.yml, into a
booted container, is tests/integration/test_ansible_systemd.py's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetwatch import __version__
from support.ansible import ANSIBLE, changed_tasks, load_config, recap

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = ANSIBLE / "inventories" / "example" / "hosts.yml"


def _tool(name: str) -> str | None:
    """``name`` beside this Python (its virtualenv), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if os.access(beside, os.X_OK) else shutil.which(name)


PLAYBOOK = _tool("ansible-playbook")
pytestmark = pytest.mark.skipif(
    PLAYBOOK is None, reason="ansible-playbook not installed (ansible-core comes with "
                             "pip install -e '.[test]')")


def ansible_env(home: Path) -> dict:
    """Ansible's state in ``home`` (not ~/.ansible), UTF-8 locale, no colours
    (docs/development/decisions.md#ansible-core-219), this checkout's ansible.cfg whatever
    the directory's mode."""
    for sub in ("tmp", "rtmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    return {**os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
            "ANSIBLE_HOME": str(home), "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
            "ANSIBLE_REMOTE_TEMP": str(home / "rtmp"),
            "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1", "PY_COLORS": "0"}


def run(argv: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ANSIBLE, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# -------------------------------------------------------------------- fast checks

def test_syntax_check_of_the_example(tmp_path):
    res = run([PLAYBOOK, "--syntax-check", "-i", str(EXAMPLE), "site.yml"],
              ansible_env(tmp_path), timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "playbook: site.yml" in res.stdout


def test_example_inventory_has_the_fleet(tmp_path):
    res = run([_tool("ansible-inventory") or "ansible-inventory", "-i", str(EXAMPLE), "--list"],
              ansible_env(tmp_path), timeout=60)
    assert res.returncode == 0, res.stderr
    inventory = json.loads(res.stdout)

    def hosts(group: str) -> set[str]:
        entry = inventory.get(group, {})
        found = set(entry.get("hosts", []))
        for child in entry.get("children", []):
            found |= hosts(child)
        return found

    assert len(hosts("fleetwatch_routers")) == 3
    assert hosts("fleetwatch_sinks") and hosts("fleetwatch_schedulers")
    assert hosts("fleetwatch_carbon") and len(hosts("fleetwatch_agents")) >= 3
    hostvars = inventory["_meta"]["hostvars"]
    mon = hostvars[sorted(hosts("fleetwatch_sinks"))[0]]
    assert mon["fleetwatch_sink_types"] == ["registry", "alerting", "graphite"]
    assert mon["fleetwatch_curve"] is True and mon["fleetwatch_mesh"] is True
    # one site: its machines are agents that list their site router, and only it
    [site] = hosts("fleetwatch_site_routers")
    behind = hosts("site_paris")
    assert site in behind and behind < hosts("fleetwatch_agents")
    assert all(hostvars[h]["fleetwatch_agent_routers"] == [site] for h in behind)


def test_the_example_renders_a_mesh_and_a_site(tmp_path):
    """The example inventory's router.yaml and agent.yaml, rendered on the controller by the
    roles' templates with the roles' defaults (a throwaway role holding them, so that the
    inventory's group_vars win as in a real run) and loaded by fleetwatch's config classes:
    each central router joins through the other seeds, the site router links up to the
    three, the site's agents list it and the others the seeds."""
    roles = ANSIBLE / "roles"
    defaults = {}
    for role in ("fleetwatch_common", "fleetwatch_router", "fleetwatch_agent"):
        defaults.update(yaml.safe_load((roles / role / "defaults" / "main.yml").read_text()))
    render = tmp_path / "roles" / "render"
    (render / "defaults").mkdir(parents=True)
    (render / "tasks").mkdir()
    (render / "defaults" / "main.yml").write_text(yaml.safe_dump(defaults))
    out = tmp_path / "out"
    out.mkdir()
    tasks = [{"name": f"Render {kind}.yaml", "when": f"inventory_hostname in {group}",
              "delegate_to": "localhost", "ansible.builtin.copy": {
                  "content": "{{ lookup('ansible.builtin.template', '%s') }}"
                             % (roles / f"fleetwatch_{kind}" / "templates" / f"{kind}.yaml.j2"),
                  "dest": f"{out}/{{{{ inventory_hostname }}}}-{kind}.yaml", "mode": "0644"}}
             for kind, group in (("router", "groups['fleetwatch_routers'] + "
                                            "groups['fleetwatch_site_routers']"),
                                 ("agent", "groups['fleetwatch_agents']"))]
    (render / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Render the example's configs", "hosts": "all", "gather_facts": False,
        "vars": {"fleetwatch_agent_uuid": "0" * 8, "ansible_connection": "local",
                 "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        "roles": ["render"]}], sort_keys=False))
    res = run([PLAYBOOK, "-i", str(EXAMPLE), str(playbook)], ansible_env(tmp_path), timeout=120)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]

    def router(host: str):
        return load_config("router.config:RouterConfig", out / f"{host}.example.com-router.yaml")

    control = {n: f"tcp://router-{n}.example.com:5556" for n in (1, 2, 3)}
    for n in (1, 2, 3):
        cfg = router(f"router-{n}")
        assert cfg.mesh.seeds == [control[m] for m in (1, 2, 3) if m != n]
        assert cfg.peers == [] and cfg.bind.sites == "tcp://*:5570"
        assert (cfg.security.routers, cfg.security.sites) == ("/etc/fleetwatch/keys/mesh",
                                                              "/etc/fleetwatch/keys/sites")
    site = router("paris-router")
    assert site.id == "paris-router" and site.bind.sinks == {} and site.mesh.seeds == []
    assert site.upstream == [f"tcp://router-{n}.example.com:5570" for n in (1, 2, 3)]
    assert site.site.key == "/etc/fleetwatch/keys/site.key_secret"
    assert site.site.spool_dir == "/var/lib/fleetwatch/site-buffer"
    seeds = [f"tcp://router-{n}.example.com:5555" for n in (1, 2, 3)]
    for host, routers in (("web-1", seeds), ("router-2", seeds), ("mon-1", seeds),
                          ("paris-web-1", ["tcp://paris-router.example.com:5555"]),
                          ("paris-router", ["tcp://paris-router.example.com:5555"])):
        cfg = load_config("agent.config:AgentConfig", out / f"{host}.example.com-agent.yaml")
        assert cfg.routers == routers, host


@pytest.mark.timeout(300)
def test_ansible_lint_is_clean(tmp_path):
    lint = _tool("ansible-lint")
    assert lint, "ansible-lint is not installed: pip install -e '.[test]'"
    # its cache in the test's directory (not for the playbook runs: pip's cache is wanted)
    env = {**ansible_env(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    res = run([lint, "--offline", "--nocolor"], env, timeout=280)
    output = res.stdout + res.stderr
    assert res.returncode == 0, output[-6000:]
    assert re.search(r"Passed: 0 failure\(s\), 0 warning\(s\)", output), output[-6000:]


# -------------------------------------------------------------------- the controller

def test_the_controller_builds_the_wheel_once(tmp_path):
    """Without ``fleetwatch_wheel``, the common role's first step builds the wheel from this
    checkout on the controller, once (a second run finds it). (The deployment itself,
    into a booted container, is tests/integration/test_ansible_systemd.py's: it is given
    the wheel the container's wheelhouse holds.)"""
    playbook = tmp_path / "wheel.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Build the wheel", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_connection": "local",
                 "fleetwatch_source_dir": str(REPO),
                 "fleetwatch_wheel_dir": str(tmp_path / "wheels")},
        "tasks": [{"name": "The wheel", "ansible.builtin.include_role": {
            "name": "fleetwatch_common", "tasks_from": "wheel.yml"}}]}], sort_keys=False))
    env = ansible_env(tmp_path / "home")
    first = run([PLAYBOOK, "-i", "localhost,", str(playbook)], env, timeout=240)
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    assert recap(first.stdout)["localhost"]["changed"] == 1
    assert [p.name for p in (tmp_path / "wheels").iterdir()] == \
        [f"fleetwatch-{__version__}-py3-none-any.whl"]
    again = run([PLAYBOOK, "-i", "localhost,", str(playbook)], env, timeout=240)
    assert again.returncode == 0 and recap(again.stdout)["localhost"]["changed"] == 0, \
        "\n".join(changed_tasks(again.stdout))
